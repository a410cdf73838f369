"""The interp implementations of the standard intrinsics, registered under namespace "interp".

Calling conventions (by the intrinsic's category), which the executor follows:
- "index" and "sync": `impl(chunk)`, with the `Chunk` being run;
- "atomic": `impl(flat, index, *values, old=bool)` (see `atomics`);
- "warp": `impl(chunk, *args)`, each argument holding every lane's value (see `warps`);
- anything else ("math", and plugin categories): `impl(*args)`, element-wise on NumPy
  arrays and scalars; the result is converted to the call's type.
"""

from __future__ import annotations

import math

import numpy as np

from ...ir.intrinsics import intrinsics
from .atomics import ATOMICS
from .geometry import BX, BY, BZ, TX, TY, TZ, Chunk
from .values import Affine, Value
from .warps import WARPS

NAMESPACE = "interp"


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
    """a * b + c, with the product exact for f16/f32 (computed in f64)."""
    return np.add(np.multiply(a, b, dtype=np.float64), c, dtype=np.float64)


_erf_f64 = np.vectorize(math.erf, otypes=[np.float64])


def _erf(x: Value) -> Value:
    return _erf_f64(x)


MATH = {
    "sqrt": np.sqrt, "rsqrt": _rsqrt, "exp": np.exp, "exp2": np.exp2, "log": np.log,
    "log2": np.log2, "log10": np.log10, "sin": np.sin, "cos": np.cos, "tan": np.tan,
    "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "atan2": np.arctan2,
    "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh, "pow": np.power, "abs": np.abs,
    "floor": np.floor, "ceil": np.ceil, "trunc": np.trunc, "round": np.rint,
    "min": np.fmin, "max": np.fmax, "fma": _fma, "erf": _erf, "isnan": np.isnan,
    "isinf": np.isinf, "copysign": np.copysign,
}

intrinsics.implement(NAMESPACE, {
    **{f"{base}_{axis}": _index(base, i)
       for base in ("thread_idx", "block_idx", "block_dim", "grid_dim")
       for i, axis in enumerate("xyz")},
    "barrier": _in_lockstep,
    "mem_fence": _in_lockstep,
    **ATOMICS,
    **MATH,
    **WARPS,
})
