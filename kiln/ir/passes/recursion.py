"""Recursion inlined to a bounded depth, for backends that cannot recurse (OpenCL C).

The functions of each recursive group (those that reach themselves through calls) are
copied `max_depth` times: copy k of a function calls copy k+1 of its group's functions, so
the original (copy 1) runs at depth 1 and no copy calls itself. In the deepest copy a call
into the group is cut: it does not run and yields zero (of the call's type). `max_depth` is
therefore a promise: recursion deeper than it gives wrong results on these backends (the
interp, which recurses natively, checks it and raises). A recursive group without a depth
is a compile error naming the function.
"""

from __future__ import annotations

from collections.abc import Callable

from ...lang.errors import KernelError
from .. import nodes as ir
from ..types import VoidType
from ..visit import Transformer, walk
from .common import clone_function, clone_program


class RecursionDepthError(KernelError):
    kind = "recursion"


def bound_recursion(backend: str) -> Callable[[ir.Program], ir.Program]:
    """The pass for a backend named `backend` (for error messages)."""

    def inline_recursion(program: ir.Program) -> ir.Program:
        program = clone_program(program)
        for group in recursive_groups(program):
            _expand(program, group, _depth(program, group, backend))
        return program

    return inline_recursion


def callees(func: ir.Function) -> set[str]:
    return {n.func for n in walk(func.body) if isinstance(n, ir.Call)}


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


def _expand(program: ir.Program, group: list[str], depth: int) -> None:
    """Replace the group's functions by `depth` levels of copies, deepest first, where the
    group's last function was (so every callee still comes before its callers)."""
    taken = {f.name for f in program.functions} | {program.kernel.name}
    names: list[dict[str, str]] = [{g: g for g in group}]
    for level in range(2, depth + 1):
        names.append({})
        for g in group:
            name, n = f"{g}_depth{level}", 1
            while name in taken:
                name, n = f"{g}_depth{level}_{n}", n + 1
            taken.add(name)
            names[-1][g] = name
    copies: list[ir.Function] = []
    for level in reversed(range(depth)):
        deeper = names[level + 1] if level + 1 < depth else None
        for g in group:
            copy = clone_function(program.function(g))
            copy.name, copy.max_depth = names[level][g], None
            copy.body = _Redirect(group, deeper).transform_body(copy.body)
            copies.append(copy)
    last = max(i for i, f in enumerate(program.functions) if f.name in group)
    before = [f for f in program.functions[:last] if f.name not in group]
    program.functions = [*before, *copies, *program.functions[last + 1:]]


class _Redirect(Transformer):
    """Calls into the group go one level deeper; past the deepest level they are cut."""

    def __init__(self, group: list[str], deeper: dict[str, str] | None) -> None:
        self.group = set(group)
        self.deeper = deeper
        self.cut: set[int] = set()  # ids of cut calls of void functions

    def visit_Call(self, e: ir.Call) -> ir.Expr:  # noqa: N802 - Transformer's hook names
        if e.func not in self.group:
            return e
        if self.deeper is not None:
            e.func = self.deeper[e.func]
            return e
        if isinstance(e.type, VoidType):
            self.cut.add(id(e))
            return e
        return ir.Const(e.type, False if e.type.is_bool else 0, loc=e.loc)  # type: ignore

    def visit_ExprStmt(self, s: ir.ExprStmt) -> ir.Stmt | None:  # noqa: N802
        return None if id(s.expr) in self.cut else s
