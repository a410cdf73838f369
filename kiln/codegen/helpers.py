"""Small C helper functions the emitter adds to a program only when it uses them.

Each helper is a template over: `{Q}` the dialect's helper qualifier, `{T}` the C type,
`{U}` the unsigned C type of the same width, `{t}` the kiln type name and `{F}` the libm
suffix (`f` for f32). A helper is named `kiln_<kind>_<t>`; dialects add kinds (atomics).
"""

from __future__ import annotations

from collections.abc import Callable

from ..ir.types import ScalarType

HelperTemplate = Callable[[ScalarType], str]


def _floordiv(t: ScalarType) -> str:
    if not t.is_signed:
        return "{Q} {T} kiln_floordiv_{t}({T} a, {T} b) { return b == 0 ? 0 : a / b; }"
    return """{Q} {T} kiln_floordiv_{t}({T} a, {T} b) {
    if (b == 0) return 0;
    if (b == -1) return ({T})(0 - ({U})a);
    {T} q = a / b;
    return (q * b != a && (a < 0) != (b < 0)) ? q - 1 : q;
}"""


def _floormod(t: ScalarType) -> str:
    if t.is_float:
        return "{Q} {T} kiln_floormod_{t}({T} a, {T} b) { return a - floor{F}(a / b) * b; }"
    if not t.is_signed:
        return "{Q} {T} kiln_floormod_{t}({T} a, {T} b) { return b == 0 ? 0 : a % b; }"
    return """{Q} {T} kiln_floormod_{t}({T} a, {T} b) {
    if (b == 0 || b == -1) return 0;
    {T} r = a % b;
    return (r != 0 && (r < 0) != (b < 0)) ? r + b : r;
}"""


def _ipow(t: ScalarType) -> str:
    negative = ("    if (e < 0) return b == 1 ? 1 : b == -1 ? ((e & 1) ? -1 : 1) : 0;\n"
                if t.is_signed else "")
    return ("{Q} {T} kiln_ipow_{t}({T} b, {T} e) {\n" + negative + """\
    {U} r = 1, x = ({U})b, n = ({U})e;
    while (n) {
        if (n & 1) r *= x;
        x *= x;
        n >>= 1;
    }
    return ({T})r;
}""")


def _minmax(op: str, name: str) -> HelperTemplate:
    text = f"{{Q}} {{T}} kiln_{name}_{{t}}({{T}} a, {{T}} b) {{ return a {op} b ? a : b; }}"
    return lambda t: text


def _float_minmax(op: str, name: str) -> HelperTemplate:
    """IEEE 754-2019 minimumNumber / maximumNumber: a NaN operand is ignored (as C's
    `fmin`/`fmax`), and -0.0 is below +0.0 (where C lets `fmin` return either zero)."""
    sign = "" if name == "min" else "!"
    keep_a = f"a {op} b || (a == b && {sign}signbit(a)) || b != b"
    text = f"{{Q}} {{T}} kiln_f{name}_{{t}}({{T}} a, {{T}} b) {{ return {keep_a} ? a : b; }}"
    return lambda t: text


def _abs(t: ScalarType) -> str:
    if not t.is_signed:
        return "{Q} {T} kiln_abs_{t}({T} a) { return a; }"
    return "{Q} {T} kiln_abs_{t}({T} a) { return a < 0 ? ({T})(0 - ({U})a) : a; }"


_BITS = "union { unsigned int u; float f; } v;"
"""bf16 is the top half of an f32 (`unsigned int` is 32 bits in C, OpenCL C and CUDA)."""


def _to_f32(t: ScalarType) -> str:
    """bf16 -> f32 (exact): the bits shifted into the top half."""
    return f"""{{Q}} float kiln_to_f32_{{t}}({{T}} h) {{
    {_BITS}
    v.u = (unsigned int)h << 16;
    return v.f;
}}"""


def _from_f32(t: ScalarType) -> str:
    """f32 -> bf16, rounded to nearest even; a NaN stays a (quiet) NaN of the same sign."""
    return f"""{{Q}} {{T}} kiln_from_f32_{{t}}(float f) {{
    {_BITS}
    v.f = f;
    if ((v.u & 0x7fffffffu) > 0x7f800000u) return ({{T}})((v.u >> 16) | 0x40u);
    return ({{T}})((v.u + 0x7fffu + ((v.u >> 16) & 1u)) >> 16);
}}"""


C_HELPERS: dict[str, HelperTemplate] = {
    "floordiv": _floordiv,
    "floormod": _floormod,
    "ipow": _ipow,
    "min": _minmax("<", "min"),
    "max": _minmax(">", "max"),
    "fmin": _float_minmax("<", "min"),
    "fmax": _float_minmax(">", "max"),
    "abs": _abs,
    "to_f32": _to_f32,
    "from_f32": _from_f32,
}
