"""Constant folding with the semantics every backend implements (docs/ir-conventions.md).

Integers wrap around in two's complement, `//` and `%` floor (Python), float arithmetic is
rounded to the operation's type (computed with NumPy scalars of that type), and casts from
float to int truncate. Nothing is folded whose result the backends leave undefined or
compute differently: integer division by zero, shifts by the bit width or more, float
results that are not finite, float `//`, `%` and `**` (library functions), and out-of-range
float-to-int casts.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable

import numpy as np

from .. import nodes as ir
from ..types import ScalarType, fits
from ..visit import Transformer
from .common import all_functions, clone, clone_program

Number = int | float | bool

INT_OPS: dict[str, Callable[[int, int], int]] = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "&": operator.and_,
    "|": operator.or_, "^": operator.xor,
}
FLOAT_OPS: dict[str, Callable[[np.floating, np.floating], np.floating]] = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
}
COMPARES: dict[str, Callable[[Number, Number], bool]] = {
    "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
    "==": operator.eq, "!=": operator.ne,
}


def fold_constants(program: ir.Program) -> ir.Program:
    """A new program with constant sub-expressions evaluated (the input is not changed)."""
    program = clone_program(program)
    folder = _Folder()
    for func in all_functions(program):
        func.body = folder.transform_body(func.body)
    return program


def fold_expression(e: ir.Expr) -> ir.Expr:
    """A copy of `e` with its constant sub-expressions evaluated (`e` is not changed)."""
    return _Folder().transform(clone(e))


def wrap(value: int, t: ScalarType) -> int:
    """`value` reduced to the integer type `t`, two's complement."""
    value &= (1 << t.bits) - 1
    if t.is_signed and value >> (t.bits - 1):
        value -= 1 << t.bits
    return value


def python_value(c: ir.Const) -> Number:
    """The constant as a Python number of its type's kind."""
    value = c.value.item() if isinstance(c.value, np.generic) else c.value
    t = c.type
    assert isinstance(t, ScalarType)
    if t.is_float:
        return float(value)
    return bool(value) if t.is_bool else int(value)


def _finite(value: np.generic | np.ndarray) -> float | None:
    return float(value) if np.isfinite(value) else None


def binop(op: str, a: Number, b: Number, t: ScalarType) -> Number | None:
    """`a op b` in type `t`, or None when it must not be folded."""
    if t.is_float:
        if op not in FLOAT_OPS:
            return None
        with np.errstate(all="ignore"):
            return _finite(FLOAT_OPS[op](t.dtype.type(a), t.dtype.type(b)))
    a, b = int(a), int(b)
    if t.is_bool:
        return bool(INT_OPS[op](a, b)) if op in "&|^" else None
    if op in INT_OPS:
        return wrap(INT_OPS[op](a, b), t)
    if op in ("//", "%"):
        return None if b == 0 else wrap(a // b if op == "//" else a % b, t)
    if op == "**":
        if b >= 0:
            return wrap(pow(a, b, 1 << t.bits), t)
        if a == -1:
            return 1 if b % 2 == 0 else -1
        return 1 if a == 1 else 0
    if op in ("<<", ">>") and 0 <= b < t.bits:
        return wrap(a << b if op == "<<" else a >> b, t)
    return None


def unary(op: str, a: Number, t: ScalarType) -> Number | None:
    if op == "not":
        return not a
    if op == "+":
        return a
    if t.is_float:
        return -a if op == "-" else None
    if t.is_bool:
        return None
    return wrap(-int(a) if op == "-" else ~int(a), t)


def cast(a: Number, src: ScalarType, dst: ScalarType) -> Number | None:
    """`dst(a)` for a value of type `src`: C conversions, truncation for float to int."""
    if dst.is_bool:
        return a != 0
    if dst.is_float:
        with np.errstate(all="ignore"):
            return _finite(np.array(a, dtype=src.dtype).astype(dst.dtype)[()])
    if src.is_float:
        if not math.isfinite(a):
            return None
        a = math.trunc(a)
        return a if fits(a, dst) else None
    return wrap(int(a), dst)


class _Folder(Transformer):
    @staticmethod
    def const(node: ir.Expr, value: Number | None) -> ir.Expr:
        return node if value is None else ir.Const(node.type, value, loc=node.loc)

    def visit_BinOp(self, e: ir.BinOp) -> ir.Expr:
        if isinstance(e.left, ir.Const) and isinstance(e.right, ir.Const):
            assert isinstance(e.type, ScalarType)
            return self.const(e, binop(e.op, python_value(e.left), python_value(e.right),
                                       e.type))
        return e

    def visit_Compare(self, e: ir.Compare) -> ir.Expr:
        if isinstance(e.left, ir.Const) and isinstance(e.right, ir.Const):
            return self.const(e, COMPARES[e.op](python_value(e.left), python_value(e.right)))
        return e

    def visit_UnaryOp(self, e: ir.UnaryOp) -> ir.Expr:
        if isinstance(e.operand, ir.Const) and isinstance(e.type, ScalarType):
            return self.const(e, unary(e.op, python_value(e.operand), e.type))
        return e

    def visit_Cast(self, e: ir.Cast) -> ir.Expr:
        if e.value.type == e.type:
            return e.value
        src, dst = e.value.type, e.type
        if isinstance(e.value, ir.Const) and isinstance(src, ScalarType) and isinstance(
                dst, ScalarType):
            return self.const(e, cast(python_value(e.value), src, dst))
        return e

    def visit_Select(self, e: ir.Select) -> ir.Expr:
        if isinstance(e.cond, ir.Const):
            return e.if_true if python_value(e.cond) else e.if_false
        return e

    def visit_BoolOp(self, e: ir.BoolOp) -> ir.Expr:
        """Drop neutral constants; an absorbing one ends the operands (later ones never run)."""
        absorbing = e.op == "or"
        values: list[ir.Expr] = []
        for v in e.values:
            if isinstance(v, ir.Const):
                if python_value(v) != absorbing:
                    continue
                if not values:
                    return self.const(e, absorbing)
                values.append(v)
                break
            values.append(v)
        if not values:
            return self.const(e, not absorbing)
        if len(values) == 1:
            return values[0]
        e.values = values
        return e
