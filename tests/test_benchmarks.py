"""The benchmark scripts' helpers that reach into a backend (its compile cache, to time a
disk-cache hit as a new process would see it) keep working when the backend's parts move:
the timings themselves are the scripts' business, not asserted here."""

from __future__ import annotations

import importlib
import sys

import kiln
from tests.helpers import REPO, requires_backend

sys.path.insert(0, str(REPO / "benchmarks"))
bench_cpu = importlib.import_module("bench_cpu")  # benchmarks/ is no package


@requires_backend("cpu", "no C compiler with OpenMP")
def test_bench_cpu_compile_times_runs_cold_then_from_disk() -> None:
    cold, hit = bench_cpu.compile_times(kiln.device("cpu"), hits=2)
    assert cold > 0 and hit > 0
