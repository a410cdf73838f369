"""Recursion inlined to `max_depth` (backends that cannot recurse): correct within the depth,
and past it a `RecursionDepthError` at the launch's next synchronisation, never a silently
wrong answer. Runs on OpenCL (PoCL here) and on the cpu backend forced to inline."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

import kiln
from kiln import i32
from tests.helpers import marked_line, requires_backend

pytestmark = pytest.mark.compiler

SPIN = 1 << 30  # iterations a kernel waits for the host's flag at most (seconds of work)


@kiln.func(max_depth=10)
def fib(n: i32) -> i32:
    if n < 2:
        return n
    return fib(n - 1) + fib(n - 2)  # error


@kiln.func(max_depth=6)
def count_down(out: i32[:], i: i32, n: i32):
    if n > 0:
        out[i] += 1
        count_down(out, i, n - 1)


@kiln.kernel
def fibs(out: i32[:], n: i32):
    i = kiln.global_id(0)
    if i < n:
        out[i] = fib(i)


@kiln.kernel
def counts(out: i32[:], n: i32):
    i = kiln.global_id(0)
    if i < n:
        count_down(out, i, i)


@kiln.kernel
def fib_after_flag(flag: i32[:], seen: i32[:]):
    """Waits for the host to set `flag` (at most SPIN steps), then recurses too deep."""
    steps = 0
    while kiln.atomic_add(flag, 0, 0) == 0 and steps < SPIN:
        steps += 1
    seen[0] = 1 if steps < SPIN else 0
    seen[1] = fib(20)


@pytest.fixture(params=[
    pytest.param("opencl", marks=requires_backend("opencl", "no OpenCL platform")),
    "cpu-bounded",
])
def bounded(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
            ) -> Iterator[kiln.Device]:
    """A device whose backend inlines recursion to max_depth: OpenCL, or the cpu backend
    told it cannot recurse (these kernels are compiled for it only so)."""
    if request.param == "opencl":
        yield kiln.device("opencl")
        return
    dev = kiln.device("cpu")
    monkeypatch.setattr(dev.backend, "supports_recursion", False)
    yield dev


def check_depth_error(error: pytest.ExceptionInfo[kiln.RecursionDepthError]) -> None:
    exc = error.value
    assert type(exc) is kiln.RecursionDepthError
    assert "`fib` recursed deeper than its max_depth=10 in kernel" in exc.message
    assert exc.loc is not None and exc.loc.line == marked_line(fib)


def test_within_max_depth_results_are_right(bounded: kiln.Device) -> None:
    out = kiln.zeros(11, np.int32, device=bounded)
    fibs[1, 16](out, 11)
    steps = kiln.zeros(6, np.int32, device=bounded)
    counts[1, 8](steps, 6)  # count_down(5) calls count_down(0) at depth 6
    bounded.synchronize()
    np.testing.assert_array_equal(out.numpy(), [0, 1, 1, 2, 3, 5, 8, 13, 21, 34, 55])
    np.testing.assert_array_equal(steps.numpy(), np.arange(6))


@pytest.mark.parametrize("sync", ["device", "stream", "numpy", "event"])
def test_past_max_depth_raises_at_the_next_synchronisation(bounded: kiln.Device,
                                                           sync: str) -> None:
    stream = bounded.default_stream if sync in ("device", "numpy") else kiln.Stream(bounded)
    out = kiln.zeros(12, np.int32, device=bounded)
    fibs[1, 16, stream](out, 12)  # fib(11) needs depth 11: the launch itself raises nothing
    assert stream.pending, "the launch armed its check"
    with pytest.raises(kiln.RecursionDepthError) as error:
        if sync == "device":
            bounded.synchronize()
        elif sync == "stream":
            stream.synchronize()
        elif sync == "numpy":
            out.numpy()
        else:
            kiln.Event(bounded).record(stream).synchronize()
    check_depth_error(error)
    bounded.synchronize()  # reported once: the status is clear again
    stream.synchronize()
    fibs[1, 16, stream](out, 11)
    stream.synchronize()
    assert out.numpy()[10] == 55


def test_numpy_arguments_copied_back_raise_at_the_launch(bounded: kiln.Device) -> None:
    with pytest.raises(kiln.RecursionDepthError) as error:
        kiln.launch(fibs, 1, 16, (np.zeros(16, np.int32), 16), device=bounded)
    check_depth_error(error)


def test_prepared_launches_report_each_time(bounded: kiln.Device) -> None:
    out = kiln.zeros(12, np.int32, device=bounded)
    run = fibs.prepare(1, 16, out, 12, device=bounded)
    for _ in range(2):
        run()
        with pytest.raises(kiln.RecursionDepthError):
            bounded.synchronize()


def test_the_launch_does_not_wait_for_the_check(bounded: kiln.Device) -> None:
    """The kernel spins until the host sets a flag after the launch returned; had the launch
    waited for the kernel (to read its status), the spin would have run out instead."""
    flag_host = np.zeros(1, np.int32)
    try:
        flag = kiln.as_device_array(flag_host, bounded)  # the host's writes reach the kernel
    except ValueError as exc:
        pytest.skip(f"the host cannot set a flag the kernel sees: {exc}")
    seen = kiln.zeros(2, np.int32, device=bounded)
    fib_after_flag[1, 1](flag, seen)
    flag_host[0] = 1
    with pytest.raises(kiln.RecursionDepthError) as error:
        seen.numpy()
    check_depth_error(error)
    assert seen.numpy()[0] == 1, "the kernel saw the flag only when its spin ran out"
