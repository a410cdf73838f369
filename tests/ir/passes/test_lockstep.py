"""`lower_lockstep_loops`: lockstep loops as their meaning, plain thread loops. Each kernel
runs on the cpu backend (which emits lockstep loops a pass at a time) and on the same
backend with the pass in its pipeline (each thread running its own `while`), both against
NumPy."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import kiln
from kiln import f32, i32
from kiln.builtin_backends.cpu.backend import CpuBackend
from kiln.examples import block_sum
from kiln.ir import nodes as ir
from kiln.ir.passes import lower_aggregates, lower_lockstep_loops, lower_thread_loops
from kiln.ir.passes.validate import validate
from kiln.ir.visit import walk
from tests.helpers import requires_backend


class ThreadLoopsOnly(CpuBackend):
    """The cpu backend, its lockstep loops lowered to thread loops before C is emitted."""

    name = "cpu_threadloops"
    codegen_passes = (lower_thread_loops, lower_lockstep_loops, *CpuBackend.codegen_passes[1:])

    def device_handles(self) -> list[tuple[Any, kiln.backend.Capabilities]]:
        return [(h, dataclasses.replace(c, backend=self.name))
                for h, c in super().device_handles()]


@pytest.fixture(scope="module")
def backends() -> tuple[str, str]:
    if ThreadLoopsOnly.name not in {entry.name for entry in kiln.backends()}:
        kiln.backend.register_backend(ThreadLoopsOnly(), priority=0)
    return "cpu", ThreadLoopsOnly.name


@kiln.kernel
def grid_stride_sum(x: f32[:], out: f32[:]):
    """A counted grid-stride loop, then an atomic."""
    acc = f32(0)
    i = kiln.global_id(0)
    while i < len(x):
        acc += x[i]
        i += kiln.global_size(0)
    kiln.atomic_add(out, 0, acc)


@kiln.kernel
def collatz(start: i32[:], steps: i32[:]):
    """A `while` whose trip count differs from thread to thread (not counted)."""
    t = kiln.global_id(0)
    if t >= len(start):
        return
    x = start[t]
    n = 0
    while x != 1:
        x = x // 2 if x % 2 == 0 else 3 * x + 1
        n += 1
    steps[t] = n


@kiln.kernel
def exits_then_counts_down(lo: i32[:], out: i32[:], n: i32):
    """After a barrier, threads past `n` return; the others count down from their index to
    their own `lo` (a bound per thread: not counted)."""
    s = kiln.shared(i32, 64)
    t = kiln.thread_idx.x
    g = kiln.global_id(0)
    s[t] = g
    kiln.barrier()
    if g >= n:
        return
    k = s[t] + 3
    total = 0
    while lo[g] < k:
        total += k
        k -= 1
    out[g] = total


@kiln.kernel
def strided_rows(a: f32[:, :], out: f32[:]):
    """A counted loop with a `bound > var` test inside a block-level loop with barriers,
    its induction's variable read again (a fresh start) by a later loop."""
    s = kiln.shared(f32, 32)
    t = kiln.thread_idx.x
    for r in range(a.shape[0]):
        acc = f32(0)
        j = t
        while a.shape[1] > j:
            acc += a[r, j]
            j += kiln.block_dim.x
        s[t] = acc
        kiln.barrier()
        if t == 0:
            total = f32(0)
            j = 0
            while j < kiln.block_dim.x:
                total += s[j]
                j += 1
            out[r] = total
        kiln.barrier()


def _collatz_steps(start: np.ndarray) -> np.ndarray:
    out = []
    for x in start.tolist():
        n = 0
        while x != 1:
            x = x // 2 if x % 2 == 0 else 3 * x + 1
            n += 1
        out.append(n)
    return np.array(out, np.int32)


def _run_grid_stride_sum(device: str) -> tuple[Any, Any]:
    x = np.random.default_rng(1).random(1000).astype(np.float32)
    out = np.zeros(1, np.float32)
    kiln.launch(grid_stride_sum, 3, 32, (x, out), device=device)
    return out, np.array([x.sum()], np.float32)


def _run_collatz(device: str) -> tuple[Any, Any]:
    start = np.arange(1, 101, dtype=np.int32)
    steps = np.full(100, -1, np.int32)
    kiln.launch(collatz, 4, 32, (start, steps), device=device)
    return steps, _collatz_steps(start)


def _run_exits(device: str) -> tuple[Any, Any]:
    n = 100
    lo = np.random.default_rng(2).integers(-5, 200, 128).astype(np.int32)
    out = np.full(128, -7, np.int32)
    kiln.launch(exits_then_counts_down, 2, 64, (lo, out, n), device=device)
    expected = out.copy()
    for g in range(n):
        expected[g] = sum(range(lo[g] + 1, g + 4))
    return out, expected


def _run_block_sum(device: str) -> tuple[Any, Any]:
    x = np.random.default_rng(3).random(5000).astype(np.float32)
    out = np.zeros(1, np.float32)
    kiln.launch(block_sum, 4, 256, (x, out, 5000), device=device)
    return out, np.array([x.sum()], np.float32)


def _run_strided_rows(device: str) -> tuple[Any, Any]:
    a = np.random.default_rng(4).random((5, 70)).astype(np.float32)
    out = np.zeros(5, np.float32)
    kiln.launch(strided_rows, 1, 32, (a, out), device=device)
    return out, a.sum(axis=1)


RUNS: dict[str, Callable[[str], tuple[Any, Any]]] = {
    "grid_stride_sum": _run_grid_stride_sum, "collatz": _run_collatz,
    "exits_then_counts_down": _run_exits, "block_sum": _run_block_sum,
    "strided_rows": _run_strided_rows,
}


@requires_backend("cpu", "no C compiler with OpenMP")
@pytest.mark.parametrize("name", RUNS)
def test_lockstep_loops_and_their_meaning_compute_the_same(
        name: str, backends: tuple[str, str]) -> None:
    for device in backends:
        got, expected = RUNS[name](device)
        np.testing.assert_allclose(got, expected, rtol=1e-5, err_msg=f"{name} on {device}")


KERNELS: dict[str, tuple[kiln.Kernel, tuple[kiln.Type, ...]]] = {
    "grid_stride_sum": (grid_stride_sum, (f32[:], f32[:])),
    "collatz": (collatz, (i32[:], i32[:])),
    "exits_then_counts_down": (exits_then_counts_down, (i32[:], i32[:], i32)),
    "block_sum": (block_sum, (f32[:], f32[:], i32)),
    "strided_rows": (strided_rows, (f32[:, :], f32[:])),
}


@pytest.mark.parametrize("name", KERNELS)
def test_no_lockstep_loop_is_left(name: str) -> None:
    kernel, types = KERNELS[name]
    before = lower_thread_loops(lower_aggregates(kernel.program(types)))
    lockstep = [n for n in walk(before.kernel.body) if isinstance(n, ir.LockstepLoop)]
    assert lockstep, "the kernel should exercise a lockstep loop"
    after = lower_lockstep_loops(before)
    validate(after)
    assert not any(isinstance(n, ir.LockstepLoop) for n in walk(after.kernel.body))
    assert any(isinstance(n, ir.LockstepLoop) for n in walk(before.kernel.body))  # untouched
    loops = [n for n in walk(after.kernel.body) if isinstance(n, ir.ThreadLoop)
             and any(isinstance(s, ir.While) for s in n.body)]
    assert len(loops) >= len(lockstep)
    for old in lockstep:
        new = next(loop for loop in loops if loop.loc == old.loc)
        assert [type(s) for s in new.body] == [ir.Assign] * (len(new.body) - 1) + [ir.While]
        for ind in old.inductions:
            assert ind.var in new.private
            assert any(isinstance(s, ir.Assign) and s.target == ind.var for s in new.body)


@requires_backend("cpu", "no C compiler with OpenMP")
def test_the_backend_with_the_pass_emits_no_lockstep_pass(backends: tuple[str, str]) -> None:
    lockstep, plain = (grid_stride_sum.source(b, f32[:], f32[:]) for b in backends)
    assert "kiln_active" in lockstep and "kiln_active" not in plain
    assert "while (" in plain
