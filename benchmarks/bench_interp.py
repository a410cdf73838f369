"""How close the interp backend gets to plain NumPy.

Times kiln-interp kernels against the NumPy expression computing the same thing (after a
warm-up, median of several runs, launch plus synchronize) and prints a table with the ratio.
Goals: vector_add on 2**22 float32 (blocks of 256) within 3x; the thread-divergent loops:
a CSR sparse matrix-vector product over 200k rows within 20x of NumPy, a Julia
set within 5x of NumPy's vectorised (masked) version.

    python benchmarks/bench_interp.py [--repeat N]     (also: kiln bench --backend interp)
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import numpy as np
from common import backend_device, median_ms, ratio

import kiln
from kiln import f32, i32
from kiln.examples import JULIA_C, block_sum, julia, spmv_csr, vector_add

JULIA_SHAPE, JULIA_ITER = (384, 512), 100
CSR_ROWS = 200_000


@kiln.kernel
def saxpy_grid_stride(alpha: f32, x: f32[:], y: f32[:], n: i32):
    i = kiln.global_id(0)
    while i < n:
        y[i] = alpha * x[i] + y[i]
        i += kiln.global_size(0)


@kiln.kernel
def histogram(keys: i32[:], bins: i32[:], n: i32):
    i = kiln.global_id(0)
    if i < n:
        kiln.atomic_add(bins, keys[i], 1)


def random_csr(rows: int, rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    """Row lengths 0 to 200, geometric (mean 10): most rows short, a few long."""
    lengths = np.minimum(rng.geometric(0.1, rows), 200).astype(np.int32)
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    indices = rng.integers(0, rows, int(indptr[-1]), dtype=np.int32)
    data = rng.standard_normal(int(indptr[-1]), dtype=np.float32)
    return indptr, indices, data, rng.standard_normal(rows, dtype=np.float32)


def numpy_spmv(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray,
               x: np.ndarray) -> np.ndarray:
    """Vectorised CSR: every product at once, then one segmented sum per non-empty row."""
    y = np.zeros(indptr.size - 1, np.float32)
    nonempty = indptr[1:] > indptr[:-1]
    y[nonempty] = np.add.reduceat(data * x[indices], indptr[:-1][nonempty])
    return y


def julia_start(h: int, w: int) -> tuple[np.ndarray, np.ndarray]:
    f = np.float32
    zr = f(-1.6) + f(3.2) * np.arange(w, dtype=f) / f(w)
    zi = f(-1.2) + f(2.4) * np.arange(h, dtype=f) / f(h)
    return np.broadcast_to(zr, (h, w)).copy(), np.broadcast_to(zi[:, None], (h, w)).copy()


def numpy_julia_masked(h: int, w: int, max_iter: int) -> np.ndarray:
    """The usual vectorised version: every point each iteration, updates where alive."""
    cr, ci = np.float32(JULIA_C[0]), np.float32(JULIA_C[1])
    zr, zi = julia_start(h, w)
    count = np.zeros((h, w), np.int32)
    for _ in range(max_iter):
        alive = zr * zr + zi * zi <= np.float32(4)
        count += alive
        zr, zi = (np.where(alive, zr * zr - zi * zi + cr, zr),
                  np.where(alive, np.float32(2) * zr * zi + ci, zi))
    return count


def numpy_julia_compacting(h: int, w: int, max_iter: int) -> np.ndarray:
    """A faster vectorised version: only the points still alive, re-indexed each iteration."""
    cr, ci = np.float32(JULIA_C[0]), np.float32(JULIA_C[1])
    zr, zi = (z.reshape(-1) for z in julia_start(h, w))
    where = np.arange(h * w)
    count = np.zeros(h * w, np.int32)
    for _ in range(max_iter):
        alive = zr * zr + zi * zi <= np.float32(4)
        where, zr, zi = where[alive], zr[alive], zi[alive]
        if where.size == 0:
            break
        count[where] += 1
        zr, zi = zr * zr - zi * zi + cr, np.float32(2) * zr * zi + ci
    return count.reshape(h, w)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    repeat = parser.parse_args().repeat
    dev = backend_device("interp", "bench_interp")
    if dev is None:
        return
    rng = np.random.default_rng(0)
    n = 1 << 22
    a, b = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    da, db, dc = kiln.to_device(a, dev), kiln.to_device(b, dev), kiln.empty(n, f32, dev)
    dy = kiln.to_device(b.copy(), dev)
    out = kiln.zeros(1, f32, dev)
    keys = rng.integers(0, 256, n).astype(np.int32)
    dkeys, bins = kiln.to_device(keys, dev), kiln.zeros(256, i32, dev)
    blocks = (n + 255) // 256
    csr = random_csr(CSR_ROWS, rng)
    dcsr = [kiln.to_device(v, dev) for v in csr]
    spmv_out = kiln.zeros(CSR_ROWS, f32, dev)
    (h, w) = JULIA_SHAPE
    pixels = kiln.zeros((h, w), i32, dev)

    def launch(kernel: kiln.Kernel, grid: object, block: object,
               *args: object) -> Callable[[], None]:
        def run() -> None:
            kernel[grid, block](*args)
            dev.synchronize()

        return run

    cases = [
        ("vector_add", launch(vector_add, blocks, 256, da, db, dc, n), lambda: a + b),
        ("saxpy (grid-stride)", launch(saxpy_grid_stride, 1024, 256, f32(2), da, dy, n),
         lambda: np.float32(2) * a + b),
        ("block_sum", launch(block_sum, 1024, 256, da, out, n), lambda: a.sum()),
        ("histogram (atomics)", launch(histogram, blocks, 256, dkeys, bins, n),
         lambda: np.bincount(keys, minlength=256)),
        ("spmv_csr 200k rows", launch(spmv_csr, (CSR_ROWS + 255) // 256, 256, *dcsr,
                                      spmv_out), lambda: numpy_spmv(*csr)),
        (f"julia {h}x{w} (masked)",
         launch(julia, ((w + 15) // 16, (h + 15) // 16), (16, 16), pixels, f32(JULIA_C[0]),
                f32(JULIA_C[1]), JULIA_ITER), lambda: numpy_julia_masked(h, w, JULIA_ITER)),
        (f"julia {h}x{w} (compacting)", None, lambda: numpy_julia_compacting(h, w, JULIA_ITER)),
    ]
    print(f"interp vs NumPy, n = 2**22 float32 (spmv: {int(csr[0][-1])} nonzeros; julia: "
          f"{JULIA_ITER} iterations at most), median of {repeat} runs")
    print(f"{'kernel':<30}{'kiln-interp ms':>16}{'numpy ms':>12}{'ratio':>9}")
    t_kiln = 0.0
    for name, kiln_fn, numpy_fn in cases:
        if kiln_fn is not None:  # a second NumPy peer compares with the previous kernel
            t_kiln = median_ms(kiln_fn, repeat, warmup=1)
        t_numpy = median_ms(numpy_fn, repeat, warmup=1)
        print(f"{name:<30}{t_kiln:>16.2f}{t_numpy:>12.2f}{ratio(t_kiln, t_numpy):>9}")
    np.testing.assert_allclose(dc.numpy(), a + b)
    np.testing.assert_allclose(spmv_out.numpy(), numpy_spmv(*csr), rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(pixels.numpy(), numpy_julia_masked(h, w, JULIA_ITER))


if __name__ == "__main__":
    main()
