"""Definite assignment: a local read on a path that does not assign it is an error at the
read; locals assigned on every path compile and run on every backend."""

from __future__ import annotations

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
