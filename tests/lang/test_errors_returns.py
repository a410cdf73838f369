"""Bad returns of device functions (an array, two kinds of value, nested tuples, a
recursive function returning a vector) and bad tuple unpacking: a clear error at the
`return` or the line marked `# error`."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import f32, f32x3, i32
from tests.helpers import marked_line


@kiln.func
def returns_an_array(a: f32[:]):
    return a  # error


@kiln.func
def returns_two_kinds(x: f32):
    if x > 0.0:
        return f32x3(x)
    return x, x  # error


@kiln.func
def pair(x: f32):
    return x, x


@kiln.func
def returns_a_nested_tuple(x: f32):
    return x, pair(x)  # error


@kiln.func
def countdown(v: f32x3, n: i32) -> f32x3:
    if n == 0:
        return v
    return countdown(v * 0.5, n - 1) + v  # error


@kiln.kernel
def call_returns_an_array(a: f32[:]):
    returns_an_array(a)


@kiln.kernel
def call_returns_two_kinds(a: f32[:]):
    a[0] = returns_two_kinds(a[1]).x


@kiln.kernel
def call_returns_a_nested_tuple(a: f32[:]):
    x, y = returns_a_nested_tuple(a[1])


@kiln.kernel
def unpack_three(a: f32[:]):
    x, y, z = pair(a[0])  # error


@kiln.kernel
def unpack_a_scalar(a: f32[:]):
    x, y = a[0]  # error


@kiln.kernel
def call_countdown(vs: f32x3[:]):
    vs[0] = countdown(vs[1], 3)


@pytest.mark.parametrize(("kernel", "function", "cls", "fragment"), [
    (call_returns_an_array, returns_an_array, kiln.KernelTypeError,
     "returns_an_array returns a f32[:]: device functions return scalars, vectors"),
    (call_returns_two_kinds, returns_two_kinds, kiln.KernelTypeError,
     "returns a tuple[f32, f32] here but f32x3 elsewhere"),
    (call_returns_a_nested_tuple, returns_a_nested_tuple, kiln.KernelTypeError,
     "not a tuple[f32, f32]"),
    (unpack_three, unpack_three, kiln.KernelTypeError,
     "cannot unpack a tuple[f32, f32] into 3 names"),
    (unpack_a_scalar, unpack_a_scalar, kiln.UnsupportedError,
     "or a call of a device function returning one"),
])
def test_bad_returns_are_reported_at_the_return(kernel: kiln.Kernel, function: object,
                                                cls: type[kiln.KernelError],
                                                fragment: str) -> None:
    with pytest.raises(kiln.KernelError) as info:
        kernel.ir()
    exc = info.value
    assert type(exc) is cls and fragment in exc.message, exc.message
    assert exc.loc is not None and exc.loc.line == marked_line(function)


def test_a_recursive_function_returning_a_vector_is_refused(interp: kiln.Device) -> None:
    with pytest.raises(kiln.UnsupportedError, match="countdown` is recursive, and device "
                       "functions returning vectors, records or tuples are inlined") as info:
        kiln.launch(call_countdown, 1, 1, (np.zeros((2, 3), np.float32),), device=interp)
    assert info.value.loc is not None and info.value.loc.line == marked_line(countdown)
