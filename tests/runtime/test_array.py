"""Device arrays: copies to the device and back, constructors, and what they may hold."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import kiln
from kiln import f32, i32


def test_to_device_and_back(interp) -> None:
    host = np.arange(12, dtype=np.float32).reshape(3, 4)
    arr = kiln.to_device(host, interp)
    assert (arr.shape, arr.dtype, arr.device, arr.ndim, len(arr)) == (
        (3, 4), np.float32, interp, 2, 3)
    assert arr.size == 12 and arr.nbytes == 48
    np.testing.assert_array_equal(arr.numpy(), host)


def test_to_device_copies_non_contiguous_input(interp) -> None:
    host = np.arange(20, dtype=np.int32)[::2]
    np.testing.assert_array_equal(kiln.to_device(host, interp).numpy(), host)


@pytest.mark.parametrize("dtype", [f32, np.float64, "int32", i32, np.uint8, kiln.bool_])
def test_constructors(interp, dtype: Any) -> None:
    expected = dtype.dtype if isinstance(dtype, kiln.ScalarType) else np.dtype(dtype)
    zeros = kiln.zeros((2, 5), dtype, interp)
    full = kiln.full(7, 1, dtype, interp)
    empty = kiln.empty(3, dtype, interp)
    like = kiln.empty_like(zeros)
    for arr, shape in ((zeros, (2, 5)), (full, (7,)), (empty, (3,)), (like, (2, 5))):
        assert arr.shape == shape and arr.dtype == expected and arr.device is interp
    np.testing.assert_array_equal(zeros.numpy(), np.zeros((2, 5), expected))
    np.testing.assert_array_equal(full.numpy(), np.ones(7, expected))


def test_empty_like_numpy_array_on_a_device(interp) -> None:
    like = kiln.empty_like(np.zeros((4, 2), np.float64), interp)
    assert (like.shape, like.dtype, like.device) == ((4, 2), np.float64, interp)


def test_arrays_hold_numbers_only(interp) -> None:
    with pytest.raises(TypeError, match="numbers and bools"):
        kiln.to_device(np.array(["a", "b"]), interp)
