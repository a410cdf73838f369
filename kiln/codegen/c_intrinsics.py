"""The C-family spellings of the standard math intrinsics: `CEmitter.spellings`.

C99 `<math.h>` names with the `f` suffix selected for f32; integer `abs`/`min`/`max` use
small helpers. Dialects override single entries in their own `spellings` (e.g. CUDA's
`rsqrtf`). Index, sync and atomic intrinsics differ per backend and are not spelled here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..ir import nodes as ir
from ..ir.intrinsics import BINARY_FLOAT_MATH, UNARY_FLOAT_MATH, Spelling
from ..ir.types import ScalarType

if TYPE_CHECKING:
    from .emitter import CEmitter

LIBM_NAMES = {"round": "rint"}  # round half to even, as Python and NumPy do


def _arg_type(call: ir.IntrinsicCall) -> ScalarType:
    t = call.args[0].type
    assert isinstance(t, ScalarType)
    return t


_ARITY = {**{n: 1 for n in UNARY_FLOAT_MATH}, **{n: 2 for n in BINARY_FLOAT_MATH}, "fma": 3}


def _libm(name: str) -> str:
    """`sqrt{f}({0})`: the libm function, `f`-suffixed for f32 by the emitter."""
    args = ", ".join(f"{{{i}}}" for i in range(_ARITY[name]))
    return f"{LIBM_NAMES.get(name, name)}{{f}}({args})"


def _numeric(kind: str, float_spelling: str | None = None):
    """abs/min/max: a helper for integers; for floats libm's function, or the helper
    `f<kind>` without one (min and max order -0.0 below +0.0, which C's fmin need not)."""

    def spell(emitter: CEmitter, call: ir.IntrinsicCall, args: list[str]) -> str:
        t = _arg_type(call)
        if t.is_float and float_spelling is not None:
            return float_spelling.format(*args, f=emitter.float_suffix(t))
        helper = emitter.use_helper(f"f{kind}" if t.is_float else kind, t)
        return f"{helper}({', '.join(args)})"

    return spell


C_MATH: dict[str, Spelling] = {name: _libm(name) for name in _ARITY}
C_MATH.update({
    "rsqrt": "1 / sqrt{f}({0})",
    "abs": _numeric("abs", "fabs{f}({0})"),
    "min": _numeric("min"),
    "max": _numeric("max"),
    "isnan": "(isnan({0}) != 0)",  # C only promises nonzero (glibc's isinf(-inf) is -1)
    "isinf": "(isinf({0}) != 0)",
})
