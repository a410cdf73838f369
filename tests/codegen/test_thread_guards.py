"""Thread guards on targets that run threads as loops: a region's opening test of the
thread's index (`if i < n:`, `if t < k:`, `if i >= n: return`) narrows the loop over x
and is tested for the whole block first where it can be; every backend agrees with NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import f32, i32, i64
from kiln.codegen.guards import ThreadGuard, thread_guard
from kiln.codegen.regions import initialisations
from kiln.examples import softmax_rows
from kiln.ir import nodes as ir
from kiln.ir.passes import lower_aggregates, lower_thread_loops
from kiln.ir.ranges import Ranges
from kiln.ir.visit import walk
from tests.helpers import backend_entry

BACKENDS = [name for name in ("interp", "cpu", "serial", "opencl")
            if backend_entry(name).available]


@kiln.kernel
def scaled(x: f32[:], out: f32[:], n: i32):
    i = kiln.global_id(0)
    if i < n:
        out[i] = x[i] * 2.0


@kiln.kernel
def scaled_or_return(x: f32[:], out: f32[:], n: i32):
    i = kiln.global_id(0)
    if i >= n or i < 0:
        return
    out[i] = x[i] * 2.0


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kernel", [scaled, scaled_or_return])
def test_bounds_checks_stop_at_n_in_the_last_block(backend: str, kernel: kiln.Kernel) -> None:
    x = np.arange(1000, dtype=np.float32)
    for n in (1000, 999, 960, 1):
        out = np.full(1000, -1, np.float32)
        kiln.launch(kernel, (n + 63) // 64, 64, (x, out, n), device=backend)
        np.testing.assert_array_equal(out[:n], x[:n] * 2)
        assert (out[n:] == -1).all(), n


@kiln.kernel
def x_ranges(out: i32[:, :, :], k: i32, lo: i64):
    t = kiln.thread_idx.x
    y = kiln.thread_idx.y
    if t < k:  # each test opens a region of its own
        out[0, y, t] += 1
    kiln.barrier()
    if t <= k:
        out[1, y, t] += 1
    kiln.barrier()
    if k > t and lo < t:
        out[2, y, t] += 1
    kiln.barrier()
    if t >= lo and y > 0:
        out[3, y, t] += 1
    kiln.barrier()
    if kiln.thread_idx.x > k and lo <= kiln.thread_idx.x and t < 5 + k:
        out[4, y, t] += 1
    kiln.barrier()
    if k == t:
        out[5, y, t] += 1


def expected_ranges(k: int, lo: int, shape: tuple[int, int]) -> np.ndarray:
    t = np.arange(shape[1])[None, :].repeat(shape[0], 0)
    y = np.arange(shape[0])[:, None].repeat(shape[1], 1)
    tests = [t < k, t <= k, (k > t) & (lo < t), (t >= lo) & (y > 0),
             (t > k) & (lo <= t) & (t < 5 + k), t == k]
    return np.stack(tests).astype(np.int32)


@pytest.mark.parametrize("backend", BACKENDS)
def test_tests_of_the_thread_index_run_exactly_the_threads_they_name(backend: str) -> None:
    """Bounds below, inside and beyond the block, either way round, with other tests, on
    every row of a 2-D block; an i64 bound near its limits (the range is clamped before
    the +1 of `<=` is added)."""
    shape = (3, 24)
    for k, lo in ((7, 2), (0, 0), (-3, -2**63), (24, 30), (2**31 - 1, 2**63 - 1), (30, -5)):
        out = np.zeros((6, *shape), np.int32)
        kiln.launch(x_ranges, 1, (shape[1], shape[0]), (out, k, lo), device=backend)
        np.testing.assert_array_equal(out, expected_ranges(k, lo, shape), err_msg=f"{k, lo}")


@kiln.kernel
def shifted(out: i32[:, :], n: i32, lo: i64):
    i = kiln.global_id(0)
    if i < n and lo <= i:  # thread_idx.x + block_idx.x * block_dim.x, in a range
        out[0, i] += 1
    kiln.barrier()
    j = kiln.thread_idx.x - 3
    if j >= lo and j < n:  # thread_idx.x - 3
        out[1, i] += 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_tests_of_a_shifted_thread_index_run_exactly_the_threads_they_name(
        backend: str) -> None:
    """`i < n` for a global id `i` (its block's offset taken off the bound), through each
    block's edges and the limits of an i32 and (`lo`) of an i64."""
    i = np.arange(4 * 32)
    j = i % 32 - 3
    for n, lo in ((70, 0), (64, 33), (1, -5), (0, 0), (2**31 - 1, -2**31), (-2**31, 2**31 - 1),
                  (128, 127), (29, 20), (100, -2**63), (100, 2**63 - 1)):
        out = np.zeros((2, i.size), np.int32)
        kiln.launch(shifted, 4, 32, (out, n, lo), device=backend)
        expected = np.stack([(i < n) & (lo <= i), (j >= lo) & (j < n)]).astype(np.int32)
        np.testing.assert_array_equal(out, expected, err_msg=f"{n, lo}")


@kiln.kernel
def counted(count: i32[:], out: i32[:], k: i32):
    t = kiln.thread_idx.x
    if kiln.atomic_add(count, 0, 1) >= 0 and t < k:
        out[t] = 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_test_with_side_effects_runs_for_every_thread(backend: str) -> None:
    count, out = np.zeros(1, np.int32), np.zeros(32, np.int32)
    kiln.launch(counted, 1, 32, (count, out, 5), device=backend)
    assert count[0] == 32
    np.testing.assert_array_equal(out, np.arange(32) < 5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_softmax_tree_reductions_agree_with_numpy(backend: str) -> None:
    """`if t < k and s[t + k] > s[t]` (a range and a test that reads memory) and `if t <
    k` (a range alone) at each step of the two trees."""
    x = (np.random.default_rng(0).standard_normal((5, 1000)) * 4).astype(np.float32)
    y = np.empty_like(x)
    kiln.launch(softmax_rows, 5, 256, (x, y), device=backend)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-9)


def guards(kernel: kiln.Kernel) -> list[ThreadGuard | None]:
    """The guard of each thread loop of `kernel` (those inside block-level loops too)."""
    program = lower_thread_loops(lower_aggregates(kernel.program(kernel._types(()))))
    (blocks,) = program.kernel.body
    assert isinstance(blocks, ir.BlockLoop)
    fits = Ranges(program.kernel).fits
    return [thread_guard(blocks, s, initialisations(s.body, s.private), fits)
            for s in walk(blocks.body) if isinstance(s, ir.ThreadLoop)]


def test_guards_split_into_x_ranges_and_a_test_for_the_whole_block() -> None:
    (check,) = guards(scaled)  # i < n, i the global id: a range, nothing left to test
    assert check is not None and check.test is None and len(check.highs) == 1
    assert check.highs[0].shift.by is not None and check.highs[0].shift.sign == 1
    (returns,) = guards(scaled_or_return)  # i >= n or i < 0 -> i < n and i >= 0
    assert returns is not None and returns.test is None and len(returns.body) == 1
    assert len(returns.lows) == len(returns.highs) == 1
    both, minus = guards(shifted)
    assert both is not None and minus is not None and both.test is minus.test is None
    assert minus.lows[0].shift.sign == -1
    below, up_to, between, above, three, equal = guards(x_ranges)
    for g in (below, up_to, between, above, three, equal):
        assert g is not None
    assert below.test is None and [b.offset for b in below.highs] == [0]  # t < k
    assert up_to.test is None and [b.offset for b in up_to.highs] == [1]  # t <= k
    assert between.test is None and len(between.lows) == len(between.highs) == 1
    assert above.test is not None and above.uniform and len(above.lows) == 1  # y > 0 left
    assert three.test is None and len(three.lows) == 2 and len(three.highs) == 1
    assert equal.test is None and [b.offset for b in (*equal.lows, *equal.highs)] == [0, 1]
    assert guards(counted) == [None]  # the atomic must run for every thread


def test_softmax_trees_loop_over_the_active_threads_only() -> None:
    trees = [g for g in guards(softmax_rows) if g is not None]
    assert len(trees) == 2
    by_max, by_sum = trees
    assert len(by_max.highs) == len(by_sum.highs) == 1
    assert by_max.test is not None and not by_max.uniform  # it reads shared memory
    assert by_sum.test is None
