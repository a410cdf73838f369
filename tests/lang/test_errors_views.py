"""Misusing views in kernels: a clear error at the line marked `# error`."""
# ruff: noqa: F841 - kernels here bind names only to show the error

from __future__ import annotations

import pytest

import kiln
from kiln import f32, i32
from tests.helpers import assert_kernel_error


@kiln.func
def first_of_matrix(a: f32[:, :]) -> f32:
    return a[0, 0]


@kiln.kernel
def view_as_value(m: f32[:, :], out: f32[:]):
    row = m[0]
    out[0] = row  # error


@kiln.kernel
def view_of_wrong_rank(m: f32[:, :], out: f32[:]):
    out[0] = first_of_matrix(m[0])  # error


@kiln.kernel
def view_aliased(m: f32[:, :]):
    row = m[0]
    other = row  # error


@kiln.kernel
def view_with_step(a: f32[:]):
    evens = a[0:8:2]  # error


@kiln.kernel
def view_indexed_too_much(m: f32[:, :]):
    row = m[0]
    row[0, 1] = 1.0  # error


@kiln.kernel
def view_rebound_differently(m: f32[:, :], a: f32[:]):
    v = m[0]
    v = a[1:3]  # error


@kiln.kernel
def view_of_a_number(x: f32, out: f32[:]):
    out[0] = x[1:2][0]  # error


@kiln.kernel
def view_shape_out_of_range(m: f32[:, :], out: i32[:]):
    row = m[0]
    out[0] = row.shape[1]  # error


@kiln.kernel
def view_into_tuple(m: f32[:, :]):
    a, b = m[0], m[1]  # error


@pytest.mark.parametrize(("kernel", "cls", "fragment"), [
    (view_as_value, kiln.KernelTypeError, "'row' is a view of 'm': index it (row[j])"),
    (view_of_wrong_rank, kiln.KernelTypeError,
     "argument 'a' of first_of_matrix expects f32[:, :], got a view of 1 axis(es) of f32"),
    (view_aliased, kiln.KernelTypeError, "a view is not a value"),
    (view_with_step, kiln.UnsupportedError, "views take slices without a step"),
    (view_indexed_too_much, kiln.KernelTypeError, "a view with 1 axis(es) is indexed with 2"),
    (view_rebound_differently, kiln.KernelTypeError, "'v' is a view of 'm' with 1 axis(es)"),
    (view_of_a_number, kiln.KernelTypeError, "cannot index a f32"),
    (view_shape_out_of_range, kiln.ConstantError, "shape index must be a constant in 0..0"),
    (view_into_tuple, kiln.KernelTypeError, "m[0] is a view of 'm', not a value: bind it"),
])
def test_view_misuse(kernel: kiln.Kernel, cls: type[kiln.KernelError], fragment: str) -> None:
    assert_kernel_error(kernel, cls, fragment)
