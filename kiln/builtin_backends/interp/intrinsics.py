"""The interp implementations of the standard intrinsics: `InterpBackend.spellings`.

Calling conventions (by the intrinsic's category), which the executor follows:
- "index" and "sync": `impl(chunk)`, with the `Chunk` being run;
- "atomic": `impl(flat, index, *values, old=bool)` (see `atomics`);
- "warp": `impl(chunk, *args)`, each argument holding every lane's value (see `warps`);
- anything else ("math", and plugin categories): `impl(*args)`, element-wise on NumPy
  arrays and scalars; the result is converted to the call's type.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from ...ir.intrinsics import Spelling
from .atomics import ATOMICS
from .geometry import BX, BY, BZ, TX, TY, TZ, Chunk
from .values import Affine, Value
from .warps import WARPS


def _index(base: str, axis: int) -> object:
    if base == "thread_idx":
        return lambda chunk: Affine.basis(chunk, (TX, TY, TZ)[axis])
    if base == "block_idx":
        return lambda chunk: Affine.basis(chunk, (BX, BY, BZ)[axis])
    if base == "block_dim":
        return lambda chunk: chunk.launch.block_dim[axis]
    return lambda chunk: chunk.launch.grid_dim[axis]


def _in_lockstep(chunk: Chunk) -> None:
    """barrier / mem_fence: every statement already runs for all lanes before the next one."""


def _rsqrt(x: Value) -> Value:
    return np.reciprocal(np.sqrt(x))


def _fma(a: Value, b: Value, c: Value) -> Value:
    """a * b + c with a single rounding, as the C backends' fma: exact rational arithmetic
    for f64; for f16/f32 the f64 product is exact and the f64 sum is rounded to odd, which
    then rounds to the narrower type exactly once (no double-rounding error)."""
    a, b, c = np.asarray(a), np.asarray(b), np.asarray(c)
    dtype = np.result_type(a, b, c)
    if dtype == np.float64:
        with np.errstate(invalid="ignore", over="ignore"):
            return np.asarray(_fma_f64(a, b, c), dtype=np.float64)
    p = np.multiply(a, b, dtype=np.float64)
    c64 = c.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        s = p + c64
        back = s - p
        error = (p - (s - back)) + (c64 - back)  # the sum's rounding error (TwoSum), exact
        even = (s.view(np.uint64) & 1) == 0
        to_odd = (error != 0) & even & np.isfinite(s)
        s = np.where(to_odd, np.nextafter(s, np.where(error > 0, np.inf, -np.inf)), s)
    return s.astype(dtype)


def _fma_scalar(a: float, b: float, c: float) -> float:
    if not all(map(math.isfinite, (a, b, c))):
        return a * b + c  # infinities and NaNs: the IEEE rules, no rounding involved
    exact = Fraction(a) * Fraction(b) + Fraction(c)
    try:
        result = float(exact)  # correctly rounded
    except OverflowError:
        return math.copysign(math.inf, exact)
    return result if result or exact else math.copysign(0.0, a * b + c)


_fma_f64 = np.frompyfunc(_fma_scalar, 3, 1)


_erf_f64 = np.vectorize(math.erf, otypes=[np.float64])


def _erf(x: Value) -> Value:
    return _erf_f64(x)


def _minimum(a: Value, b: Value) -> Value:
    """IEEE 754-2019 minimumNumber, as every backend: a NaN operand is ignored (`np.fmin`)
    and -0.0 is below +0.0 (`np.fmin` may return either zero)."""
    result = np.fmin(a, b)
    if not _is_float(result):
        return result
    return np.where(a == b, np.where(np.signbit(a), a, b), result)


def _maximum(a: Value, b: Value) -> Value:
    """IEEE 754-2019 maximumNumber: a NaN operand is ignored, +0.0 is above -0.0."""
    result = np.fmax(a, b)
    if not _is_float(result):
        return result
    return np.where(a == b, np.where(np.signbit(a), b, a), result)


def _is_float(value: Value) -> bool:
    return isinstance(value, (np.ndarray, np.floating)) and value.dtype.kind == "f"


MATH = {
    "sqrt": np.sqrt, "rsqrt": _rsqrt, "exp": np.exp, "exp2": np.exp2, "log": np.log,
    "log2": np.log2, "log10": np.log10, "sin": np.sin, "cos": np.cos, "tan": np.tan,
    "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "atan2": np.arctan2,
    "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh, "pow": np.power, "abs": np.abs,
    "floor": np.floor, "ceil": np.ceil, "trunc": np.trunc, "round": np.rint,
    "min": _minimum, "max": _maximum, "fma": _fma, "erf": _erf, "isnan": np.isnan,
    "isinf": np.isinf, "copysign": np.copysign,
}

IMPLEMENTATIONS: dict[str, Spelling] = {
    **{f"{base}_{axis}": _index(base, i)
       for base in ("thread_idx", "block_idx", "block_dim", "grid_dim")
       for i, axis in enumerate("xyz")},
    "barrier": _in_lockstep,
    "mem_fence": _in_lockstep,
    **ATOMICS,
    **MATH,
    **WARPS,
}
