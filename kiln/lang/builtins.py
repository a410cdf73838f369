"""The names kernels use: index objects, intrinsics, shared/local arrays, math.

On the host these are inert markers (calling one outside a kernel raises); the frontend
recognises them by identity and turns them into IR through the intrinsic registry.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ..ir.intrinsics import INDEX_BASES, intrinsics


class KernelOnly:
    """A kiln builtin that only has meaning inside a kernel."""

    def __init__(self, name: str, intrinsic: str | None = None) -> None:
        self.name = name
        self.intrinsic = intrinsic

    def __repr__(self) -> str:
        return f"kiln.{self.name}"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"kiln.{self.name} can only be used inside a @kiln.kernel or @kiln.func")


class IndexObject(KernelOnly):
    """`thread_idx`, `block_idx`, `block_dim`, `grid_dim`: read `.x`, `.y`, `.z` in kernels."""


thread_idx, block_idx, block_dim, grid_dim = (IndexObject(n) for n in INDEX_BASES)
global_id = KernelOnly("global_id")
global_size = KernelOnly("global_size")
static_range = KernelOnly("static_range")
unroll = KernelOnly("unroll")
shared = KernelOnly("shared")
native = KernelOnly("native")
local = KernelOnly("local")
load = KernelOnly("load")  # kiln.load(f32x4, a, i): a[4i:4i+4] as one vector
store = KernelOnly("store")  # kiln.store(a, i, v): v into a[4i:4i+4]

_INTRINSIC_OBJECTS: dict[str, KernelOnly] = {
    name: KernelOnly(name, name)
    for name in intrinsics.names()
    if intrinsics[name].category in ("sync", "atomic", "math", "warp", "vector", "matrix")
}
barrier = _INTRINSIC_OBJECTS["barrier"]
mem_fence = _INTRINSIC_OBJECTS["mem_fence"]


VALUE_INTRINSICS = frozenset(n for n in intrinsics.names("warp") if intrinsics[n].arity == (0, 0))
"""Intrinsics read as values, without a call: `kiln.warp_size`, `kiln.lane_id`."""


def intrinsic_object(name: str) -> KernelOnly:
    return _INTRINSIC_OBJECTS[name]


def register_intrinsic_object(name: str) -> KernelOnly:
    """The object kernels call for a registered intrinsic (`kiln.backend.register_intrinsic`)."""
    found = _INTRINSIC_OBJECTS[name] = KernelOnly(name, name)
    return found


# Python callables that mean an intrinsic when called in a kernel.
_MATH_ALIASES: dict[Callable[..., Any], str] = {
    builtins.abs: "abs", builtins.min: "min", builtins.max: "max", builtins.round: "round",
    math.fabs: "abs", builtins.all: "all", builtins.any: "any",
}
for _name in intrinsics.names("math"):
    if hasattr(math, _name):
        _MATH_ALIASES[getattr(math, _name)] = _name

NUMPY_NAMES: dict[str, str] = {
    "sqrt": "sqrt", "exp": "exp", "exp2": "exp2", "log": "log", "log2": "log2",
    "log10": "log10", "sin": "sin", "cos": "cos", "tan": "tan", "arcsin": "asin",
    "arccos": "acos", "arctan": "atan", "arctan2": "atan2", "sinh": "sinh", "cosh": "cosh",
    "tanh": "tanh", "power": "pow", "abs": "abs", "absolute": "abs", "fabs": "abs",
    "floor": "floor", "ceil": "ceil", "trunc": "trunc", "rint": "round", "round": "round",
    "minimum": "min", "maximum": "max", "fmin": "min", "fmax": "max", "isnan": "isnan",
    "isinf": "isinf", "copysign": "copysign",
}
"""NumPy's spellings of the math intrinsics (`np.exp`, `np.arctan2`, `np.minimum`, ...)."""
for _np_name, _name in NUMPY_NAMES.items():
    _MATH_ALIASES[getattr(np, _np_name)] = _name


def intrinsic_for(obj: Any) -> str | None:
    """The intrinsic a Python object stands for in kernels, if any."""
    if isinstance(obj, KernelOnly):
        return obj.intrinsic
    try:
        return _MATH_ALIASES.get(obj)
    except TypeError:  # unhashable
        return None
