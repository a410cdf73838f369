"""What the benchmark scripts share: choosing the backend, timing, ratios, tables, versions.

Imported by the `bench_*.py` scripts beside it (run as scripts, so this folder is on
`sys.path`); `kiln bench` runs only the `bench_*.py` files.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

import kiln


def backend_device(name: str, script: str) -> kiln.Device | None:
    """The device of backend `name`, or None (the script should exit 0) where `kiln bench
    --backend` (KILN_BACKEND) asked for another backend or this one is unavailable."""
    if os.environ.get("KILN_BACKEND", name) != name:
        return None
    entry = next(e for e in kiln.backends() if e.name == name)
    if not entry.available:
        print(f"{script}: skipped, the {name} backend is unavailable: {entry.reason}")
        return None
    return kiln.device(name)


def quick() -> bool:
    """Whether `kiln bench --quick` asked for small sizes and few runs."""
    return os.environ.get("KILN_BENCH_QUICK") == "1"


def record(benchmark: str, implementation: str, size: int, throughput: float,
           unit: str) -> None:
    """Keep one measurement for `kiln bench --plot` (a JSON line appended to the file that
    KILN_BENCH_RECORD names; nothing without it). `implementation` is e.g. "kiln cpu" or
    "numpy"; `size` is the problem size the x axis shows."""
    path = os.environ.get("KILN_BENCH_RECORD")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"benchmark": benchmark, "implementation": implementation,
                                "size": size, "throughput": throughput, "unit": unit}) + "\n")


def versions() -> str:
    """The Python and NumPy versions, for a results header."""
    return f"{platform.python_version()}, NumPy {np.__version__}"


# ---------------------------------------------------------------- timing


def timed_ms(fn: Callable[[], object]) -> float:
    """Milliseconds of one call of `fn` (wall clock)."""
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


def median_ms(fn: Callable[[], object], repeat: int, warmup: int = 2) -> float:
    """Median wall-clock milliseconds of `repeat` calls of `fn` after `warmup` untimed ones
    (`fn` synchronizes where it launches kernels)."""
    for _ in range(warmup):
        fn()
    return statistics.median(timed_ms(fn) for _ in range(repeat))


def event_median_ms(fn: Callable[[], object], repeat: int, event: Callable[[], Any],
                    synchronize: Callable[[], object], warmup: int = 3) -> float:
    """Median milliseconds of `fn` between pairs of `event()`s (with `record()` and
    `elapsed_time(end)`, as kiln's, CuPy's and PyTorch's events have).

    The repeats are queued back to back, so the device stays busy and the events time the
    work, not the host's launch latency."""
    for _ in range(warmup):
        fn()
    synchronize()
    pairs = [(event(), event()) for _ in range(repeat)]
    for start, end in pairs:
        start.record()
        fn()
        end.record()
    synchronize()
    return statistics.median(start.elapsed_time(end) for start, end in pairs)


def kiln_event_median_ms(dev: kiln.Device, fn: Callable[[], object], repeat: int,
                         warmup: int = 3) -> float:
    """`event_median_ms` with kiln events on `dev`'s default stream."""
    return event_median_ms(fn, repeat, lambda: kiln.Event(dev), dev.synchronize, warmup)


def ratio(numerator: float, denominator: float, digits: int = 2) -> str:
    """`numerator / denominator` as a factor, e.g. `1.25x`."""
    return f"{numerator / denominator:.{digits}f}x"


# ---------------------------------------------------------------- tables and cold compiles


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[object]],
                   align: str = "") -> str:
    """A Markdown table; `align` has one letter per column, `r` for right-aligned (others
    get `---`)."""
    rule = "|".join("---:" if a == "r" else "---" for a in align.ljust(len(headers)))
    lines = ["| " + " | ".join(str(cell) for cell in line) + " |" for line in (headers, *rows)]
    return "\n".join([lines[0], f"|{rule}|", *lines[1:]])


@contextmanager
def fresh_cache_dir() -> Iterator[str]:
    """An empty kiln compile cache (KILN_CACHE_DIR) for the `with` block, then the old one."""
    old = os.environ.get("KILN_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="kiln-bench-") as tmp:
        os.environ["KILN_CACHE_DIR"] = tmp
        try:
            yield tmp
        finally:
            if old is None:
                os.environ.pop("KILN_CACHE_DIR", None)
            else:
                os.environ["KILN_CACHE_DIR"] = old


def load_kernel(source: str, name: str, folder: str) -> kiln.Kernel:
    """A new kernel object, as a fresh process would make it: `source` (which defines kernel
    `name`) is written to a file in `folder` (kiln reads the source back) and run."""
    path = Path(folder) / f"{name}.py"
    path.write_text(source)
    scope: dict[str, Any] = {}
    exec(compile(source, str(path), "exec"), scope)
    return scope[name]
