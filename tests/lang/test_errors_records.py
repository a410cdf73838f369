"""Negative tests for records, variants and vectors: misuse in kernels gets a clear error at
the line marked `# error`; bad host values get a LaunchError naming the argument."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import f32, f32x2, f32x3, f32x4, i32, i32x4
from tests.helpers import assert_kernel_error, backend_entry, marked_line

BACKENDS = [name for name in ("interp", "cpu", "opencl", "cuda") if backend_entry(name).available]


@kiln.struct
class Point:
    x: f32
    y: f32


@kiln.struct
class Circle:
    r: f32


@kiln.struct
class Square:
    side: f32


Shape = kiln.variant("Shape", Circle, Square)


@kiln.kernel
def unknown_field(ps: Point[:]):
    ps[0].z = 1.0  # error


@kiln.kernel
def too_many_fields(out: f32[:]):
    p = Point(1.0, 2.0, 3.0)  # error
    out[0] = p.x


@kiln.kernel
def missing_field(out: f32[:]):
    p = Point(1.0)  # error
    out[0] = p.x


@kiln.kernel
def field_twice(out: f32[:]):
    p = Point(1.0, x=2.0)  # error
    out[0] = p.x


@kiln.kernel
def wrong_field_type(out: f32[:], v: f32x3):
    p = Point(v, 1.0)  # error
    out[0] = p.x


@kiln.kernel
def record_reassigned_other_type(out: f32[:]):
    s = Circle(1.0)
    s = Square(2.0)  # error
    out[0] = s.side


@kiln.kernel
def record_arithmetic(ps: Point[:]):
    p = ps[0] + ps[1]  # error
    ps[2] = p


@kiln.kernel
def variant_field(shapes: Shape[:], out: f32[:]):
    out[0] = shapes[0].r  # error


@kiln.kernel
def match_misses_case(shapes: Shape[:], out: f32[:]):
    match shapes[0]:  # error
        case Circle(r=r):
            out[0] = r


@kiln.kernel
def match_not_a_case(shapes: Shape[:], out: f32[:]):
    match shapes[0]:
        case Point(x=x):  # error
            out[0] = x
        case _:
            pass


@kiln.kernel
def match_unknown_field(shapes: Shape[:], out: f32[:]):
    match shapes[0]:
        case Circle(radius=r):  # error
            out[0] = r
        case _:
            pass


@kiln.kernel
def match_case_twice(shapes: Shape[:], out: f32[:]):
    match shapes[0]:
        case Circle(r=r):
            out[0] = r
        case Circle(r=r):  # error
            out[0] = r
        case _:
            pass


@kiln.kernel
def match_nested_pattern(shapes: Shape[:], out: f32[:]):
    match shapes[0]:
        case Circle(r=1.0):  # error
            out[0] = 1.0
        case _:
            pass


@kiln.kernel
def match_guard(shapes: Shape[:], out: f32[:]):
    match shapes[0]:
        case Circle(r=r) if r > 1.0:  # error
            out[0] = r
        case _:
            pass


@kiln.kernel
def match_on_number(out: f32[:], n: i32):
    match n:  # error
        case 1:
            out[0] = 1.0


@kiln.kernel
def vector_bad_component(vs: f32x2[:], out: f32[:]):
    out[0] = vs[0].z  # error


@kiln.kernel
def vector_length_mismatch(a: f32x3[:], b: f32x4[:]):
    b[0] = a[0] + b[0]  # error


@kiln.kernel
def vector_as_condition(a: f32x3[:], out: f32[:]):
    if a[0] > a[1]:  # error
        out[0] = 1.0


@kiln.kernel
def vector_narrowing(a: f32x4[:], b: i32x4[:]):
    b[0] = a[0]  # error


@kiln.kernel
def vector_wrong_arity(out: f32x3[:]):
    out[0] = f32x3(1.0, 2.0)  # error


@kiln.kernel
def cross_of_four(a: f32x4[:], out: f32x4[:]):
    out[0] = kiln.cross(a[0], a[1])  # error


@kiln.kernel
def length_of_integers(a: i32x4[:], out: f32[:]):
    out[0] = kiln.length(a[0])  # error


@kiln.kernel
def vector_bitwise_float(a: f32x4[:]):
    a[0] = a[0] & a[1]  # error


@kiln.kernel
def all_of_number(out: f32[:]):
    if all(out[0]):  # error
        out[0] = 1.0


@kiln.kernel
def field_of_number(out: f32[:]):
    out[0].x = 1.0  # error


@kiln.kernel
def assign_field_of_temporary(out: f32[:]):
    Point(1.0, 2.0).x = 3.0  # error
    out[0] = 1.0


@kiln.kernel
def atomic_on_records(ps: Point[:]):
    kiln.atomic_add(ps, 0, 1.0)  # error


@kiln.func
def make_point(x: f32):
    return Point(x, x + 1.0)


@kiln.kernel
def returns_record(out: f32[:]):
    out[0] = make_point(1.0).x


@kiln.kernel
def vector_name_as_loop_variable(out: f32[:]):
    v = f32x2(1.0, 2.0)
    out[0] = v.x
    for v in range(3):  # error
        out[v] = 1.0


@kiln.func
def vector_then_number(x: f32):
    if x > 0.0:
        return f32x2(x, x)
    return 1.0  # error


@kiln.kernel
def returns_vector_then_number(out: f32[:]):
    out[0] = vector_then_number(out[0]).x


KERNEL_ERRORS = [
    (unknown_field, kiln.UnknownNameError, "Point has no field 'z' (fields: x, y)"),
    (too_many_fields, kiln.ArityError, "Point has 2 field(s)"),
    (missing_field, kiln.ArityError, "missing field 'y' of Point"),
    (field_twice, kiln.ArityError, "field 'x' of Point is given twice"),
    (wrong_field_type, kiln.KernelTypeError, "cannot assign a f32x3 value to field 'x'"),
    (record_reassigned_other_type, kiln.KernelTypeError, "needs its annotation"),
    (record_arithmetic, kiln.KernelTypeError, "operator + needs numbers, got Point"),
    (variant_field, kiln.KernelTypeError, "taken apart with match"),
    (match_misses_case, kiln.KernelTypeError, "misses case(s) Square"),
    (match_not_a_case, kiln.KernelTypeError, "Point is not a case of Shape"),
    (match_unknown_field, kiln.UnknownNameError, "Circle has no field 'radius'"),
    (match_case_twice, kiln.KernelError, "matched twice"),
    (match_nested_pattern, kiln.UnsupportedError, "bind names"),
    (match_guard, kiln.UnsupportedError, "guards"),
    (match_on_number, kiln.KernelTypeError, "match takes a variant"),
    (vector_bad_component, kiln.UnknownNameError, "a f32x2 has components .x, .y"),
    (vector_length_mismatch, kiln.KernelTypeError, "vectors of different lengths"),
    (vector_as_condition, kiln.KernelTypeError, "all(...) or any(...)"),
    (vector_narrowing, kiln.KernelTypeError, "convert explicitly with i32x4(...)"),
    (vector_wrong_arity, kiln.ArityError, "f32x3 takes 3 components or 1 value"),
    (cross_of_four, kiln.KernelTypeError, "cross takes two 3-component vectors"),
    (length_of_integers, kiln.KernelTypeError, "length needs a float vector"),
    (vector_bitwise_float, kiln.KernelTypeError, "operator & needs integers"),
    (all_of_number, kiln.KernelTypeError, "all() takes a vector comparison"),
    (field_of_number, kiln.KernelTypeError, "a f32 has no fields"),
    (assign_field_of_temporary, kiln.UnsupportedError, "fields of variables and array"),
    (atomic_on_records, kiln.KernelTypeError, "atomic_add on Point arrays"),
    (vector_name_as_loop_variable, kiln.KernelTypeError,
     "'v' is a f32x2 variable, cannot loop over i32 values"),
]


@pytest.mark.parametrize(("kernel", "cls", "fragment"), KERNEL_ERRORS,
                         ids=[k.name for k, _, _ in KERNEL_ERRORS])
def test_kernel_error(kernel: kiln.Kernel, cls: type, fragment: str) -> None:
    assert_kernel_error(kernel, cls, fragment)


def test_a_device_function_returning_a_vector_then_a_number() -> None:
    with pytest.raises(kiln.KernelTypeError, match="here but f32x2 elsewhere") as info:
        returns_vector_then_number.ir()
    assert info.value.line == marked_line(vector_then_number)


def test_device_functions_return_records(interp: kiln.Device) -> None:
    """Once an error ("device functions return scalars"); tests/lang/test_errors_returns.py
    has the returns that are still errors."""
    out = np.zeros(1, np.float32)
    kiln.launch(returns_record, 1, 1, (out,), device=interp)
    assert out[0] == 1.0


# ---------------------------------------------------------------- host side


def test_struct_fields_must_be_kiln_types() -> None:
    with pytest.raises(TypeError, match="field 'xs' of struct Bad"):
        @kiln.struct
        class Bad:
            xs: f32[:]


def test_variant_cases_must_be_structs() -> None:
    with pytest.raises(TypeError, match="must be @kiln.struct classes"):
        kiln.variant("Bad", Circle, int)
    with pytest.raises(TypeError, match="distinct names"):
        kiln.variant("Twice", Circle, Circle)


@kiln.kernel
def takes_records(ps: Point[:], p: Point, s: Shape, v: f32x3, vs: f32x4[:]):
    ps[0] = p


@pytest.mark.parametrize(("index", "value", "fragment"), [
    (0, np.zeros(4, np.float32), "expected Point[:] (a 1-d array of dtype Point.dtype), got a "
                                 "float32 array of shape (4,)"),
    (1, (1.0,), "a Point is a Point instance or a tuple of its 2 field(s) (x, y)"),
    (1, Circle(1.0), "a Point is a Point instance"),
    (2, Point(1.0, 2.0), "a Shape is an instance of one of its cases (Circle, Square)"),
    (3, (1.0, 2.0), "a f32x3 is a sequence of 3 numbers"),
    (4, np.zeros((4, 3), np.float32), "(a float32 array of shape (n, 4)), got a float32 "
                                      "array of shape (4, 3)"),
])
def test_bad_arguments(interp: kiln.Device, index: int, value: object, fragment: str) -> None:
    args: list[object] = [np.zeros(4, Point.dtype), Point(1.0, 2.0), Circle(1.0),
                          (1.0, 2.0, 3.0), np.zeros((4, 4), np.float32)]
    args[index] = value
    name = takes_records.signature[index][0]
    with pytest.raises(kiln.LaunchError) as info:
        kiln.launch(takes_records, 1, 1, args, device=interp)
    assert f"argument '{name}'" in str(info.value)
    assert fragment in str(info.value), str(info.value)


def test_a_record_of_another_dtype_is_refused(interp: kiln.Device) -> None:
    other = np.zeros(4, np.dtype([("x", np.float32), ("y", np.float64)]))
    args = [other, Point(1.0, 2.0), Circle(1.0), (1.0, 2.0, 3.0), np.zeros((4, 4), np.float32)]
    with pytest.raises(kiln.LaunchError, match="dtype Point.dtype"):
        kiln.launch(takes_records, 1, 1, args, device=interp)


# ---------------------------------------------------------------- nested fields

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
