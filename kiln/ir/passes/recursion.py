"""Recursion inlined to a bounded depth, for backends that cannot recurse (OpenCL C).

The functions of each recursive group (those that reach themselves through calls) are
copied `max_depth` times: copy k of a function calls copy k+1 of its group's functions, so
the original (copy 1) runs at depth 1 and no copy calls itself. In the deepest copy a call
into the group is cut: it does not run, yields zero (of the call's type) and reports a
`RuntimeCheck` through the kernel's status array, so that the launch's next synchronisation
raises `RecursionDepthError` naming the function, its `max_depth` and the call's line. A
recursive group without a depth is a compile error naming the function.
"""

from __future__ import annotations

from collections.abc import Callable

from ...errors import RecursionDepthError
from .. import nodes as ir
from ..types import VoidType, i32
from ..visit import Transformer, walk
from .common import clone_function, clone_program
from .status import STATUS_TYPE, Status, callees, fresh


def bound_recursion(backend: str) -> Callable[[ir.Program], ir.Program]:
    """The pass for a backend named `backend` (for error messages)."""

    def inline_recursion(program: ir.Program) -> ir.Program:
        groups = recursive_groups(program)
        if not groups:
            return program
        program = clone_program(program)
        status = Status(program)
        for group in groups:
            _expand(program, group, _depth(program, group, backend), status, backend)
        status.thread()
        return program

    return inline_recursion


def recursive_groups(program: ir.Program) -> list[list[str]]:
    """Functions that reach themselves, grouped by mutual reachability, in program order."""
    graph = {f.name: callees(f) for f in program.functions}
    reach: dict[str, set[str]] = {}
    for name in graph:
        seen, todo = set(), list(graph[name])
        while todo:
            n = todo.pop()
            if n not in seen:
                seen.add(n)
                todo += graph.get(n, ())
        reach[name] = seen
    groups: list[list[str]] = []
    grouped: set[str] = set()
    for name in graph:
        if name in reach[name] and name not in grouped:
            group = [n for n in graph if n == name or (n in reach[name] and name in reach[n])]
            groups.append(group)
            grouped.update(group)
    return groups


def _depth(program: ir.Program, group: list[str], backend: str) -> int:
    depths = [f.max_depth for f in program.functions if f.name in group and f.max_depth]
    if depths:
        return min(depths)
    first = program.function(group[0])
    call = next(n for n in walk(first.body) if isinstance(n, ir.Call) and n.func in group)
    raise RecursionDepthError(
        f"`{first.name}` is recursive and the {backend} backend cannot recurse: give it a "
        f"depth to inline it to, @kiln.func(max_depth=N)", call.loc or first.loc)


def _expand(program: ir.Program, group: list[str], depth: int, status: Status,
            backend: str) -> None:
    """Replace the group's functions by `depth` levels of copies, deepest first, where the
    group's last function was (so every callee still comes before its callers), preceded
    by the functions that report the deepest copies' cut calls."""
    taken = {f.name for f in program.functions} | {program.kernel.name}
    names: list[dict[str, str]] = [{g: g for g in group}]
    for level in range(2, depth + 1):
        names.append({g: fresh(f"{g}_depth{level}", taken) for g in group})
    copies: list[ir.Function] = []
    for level in reversed(range(depth)):
        for g in group:
            copy = clone_function(program.function(g))
            copy.name, copy.max_depth = names[level][g], None
            if level + 1 < depth:
                copy.body = _Redirect(group, names[level + 1]).transform_body(copy.body)
            else:
                cut = _Cut(group, depth, status, backend, program.kernel.name, taken)
                copy.body = cut.transform_body(copy.body)
                copies[:0] = cut.reporters
            copies.append(copy)
    last = max(i for i, f in enumerate(program.functions) if f.name in group)
    before = [f for f in program.functions[:last] if f.name not in group]
    program.functions = [*before, *copies, *program.functions[last + 1:]]


class _Redirect(Transformer):
    """Calls into the group go one level deeper."""

    def __init__(self, group: list[str], deeper: dict[str, str]) -> None:
        self.group = set(group)
        self.deeper = deeper

    def visit_Call(self, e: ir.Call) -> ir.Expr:
        if e.func in self.group:
            e.func = self.deeper[e.func]
        return e


class _Cut(Transformer):
    """Calls into the group (from its deepest copies) become calls of reporters: functions
    of the call's type that write the call's check code to the status array, return zero
    and take no other argument (the cut call's arguments are not evaluated)."""

    def __init__(self, group: list[str], depth: int, status: Status, backend: str,
                 kernel: str, taken: set[str]) -> None:
        self.group, self.depth, self.status = set(group), depth, status
        self.backend, self.kernel, self.taken = backend, kernel, taken
        self.reporters: list[ir.Function] = []

    def visit_Call(self, e: ir.Call) -> ir.Expr:
        if e.func not in self.group:
            return e
        code = self.status.add(ir.RuntimeCheck(
            RecursionDepthError,
            f"`{e.func}` recursed deeper than its max_depth={self.depth} in kernel "
            f"`{self.kernel}` on the {self.backend} backend, which inlines recursion that "
            "many levels deep: raise max_depth", e.loc))
        name = fresh(f"{e.func}_too_deep", self.taken)
        store = ir.Store(ir.Var(STATUS_TYPE, self.status.name), [ir.Const(i32, 0)],
                         ir.Const(i32, code), loc=e.loc)
        result = None if isinstance(e.type, VoidType) else \
            ir.Const(e.type, False if e.type.is_bool else 0)  # type: ignore[attr-defined]
        self.reporters.append(ir.Function(name, [], e.type, [store, ir.Return(result)], {},
                                          loc=e.loc))
        self.status.reporters.add(name)
        return ir.Call(e.type, name, [], loc=e.loc)
