"""Launch-bound programs launched eagerly and replayed from a `kiln.capture`, per backend.

Two programs: a Needleman-Wunsch wavefront (a border launch, then one launch per
anti-diagonal: 2N launches of growing, then shrinking, grids) and a chain of tiny launches
(one thread each: the launch cost alone). Times are wall clock for the whole program,
synchronisation included (what a caller waits for), medians of interleaved repetitions after
a warm-up; "per launch" divides by the launches; the ratio is eager / replay (above 1: the
replay is faster). The capture column is the one-time cost: recording plus the first replay
(which builds the CUDA graphs on cuda); the Param column times replays that change the
wavefront's gap penalty, a kiln.Param every launch takes (each launch is updated: on cuda
with cuGraphExecKernelNodeSetParams). Each replay's result is checked against the eager
one.

    python benchmarks/bench_graphs.py [--backend cuda] [--n 1024] [--tiny 2000] [--repeat 15]
    (also: kiln bench --only graphs [--backend cuda])
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np
from common import markdown_table, quick, ratio, versions

import kiln
from kiln import i32

BLOCK = 128


@kiln.kernel
def border(h: i32[:, :], n: i32, gap: i32):
    t = kiln.global_id(0)
    if t <= n:
        h[t, 0] = t * gap
        h[0, t] = t * gap


@kiln.kernel
def diagonal(h: i32[:, :], a: i32[:], b: i32[:], d: i32, lo: i32, count: i32, gap: i32):
    t = kiln.global_id(0)
    if t < count:
        i = lo + t
        j = d - i
        score = h[i - 1, j - 1] - 1
        if a[i - 1] == b[j - 1]:
            score = h[i - 1, j - 1] + 1
        h[i, j] = max(score, max(h[i - 1, j] + gap, h[i, j - 1] + gap))


@kiln.kernel
def bump(x: i32[:], k: i32):
    x[0] = x[0] + k


def needleman_wunsch(h: kiln.DeviceArray, a: kiln.DeviceArray, b: kiln.DeviceArray,
                     n: int, gap: int | kiln.Param = -1) -> int:
    """Fill the score matrix; the number of launches."""
    border[(n + BLOCK) // BLOCK, BLOCK](h, n, gap)
    for d in range(2, 2 * n + 1):
        lo = max(1, d - n)
        count = min(n, d - 1) - lo + 1
        diagonal[(count + BLOCK - 1) // BLOCK, BLOCK](h, a, b, d, lo, count, gap)
    return 2 * n


def tiny(x: kiln.DeviceArray, launches: int) -> int:
    for _ in range(launches):
        bump[1, 1](x, 1)
    return launches


def timed(fn: Callable[[], object], dev: kiln.Device) -> float:
    start = time.perf_counter()
    fn()
    dev.synchronize()
    return (time.perf_counter() - start) * 1e3


def compare(dev: kiln.Device, eager: Callable[[], int], repeat: int,
            check: Callable[[], None], captured: Callable[[], int] | None = None) -> list[str]:
    """One table row: eager and replayed medians (ms and per launch), the capture's cost,
    and where `captured` (the program with a kiln.Param "gap") is given, the median of
    replays that change the Param (every launch taking it is updated)."""
    launches = eager()  # warm-up: compiles
    dev.synchronize()
    start = time.perf_counter()
    with kiln.capture(dev) as graph:
        (captured or eager)()
    graph.replay()
    dev.synchronize()
    capture_ms = (time.perf_counter() - start) * 1e3
    check()
    runs: dict[str, list[float]] = {"eager": [], "replay": []}
    for _ in range(repeat):  # interleaved, so drift hits both alike
        runs["eager"].append(timed(eager, dev))
        runs["replay"].append(timed(graph.replay, dev))
    e, r = (statistics.median(runs[k]) for k in ("eager", "replay"))
    updated = "-"
    if captured is not None:
        def replay_with(gap: int) -> None:
            graph.replay(gap=gap)

        gaps = [-2, -1] * (repeat // 2 + 1)
        updated = f"{statistics.median(timed(lambda g=g: replay_with(g), dev) for g in gaps):.2f}"
        check()  # the last replay set the gap back to -1
    return [f"{launches}", f"{e:.2f}", f"{e * 1e3 / launches:.2f}", f"{r:.2f}",
            f"{r * 1e3 / launches:.2f}", ratio(e, r), f"{capture_ms:.1f}", updated,
            "yes" if graph.native else "no"]


def run(dev: kiln.Device, n: int, launches: int, repeat: int) -> list[list[str]]:
    rng = np.random.default_rng(0)
    a = kiln.to_device(rng.integers(0, 4, n).astype(np.int32), dev)
    b = kiln.to_device(rng.integers(0, 4, n).astype(np.int32), dev)
    h_eager, h = (kiln.zeros((n + 1, n + 1), i32, dev) for _ in range(2))
    needleman_wunsch(h_eager, a, b, n)

    def same() -> None:
        if not np.array_equal(h.numpy(), h_eager.numpy()):
            sys.exit(f"bench_graphs: the replayed wavefront differs from the eager one on "
                     f"{dev.name}")

    x = kiln.zeros(1, i32, dev)

    def counted() -> None:
        if x.numpy()[0] != 2 * launches:  # the warm-up, then the first replay
            sys.exit(f"bench_graphs: the replayed tiny launches miscounted on {dev.name}")

    return [
        [dev.backend.name, f"Needleman-Wunsch {n}",
         *compare(dev, lambda: needleman_wunsch(h, a, b, n), repeat, same,
                  lambda: needleman_wunsch(h, a, b, n, kiln.Param("gap", -1)))],
        [dev.backend.name, "tiny launches",
         *compare(dev, lambda: tiny(x, launches), repeat, counted)],
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", action="append", default=None,
                        help="a backend to time (repeatable; default: every available one)")
    parser.add_argument("--n", type=int, default=None,
                        help="sequence length: 2n launches (default 1024, 128 on interp)")
    parser.add_argument("--tiny", type=int, default=2000, help="tiny launches per program")
    parser.add_argument("--repeat", type=int, default=5 if quick() else 15)
    args = parser.parse_args()
    wanted = os.environ.get("KILN_BACKEND")  # kiln bench --backend NAME
    names = args.backend or [e.name for e in kiln.backends()
                             if e.available and wanted in (None, e.name)]
    rows = []
    for name in names:
        dev = kiln.device(name)
        n = args.n or (128 if name == "interp" or quick() else 1024)
        rows += run(dev, n, args.tiny if not quick() else 200, args.repeat)
    print(f"eager launches vs kiln.capture replays, median of {args.repeat}; {versions()}, "
          f"{time.strftime('%Y-%m-%d')}\n")
    print(markdown_table(
        ["backend", "program", "launches", "eager ms", "eager us/launch", "replay ms",
         "replay us/launch", "eager/replay", "capture ms", "replay with new Param ms",
         "CUDA graphs"],
        rows, "llrrrrrrrrl"))


if __name__ == "__main__":
    main()
