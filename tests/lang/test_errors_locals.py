"""Each raw exception found by the reliability review (issue 13) is now a kiln error at the
user's line, or works; and a local read on a path that does not assign it is an error."""

from __future__ import annotations

import math

import numpy as np
import pytest

import kiln
from kiln import f32, i32
from tests.helpers import assert_kernel_error, backend_entry, marked_line

BACKENDS = [name for name in ("interp", "cpu", "opencl", "cuda") if backend_entry(name).available]


# ---------------------------------------------------------------- definite assignment

@kiln.kernel
def partially_assigned(a: f32[:], b: f32[:]):
    i = kiln.global_id(0)
    if i < 2:
        v = b[i] + 1.0  # assigned
    a[i] = v  # error


@kiln.kernel
def loop_variable_after_the_loop(a: f32[:], n: i32):
    for j in range(n):  # assigned
        a[j] = 1.0
    a[0] = f32(j)  # error


@kiln.kernel
def assigned_in_a_loop_body(a: f32[:], n: i32):
    k = 0
    while k < n:
        last = a[k]  # assigned
        k += 1
    a[0] = last  # error


@pytest.mark.parametrize("kernel", [partially_assigned, loop_variable_after_the_loop,
                                    assigned_in_a_loop_body])
def test_reading_a_local_not_assigned_on_every_path_is_an_error(kernel: kiln.Kernel) -> None:
    assert_kernel_error(kernel, kiln.UnknownNameError, "may be read before it is assigned")
    with pytest.raises(kiln.KernelError) as info:
        kernel.ir()
    assert f"line {marked_line(kernel, '# assigned')}" in info.value.message
    assert "^" in str(info.value)  # the read, with a caret


@kiln.kernel
def assigned_on_every_path(a: f32[:], b: f32[:], n: i32):
    i = kiln.global_id(0)
    if i < 2:
        v = b[i]
    elif i < 4:
        v = 2.0
    else:
        return
    while True:
        w = v * 2.0
        break
    for j in range(n):
        t = f32(j)
        a[j] = t
    a[i] = w


@pytest.mark.parametrize("backend", BACKENDS)
def test_locals_assigned_on_every_path_compile(backend: str) -> None:
    a, b = np.zeros(8, np.float32), np.arange(8, dtype=np.float32)
    kiln.launch(assigned_on_every_path, 1, 8, (a, b, 0), device=backend)
    np.testing.assert_array_equal(a, [0, 2, 4, 4, 0, 0, 0, 0])


# ---------------------------------------------------------------- raw exceptions

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


@kiln.struct
class Vec2:
    x: f32
    y: f32


@kiln.struct
class Particle:
    pos: Vec2
    vel: Vec2


@kiln.kernel
def nested_field_read(ps: Particle[:], out: f32[:]):
    i = kiln.global_id(0)
    out[i] = ps[i].vel.y + ps[i].pos.x


@pytest.mark.parametrize("backend", BACKENDS)
def test_reading_a_nested_field_through_an_element(backend: str) -> None:
    ps = np.zeros(4, Particle.dtype)
    ps["vel"]["y"] = [1, 2, 3, 4]
    ps["pos"]["x"] = 10
    out = np.zeros(4, np.float32)
    kiln.launch(nested_field_read, 1, 4, (ps, out), device=backend)
    np.testing.assert_array_equal(out, [11, 12, 13, 14])


@kiln.kernel
async def asynchronous(a: f32[:]):  # error
    a[0] = 1.0


def test_async_def_is_named_at_its_line() -> None:
    assert_kernel_error(asynchronous, kiln.UnsupportedError, "async def")


# ---------------------------------------------------------------- bounds

@kiln.kernel(debug=True)
def one_past_the_end(a: f32[:], b: f32[:], n: i32):
    i = kiln.global_id(0)
    if i < n:
        b[i] = a[i + 1] * 2.0  # error


@kiln.kernel(debug=True)
def column_out_of_range(m: f32[:, :], out: f32[:]):
    i = kiln.global_id(0)
    kiln.atomic_add(out, 0, m[i, i])  # error


@kiln.kernel(debug=True)
def guarded(a: f32[:], b: f32[:], n: i32):
    i = kiln.global_id(0)
    b[i] = a[i] if i < n else 0.0
    if i < n and a[i] > 0.0:
        b[i] += 1.0


@pytest.mark.parametrize("backend", BACKENDS)
def test_out_of_bounds_reads_name_kernel_array_index_thread_and_line(backend: str) -> None:
    a, b = np.arange(10, dtype=np.float32), np.zeros(10, np.float32)
    with pytest.raises(kiln.IndexOutOfBoundsError) as info:
        kiln.launch(one_past_the_end, 1, 16, (a, b, 10), device=backend)
        kiln.device(backend).synchronize()
    assert info.value.message == ("kernel `one_past_the_end`: thread (9, 0, 0) of block "
                                  "(0, 0, 0) read `a[10]`, outside its 10 elements")
    assert info.value.loc.line == marked_line(one_past_the_end)
    with pytest.raises(IndexError, match=r"`m\[:, 4\]`, outside its shape \(axis 1 has 4"):
        kiln.launch(column_out_of_range, 1, 8, (np.zeros((8, 4), np.float32),
                                                np.zeros(1, np.float32)), device=backend)
        kiln.device(backend).synchronize()


@pytest.mark.parametrize("backend", BACKENDS)
def test_guarded_accesses_are_not_reported(backend: str) -> None:
    a, b = np.arange(10, dtype=np.float32) - 1, np.zeros(16, np.float32)
    kiln.launch(guarded, 1, 16, (a, b, 10), device=backend)
    kiln.device(backend).synchronize()
    expected = np.zeros(16, np.float32)
    expected[:10] = a + (a > 0)
    np.testing.assert_array_equal(b, expected)


def test_interp_checks_without_debug(interp: kiln.Device) -> None:
    plain = kiln.kernel(one_past_the_end.pyfunc)
    with pytest.raises(kiln.IndexOutOfBoundsError, match="read `a\\[10\\]`"):
        kiln.launch(plain, 1, 16, (np.zeros(10, np.float32), np.zeros(10, np.float32), 10),
                    device=interp)
