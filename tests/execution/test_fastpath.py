"""The launch fast path keeps its plan when a launch's grid, block or scalars change: one
plan per device and stream, dimensions checked against the device's limits on each call,
results equal to NumPy's on every backend, and a launch the plan cannot take (a grid over
the limits, a grid as a list or NumPy integer) still gets the full path's answer."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kiln
from kiln import f32, i32
from tests.helpers import backend_entry


@kiln.kernel
def fill_index(out: f32[:], n: i32, scale: f32):
    """out[i] = i * scale over a 1-D or 2-D grid of 1-D or 2-D blocks, grid-stride."""
    threads = kiln.block_dim.x * kiln.block_dim.y
    t = kiln.thread_idx.y * kiln.block_dim.x + kiln.thread_idx.x
    b = kiln.block_idx.y * kiln.grid_dim.x + kiln.block_idx.x
    i = b * threads + t
    step = threads * kiln.grid_dim.x * kiln.grid_dim.y
    while i < n:
        out[i] = f32(i) * scale
        i += step


def device_for(backend: str) -> kiln.Device:
    entry = backend_entry(backend)
    if not entry.available:
        pytest.skip(f"no {backend} device here: {entry.reason}")
    return kiln.device(backend)


@pytest.mark.parametrize("backend", ["interp", "cpu", "opencl", "cuda"])
def test_changing_grid_block_and_scalars_keep_one_plan(backend: str) -> None:
    dev = device_for(backend)
    n = 1000
    configs = [(1, 32), (3, 64), ((2, 2), (8, 4)), (7, (16, 2)), ((5,), (128,)), (1, 32)]
    for k, (grid, block) in enumerate(configs):
        out = kiln.zeros(n, f32, dev)
        fill_index[grid, block](out, n, float(k + 1))
        np.testing.assert_array_equal(out.copy_to_host(), np.arange(n, dtype=np.float32) * (k + 1))
    assert len(fill_index.launch_plans) == 1


@pytest.mark.parametrize("backend", ["interp", "cpu", "opencl"])
def test_dimensions_the_plan_declines_still_get_the_full_paths_answer(backend: str) -> None:
    dev = device_for(backend)
    n = 300
    out = kiln.zeros(n, f32, dev)
    fill_index[2, 64](out, n, 1.0)  # the plan exists from here on
    too_many = dev.capabilities.max_threads_per_block // 2 + 1
    with pytest.raises(kiln.LaunchError, match="threads per block"):
        fill_index[1, (too_many, 2)](out, n, 1.0)
    with pytest.raises(kiln.LaunchError, match="grid dimension x must be at least 1"):
        fill_index[0, 64](out, n, 1.0)
    with pytest.raises(kiln.LaunchError, match="grid must be an int or a tuple"):
        fill_index[(1, 2, 3, 4), 64](out, n, 1.0)
    for grid in (2.0, (2.0, 1)):  # equal to a grid that ran, but refused as the full path does
        with pytest.raises(kiln.LaunchError, match="grid must be an int or a tuple"):
            fill_index[grid, 64](out, n, 1.0)
    fill_index[(2, 1), 64](out, n, 1.0)  # and the valid one still runs after them
    for grid in (np.int64(3), [3], (np.int32(3), 1)):  # other forms: converted, then run
        out = kiln.zeros(n, f32, dev)
        fill_index[grid, 64](out, n, 2.0)
        np.testing.assert_array_equal(out.copy_to_host(), np.arange(n, dtype=np.float32) * 2)


DIM = st.one_of(st.integers(-1, 9), st.tuples(st.integers(0, 5), st.integers(1, 3)),
                st.sampled_from([2.0, (2.0, 1), (np.int64(2), 1), True, [2, 1]]))
BLOCK = st.one_of(st.sampled_from([1, 7, 32, 64, 2000]), st.tuples(st.sampled_from([4, 16]),
                                                                  st.integers(1, 4)))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(DIM, BLOCK, st.integers(-3, 3)), min_size=1, max_size=8))
def test_any_sequence_of_launches_matches_a_fresh_kernels_answer(
        launches: list[tuple[object, object, int]]) -> None:
    """Each launch, after any others, does what the same launch does on a kernel that never
    launched before (the full path): the same result or the same LaunchError."""
    dev = kiln.device("interp")
    n = 200
    for grid, block, scale in launches:
        results = []
        for kernel in (fill_index, kiln.kernel(fill_index.pyfunc)):
            out = kiln.zeros(n, f32, dev)
            try:
                kernel[grid, block](out, n, float(scale))
            except kiln.LaunchError as exc:
                results.append(str(exc))
            else:
                results.append(out.copy_to_host().tobytes())
        assert results[0] == results[1]
