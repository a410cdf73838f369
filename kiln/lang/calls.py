"""Calls in kernels, resolved through a table keyed by what is being called.

The callee is resolved at compile time (`StaticResolver`); `callee_kind` says what it is
(a cast, a builtin, an intrinsic, a record or vector constructor, a device function, ...)
and `Calls.handlers` maps that kind to the method that builds the call. A device function
is specialised to its argument types (`ProgramContext.specialize`) and called by name.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import ArityError, ConstantError, KernelTypeError, UnsupportedError
from ..ir import nodes as ir
from ..ir.enums import MemorySpace
from ..ir.hosttypes import kiln_type_of
from ..ir.intrinsics import IntrinsicTypeError, intrinsics, typing_of
from ..ir.types import (
    SCALAR_BY_DTYPE,
    ArrayType,
    ConstexprType,
    ScalarType,
    StructType,
    Type,
    VariantType,
    VectorType,
    bool_,
    f32,
    i32,
    void,
    wrap_int,
)
from . import builtins as kb
from .conversions import cast, convert, literal_value
from .expressions import describe
from .functions import Compilable, DeviceFunction
from .part import Part
from .records import Variant
from .typing_rules import operand_type

if TYPE_CHECKING:
    from .frontend import FunctionBuilder

CallHandler = Callable[[Any, ast.Call, bool], "ir.Expr | None"]
"""Builds a call of a callee of one kind: (callee, call node, whether it is a statement)."""

BUILTIN_CALLS: dict[object, str] = {
    len: "len", range: "range", isinstance: "isinstance",
    kb.global_id: "global_index", kb.global_size: "global_index", kb.load: "wide_load",
    print: "statement", kb.native: "statement", kb.store: "statement",
    kb.shared: "array", kb.local: "array",
}
"""Python's and kiln's functions that kernels call, by identity, and their kind."""

STATEMENTS_ONLY = {
    print: "print(...) is a statement of its own; it has no value",
    kb.native: "kiln.native(...) is a statement of its own; it has no value (let the code "
               "assign a variable: {y} = ...)",
    kb.store: "kiln.store(...) is a statement of its own; it has no value",
}


def callee_kind(fn: Any) -> str:
    """What a resolved callee is: the key of its handler in `Calls.handlers`."""
    try:
        kind = BUILTIN_CALLS.get(fn)
    except TypeError:  # unhashable: not a builtin
        kind = None
    if kind is not None:
        return kind
    if isinstance(fn, ScalarType):
        return "cast"
    if isinstance(getattr(fn, "__self__", None), Variant) and fn.__name__ == "tag":
        return "variant_tag"
    record = kiln_type_of(fn)
    if isinstance(record, StructType):
        return "record"
    if isinstance(record, VariantType):
        return "variant"
    if isinstance(fn, VectorType):
        return "vector"
    if kb.intrinsic_for(fn) is not None:
        return "intrinsic"
    if isinstance(fn, DeviceFunction):
        return "device_function"
    if isinstance(fn, Compilable):
        return "kernel"
    return "unsupported"


class Calls(Part):
    """Builds calls: resolves the callee, then its kind's handler builds the IR."""

    def __init__(self, builder: FunctionBuilder) -> None:
        super().__init__(builder)
        self.handlers: dict[str, CallHandler] = {
            "cast": self.cast_call, "len": self.len_call, "range": self.range_call,
            "isinstance": self.isinstance_call, "global_index": self.global_index,
            "wide_load": self.wide_load, "statement": self.statement_only,
            "array": self.array_call, "variant_tag": self.variant_tag_call,
            "record": self.record_call, "variant": self.variant_call,
            "vector": self.vector_call, "intrinsic": self.intrinsic_call,
            "device_function": self.device_call, "kernel": self.kernel_call,
            "unsupported": self.unsupported_call,
        }

    def call(self, node: ast.Call, statement: bool) -> ir.Expr | None:
        fn = self.callee(node)
        return self.handlers[callee_kind(fn)](fn, node, statement)

    def callee(self, node: ast.Call) -> Any:
        """The Python object called (Python's and NumPy's scalar types as kiln's)."""
        loc = self.loc(node)
        if self.scope.is_local(node.func):
            raise UnsupportedError("variables cannot be called", loc)
        if not isinstance(node.func, (ast.Name, ast.Attribute)):
            self.fb.exprs.expr(node.func)  # rejects lambdas and other unsupported expressions
            raise UnsupportedError("only named functions can be called in kernels", loc)
        if any(isinstance(a, ast.Starred) for a in node.args) \
                or any(kw.arg is None for kw in node.keywords):
            raise UnsupportedError("kernels do not support *args or **kwargs in calls", loc)
        fn = self.resolver.resolve(node.func, self.loc(node.func))
        if isinstance(fn, type) and issubclass(fn, np.generic):
            return SCALAR_BY_DTYPE.get(np.dtype(fn), fn)
        if fn in (int, float, bool):
            return {int: i32, float: f32, bool: bool_}[fn]
        return fn

    def positional(self, node: ast.Call, count: int | tuple[int, int],
                   what: str) -> list[ir.Expr]:
        lo, hi = (count, count) if isinstance(count, int) else count
        if node.keywords:
            raise UnsupportedError(f"{what} takes no keyword arguments", self.loc(node))
        if not lo <= len(node.args) <= hi:
            expected = str(lo) if lo == hi else f"{lo} to {hi}"
            raise ArityError(f"{what} takes {expected} argument(s), got {len(node.args)}",
                             self.loc(node))
        return [self.fb.exprs.expr(a) for a in node.args]

    # ------------------------------------------------------------ casts and builtins

    def cast_call(self, t: ScalarType, node: ast.Call, statement: bool) -> ir.Expr:
        (arg,) = self.positional(node, 1, t.name)
        if not isinstance(arg.type, ScalarType):
            raise KernelTypeError(f"cannot convert a {arg.type} to {t}", self.loc(node))
        if t == bool_:
            return self.scope.truth(arg, node)
        value = literal_value(arg)
        if value is not None:
            if t.is_float:
                return ir.Const(t, float(value), loc=self.loc(node))
            if not math.isfinite(value):
                raise ConstantError(f"{value} has no {t} value", self.loc(node))
            return ir.Const(t, wrap_int(math.trunc(value), t), loc=self.loc(node))
        return cast(arg, t, loc=self.loc(node))

    def len_call(self, fn: Any, node: ast.Call, statement: bool) -> ir.Expr:
        if len(node.args) == 1 and self.fb.views.names_view(node.args[0]):
            return self.fb.views.view_length(node.args[0], 0, node)
        args = self.positional(node, 1, "len")
        if not isinstance(args[0].type, ArrayType) or not isinstance(args[0], ir.Var):
            raise KernelTypeError(f"len() needs an array, got {args[0].type}", self.loc(node))
        return ir.ArrayDim(i32, args[0], 0, loc=self.loc(node))

    def range_call(self, fn: Any, node: ast.Call, statement: bool) -> ir.Expr:
        raise UnsupportedError("range() can only be used in a for loop", self.loc(node))

    def statement_only(self, fn: Any, node: ast.Call, statement: bool) -> ir.Expr:
        raise UnsupportedError(STATEMENTS_ONLY[fn], self.loc(node))

    def array_call(self, fn: kb.KernelOnly, node: ast.Call, statement: bool) -> ir.Expr:
        raise UnsupportedError(f"kiln.{fn.name}(...) must be assigned to a name: "
                               f"s = kiln.{fn.name}(f32, 256)", self.loc(node))

    def kernel_call(self, fn: Compilable, node: ast.Call, statement: bool) -> ir.Expr:
        raise UnsupportedError(f"kernel {fn.name} cannot be called from a kernel; make "
                               "it a @kiln.func", self.loc(node))

    def unsupported_call(self, fn: Any, node: ast.Call, statement: bool) -> ir.Expr:
        raise UnsupportedError(f"calling {describe(fn)} is not supported in kernels",
                               self.loc(node))

    def global_index(self, fn: kb.KernelOnly, node: ast.Call, statement: bool) -> ir.Expr:
        loc = self.loc(node)
        if len(node.args) != 1 or node.keywords:
            raise ArityError(f"kiln.{fn.name}(dim) takes 1 argument", loc)
        dim = self.fb.exprs.constant(node.args[0])
        if dim not in (0, 1, 2) or isinstance(dim, bool):
            raise ConstantError(f"kiln.{fn.name} needs a constant dimension 0, 1 or 2",
                                self.loc(node.args[0]))
        axis = "xyz"[dim]

        def index(base: str) -> ir.Expr:
            return ir.IntrinsicCall(i32, f"{base}_{axis}", [], loc=loc)

        if fn is kb.global_id:
            product = ir.BinOp(i32, "*", index("block_idx"), index("block_dim"), loc=loc)
            return ir.BinOp(i32, "+", product, index("thread_idx"), loc=loc)
        return ir.BinOp(i32, "*", index("grid_dim"), index("block_dim"), loc=loc)

    # ------------------------------------------------------------ records, variants, vectors

    def record_call(self, fn: Any, node: ast.Call, statement: bool) -> ir.Expr:
        record = kiln_type_of(fn)
        assert isinstance(record, StructType)
        return self.fb.aggregates.construct(record, node)

    def variant_call(self, fn: Any, node: ast.Call, statement: bool) -> ir.Expr:
        variant = kiln_type_of(fn)
        assert isinstance(variant, VariantType)
        return self.fb.aggregates.variant_call(variant, node)

    def variant_tag_call(self, fn: Any, node: ast.Call, statement: bool) -> ir.Expr:
        return self.fb.aggregates.variant_tag_call(fn.__self__, node)

    def isinstance_call(self, fn: Any, node: ast.Call, statement: bool) -> ir.Expr:
        return self.fb.aggregates.isinstance_call(node)

    def vector_call(self, t: VectorType, node: ast.Call, statement: bool) -> ir.Expr:
        return self.fb.aggregates.vector_call(t, node)

    def wide_load(self, fn: Any, node: ast.Call, statement: bool) -> ir.Expr:
        return self.fb.aggregates.wide_load(node)

    # ------------------------------------------------------------ intrinsics

    def intrinsic_call(self, fn: Any, node: ast.Call, statement: bool) -> ir.Expr:
        name = kb.intrinsic_for(fn)
        assert name is not None
        if isinstance(fn, np.ufunc) and (len(node.args) != fn.nin or node.keywords):
            raise ArityError(f"np.{fn.__name__} takes {fn.nin} argument(s) in kernels (no out= "
                             f"or other keywords), got {len(node.args) + len(node.keywords)}",
                             self.loc(node))
        spec = intrinsics[name]
        loc = self.loc(node)
        if node.keywords:
            raise UnsupportedError(f"{name} takes no keyword arguments", loc)
        arg_nodes = list(node.args)
        if spec.category == "atomic" and len(arg_nodes) >= 2 and isinstance(arg_nodes[1],
                                                                              ast.Tuple):
            arg_nodes = [arg_nodes[0], *arg_nodes[1].elts, *arg_nodes[2:]]
        if name in ("min", "max") and len(arg_nodes) > 2:
            return self.folded_min_max(name, arg_nodes, node)
        lo, hi = spec.arity
        args = (self.fb.views.atomic_on_view(arg_nodes) if spec.category == "atomic"
                and arg_nodes and self.fb.views.names_view(arg_nodes[0])
                else [self.fb.exprs.expr(a) for a in arg_nodes])
        if not lo <= len(args) <= hi:
            expected = str(lo) if lo == hi else f"{lo} to {hi}"
            raise ArityError(f"{name} takes {expected} argument(s), got {len(arg_nodes)}",
                             loc)
        if spec.category == "atomic" and not isinstance(args[0], ir.Var):
            raise KernelTypeError(f"the first argument of {name} must be an array",
                                  self.loc(arg_nodes[0]))
        result = self.intrinsic_from_exprs(name, args, node)
        if result.type == void and not statement:
            raise KernelTypeError(f"{name}() has no value", loc)
        return result

    def folded_min_max(self, name: str, arg_nodes: list[ast.expr], node: ast.Call) -> ir.Expr:
        """`min(a, b, c)` as `min(min(a, b), c)`."""
        expr = self.fb.exprs.expr
        folded = self.intrinsic_from_exprs(name, [expr(a) for a in arg_nodes[:2]], node)
        for extra in arg_nodes[2:]:
            folded = self.intrinsic_from_exprs(name, [folded, expr(extra)], node)
        return folded

    def intrinsic_from_exprs(self, name: str, args: list[ir.Expr], node: ast.AST) -> ir.Expr:
        spec = intrinsics[name]
        if any(isinstance(a.type, ArrayType) and a.type.space is MemorySpace.CONSTANT
               for a in args):
            raise KernelTypeError(f"{name} cannot update a module-level constant table: pass "
                                  "an array argument", self.loc(node))
        types = [_literal_aware_type(a, args) if spec.category == "math" else a.type
                 for a in args]
        try:
            param_types, result = typing_of(spec, types)
        except IntrinsicTypeError as exc:
            raise KernelTypeError(str(exc), self.loc(node)) from None
        converted = []
        for a, t in zip(args, param_types):
            if isinstance(t, VectorType):
                a = self.fb.aggregates.splat(a, t)
            elif isinstance(t, ScalarType):
                if not isinstance(a.type, ScalarType):
                    raise KernelTypeError(f"{name} expects a number, got {a.type}", a.loc)
                a = convert(a, t, self.loc(node), compound=True,
                                       what=f"a {t} argument of {name}") \
                    if spec.category == "atomic" else cast(a, t)
            converted.append(a)
        return ir.IntrinsicCall(result, name, converted, loc=self.loc(node))

    # ------------------------------------------------------------ device functions

    def device_call(self, fn: DeviceFunction, node: ast.Call,
                    statement: bool) -> ir.Expr | None:
        loc = self.loc(node)
        views = self.fb.views
        ordered = self.bind_arguments(fn, node)
        args = [None if views.names_view(a) else self.fb.exprs.expr(a) for a in ordered]
        types: list[Type] = []
        converted: list[ir.Expr] = []
        for (pname, ptype), a, a_node in zip(fn.signature, args, ordered):
            argument = f"argument '{pname}' of {fn.name}"
            if a is None:  # a view: the array and its indices, bounds and lengths
                view_type, parts = views.view_argument(a_node, ptype, argument)
                types.append(view_type)
                converted += parts
                continue
            t, value = self.argument(a, a_node, ptype, argument,
                                     f"parameter '{pname}' of {fn.name}")
            types.append(t)
            if value is not None:
                converted.append(value)
        name, return_type = self.fb.ctx.specialize(fn, tuple(types), self.fb, loc)
        if return_type == void and not statement:
            raise KernelTypeError(f"{fn.name} returns no value", loc)
        return ir.Call(return_type, name, converted, loc=loc)

    def bind_arguments(self, fn: DeviceFunction, node: ast.Call) -> list[ast.expr]:
        """The argument nodes of a call, in parameter order (keywords bound by name)."""
        loc = self.loc(node)
        params = fn.signature
        args_nodes = list(node.args)
        if len(args_nodes) > len(params):
            raise ArityError(f"{fn.name} takes {len(params)} argument(s), got "
                             f"{len(args_nodes) + len(node.keywords)}", loc)
        by_name: dict[str, ast.expr] = {}
        for kw in node.keywords:
            if kw.arg is None or kw.arg not in [p for p, _ in params]:
                raise ArityError(f"{fn.name} has no parameter '{kw.arg}'", self.loc(kw.value))
            by_name[kw.arg] = kw.value
        ordered: list[ast.expr] = []
        for i, (pname, _) in enumerate(params):
            if i < len(args_nodes):
                if pname in by_name:
                    raise ArityError(f"{fn.name} got '{pname}' twice", loc)
                ordered.append(args_nodes[i])
            elif pname in by_name:
                ordered.append(by_name[pname])
            else:
                raise ArityError(f"{fn.name} takes {len(params)} argument(s) "
                                 f"({', '.join(p for p, _ in params)}); '{pname}' is missing",
                                 loc)
        return ordered

    def argument(self, a: ir.Expr, a_node: ast.expr, ptype: Type | None, argument: str,
                 parameter: str) -> tuple[Type, ir.Expr | None]:
        """The type a device function specialises on for one argument, and the value
        passed (None for a constexpr, which the specialisation holds)."""
        if isinstance(a.type, ArrayType):
            if not isinstance(a, ir.Var):
                raise KernelTypeError("array arguments must be array variables",
                                      self.loc(a_node))
            if a.type.space is MemorySpace.CONSTANT:
                raise KernelTypeError(f"'{ast.unparse(a_node)}' is a module-level "
                                      "constant table: device functions read it by name "
                                      "too, so it is not passed", self.loc(a_node))
            if ptype is not None and (not isinstance(ptype, ArrayType)
                                      or ptype.elem != a.type.elem
                                      or ptype.ndim != a.type.ndim):
                raise KernelTypeError(f"{argument} expects {ptype}, got {a.type}",
                                      self.loc(a_node))
            return a.type, a
        if isinstance(ptype, ArrayType):
            raise KernelTypeError(f"{argument} expects {ptype}, got {a.type}", self.loc(a_node))
        if isinstance(ptype, ConstexprType):
            value = literal_value(a)
            if value is None:
                raise ConstantError(f"{argument} is a constexpr and needs a compile-time "
                                    "constant", self.loc(a_node))
            return ConstexprType(value), None
        t = ptype or a.type
        return t, convert(a, t, self.loc(a_node), what=parameter)


def _literal_aware_type(arg: ir.Expr, args: list[ir.Expr]) -> Type:
    """A literal argument takes the type of the other non-literal numeric arguments."""
    value = literal_value(arg)
    if value is None:
        return arg.type
    others = [a.type for a in args if literal_value(a) is None
              and isinstance(a.type, ScalarType)]
    if not others or not isinstance(arg.type, ScalarType):
        return arg.type
    t = others[0]
    assert isinstance(t, ScalarType)
    return operand_type(t, arg.type, None, value)
