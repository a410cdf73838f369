"""The runtime's devices: device selection, environment variables, streams and events,
NumPy arguments, `kiln.launch`, and third-party backends registered at run time."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

import kiln
from kiln import f64
from kiln.examples import vector_add
from tests.helpers import run_python

N = 1000  # not a multiple of the block size


@kiln.kernel
def scale2d(m: f64[:, :], factor: f64):
    i, j = kiln.global_id(1), kiln.global_id(0)
    if i < m.shape[0] and j < m.shape[1]:
        m[i, j] *= factor


def blocks(n: int, block: int = 128) -> int:
    return (n + block - 1) // block


# ---------------------------------------------------------------- devices


def test_devices_are_listed_best_first(interp) -> None:
    found = kiln.devices()
    assert interp in found
    assert [d.priority for d in found] == sorted((d.priority for d in found), reverse=True)
    assert kiln.device() is found[0]


def test_device_specs(interp) -> None:
    assert kiln.device("interp") is interp
    assert kiln.device("interp:0") is interp
    assert kiln.device(interp) is interp
    assert interp.name == "interp:0"


def test_device_capabilities(interp) -> None:
    caps = interp.capabilities
    assert caps.backend == "interp" and caps.max_threads_per_block >= 256
    assert caps.fp64 and any(a.startswith("atomic_add") for a in caps.atomics)
    assert set(caps.as_dict()) >= {"max threads per block", "shared memory per block",
                                   "warp size", "fp64", "fp16", "atomics", "unified memory"}


def test_unknown_backend_lists_registered_ones() -> None:
    with pytest.raises(kiln.DeviceNotFoundError, match="registered:.*interp"):
        kiln.device("warp-drive")


def test_backends_report_availability() -> None:
    entries = {e.name: e for e in kiln.backends()}
    assert entries["interp"].available and entries["interp"].reason == ""
    for entry in entries.values():
        assert entry.available or entry.reason, f"{entry.name} is unavailable without a reason"


def test_kiln_backend_selects_the_default() -> None:
    result = run_python("import kiln; print(kiln.device().name)", {"KILN_BACKEND": "interp"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "interp:0"


def test_kiln_disable_hides_a_backend() -> None:
    code = ("import json, kiln\n"
            "e = {b.name: b for b in kiln.backends()}['interp']\n"
            "names = [d.name for d in kiln.devices()]\n"
            "try:\n    kiln.device('interp'); err = ''\n"
            "except kiln.DeviceNotFoundError as exc:\n    err = str(exc)\n"
            "print(json.dumps([e.available, e.reason, names, err]))")
    result = run_python(code, {"KILN_DISABLE_INTERP": "1"})
    assert result.returncode == 0, result.stderr
    available, reason, names, error = json.loads(result.stdout)
    assert not available and "KILN_DISABLE_INTERP" in reason
    assert not any(name.startswith("interp") for name in names)
    assert "not available" in error and "KILN_DISABLE_INTERP" in error


# ---------------------------------------------------------------- launches


def inputs(n: int = N) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    return rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)


def test_launch_with_device_arrays(interp) -> None:
    x, y = inputs()
    a, b = kiln.to_device(x, interp), kiln.to_device(y, interp)
    c = kiln.empty_like(a)
    vector_add[blocks(N), 128](a, b, c, N)
    np.testing.assert_array_equal(c.numpy(), x + y)


def test_numpy_arguments_are_copied_in_and_written_ones_back(interp) -> None:
    x, y = inputs()
    x_before = x.copy()
    out = np.zeros(2 * N, np.float32)[::2]  # not contiguous: needs a real copy back
    kiln.launch(vector_add, blocks(N), 128, (x, y, out, N), device=interp)
    interp.synchronize()
    np.testing.assert_array_equal(out, x + y)
    np.testing.assert_array_equal(x, x_before)


def test_read_only_numpy_inputs_are_accepted(interp) -> None:
    x, y = inputs()
    x.flags.writeable = False
    out = np.zeros(N, np.float32)
    vector_add[blocks(N), 128](x, y, out, N)
    interp.synchronize()
    np.testing.assert_array_equal(out, x + y)


def test_2d_grid_and_scalar_conversion(interp) -> None:
    host = np.arange(15 * 33, dtype=np.float64).reshape(15, 33)
    m = kiln.to_device(host.copy(), interp)
    kiln.launch(scale2d, grid=(blocks(33, 16), blocks(15, 8)), block=(16, 8), args=(m, 3),
                device=interp)
    np.testing.assert_array_equal(m.numpy(), host * 3)


def test_compile_ahead_of_launch(interp) -> None:
    spec = vector_add.compile(interp)
    assert spec.device is interp
    assert spec is vector_add.compile(interp)  # cached per signature and device


# ---------------------------------------------------------------- streams and events


def test_streams_and_events(interp) -> None:
    x, y = inputs(1 << 16)
    stream = kiln.Stream(interp)
    a, b = kiln.to_device(x, interp, stream), kiln.to_device(y, interp, stream)
    c = kiln.empty_like(a)
    start = kiln.Event(interp).record(stream)
    vector_add[blocks(len(x)), 256, stream](a, b, c, len(x))
    end = kiln.Event(interp).record(stream)
    end.synchronize()
    assert start.elapsed_time(end) >= 0.0
    stream.synchronize()
    np.testing.assert_array_equal(c.copy_to_host(stream=stream), x + y)


def test_elapsed_time_needs_recorded_events(interp) -> None:
    with pytest.raises(RuntimeError, match="recorded"):
        kiln.Event(interp).elapsed_time(kiln.Event(interp))


def test_launches_are_ordered_on_a_stream(interp) -> None:
    x = np.ones(N, np.float32)
    a = kiln.to_device(x.copy(), interp)
    stream = kiln.Stream(interp)
    for _ in range(5):
        kiln.launch(vector_add, blocks(N), 128, (a, a, a, N), stream=stream)
    stream.synchronize()
    np.testing.assert_array_equal(a.numpy(), x * 2**5)


# ---------------------------------------------------------------- third-party backends


class NoDriverBackend(kiln.backend.DirectBackend):
    """A plugin whose hardware is missing: registered, listed, never chosen."""

    name = "nodriver"
    # never used when unavailable
    allocator, queue = kiln.backend.HostAllocator(), kiln.backend.HostQueue()

    def availability(self) -> kiln.backend.Availability:
        return kiln.backend.Availability(False, "the Frobnicator driver is not installed")

    def device_handles(self) -> Sequence[tuple[Any, kiln.backend.Capabilities]]:
        raise AssertionError("never asked when unavailable")

    def execute(self, *args: Any) -> None:
        raise AssertionError("never used when unavailable")


def test_registered_backend_runs_kernels(mirror) -> None:
    entry = {e.name: e for e in kiln.backends()}["mirror"]
    assert entry.available and entry.priority == 1
    assert mirror.name == "mirror:0" and mirror.capabilities.backend == "mirror"
    assert mirror in kiln.devices()
    x, y = inputs()
    out = np.zeros(N, np.float32)
    vector_add[blocks(N), 128](kiln.to_device(x, mirror), kiln.to_device(y, mirror), out, N)
    mirror.synchronize()
    np.testing.assert_array_equal(out, x + y)


def test_registered_unavailable_backend_is_explained() -> None:
    kiln.backend.register_backend(NoDriverBackend(), priority=1000)
    entry = {e.name: e for e in kiln.backends()}["nodriver"]
    assert not entry.available and "Frobnicator" in entry.reason
    assert kiln.device().backend.name != "nodriver"
    with pytest.raises(kiln.DeviceNotFoundError, match="Frobnicator"):
        kiln.device("nodriver")
