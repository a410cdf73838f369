"""Host-side semantics every backend shares: copies, zero-copy sharing, launches by size and
device-array views."""

from __future__ import annotations

import numpy as np

import kiln
from kiln import f32, i32

from ..checks import assert_equal, blocks, run
from ..registry import Skipped, case


@kiln.kernel
def scale(x: f32[:], factor: f32, n: i32):
    i = kiln.global_id(0)
    if i < n:
        x[i] = x[i] * factor


@case()
def to_device_copies(device):
    """kiln.to_device copies: a kernel writing the device array leaves the NumPy array alone,
    and later writes to the NumPy array do not reach the device."""
    host = np.arange(100, dtype=np.float32)
    original = host.copy()
    dev_array = kiln.to_device(host, device)
    host[:10] = -1.0  # after the copy: must not reach the device
    run(device, scale, blocks(100, 64), 64, dev_array, 2.0, 100)
    assert_equal(host[10:], original[10:], "the NumPy array after a kernel wrote its copy")
    assert_equal(dev_array.numpy(), original * 2, "the device copy")


@case()
def as_device_array_shares(device):
    """kiln.as_device_array shares host memory where the device's memory is the host's, and
    says why it cannot elsewhere."""
    host = np.arange(100, dtype=np.float32)
    try:
        shared = kiln.as_device_array(host, device)
    except ValueError as exc:
        if device.capabilities.unified_memory:
            raise AssertionError(f"{device.name} has unified memory but did not share: {exc}"
                                 ) from exc
        raise Skipped(f"{device.name} does not share host memory: {exc}") from None
    run(device, scale, blocks(100, 64), 64, shared, 3.0, 100)
    assert_equal(host, np.arange(100, dtype=np.float32) * 3, "the shared NumPy array")


@kiln.kernel
def index_grid(out: i32[:, :], h: i32, w: i32):
    i = kiln.global_id(0)
    j = kiln.global_id(1)
    if i < h and j < w:
        out[i, j] = i * 1000 + j


@case()
def launch_by_size(device):
    """kiln.launch(k, dim=n) and k[kiln.dim(h, w)]: one thread per element, global_id(k)
    ranging over axis k of dim, for sizes that fill no whole block."""
    for n in (1, 37, 1000):
        x = np.ones(n, np.float32)
        kiln.launch(scale, dim=n, args=(x, 5.0, n), device=device)
        device.synchronize()
        assert_equal(x, np.full(n, 5.0, np.float32), f"x (dim={n})")
    h, w = 19, 45
    out = kiln.full((h, w), -1, i32, device)
    index_grid[kiln.dim(h, w)](out, h, w)
    rows, cols = np.indices((h, w))
    assert_equal(out.numpy(), (rows * 1000 + cols).astype(np.int32), "out (dim=(19, 45))")


@case()
def device_array_views(device):
    """Host-side views of device arrays (rows, slices, strided columns) share its memory;
    a kernel writing a row view changes the array."""
    h = np.arange(64 * 32, dtype=np.float32).reshape(64, 32)
    d = kiln.to_device(h, device)
    for key in (5, slice(8, 40), (slice(2, 9), slice(3, 30, 4)), (Ellipsis, 7)):
        assert_equal(d[key].numpy(), h[key], f"d[{key}]")
    row = d[4]
    kiln.launch(scale, dim=32, args=(row, 2.0, 32))
    expected = h.copy()
    expected[4] *= 2
    assert_equal(d.numpy(), expected, "the array after a kernel scaled its row view")
    assert_equal(d[:, 1].copy().numpy(), expected[:, 1], "a copied column")


@kiln.kernel
def shift(x: f32[:], by: f32, n: i32):
    i = kiln.global_id(0)
    if i < n:
        x[i] = x[i] + by


@case()
def captured_launches_replay(device):
    """kiln.capture records launches and a host copy without running them; each replay runs
    them in order, with a kiln.Param and one launch's grid changed between replays (through
    the backend's KernelGraphs where it has them)."""
    n = 300
    host = np.arange(n, dtype=np.float32)
    x = kiln.zeros(n, f32, device)
    with kiln.capture(device) as graph:
        x.copy_from_host(host)
        shift[blocks(n, 64), 64](x, kiln.Param("by", 1.0), n)
        scale[1, 64](x, 2.0, n)  # the first 64 elements only
    assert_equal(x.numpy(), np.zeros(n, np.float32), "x before any replay")
    graph.replay()
    expected = host + 1
    expected[:64] *= 2
    assert_equal(x.numpy(), expected, "x after a replay")
    host[:] = 7.0  # the recorded copy reads the NumPy array at each replay
    graph.update(graph.launches[1], grid=blocks(n, 64))  # now all of x
    graph.replay(by=-3.0)
    assert_equal(x.numpy(), np.full(n, 8.0, np.float32), "x after updates and a replay")
