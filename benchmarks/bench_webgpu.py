"""The webgpu plugin (on whatever adapter wgpu finds: Mesa's lavapipe without a GPU) beside
the cpu backend and NumPy, in the same run.

vector_add and reduce (`block_sum`, 2^22 f32) in GB/s and the 16x16 shared-memory tiled
matmul (512^2 f32) in GFLOP/s; each result is checked against NumPy first. Medians of
timed runs after a warm-up, each run synchronised; ratios are NumPy time / kiln time.

    python benchmarks/bench_webgpu.py [--quick]          (also: kiln bench --backend webgpu)

Exits at once (status 0) when another backend is asked for or the plugin is not installed
or finds no adapter.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

import numpy as np
from common import backend_device, median_ms, quick, ratio, record, versions

import kiln
from kiln.examples import BLOCK, TILE, block_sum, matmul_tiled_square, vector_add

Run = Callable[[], object]


def kernels(dev: kiln.Device, n: int, mm: int) -> dict[str, tuple[Run, float]]:
    """Each benchmark's synchronised run on `dev` and its work (bytes or flops)."""
    rng = np.random.default_rng(0)
    a, b = rng.random(n, np.float32), rng.random(n, np.float32)
    da, db, dc = kiln.to_device(a, dev), kiln.to_device(b, dev), kiln.zeros(n, device=dev)
    total = kiln.zeros(1, device=dev)
    ma, mb = rng.random((mm, mm), np.float32), rng.random((mm, mm), np.float32)
    dma, dmb, dmc = kiln.to_device(ma, dev), kiln.to_device(mb, dev), kiln.zeros((mm, mm),
                                                                                device=dev)
    blocks = (n + BLOCK - 1) // BLOCK

    def add() -> None:
        vector_add[blocks, BLOCK](da, db, dc, n)
        dev.synchronize()

    def reduce() -> None:
        total.copy_from_host(np.zeros(1, np.float32))
        block_sum[min(blocks, 1024), BLOCK](da, total, n)
        dev.synchronize()

    def matmul() -> None:
        matmul_tiled_square[(mm // TILE, mm // TILE), (TILE, TILE)](dma, dmb, dmc, mm)
        dev.synchronize()

    add()
    np.testing.assert_array_equal(dc.numpy(), a + b)
    reduce()
    np.testing.assert_allclose(total.numpy()[0], a.sum(dtype=np.float64), rtol=1e-4)
    matmul()
    np.testing.assert_allclose(dmc.numpy(), ma @ mb, rtol=1e-4, atol=1e-3)
    return {"vector_add": (add, 12.0 * n), "reduce": (reduce, 4.0 * n),
            "matmul_tiled": (matmul, 2.0 * mm**3)}


def numpy_runs(n: int, mm: int) -> dict[str, Run]:
    rng = np.random.default_rng(0)
    a, b, c = rng.random(n, np.float32), rng.random(n, np.float32), np.empty(n, np.float32)
    ma, mb = rng.random((mm, mm), np.float32), rng.random((mm, mm), np.float32)
    return {"vector_add": lambda: np.add(a, b, out=c), "reduce": lambda: a.sum(),
            "matmul_tiled": lambda: ma @ mb}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, few runs")
    small = parser.parse_args().quick or quick()
    dev = backend_device("webgpu", "bench_webgpu")
    if dev is None:
        return 0
    n, mm, repeat = (1 << 18, 128, 3) if small else (1 << 22, 512, 7)
    print(f"webgpu: {dev.capabilities.name}; Python {versions()}; "
          f"{dev.handle.identity.split(' | ')[0]}")
    peers = {"webgpu": kernels(dev, n, mm)}
    cpu = next((e for e in kiln.backends() if e.name == "cpu" and e.available), None)
    if cpu is not None:
        peers["cpu"] = kernels(kiln.device("cpu"), n, mm)
    reference = numpy_runs(n, mm)
    print(f"\n| benchmark | size | {' | '.join(f'kiln {p}' for p in peers)} | NumPy | "
          f"{' | '.join(f'NumPy / {p}' for p in peers)} |")
    print("|---" * (3 + 2 * len(peers)) + "|")
    for name, numpy_run in reference.items():
        unit, scale = ("GFLOP/s" if name == "matmul_tiled" else "GB/s"), 1e-9
        work = peers["webgpu"][name][1]
        base = median_ms(numpy_run, repeat)
        times = {p: median_ms(runs[name][0], repeat) for p, runs in peers.items()}
        for p, ms in times.items():
            record(name, f"kiln {p}", n if name != "matmul_tiled" else mm,
                   work * scale / (ms * 1e-3), unit)
        size = f"{mm}^2" if name == "matmul_tiled" else f"2^{n.bit_length() - 1}"
        rates = " | ".join(f"{work * scale / (ms * 1e-3):.2f} {unit} ({ms:.2f} ms)"
                           for ms in times.values())
        ratios = " | ".join(ratio(base, ms) for ms in times.values())
        print(f"| {name} | {size} | {rates} | {work * scale / (base * 1e-3):.2f} {unit} "
              f"({base:.2f} ms) | {ratios} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
