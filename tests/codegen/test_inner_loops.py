"""Inner loops run lockstep on targets that run threads as loops: a thread's escape-time
loop (`for ...: if done: break`, `while cond:`) inside a region becomes passes of one
iteration of every thread still in it, its variables kept per thread between passes;
every backend agrees with NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import f32, i32
from kiln.codegen.inner_loops import carried, inner_loop
from kiln.examples import JULIA_C, julia, mandelbrot, spmv_csr
from kiln.ir import nodes as ir
from kiln.ir.passes import lower_aggregates, lower_thread_loops
from kiln.ir.visit import walk
from tests.helpers import backend_entry

BACKENDS = [name for name in ("interp", "cpu", "serial", "opencl")
            if backend_entry(name).available]


@kiln.kernel
def escapes(x: f32[:], out: i32[:, :], limit: i32):
    """After the loop (stepping down, left by a break or at its end): a value the loop
    alone sets, the steps it made and a value carried from before it."""
    i = kiln.global_id(0)
    if i < x.shape[0]:
        v = x[i]
        last = -7
        steps = 0
        for k in range(limit, -3, -2):
            if v * f32(k) > 10.0:
                break
            last = k * 3
            v = v + 0.5
            steps += 1
        out[0, i] = steps * 100 + limit
        out[1, i] = last
        out[2, i] = steps
        out[3, i] = i32(v * 4.0)


def escapes_reference(x: np.ndarray, limit: int) -> np.ndarray:
    out = np.zeros((4, x.size), np.int32)
    for i, v in enumerate(x):
        last, steps = -7, 0
        v = np.float32(v)
        for k in range(limit, -3, -2):
            if v * np.float32(k) > 10.0:
                break
            last = k * 3
            v = np.float32(v + np.float32(0.5))
            steps += 1
        out[:, i] = (steps * 100 + limit, last, steps, np.int32(v * np.float32(4.0)))
    return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_loop_variables_and_values_after_a_lockstep_loop(backend: str) -> None:
    x = np.linspace(-2, 3, 200).astype(np.float32)
    for limit in (9, 0, -5, 30):
        out = np.zeros((4, x.size), np.int32)
        kiln.launch(escapes, 4, 64, (x, out, limit), device=backend)
        np.testing.assert_array_equal(out, escapes_reference(x, limit), err_msg=str(limit))


@pytest.mark.parametrize("backend", BACKENDS)
def test_escape_time_kernels_agree_with_numpy(backend: str) -> None:
    """mandelbrot (`for` with a leading `break`) and julia (`while`), on images that are no
    multiple of the block (the edge blocks test each thread)."""
    h, w, iters = 37, 53, 60
    img = np.zeros((h, w), np.int32)
    kiln.launch(mandelbrot, ((w + 15) // 16, (h + 15) // 16), (16, 16), (img, iters),
                device=backend)
    cr = (-2.0 + 3.0 * np.arange(w, dtype=np.float32) / np.float32(w))[None, :]
    ci = (-1.5 + 3.0 * np.arange(h, dtype=np.float32) / np.float32(h))[:, None]
    zr = np.zeros((h, w), np.float32)
    zi = np.zeros((h, w), np.float32)
    expected = np.zeros((h, w), np.int32)
    for k in range(iters):
        live = zr * zr + zi * zi <= 4.0
        zr, zi = (np.where(live, zr * zr - zi * zi + cr, zr),
                  np.where(live, np.float32(2.0) * zr * zi + ci, zi))
        expected[live] = k + 1
    np.testing.assert_array_equal(img, expected)
    out = np.zeros((h, w), np.int32)
    kiln.launch(julia, ((w + 15) // 16, (h + 15) // 16), (16, 16),
                (out, np.float32(JULIA_C[0]), np.float32(JULIA_C[1]), iters), device=backend)
    reference = np.zeros((h, w), np.int32)
    kiln.launch(julia, ((w + 15) // 16, (h + 15) // 16), (16, 16),
                (reference, np.float32(JULIA_C[0]), np.float32(JULIA_C[1]), iters),
                device="interp")
    np.testing.assert_array_equal(out, reference)
    assert 0 < out.min() < out.max() == iters


@pytest.mark.parametrize("backend", BACKENDS)
def test_loops_with_loads_and_per_thread_bounds(backend: str) -> None:
    """spmv's row loop (bounds read from memory, different for each thread) stays
    sequential: it reads memory."""
    rng = np.random.default_rng(3)
    dense = (rng.random((70, 40)) * (rng.random((70, 40)) < 0.2)).astype(np.float32)
    rows, cols = np.nonzero(dense)
    indptr = np.searchsorted(rows, np.arange(71)).astype(np.int32)
    x = rng.random(40).astype(np.float32)
    y = np.zeros(70, np.float32)
    kiln.launch(spmv_csr, 3, 32, (indptr, cols.astype(np.int32), dense[rows, cols], x, y),
                device=backend)
    np.testing.assert_allclose(y, dense @ x, rtol=1e-5)


def test_what_runs_lockstep_and_what_it_carries() -> None:
    program = lower_thread_loops(lower_aggregates(mandelbrot.program(mandelbrot._types(()))))
    (loop,) = [s for s in walk(program.kernel.body) if isinstance(s, ir.ThreadLoop)]
    guarded = loop.body[-1]
    assert isinstance(guarded, ir.If)
    found = inner_loop(guarded.then)
    assert found is not None and isinstance(found.loop, ir.For) and found.exit is not None
    names = {*loop.private, *loop.loads}
    # the escape test's operands and the count, not the iteration's temporaries
    assert carried(found, names) == sorted(["ci", "cr", "it", "k", "zi", "zr"])
    assert inner_loop([ir.Return()]) is None
    assert "kiln_live" not in spmv_csr.source("cpu")  # its loop reads memory
    assert "kiln_live" in julia.source("cpu")
