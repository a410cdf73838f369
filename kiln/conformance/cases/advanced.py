"""The advanced kernel language: warp operations, f16, bf16, native code, recursion, unrolling
hints and generics. Expected values follow docs/language-advanced.md; warp results are
computed for the device's own warp size."""

from __future__ import annotations

import ml_dtypes
import numpy as np

import kiln
from kiln import bf16, f16, f32, f64, i32, u32, u64

from ..checks import assert_close, assert_equal, blocks, rng, run
from ..registry import Requirement, Skipped, case, signatures

WARP_BLOCK = 64
BLOCK = 64
FP16 = Requirement("f16", lambda caps: None if caps.fp16 else f"{caps.name} has no f16 support")


@kiln.kernel
def warp_operations(x: i32[:], y: f32[:], out: i32[:, :], fout: f32[:, :], bits: u64[:]):
    i = kiln.global_id(0)
    v = x[i]
    lane = kiln.lane_id
    total = v
    mask = kiln.warp_size // 2
    while mask > 0:  # butterfly: every lane ends with the warp's sum
        total += kiln.shuffle_xor(total, mask)
        mask //= 2
    out[0, i] = total
    out[1, i] = kiln.shuffle(v, 0)
    out[2, i] = kiln.shuffle(v, lane + 3)
    out[3, i] = kiln.shuffle_down(v, 1)
    out[4, i] = lane
    out[5, i] = kiln.warp_size
    out[6, i] = i32(kiln.vote_any(v > 90)) + 2 * i32(kiln.vote_all(v > 2))
    fout[0, i] = kiln.shuffle_down(y[i], 2)
    fout[1, i] = kiln.shuffle_xor(y[i], 1)
    bits[i] = kiln.ballot(v % 3 == 0)


def warp_reference(x: np.ndarray, y: np.ndarray, width: int, block: int
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The documented results for warps of `width` threads in blocks of `block` threads."""
    n = len(x)
    lane = np.arange(n) % block % width
    base = np.arange(n) - lane

    def read(values: np.ndarray, source: np.ndarray) -> np.ndarray:
        inside = (source >= 0) & (source < width)
        return values[np.where(inside, base + np.where(inside, source, 0), np.arange(n))]

    warps = x.reshape(-1, width)
    per_warp = np.repeat
    out = np.stack([
        per_warp(warps.sum(axis=1), width),
        read(x, np.zeros(n, np.int64)),
        read(x, (lane + 3) % width),
        read(x, lane + 1),
        lane,
        np.full(n, width),
        per_warp((warps > 90).any(axis=1) + 2 * (warps > 2).all(axis=1), width),
    ]).astype(np.int32)
    fout = np.stack([read(y, lane + 2), read(y, lane ^ 1)]).astype(np.float32)
    weights = np.uint64(1) << lane.astype(np.uint64)
    bits = per_warp(((x % 3 == 0).reshape(-1, width) * weights.reshape(-1, width)).sum(axis=1),
                    width).astype(np.uint64)
    return out, fout, bits


@case()
def warp_operations_i32_f32(device):
    """Shuffles (indexed, down, xor), lane ids, votes and ballots within each warp, for the
    device's warp size (1 where every thread is its own warp)."""
    width = device.capabilities.warp_size
    if WARP_BLOCK % width:
        raise Skipped(f"a warp of {width} threads does not divide a block of {WARP_BLOCK}")
    n = 4 * WARP_BLOCK
    x = rng(60).integers(0, 100, n).astype(np.int32)
    y = rng(61).integers(-50, 50, n).astype(np.float32)
    out = np.zeros((7, n), np.int32)
    fout = np.zeros((2, n), np.float32)
    bits = np.zeros(n, np.uint64)
    run(device, warp_operations, n // WARP_BLOCK, WARP_BLOCK, x, y, out, fout, bits)
    expected, fexpected, bexpected = warp_reference(x, y, width, WARP_BLOCK)
    for row, what in enumerate(("xor butterfly sum", "shuffle from lane 0", "rotating shuffle",
                                "shuffle_down by 1", "lane_id", "warp_size", "votes")):
        assert_equal(out[row], expected[row], what)
    assert_equal(fout, fexpected, "f32 shuffles")
    assert_equal(bits, bexpected, "ballot")


@kiln.kernel
def half_arithmetic(a: f16[:], b: f16[:], out: f16[:, :], n: i32):
    i = kiln.global_id(0)
    if i < n:
        x = a[i]
        y = b[i]
        out[0, i] = x * y + x
        out[1, i] = x / y - f16(0.25)
        out[2, i] = kiln.sqrt(x)
        out[3, i] = f16(f32(x) * 3.0)
        out[4, i] = max(x, y) if x != y else -x
        out[5, i] = x // y
        out[6, i] = kiln.exp(x * f16(0.5))


@case(requires=(FP16,))
def f16_arithmetic(device):
    """f16 storage and arithmetic: each operation rounds to f16, as NumPy's float16."""
    n = 300
    a = rng(62).uniform(0.1, 8, n).astype(np.float16)
    b = rng(63).uniform(0.1, 8, n).astype(np.float16)
    out = np.zeros((7, n), np.float16)
    run(device, half_arithmetic, blocks(n, BLOCK), BLOCK, a, b, out, n)
    exact = [a * b + a, a / b - np.float16(0.25), np.sqrt(a),
             (a.astype(np.float32) * 3).astype(np.float16), np.where(a != b, np.maximum(a, b), -a),
             a // b]
    for row, expected in enumerate(exact):
        assert_equal(out[row], expected.astype(np.float16), f"f16 row {row}")
    assert_close(out[6], np.exp(a * np.float16(0.5)), "f16 exp", rtol=1e-3)


@kiln.kernel
def bfloat16_arithmetic(a: bf16[:], b: bf16[:], out: bf16[:, :], wide: f32[:, :], ints: i32[:],
                        n: i32):
    i = kiln.global_id(0)
    if i < n:
        x = a[i]
        y = b[i]
        out[0, i] = x * y + x
        out[1, i] = x / y - bf16(0.25)
        out[2, i] = kiln.sqrt(y)
        out[3, i] = bf16(f32(x) * 3.0)
        out[4, i] = max(x, y) if x != y else -x
        out[5, i] = x // y
        out[6, i] = x * 2.5 - y
        out[7, i] = bf16(i * 1001)
        wide[0, i] = x + y
        wide[1, i] = f32(x) * 1.001
        ints[i] = i32(x * y) + i32(x < y)
        out[8, i] = bf16(-0.0) if x < bf16(-7) else x


@case()
def bf16_arithmetic(device):
    """bf16 storage and arithmetic: each operation computed in f32 and rounded to bf16 (to
    nearest even), bit for bit as NumPy with `ml_dtypes.bfloat16`; casts to and from f32 and
    integers; a bf16 array read and written."""
    n = 300
    bfloat16 = ml_dtypes.bfloat16
    a = rng(64).uniform(-8, 8, n).astype(bfloat16)
    b = rng(65).uniform(0.1, 8, n).astype(bfloat16)
    out = np.zeros((9, n), bfloat16)
    wide = np.zeros((2, n), np.float32)
    ints = np.zeros(n, np.int32)
    run(device, bfloat16_arithmetic, blocks(n, BLOCK), BLOCK, a, b, out, wide, ints, n)
    a32 = a.astype(np.float32)
    exact = [a * b + a, a / b - bfloat16(0.25), np.sqrt(b).astype(bfloat16),
             (a32 * 3).astype(bfloat16), np.where(a != b, np.maximum(a, b), -a), a // b,
             a * bfloat16(2.5) - b, (np.arange(n) * 1001).astype(bfloat16),
             np.where(a < -7, bfloat16(-0.0), a)]
    for row, expected in enumerate(exact):
        assert_equal(out[row].view(np.uint16), expected.astype(bfloat16).view(np.uint16),
                     f"bf16 row {row}")
    assert_equal(wide[0], (a + b).astype(np.float32), "bf16 sum widened to f32")
    assert_equal(wide[1], a32 * np.float32(1.001), "bf16 widened to f32")
    assert_equal(ints, (a * b).astype(np.float32).astype(np.int32) + (a < b), "bf16 to i32")


def popcount_python(v: np.ndarray, bits: np.ndarray) -> dict[str, np.ndarray]:
    """The python= code of `native_popcount`: one call for all active threads."""
    return {"bits": np.bitwise_count(v)}


@kiln.kernel
def native_popcount(x: u32[:], out: i32[:], n: i32):
    i = kiln.global_id(0)
    if i < n:
        v = x[i]
        bits = 0
        kiln.native(cuda="{bits} = __popc({v});", opencl="{bits} = popcount({v});",
                    c="{bits} = __builtin_popcount({v});", python=popcount_python,
                    wgsl="{bits} = i32(countOneBits({v}));")
        out[i] = bits * 10 + i32(v % 7)


@case()
def native_code(device):
    """kiln.native: hand-written code per language (CUDA, OpenCL C, C, Python, and WGSL for
    the webgpu plugin) reading and writing kernel variables."""
    n = 200
    x = rng(64).integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    out = np.zeros(n, np.int32)
    run(device, native_popcount, blocks(n, BLOCK), BLOCK, x, out, n)
    expected = np.bitwise_count(x).astype(np.int32) * 10 + (x % 7).astype(np.int32)
    assert_equal(out, expected, "popcount")


@kiln.func(max_depth=12)
def fibonacci(n: i32) -> i32:
    """Recursion that is not a tail call (two calls per level)."""
    if n < 2:
        return n
    return fibonacci(n - 1) + fibonacci(n - 2)


@kiln.func
def is_even(n: i32) -> bool:
    """Mutual recursion (the depth is set on is_odd: it holds for the group)."""
    if n == 0:
        return True
    return is_odd(n - 1)


@kiln.func(max_depth=40)
def is_odd(n: i32) -> bool:
    if n == 0:
        return False
    return is_even(n - 1)


@kiln.func(max_depth=10)
def write_digits(out: i32[:, :], row: i32, x: i32, k: i32):
    """A recursive function without a result, writing memory (digits of x, last first)."""
    if x > 0:
        out[row, k] = x % 10
        write_digits(out, row, x // 10, k + 1)


@kiln.func
def tree(level: kiln.constexpr, x: f32) -> f32:
    """Recursion over a constexpr: one specialisation per level, ended by an `if` on
    constants (a compile-time branch)."""
    if level == 0:
        return x
    return tree(level - 1, x * 2.0) + tree(level - 1, x)


@kiln.kernel
def recursion(out: i32[:, :], digits: i32[:, :], fout: f32[:], n: i32):
    i = kiln.global_id(0)
    if i < n:
        out[0, i] = fibonacci(i % 12)
        out[1, i] = i32(is_even(i % 30))
        write_digits(digits, i, i * 7919, 0)
        fout[i] = tree(3, f32(i))


@case()
def recursion_fib_mutual_void_constexpr(device):
    """Recursion: non-tail (native where the backend recurses, else inlined to max_depth),
    mutual, without a result, and over constexpr values."""
    n = 100
    out = np.zeros((2, n), np.int32)
    digits = np.full((n, 8), -1, np.int32)
    fout = np.zeros(n, np.float32)
    run(device, recursion, blocks(n, BLOCK), BLOCK, out, digits, fout, n)
    fib = [0, 1]
    while len(fib) < 12:
        fib.append(fib[-1] + fib[-2])
    i = np.arange(n)
    assert_equal(out[0], np.array(fib)[i % 12].astype(np.int32), "fibonacci")
    assert_equal(out[1], (i % 30 % 2 == 0).astype(np.int32), "is_even / is_odd")
    expected = np.full((n, 8), -1, np.int32)
    for row in range(n):
        for k, d in enumerate(reversed(str(row * 7919)) if row else ()):
            expected[row, k] = int(d)
    assert_equal(digits, expected, "digits written by recursion")
    assert_equal(fout, (27 * i).astype(np.float32), "constexpr recursion")


@kiln.kernel
def deep_fibonacci(out: i32[:], n: i32):
    i = kiln.global_id(0)
    if i < n:
        out[i] = fibonacci(i)  # fibonacci(i) needs depth i: over max_depth=12 from i = 13


@case()
def recursion_past_max_depth(device):
    """Recursion deeper than max_depth: the right answer where the backend recurses natively
    (unchecked), else RecursionDepthError at the call's line, never a wrong answer."""
    n = 16
    out = np.zeros(n, np.int32)
    try:
        run(device, deep_fibonacci, 1, n, out, n)
    except kiln.RecursionDepthError as error:
        assert "`fibonacci` recursed deeper than its max_depth=12" in error.message, error
        assert error.loc is not None and error.loc.file == __file__, error
        return
    fib = [0, 1]
    while len(fib) < n:
        fib.append(fib[-1] + fib[-2])
    assert_equal(out, np.array(fib, np.int32), "fibonacci past max_depth, recursing natively")


@kiln.kernel
def unroll_hint(x: f32[:], out: f32[:], n: i32, m: i32):
    i = kiln.global_id(0)
    if i < n:
        acc = f32(0)
        for k in kiln.unroll(range(1, m), factor=4):  # run-time bounds: a compiler hint
            acc += x[i] * k
        out[i] = acc


@case()
def unroll_factor_hint(device):
    """kiln.unroll(range(...), factor=k) on run-time bounds: a loop with `#pragma unroll k`
    (trip counts that k divides and does not divide)."""
    n = 100
    x = rng(65).random(n).astype(np.float32)
    for m in (9, 12):
        out = np.zeros(n, np.float32)
        run(device, unroll_hint, blocks(n, BLOCK), BLOCK, x, out, n, m)
        assert_close(out, x * (m * (m - 1) // 2), f"m={m}", rtol=1e-6)


@kiln.func
def axpy(a, x, y):
    """Polymorphic: specialised per argument types at each call."""
    return a * x + y


@signatures((f32, f32[:], f32[:], f32[:]), (f64, f64[:], f64[:], f64[:]),
            (i32, i32[:], i32[:], i32[:]))
@kiln.kernel
def generic_axpy(a, x, y, out):
    i = kiln.global_id(0)
    if i < len(out):
        out[i] = axpy(a, x[i], y[i])


@case()
def generics_by_inference(device):
    """Unannotated kernel and device function parameters: one variant per launch's
    argument types (f32, i32, and f64 where the device has it)."""
    n = 150
    dtypes = [np.float32, np.int32] + ([np.float64] if device.capabilities.fp64 else [])
    for dtype in dtypes:
        x = (rng(66).random(n) * 100).astype(dtype)
        y = (rng(67).random(n) * 100).astype(dtype)
        out = np.zeros(n, dtype)
        run(device, generic_axpy, blocks(n, BLOCK), BLOCK, dtype(3), x, y, out)
        assert_close(out, dtype(3) * x + y, np.dtype(dtype).name, rtol=1e-6)
