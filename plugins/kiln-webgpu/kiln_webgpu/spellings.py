"""WGSL spellings of kiln's intrinsics (`WGSLEmitter.spellings`) and the helper functions
they use.

WGSL has most of C's math as overloaded built-ins; where its definition differs from
NumPy's (`pow` of a negative base, `log10`, `erf`, `copysign`, integer `abs`/`min`/`max`
of the most negative value) a helper computes NumPy's answer. Atomics take a pointer
(`&a[i]`), which WGSL cannot pass to a function in the storage address space, so the
compare-and-swap loops (float add/min/max, a strong `atomic_cas`) are helpers per array,
written by the emitter (`atomic_helper`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kiln import ScalarType
from kiln.ir.intrinsics import Spelling

NAMESPACE = "wgsl"

def _index(kind: str, axis: str) -> Callable[[Any, Any, list[str]], str]:
    return lambda emitter, call, args: f"{emitter.index_vector(kind)}.{axis}"


INDEX = {f"{kind}_{axis}": _index(kind, axis)
         for kind in ("thread_idx", "block_idx", "block_dim", "grid_dim") for axis in "xyz"}
"""Index intrinsics are i32 vectors the kernel computes once at its start."""

def _ordered(kind: str) -> Callable[[Any, Any, list[str]], str]:
    """f32 `min`/`max` through a helper (WGSL leaves NaN operands and the sign of equal
    zeros to the driver); other types through the built-in."""

    def spell(emitter: Any, call: Any, args: list[str]) -> str:
        name = f"kiln_f{kind}" if call.args[0].type.name == "f32" else kind
        return f"{name}({args[0]}, {args[1]})"

    return spell


MATH = {
    "sqrt": "kiln_sqrt({0})", "rsqrt": "inverseSqrt({0})", "exp": "exp({0})",
    "exp2": "exp2({0})", "log": "kiln_log({0})", "log2": "log2({0})",
    "log10": "kiln_log10({0})",
    "sin": "sin({0})", "cos": "cos({0})", "tan": "tan({0})", "asin": "kiln_asin({0})",
    "acos": "kiln_acos({0})", "atan": "kiln_atan({0})", "sinh": "sinh({0})", "cosh": "cosh({0})",
    "tanh": "tanh({0})", "floor": "floor({0})", "ceil": "ceil({0})", "trunc": "trunc({0})",
    "round": "round({0})", "erf": "kiln_erf({0})", "atan2": "kiln_atan2({0}, {1})",
    "pow": "kiln_pow({0}, {1})", "copysign": "kiln_copysign({0}, {1})",
    "fma": "fma({0}, {1}, {2})", "abs": "abs({0})", "min": _ordered("min"),
    "max": _ordered("max"), "isnan": "kiln_isnan({0})", "isinf": "kiln_isinf({0})",
}
"""`round` is half to even in WGSL, as Python's; float `min`/`max` are IEEE 754-2019's
minimumNumber/maximumNumber, as on every backend (a NaN operand is ignored, -0.0 < +0.0)."""

SYNC = {"barrier": "workgroupBarrier()", "mem_fence": "storageBarrier()"}

SPELLINGS: dict[str, Spelling] = {**INDEX, **MATH, **SYNC}

HELPERS = {
    "kiln_rounded": """fn kiln_rounded(x: f32) -> f32 {
    return bitcast<f32>(bitcast<u32>(x) | kiln_p.kiln_zero);
}""",
    "kiln_div": """fn kiln_div(a: f32, b: f32) -> f32 {
    let q = a / b;
    let inverse = 1.0f / b;
    if (q == 0.0f || !(abs(q) < 1e30f) || !(abs(b) < 1e30f) || kiln_isinf(inverse)) {
        return q;
    }
    let p = kiln_rounded(q * b);
    let qh = kiln_split(q);
    let bh = kiln_split(b);
    let ql = kiln_rounded(q - qh);
    let bl = kiln_rounded(b - bh);
    let e = kiln_rounded(kiln_rounded(kiln_rounded(kiln_rounded(qh * bh) - p)
        + kiln_rounded(qh * bl)) + kiln_rounded(ql * bh)) + kiln_rounded(ql * bl);
    return fma(kiln_rounded(a - p) - kiln_rounded(e), inverse, q);
}""",
    "kiln_split": """fn kiln_split(x: f32) -> f32 {
    let c = kiln_rounded(4097.0f * x);
    return c - kiln_rounded(c - x);
}""",
    "kiln_sqrt": """fn kiln_sqrt(x: f32) -> f32 {
    let s = sqrt(x);
    if (!(s > 0.0f) || kiln_isinf(s)) { return s; }
    return fma(fma(-s, s, x), 0.5f / s, s);
}""",
    "kiln_log": """fn kiln_log(x: f32) -> f32 {
    if (!(x > 0.0f) || kiln_isinf(x)) { return log(x); }
    var bits = bitcast<u32>(x);
    var e = -126;
    if (bits < 0x00800000u) {
        bits = bitcast<u32>(x * 8388608.0f);
        e = e - 23;
    }
    e = e + i32(bits >> 23u);
    var m = bitcast<f32>((bits & 0x007fffffu) | 0x3f000000u);
    if (m < 0.70710678118654752f) {
        e = e - 1;
        m = m + m - 1.0f;
    } else {
        m = m - 1.0f;
    }
    let z = m * m;
    var y = ((((((((7.0376836292e-2f * m - 1.1514610310e-1f) * m + 1.1676998740e-1f) * m
        - 1.2420140846e-1f) * m + 1.4249322787e-1f) * m - 1.6668057665e-1f) * m
        + 2.0000714765e-1f) * m - 2.4999993993e-1f) * m + 3.3333331174e-1f) * m * z;
    let f = f32(e);
    y = y - 2.12194440e-4f * f - 0.5f * z;
    return m + y + 0.693359375f * f;
}""",
    "kiln_log10": """fn kiln_log10(x: f32) -> f32 {
    return log2(x) * 0.30102999566398120f;
}""",
    "kiln_pow": """fn kiln_pow(a: f32, b: f32) -> f32 {
    if (b == 0.0f || a == 1.0f) { return 1.0f; }
    let r = pow(abs(a), b);
    if (a == 0.0f) { return select(bitcast<f32>(0x7f800000u), 0.0f, b > 0.0f); }
    if (a > 0.0f || kiln_isnan(a)) { return r; }
    if (trunc(b) != b) { return bitcast<f32>(0x7fc00000u); }
    return select(r, -r, abs(b % 2.0f) == 1.0f);
}""",
    "kiln_copysign": """fn kiln_copysign(a: f32, b: f32) -> f32 {
    return bitcast<f32>((bitcast<u32>(a) & 0x7fffffffu) | (bitcast<u32>(b) & 0x80000000u));
}""",
    "kiln_asin": """fn kiln_asin(x: f32) -> f32 {
    let a = abs(x);
    if (!(a <= 1.0f)) { return bitcast<f32>(0x7fc00000u); }
    let big = a > 0.5f;
    let z = select(a * a, 0.5f * (1.0f - a), big);
    let s = select(a, sqrt(z), big);
    let p = ((((4.2163199048e-2f * z + 2.4181311049e-2f) * z + 4.5470025998e-2f) * z
        + 7.4953002686e-2f) * z + 1.6666752422e-1f) * z * s + s;
    let r = select(p, 1.5707963267948966f - 2.0f * p, big);
    return select(r, -r, x < 0.0f);
}""",
    "kiln_acos": """fn kiln_acos(x: f32) -> f32 {
    if (x < -0.5f) { return 3.14159265358979f - 2.0f * kiln_asin(sqrt(0.5f * (1.0f + x))); }
    if (x > 0.5f) { return 2.0f * kiln_asin(sqrt(0.5f * (1.0f - x))); }
    return 1.5707963267948966f - kiln_asin(x);
}""",
    "kiln_atan": """fn kiln_atan(x: f32) -> f32 {
    let a = abs(x);
    var base = 0.0f;
    var z = a;
    if (a > 2.414213562373095f) {
        base = 1.5707963267948966f;
        z = -1.0f / a;
    } else if (a > 0.41421356237309503f) {
        base = 0.7853981633974483f;
        z = (a - 1.0f) / (a + 1.0f);
    }
    let zz = z * z;
    let r = base + ((((8.05374449538e-2f * zz - 1.38776856032e-1f) * zz + 1.99777106478e-1f)
        * zz - 3.33329491539e-1f) * zz * z + z);
    return select(r, -r, x < 0.0f);
}""",
    "kiln_atan2": """fn kiln_atan2(y: f32, x: f32) -> f32 {
    if (x == 0.0f || kiln_isinf(x) || kiln_isinf(y) || kiln_isnan(x) || kiln_isnan(y)) {
        return atan2(y, x);
    }
    let r = kiln_atan(y / x);
    if (x > 0.0f) { return r; }
    return select(r - 3.14159265358979f, r + 3.14159265358979f,
                  (bitcast<u32>(y) & 0x80000000u) == 0u);
}""",
    "kiln_isnan": """fn kiln_isnan(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u;
}""",
    "kiln_fmin": """fn kiln_fmin(a: f32, b: f32) -> f32 {
    if (kiln_isnan(a)) { return b; }
    if (kiln_isnan(b)) { return a; }
    if (a == b) { return bitcast<f32>(bitcast<u32>(a) | bitcast<u32>(b)); }
    return select(b, a, a < b);
}""",
    "kiln_fmax": """fn kiln_fmax(a: f32, b: f32) -> f32 {
    if (kiln_isnan(a)) { return b; }
    if (kiln_isnan(b)) { return a; }
    if (a == b) { return bitcast<f32>(bitcast<u32>(a) & bitcast<u32>(b)); }
    return select(b, a, a > b);
}""",
    "kiln_isinf": """fn kiln_isinf(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7fffffffu) == 0x7f800000u;
}""",
    "kiln_erf": """fn kiln_erf(x: f32) -> f32 {
    let t = 1.0f / (1.0f + 0.5f * abs(x));
    let y = 1.0f - t * exp(-x * x - 1.26551223f + t * (1.00002368f + t * (0.37409196f
        + t * (0.09678418f + t * (-0.18628806f + t * (0.27886807f + t * (-1.13520398f
        + t * (1.48851587f + t * (-0.82215223f + t * 0.17087277f)))))))));
    return select(-y, y, x >= 0.0f);
}""",
}
"""Helpers by name; the emitter adds those a program's text mentions. asin/acos are
asin, acos, atan, atan2 are Cephes' single-precision approximations: Mesa's (within what WGSL
allows) are off by up to 4e-4 relative."""
HELPER_DEPENDENCIES = {"kiln_pow": ("kiln_isnan",), "kiln_fmin": ("kiln_isnan",),
                       "kiln_div": ("kiln_isinf", "kiln_rounded", "kiln_split"),
                       "kiln_split": ("kiln_rounded",), "kiln_sqrt": ("kiln_isinf",),
                       "kiln_log": ("kiln_isinf",),
                       "kiln_fmax": ("kiln_isnan",), "kiln_acos": ("kiln_asin",),
                       "kiln_atan2": ("kiln_atan", "kiln_isinf", "kiln_isnan")}


def _floordiv(t: ScalarType) -> str:
    if not t.is_signed:
        return "fn kiln_floordiv_{t}(a: {T}, b: {T}) -> {T} { return select(a / b, 0u, b == 0u); }"
    return """fn kiln_floordiv_{t}(a: {T}, b: {T}) -> {T} {
    if (b == 0) { return 0; }
    if (b == -1) { return {T}(0u - {U}(a)); }
    let q = a / b;
    return select(q, q - 1, q * b != a && ((a < 0) != (b < 0)));
}"""


def _floormod(t: ScalarType) -> str:
    if t.is_float:
        return ("fn kiln_floormod_{t}(a: {T}, b: {T}) -> {T} { "
                "return a - kiln_rounded(floor(kiln_div(a, b)) * b); }")
    if not t.is_signed:
        return "fn kiln_floormod_{t}(a: {T}, b: {T}) -> {T} { return select(a % b, 0u, b == 0u); }"
    return """fn kiln_floormod_{t}(a: {T}, b: {T}) -> {T} {
    if (b == 0 || b == -1) { return 0; }
    let r = a - (a / b) * b;
    return select(r, r + b, r != 0 && ((r < 0) != (b < 0)));
}"""


def _ipow(t: ScalarType) -> str:
    negative = ("""    if (e < 0) {
        if (b == 1) { return 1; }
        if (b == -1) { return select(1, -1, (e & 1) != 0); }
        return 0;
    }
""" if t.is_signed else "")
    return ("fn kiln_ipow_{t}(b: {T}, e: {T}) -> {T} {\n" + negative + """\
    var r: {U} = 1u;
    var x: {U} = {U}(b);
    var n: {U} = {U}(e);
    while (n != 0u) {
        if ((n & 1u) != 0u) { r = r * x; }
        x = x * x;
        n = n >> 1u;
    }
    return {T}(r);
}""")


WGSL_HELPERS: dict[str, Callable[[ScalarType], str]] = {
    "floordiv": _floordiv, "floormod": _floormod, "ipow": _ipow,
}
"""Templates of the shared emitter's helpers (`{T}` the type, `{U}` its unsigned twin)."""
