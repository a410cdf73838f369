"""Bad launches: wrong arguments, grids and blocks, arrays of another device and unknown
devices get a LaunchError (or DeviceNotFoundError) naming what is wrong, without kiln's
internals in the traceback."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import f32, i32
from tests.helpers import assert_only_entry_frames

N = 64


@kiln.kernel
def scale(a: f32[:], out: f32[:], factor: f32, n: i32):
    i = kiln.global_id(0)
    if i < n:
        out[i] = a[i] * factor


@kiln.kernel
def fill2d(m: f32[:, :]):
    m[kiln.global_id(1), kiln.global_id(0)] = 1.0


def args(**changes):
    values = {"a": np.ones(N, np.float32), "out": np.zeros(N, np.float32), "factor": 2.0,
              "n": N}
    values.update(changes)
    return tuple(values.values())


@pytest.mark.parametrize(("launch_args", "grid", "block", "fragments"), [
    (args()[:3], 1, 64, ["scale takes 4 argument(s)", "got 3"]),
    (args() + (1,), 1, 64, ["scale takes 4 argument(s)", "got 5"]),
    (args(a=np.ones(N, np.float64)), 1, 64, ["'a'", "f32[:]", "float64"]),
    (args(a=np.ones((8, 8), np.float32)), 1, 64, ["'a'", "1-d", "(8, 8)"]),
    (args(n=2**40), 1, 64, ["'n'", "does not fit i32"]),
    (args(n=1.5), 1, 64, ["'n'", "expected an integer i32", "float 1.5"]),
    (args(factor=np.ones(3, np.float32)), 1, 64, ["'factor'", "expected a scalar f32"]),
    (args(out=3.0), 1, 64, ["'out'", "expected an array f32[:]"]),
    (args(a="text"), 1, 64, ["'a'", "str 'text'"]),
    (args(), 1, 4096, ["block dimension x is 4096", "limit of 1024"]),
    (args(), 1, (32, 32, 2), ["32x32x2 = 2048 threads", "threads per block"]),
    (args(), 0, 64, ["grid dimension x must be at least 1, got 0"]),
    (args(), (1, 1, 1, 1), 64, ["grid must be an int or a tuple of 1 to 3 ints"]),
    (args(), 1, 64.0, ["block must be an int or a tuple of 1 to 3 ints"]),
], ids=["too-few", "too-many", "dtype", "ndim", "range", "float-for-int", "array-for-scalar",
        "scalar-for-array", "string", "block-dim-too-large", "block-too-large", "zero-grid",
        "4-d-grid", "float-block"])
def test_launch_error(interp, launch_args, grid, block, fragments) -> None:
    with pytest.raises(kiln.LaunchError) as info:
        kiln.launch(scale, grid, block, launch_args, device=interp)
    for fragment in fragments:
        assert fragment in str(info.value)


def test_launch_error_for_2d_array_of_wrong_ndim(interp) -> None:
    with pytest.raises(kiln.LaunchError, match=r"'m'.*2-d"):
        fill2d[(1, 1), (8, 8)](np.zeros(8, np.float32))


def test_launch_error_traceback_has_no_kiln_internals(interp) -> None:
    with pytest.raises(kiln.LaunchError) as info:
        scale[1, 64](*args(n=2**40))
    assert_only_entry_frames(info.value, 2)
    with pytest.raises(kiln.LaunchError) as info:
        kiln.launch(scale, 1, 64, args(n=2**40))
    assert_only_entry_frames(info.value, 1)


def test_array_on_another_device(interp, other_device) -> None:
    a = kiln.to_device(np.ones(N, np.float32), other_device)
    with pytest.raises(kiln.LaunchError, match=f"'a'.*{other_device.name}.*{interp.name}"):
        kiln.launch(scale, 1, 64, args(a=a), device=interp)


@pytest.mark.parametrize("spec", ["nonexistent", "interp:7", "interp:x"])
def test_unknown_device(spec: str) -> None:
    with pytest.raises(kiln.DeviceNotFoundError):
        kiln.device(spec)
