"""`kiln demo`: three classic kernels (kiln.examples) on one device, checked against NumPy
and timed.

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
from kiln import f32
from kiln.examples import BLOCK, TILE, block_sum, matmul_tiled, vector_add


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
             lambda: matmul_tiled[tiles, (TILE, TILE)](mp, mq, mr), mr.numpy,
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
    scale = max(float(np.max(np.abs(expected))), float(np.finfo(np.float32).tiny))
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
