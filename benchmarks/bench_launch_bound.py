"""Launch-bound programs beside their CUDA C twins: host loops of many small kernels.

Three programs of the kind that launch thousands of small kernels from a host loop, each
written in kiln and, launch for launch, in CUDA C (`twins/launch_bound.cu`, built with
`nvcc -O3 -fmad=false` for the same floating-point policy as kiln's default):

- wavefront: a Needleman-Wunsch score matrix filled one anti-diagonal per launch (the
  grid changes every step);
- bfs: breadth-first search over a random graph, two launches per level and a 4-byte flag
  read back after each level;
- gaussian: Gaussian elimination, two launches per column (a 1-D and a shrinking 2-D grid).

Each times the whole host loop (wall clock, device synchronised before and after; median
of 7 after a warm-up) and checks kiln's result against the twin's (and NumPy's where it is
cheap). Ratios are twin time / kiln time (above 1: kiln is faster).

    python benchmarks/bench_launch_bound.py [--backend cuda] [--quick]

The twins need nvcc and a CUDA GPU; other backends run the kiln side alone, at small sizes.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
from common import markdown_table, median_ms, ratio, versions

import kiln
from kiln import f32, i32

TWINS = Path(__file__).parent / "twins" / "launch_bound.cu"
RUNS = 7
PENALTY = 10


@kiln.kernel
def nw_diagonal(score: i32[:, :], ref: i32[:, :], d: i32, n: i32, penalty: i32):
    first = max(1, d - n)
    i = first + kiln.global_id(0)
    j = d - i
    if i <= min(n, d - 1) and j >= 1:
        best = score[i - 1, j - 1] + ref[i, j]
        best = max(best, score[i - 1, j] - penalty)
        best = max(best, score[i, j - 1] - penalty)
        score[i, j] = best


@kiln.kernel
def bfs_expand(starts: i32[:], edges: i32[:], frontier: i32[:], nxt: i32[:],
               visited: i32[:], cost: i32[:], nodes: i32):
    v = kiln.global_id(0)
    if v < nodes and frontier[v] != 0:
        frontier[v] = 0
        for e in range(starts[v], starts[v + 1]):
            u = edges[e]
            if visited[u] == 0:
                cost[u] = cost[v] + 1
                nxt[u] = 1


@kiln.kernel
def bfs_commit(frontier: i32[:], nxt: i32[:], visited: i32[:], more: i32[:], nodes: i32):
    v = kiln.global_id(0)
    if v < nodes and nxt[v] != 0:
        frontier[v] = 1
        visited[v] = 1
        nxt[v] = 0
        more[0] = 1


@kiln.kernel
def fan1(a: f32[:, :], m: f32[:, :], n: i32, t: i32):
    i = kiln.global_id(0)
    if i < n - 1 - t:
        m[i + t + 1, t] = a[i + t + 1, t] / a[t, t]


@kiln.kernel
def fan2(a: f32[:, :], b: f32[:], m: f32[:, :], n: i32, t: i32):
    i = kiln.block_idx.y * kiln.block_dim.y + kiln.thread_idx.y
    j = kiln.block_idx.x * kiln.block_dim.x + kiln.thread_idx.x
    if i < n - 1 - t and j < n - t:
        row = i + 1 + t
        col = j + t
        a[row, col] -= m[row, t] * a[t, col]
        if j == 0:
            b[row] -= m[row, t] * b[t]


def loop_ms(dev: kiln.Device, run: Callable[[], object]) -> float:
    """The median wall time of `run` with the device's work it queued, after a warm-up."""

    def synchronised() -> None:
        run()
        dev.synchronize()

    dev.synchronize()
    return median_ms(synchronised, RUNS, warmup=1)


def wavefront(dev: kiln.Device, n: int, folder: Path) -> tuple[float, np.ndarray]:
    rng = np.random.default_rng(1)
    ref = rng.integers(-10, 11, (n + 1, n + 1)).astype(np.int32)
    init = np.zeros((n + 1, n + 1), np.int32)
    init[0, :] = -PENALTY * np.arange(n + 1)
    init[:, 0] = -PENALTY * np.arange(n + 1)
    ref.tofile(folder / "ref.bin")
    init.tofile(folder / "score.bin")
    dref, dscore = kiln.to_device(ref, dev), kiln.empty(init.shape, i32, dev)

    def run() -> None:
        dscore.copy_from_host(init)
        for d in range(2, 2 * n + 1):
            length = min(n, d - 1) - max(1, d - n) + 1
            nw_diagonal[(length + 255) // 256, 256](dscore, dref, d, n, PENALTY)

    ms = loop_ms(dev, run)
    return ms, dscore.copy_to_host()


def random_graph(nodes: int, degree: int, rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    counts = rng.integers(1, 2 * degree, nodes)
    starts = np.zeros(nodes + 1, np.int32)
    np.cumsum(counts, out=starts[1:])
    edges = rng.integers(0, nodes, int(starts[-1])).astype(np.int32)
    return starts, edges


def bfs(dev: kiln.Device, nodes: int, folder: Path) -> tuple[float, np.ndarray]:
    starts, edges = random_graph(nodes, 4, np.random.default_rng(2))
    starts.tofile(folder / "starts.bin")
    edges.tofile(folder / "edges.bin")
    dstarts, dedges = kiln.to_device(starts, dev), kiln.to_device(edges, dev)
    frontier, nxt, visited, cost = (kiln.zeros(nodes, i32, dev) for _ in range(4))
    more = kiln.zeros(1, i32, dev)
    cost0 = np.full(nodes, -1, np.int32)
    cost0[0] = 0
    first = np.zeros(nodes, np.int32)
    first[0] = 1
    flag, zero, none = np.zeros(1, np.int32), np.zeros(1, np.int32), np.zeros(nodes, np.int32)
    blocks = (nodes + 255) // 256

    def run() -> None:
        cost.copy_from_host(cost0)
        frontier.copy_from_host(first)
        visited.copy_from_host(first)
        nxt.copy_from_host(none)
        flag[0] = 1
        while flag[0]:
            more.copy_from_host(zero)
            bfs_expand[blocks, 256](dstarts, dedges, frontier, nxt, visited, cost, nodes)
            bfs_commit[blocks, 256](frontier, nxt, visited, more, nodes)
            more.copy_to_host(flag)

    ms = loop_ms(dev, run)
    return ms, cost.copy_to_host()


def gaussian(dev: kiln.Device, n: int, folder: Path) -> tuple[float, np.ndarray]:
    rng = np.random.default_rng(3)
    a0 = (rng.random((n, n), np.float32) + np.eye(n, dtype=np.float32) * n).astype(np.float32)
    b0 = rng.random(n, np.float32)
    a0.tofile(folder / "a.bin")
    b0.tofile(folder / "b.bin")
    a, b, m = kiln.empty((n, n), f32, dev), kiln.empty(n, f32, dev), kiln.empty((n, n), f32, dev)
    zeros = np.zeros((n, n), np.float32)

    def run() -> None:
        a.copy_from_host(a0)
        b.copy_from_host(b0)
        m.copy_from_host(zeros)
        for t in range(n - 1):
            fan1[(n - 1 - t + 255) // 256, 256](a, m, n, t)
            fan2[((n - t + 15) // 16, (n - 1 - t + 15) // 16), (16, 16)](a, b, m, n, t)

    ms = loop_ms(dev, run)
    return ms, np.concatenate([a.copy_to_host().ravel(), b.copy_to_host()])


def check_against_numpy(name: str, size: int, result: np.ndarray, folder: Path) -> None:
    """NumPy references: the score matrix diagonal by diagonal, bfs levels, the solution of
    the triangular system."""
    if name == "wavefront":
        ref = np.fromfile(folder / "ref.bin", np.int32).reshape(size + 1, size + 1)
        score = np.fromfile(folder / "score.bin", np.int32).reshape(size + 1, size + 1)
        for d in range(2, 2 * size + 1):
            i = np.arange(max(1, d - size), min(size, d - 1) + 1)
            j = d - i
            score[i, j] = np.maximum.reduce([score[i - 1, j - 1] + ref[i, j],
                                             score[i - 1, j] - PENALTY,
                                             score[i, j - 1] - PENALTY])
        assert np.array_equal(score, result), "the score matrix differs from NumPy's"
    if name == "bfs":
        starts = np.fromfile(folder / "starts.bin", np.int32)
        edges = np.fromfile(folder / "edges.bin", np.int32)
        level = np.full(size, -1, np.int64)
        level[0], frontier, depth = 0, np.array([0]), 0
        while frontier.size:
            depth += 1
            out = np.concatenate([edges[starts[v]:starts[v + 1]] for v in frontier])
            out = np.unique(out[level[out] < 0])
            level[out] = depth
            frontier = out
        assert np.array_equal(level, result), "bfs levels differ from NumPy's"
    if name == "gaussian":
        a0 = np.fromfile(folder / "a.bin", np.float32).reshape(size, size).astype(np.float64)
        b0 = np.fromfile(folder / "b.bin", np.float32).astype(np.float64)
        u = np.triu(result[:size * size].reshape(size, size).astype(np.float64))
        x = np.linalg.solve(u, result[size * size:].astype(np.float64))
        assert np.allclose(x, np.linalg.solve(a0, b0), rtol=1e-3, atol=1e-5), \
            "gaussian's solution differs from NumPy's"


def build_twins(folder: Path) -> Path | None:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        return None
    exe = folder / "launch_bound"
    subprocess.run([nvcc, "-O3", "-arch=sm_90", "-fmad=false", "-o", str(exe), str(TWINS)],
                   check=True)
    return exe


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="cuda")
    parser.add_argument("--quick", action="store_true", help="small sizes")
    opts = parser.parse_args()
    entry = next(e for e in kiln.backends() if e.name == opts.backend)
    if not entry.available:
        print(f"bench_launch_bound: skipped, {opts.backend} is unavailable: {entry.reason}")
        return 0
    dev = kiln.device(opts.backend)
    small = opts.quick or opts.backend != "cuda"
    programs = {"wavefront": (wavefront, 128 if small else 2048),
                "bfs": (bfs, 20_000 if small else 1_000_000),
                "gaussian": (gaussian, 64 if small else 1024)}
    print(f"device: {dev.name} ({dev.capabilities.name}); Python {versions()}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="kiln-launch-bound-") as tmp:
        twins = build_twins(Path(tmp)) if opts.backend == "cuda" else None
        for name, (program, size) in programs.items():
            folder = Path(tmp) / name
            folder.mkdir()
            ms, result = program(dev, size, folder)
            check_against_numpy(name, size, result, folder)
            twin_ms: float | None = None
            if twins is not None:
                out = subprocess.run([str(twins), name, str(size), str(folder)], check=True,
                                     capture_output=True, text=True).stdout
                twin_ms = float(out.split()[-1])
                twin = np.fromfile(folder / "out.bin", result.dtype)
                if result.dtype == np.int32:
                    assert np.array_equal(twin, result.ravel()), f"{name}: kiln != CUDA C"
                else:
                    np.testing.assert_allclose(result.ravel(), twin, rtol=1e-4, atol=1e-4)
            rows.append((name, size, f"{ms:.3f}", "" if twin_ms is None else f"{twin_ms:.3f}",
                         "" if twin_ms is None else ratio(twin_ms, ms)))
    print(markdown_table(("program", "size", "kiln ms", "CUDA C ms", "kiln speed"), rows,
                         "lrrrr"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
