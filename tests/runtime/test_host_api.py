"""The host API's copy semantics, launches by size, device-array views and their misuse, on
every available backend (kiln/conformance/cases/host.py has the conformance cases)."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import i32
from kiln.conformance.cases.host import index_grid, scale
from kiln.framework.sizing import block_for

BACKENDS = [e.name for e in kiln.backends() if e.available]


@pytest.fixture(params=BACKENDS)
def dev(request: pytest.FixtureRequest) -> kiln.Device:
    return kiln.device(request.param)


def test_to_device_never_shares(dev: kiln.Device) -> None:
    host = np.arange(10, dtype=np.float32)
    copy = kiln.to_device(host, dev)
    kiln.launch(scale, dim=10, args=(copy, 2.0, 10))
    dev.synchronize()
    np.testing.assert_array_equal(host, np.arange(10, dtype=np.float32))
    np.testing.assert_array_equal(copy.numpy(), np.arange(10, dtype=np.float32) * 2)


def test_as_device_array_refuses_what_it_cannot_share(dev: kiln.Device) -> None:
    if not dev.capabilities.unified_memory:
        with pytest.raises(ValueError, match="memory is not the host's"):
            kiln.as_device_array(np.zeros(4, np.float32), dev)
        return
    with pytest.raises(ValueError, match="not C-contiguous"):
        kiln.as_device_array(np.zeros((4, 4), np.float32).T, dev)
    frozen = np.zeros(4, np.float32)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="read-only.*kiln.to_device"):
        kiln.as_device_array(frozen, dev)
    with pytest.raises(TypeError, match="got list"):
        kiln.as_device_array([1.0, 2.0], dev)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="numbers and bools"):
        kiln.as_device_array(np.array(["a"]), dev)


def test_numpy_launch_arguments_still_come_back(dev: kiln.Device) -> None:
    x = np.ones(100, np.float32)
    scale[kiln.dim(100)](x, 4.0, 100)
    dev.synchronize()
    np.testing.assert_array_equal(x, np.full(100, 4.0, np.float32))


def test_dim_launch_on_a_stream_and_a_shape(dev: kiln.Device) -> None:
    stream = kiln.Stream(dev)
    out = kiln.empty((3, 5), i32, dev)
    index_grid[kiln.dim((3, 5)), stream](out, 3, 5)
    stream.synchronize()
    assert out.numpy()[2, 4] == 2004
    kiln.launch(index_grid, dim=np.zeros((3, 5)).shape, args=(out, 3, 5), stream=stream)
    stream.synchronize()


def test_blocks_fit_the_device_and_the_problem(dev: kiln.Device) -> None:
    caps = dev.capabilities
    for shape in ((1,), (37,), (10**6,), (7, 3), (1000, 1000), (9, 9, 9)):
        block = block_for(shape, dev)
        assert block[0] * block[1] * block[2] <= caps.max_threads_per_block
        assert all(b <= m for b, m in zip(block, caps.max_block_dims))
    assert block_for((10**6,), dev)[0] == min(256, caps.max_threads_per_block)
    assert block_for((37,), dev)[0] <= max(64, caps.warp_size)


def test_dim_zero_launches_nothing(dev: kiln.Device) -> None:
    x = np.ones(4, np.float32)
    kiln.launch(scale, dim=0, args=(x, 2.0, 4))
    np.testing.assert_array_equal(x, np.ones(4, np.float32))


@pytest.mark.parametrize(("dim", "message"), [
    (-1, "must not be negative"),
    ((4, 4, 4, 4), "1 to 3 ints"),
    (2.5, "1 to 3 ints"),
    (True, "1 to 3 ints"),
    ((), "1 to 3 ints"),
    ("8", "1 to 3 ints"),
])
def test_bad_dims_are_launch_errors(interp: kiln.Device, dim: object, message: str) -> None:
    x = np.ones(4, np.float32)
    with pytest.raises(kiln.LaunchError, match=message):
        kiln.launch(scale, dim=dim, args=(x, 2.0, 4), device=interp)
    with pytest.raises(kiln.LaunchError, match=message):
        kiln.dim(dim)  # type: ignore[arg-type]


def test_dim_with_grid_or_without_either_is_a_launch_error(interp: kiln.Device) -> None:
    x = np.ones(4, np.float32)
    with pytest.raises(kiln.LaunchError, match="not both"):
        kiln.launch(scale, 1, 4, args=(x, 2.0, 4), dim=4, device=interp)
    with pytest.raises(kiln.LaunchError, match="not both"):
        kiln.launch(scale, block=4, args=(x, 2.0, 4), dim=4, device=interp)
    with pytest.raises(kiln.LaunchError, match="needs dim=n"):
        kiln.launch(scale, args=(x, 2.0, 4), device=interp)
    with pytest.raises(TypeError, match=r"scale\[kiln.dim\(n\)\]"):
        scale[4]  # one number is neither a size nor a grid and a block


def test_dim_over_the_grid_limit_is_a_launch_error(interp: kiln.Device) -> None:
    too_many = interp.capabilities.max_grid_dims[1] * 16 + 1
    with pytest.raises(kiln.LaunchError, match="grid dimension y"):
        kiln.launch(index_grid, dim=(1, too_many), args=(np.zeros((1, 1), np.int32), 1, 1),
                    device=interp)


def test_views_share_memory_and_nest(dev: kiln.Device) -> None:
    h = np.arange(4 * 6 * 8, dtype=np.int32).reshape(4, 6, 8)
    d = kiln.to_device(h, dev)
    inner = d[1:3][1][2:5]  # a view of a view of a view: offsets add up
    assert inner.base is d and inner.shape == (3, 8)
    np.testing.assert_array_equal(inner.numpy(), h[1:3][1][2:5])
    np.testing.assert_array_equal(d[2, 1:4, ::3].numpy(), h[2, 1:4, ::3])
    np.testing.assert_array_equal(d[3:3].numpy(), h[3:3])  # empty
    d[0].copy_from_host(np.full((6, 8), -5, np.int32))
    assert (d.numpy()[0] == -5).all() and (d.numpy()[1:] == h[1:]).all()


def test_a_strided_view_is_refused_by_launches_and_host_writes(dev: kiln.Device) -> None:
    d = kiln.to_device(np.zeros((8, 8), np.float32), dev)
    column = d[:, 2]
    assert isinstance(column, kiln.DeviceArrayView)
    with pytest.raises(kiln.LaunchError, match=r"argument 'x' \(#1\) of scale: .*not "
                       r"C-contiguous \(strides \(32,\)\); pass view.copy\(\)"):
        kiln.launch(scale, dim=8, args=(column, 2.0, 8))
    with pytest.raises(ValueError, match="cannot be written from the host"):
        column.copy_from_host(np.ones(8, np.float32))
    with pytest.raises(BufferError, match="does not export DLPack"):
        column.__dlpack__()
    kiln.launch(scale, dim=8, args=(column.copy(), 2.0, 8))  # a copy is contiguous


@pytest.mark.parametrize(("key", "error", "message"), [
    ((1, 2), TypeError, "gives one element"),
    (np.array([0, 1]), TypeError, "basic indices"),
    (slice(None, None, -1), TypeError, "positive slice steps"),
    (True, TypeError, "basic indices"),
    (None, TypeError, "basic indices"),
    (9, IndexError, "shape \\(8, 8\\)"),
    ((0, 0, 0), IndexError, "too many indices"),
])
def test_bad_view_keys(interp: kiln.Device, key: object, error: type, message: str) -> None:
    d = kiln.zeros((8, 8), kiln.f32, interp)
    with pytest.raises(error, match=message):
        d[key]
