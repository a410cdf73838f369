"""What one function's build knows about names: their types, and how they widen.

`Scope` holds the function's parameters, compile-time constants, locals with their types,
the views bound to names and the return type. Locals are typed by inference: an
unannotated local takes the unified type of everything assigned to it. When an assignment
needs a wider type than the one the body was built with, `widen` records it and raises
`Retry`, and the builder builds the body again (types only widen, so this ends).
Annotated locals and parameters keep their types.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import KernelTypeError, UnsupportedError
from ..ir import nodes as ir
from ..ir.types import (
    ArrayType,
    ConstexprType,
    ScalarType,
    Type,
    VectorType,
    bool_,
    void,
)
from .conversions import convert, is_value_type, literal_value
from .resolve import StaticResolver, annotation_type
from .source import ParsedFunction, parse_function
from .typing_rules import unify
from .views import View, ViewParam, view_params


class Retry(Exception):
    """A local's (or the return) type widened: build the body again."""


class Scope:
    """The names of one function being built, their types, and the build's counters."""

    def __init__(self, pyfunc: Callable[..., Any], arg_types: Sequence[Type],
                 is_kernel: bool, name: str | None) -> None:
        self.parsed: ParsedFunction = parse_function(pyfunc)
        self.resolver = StaticResolver(pyfunc)
        self.is_kernel = is_kernel
        self.name = name or pyfunc.__name__
        self.constants: dict[str, Any] = {}  # constexpr parameters and static loop variables
        self.params: list[ir.Param] = []
        self.param_views: dict[str, View] = {}  # parameters that receive views
        for a, t in zip(self.parsed.tree.args.args, arg_types):
            if isinstance(t, ConstexprType):
                self.constants[a.arg] = t.value
            elif isinstance(t, ViewParam):
                params, self.param_views[a.arg] = view_params(a.arg, t, self.loc(a))
                self.params += params
            else:
                self.params.append(ir.Param(a.arg, t))
        self.param_names = {p.name: p.type for p in self.params}
        self.local_types: dict[str, Type] = {}
        self.fixed: set[str] = set()  # annotated locals: their type never widens
        self.return_type: Type | None = None if not is_kernel else void
        returns = self.parsed.tree.returns
        self.return_fixed = returns is not None and not is_kernel
        if returns is not None and not is_kernel:
            self.return_type = annotation_type(self.resolver, returns, self.loc(returns))
            if isinstance(self.return_type, ArrayType):
                raise UnsupportedError("device functions return scalars, records or vectors, "
                                       "not arrays: write into an array argument instead",
                                       self.loc(returns))
        self.user_names = {n.id for n in ast.walk(self.parsed.tree) if isinstance(n, ast.Name)}
        self.reset()

    def reset(self) -> None:
        """Forget what one pass over the body learnt, but the types (before a rebuild)."""
        self.defined: set[str] = set(self.param_names)
        self.views: dict[str, View] = dict(self.param_views)
        self.loop_depth = 0
        self.temp_counter = 0
        self.has_tail_call = False

    def loc(self, node: ast.AST) -> ir.Loc:
        return self.parsed.loc(node)

    def temp(self, t: Type) -> str:
        while True:
            name = f"_k{self.temp_counter}"
            self.temp_counter += 1
            if name not in self.user_names and name not in self.param_names:
                break
        self.local_types[name] = t
        return name

    def type_of(self, name: str) -> Type | None:
        """The type of a parameter or local, None for other names."""
        return self.param_names.get(name) or self.local_types.get(name)

    def is_local(self, node: ast.expr) -> bool:
        root = node
        while isinstance(root, (ast.Attribute, ast.Subscript)):  # `ps[i].vel` too
            root = root.value
        return isinstance(root, ast.Name) and (root.id in self.param_names
                                               or root.id in self.local_types
                                               or root.id in self.views)

    # ------------------------------------------------------------ type widening

    def widen(self, name: str, current: ScalarType, new: ScalarType) -> ScalarType:
        """The unified type of local `name` (of type `current`) assigned a `new` value;
        `Retry` when it widened, since what was built with the narrower type is stale."""
        wider = unify(current, new)
        if wider != current:
            self.local_types[name] = wider
            raise Retry
        return wider

    def assign_name(self, name: str, value: ir.Expr, loc: ir.Loc, compound: bool) -> ir.Stmt:
        if name in self.constants:
            raise KernelTypeError(f"'{name}' is a compile-time constant and cannot be "
                                  "assigned", loc)
        if not is_value_type(value.type):
            raise UnsupportedError(f"cannot assign {value.type} to a variable: arrays cannot "
                                   "be aliased", loc)
        current = self.type_of(name)
        if isinstance(current, ArrayType):
            raise KernelTypeError(f"'{name}' is an array and cannot be reassigned", loc)
        fixed = name in self.param_names or name in self.fixed
        if current is None:
            self.local_types[name] = current = value.type
        elif not (isinstance(current, ScalarType) and isinstance(value.type, ScalarType)):
            fixed = True  # records, variants and vectors keep their first type
        elif not fixed and current != value.type:
            current = self.widen(name, current, value.type)
        converted = convert(value, current, loc, compound=compound, name=name)
        self.defined.add(name)
        return ir.Assign(name, converted, loc=loc)

    def truth(self, expr: ir.Expr, node: ast.AST) -> ir.Expr:
        """A condition as bool_: numbers compare against zero."""
        t = expr.type
        if t == bool_:
            return expr
        if isinstance(t, VectorType):
            raise KernelTypeError(f"a {t} has one value per component: test all(...) or "
                                  "any(...) of it", self.loc(node))
        if not isinstance(t, ScalarType):
            raise KernelTypeError(f"a {t} cannot be used as a condition", self.loc(node))
        value = literal_value(expr)
        if value is not None:
            return ir.Const(bool_, bool(value), loc=expr.loc)
        return ir.Compare(bool_, "!=", expr, ir.Const(t, 0, loc=expr.loc), loc=expr.loc)
