"""How values convert between kiln types in the frontend, and the literals that adapt.

A Python literal in a kernel is a *weak* constant (`literal_value` reads it): it takes the
type of what it meets, as in NumPy's scalar rules. `convert` is what an assignment, a
store, an argument or a return checks: implicit conversions only, with a hint to convert
explicitly; `cast` is the conversion itself.
"""

from __future__ import annotations

from typing import Any

from ..errors import KernelTypeError
from ..ir import nodes as ir
from ..ir.types import (
    ArrayType,
    FragmentType,
    ScalarType,
    StructType,
    Type,
    VariantType,
    VectorType,
    can_convert_implicitly,
    fits,
    i32,
    i64,
    is_aggregate,
    literal_type,
    wrap_int,
)
from .typing_rules import can_store, operand_type


def literal_value(expr: ir.Expr) -> Any:
    """The Python value of a literal that still adapts to its context, else None."""
    if isinstance(expr, ir.Const) and getattr(expr, "weak", False):
        return expr.value
    return None


def cast(expr: ir.Expr, t: Type, loc: ir.Loc | None = None) -> ir.Expr:
    """`expr` as a `t` (a literal folds into a constant of `t`)."""
    if expr.type == t:
        return expr
    value = literal_value(expr)
    if value is not None and isinstance(t, ScalarType):
        if t.is_bool:
            return ir.Const(t, bool(value), loc=expr.loc)
        if t.is_float:
            return ir.Const(t, float(value), loc=expr.loc)
        if isinstance(value, float):
            return ir.Cast(t, ir.Const(literal_type(value), value, loc=expr.loc),
                           loc=expr.loc)
        return ir.Const(t, wrap_int(int(value), t), loc=expr.loc)
    return ir.Cast(t, expr, loc=loc or expr.loc)


def element_type(array: ir.Var) -> Type:
    """The element type of an array variable."""
    assert isinstance(array.type, ArrayType)
    return array.type.elem


def convert_aggregate(value: ir.Expr, t: Type, loc: ir.Loc, target: str) -> ir.Expr:
    """`value` as a `t` (a case as its variant, a vector of a narrower element type as
    a wider one), or a type error."""
    src = value.type
    if src == t:
        return value
    if isinstance(t, VariantType) and t.case_index(src) is not None:
        return ir.Cast(t, value, loc=value.loc or loc)
    if isinstance(t, VectorType) and isinstance(src, VectorType) and src.n == t.n \
            and can_convert_implicitly(src.elem, t.elem):
        return ir.Cast(t, value, loc=value.loc or loc)
    hint = ""
    if isinstance(src, StructType) and isinstance(t, StructType):
        hint = "; a variable holding several cases of a variant needs its annotation " \
               "(s: Shape = Circle(...))"
    elif isinstance(t, VectorType):
        hint = f"; convert explicitly with {t}(...)"
    raise KernelTypeError(f"cannot assign a {src} value to {target} of type {t}{hint}",
                          value.loc or loc)


def common_type(exprs: list[ir.Expr]) -> ScalarType:
    """The type scalar operands share (literals adapt to the others)."""
    typed = [e.type for e in exprs if literal_value(e) is None]
    scalars = [t for t in typed if isinstance(t, ScalarType)]
    if not typed:
        values = [literal_value(e) for e in exprs]
        return i64 if any(literal_type(v) == i64 for v in values) else i32
    assert len(scalars) == len(typed), "common_type takes scalars"
    t = scalars[0]
    for other in scalars[1:]:
        t = operand_type(t, other, None, None)
    for e in exprs:
        v = literal_value(e)
        if v is not None:
            assert isinstance(e.type, ScalarType)
            t = operand_type(t, e.type, None, v)
    return t


def is_value_type(t: Type) -> bool:
    """Scalars, records, variants, vectors and matrix fragments: what variables may hold."""
    return isinstance(t, (ScalarType, FragmentType)) or is_aggregate(t)


def convert(value: ir.Expr, t: Type, loc: ir.Loc, compound: bool = False,
            name: str | None = None, what: str | None = None) -> ir.Expr:
    """Convert `value` for storage in a `t` variable, or raise a clear type error."""
    src = value.type
    if src == t:
        return value
    target = what or (f"variable '{name}'" if name else "the target")
    if is_aggregate(t) or is_aggregate(src):
        return convert_aggregate(value, t, loc, target)
    if not isinstance(src, ScalarType) or not isinstance(t, ScalarType):
        raise KernelTypeError(f"cannot assign a {src} value to {target} of type {t}",
                              value.loc or loc)
    literal = literal_value(value)
    if literal is not None:
        ok = isinstance(literal, bool) or t.is_float or (
            not isinstance(literal, float) and fits(literal, t))
    else:
        ok = can_convert_implicitly(src, t) or (compound and can_store(src, t))
    if not ok:
        hint = f"; convert explicitly with {t.name}(...)"
        raise KernelTypeError(f"cannot assign a {src} value to {target} of type {t}{hint}",
                              value.loc or loc)
    return cast(value, t)
