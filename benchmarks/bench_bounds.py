"""What `debug=True` bounds checks cost: the same kernels with and without, per backend.

Peers in one run, warm-up, medians of interleaved repetitions, random data; the ratio is
checked time / unchecked time (1.00 = free). The interp checks always and is not measured.

    .venv/bin/python benchmarks/bench_bounds.py [--backend cpu] [--repeat 15]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import numpy as np

import kiln
from kiln.examples import block_sum, matmul_tiled, vector_add


def variants(kernel: kiln.Kernel) -> tuple[kiln.Kernel, kiln.Kernel]:
    options = kernel.options.changed()
    return kiln.kernel(kernel.pyfunc, **options), kiln.kernel(kernel.pyfunc, **options,
                                                             debug=True)


def cases(rng: np.random.Generator) -> list[tuple[str, kiln.Kernel, tuple, object, object]]:
    n = 1 << 22
    a, b = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    m = 512
    x, y = rng.random((m, m), dtype=np.float32), rng.random((m, m), dtype=np.float32)
    return [
        ("vector_add 4M", vector_add, (a, b, np.zeros(n, np.float32), n), n // 256, 256),
        ("block_sum 4M", block_sum, (a, np.zeros(1, np.float32), n), 256, 256),
        ("matmul_tiled 512", matmul_tiled, (x, y, np.zeros((m, m), np.float32)),
         (m // 16, m // 16), (16, 16)),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", action="append", default=None)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    names = args.backend or [e.name for e in kiln.backends()
                             if e.available and e.name in ("cpu", "opencl", "cuda")]
    rng = np.random.default_rng(0)
    print(f"bounds checks (debug=True) / unchecked, median of {args.repeat}; "
          f"Python {platform.python_version()}, NumPy {np.__version__}, "
          f"{time.strftime('%Y-%m-%d')}")
    for name in names:
        device = kiln.device(name)
        print(f"\n{name}: {device.name}")
        for label, kernel, host_args, grid, block in cases(rng):
            plain, checked = variants(kernel)
            dev_args = [kiln.to_device(v, device) if isinstance(v, np.ndarray) else v
                        for v in host_args]
            timings: dict[str, list[float]] = {"plain": [], "checked": []}
            for k in (plain, checked):  # warm-up: compile and run twice
                for _ in range(2):
                    k[grid, block](*dev_args)
                device.synchronize()
            for _ in range(args.repeat):  # interleaved, so drift hits both alike
                for key, k in (("plain", plain), ("checked", checked)):
                    start = time.perf_counter()
                    k[grid, block](*dev_args)
                    device.synchronize()
                    timings[key].append((time.perf_counter() - start) * 1e3)
            p, c = (statistics.median(timings[key]) for key in ("plain", "checked"))
            print(f"  {label:18s} {p:8.3f} ms  checked {c:8.3f} ms  ratio {c / p:5.2f}")


if __name__ == "__main__":
    main()
