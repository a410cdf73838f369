"""Divergent loops on the interp backend: lanes that leave a loop early are compacted away
(kiln/builtin_backends/interp/compaction.py); the answers stay NumPy's on every backend."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import f32, i32
from kiln.builtin_backends.interp import compaction
from kiln.examples import JULIA_C, julia, spmv_csr
from tests.helpers import backend_entry


def devices() -> list:
    return [pytest.param(name, marks=pytest.mark.skipif(
        not backend_entry(name).available, reason=f"{name}: {backend_entry(name).reason}"))
        for name in ("interp", "cpu")]


def random_csr(rows: int, seed: int = 0) -> tuple[np.ndarray, ...]:
    """A CSR matrix with skewed row lengths (0 to 60, most short), and a vector."""
    rng = np.random.default_rng(seed)
    lengths = np.minimum(rng.geometric(0.15, rows) - 1, 60).astype(np.int32)
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    indices = rng.integers(0, rows, int(indptr[-1]), dtype=np.int32)
    data = rng.standard_normal(int(indptr[-1]), dtype=np.float32)
    x = rng.standard_normal(rows, dtype=np.float32)
    return indptr, indices, data, x


def spmv_reference(indptr, indices, data, x) -> np.ndarray:
    """Row by row in f32, in the kernel's order (sequential sums)."""
    y = np.zeros(indptr.size - 1, np.float32)
    products = data * x[indices]
    for k in range(int(np.diff(indptr).max(initial=0))):
        rows = np.flatnonzero(indptr[:-1] + k < indptr[1:])
        y[rows] += products[indptr[rows] + k]
    return y


def julia_reference(h: int, w: int, cr: float, ci: float, max_iter: int) -> np.ndarray:
    f = np.float32
    zr = np.broadcast_to(f(-1.6) + f(3.2) * np.arange(w, dtype=f) / f(w), (h, w)).copy()
    zi = np.broadcast_to((f(-1.2) + f(2.4) * np.arange(h, dtype=f) / f(h))[:, None], (h, w)).copy()
    count = np.zeros((h, w), np.int32)
    for _ in range(max_iter):
        alive = zr * zr + zi * zi <= f(4)
        count += alive
        zr, zi = (np.where(alive, zr * zr - zi * zi + f(cr), zr),
                  np.where(alive, f(2) * zr * zi + f(ci), zi))
    return count


@pytest.mark.parametrize("backend", devices())
def test_spmv_csr_matches_numpy(backend) -> None:
    dev = kiln.device(backend)
    rows = 20000
    indptr, indices, data, x = random_csr(rows)
    y = kiln.zeros(rows, f32, dev)
    arrays = [kiln.to_device(a, dev) for a in (indptr, indices, data, x)]
    spmv_csr[(rows + 127) // 128, 128](*arrays, y)
    np.testing.assert_allclose(y.numpy(), spmv_reference(indptr, indices, data, x),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", devices())
def test_julia_matches_numpy(backend) -> None:
    dev = kiln.device(backend)
    h, w, max_iter = 96, 160, 200
    out = kiln.zeros((h, w), i32, dev)
    julia[((w + 15) // 16, (h + 15) // 16), (16, 16)](out, f32(JULIA_C[0]), f32(JULIA_C[1]),
                                                       max_iter)
    expected = julia_reference(h, w, *JULIA_C, max_iter)
    assert (out.numpy() != expected).mean() < 0.002  # contraction may flip boundary pixels
    if backend == "interp":
        np.testing.assert_array_equal(out.numpy(), expected)


@kiln.func
def first_multiple(start: i32, k: i32) -> i32:
    j = start
    while True:
        if j % k == 0:
            return j  # a return from inside a loop the caller compacts
        j += 1
    return -1


@kiln.kernel
def divergent_mix(lengths: i32[:], out: i32[:], firsts: i32[:], n: i32):
    i = kiln.global_id(0)
    if i >= n:
        return
    history = kiln.local(i32, 4)  # per-thread memory carried through the compacted loop
    for s in range(4):
        history[s] = -1
    total = 0
    k = 0
    while True:
        if k >= lengths[i]:
            break
        k += 1
        if k % 3 == 0:
            continue
        total += k
        history[k % 4] = k
    firsts[i] = first_multiple(i + lengths[i], 7)
    out[i] = total * 10000 + history[0] + history[1] * 10 + history[2] * 100 + history[3]


def divergent_mix_reference(lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    out, firsts = np.zeros_like(lengths), np.zeros_like(lengths)
    for i, length in enumerate(lengths):
        history, total = [-1] * 4, 0
        for k in range(1, length + 1):
            if k % 3:
                total += k
                history[k % 4] = k
        out[i] = total * 10000 + history[0] + history[1] * 10 + history[2] * 100 + history[3]
        j = i + length
        firsts[i] = j + (-j) % 7
    return out, firsts


@pytest.mark.parametrize("backend", devices())
def test_compacted_loops_keep_locals_breaks_and_returns(backend) -> None:
    """Most lanes leave at once and a few run long, so the interp compacts (several
    times); locals, break/continue and a device function's return survive it."""
    n = 3 * compaction.MIN_LANES
    rng = np.random.default_rng(5)
    lengths = np.where(rng.random(n) < 0.05, rng.integers(50, 300, n), rng.integers(0, 4, n))
    lengths = lengths.astype(np.int32)
    dev = kiln.device(backend)
    out, firsts = kiln.zeros(n, i32, dev), kiln.zeros(n, i32, dev)
    divergent_mix[(n + 255) // 256, 256](kiln.to_device(lengths, dev), out, firsts, n)
    expected_out, expected_firsts = divergent_mix_reference(lengths)
    np.testing.assert_array_equal(out.numpy(), expected_out)
    np.testing.assert_array_equal(firsts.numpy(), expected_firsts)


def test_the_interp_compacts_divergent_loops(monkeypatch) -> None:
    """Compaction happens (the counter moves) and changes nothing: the same launch with
    compaction turned off gives the same answer."""
    rows = 3 * compaction.MIN_LANES
    indptr, indices, data, x = random_csr(rows, seed=2)
    dev = kiln.device("interp")

    def run() -> np.ndarray:
        y = kiln.zeros(rows, f32, dev)
        arrays = [kiln.to_device(a, dev) for a in (indptr, indices, data, x)]
        spmv_csr[(rows + 255) // 256, 256](*arrays, y)
        return y.numpy()

    calls = []
    real = compaction.LaneSubset.__init__

    def counting(self, parent, lanes) -> None:
        calls.append(lanes.size)
        real(self, parent, lanes)

    monkeypatch.setattr(compaction.LaneSubset, "__init__", counting)
    compacted = run()
    assert calls and max(calls) < rows * compaction.COMPACT_FRACTION + 1
    monkeypatch.setattr(compaction, "COMPACT_FRACTION", 0.0)
    np.testing.assert_array_equal(compacted, run())
