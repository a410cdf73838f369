"""The host API at its edges, on every available backend: `out=` arrays that do not fit,
streams and events of another device, read-only NumPy arguments a kernel writes, 0-d and
bad shapes, unrecorded events, and streams that keep working after a failed launch."""

from __future__ import annotations

import gc
import re
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import kiln
from kiln import f32, i32
from kiln.builtin_backends.interp import InterpBackend
from kiln.conformance.cases.host import scale
from kiln.framework.registry import BackendEntry
from kiln.runtime.device import devices_of

BACKENDS = [e.name for e in kiln.backends() if e.available]
CHECKED = [name for name in BACKENDS if name != "serial"]
"""Backends that report a debug=True kernel's failed checks (the serial backend, a CUSTOM
one, compiles kernels itself and has no run-time checks)."""
HANG_S = 60  # seconds a call may take before the test calls it a hang


@pytest.fixture(params=BACKENDS)
def dev(request: pytest.FixtureRequest) -> kiln.Device:
    return kiln.device(request.param)


@pytest.fixture
def other(dev: kiln.Device) -> kiln.Device:
    """A second device: the interp's for every other backend, the cpu's (or the serial
    backend's) for the interp."""
    if dev.backend.name != "interp":
        return kiln.device("interp")
    names = [name for name in BACKENDS if name != "interp"]
    if not names:
        pytest.skip("a second device needs a backend besides the interp")
    return kiln.device(names[0])


@kiln.kernel
def copy_pair(src: f32[:], a: f32[:], b: f32[:], n: i32):
    i = kiln.global_id(0)
    if i < n:
        a[i] = src[i]
        b[i] = src[i]


@kiln.kernel(debug=True)
def write_past_end(x: f32[:], n: i32):
    i = kiln.global_id(0)
    if i < n:
        x[i + 1] = 1.0


def finishes(call: Callable[[], Any]) -> Any:
    """`call()`'s result, failing the test (not hanging it) if it does not return."""
    result: list[Any] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            result.append(call())
        except BaseException as exc:
            errors.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(HANG_S)
    assert not worker.is_alive(), f"{call} did not return within {HANG_S} s"
    if errors:
        raise errors[0]
    return result[0] if result else None


# ------------------------------------------------------------------ out= of copies


def bad_outs() -> list[tuple[Any, str]]:
    """`out` arrays a copy of a (10,) float32 array cannot go into, with what the error
    says of each."""
    readonly = np.zeros(10, np.float32)
    readonly.flags.writeable = False
    return [
        (np.zeros(5, np.float32), r"shape \(10,\); its shape is \(5,\)"),
        (np.zeros(12, np.float32), r"its shape is \(12,\)"),
        (np.zeros((2, 5), np.float32), r"its shape is \(2, 5\)"),
        (np.zeros(10, np.float64), "float32 array of shape.*its dtype is float64"),
        (np.zeros(10, np.int32), "its dtype is int32"),
        (np.zeros(20, np.float32)[::2], "not C-contiguous"),
        (readonly, "read-only"),
        ([0.0] * 10, "takes a NumPy array, got list"),
    ]


def test_copy_to_host_refuses_an_out_that_does_not_fit(dev: kiln.Device) -> None:
    a = kiln.to_device(np.arange(10, dtype=np.float32), dev)
    view = kiln.to_device(np.arange(20, dtype=np.float32), dev)[::2]
    for out, message in bad_outs():
        before = np.array(out, copy=True)
        for array in (a, view):
            with pytest.raises(kiln.CopyError, match=message):
                array.copy_to_host(out)
        np.testing.assert_array_equal(np.asarray(out), before)  # nothing was written
    good = np.zeros(10, np.float32)
    assert a.copy_to_host(good) is good
    np.testing.assert_array_equal(good, np.arange(10, dtype=np.float32))
    np.testing.assert_array_equal(view.copy_to_host(good), np.arange(0, 20, 2))


def test_copy_from_host_refuses_another_shape(dev: kiln.Device) -> None:
    a = kiln.to_device(np.arange(10, dtype=np.float32), dev)
    for src in (np.zeros(5, np.float32), np.zeros(11), np.zeros((2, 5), np.float32)):
        shape = re.escape(str(src.shape))
        with pytest.raises(kiln.CopyError, match=rf"shape {shape}.*shape \(10,\)"):
            a.copy_from_host(src)
    a.copy_from_host(np.arange(10, 20))  # other dtypes convert, as NumPy assignment does
    np.testing.assert_array_equal(a.numpy(), np.arange(10, 20, dtype=np.float32))


# ------------------------------------------------------------------ another device's stream


def test_another_devices_stream_is_refused_everywhere(dev: kiln.Device,
                                                       other: kiln.Device) -> None:
    theirs = kiln.Stream(other)
    host = np.arange(8, dtype=np.float32)
    a = kiln.to_device(host, dev)
    refused: list[tuple[str, Callable[[], Any]]] = [
        ("kiln.to_device", lambda: kiln.to_device(host, dev, stream=theirs)),
        ("copy_from_host", lambda: a.copy_from_host(host + 1, stream=theirs)),
        ("copy_to_host", lambda: a.copy_to_host(stream=theirs)),
        ("copy_to_host", lambda: a[::2].copy_to_host(stream=theirs)),
        ("copying into", lambda: kiln.to_device(host, other).to(dev, stream=theirs)),
        ("launching scale on", lambda: kiln.launch(scale, dim=8, args=(a, 2.0, 8),
                                                   device=dev, stream=theirs)),
        ("launching scale on", lambda: kiln.launch(scale, 1, 8, (host.copy(), 2.0, 8),
                                                   device=dev, stream=theirs)),
        ("lives on", lambda: scale[1, 8, theirs](a, 2.0, 8)),
        ("lives on", lambda: scale[kiln.dim(8), theirs](a, 2.0, 8)),
        ("recording an event", lambda: kiln.Event(dev).record(theirs)),
    ]
    for what, call in refused:
        with pytest.raises(kiln.DeviceMismatchError, match=what):
            call()
    with pytest.raises(kiln.DeviceMismatchError, match="events of one device"):
        kiln.Event(dev).record().elapsed_time(kiln.Event(other).record())
    dev.synchronize()
    other.synchronize()
    np.testing.assert_array_equal(a.numpy(), host)  # no refused copy or launch wrote it


def test_a_stream_must_be_a_kiln_stream(dev: kiln.Device) -> None:
    a = kiln.zeros(4, f32, dev)
    for call in (lambda: a.copy_to_host(stream=0),
                 lambda: kiln.to_device(np.zeros(4), dev, stream="s"),
                 lambda: kiln.launch(scale, dim=4, args=(a, 2.0, 4), stream=7),
                 lambda: kiln.Event(dev).record(dev)):
        with pytest.raises(TypeError, match="takes a kiln.Stream"):
            call()


def test_parts_of_one_device_keep_their_streams() -> None:
    cpu = kiln.device("cpu") if "cpu" in BACKENDS else None
    if cpu is None or cpu.capabilities.compute_units < 2:
        pytest.skip("splitting needs the cpu backend with two compute units or more")
    with pytest.raises(ValueError, match="not True"):
        cpu.split(True)  # type: ignore[arg-type]
    left, right = cpu.split(2)
    with pytest.raises(kiln.DeviceMismatchError, match="stream is on cpu:0.1, not cpu:0.0"):
        kiln.to_device(np.zeros(4), left, stream=kiln.Stream(right))


# ------------------------------------------------------------------ read-only NumPy arguments


def test_a_read_only_argument_the_kernel_writes_is_refused_first(dev: kiln.Device) -> None:
    src = np.arange(16, dtype=np.float32)
    a = np.zeros(16, np.float32)
    frozen = np.frombuffer(np.zeros(16, np.float32).tobytes(), np.float32)
    for readonly in (frozen, np.zeros(16, np.float32)):
        readonly.setflags(write=False)
        with pytest.raises(kiln.LaunchError, match=r"argument 'b' \(#3\).*read-only"):
            kiln.launch(copy_pair, dim=16, args=(src, a, readonly, 16), device=dev)
        dev.synchronize()
        np.testing.assert_array_equal(a, 0)  # refused before anything ran
    read_only_source = src.copy()
    read_only_source.setflags(write=False)
    kiln.launch(copy_pair, dim=16, args=(read_only_source, a, a.copy(), 16), device=dev)
    np.testing.assert_array_equal(a, src)  # a kernel may read a read-only array


def test_strided_numpy_arguments_come_back(dev: kiln.Device) -> None:
    x = np.ones(20, np.float32)
    kiln.launch(scale, dim=10, args=(x[::2], 3.0, 10), device=dev)
    np.testing.assert_array_equal(x, np.tile(np.float32([3.0, 1.0]), 10))


# ------------------------------------------------------------------ shapes and dtypes


def test_zero_dimensional_arrays(dev: kiln.Device, other: kiln.Device) -> None:
    a = kiln.to_device(np.array(3.5, np.float32), dev)
    assert (a.shape, a.size, a.ndim, a.nbytes) == ((), 1, 0, 4)
    result = a.numpy()
    assert result.shape == () and result == np.float32(3.5)
    assert a.copy().numpy() == 3.5 and a.to(other).numpy() == 3.5
    a.copy_from_host(np.array(-1.0))
    out = np.empty((), np.float32)
    assert a.copy_to_host(out) is out and out == -1.0
    assert kiln.to_device(7, dev).numpy() == 7
    assert kiln.zeros((), i32, dev).numpy() == 0
    with pytest.raises(TypeError, match="len"):
        len(a)


@pytest.mark.parametrize("make", [kiln.empty, kiln.zeros,
                                  lambda shape, device: kiln.full(shape, 1.0, f32, device)])
def test_bad_shapes_and_dtypes_are_refused_at_once(dev: kiln.Device, make: Any) -> None:
    for shape, error, message in ((-5, ValueError, "0 or more, got -5"),
                                  ((4, -1), ValueError, r"got -1 in shape \(4, -1\)"),
                                  (2.5, TypeError, "ints or tuples of ints, got 2.5"),
                                  ((2, 3.0), TypeError, "got"),
                                  (True, TypeError, "got True"),
                                  ("8", TypeError, "got '8'"),
                                  ((2**40, 2**40), ValueError, "over 2\\*\\*63 bytes")):
        with pytest.raises(error, match=message):
            make(shape, device=dev)
    for dtype in ("garbage", object, np.str_):
        with pytest.raises(TypeError, match="kiln arrays hold numbers"):
            kiln.empty(4, dtype, dev)
    assert kiln.empty(np.int64(3), device=dev).shape == (3,)
    assert kiln.zeros([2, np.int32(0)], device=dev).numpy().shape == (2, 0)
    assert kiln.empty(np.array([2, 3]), device=dev).shape == (2, 3)


def test_big_endian_data_arrives_in_the_devices_byte_order(dev: kiln.Device) -> None:
    host = np.arange(6, dtype=">f4")
    a = kiln.to_device(host, dev)
    assert a.dtype == np.float32
    np.testing.assert_array_equal(a.numpy(), np.arange(6, dtype=np.float32))
    with pytest.raises(kiln.LaunchError, match=r"shape \(6,\) in the other byte order"):
        kiln.launch(scale, dim=6, args=(host, 2.0, 6), device=dev)


# ------------------------------------------------------------------ events


def test_an_unrecorded_event_counts_as_complete(dev: kiln.Device) -> None:
    event = kiln.Event(dev)
    finishes(event.synchronize)
    with pytest.raises(RuntimeError, match="both events must be recorded"):
        event.elapsed_time(kiln.Event(dev).record())
    with pytest.raises(RuntimeError, match="both events must be recorded"):
        kiln.Event(dev).record().elapsed_time(event)


@kiln.kernel
def spin(x: f32[:], steps: i32):
    """Busy work that keeps a GPU going for milliseconds with a handful of threads."""
    i = kiln.global_id(0)
    acc = x[i]
    for _ in range(steps):
        acc = acc * f32(0.999) + f32(1.0)
    x[i] = acc


def test_elapsed_time_waits_for_the_end(dev: kiln.Device) -> None:
    steps = 1 << 22 if dev.backend.name == "cuda" else 1 << 8  # ~10 ms on an H100
    x = kiln.zeros(32, f32, dev)
    kiln.launch(spin, 1, 32, (x, 1), device=dev)
    dev.synchronize()  # compiled
    start = kiln.Event(dev).record()
    kiln.launch(spin, 1, 32, (x, steps), device=dev)
    end = kiln.Event(dev).record()
    assert finishes(lambda: start.elapsed_time(end)) > 0  # at once: the end is still queued
    assert end.query()


def test_a_copy_on_another_stream_waits_for_the_source(dev: kiln.Device) -> None:
    steps = {"cuda": 1 << 22, "interp": 1 << 10}.get(dev.backend.name, 1 << 18)
    a = kiln.zeros(32, f32, dev)
    kiln.launch(spin, 1, 32, (a, 1), device=dev)
    a.copy_from_host(np.zeros(32, np.float32))
    dev.synchronize()
    stream = kiln.Stream(dev)
    kiln.launch(spin, 1, 32, (a, steps), device=dev)  # on the default stream, for a while
    copies = [a.to(dev, stream=stream), kiln.to_device(a, dev, stream=stream)]
    stream.synchronize()
    expected = a.numpy()
    assert expected[0] > 0
    for copy in copies:
        np.testing.assert_array_equal(copy.numpy(), expected)


@pytest.mark.parametrize("dev", CHECKED, indirect=True)
def test_a_failed_launch_never_wedges_its_stream(dev: kiln.Device) -> None:
    stream = kiln.Stream(dev)
    x = kiln.zeros(4, f32, dev)
    write_past_end[kiln.dim(4), stream](x, 4)
    start = kiln.Event(dev).record(stream)
    y = kiln.to_device(np.arange(4, dtype=np.float32), dev, stream=stream)
    end = kiln.Event(dev).record(stream)
    assert finishes(lambda: start.elapsed_time(end)) >= 0
    with pytest.raises(kiln.IndexOutOfBoundsError, match="outside its 4 elements"):
        finishes(end.synchronize)  # the failure before the event, raised once
    finishes(stream.synchronize)
    finishes(dev.synchronize)
    np.testing.assert_array_equal(y.numpy(), np.arange(4))  # the work after it ran
    np.testing.assert_array_equal(finishes(lambda: y.to(dev).numpy()), np.arange(4))


@pytest.mark.parametrize("dev", CHECKED, indirect=True)
def test_a_failed_launch_is_raised_once_by_its_stream(dev: kiln.Device) -> None:
    x = kiln.zeros(4, f32, dev)
    write_past_end[kiln.dim(4)](x, 4)
    with pytest.raises(kiln.IndexOutOfBoundsError):
        finishes(x.numpy)
    assert finishes(x.numpy).shape == (4,)
    finishes(dev.synchronize)


def test_a_stream_waits_for_an_event_without_the_host(dev: kiln.Device,
                                                        other: kiln.Device) -> None:
    first, second = kiln.Stream(dev), kiln.Stream(dev)
    n = 1 << 16
    x = kiln.to_device(np.ones(n, np.float32), dev)
    for _ in range(5):
        kiln.launch(scale, dim=n, args=(x, 2.0, n), stream=first)
    ready = kiln.Event(dev).record(first)
    second.wait_event(ready)
    kiln.launch(scale, dim=n, args=(x, 0.5, n), stream=second)  # after the five, not among
    finishes(second.synchronize)
    assert ready.query()
    np.testing.assert_array_equal(x.numpy(), np.full(n, 16.0, np.float32))
    second.wait_event(ready)
    ready.record(second)  # recorded again after the wait: the wait keeps the earlier one
    finishes(second.synchronize)
    second.wait_event(kiln.Event(dev))  # never recorded: complete, nothing waits
    finishes(second.synchronize)
    with pytest.raises(kiln.DeviceMismatchError, match=f"cannot wait for an event of "
                                                       f"{other.name}"):
        second.wait_event(kiln.Event(other).record())
    with pytest.raises(TypeError, match="takes a kiln.Event"):
        second.wait_event(first)  # type: ignore[arg-type]


def test_query_says_whether_the_work_is_done(dev: kiln.Device) -> None:
    assert kiln.Event(dev).query()  # never recorded
    stream = kiln.Stream(dev)
    event = kiln.Event(dev).record(stream)
    finishes(stream.synchronize)
    assert event.query()
    assert "recorded" in repr(event)


def test_dropped_streams_leave_no_threads(dev: kiln.Device) -> None:
    x = kiln.zeros(4, f32, dev)
    gc.collect()
    dev.synchronize()  # lets go of the streams earlier tests dropped with unread checks
    before = threading.active_count()
    for _ in range(50):
        stream = kiln.Stream(dev)
        kiln.launch(scale, dim=4, args=(x, 2.0, 4), stream=stream)
        kiln.Event(dev).record(stream)
    del stream
    gc.collect()
    deadline = time.monotonic() + HANG_S
    while threading.active_count() > before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert threading.active_count() <= before  # each host stream's thread ended


@pytest.mark.parametrize("dev", CHECKED, indirect=True)
def test_dropped_streams_of_checked_launches_leave_no_threads(dev: kiln.Device) -> None:
    x = kiln.zeros(8, f32, dev)
    gc.collect()
    dev.synchronize()
    before = threading.active_count()
    for _ in range(20):
        stream = kiln.Stream(dev)
        write_past_end[kiln.dim(4), stream](x, 4)  # a debug kernel: a status per stream
        stream.synchronize()
    del stream
    gc.collect()
    deadline = time.monotonic() + HANG_S
    while threading.active_count() > before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert threading.active_count() <= before


@kiln.kernel
def converge(y: f32[:], n: i32):
    """Slow on purpose: each element converges to 2.0 over many steps."""
    i = kiln.global_id(0)
    if i < n:
        v = 0.0
        for _ in range(2000):
            v = v + (2.0 - v) * 0.5
        y[i] = v


def test_a_device_synchronisation_waits_for_dropped_streams(dev: kiln.Device) -> None:
    y = kiln.zeros(4096, f32, dev)
    kiln.launch(converge, dim=4096, args=(y, 4096), stream=kiln.Stream(dev))
    gc.collect()  # the stream is gone; its work is not
    finishes(dev.synchronize)
    assert np.all(y.numpy() == 2.0)


@pytest.mark.parametrize("dev", CHECKED, indirect=True)
def test_a_device_synchronisation_reports_a_dropped_streams_failure(dev: kiln.Device) -> None:
    x = kiln.zeros(4, f32, dev)
    write_past_end[kiln.dim(4), kiln.Stream(dev)](x, 4)
    gc.collect()
    with pytest.raises(kiln.IndexOutOfBoundsError):
        finishes(dev.synchronize)
    finishes(dev.synchronize)  # reported once


@pytest.mark.parametrize("dev", CHECKED, indirect=True)
def test_a_device_synchronisation_reports_every_stream_once(dev: kiln.Device) -> None:
    streams = [kiln.Stream(dev), kiln.Stream(dev)]
    x = kiln.zeros(4, f32, dev)
    for stream in streams:
        write_past_end[kiln.dim(4), stream](x, 4)
    with pytest.raises(kiln.IndexOutOfBoundsError):
        finishes(dev.synchronize)
    finishes(dev.synchronize)  # nothing left over from either stream
    for stream in streams:
        finishes(stream.synchronize)


def test_device_arrays_are_copied_by_name_not_implicitly(dev: kiln.Device,
                                                          other: kiln.Device) -> None:
    host = np.arange(12, dtype=np.float32).reshape(3, 4)
    a = kiln.to_device(host, dev)
    with pytest.raises(TypeError, match=r"not converted to a NumPy array implicitly.*numpy\(\)"):
        np.asarray(a)
    with pytest.raises(TypeError, match="implicitly"):
        a.copy_from_host(kiln.zeros((3, 4), f32, dev))  # type: ignore[arg-type]
    for target in (dev, other):
        copy = kiln.to_device(a, target)  # a copy, as CuPy's asarray of a device array
        assert copy.device is target and copy.buffer is not a.buffer
        np.testing.assert_array_equal(copy.numpy(), host)
        np.testing.assert_array_equal(kiln.to_device(a[:, 1], target).numpy(), host[:, 1])
        stream = kiln.Stream(target)
        queued = kiln.to_device(a[1:], target, stream=stream)
        stream.synchronize()
        np.testing.assert_array_equal(queued.numpy(), host[1:])


def test_streams_and_events_take_device_specs(dev: kiln.Device) -> None:
    assert kiln.Stream(dev.name).device is dev and kiln.Event(dev.name).device is dev
    for bad in (3, 1.5, [dev]):
        with pytest.raises(TypeError, match="a device is a kiln.Device or a spec"):
            kiln.Stream(bad)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="a device is a kiln.Device or a spec"):
            kiln.Event(bad)  # type: ignore[arg-type]
    with pytest.raises(kiln.DeviceNotFoundError):
        kiln.Stream("nonesuch")


def test_zero_size_views_and_arrays(dev: kiln.Device) -> None:
    wide, tall = kiln.zeros((4, 0), f32, dev), kiln.zeros((0, 4), f32, dev)
    assert wide[1].numpy().shape == (0,) and wide[1:3].numpy().shape == (2, 0)
    assert tall[:, 1].numpy().shape == (0,) and tall[:, 3].numpy().shape == (0,)
    if dev.capabilities.unified_memory:  # as_device_array shares only the host's memory
        for shape in [(0,), (3, 0)]:
            shared = kiln.as_device_array(np.zeros(shape, np.float32), dev)
            assert shared.numpy().shape == shape


@pytest.mark.parametrize("shape", [(0,), (3, 0), (0, 4)])
def test_empty_arrays_copy_in_every_direction(dev: kiln.Device, other: kiln.Device,
                                              shape: tuple[int, ...]) -> None:
    host = np.zeros(shape, np.float32)
    a = kiln.to_device(host, dev)
    for result in (a.numpy(), a.copy().numpy(), a.to(other).numpy(),
                   kiln.to_device(a, other).numpy(), a.copy_to_host(np.empty(shape, np.float32)),
                   kiln.empty(shape, f32, dev).numpy(), kiln.zeros(shape, f32, dev).numpy()):
        assert result.shape == shape and result.dtype == np.float32
    a.copy_from_host(host)
    assert a[..., 0:0].numpy().shape == (*shape[:-1], 0)


def test_views_of_views_copy_in_every_direction(dev: kiln.Device, other: kiln.Device) -> None:
    host = np.arange(6 * 8 * 5, dtype=np.float32).reshape(6, 8, 5)
    a = kiln.to_device(host, dev)
    for first, second in (((slice(1, 5),), (slice(1, 3),)), ((slice(None), slice(2, 6)), (1,)),
                          ((2,), (slice(1, 7, 2),)), ((slice(None, None, 2),), (slice(1, None), 3)),
                          ((1,), (slice(0, 0),)), ((4,), (Ellipsis, slice(1, 4)))):
        expected = host[first][second]
        view = a[first][second]
        np.testing.assert_array_equal(view.numpy(), expected)
        np.testing.assert_array_equal(view.copy().numpy(), expected)
        np.testing.assert_array_equal(kiln.to_device(view, other).numpy(), expected)
        out = np.empty(expected.shape, np.float32)
        np.testing.assert_array_equal(view.copy_to_host(out), expected)
        if type(view) is kiln.DeviceArray:  # contiguous: writable from the host, movable
            np.testing.assert_array_equal(view.to(other).numpy(), expected)
            view.copy_from_host(expected + 1)
            changed = host.copy()
            changed[first][second] += 1
            np.testing.assert_array_equal(a.numpy(), changed)
            a.copy_from_host(host)


def test_threads_asking_first_share_one_default_stream(dev: kiln.Device) -> None:
    fresh = kiln.Device(dev.backend, dev.index, dev.handle, dev.capabilities, dev.priority,
                        dev.part)  # a device object no thread has used yet
    start = threading.Barrier(8)
    seen: list[kiln.Stream] = []

    def ask() -> None:
        start.wait()
        seen.append(fresh.default_stream)

    workers = [threading.Thread(target=ask) for _ in range(8)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(HANG_S)
    assert len(seen) == 8 and all(stream is seen[0] for stream in seen)


class SlowToList(InterpBackend):
    """The interp's device, listed slowly: threads asking at once overlap for sure."""

    name = "slow-to-list"

    def device_handles(self) -> Any:
        time.sleep(0.05)
        return super().device_handles()


def test_threads_asking_first_get_one_device_object() -> None:
    entry = BackendEntry(SlowToList(), priority=0)
    start = threading.Barrier(8)
    seen: list[list[kiln.Device]] = []

    def ask() -> None:
        start.wait()
        seen.append(devices_of(entry))

    workers = [threading.Thread(target=ask) for _ in range(8)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(HANG_S)
    assert len(seen) == 8 and all(found[0] is seen[0][0] for found in seen)


# ------------------------------------------------------------------ sizes and values


@kiln.kernel
def touch_bytes(x: kiln.u8[:], n: i32):
    i = kiln.global_id(0)
    if i < n:
        x[i] = 1


def test_an_extent_over_i32_is_refused_by_name(dev: kiln.Device) -> None:
    kiln.launch(touch_bytes, dim=4, args=(kiln.zeros(8, kiln.u8, dev), 4))  # a plan is kept
    try:
        huge = kiln.empty(2**31 + 5, kiln.u8, dev)  # untouched: no memory is written
    except kiln.OutOfMemoryError as exc:
        assert str(2**31 + 5) in str(exc) and dev.name in str(exc)
        return
    with pytest.raises(kiln.LaunchError, match=r"argument 'x'.*over 2147483647"):
        kiln.launch(touch_bytes, dim=4, args=(huge, 4))


def test_an_allocation_too_large_is_out_of_memory(dev: kiln.Device) -> None:
    # 2**48 bytes: past any device's memory and past a process's address space, so that
    # no overcommitting host hands it out lazily
    with pytest.raises(kiln.OutOfMemoryError, match=f"{dev.name} cannot allocate "
                                                    f"{2**48} bytes") as caught:
        kiln.empty(2**46, f32, dev)
    assert isinstance(caught.value, MemoryError)


def test_launch_arguments_a_kernel_cannot_take(dev: kiln.Device) -> None:
    x = kiln.zeros(4, f32, dev)
    with pytest.raises(kiln.LaunchError, match="args= takes a tuple or list"):
        kiln.launch(scale, dim=4, args=x)  # type: ignore[arg-type]
    with pytest.raises(kiln.LaunchError, match="argument 'factor'.*too large for f32"):
        kiln.launch(scale, dim=4, args=(x, 2**2000, 4))
    for huge in (1e40, -1e40, np.float64(3.5e38)):
        scale[kiln.dim(4)](x, 2.0, 4)  # a launch plan is kept, then declines
        with pytest.raises(kiln.LaunchError, match="argument 'factor'.*too large for f32, "
                                                   "where it would be an infinity"):
            scale[kiln.dim(4)](x, huge, 4)
    kiln.launch(scale, dim=4, args=(x, float("inf"), 4))  # an infinity itself is a value
    masked = np.ma.masked_array(np.zeros(4, np.float32), mask=[0, 1, 0, 0])
    with pytest.raises(kiln.LaunchError, match="argument 'x'.*no masked arrays"):
        kiln.launch(scale, dim=4, args=(masked, 2.0, 4), device=dev)


def test_numpy_waits_for_the_stream_it_is_given(dev: kiln.Device, other: kiln.Device) -> None:
    y, stream = kiln.zeros(4096, f32, dev), kiln.Stream(dev)
    kiln.launch(converge, dim=4096, args=(y, 4096), stream=stream)
    assert np.all(finishes(lambda: y.numpy(stream=stream)) == 2.0)
    with pytest.raises(kiln.DeviceMismatchError):
        y.numpy(stream=kiln.Stream(other))


def test_a_view_goes_to_another_device_as_to_device_takes_it(dev: kiln.Device,
                                                             other: kiln.Device) -> None:
    host = np.arange(12, dtype=np.float32).reshape(3, 4)
    column = kiln.to_device(host, dev)[:, 1]
    stream = kiln.Stream(other)
    moved = column.to(other, stream)
    stream.synchronize()
    assert moved.device is other
    np.testing.assert_array_equal(moved.numpy(), host[:, 1])
    np.testing.assert_array_equal(column.numpy(stream=kiln.Stream(dev)), host[:, 1])


@pytest.mark.parametrize(("value", "dtype", "error", "says"), [
    (2**40, kiln.i32, ValueError, "int32 cannot hold 1099511627776"),
    (-1, kiln.u32, ValueError, "uint32 cannot hold -1"),
    (np.nan, kiln.i32, ValueError, "int32 cannot hold nan"),
    (np.inf, kiln.i32, ValueError, "int32 cannot hold inf"),
    (2.5, kiln.i32, ValueError, "int32 cannot hold 2.5"),
    (2**2000, f32, ValueError, "float32 cannot hold an int of 2001 bits"),
    (1e300, f32, ValueError, "float32 cannot hold 1e"),
    ("x", f32, TypeError, "filled with a number, got str 'x'"),
])
def test_fill_values_the_dtype_cannot_hold_are_refused(dev: kiln.Device, value: Any,
                                                       dtype: Any, error: type, says: str
                                                       ) -> None:
    with pytest.raises(error, match=re.escape(says)):
        kiln.full(3, value, dtype, dev)
    with pytest.raises(error, match=re.escape(says)):
        kiln.partials(3, dtype, [dev], fill=value)


def test_fill_values_every_dtype_holds(dev: kiln.Device) -> None:
    for value, dtype in [(np.inf, f32), (np.nan, f32), (7.0, i32), (True, i32), (-1, i32)]:
        np.testing.assert_array_equal(kiln.full(3, value, dtype, dev).numpy(),
                                      np.full(3, value, dtype.dtype))


def test_one_device_alone_shards_as_a_list_of_one(dev: kiln.Device) -> None:
    host = np.arange(6, dtype=np.float32)
    for devices in (dev, dev.name):
        np.testing.assert_array_equal(kiln.shard(host, devices).gather(), host)
    with pytest.raises(TypeError, match="devices is a list"):
        kiln.shard(host, 3)  # type: ignore[arg-type]


def test_parts_of_a_split_device_are_named_as_objects() -> None:
    whole = kiln.device("cpu") if "cpu" in BACKENDS else None
    if whole is None:
        pytest.skip("splitting a device needs the cpu backend (gcc with OpenMP)")
    part = whole.split(2)[0]
    with pytest.raises(kiln.DeviceNotFoundError, match="part of a split device"):
        kiln.Stream(part.name)
    x = kiln.zeros(4, f32, part)
    with pytest.raises(kiln.DeviceMismatchError, match=r"kiln.Stream\(part\)") as caught:
        x.numpy(stream=kiln.Stream(whole))
    assert f"kiln.Stream({part.name!r})" not in str(caught.value)
