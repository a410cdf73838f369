"""Kernels and device functions declared or used wrongly (an array return annotation,
`async def`, a decorator on something else, launching a device function, the source of a
backend that generates none) get a kiln error at the user's line; math functions of a
uniform value work."""

from __future__ import annotations

import math

import numpy as np
import pytest

import kiln
from kiln import f32
from tests.helpers import assert_kernel_error, marked_line


@kiln.kernel
def erf_of_a_uniform_value(out: f32[:], x: f32):
    out[kiln.global_id(0)] = math.erf(x)


def test_math_of_a_uniform_value_on_interp(interp: kiln.Device) -> None:
    out = np.zeros(4, np.float32)
    kiln.launch(erf_of_a_uniform_value, 1, 4, (out, 0.5), device=interp)
    np.testing.assert_allclose(out, math.erf(0.5), rtol=1e-6)


@kiln.func
def returns_an_array(a: f32[:]) -> f32[:]:  # error
    return a[0]


@kiln.kernel
def calls_array_function(a: f32[:]):
    a[1] = returns_an_array(a)


def test_device_function_annotated_to_return_an_array() -> None:
    with pytest.raises(kiln.UnsupportedError, match="not arrays") as info:
        calls_array_function.ir()
    assert info.value.loc.line == marked_line(returns_an_array)


def test_launching_a_device_function_is_a_launch_error(interp: kiln.Device) -> None:
    with pytest.raises(kiln.LaunchError, match="returns_an_array is a @kiln.func"):
        kiln.launch(returns_an_array, 1, 1, (np.zeros(1, np.float32),), device=interp)


def test_source_of_a_backend_without_source() -> None:
    with pytest.raises(kiln.UnsupportedError, match="generates no source"):
        erf_of_a_uniform_value.source("interp")


def test_decorating_something_else_names_the_decorator_and_line() -> None:
    with pytest.raises(kiln.UnsupportedError, match="@kiln.func decorates a function") as info:
        kiln.func(3)  # error
    here = test_decorating_something_else_names_the_decorator_and_line
    assert info.value.loc.line == marked_line(here)


@kiln.kernel
async def asynchronous(a: f32[:]):  # error
    a[0] = 1.0


def test_async_def_is_named_at_its_line() -> None:
    assert_kernel_error(asynchronous, kiln.UnsupportedError, "async def")
