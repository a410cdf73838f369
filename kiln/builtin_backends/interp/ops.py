"""Operators on interpreter values with kiln's semantics (see docs/ir-conventions.md).

Integer `//` and `%` floor (NumPy's floor_divide/remainder, which give 0 for a zero divisor);
on floats `a // b = floor(a / b)` and `a % b = a - floor(a / b) * b`. Integer `**` is exact
repeated multiplication (negative exponents give 0, or +-1 for a base of +-1). Integer
arithmetic wraps; the interpreter runs under `np.errstate(all="ignore")`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ...ir.types import ScalarType
from .values import Affine, Value, materialise

BinaryFn = Callable[[Value, Value], Value]


def _lifted(ufunc: np.ufunc) -> BinaryFn:
    """A NumPy ufunc applied after materialising affine operands."""
    return lambda a, b: ufunc(materialise(a), materialise(b))


def _in_f32_for_f16(fn: BinaryFn) -> BinaryFn:
    """f16 operands are computed in f32 and the result rounded once (as the C emitters do)."""

    def run(a: Value, b: Value) -> Value:
        if np.result_type(a, b) != np.float16:
            return fn(a, b)
        return np.float16(fn(np.float32(a), np.float32(b))) if np.ndim(a) + np.ndim(b) == 0 \
            else np.asarray(fn(np.asarray(a, np.float32), np.asarray(b, np.float32)), np.float16)

    return run


@_in_f32_for_f16
def _float_floordiv(a: Value, b: Value) -> Value:
    return np.floor(a / b)


@_in_f32_for_f16
def _float_mod(a: Value, b: Value) -> Value:
    return a - np.floor(a / b) * b


def _int_pow(a: Value, b: Value) -> Value:
    base, exp = np.broadcast_arrays(np.asarray(materialise(a)), np.asarray(materialise(b)))
    dtype = base.dtype
    negative = exp < 0 if dtype.kind == "i" else np.zeros(exp.shape, bool)
    e = np.where(negative, 0, exp)
    result = np.ones(base.shape, dtype)
    base = base.copy()
    while e.any():
        result = np.where(e & 1 != 0, result * base, result)
        base = base * base
        e = e >> 1
    if negative.any():
        one, minus_one = dtype.type(1), dtype.type(-1)
        a0 = np.asarray(materialise(a))
        special = np.where(a0 == 1, one,
                           np.where(a0 == -1, np.where(exp & 1 != 0, minus_one, one), 0))
        result = np.where(negative, special, result).astype(dtype)
    return result[()] if result.ndim == 0 else result


_INT_BINOPS: dict[str, BinaryFn] = {
    "+": lambda a, b: a + b,  # affine-aware through Affine's operators
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "//": _lifted(np.floor_divide),
    "%": _lifted(np.remainder),
    "**": _int_pow,
    "<<": _lifted(np.left_shift),
    ">>": _lifted(np.right_shift),
    "&": _lifted(np.bitwise_and),
    "|": _lifted(np.bitwise_or),
    "^": _lifted(np.bitwise_xor),
}

_FLOAT_BINOPS: dict[str, BinaryFn] = {
    "+": np.add,
    "-": np.subtract,
    "*": np.multiply,
    "/": np.true_divide,
    "//": _float_floordiv,
    "%": _float_mod,
    "**": np.power,
}

_BOOL_BINOPS: dict[str, BinaryFn] = {
    "&": np.logical_and,
    "|": np.logical_or,
    "^": np.logical_xor,
}

# ufuncs that can write straight into a destination (the store fast path)
_INTO: dict[tuple[str, str], np.ufunc] = {
    **{(op, "f"): f for op, f in (("+", np.add), ("-", np.subtract), ("*", np.multiply),
                                  ("/", np.true_divide))},
    **{(op, k): f for op, f in (("+", np.add), ("-", np.subtract), ("*", np.multiply),
                                ("&", np.bitwise_and), ("|", np.bitwise_or),
                                ("^", np.bitwise_xor)) for k in "iu"},
}


def binary(op: str, t: ScalarType) -> BinaryFn:
    """The function computing `a op b` for operands of type `t`."""
    table = _FLOAT_BINOPS if t.is_float else _BOOL_BINOPS if t.is_bool else _INT_BINOPS
    try:
        return table[op]
    except KeyError:
        raise NotImplementedError(f"operator {op!r} on {t}") from None


def binary_ufunc(op: str, t: ScalarType) -> np.ufunc | None:
    """A ufunc for `a op b` that may write into an output array, if there is one."""
    return _INTO.get((op, t.kind))


def _negate(a: Value) -> Value:
    return -a if isinstance(a, Affine) else np.negative(a)


_UNARY: dict[str, Callable[[Value], Value]] = {
    "-": _negate,
    "+": lambda a: a,
    "~": lambda a: np.invert(materialise(a)),
    "not": lambda a: np.logical_not(materialise(a)),
}


def unary(op: str) -> Callable[[Value], Value]:
    return _UNARY[op]


_COMPARE_UFUNCS = {"<": np.less, "<=": np.less_equal, ">": np.greater,
                   ">=": np.greater_equal, "==": np.equal, "!=": np.not_equal}
_FLIPPED = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}


def comparison(op: str) -> BinaryFn:
    """`a op b`, settled from bounds without a vector when an operand is affine."""
    ufunc = _COMPARE_UFUNCS[op]
    flipped = _FLIPPED[op]

    def compare(a: Value, b: Value) -> Value:
        if isinstance(a, Affine):
            decided = a.compare(op, b)
            if decided is not None:
                return decided
        elif isinstance(b, Affine):
            decided = b.compare(flipped, a)
            if decided is not None:
                return decided
        return ufunc(materialise(a), materialise(b))

    return compare
