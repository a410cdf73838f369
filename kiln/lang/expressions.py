"""Expressions: names, literals, attributes, indexing and operators, as typed IR.

Each Python expression node has one handler, found in a table keyed by the node's class.
A Python literal becomes a *weak* constant (`literal_value` reads it) that adapts to the
type of what it meets, as in NumPy's scalar rules; two literals fold as Python would.
Calls are the `Calls` part's (kiln/lang/calls.py).
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import ConstantError, KernelError, KernelTypeError, UnknownNameError, UnsupportedError
from ..ir import nodes as ir
from ..ir.enums import MemorySpace
from ..ir.types import (
    COMPONENTS,
    SCALAR_BY_DTYPE,
    ArrayType,
    ScalarType,
    VectorType,
    bool_,
    f32,
    i32,
    i64,
    is_aggregate,
    literal_type,
)
from . import builtins as kb
from .conversions import cast, element_type, literal_value
from .part import Part
from .tables import table_expr
from .typing_rules import comparison_type, operand_type

if TYPE_CHECKING:
    from .frontend import FunctionBuilder

BINOPS = {
    ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//",
    ast.Mod: "%", ast.Pow: "**", ast.LShift: "<<", ast.RShift: ">>", ast.BitAnd: "&",
    ast.BitOr: "|", ast.BitXor: "^",
}
CMPOPS = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}
UNARY = {ast.USub: "-", ast.UAdd: "+", ast.Invert: "~"}
UNSUPPORTED_EXPRESSIONS = {
    ast.List: "lists", ast.Dict: "dicts", ast.Set: "sets", ast.ListComp: "list comprehensions",
    ast.DictComp: "dict comprehensions", ast.SetComp: "set comprehensions",
    ast.GeneratorExp: "generators", ast.Lambda: "lambdas (closures)", ast.Yield: "generators",
    ast.YieldFrom: "generators", ast.Await: "`await`", ast.JoinedStr: "strings",
    ast.Starred: "starred arguments", ast.NamedExpr: "`:=`", ast.Slice: "slices",
}

_LITERAL_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
    "//": operator.floordiv, "%": operator.mod, "**": operator.pow, "<<": operator.lshift,
    ">>": operator.rshift, "&": operator.and_, "|": operator.or_, "^": operator.xor,
}
"""Python's arithmetic on two literals (folded before typing, as Python would)."""


class Expressions(Part):
    """Builds the IR of expressions."""

    def __init__(self, builder: FunctionBuilder) -> None:
        super().__init__(builder)
        self.handlers: dict[type[ast.expr], Callable[[Any], ir.Expr]] = {
            ast.Constant: self.constant_expr, ast.Name: self.name_expr,
            ast.Attribute: self.attribute_expr, ast.Subscript: self.subscript_expr,
            ast.BinOp: self.binop_expr, ast.UnaryOp: self.unary_expr,
            ast.BoolOp: self.boolop_expr, ast.Compare: self.compare_expr,
            ast.IfExp: self.ifexp_expr, ast.Tuple: self.tuple_expr,
            ast.Call: self.call_expr,
        }

    def expr(self, node: ast.expr) -> ir.Expr:
        handler = self.handlers.get(type(node))
        if handler is None:
            raise self.unsupported(node, UNSUPPORTED_EXPRESSIONS, "expressions")
        return handler(node)

    # ------------------------------------------------------------ constants

    def literal(self, value: Any, node: ast.AST) -> ir.Expr:
        loc = self.loc(node)
        if isinstance(value, str):
            raise UnsupportedError("strings are not supported in kernels", loc)
        if isinstance(value, np.generic):
            t = SCALAR_BY_DTYPE.get(value.dtype)
            if t is None:
                raise KernelTypeError(f"no kiln type for {value!r}", loc)
            return ir.Const(t, value.item(), loc=loc)
        if not isinstance(value, (bool, int, float)):
            raise UnsupportedError(f"{type(value).__name__} values cannot be used in kernels",
                                   loc)
        if isinstance(value, int) and not -(2**63) <= value < 2**64:
            raise ConstantError(f"the constant {value} does not fit in 64 bits (kernels have "
                                "no big integers)", loc)
        const = ir.Const(literal_type(value), value, loc=loc)
        const.weak = True  # type: ignore[attr-defined]  # read by `literal_value` only
        return const

    def constant(self, node: ast.expr) -> Any:
        """The compile-time value of an expression, or None."""
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name) and node.id in self.scope.constants:
            return self.scope.constants[node.id]
        if isinstance(node, (ast.Name, ast.Attribute)) and not self.scope.is_local(node):
            value = self.resolver.try_resolve(node)
            return value if isinstance(value, (int, float, bool, np.number)) else None
        if isinstance(node, (ast.BinOp, ast.UnaryOp)):
            try:
                expr = self.expr(node)
            except KernelError:
                return None
            return literal_value(expr)
        return None

    def constant_shape(self, node: ast.expr, what: str) -> tuple[int, ...]:
        items = node.elts if isinstance(node, ast.Tuple) else [node]
        dims: list[int] = []
        for item in items:
            value = self.constant(item)
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
                raise ConstantError(f"kiln.{what} arrays need a size fixed at compile time "
                                    "(an int literal or module-level constant)",
                                    self.loc(item))
            if value <= 0:
                raise ConstantError(f"array dimensions must be positive, got {value}",
                                    self.loc(item))
            dims.append(int(value))
        return tuple(dims)

    def constant_expr(self, node: ast.Constant) -> ir.Expr:
        if node.value is None or node.value is Ellipsis:
            raise UnsupportedError(f"{node.value!r} is not a value in kernels", self.loc(node))
        return self.literal(node.value, node)

    # ------------------------------------------------------------ names and attributes

    def name_expr(self, node: ast.Name) -> ir.Expr:
        scope = self.scope
        if node.id in scope.constants:
            return self.literal(scope.constants[node.id], node)
        if node.id in scope.views:
            view = scope.views[node.id]
            raise KernelTypeError(f"'{node.id}' is a view of '{view.array.name}': index it "
                                  f"({node.id}[j]), take len({node.id}) or pass it to a device "
                                  "function; a view is not a value",
                                  self.loc(node))
        if node.id in scope.param_names or node.id in scope.local_types:
            return self.read_name(node)
        value = self.resolver.lookup(node.id, self.loc(node))
        return self.value_expr(value, node)

    def read_name(self, node: ast.Name) -> ir.Expr:
        name = node.id
        t = self.scope.type_of(name)
        if t is None:
            value = self.resolver.lookup(name, self.loc(node))
            return self.value_expr(value, node)
        if name not in self.scope.defined:
            raise UnknownNameError(f"'{name}' is used before it is assigned", self.loc(node))
        return ir.Var(t, name, loc=self.loc(node))

    def value_expr(self, value: Any, node: ast.AST) -> ir.Expr:
        """A module-level or closure value used in a kernel."""
        if isinstance(value, (bool, int, float, np.generic)):
            return self.literal(value, node)
        if isinstance(value, np.ndarray):
            return table_expr(self.fb, value, node, ast.unparse(node))
        if isinstance(value, kb.KernelOnly) and value.intrinsic in kb.VALUE_INTRINSICS:
            return self.fb.calls.intrinsic_from_exprs(value.intrinsic, [], node)
        raise UnsupportedError(f"{describe(value)} cannot be used as a value in kernels",
                               self.loc(node))

    def attribute_expr(self, node: ast.Attribute) -> ir.Expr:
        loc = self.loc(node)
        if self.scope.is_local(node.value) or not isinstance(node.value,
                                                             (ast.Name, ast.Attribute)):
            return self.value_attribute(self.expr(node.value), node)
        owner = self.resolver.resolve(node.value, self.loc(node.value))
        if isinstance(owner, kb.IndexObject):
            if node.attr not in ("x", "y", "z"):
                raise UnknownNameError(f"kiln.{owner.name} has .x, .y and .z, not "
                                       f".{node.attr}", loc)
            return ir.IntrinsicCall(i32, f"{owner.name}_{node.attr}", [], loc=loc)
        value = self.resolver.resolve(node, self.loc(node))
        return self.value_expr(value, node)

    def value_attribute(self, base: ir.Expr, node: ast.Attribute) -> ir.Expr:
        """`base.attr` of a kernel value: a field, a component, or an array's size."""
        loc = self.loc(node)
        if is_aggregate(base.type):
            return self.fb.aggregates.field(base, node.attr, node)
        if isinstance(base.type, ArrayType) and isinstance(base, ir.Var):
            if node.attr == "ndim":
                return self.literal(base.type.ndim, node)
            if node.attr == "size":
                size: ir.Expr = ir.ArrayDim(i32, base, 0, loc=loc)
                for axis in range(1, base.type.ndim):
                    size = ir.BinOp(i32, "*", size, ir.ArrayDim(i32, base, axis, loc=loc),
                                    loc=loc)
                return size
            if node.attr == "shape":
                raise UnsupportedError("use a.shape[k] with a constant k", loc)
        raise UnsupportedError(f"attribute '{node.attr}' of {base.type} is not supported", loc)

    # ------------------------------------------------------------ indexing

    def subscript_expr(self, node: ast.Subscript) -> ir.Expr:
        views = self.fb.views
        if isinstance(node.value, ast.Attribute) and node.value.attr == "shape" \
                and views.names_view(node.value.value):
            axis = self.constant(node.slice)
            if not isinstance(axis, int):
                raise ConstantError("shape index must be a constant", self.loc(node.slice))
            return views.view_length(node.value.value, axis, node.slice)
        if isinstance(node.value, ast.Attribute) and node.value.attr == "shape" \
                and (self.scope.is_local(node.value.value) or isinstance(
                    self.resolver.try_resolve(node.value.value), np.ndarray)):  # a table
            return self.shape(node.value, node.slice, node)
        component = self.vector_component(node)
        if component is not None:  # v[1] is v.y
            return self.expr(component)
        array, indices = self.subscript(node, "read")
        return ir.Load(element_type(array), array, indices, loc=self.loc(node))

    def shape(self, attribute: ast.Attribute, index: ast.expr, node: ast.AST) -> ir.Expr:
        """`a.shape[k]` of an array (or a constant table)."""
        array = self.expr(attribute.value)
        if not isinstance(array, ir.Var) or not isinstance(array.type, ArrayType):
            raise KernelTypeError("only arrays have a shape", self.loc(attribute))
        axis = self.constant(index)
        if not isinstance(axis, int) or not -array.type.ndim <= axis < array.type.ndim:
            raise ConstantError(f"shape index must be a constant in "
                                f"0..{array.type.ndim - 1}", self.loc(index))
        return ir.ArrayDim(i32, array, axis % array.type.ndim, loc=self.loc(node))

    def writable(self, array: ir.Var, target: ast.Subscript) -> None:
        if isinstance(array.type, ArrayType) and array.type.space is MemorySpace.CONSTANT:
            raise KernelTypeError(f"'{ast.unparse(target.value)}' is a module-level NumPy "
                                  "array, which kernels read as a constant table: pass an "
                                  "array argument to write one", self.loc(target))

    def vector_component(self, node: ast.Subscript) -> ast.Attribute | None:
        """`v[k]` of a vector `v` as the component access `v.x` / `.y` / `.z` / `.w` it
        means (None when `v` is not a vector); `k` is a constant, negative from the end."""
        if self.fb.views.names_view(node.value):
            return None
        base_type = self.expr(node.value).type
        if not isinstance(base_type, VectorType):
            return None
        n = base_type.n
        if isinstance(node.slice, (ast.Tuple, ast.Slice)):
            raise UnsupportedError(f"a {base_type} is indexed with one constant, not a slice "
                                   "or a tuple (build a smaller vector from its components)",
                                   self.loc(node.slice))
        k = self.constant(node.slice)
        if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or not -n <= k < n:
            raise ConstantError(f"a {base_type} is indexed with a constant in {-n}..{n - 1} "
                                f"(or .{', .'.join(COMPONENTS[:n])})", self.loc(node.slice))
        component = ast.Attribute(value=node.value, attr=COMPONENTS[int(k) % n], ctx=node.ctx)
        return ast.copy_location(component, node)

    def subscript(self, node: ast.Subscript, verb: str) -> tuple[ir.Var, list[ir.Expr]]:
        """The array and the indices of an element `a[i, j]` (or of a view's element, whose
        checks in a checked program report that they `verb` it)."""
        if self.fb.views.names_view(node.value):
            return self.fb.views.view_element(node, verb)
        base = self.expr(node.value)
        if not isinstance(base.type, ArrayType) or not isinstance(base, ir.Var):
            raise KernelTypeError(f"cannot index a {base.type} value", self.loc(node.value))
        items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if len(items) < base.type.ndim or any(isinstance(i, ast.Slice) for i in items):
            raise KernelTypeError(f"{ast.unparse(node)} is a view of '{base.name}', not a "
                                  f"value: bind it to a name (row = {ast.unparse(node)}) or "
                                  f"index it further ({ast.unparse(node)}[j])", self.loc(node))
        if len(items) != base.type.ndim:
            raise KernelTypeError(f"'{base.name}' has {base.type.ndim} dimension(s) but is "
                                  f"indexed with {len(items)}", self.loc(node.slice))
        return base, [self.index(item) for item in items]

    def index(self, node: ast.expr) -> ir.Expr:
        idx = self.expr(node)
        t = idx.type
        if not (isinstance(t, ScalarType) and (t.is_int or t.is_bool)):
            raise KernelTypeError(f"array indices must be integers, got {t}", self.loc(node))
        value = literal_value(idx)
        if value is not None and value < 0:
            raise KernelError("negative indices do not wrap around in kernels",
                              self.loc(node))
        if t.bits < 32 or t.is_bool or t.kind == "u":
            return cast(idx, i64 if t.bits >= 32 else i32)
        return idx

    # ------------------------------------------------------------ operators

    def operator(self, op: ast.operator, node: ast.AST) -> str:
        symbol = BINOPS.get(type(op))
        if symbol is None:  # `@`, the one Python operator kernels lack
            raise UnsupportedError("kernels do not support the `@` operator", self.loc(node))
        return symbol

    def binop_expr(self, node: ast.BinOp) -> ir.Expr:
        op = self.operator(node.op, node)
        return self.binop(op, self.expr(node.left), self.expr(node.right), node)

    def binop(self, op: str, left: ir.Expr, right: ir.Expr, node: ast.AST) -> ir.Expr:
        loc = self.loc(node)
        if isinstance(left.type, VectorType) or isinstance(right.type, VectorType):
            return self.fb.aggregates.vector_binop(op, left, right, loc)
        lt, rt = left.type, right.type
        for side in (left, right):
            if not isinstance(side.type, ScalarType):
                raise KernelTypeError(f"operator {op} needs numbers, got {side.type}",
                                      side.loc or loc)
        lv, rv = literal_value(left), literal_value(right)
        if lv is not None and rv is not None:
            return self.fold_literals(op, lv, rv, node)
        assert isinstance(lt, ScalarType) and isinstance(rt, ScalarType)
        if op in ("&", "|", "^") and lt.is_bool and rt.is_bool:
            return ir.BinOp(bool_, op, left, right, loc=loc)
        t = operand_type(lt, rt, lv, rv)
        if op in ("<<", ">>", "&", "|", "^", "~") and t.is_float:
            raise KernelTypeError(f"operator {op} needs integers, got {lt} and {rt}", loc)
        if op in ("<<", ">>"):
            t = operand_type(lt, lt, None, None) if lv is None else t
        if op == "/" and not t.is_float:
            t = f32
        return ir.BinOp(t, op, cast(left, t), cast(right, t), loc=loc)

    def fold_literals(self, op: str, a: Any, b: Any, node: ast.AST) -> ir.Expr:
        huge = (op == "**" and isinstance(a, int) and isinstance(b, int) and abs(a) > 1
                and b > 128) or (op == "<<" and isinstance(b, int) and b > 128 and a != 0)
        if huge:  # the value would not fit in 64 bits; Python would build it (slowly)
            raise ConstantError(f"the constant {a} {op} {b} does not fit in 64 bits",
                                self.loc(node))
        try:
            return self.literal(_LITERAL_OPS[op](a, b), node)
        except ZeroDivisionError:
            raise KernelError("division by zero in a constant expression",
                              self.loc(node)) from None
        except TypeError as exc:
            raise KernelTypeError(str(exc), self.loc(node)) from None

    def unary_expr(self, node: ast.UnaryOp) -> ir.Expr:
        operand = self.expr(node.operand)
        loc = self.loc(node)
        if isinstance(node.op, ast.Not):
            return ir.UnaryOp(bool_, "not", self.scope.truth(operand, node.operand), loc=loc)
        op = UNARY[type(node.op)]
        if isinstance(operand.type, VectorType):
            return self.fb.aggregates.vector_unary(op, operand, loc)
        t = operand.type
        if not isinstance(t, ScalarType):
            raise KernelTypeError(f"cannot negate a {operand.type}", loc)
        value = literal_value(operand)
        if value is not None:
            return self.literal({"-": -value, "+": +value, "~": ~value if
                                 not isinstance(value, float) else None}[op], node)
        if op == "~" and t.is_float:
            raise KernelTypeError(f"operator ~ needs an integer, got {t}", loc)
        if op == "~" and t.is_bool:
            return ir.UnaryOp(bool_, "not", operand, loc=loc)
        if t.is_bool or (t.is_int and t.bits < 32):
            operand, t = cast(operand, i32), i32
        return ir.UnaryOp(t, op, operand, loc=loc)

    def boolop_expr(self, node: ast.BoolOp) -> ir.Expr:
        op = "and" if isinstance(node.op, ast.And) else "or"
        values = [self.scope.truth(self.expr(v), v) for v in node.values]
        return ir.BoolOp(bool_, op, values, loc=self.loc(node))

    def compare_expr(self, node: ast.Compare) -> ir.Expr:
        parts: list[ir.Expr] = []
        left = self.expr(node.left)
        for op_node, right_node in zip(node.ops, node.comparators):
            if type(op_node) not in CMPOPS:
                raise UnsupportedError("kernels do not support `is`, `is not`, `in` and "
                                       "`not in`", self.loc(node))
            right = self.expr(right_node)
            parts.append(self.compare(CMPOPS[type(op_node)], left, right, node))
            left = right
        if len(parts) == 1:
            return parts[0]
        return ir.BoolOp(bool_, "and", parts, loc=self.loc(node))

    def compare(self, op: str, left: ir.Expr, right: ir.Expr, node: ast.AST) -> ir.Expr:
        loc = self.loc(node)
        if isinstance(left.type, VectorType) or isinstance(right.type, VectorType):
            return self.fb.aggregates.vector_compare(op, left, right, loc)
        lt, rt = left.type, right.type
        for side in (left, right):
            if not isinstance(side.type, ScalarType):
                raise KernelTypeError(f"cannot compare a {side.type}", side.loc or loc)
        assert isinstance(lt, ScalarType) and isinstance(rt, ScalarType)
        t = comparison_type(lt, rt, literal_value(left), literal_value(right))
        return ir.Compare(bool_, op, cast(left, t), cast(right, t), loc=loc)

    def ifexp_expr(self, node: ast.IfExp) -> ir.Expr:
        cond = self.scope.truth(self.expr(node.test), node.test)
        a, b = self.expr(node.body), self.expr(node.orelse)
        at, bt = a.type, b.type
        for side in (a, b):
            if not isinstance(side.type, ScalarType):
                raise KernelTypeError("conditional expressions choose between numbers",
                                      side.loc)
        assert isinstance(at, ScalarType) and isinstance(bt, ScalarType)
        t = operand_type(at, bt, literal_value(a), literal_value(b))
        if at == bool_ and bt == bool_:
            t = bool_
        return ir.Select(t, cond, cast(a, t), cast(b, t), loc=self.loc(node))

    def tuple_expr(self, node: ast.Tuple) -> ir.Expr:
        raise UnsupportedError("tuples are only allowed in tuple assignment and indexing",
                               self.loc(node))

    def call_expr(self, node: ast.Call) -> ir.Expr:
        result = self.fb.calls.call(node, statement=False)
        assert result is not None
        return result


def describe(value: Any) -> str:
    """A Python object as error messages name it."""
    if isinstance(value, type(math)):
        return f"module {value.__name__}"
    name = getattr(value, "__name__", None)
    return f"{type(value).__name__} {name}" if name else repr(value)
