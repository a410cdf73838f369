"""End-to-end kernels: the classic GPU algorithms, on sizes that do not fill whole blocks.

vector_add, block_sum and the two matmuls are `kiln.examples`' (the demo's and the
benchmarks'); the others are defined here."""

from __future__ import annotations

import numpy as np

import kiln
from kiln import f32, i32

from ...examples import TILE, block_sum, matmul_naive, matmul_tiled, vector_add
from ..checks import assert_close, assert_equal, blocks, rng, run
from ..registry import atomic, case

BLOCK = 128
REDUCE_BLOCK = 256
BINS = 64


@case()
def vector_add_f32(device):
    """c = a + b on device arrays, twice with sizes that are not multiples of the block."""
    r = rng()
    for n in (1000, 37):  # the second launch reuses the compiled kernel
        a, b = r.random(n, np.float32), r.random(n, np.float32)
        c = kiln.full(n, -1.0, f32, device)
        run(device, vector_add, blocks(n, BLOCK), BLOCK, kiln.to_device(a, device),
            kiln.to_device(b, device), c, n)
        assert_close(c.numpy(), a + b, f"c (n={n})", rtol=1e-6)


@case(requires=(atomic("atomic_add", f32),))
def reduce_sum_f32(device):
    """Sum with a grid-stride loop, a shared-memory tree, barriers and atomic_add."""
    n = 5003
    x = rng(1).random(n, np.float32)
    out = np.zeros(1, np.float32)
    run(device, block_sum, 3, REDUCE_BLOCK, x, out, n)
    assert_close(out, x.sum(dtype=np.float64), "sum", rtol=1e-4)


@kiln.kernel
def reduce_max(x: i32[:], out: i32[:], n: i32):
    s = kiln.shared(i32, REDUCE_BLOCK)
    t = kiln.thread_idx.x
    i = kiln.global_id(0)
    s[t] = x[i] if i < n else x[0]
    kiln.barrier()
    k = REDUCE_BLOCK // 2
    while k > 0:
        if t < k:
            s[t] = max(s[t], s[t + k])
        kiln.barrier()
        k //= 2
    if t == 0:
        kiln.atomic_max(out, 0, s[0])


@case(requires=(atomic("atomic_max", i32),))
def reduce_max_i32(device):
    """Maximum of negative and positive values: shared-memory tree, barriers, atomic_max."""
    n = 1000
    x = rng(2).integers(-10**6, 10**6, n, dtype=np.int32)
    out = np.full(1, np.iinfo(np.int32).min, np.int32)
    run(device, reduce_max, blocks(n, REDUCE_BLOCK), REDUCE_BLOCK, x, out, n)
    assert_equal(out[0], x.max(), "max")


def _check_matmul(device, kernel) -> None:
    r = rng(3)
    a, b = r.random((70, 50), np.float32), r.random((50, 60), np.float32)
    c = np.zeros((70, 60), np.float32)
    run(device, kernel, (blocks(60, TILE), blocks(70, TILE)), (TILE, TILE), a, b, c)
    assert_close(c, a.astype(np.float64) @ b, "c", rtol=1e-4)


@kiln.kernel
def shifted_cubes(x: i32[:], out: i32[:]):
    s = kiln.shared(i32, BLOCK)
    t = kiln.thread_idx.x
    v = x[kiln.global_id(0)]
    total = 0
    for r in range(3):  # a loop (v ** 3's) before the first barrier of a barrier loop
        s[t] = v ** 3
        kiln.barrier()
        total += s[(t + 1 + r) % kiln.block_dim.x]
        kiln.barrier()
    out[kiln.global_id(0)] = total


@case()
def barrier_loop_with_a_loop_first(device):
    """Barriers in a loop whose first statement holds a loop, in blocks of 1, 2 and 64."""
    x = rng(5).integers(-20, 20, 128, dtype=np.int32)
    for block in (1, 2, 64):
        out = np.zeros(128, np.int32)
        run(device, shifted_cubes, 128 // block, block, x, out)
        cubes = (x.astype(np.int64) ** 3).astype(np.int32).reshape(-1, block)
        expected = sum(np.roll(cubes, -(1 + r), axis=1) for r in range(3))
        assert_equal(out, expected.reshape(-1), f"out (block {block})")


@case()
def matmul_naive_f32(device):
    """(70x50) @ (50x60): one thread per output element, 2-D grid."""
    _check_matmul(device, matmul_naive)


@case()
def matmul_tiled_f32(device):
    """(70x50) @ (50x60) with 16x16 shared-memory tiles and barriers in a loop."""
    _check_matmul(device, matmul_tiled)


@kiln.kernel
def transpose_tiled(src: kiln.Array[kiln.float32, 2], dst: kiln.Array[kiln.float32, 2]):
    tile = kiln.shared(f32, (TILE, TILE + 1))  # padded against bank conflicts
    rows, cols = src.shape[0], src.shape[1]
    x = kiln.block_idx.x * TILE + kiln.thread_idx.x
    y = kiln.block_idx.y * TILE + kiln.thread_idx.y
    if x < cols and y < rows:
        tile[kiln.thread_idx.y, kiln.thread_idx.x] = src[y, x]
    kiln.barrier()
    x = kiln.block_idx.y * TILE + kiln.thread_idx.x
    y = kiln.block_idx.x * TILE + kiln.thread_idx.y
    if x < rows and y < cols:
        dst[y, x] = tile[kiln.thread_idx.x, kiln.thread_idx.y]


@case()
def transpose_tiled_f32(device):
    """Non-square (70x50) transpose through a shared tile."""
    src = rng(4).random((70, 50), np.float32)
    dst = np.zeros((50, 70), np.float32)
    run(device, transpose_tiled, (blocks(50, TILE), blocks(70, TILE)), (TILE, TILE), src, dst)
    assert_equal(dst, src.T, "transpose")


@kiln.kernel
def stencil_1d(x: f32[:], y: f32[:], n: int):
    s = kiln.shared(f32, BLOCK + 2)  # the block's items and one halo cell on each side
    t = kiln.thread_idx.x
    i = kiln.global_id(0)
    if i < n:
        s[t + 1] = x[i]
    if t == 0 and i > 0:
        s[0] = x[i - 1]
    if (t == BLOCK - 1 or i == n - 1) and i + 1 < n:
        s[t + 2] = x[i + 1]
    kiln.barrier()
    if 0 < i < n - 1:
        y[i] = 0.25 * s[t] + 0.5 * s[t + 1] + 0.25 * s[t + 2]
    elif i < n:  # the two ends are copied
        y[i] = s[t + 1]


@case()
def stencil_1d_f32(device):
    """Three-point stencil with halo cells in shared memory."""
    n = 1000
    x = rng(5).random(n, np.float32)
    y = np.zeros(n, np.float32)
    run(device, stencil_1d, blocks(n, BLOCK), BLOCK, x, y, n)
    expected = x.copy()
    expected[1:-1] = 0.25 * x[:-2] + 0.5 * x[1:-1] + 0.25 * x[2:]
    assert_close(y, expected, "y", rtol=1e-6)


@kiln.func
def count_into(hist: i32[:], value: i32):
    """Takes a shared array as an argument."""
    kiln.atomic_add(hist, value % BINS, 1)


@kiln.kernel
def histogram(values: i32[:], hist: i32[:], n: i32):
    local_hist = kiln.shared(i32, BINS)
    t = kiln.thread_idx.x
    for b in range(t, BINS, kiln.block_dim.x):
        local_hist[b] = 0
    kiln.barrier()
    i = kiln.global_id(0)
    while i < n:
        count_into(local_hist, values[i])
        i += kiln.global_size(0)
    kiln.barrier()
    for b in range(t, BINS, kiln.block_dim.x):
        if local_hist[b] != 0:
            kiln.atomic_add(hist, b, local_hist[b])


@case(requires=(atomic("atomic_add", i32),))
def histogram_i32(device):
    """64-bin histogram: atomics on shared memory (in a device function), then global."""
    n = 3001
    values = rng(6).integers(-1000, 1000, n, dtype=np.int32)
    hist = np.zeros(BINS, np.int32)
    run(device, histogram, 4, 48, values, hist, n)
    assert_equal(hist, np.bincount(values % BINS, minlength=BINS), "histogram")


@kiln.kernel
def block_scan(x: i32[:], out: i32[:], n: i32):
    s = kiln.shared(i32, BLOCK)
    t = kiln.thread_idx.x
    i = kiln.global_id(0)
    s[t] = x[i] if i < n else 0
    kiln.barrier()
    offset = 1
    while offset < kiln.block_dim.x:  # Hillis-Steele inclusive scan
        v = s[t - offset] if t >= offset else 0
        kiln.barrier()
        s[t] += v
        kiln.barrier()
        offset *= 2
    if i < n:
        out[i] = s[t]


@case()
def block_scan_i32(device):
    """Inclusive prefix sum within each block (shared memory, barriers in a loop)."""
    n = 1000
    x = rng(7).integers(-50, 50, n, dtype=np.int32)
    out = np.zeros(n, np.int32)
    run(device, block_scan, blocks(n, BLOCK), BLOCK, x, out, n)
    expected = np.concatenate([np.cumsum(x[k:k + BLOCK], dtype=np.int32)
                               for k in range(0, n, BLOCK)])
    assert_equal(out, expected, "scan")


MAX_ITER = 64


@kiln.kernel
def mandelbrot(out: i32[:, :], x0: f32, y0: f32, step: f32):
    px, py = kiln.global_id(0), kiln.global_id(1)
    if px >= out.shape[1] or py >= out.shape[0]:
        return
    cr = x0 + px * step
    ci = y0 + py * step
    zr = f32(0)
    zi = f32(0)
    count = 0
    while count < MAX_ITER and zr * zr + zi * zi <= 4.0:
        zr, zi = zr * zr - zi * zi + cr, 2.0 * zr * zi + ci
        count += 1
    out[py, px] = count


def _mandelbrot_reference(h: int, w: int, x0: float, y0: float, step: float) -> np.ndarray:
    f = np.float32
    cr = f(x0) + np.arange(w, dtype=np.float32) * f(step)
    ci = f(y0) + np.arange(h, dtype=np.float32)[:, None] * f(step)
    cr, ci = np.broadcast_to(cr, (h, w)), np.broadcast_to(ci, (h, w))
    zr, zi = np.zeros((h, w), f), np.zeros((h, w), f)
    count = np.zeros((h, w), np.int32)
    for _ in range(MAX_ITER):
        alive = zr * zr + zi * zi <= 4
        count += alive
        zr, zi = (np.where(alive, zr * zr - zi * zi + cr, zr),
                  np.where(alive, f(2) * zr * zi + ci, zi))
    return count


@case()
def mandelbrot_f32(device):
    """Escape-time counts with divergent while loops and an early return."""
    h, w, x0, y0, step = 50, 70, -2.0, -1.0, 0.04
    out = np.full((h, w), -1, np.int32)
    run(device, mandelbrot, (blocks(w, TILE), blocks(h, 8)), (TILE, 8), out, x0, y0, step)
    expected = _mandelbrot_reference(h, w, x0, y0, step)
    if (out < 0).any():
        raise AssertionError("mandelbrot: some pixels were not written")
    differ = out != expected  # rounding (e.g. fused multiply-add) may flip boundary pixels
    if differ.mean() > 0.02:
        raise AssertionError(f"mandelbrot: {differ.sum()} of {out.size} pixel counts differ "
                             f"from NumPy's (more than 2%)")
