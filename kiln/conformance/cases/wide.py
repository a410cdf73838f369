"""Wide loads and stores: `kiln.load(f32x4, a, i)` / `kiln.store(a, i, v)` on scalar arrays,
and whole vectors in shared memory, which backends with vector types move 16 bytes at a
time (and element by element where an address is not aligned: odd rows of `wide_rows`).
Results must be exact: a wide access moves bits, it computes nothing.
"""

from __future__ import annotations

import numpy as np

import kiln
from kiln import f32, f32x2, f32x4, f64, f64x4, i32, i32x4, u32, u32x2

from ..checks import assert_equal, blocks, rng, run
from ..registry import FP64, case

BLOCK = 64


@kiln.kernel
def wide_f32(a: f32[:], out: f32[:], pairs: f32[:], n: i32):
    i = kiln.global_id(0)
    if i < n:
        v = kiln.load(f32x4, a, i)  # a[4i .. 4i+3]
        kiln.store(out, i, v * 2.0 + kiln.load(f32x4, a, i).w)
        kiln.store(pairs, i, f32x2(v.x + v.y, v.z - v.w))  # pairs[2i], pairs[2i+1]


@kiln.kernel
def wide_rows(m: f32[:, :], out: f32[:, :], rows: i32):
    """Rows of 6 floats: m[r, 0:4] is 16-byte aligned on even rows only."""
    r = kiln.global_id(0)
    if r < rows:
        head = kiln.load(f32x4, m, r, 0)  # m[r, 0:4]
        tail = kiln.load(f32x2, m, r, 2)  # m[r, 4:6]: the last index counts vectors
        kiln.store(out, r, 0, f32x4(tail.x, tail.y, head.x, head.y))
        kiln.store(out, r, 2, f32x2(head.z, head.w))


@kiln.kernel
def wide_integers(ints: i32[:], words: u32[:], n: i32):
    i = kiln.global_id(0)
    if i < n:
        kiln.store(ints, i, kiln.load(i32x4, ints, i) * 3 - 1)  # in place
        w = kiln.load(u32x2, words, i)
        kiln.store(words, i, u32x2(w.y, w.x + u32(1)))


@kiln.kernel
def wide_doubles(a: f64[:], out: f64x4[:], n: i32):
    i = kiln.global_id(0)
    if i < n:
        out[i] = kiln.load(f64x4, a, i) * f64(0.5)  # two 16-byte accesses each


@kiln.kernel
def wide_shared(a: f32x4[:], out: f32x4[:], n: i32):
    """Vectors through shared memory: a plain f32 array and an f32x4 array."""
    s = kiln.shared(f32, 4 * BLOCK)
    q = kiln.shared(f32x4, BLOCK)
    t = kiln.thread_idx.x
    i = kiln.global_id(0)
    v = f32x4(0.0)
    if i < n:
        v = a[i]
    kiln.store(s, t, v)
    q[t] = v * 2.0
    kiln.barrier()
    if i < n:
        out[i] = kiln.load(f32x4, s, BLOCK - 1 - t) + q[(t + 1) % BLOCK]


# ---------------------------------------------------------------- cases


@case()
def wide_loads_f32(device: kiln.Device) -> None:
    """Wide access: kiln.load / kiln.store of f32x4 and f32x2 in f32 arrays"""
    n = 1000
    a = rng(60).uniform(-1, 1, 4 * n).astype(np.float32)
    out, pairs = np.zeros_like(a), np.zeros(2 * n, np.float32)
    run(device, wide_f32, blocks(n, BLOCK), BLOCK, a, out, pairs, n)
    v = a.reshape(n, 4)
    assert_equal(out.reshape(n, 4), v * np.float32(2) + v[:, 3:], "f32x4 load and store")
    assert_equal(pairs.reshape(n, 2), np.stack([v[:, 0] + v[:, 1], v[:, 2] - v[:, 3]], 1),
                 "f32x2 store")


@case()
def wide_rows_unaligned(device: kiln.Device) -> None:
    """Wide access: rows of 6 floats, aligned for f32x4 on every other row only"""
    rows = 301
    m = rng(61).uniform(-1, 1, (rows, 6)).astype(np.float32)
    out = np.zeros_like(m)
    run(device, wide_rows, blocks(rows, BLOCK), BLOCK, m, out, rows)
    assert_equal(out, m[:, [4, 5, 0, 1, 2, 3]], "rows rotated by wide accesses")


@case()
def wide_integer_types(device: kiln.Device) -> None:
    """Wide access: i32x4 in place and u32x2 (with wrap-around) in integer arrays"""
    n = 500
    g = rng(62)
    ints = g.integers(-10**6, 10**6, 4 * n).astype(np.int32)
    words = g.integers(0, 2**32, 2 * n, dtype=np.uint32)
    words[1] = 2**32 - 1
    want_ints = ints * 3 - 1
    pairs = words.reshape(n, 2)
    want_words = np.stack([pairs[:, 1], pairs[:, 0] + np.uint32(1)], 1).ravel()
    run(device, wide_integers, blocks(n, BLOCK), BLOCK, ints, words, n)
    assert_equal(ints, want_ints, "i32x4")
    assert_equal(words, want_words, "u32x2")


@case(requires=(FP64,))
def wide_f64(device: kiln.Device) -> None:
    """Wide access: f64x4 from an f64 array into an f64x4 array"""
    n = 300
    a = rng(63).uniform(-1e6, 1e6, 4 * n)
    out = np.zeros((n, 4))
    run(device, wide_doubles, blocks(n, BLOCK), BLOCK, a, out, n)
    assert_equal(out, a.reshape(n, 4) * 0.5, "f64x4")


@case()
def wide_shared_memory(device: kiln.Device) -> None:
    """Wide access: f32x4 through shared f32 and f32x4 arrays"""
    n = 3 * BLOCK
    a = rng(64).uniform(-1, 1, (n, 4)).astype(np.float32)
    out = np.zeros_like(a)
    run(device, wide_shared, n // BLOCK, BLOCK, a, out, n)
    t = np.arange(n) % BLOCK
    base = np.arange(n) - t
    want = a[base + BLOCK - 1 - t] + a[base + (t + 1) % BLOCK] * np.float32(2)
    assert_equal(out, want, "shared vectors")
