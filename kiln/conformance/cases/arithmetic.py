"""Operators, math intrinsics and conversions, each checked against NumPy."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

import kiln
from kiln import bool_, f32, f64, i8, i16, i32, i64, u8, u16, u32, u64

from ..checks import assert_close, assert_equal, blocks, rng, run
from ..registry import FP64, case, signatures

BLOCK = 64
N = 300  # not a multiple of BLOCK


# ---------------------------------------------------------------- math intrinsics


@signatures((f32[:], f32[:], f32[:], f32[:], f32[:, :], i32),
            (f64[:], f64[:], f64[:], f64[:], f64[:, :], i32))
@kiln.kernel
def math_functions(x, y, z, w, out, n: i32):
    """x in (0.05, 0.95), y in (-2, 2), z holds exact halves, w holds NaN and infinities."""
    i = kiln.global_id(0)
    if i >= n:
        return
    a, b, h, s = x[i], y[i], z[i], w[i]
    out[0, i] = kiln.sqrt(a)
    out[1, i] = kiln.rsqrt(a)
    out[2, i] = kiln.exp(b)
    out[3, i] = kiln.exp2(b)
    out[4, i] = kiln.log(a)
    out[5, i] = kiln.log2(a)
    out[6, i] = kiln.log10(a)
    out[7, i] = kiln.sin(b)
    out[8, i] = kiln.cos(b)
    out[9, i] = kiln.tan(a)
    out[10, i] = kiln.asin(a)
    out[11, i] = kiln.acos(a)
    out[12, i] = kiln.atan(b)
    out[13, i] = kiln.atan2(b, a)
    out[14, i] = kiln.sinh(b)
    out[15, i] = kiln.cosh(b)
    out[16, i] = kiln.tanh(b)
    out[17, i] = kiln.pow(a, b)
    out[18, i] = kiln.abs(b)
    out[19, i] = kiln.floor(h)
    out[20, i] = kiln.ceil(h)
    out[21, i] = kiln.trunc(h)
    out[22, i] = kiln.round(h)
    out[23, i] = kiln.min(a, b)
    out[24, i] = kiln.max(a, b)
    out[25, i] = kiln.fma(a, b, h)
    out[26, i] = kiln.erf(b)
    out[27, i] = kiln.isnan(s)
    out[28, i] = kiln.isinf(s)
    out[29, i] = kiln.copysign(a, b)
    out[30, i] = kiln.min(s, a)  # fmin: a NaN operand gives the other one
    out[31, i] = kiln.max(s, a)
    # the spellings of Python's math module and builtins mean the same intrinsics
    out[32, i] = math.sqrt(a) + math.floor(h) + abs(b) + round(h) + min(a, b)
    out[33, i] = a ** b


_erf = np.vectorize(math.erf, otypes=[np.float64])
Reference = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], np.ndarray]
MATH_REFERENCE: tuple[tuple[str, Reference], ...] = (
    ("sqrt", lambda a, b, h, s: np.sqrt(a)),
    ("rsqrt", lambda a, b, h, s: 1 / np.sqrt(a)),
    ("exp", lambda a, b, h, s: np.exp(b)),
    ("exp2", lambda a, b, h, s: np.exp2(b)),
    ("log", lambda a, b, h, s: np.log(a)),
    ("log2", lambda a, b, h, s: np.log2(a)),
    ("log10", lambda a, b, h, s: np.log10(a)),
    ("sin", lambda a, b, h, s: np.sin(b)),
    ("cos", lambda a, b, h, s: np.cos(b)),
    ("tan", lambda a, b, h, s: np.tan(a)),
    ("asin", lambda a, b, h, s: np.arcsin(a)),
    ("acos", lambda a, b, h, s: np.arccos(a)),
    ("atan", lambda a, b, h, s: np.arctan(b)),
    ("atan2", lambda a, b, h, s: np.arctan2(b, a)),
    ("sinh", lambda a, b, h, s: np.sinh(b)),
    ("cosh", lambda a, b, h, s: np.cosh(b)),
    ("tanh", lambda a, b, h, s: np.tanh(b)),
    ("pow", lambda a, b, h, s: np.power(a, b)),
    ("abs", lambda a, b, h, s: np.abs(b)),
    ("floor", lambda a, b, h, s: np.floor(h)),
    ("ceil", lambda a, b, h, s: np.ceil(h)),
    ("trunc", lambda a, b, h, s: np.trunc(h)),
    ("round (half to even)", lambda a, b, h, s: np.round(h)),
    ("min", lambda a, b, h, s: np.minimum(a, b)),
    ("max", lambda a, b, h, s: np.maximum(a, b)),
    ("fma", lambda a, b, h, s: a * b + h),
    ("erf", lambda a, b, h, s: _erf(b)),
    ("isnan", lambda a, b, h, s: np.isnan(s)),
    ("isinf", lambda a, b, h, s: np.isinf(s)),
    ("copysign", lambda a, b, h, s: np.copysign(a, b)),
    ("min with NaN (fmin)", lambda a, b, h, s: np.fmin(s, a)),
    ("max with NaN (fmax)", lambda a, b, h, s: np.fmax(s, a)),
    ("math.*/builtin spellings",
     lambda a, b, h, s: np.sqrt(a) + np.floor(h) + np.abs(b) + np.round(h) + np.minimum(a, b)),
    ("** on floats", lambda a, b, h, s: np.power(a, b)),
)


def _math_inputs(dtype: type[np.floating]) -> tuple[np.ndarray, ...]:
    r = rng(10)
    x = r.uniform(0.05, 0.95, N).astype(dtype)
    y = r.uniform(-2, 2, N).astype(dtype)
    z = ((np.arange(N) - N // 2) * 0.25).astype(dtype)  # ..., -0.5, -0.25, 0, 0.25, 0.5, ...
    w = r.uniform(-3, 3, N).astype(dtype)
    w[::7], w[1::11], w[2::13] = np.nan, np.inf, -np.inf
    return x, y, z, w


def _check_math(device: kiln.Device, dtype: type[np.floating], rtol: float, atol: float) -> None:
    x, y, z, w = _math_inputs(dtype)
    out = np.zeros((len(MATH_REFERENCE), N), dtype)
    run(device, math_functions, blocks(N, BLOCK), BLOCK, x, y, z, w, out, N)
    wide = [v.astype(np.float64) for v in (x, y, z, w)]
    for row, (name, reference) in enumerate(MATH_REFERENCE):
        with np.errstate(invalid="ignore"):
            expected = reference(*wide).astype(dtype)
        assert_close(out[row], expected, f"{name} on {np.dtype(dtype).name}", rtol=rtol,
                     atol=atol)


@case()
def math_f32(device):
    """Every math intrinsic on f32 (and the math-module spellings) against NumPy."""
    _check_math(device, np.float32, rtol=2e-6, atol=1e-6)


@case(requires=(FP64,))
def math_f64(device):
    """Every math intrinsic on f64 against NumPy."""
    _check_math(device, np.float64, rtol=1e-13, atol=1e-15)


@signatures((f32[:], f32[:], f32[:, :]), (f64[:], f64[:], f64[:, :]))
@kiln.kernel
def min_max_pairs(a, b, out):
    i = kiln.global_id(0)
    out[0, i] = min(a[i], b[i])
    out[1, i] = max(a[i], b[i])
    out[2, i] = np.minimum(a[i], b[i])
    out[3, i] = kiln.max(a[i], b[i], b[i])


def _check_min_max(device: kiln.Device, dtype: type[np.floating]) -> None:
    special = np.array([-0.0, 0.0, np.nan, 1.0, -1.0, np.inf, -np.inf], dtype)
    a, b = (v.ravel() for v in np.meshgrid(special, special))
    out = np.zeros((4, a.size), dtype)
    run(device, min_max_pairs, 1, a.size, a, b, out)
    both_zero = (a == 0) & (b == 0)
    lo = np.where(both_zero, np.where(np.signbit(a), a, b), np.fmin(a, b))
    hi = np.where(both_zero, np.where(np.signbit(a), b, a), np.fmax(a, b))
    for row, expected, what in ((0, lo, "min"), (1, hi, "max"), (2, lo, "np.minimum"),
                                (3, hi, "kiln.max of 3")):
        assert_equal(out[row], expected, f"{what} on {np.dtype(dtype).name}")
        assert_equal(np.signbit(out[row]), np.signbit(expected), f"{what}'s sign of zero")


@case()
def min_max_signed_zeros_and_nan(device):
    """min/max are IEEE 754-2019 minimumNumber/maximumNumber: -0.0 < +0.0, NaN ignored."""
    _check_min_max(device, np.float32)
    if device.capabilities.fp64:
        _check_min_max(device, np.float64)


# ---------------------------------------------------------------- integer operators


@signatures(*((t[:], t[:], t[:], t[:, :], i32) for t in (i32, u32, i64, u64)))
@kiln.kernel
def integer_ops(a, b, shift, out, n: i32):
    i = kiln.global_id(0)
    if i < n:
        p, q, k = a[i], b[i], shift[i]
        out[0, i] = p & q
        out[1, i] = p | q
        out[2, i] = p ^ q
        out[3, i] = ~p
        out[4, i] = p << k
        out[5, i] = p >> k
        out[6, i] = p + q
        out[7, i] = p - q
        out[8, i] = p * q
        out[9, i] = p // q  # floors toward minus infinity; by zero gives 0
        out[10, i] = p % q  # takes the divisor's sign; by zero gives 0
        out[11, i] = min(p, q)
        out[12, i] = max(p, q)
        out[13, i] = p < q
        out[14, i] = p <= q
        out[15, i] = p > q
        out[16, i] = p >= q
        out[17, i] = p == q
        out[18, i] = p != q
        out[19, i] = -p
        out[20, i] = +p


def _integer_reference(a: np.ndarray, b: np.ndarray, k: np.ndarray) -> list[tuple[str, object]]:
    with np.errstate(divide="ignore", over="ignore"):
        safe = np.where(b == 0, 1, b)
        return [
            ("&", a & b), ("|", a | b), ("^", a ^ b), ("~", ~a), ("<<", a << k), (">>", a >> k),
            ("+", a + b), ("-", a - b), ("*", a * b),
            ("//", np.where(b == 0, 0, a // safe)), ("%", np.where(b == 0, 0, a % safe)),
            ("min", np.minimum(a, b)), ("max", np.maximum(a, b)),
            ("<", a < b), ("<=", a <= b), (">", a > b), (">=", a >= b), ("==", a == b),
            ("!=", a != b), ("unary -", (0 - a).astype(a.dtype)), ("unary +", a),
        ]


def _integer_inputs(t: kiln.ScalarType) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r = rng(11)
    half = N // 2
    if t.is_signed:  # small values exercise // and % on negatives; larger ones the bits
        big = 2 ** (t.bits // 2 - 1)  # products stay clear of signed overflow (undefined)
        a = np.concatenate([r.integers(-20, 20, half), r.integers(-big, big, half)])
        b = np.concatenate([r.integers(-6, 6, half), r.integers(-big, big, half)])
    else:  # unsigned arithmetic wraps: use the whole range
        top = int(t.range()[1])
        a = np.concatenate([r.integers(0, 40, half, np.uint64), r.integers(0, top, half,
                                                                           np.uint64)])
        b = np.concatenate([r.integers(0, 6, half, np.uint64), r.integers(0, top, half,
                                                                          np.uint64)])
    a, b = a.astype(t.dtype), b.astype(t.dtype)
    b[:12] = 0
    return a, b, r.integers(0, t.bits, N).astype(t.dtype)


def _check_integers(device: kiln.Device, t: kiln.ScalarType) -> None:
    a, b, k = _integer_inputs(t)
    out = np.zeros((21, N), t.dtype)
    run(device, integer_ops, blocks(N, BLOCK), BLOCK, a, b, k, out, N)
    for row, (op, expected) in enumerate(_integer_reference(a, b, k)):
        assert_equal(out[row], np.asarray(expected).astype(t.dtype), f"{t} {op}")


for _t in (i32, u32, i64, u64):
    case(f"integer_ops_{_t}", description=f"Bitwise, shift, arithmetic (// and % on "
         f"negatives, by zero), min/max and comparison operators on {_t}"
         )(lambda device, t=_t: _check_integers(device, t))


@kiln.kernel
def integer_power(base: i32[:], exponent: i32[:], out: i32[:], n: i32):
    i = kiln.global_id(0)
    if i < n:
        out[i] = base[i] ** exponent[i]


def _int_power(base: int, exponent: int) -> int:
    """kiln's integer `**`: exact for exponent >= 0, else 0 except for bases 1 and -1."""
    if exponent >= 0 or base in (1, -1):
        return base ** abs(exponent)
    return 0


@case()
def integer_power_i32(device):
    """`**` on integers, negative exponents included."""
    base = np.repeat(np.arange(-3, 4, dtype=np.int32), 8)
    exponent = np.tile(np.arange(-2, 6, dtype=np.int32), 7)
    out = np.zeros(base.size, np.int32)
    run(device, integer_power, blocks(base.size, BLOCK), BLOCK, base, exponent, out, base.size)
    expected = [_int_power(int(b), int(e)) for b, e in zip(base, exponent)]
    assert_equal(out, np.array(expected, np.int32), "base ** exponent")


@signatures((i32[:], i32[:], i32[:], i32[:], i32), (i64[:], i64[:], i64[:], i64[:], i32))
@kiln.kernel
def divide(a, b, quotient, remainder, n: i32):
    i = kiln.global_id(0)
    if i < n:
        quotient[i] = a[i] // b[i]
        remainder[i] = a[i] % b[i]


@case()
def integer_division_edges(device):
    """`//` and `%` for every sign combination, by zero (gives 0) and MIN // -1 (wraps)."""
    for t in (i32, i64):
        lo = t.range()[0]
        pairs = [(a, b) for a in (-7, -6, -1, 0, 1, 6, 7) for b in (-3, -1, 0, 1, 3)]
        pairs += [(lo, -1), (lo, 1), (lo, 2), (lo, -2), (lo, 0), (lo + 1, -1)]
        a, b = (np.array(column, t.dtype) for column in zip(*pairs))
        q, r = np.zeros_like(a), np.zeros_like(a)
        run(device, divide, 1, BLOCK, a, b, q, r, len(pairs))
        wrap = t.dtype.type
        expected_q = [wrap(0) if y == 0 else wrap(x // y) if x // y <= t.range()[1] else wrap(lo)
                      for x, y in pairs]
        expected_r = [0 if y == 0 else x % y for x, y in pairs]
        assert_equal(q, np.array(expected_q, t.dtype), f"{t} //")
        assert_equal(r, np.array(expected_r, t.dtype), f"{t} %")


# ---------------------------------------------------------------- float operators


@signatures((f32[:], f32[:], f32[:, :], i32), (f64[:], f64[:], f64[:, :], i32))
@kiln.kernel
def float_ops(a, b, out, n: i32):
    i = kiln.global_id(0)
    if i < n:
        p, q = a[i], b[i]
        out[0, i] = p + q
        out[1, i] = p - q
        out[2, i] = p * q
        out[3, i] = p / q
        out[4, i] = p // q  # floor(p / q)
        out[5, i] = p % q  # p - floor(p / q) * q: the divisor's sign
        out[6, i] = -p
        out[7, i] = (p < q) + 2 * (p <= q) + 4 * (p > q) + 8 * (p >= q) + 16 * (p == q) \
            + 32 * (p != q)


def _check_floats(device: kiln.Device, dtype: type[np.floating], rtol: float, atol: float) -> None:
    r = rng(12)
    b = r.uniform(0.5, 4, N) * r.choice([-1, 1], N)
    quotient = r.integers(-5, 5, N) + r.uniform(0.2, 0.8, N)  # never near an integer
    a = (b * quotient).astype(dtype)
    b = b.astype(dtype)
    a[:4] = b[:4]  # equal operands for == and the comparisons
    quotient[:4] = 1
    out = np.zeros((8, N), dtype)
    run(device, float_ops, blocks(N, BLOCK), BLOCK, a, b, out, N)
    floor_q = np.floor(quotient)
    cmp = ((a < b) + 2 * (a <= b) + 4 * (a > b) + 8 * (a >= b) + 16 * (a == b)
           + 32 * (a != b))
    name = np.dtype(dtype).name
    for row, (op, expected) in enumerate([
        ("+", a + b), ("-", a - b), ("*", a * b), ("/", a / b), ("//", floor_q),
        ("%", a - floor_q * b), ("unary -", -a),
    ]):
        assert_close(out[row], np.asarray(expected, dtype), f"{name} {op}", rtol=rtol,
                     atol=atol)
    assert_equal(out[7], cmp.astype(dtype), f"{name} comparisons")


@case()
def float_ops_f32(device):
    """Float arithmetic, `//` and `%` with floor semantics on negatives, comparisons."""
    _check_floats(device, np.float32, rtol=1e-5, atol=1e-4)


@case(requires=(FP64,))
def float_ops_f64(device):
    """f64 arithmetic, `//` and `%` with floor semantics on negatives, comparisons."""
    _check_floats(device, np.float64, rtol=1e-13, atol=1e-12)


# ---------------------------------------------------------------- conversions and types


@kiln.kernel
def casts(f: f32[:], k: i32[:], fi: i32[:], kf: f32[:], k8: i8[:], ku8: u8[:], ku16: u16[:],
          big: i64[:], fb: bool_[:], bi: i32[:], n: i32):
    i = kiln.global_id(0)
    if i < n:
        fi[i] = i32(f[i])  # truncates toward zero
        kf[i] = f32(k[i])  # rounds to nearest
        k8[i] = i8(k[i])  # integers narrow modulo 2**bits
        ku8[i] = u8(k[i])
        ku16[i] = u16(k[i])
        big[i] = i64(k[i]) * 3000000000
        fb[i] = bool(f[i])
        bi[i] = i32(f[i] > 0.0) + int(k[i] > 0)


@case()
def casts_scalar(device):
    """Conversions by calling a type: float<->int, narrowing, widening, to and from bool."""
    r = rng(13)
    f = (r.uniform(-100, 100, N) * r.integers(0, 2, N)).astype(np.float32)
    k = r.integers(-2**31, 2**31 - 1, N, dtype=np.int64).astype(np.int32)
    k[:3] = (2**24 + 1, -1, 255)
    outs = dict(fi=np.zeros(N, np.int32), kf=np.zeros(N, np.float32), k8=np.zeros(N, np.int8),
                ku8=np.zeros(N, np.uint8), ku16=np.zeros(N, np.uint16),
                big=np.zeros(N, np.int64), fb=np.zeros(N, np.bool_), bi=np.zeros(N, np.int32))
    run(device, casts, blocks(N, BLOCK), BLOCK, f, k, *outs.values(), N)
    expected = dict(fi=np.trunc(f).astype(np.int32), kf=k.astype(np.float32),
                    k8=k.astype(np.int8), ku8=k.astype(np.uint8), ku16=k.astype(np.uint16),
                    big=k.astype(np.int64) * 3000000000, fb=f != 0,
                    bi=(f > 0).astype(np.int32) + (k > 0))
    for name, out in outs.items():
        assert_equal(out, expected[name], f"cast {name}")


@kiln.kernel
def f64_precision(x: f64[:], y: f64[:], out: f64[:], lowered: f32[:], scale: f64, n: i32):
    i = kiln.global_id(0)
    if i < n:
        big = x[i] * scale
        out[i] = (big + y[i]) - big  # needs f64: in f32, y would vanish beside big
        lowered[i] = f32(x[i])


@case(requires=(FP64,))
def f64_kernel(device):
    """f64 arithmetic (and an f64 scalar argument) keeps precision f32 would lose."""
    r = rng(14)
    x, y = r.uniform(1, 2, N), r.uniform(0.25, 0.75, N)
    out, lowered = np.zeros(N), np.zeros(N, np.float32)
    run(device, f64_precision, blocks(N, BLOCK), BLOCK, x, y, out, lowered, 1.0e8, N)
    assert_close(out, y, "f64 result", rtol=1e-6)  # f32 would be off by whole units
    assert_equal(lowered, x.astype(np.float32), "f64 -> f32")


SMALL_TYPES = (i8, u8, i16, u16, i64, u64)


@signatures(*((t[:], t[:], t, t[:], t[:], bool_[:], i32) for t in SMALL_TYPES))
@kiln.kernel
def element_types(a, b, k, out, biggest, less, n: i32):
    i = kiln.global_id(0)
    if i < n:
        out[i] = a[i] * 3 + b[i] - k  # small types compute in i32 and wrap when stored
        biggest[i] = max(a[i], b[i])
        less[i] = a[i] < b[i]


def _check_element_type(device: kiln.Device, t: kiln.ScalarType) -> None:
    r = rng(15)
    lo, hi = map(int, t.range())
    if t.bits == 64:  # stay clear of signed overflow, which is undefined
        lo, hi = (-(2**40), 2**40) if t.is_signed else (0, 2**64 - 1)
    a = r.integers(lo, hi, N, dtype=np.uint64 if t == u64 else np.int64).astype(t.dtype)
    b = r.integers(lo, hi, N, dtype=np.uint64 if t == u64 else np.int64).astype(t.dtype)
    k = t.dtype.type(7)
    out, biggest, less = np.zeros(N, t.dtype), np.zeros(N, t.dtype), np.zeros(N, np.bool_)
    run(device, element_types, blocks(N, BLOCK), BLOCK, a, b, k, out, biggest, less, N)
    if t == u64:
        expected = a * np.uint64(3) + b - k
    else:
        expected = (a.astype(np.int64) * 3 + b - int(k)).astype(t.dtype)
    assert_equal(out, expected, f"{t} a * 3 + b - k")
    assert_equal(biggest, np.maximum(a, b), f"{t} max")
    assert_equal(less, a < b, f"{t} <")


for _t in SMALL_TYPES:
    case(f"element_type_{_t}", description=f"{_t} arrays and scalars: arithmetic that wraps "
         "when stored, max, comparison")(lambda device, t=_t: _check_element_type(device, t))


@kiln.kernel
def bool_ops(x: f32[:], mask: bool_[:], out: bool_[:, :], invert: bool, n: i32):
    i = kiln.global_id(0)
    if i < n:
        p = x[i] > 0.5
        q = mask[i] != invert
        out[0, i] = p and q
        out[1, i] = p or q
        out[2, i] = not q
        out[3, i] = p ^ q
        out[4, i] = p != q
        out[5, i] = p & q
        out[6, i] = p | q
        out[7, i] = bool(x[i])


@case()
def bool_arrays(device):
    """bool_ arrays and a bool argument; and, or, not, ^, &, | and != on bools."""
    r = rng(16)
    x = r.random(N).astype(np.float32)
    x[::5] = 0
    mask = r.random(N) < 0.5
    out = np.zeros((8, N), np.bool_)
    run(device, bool_ops, blocks(N, BLOCK), BLOCK, x, ~mask, out, True, N)
    p = x > 0.5
    for row, (op, expected) in enumerate([
        ("and", p & mask), ("or", p | mask), ("not", ~mask), ("^", p ^ mask),
        ("!=", p != mask), ("&", p & mask), ("|", p | mask), ("from f32", x != 0),
    ]):
        assert_equal(out[row], expected, f"bool {op}")
