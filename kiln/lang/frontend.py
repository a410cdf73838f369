"""The frontend: a Python function's AST -> typed IR, for one argument-type signature.

A `FunctionBuilder` builds one function with parts that each own one kind of construct:
`Statements` (blocks, assignments, `if`), `Loops`, `Returns`, `Expressions`, `Calls`
(resolved through a table of what is called), `Aggregates` (records, variants, vectors)
and `Views`. They share the function's `Scope` (names, types, type widening). Locals are
typed by inference: the body is built repeatedly, widening each unannotated local to the
unified type of everything assigned to it, until the types stop changing (types only
widen, so this ends). Every error points at the user's source.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import KernelError, KernelTypeError
from ..ir import nodes as ir
from ..ir.types import ArrayType, Type, bool_, void
from .aggregates import Aggregates
from .calls import Calls
from .expressions import Expressions
from .functions import DeviceFunction
from .loops import Loops
from .returns import Returns
from .scope import Retry, Scope
from .statements import Statements
from .views import Views

MAX_NESTED_SPECIALIZATIONS = 64
MAX_REBUILDS = 64


class ProgramContext:
    """Collects the device functions one kernel calls, specialised by argument types."""

    def __init__(self, checked: bool = False) -> None:
        self.checked = checked  # views' indices and slices' bounds as `ir.CheckedIndex`
        self.functions: dict[tuple[Any, tuple[Type, ...]], ir.Function] = {}
        self.order: list[ir.Function] = []
        self.building: dict[tuple[Any, tuple[Type, ...]], FunctionBuilder] = {}
        self.names: set[str] = set()
        self.tables: dict[str, np.ndarray] = {}  # module-level arrays read (kiln.lang.tables)

    def unique_name(self, base: str, types: tuple[Type, ...]) -> str:
        name = base
        if name in self.names:
            name = base + "_" + "_".join(_type_tag(t) for t in types)
        n = 1
        while name in self.names:
            name, n = f"{base}_{n}", n + 1
        self.names.add(name)
        return name

    def specialize(self, fn: DeviceFunction, types: tuple[Type, ...],
                   caller: FunctionBuilder, loc: ir.Loc) -> tuple[str, Type]:
        """The name and return type of `fn` specialised to `types`, built on first use.

        A call of a specialisation still being built is recursion: its return type is the
        annotated one, or (calling itself) the one its returns so far have; the body is
        built again should a later return widen it."""
        key = (fn, types)
        found = self.functions.get(key)
        if found is not None:
            return found.name, found.return_type
        building = self.building.get(key)
        if building is not None:
            return _recursive_call(fn, building, caller, loc)
        if len(self.building) >= MAX_NESTED_SPECIALIZATIONS:
            raise KernelError(f"{fn.name}: device functions specialise more than "
                              f"{MAX_NESTED_SPECIALIZATIONS} levels deep (recursion over "
                              "constexpr values needs a base case in an `if` on constants)", loc)
        builder = FunctionBuilder(fn.pyfunc, types, self, is_kernel=False,
                                  name=self.unique_name(fn.name, types))
        self.building[key] = builder
        try:
            function = builder.build()
        finally:
            del self.building[key]
        function.max_depth = fn.options.max_depth  # validated by KernelOptions
        self.functions[key] = function
        self.order.append(function)
        return function.name, function.return_type


def _recursive_call(fn: DeviceFunction, building: FunctionBuilder, caller: FunctionBuilder,
                    loc: ir.Loc) -> tuple[str, Type]:
    scope = building.scope
    if not any(isinstance(n, ast.Return) and n.value is not None
               for n in ast.walk(scope.parsed.tree)):
        return scope.name, void
    if scope.return_type is None or (not scope.return_fixed and building is not caller):
        raise KernelTypeError(f"{fn.name} is called recursively before its return type "
                              f"is known: annotate it (def {fn.name}(...) -> i32:)", loc)
    return scope.name, scope.return_type


def _type_tag(t: Type) -> str:
    if isinstance(t, ArrayType):
        return f"{t.elem.name}a{t.ndim}"
    return re.sub(r"\W+", "_", repr(t)).strip("_")  # constexpr(2) -> constexpr_2


def build_program(pyfunc: Callable[..., Any], arg_types: tuple[Type, ...],
                  kernel: bool = True, checked: bool = False) -> ir.Program:
    """Typed IR for `pyfunc` specialised to `arg_types`, with the functions it calls;
    `checked` (debug=True) marks every index of a view and bound of a slice for the
    bounds checks (`ir.CheckedIndex`)."""
    ctx = ProgramContext(checked)
    main = FunctionBuilder(pyfunc, arg_types, ctx, is_kernel=kernel).build()
    return ir.Program(main, list(ctx.order), tables=ctx.tables)


class FunctionBuilder:
    """Builds one function's IR with its parts; see the module docstring."""

    def __init__(self, pyfunc: Callable[..., Any], arg_types: Sequence[Type],
                 ctx: ProgramContext, is_kernel: bool, name: str | None = None) -> None:
        self.pyfunc = pyfunc
        self.ctx = ctx
        self.scope = Scope(pyfunc, arg_types, is_kernel, name)
        self.exprs = Expressions(self)
        self.calls = Calls(self)
        self.aggregates = Aggregates(self)
        self.views = Views(self)
        self.loops = Loops(self)
        self.returns = Returns(self)
        self.stmts = Statements(self)  # last: its table names the other parts' handlers

    def build(self) -> ir.Function:
        scope = self.scope
        tree = scope.parsed.tree
        loc = scope.loc(tree)
        for _ in range(MAX_REBUILDS):
            scope.reset()
            try:
                body = self.stmts.block(_strip_docstring(tree.body))
            except Retry:
                continue
            break
        else:  # pragma: no cover - types only widen
            raise KernelError("type inference did not converge", loc)
        return_type = scope.return_type if scope.return_type is not None else void
        if scope.has_tail_call:
            body = [ir.While(ir.Const(bool_, True, loc=loc), body, loc=loc)]
        if not scope.is_kernel and return_type != void and not _always_returns(body):
            raise KernelTypeError(
                f"{scope.name} returns {return_type} on some paths but can reach its end "
                "without returning a value", scope.loc(tree.body[-1]))
        return ir.Function(scope.name, scope.params, return_type, body,
                           dict(scope.local_types), is_kernel=scope.is_kernel, loc=loc)


def _strip_docstring(body: list[ast.stmt]) -> list[ast.stmt]:
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        return body[1:]
    return body


def _always_returns(body: list[ir.Stmt]) -> bool:
    if not body:
        return False
    last = body[-1]
    if isinstance(last, ir.Return):
        return True
    if isinstance(last, ir.If):
        return _always_returns(last.then) and _always_returns(last.orelse)
    if isinstance(last, ir.While) and isinstance(last.cond, ir.Const) and last.cond.value:
        return not any(isinstance(n, ir.Break) for n in _shallow_breaks(last.body))
    return False


def _shallow_breaks(body: list[ir.Stmt]) -> list[ir.Stmt]:
    """Breaks that leave this loop (not those of nested loops)."""
    found: list[ir.Stmt] = []
    for s in body:
        if isinstance(s, ir.Break):
            found.append(s)
        elif isinstance(s, ir.If):
            found += _shallow_breaks(s.then) + _shallow_breaks(s.orelse)
    return found
