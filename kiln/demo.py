"""`kiln demo`: three classic kernels on one device, checked against NumPy and timed.

Each kernel is run once to warm up (that compiles it), then `repeat` times between two
kiln events; the median is compared with the median time of the same job in NumPy.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from rich.console import Console
from rich.markup import escape
from rich.table import Table

import kiln
from kiln import f32, i32

BLOCK = 256
TILE = 16


@kiln.kernel
def vector_add(a: f32[:], b: f32[:], c: f32[:], n: i32):
    i = kiln.global_id(0)
    if i < n:
        c[i] = a[i] + b[i]


@kiln.kernel
def block_sum(x: f32[:], out: f32[:], n: i32):
    s = kiln.shared(f32, BLOCK)
    t = kiln.thread_idx.x
    acc = f32(0)
    i = kiln.global_id(0)
    while i < n:  # grid-stride loop
        acc += x[i]
        i += kiln.global_size(0)
    s[t] = acc
    kiln.barrier()
    k = kiln.block_dim.x // 2
    while k > 0:
        if t < k:
            s[t] += s[t + k]
        kiln.barrier()
        k //= 2
    if t == 0:
        kiln.atomic_add(out, 0, s[0])


@kiln.kernel
def matmul(a: f32[:, :], b: f32[:, :], c: f32[:, :]):
    """c = a @ b with 16x16 tiles staged in shared memory."""
    ta = kiln.shared(f32, (TILE, TILE))
    tb = kiln.shared(f32, (TILE, TILE))
    tx, ty = kiln.thread_idx.x, kiln.thread_idx.y
    row = kiln.block_idx.y * TILE + ty
    col = kiln.block_idx.x * TILE + tx
    n, inner, m = a.shape[0], a.shape[1], b.shape[1]
    acc = f32(0)
    for t in range(0, inner, TILE):
        ta[ty, tx] = a[row, t + tx] if row < n and t + tx < inner else 0.0
        tb[ty, tx] = b[t + ty, col] if t + ty < inner and col < m else 0.0
        kiln.barrier()
        for k in range(TILE):
            acc += ta[ty, k] * tb[k, tx]
        kiln.barrier()
    if row < n and col < m:
        c[row, col] = acc


@dataclass
class Case:
    """One demo job: how to queue it on the device, and what NumPy computes instead."""

    name: str
    size: str
    reset: Callable[[], None]  # queued before each run, outside the timing
    run: Callable[[], None]
    result: Callable[[], np.ndarray]
    expected: np.ndarray
    numpy_run: Callable[[], object]
    tolerance: float


def cases(dev: kiln.Device, rng: np.random.Generator) -> list[Case]:
    n = 1 << 20
    x, y = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    a, b, c = kiln.to_device(x, dev), kiln.to_device(y, dev), kiln.empty(n, f32, dev)
    blocks = math.ceil(n / BLOCK)

    total = kiln.zeros(1, f32, dev)
    zero = np.zeros(1, np.float32)

    size = 256
    p, q = rng.random((size, size), dtype=np.float32), rng.random((size, size), dtype=np.float32)
    mp, mq, mr = kiln.to_device(p, dev), kiln.to_device(q, dev), kiln.empty((size, size), f32, dev)
    tiles = (math.ceil(size / TILE), math.ceil(size / TILE))

    def nothing() -> None:
        pass

    return [
        Case("vector_add", f"{n:,}", nothing,
             lambda: vector_add[blocks, BLOCK](a, b, c, n), c.numpy,
             x.astype(np.float64) + y, lambda: np.add(x, y), 1e-6),
        Case("block_sum", f"{n:,}", lambda: total.copy_from_host(zero),
             lambda: block_sum[blocks, BLOCK](a, total, n), total.numpy,
             np.array([x.sum(dtype=np.float64)]), lambda: x.sum(), 1e-4),
        Case("matmul", f"{size}x{size}", nothing,
             lambda: matmul[tiles, (TILE, TILE)](mp, mq, mr), mr.numpy,
             p.astype(np.float64) @ q, lambda: p @ q, 1e-4),
    ]


def time_device(case: Case, dev: kiln.Device, repeat: int) -> float:
    """Median milliseconds of `repeat` runs, measured with kiln events."""
    times = []
    for _ in range(repeat):
        case.reset()
        start = kiln.Event(dev).record()
        case.run()
        end = kiln.Event(dev).record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def time_numpy(job: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        job()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def relative_error(result: np.ndarray, expected: np.ndarray) -> float:
    scale = max(float(np.max(np.abs(expected))), np.finfo(np.float32).tiny)
    return float(np.max(np.abs(result.astype(np.float64) - expected))) / scale


def run_demo(device: str | None, console: Console, repeat: int = 7) -> int:
    """Run the demo on `device` (default: the best available); 0 when every check passes."""
    dev = kiln.device(device)
    console.print(f"kiln demo on [bold]{dev.name}[/bold] ({escape(dev.capabilities.name)}), "
                  f"f32 data\nerror: max relative error vs NumPy in f64; times: median of "
                  f"{repeat} runs after a warm-up")
    table = Table()
    for column in ("kernel", "size", "error", "check", "kiln ms", "NumPy ms", "kiln/NumPy"):
        table.add_column(column, justify="left" if column in ("kernel", "size") else "right",
                         no_wrap=True)
    failures = 0
    for case in cases(dev, np.random.default_rng(0)):
        case.reset()
        case.run()  # warm-up: compiles the kernel for this device
        error = relative_error(case.result(), case.expected)
        ok = error <= case.tolerance
        failures += not ok
        device_ms = time_device(case, dev, repeat)
        numpy_ms = time_numpy(case.numpy_run, repeat)
        table.add_row(case.name, case.size, f"{error:.1e}",
                      "[green]OK[/green]" if ok else "[red]FAIL[/red]",
                      f"{device_ms:.2f}", f"{numpy_ms:.2f}", f"{device_ms / numpy_ms:.1f}x")
    console.print(table)
    if failures:
        console.print(f"[red]{failures} result(s) differ from NumPy[/red]")
    return 1 if failures else 0
