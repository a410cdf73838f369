"""Throughput against problem size: kiln on every available backend, NumPy (and CuPy on a
GPU) beside it.

vector_add and reduce (block_sum) in GB/s over 2^12 .. 2^24 float32 elements, the tiled
matmul in GFLOP/s over 64 .. 1024 squared; medians after a warm-up, launch plus
synchronisation included (what a caller waits for). Prints a table per benchmark and keeps
each point for `kiln bench --plot FILE.svg`.

    python benchmarks/bench_sizes.py          (also: kiln bench --only sizes [--plot FILE])
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

import numpy as np
from common import markdown_table, median_ms, quick, record, versions

import kiln
from kiln import f32
from kiln.examples import BLOCK, TILE, block_sum, matmul_tiled, vector_add

Runner = Callable[[], object]


def devices() -> list[kiln.Device]:
    """One device per available backend (only KILN_BACKEND's when it is set); the interp
    skips the large sizes (it is a reference, not a contender)."""
    wanted = os.environ.get("KILN_BACKEND")
    return [kiln.device(e.name) for e in kiln.backends()
            if e.available and (wanted is None or e.name == wanted)]


def vector_sizes(dev: kiln.Device | None) -> list[int]:
    top = 18 if quick() else (20 if dev is not None and dev.backend.name == "interp" else 24)
    return [1 << p for p in range(12, top + 1, 2 if quick() else 3)]


def matmul_sizes(dev: kiln.Device | None) -> list[int]:
    top = 128 if quick() else (256 if dev is not None and dev.backend.name == "interp"
                               else 1024)
    return [m for m in (64, 128, 256, 512, 1024) if m <= top]


def kiln_cases(dev: kiln.Device, rng: np.random.Generator
               ) -> dict[str, list[tuple[int, Runner, float]]]:
    """benchmark -> [(size, run, units of work)] for kiln on `dev`; each run is checked
    against NumPy once before it is timed."""
    cases: dict[str, list[tuple[int, Runner, float]]] = {"vector_add": [], "reduce": [],
                                                         "matmul": []}
    for n in vector_sizes(dev):
        a, b = rng.random(n, np.float32), rng.random(n, np.float32)
        da, db, dc = kiln.to_device(a, dev), kiln.to_device(b, dev), kiln.empty(n, f32, dev)
        zero, total = np.zeros(1, np.float32), kiln.zeros(1, f32, dev)

        def add(da=da, db=db, dc=dc, n=n) -> None:
            vector_add[kiln.dim(n)](da, db, dc, n)
            dev.synchronize()

        def reduce(da=da, total=total, n=n, zero=zero) -> None:
            total.copy_from_host(zero)
            block_sum[min(-(-n // BLOCK), 1024), BLOCK](da, total, n)
            dev.synchronize()

        add()
        np.testing.assert_allclose(dc.numpy(), a + b)
        reduce()
        np.testing.assert_allclose(total.numpy()[0], a.sum(dtype=np.float64), rtol=1e-3)
        cases["vector_add"].append((n, add, 12 * n / 1e9))
        cases["reduce"].append((n, reduce, 4 * n / 1e9))
    for m in matmul_sizes(dev):
        p, q = rng.random((m, m), np.float32), rng.random((m, m), np.float32)
        dp, dq, dr = kiln.to_device(p, dev), kiln.to_device(q, dev), kiln.empty((m, m), f32, dev)
        grid = (-(-m // TILE), -(-m // TILE))

        def mm(dp=dp, dq=dq, dr=dr, grid=grid) -> None:
            matmul_tiled[grid, (TILE, TILE)](dp, dq, dr)
            dev.synchronize()

        mm()
        np.testing.assert_allclose(dr.numpy(), p @ q, rtol=1e-3)
        cases["matmul"].append((m, mm, 2 * m**3 / 1e9))
    return cases


def numpy_cases(rng: np.random.Generator) -> dict[str, list[tuple[int, Runner, float]]]:
    cases: dict[str, list[tuple[int, Runner, float]]] = {"vector_add": [], "reduce": [],
                                                         "matmul": []}
    for n in vector_sizes(None):
        a, b, c = rng.random(n, np.float32), rng.random(n, np.float32), np.empty(n, np.float32)
        cases["vector_add"].append((n, lambda a=a, b=b, c=c: np.add(a, b, out=c), 12 * n / 1e9))
        cases["reduce"].append((n, lambda a=a: a.sum(), 4 * n / 1e9))
    for m in matmul_sizes(None):
        p, q = rng.random((m, m), np.float32), rng.random((m, m), np.float32)
        cases["matmul"].append((m, lambda p=p, q=q: p @ q, 2 * m**3 / 1e9))
    return cases


def cupy_cases(rng: np.random.Generator) -> dict[str, list[tuple[int, Runner, float]]]:
    """CuPy's own kernels on the same GPU, where CuPy is installed (the peer on cuda)."""
    try:
        import cupy as cp
    except ImportError:
        return {}
    sync = cp.cuda.Device().synchronize
    cases: dict[str, list[tuple[int, Runner, float]]] = {"vector_add": [], "reduce": [],
                                                         "matmul": []}
    for n in vector_sizes(None):
        a, b = cp.asarray(rng.random(n, np.float32)), cp.asarray(rng.random(n, np.float32))
        c = cp.empty(n, cp.float32)
        cases["vector_add"].append(
            (n, lambda a=a, b=b, c=c: (cp.add(a, b, out=c), sync()), 12 * n / 1e9))
        cases["reduce"].append((n, lambda a=a: (a.sum(), sync()), 4 * n / 1e9))
    for m in matmul_sizes(None):
        p, q = cp.asarray(rng.random((m, m), np.float32)), cp.asarray(rng.random((m, m),
                                                                                   np.float32))
        cases["matmul"].append((m, lambda p=p, q=q: (p @ q, sync()), 2 * m**3 / 1e9))
    return cases


UNITS = {"vector_add": "GB/s", "reduce": "GB/s", "matmul": "GFLOP/s"}


def main() -> int:
    repeat = 3 if quick() else 9
    rng = np.random.default_rng(0)
    contenders: dict[str, dict[str, list[tuple[int, Runner, float]]]] = {}
    devs = devices()
    for dev in devs:
        contenders[f"kiln {dev.backend.name}"] = kiln_cases(dev, rng)
    if any(d.backend.name == "cuda" for d in devs):
        contenders["cupy"] = cupy_cases(rng)
    contenders["numpy"] = numpy_cases(rng)
    names = ", ".join(f"{d.name} ({d.capabilities.name})" for d in devs)
    print(f"throughput by size on {names}; {versions()}; median of {repeat} runs")
    for benchmark, unit in UNITS.items():
        rows = []
        for who, cases in contenders.items():
            for size, run, work in cases.get(benchmark, []):
                rate = work / (median_ms(run, repeat, warmup=1) / 1e3)
                record(benchmark, who, size, rate, unit)
                rows.append((who, size, f"{rate:.2f}"))
                print(f"  {benchmark} {who} {size}: {rate:.2f} {unit}", flush=True)
        print(f"\n{benchmark} ({unit})\n")
        print(markdown_table(("implementation", "size", unit), rows, "lrr"), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
