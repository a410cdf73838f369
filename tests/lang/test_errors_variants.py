"""Misusing variants in kernels (their tag, `isinstance`, fields of one case): a clear
error at the line marked `# error`."""

from __future__ import annotations

import pytest

import kiln
from kiln import f32, i32
from tests.helpers import assert_kernel_error


@kiln.struct
class Circle:
    r: f32


@kiln.struct
class Rect:
    w: f32


@kiln.struct
class Other:
    v: f32


Shape = kiln.variant("Shape", Circle, Rect)


@kiln.kernel
def assign_tag(shapes: Shape[:]):
    s = shapes[0]
    s.tag = 1  # error


@kiln.kernel
def tag_of_a_stranger(out: i32[:]):
    out[0] = Shape.tag(Other)  # error


@kiln.kernel
def isinstance_of_a_number(out: i32[:]):
    out[0] = i32(isinstance(out[0], Circle))  # error


@kiln.kernel
def isinstance_of_a_stranger(shapes: Shape[:], out: i32[:]):
    out[0] = i32(isinstance(shapes[0], Other))  # error


@kiln.kernel
def unknown_variant_field(shapes: Shape[:], out: f32[:]):
    out[0] = shapes[0].r  # error


@pytest.mark.parametrize(("kernel", "cls", "fragment"), [
    (assign_tag, kiln.KernelTypeError, "has no fields to assign"),
    (tag_of_a_stranger, kiln.KernelTypeError, "Shape.tag(...) takes a case of Shape (Circle,"),
    (isinstance_of_a_number, kiln.UnsupportedError, "this value is a i32"),
    (isinstance_of_a_stranger, kiln.KernelTypeError, "takes a case of Shape (Circle, Rect)"),
    (unknown_variant_field, kiln.KernelTypeError, "its .tag says which case it holds"),
])
def test_variant_tag_misuse(kernel: kiln.Kernel, cls: type[kiln.KernelError],
                            fragment: str) -> None:
    assert_kernel_error(kernel, cls, fragment)
