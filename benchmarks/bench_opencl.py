"""The opencl backend against the other backends and NumPy: vector_add, reduce, matmul.

For each device: the cold build time of each kernel (an empty kiln cache, the driver's own
kernel cache off), the first launch (PoCL finishes code generation there), the median
launch + synchronize time of each kernel, and the launch overhead of a one-thread kernel
(synchronous: launch + wait; queued: 1000 launches, then one wait). NumPy runs the same
operations on the host (its matmul is BLAS).

    python benchmarks/bench_opencl.py [--devices opencl cpu] [--n 4194304] [--mm 512]
                                      [--repeat 10] [--markdown FILE]

By default it compares every OpenCL device with the cpu and cuda backends where available.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from dataclasses import dataclass

import numpy as np
from common import markdown_table, median_ms, timed_ms

import kiln
from kiln import f32
from kiln.examples import BLOCK, TILE, block_sum, matmul_tiled, vector_add


@kiln.kernel
def touch(x: f32[:]):
    x[0] = 1.0


@dataclass
class Row:
    device: str
    kernel: str
    build_ms: float | None
    first_ms: float | None
    run_ms: float
    rate: str


def label(dev: kiln.Device) -> str:
    return f"{dev.name} ({dev.capabilities.name})"


def bench_device(dev: kiln.Device, n: int, mm: int, repeat: int) -> list[Row]:
    rng = np.random.default_rng(0)
    a, b = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    ma, mb = rng.random((mm, mm), dtype=np.float32), rng.random((mm, mm), dtype=np.float32)
    da, db, dc = kiln.to_device(a, dev), kiln.to_device(b, dev), kiln.empty(n, f32, dev)
    dout = kiln.zeros(1, f32, dev)
    dma, dmb, dmc = kiln.to_device(ma, dev), kiln.to_device(mb, dev), kiln.empty((mm, mm), f32, dev)
    mm_grid = (-(-mm // TILE), -(-mm // TILE))
    cases = [
        ("vector_add", vector_add, -(-n // BLOCK), BLOCK, (da, db, dc, n),
         lambda ms: f"{3 * 4 * n / ms / 1e6:.1f} GB/s"),
        ("reduce", block_sum, min(-(-n // BLOCK), 1024), BLOCK, (da, dout, n),
         lambda ms: f"{4 * n / ms / 1e6:.1f} GB/s"),
        ("matmul", matmul_tiled, mm_grid, (TILE, TILE), (dma, dmb, dmc),
         lambda ms: f"{2 * mm**3 / ms / 1e6:.1f} GFLOP/s"),
    ]
    rows = []
    for name, kernel, grid, block, args, rate in cases:
        build = timed_ms(lambda k=kernel: k.compile(dev))

        def run(k=kernel, g=grid, bl=block, a=args) -> None:
            k[g, bl](*a)
            dev.synchronize()

        first = timed_ms(run)
        ms = median_ms(run, repeat, warmup=0)
        rows.append(Row(label(dev), name, build, first, ms, rate(ms)))
    np.testing.assert_allclose(dc.numpy(), a + b)
    np.testing.assert_allclose(dmc.numpy(), ma @ mb, rtol=1e-3)
    dout.copy_from_host(np.zeros(1, np.float32))
    block_sum[1024, BLOCK](da, dout, n)
    np.testing.assert_allclose(dout.numpy()[0], a.sum(dtype=np.float64), rtol=1e-3)
    rows += launch_overhead(dev, repeat)
    return rows


def launch_overhead(dev: kiln.Device, repeat: int) -> list[Row]:
    x = kiln.zeros(1, f32, dev)

    def sync_launch() -> None:
        touch[1, 1](x)
        dev.synchronize()

    def queued(count: int = 1000) -> None:
        for _ in range(count):
            touch[1, 1](x)
        dev.synchronize()

    sync_us = median_ms(sync_launch, max(repeat, 50), warmup=1) * 1e3
    queued_us = median_ms(queued, 3, warmup=0)  # ms per 1000 launches = us per launch
    return [Row(label(dev), "launch + wait (1 thread)", None, None, sync_us / 1e3,
                f"{sync_us:.0f} us"),
            Row(label(dev), "launch, queued (1 thread)", None, None, queued_us / 1e3,
                f"{queued_us:.1f} us")]


def bench_numpy(n: int, mm: int, repeat: int) -> list[Row]:
    rng = np.random.default_rng(0)
    a, b = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    c = np.empty_like(a)
    ma, mb = rng.random((mm, mm), dtype=np.float32), rng.random((mm, mm), dtype=np.float32)
    out = []
    for name, fn, rate in (
        ("vector_add", lambda: np.add(a, b, out=c), lambda ms: f"{12 * n / ms / 1e6:.1f} GB/s"),
        ("reduce", lambda: a.sum(), lambda ms: f"{4 * n / ms / 1e6:.1f} GB/s"),
        ("matmul", lambda: ma @ mb, lambda ms: f"{2 * mm**3 / ms / 1e6:.1f} GFLOP/s"),
    ):
        ms = median_ms(fn, repeat, warmup=1)
        out.append(Row("numpy (host)", name, None, None, ms, rate(ms)))
    return out


def default_devices() -> list[str]:
    names = [d.name for d in kiln.devices() if d.backend.name == "opencl"]
    available = {e.name for e in kiln.backends() if e.available}
    return names + [b for b in ("cpu", "cuda") if b in available]


def table(rows: list[Row], n: int, mm: int) -> str:
    def cell(v: float | None) -> str:
        return "" if v is None else f"{v:.1f}"

    heading = (f"n = {n} float32 (vector_add, reduce), matmul {mm}x{mm} float32; times in ms "
               "(build: cold compile; first: first launch + wait; run: median launch + wait)")
    body = markdown_table(
        ("kernel", "device", "build", "first", "run", "rate"),
        [(r.kernel, r.device, cell(r.build_ms), cell(r.first_ms), f"{r.run_ms:.3f}", r.rate)
         for r in sorted(rows, key=lambda r: (r.kernel, r.device))], align="llrrrr")
    return f"{heading}\n\n{body}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", nargs="*", help="device specs (default: every OpenCL "
                        "device, cpu and cuda where available)")
    parser.add_argument("--n", type=int, default=1 << 22)
    parser.add_argument("--mm", type=int, default=512)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--markdown", help="also append the table to this file")
    args = parser.parse_args()
    # cold builds: an empty kiln cache, and the drivers' own caches off (read when they load)
    os.environ.setdefault("KILN_CACHE_DIR", tempfile.mkdtemp(prefix="kiln-bench-"))
    os.environ.setdefault("POCL_KERNEL_CACHE", "0")
    os.environ.setdefault("CUDA_CACHE_DISABLE", "1")
    specs = args.devices or ([os.environ["KILN_BACKEND"]] if os.environ.get("KILN_BACKEND")
                             else default_devices())
    rows: list[Row] = []
    for spec in specs:
        try:
            rows += bench_device(kiln.device(spec), args.n, args.mm, args.repeat)
        except Exception as exc:  # one broken device must not lose the others' numbers
            print(f"{spec}: {type(exc).__name__}: {exc}")
    rows += bench_numpy(args.n, args.mm, args.repeat)
    text = table(rows, args.n, args.mm)
    print(text)
    if args.markdown:
        with open(args.markdown, "a") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
