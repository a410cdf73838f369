"""How the frontend types operators: promotion with literals that adapt to their context."""

from __future__ import annotations

from ..ir.types import ScalarType, bool_, f32, fits, i32, i64, literal_type, promote

Number = int | float | bool
"""A Python literal's value."""


def adapt_literal(value: Number, other: ScalarType) -> ScalarType:
    """The type a literal takes beside an operand of type `other`.

    An int literal takes the other operand's type (widened to at least i32 for small
    integers) when it fits; a negative one beside an unsigned type up to 32 bits makes the
    operation i64 (exact); a float literal takes the other's float type, or f32.
    """
    if isinstance(value, bool):
        return bool_ if other.is_bool else adapt_literal(int(value), other)
    if isinstance(value, int):
        if other.is_float:
            return other
        target = other if other.bits >= 32 else i32  # bool and small ints widen, as in C
        if fits(value, target):
            return target
        if value < 0 and target.kind == "u":  # exact, as in Python (u64: wraps, as in C)
            return i64 if target.bits < 64 else target
        return promote(literal_type(value), target)
    return other if other.is_float else f32


def operand_type(left: ScalarType, right: ScalarType, left_literal: Number | None,
                 right_literal: Number | None) -> ScalarType:
    """The common type of two operands; a `*_literal` is the Python value or None."""
    if left_literal is not None and right_literal is None:
        return promote(adapt_literal(left_literal, right), right)
    if right_literal is not None and left_literal is None:
        return promote(left, adapt_literal(right_literal, left))
    return promote(left, right)


def comparison_type(left: ScalarType, right: ScalarType, left_literal: Number | None,
                    right_literal: Number | None) -> ScalarType:
    """Like `operand_type`, but mixed-signedness integers compare exactly (as in Python), in
    i64, also an unsigned operand beside a negative literal (`u > -1` is true)."""
    if left.is_int and right.is_int and max(left.bits, right.bits) < 64:
        if left_literal is None and right_literal is None and left.kind != right.kind:
            return i64
        literal, other = (left_literal, right) if right_literal is None else (right_literal, left)
        one_literal = (left_literal is None) != (right_literal is None)
        if one_literal and literal is not None and other.kind == "u" and other.bits == 32 \
                and literal < 0:
            return i64
    if left.is_bool and right.is_bool:
        return bool_
    return operand_type(left, right, left_literal, right_literal)


def unify(old: ScalarType, new: ScalarType) -> ScalarType:
    """The type of a variable assigned values of both types (inferred locals only)."""
    return old if old == new else promote(old, new)


def can_store(src: ScalarType, dst: ScalarType) -> bool:
    """Array stores and compound assignment convert within a kind (f64 -> f32, i64 -> i32),
    and from integers to floats, but never from floats to integers."""
    if dst.is_bool:
        return src.is_bool
    return not (src.is_float and not dst.is_float)
