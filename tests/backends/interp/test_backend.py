"""The interp backend's own behaviour: chunks of blocks, masks, atomics' old values, streams.

Kernels are real `@kiln.kernel`s checked against NumPy or a serial Python reference. The
cross-backend conformance suite lives in kiln/conformance.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import kiln
from kiln import bool_, f32, f64, i32, i64, u32
from kiln.builtin_backends.interp import backend as interp_backend
from kiln.builtin_backends.interp import executor
from kiln.builtin_backends.interp.geometry import BX, BY, TX, TY, Launch
from kiln.builtin_backends.interp.values import Affine
from kiln.examples import block_sum, vector_add
from kiln.ir.intrinsics import intrinsics
from tests.helpers import marked_line


@pytest.fixture(params=["one chunk", "many chunks"])
def chunking(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    """Run a test with the default chunk size and with chunks of a few blocks (3 x 64)."""
    if request.param == "many chunks":
        monkeypatch.setattr(executor, "CHUNK_LANES", 192)
    return executor.CHUNK_LANES


def run(dev: kiln.Device, kernel: kiln.Kernel, grid: object, block: object, *args: object
        ) -> None:
    kiln.launch(kernel, grid, block, args, device=dev)
    dev.synchronize()


# ---------------------------------------------------------------- kernels


@kiln.kernel
def grid_ids(out: i32[:, :, :]):
    x = kiln.global_id(0)
    y = kiln.global_id(1)
    z = kiln.global_id(2)
    if x < out.shape[2] and y < out.shape[1] and z < out.shape[0]:
        out[z, y, x] = ((z * 100 + y) * 100 + x) * 10 + kiln.thread_idx.y


@kiln.kernel
def shift_left(a: i32[:], n: i32):
    i = kiln.global_id(0)
    if i < n - 1:
        a[i] = a[i + 1]


@kiln.kernel
def divergent_loop(out: i32[:], n: i32):
    i = kiln.global_id(0)
    if i >= n:
        return
    total = 0
    j = 0
    while True:
        j += 1
        if j % 3 == 0:
            continue
        if j > i:
            break
        total += j
    for k in range(i, -1, -2):
        if k == 4:
            continue
        if total > 1000:
            break
        total += k
    out[i] = total


def divergent_reference(i: int) -> int:
    total, j = 0, 0
    while True:
        j += 1
        if j % 3 == 0:
            continue
        if j > i:
            break
        total += j
    for k in range(i, -1, -2):
        if k == 4:
            continue
        if total > 1000:
            break
        total += k
    return total


@kiln.kernel
def variable_step(out: i32[:], steps: i32[:]):
    i = kiln.global_id(0)
    count = 0
    for k in range(10, -10, steps[i]):
        count += k
    out[i] = count


@kiln.func
def collatz_steps(x: i64, steps: i32) -> i32:
    if x == 1:
        return steps
    if x % 2 == 0:
        return collatz_steps(x // 2, steps + 1)
    return collatz_steps(3 * x + 1, steps + 1)


@kiln.func
def clamp_add(x: i32, lo: i32, hi: i32) -> i32:
    if x < lo:
        return lo
    x += 1
    if x > hi:
        return hi
    return x


@kiln.kernel
def calls(out: i32[:, :], n: i32):
    i = kiln.global_id(0)
    if i < n:
        out[0, i] = collatz_steps(i64(i + 1), 0)
        out[1, i] = clamp_add(i, 5, 20)


@kiln.func
def mark(flags: i32[:], i: i32) -> i32:
    flags[i] = 1
    return i


@kiln.kernel
def short_circuit(count: i32[:], flags: i32[:], picked: i32[:], n: i32):
    i = kiln.global_id(0)
    if i < n and i % 2 == 0 and kiln.atomic_add(count, 0, 1) >= 0:
        picked[i] = mark(flags, i) if i % 3 == 0 else -1


@kiln.kernel
def consume_flags(flags: bool_[:], out: i32[:]):
    i = kiln.global_id(0)
    if flags[i]:
        flags[i] = False
        out[i] = 1


@kiln.kernel
def private_arrays(out: f32[:], n: i32):
    i = kiln.global_id(0)
    buf = kiln.local(f32, 4)
    for k in range(4):
        buf[k] = f32(i * k)
    buf[i % 4] += 100.0
    if i < n:
        out[i] = buf[0] + buf[1] + buf[2] + buf[3]


@kiln.kernel
def int_semantics(a: i32[:], b: i32[:], out: i32[:, :], fl: f32[:]):
    i = kiln.global_id(0)
    out[0, i] = a[i] // b[i]
    out[1, i] = a[i] % b[i]
    out[2, i] = a[i] * 65536 * 65536 + 2147483647
    out[3, i] = b[i] ** 3
    out[4, i] = i32(fl[i])


@kiln.kernel
def counter(count: u32[:], old: u32[:], n: i32):
    i = kiln.global_id(0)
    if i < n and i % 3 != 1:
        old[i] = kiln.atomic_add(count, 0, u32(2))


@kiln.kernel
def histogram(bins: i32[:], keys: i32[:], old: i32[:]):
    i = kiln.global_id(0)
    old[i] = kiln.atomic_add(bins, keys[i], 1)


@kiln.kernel
def atomic_ops(target: i32[:, :], keys: i32[:], vals: i32[:], old: i32[:, :]):
    i = kiln.global_id(0)
    k = keys[i]
    v = vals[i]
    old[0, i] = kiln.atomic_min(target, 0, k, v)
    old[1, i] = kiln.atomic_max(target, 1, k, v)
    old[2, i] = kiln.atomic_and(target, 2, k, v)
    old[3, i] = kiln.atomic_or(target, 3, k, v)
    old[4, i] = kiln.atomic_xor(target, 4, k, v)
    old[5, i] = kiln.atomic_exch(target, 5, k, v)
    old[6, i] = kiln.atomic_sub(target, 6, k, v)
    old[7, i] = kiln.atomic_cas(target, 7, k, v % 3, v % 3 + 1)


@kiln.kernel
def cas_chain(x: i32[:], old: i32[:]):
    i = kiln.global_id(0)
    old[i] = kiln.atomic_cas(x, 0, i, i + 1)


@kiln.kernel
def float_sum(x: f64[:], total: f64[:], old: f64[:]):
    i = kiln.global_id(0)
    old[i] = kiln.atomic_add(total, 0, x[i])


@kiln.kernel
def scatter_to(a: f32[:], idx: i32[:]):
    i = kiln.global_id(0)
    a[idx[i]] = 1.0  # error


@kiln.kernel
def scale(a: f32[:], k: f32):
    i = kiln.global_id(0)
    a[i] = a[i] * k


# ---------------------------------------------------------------- tests


def test_vector_add_across_chunks(interp: kiln.Device, chunking: int) -> None:
    n = 1000
    a, b = np.arange(n, dtype=np.float32), np.full(n, 0.5, np.float32)
    c = np.zeros(n, np.float32)
    run(interp, vector_add, (n + 63) // 64, 64, a, b, c, n)
    np.testing.assert_array_equal(c, a + b)


def test_3d_grid_with_chunks_spanning_rows(interp: kiln.Device, chunking: int) -> None:
    out = np.full((3, 10, 13), -1, np.int32)
    run(interp, grid_ids, (5, 4, 3), (3, 3, 1), out)
    z, y, x = np.indices(out.shape)
    np.testing.assert_array_equal(out, ((z * 100 + y) * 100 + x) * 10 + y % 3)


def test_shared_memory_reduction(interp: kiln.Device, chunking: int) -> None:
    x = np.random.default_rng(1).random(5000).astype(np.float32)
    out = np.zeros(1, np.float32)
    run(interp, block_sum, 7, 64, x, out, x.size)
    np.testing.assert_allclose(out[0], x.sum(dtype=np.float64), rtol=1e-5)


def test_a_statement_reads_before_it_writes(interp: kiln.Device, chunking: int) -> None:
    a = np.arange(300, dtype=np.int32)
    run(interp, shift_left, 5, 64, a, a.size)
    np.testing.assert_array_equal(a, np.r_[np.arange(1, 300), 299])


def test_divergent_break_continue_and_early_return(interp: kiln.Device, chunking: int) -> None:
    n = 150
    out = np.full(n + 10, -7, np.int32)
    run(interp, divergent_loop, 3, 64, out, n)
    np.testing.assert_array_equal(out[:n], [divergent_reference(i) for i in range(n)])
    assert (out[n:] == -7).all()


def test_range_with_per_thread_steps(interp: kiln.Device) -> None:
    steps = np.array([1, 3, -1, -4, 0, 25, -25, 2], np.int32)
    out = np.zeros(8, np.int32)
    run(interp, variable_step, 1, 8, out, steps)
    np.testing.assert_array_equal(out, [sum(range(10, -10, s)) if s else 0 for s in steps])


def test_device_functions_tail_recursion_and_early_returns(interp: kiln.Device,
                                                      chunking: int) -> None:
    n = 200
    out = np.zeros((2, n), np.int32)
    run(interp, calls, 4, 64, out, n)

    def steps(x: int) -> int:
        return 0 if x == 1 else 1 + steps(x // 2 if x % 2 == 0 else 3 * x + 1)

    np.testing.assert_array_equal(out[0], [steps(i + 1) for i in range(n)])
    np.testing.assert_array_equal(out[1], np.clip(np.arange(n) + 1, 5, 20))


def test_short_circuit_and_select_run_side_effects_only_where_taken(interp: kiln.Device
                                                                    ) -> None:
    n = 100
    count = np.zeros(1, np.int32)
    flags, picked = np.zeros(n, np.int32), np.full(n, 7, np.int32)
    run(interp, short_circuit, 2, 64, count, flags, picked, n)
    i = np.arange(n)
    assert count[0] == (i % 2 == 0).sum()
    np.testing.assert_array_equal(flags, (i % 6 == 0).astype(np.int32))
    np.testing.assert_array_equal(picked, np.where(i % 2 == 0, np.where(i % 3 == 0, i, -1), 7))


def test_a_branch_keeps_its_lanes_when_it_writes_its_condition(interp: kiln.Device) -> None:
    flags = np.array([True, False, True, True] * 16)
    expected = flags.astype(np.int32)
    out = np.zeros(64, np.int32)
    run(interp, consume_flags, 1, 64, flags, out)
    np.testing.assert_array_equal(out, expected)
    assert not flags.any()


def test_private_arrays_are_per_thread(interp: kiln.Device, chunking: int) -> None:
    n = 300
    out = np.zeros(n, np.float32)
    run(interp, private_arrays, 5, 64, out, n)
    np.testing.assert_array_equal(out, np.arange(n) * 6 + 100)


def test_integer_semantics(interp: kiln.Device) -> None:
    a = np.array([7, -7, 7, -7, 5, -2**31, 3, 0], np.int32)
    b = np.array([2, 2, -2, -2, 0, -1, -3, 1290], np.int32)
    fl = np.array([1.9, -1.9, 0.5, -0.5, 3e3, 7.0, -2.2, 1e-3], np.float32)
    out = np.zeros((5, 8), np.int32)
    run(interp, int_semantics, 1, 8, a, b, out, fl)
    np.testing.assert_array_equal(out[0], [3, -4, -4, 3, 0, -2**31, -1, 0])
    np.testing.assert_array_equal(out[1], [1, 1, -1, -1, 0, 0, 0, 0])
    np.testing.assert_array_equal(out[2], np.full(8, 2147483647))
    np.testing.assert_array_equal(out[3], (b.astype(np.int64) ** 3).astype(np.int32))
    np.testing.assert_array_equal(out[4], [1, -1, 0, 0, 3000, 7, -2, 0])


def test_atomic_counter_old_values_follow_thread_order(interp: kiln.Device,
                                                       chunking: int) -> None:
    n = 500
    count, old = np.zeros(1, np.uint32), np.full(n, 99, np.uint32)
    run(interp, counter, 8, 64, count, old, n)
    active = np.flatnonzero(np.arange(n) % 3 != 1)
    assert count[0] == 2 * active.size
    np.testing.assert_array_equal(old[active], 2 * np.arange(active.size))
    assert (old[np.arange(n) % 3 == 1] == 99).all()


def test_atomic_add_histogram_old_values(interp: kiln.Device, chunking: int) -> None:
    keys = np.random.default_rng(2).integers(0, 7, 640).astype(np.int32)
    bins, old = np.zeros(7, np.int32), np.zeros(640, np.int32)
    run(interp, histogram, 10, 64, bins, keys, old)
    np.testing.assert_array_equal(bins, np.bincount(keys, minlength=7))
    for k in range(7):  # every bin hands out 0, 1, 2, ... in thread order
        np.testing.assert_array_equal(old[keys == k], np.arange((keys == k).sum()))


def test_atomics_match_a_serial_execution(interp: kiln.Device, chunking: int) -> None:
    rng = np.random.default_rng(3)
    n = 384
    keys = rng.integers(0, 5, n).astype(np.int32)
    vals = rng.integers(-1000, 1000, n).astype(np.int32)
    start = rng.integers(-50, 50, (8, 5)).astype(np.int32)
    target, old = start.copy(), np.zeros((8, n), np.int32)
    run(interp, atomic_ops, 6, 64, target, keys, vals, old)
    ref, ref_old = start.astype(np.int64), np.zeros((8, n), np.int64)
    updates = [min, max, lambda a, v: a & v, lambda a, v: a | v, lambda a, v: a ^ v,
               lambda a, v: v, lambda a, v: a - v]
    for i in range(n):  # threads in order, each running its statements in order
        k, v = keys[i], int(vals[i])
        for row, update in enumerate(updates):
            ref_old[row, i] = ref[row, k]
            ref[row, k] = update(ref[row, k], v)
        ref_old[7, i] = ref[7, k]
        if ref[7, k] == v % 3:
            ref[7, k] = v % 3 + 1
    np.testing.assert_array_equal(target, ref)
    np.testing.assert_array_equal(old, ref_old)


def test_atomic_cas_chain_of_successes(interp: kiln.Device) -> None:
    n = 256  # every thread's swap succeeds, one after another
    x, old = np.zeros(1, np.int32), np.zeros(n, np.int32)
    run(interp, cas_chain, 4, 64, x, old)
    assert x[0] == n
    np.testing.assert_array_equal(old, np.arange(n))


def test_float_atomic_add_old_values_are_partial_sums(interp: kiln.Device) -> None:
    x = np.random.default_rng(4).random(256)
    total, old = np.array([1.0]), np.zeros(256)
    run(interp, float_sum, 4, 64, x, total, old)
    np.testing.assert_allclose(total[0], 1 + x.sum())
    np.testing.assert_allclose(old, 1 + np.concatenate(([0], np.cumsum(x)[:-1])))


def test_launches_are_asynchronous_and_ordered(interp: kiln.Device) -> None:
    stream = kiln.Stream(interp)
    gate = threading.Event()
    stream.handle.enqueue(gate.wait)  # hold the stream until the launches are queued
    a = kiln.to_device(np.ones(256, np.float32), interp)
    kiln.launch(scale, 4, 64, (a, f32(3)), stream=stream)
    kiln.launch(scale, 4, 64, (a, f32(5)), stream=stream)
    host = a.buffer.view(np.float32)
    assert (host == 1).all()  # nothing ran yet
    gate.set()
    stream.synchronize()
    assert (host == 15).all()


def test_events_time_the_stream(interp: kiln.Device) -> None:
    start, end = kiln.Event(interp), kiln.Event(interp)
    a = kiln.to_device(np.ones(1 << 16, np.float32), interp)
    start.record()
    kiln.launch(scale, 256, 256, (a, f32(2)), device=interp)
    end.record()
    end.synchronize()
    assert start.elapsed_time(end) >= 0
    assert (a.numpy() == 2).all()


def test_an_out_of_bounds_store_names_the_array_and_line(interp: kiln.Device) -> None:
    a = kiln.zeros(10, f32, interp)
    line = marked_line(scatter_to)
    with pytest.raises(IndexError, match=rf":{line}:.*wrote `a\[30\]`, outside its 10 elements"):
        run(interp, scatter_to, 1, 4, a, np.array([1, 2, 30, 3], np.int32))


def test_every_standard_intrinsic_has_an_implementation() -> None:
    assert intrinsics.missing(interp_backend.intrinsic_implementation) == []


def test_device_reports_its_capabilities(interp: kiln.Device) -> None:
    caps = interp.capabilities
    assert interp.name == "interp:0"
    assert caps.kind is kiln.backend.DeviceKind.CPU and caps.arch == "numpy"
    assert caps.max_threads_per_block == 1024 and caps.shared_memory_per_block == 48 * 1024
    assert caps.fp64 and caps.fp16 and caps.unified_memory
    assert {"atomic_add:f32", "atomic_add:f64", "atomic_cas:u64"} <= caps.atomics


@pytest.mark.parametrize("dtype", [f32, f64, i32, i64])
def test_zero_copy_arrays_share_host_memory(interp: kiln.Device, dtype: kiln.ScalarType
                                            ) -> None:
    host = np.arange(64).astype(dtype.dtype)
    assert np.shares_memory(kiln.as_device_array(host, interp).buffer, host)
    assert not np.shares_memory(kiln.to_device(host, interp).buffer, host)  # always copies


def test_global_ids_index_arrays_by_slices() -> None:
    """The address of `global_id` is recognised as `start + lane`, so loads and stores of
    vector_add are slices rather than gathers (the interp performance fast path)."""
    launch = Launch((6, 4, 1), (8, 2, 1), max_lanes=5 * 16)  # chunks span grid rows
    chunks = list(launch.chunks())
    assert [c.nblocks for c in chunks] == [5] * 4 + [4]
    for chunk in chunks:
        tx, ty, bx, by = (Affine.basis(chunk, k) for k in (TX, TY, BX, BY))
        x, y = bx * 8 + tx, by * 2 + ty
        width = 6 * 8
        assert (y * width + x).linear() is None  # rows of a block are not adjacent
        linear_id = (by * 6 + bx) * 16 + ty * 8 + tx
        assert linear_id.linear() == (chunk.b0 * 16, 1)
        assert (linear_id * 3 + 7).linear() == (chunk.b0 * 48 + 7, 3)
        np.testing.assert_array_equal((y * width + x).array() % width, x.array())
