"""How close the interp backend gets to plain NumPy.

Times kiln-interp kernels against the NumPy expression computing the same thing (after a
warm-up, median of several runs, launch plus synchronize) and prints a table with the ratio.
The goal for vector_add on 2**22 float32 (blocks of 256) is a ratio within 3x.

    python benchmarks/bench_interp.py [--repeat N]     (also: kiln bench --backend interp)
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import numpy as np
from common import backend_device, median_ms, ratio

import kiln
from kiln import f32, i32
from kiln.examples import block_sum, vector_add


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

    def launch(kernel: kiln.Kernel, grid: int, *args: object) -> Callable[[], None]:
        def run() -> None:
            kernel[grid, 256](*args)
            dev.synchronize()

        return run

    cases = [
        ("vector_add", launch(vector_add, blocks, da, db, dc, n), lambda: a + b),
        ("saxpy (grid-stride)", launch(saxpy_grid_stride, 1024, f32(2), da, dy, n),
         lambda: np.float32(2) * a + b),
        ("block_sum", launch(block_sum, 1024, da, out, n), lambda: a.sum()),
        ("histogram (atomics)", launch(histogram, blocks, dkeys, bins, n),
         lambda: np.bincount(keys, minlength=256)),
    ]
    print(f"interp vs NumPy, n = 2**22 float32, median of {repeat} runs")
    print(f"{'kernel':<22}{'kiln-interp ms':>16}{'numpy ms':>12}{'ratio':>9}")
    for name, kiln_fn, numpy_fn in cases:
        t_kiln, t_numpy = (median_ms(kiln_fn, repeat, warmup=1),
                          median_ms(numpy_fn, repeat, warmup=1))
        print(f"{name:<22}{t_kiln:>16.2f}{t_numpy:>12.2f}{ratio(t_kiln, t_numpy):>9}")
    np.testing.assert_allclose(dc.numpy(), a + b)


if __name__ == "__main__":
    main()
