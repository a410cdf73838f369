"""Misusing NumPy spellings and vector indexing in kernels: a clear error at the line marked
`# error`."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import f32, f32x3, i32
from tests.helpers import assert_kernel_error, marked_line


@kiln.kernel
def runtime_component(vs: f32x3[:], out: f32[:], k: i32):
    v = vs[0]
    out[0] = v[k]  # error


@kiln.kernel
def component_out_of_range(vs: f32x3[:], out: f32[:]):
    v = vs[0]
    out[0] = v[3]  # error


@kiln.kernel
def component_slice(vs: f32x3[:], out: f32[:]):
    v = vs[0]
    out[0] = v[0:2]  # error


@kiln.kernel
def ufunc_with_out(a: f32[:]):
    a[0] = np.minimum(a[0], a[1], a[2])  # error


@kiln.kernel
def ufunc_with_keyword(a: f32[:]):
    a[0] = np.exp(a[0], dtype=np.float64)  # error


@kiln.kernel
def unsupported_ufunc(a: f32[:]):
    a[0] = np.hypot(a[0], a[1])  # error


@pytest.mark.parametrize(("kernel", "cls", "fragment"), [
    (runtime_component, kiln.ConstantError, "indexed with a constant in -3..2 (or .x, .y, .z)"),
    (component_out_of_range, kiln.ConstantError, "indexed with a constant in -3..2"),
    (component_slice, kiln.UnsupportedError, "with one constant, not a slice"),
    (ufunc_with_out, kiln.ArityError, "np.minimum takes 2 argument(s) in kernels (no out="),
    (ufunc_with_keyword, kiln.ArityError, "np.exp takes 1 argument(s)"),
    (unsupported_ufunc, kiln.UnsupportedError, "calling ufunc hypot is not supported"),
])
def test_misuse_is_reported_at_its_line(kernel: kiln.Kernel, cls: type[kiln.KernelError],
                                        fragment: str) -> None:
    assert_kernel_error(kernel, cls, fragment)


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


@kiln.kernel
def print_a_vector(vs: f32x3[:]):
    print(vs[0])  # error


@kiln.kernel
def print_to_a_file(a: f32[:]):
    print(a[0], file=None)  # error


@kiln.kernel
def print_with_a_flag(a: f32[:]):
    print(a[0], flush=True)  # error


@kiln.kernel
def print_as_a_value(a: f32[:]):
    a[0] = print(a[1])  # error


@kiln.kernel
def print_an_array(a: f32[:]):
    print(a)  # error


@pytest.mark.parametrize(("kernel", "cls", "fragment"), [
    (print_a_vector, kiln.KernelTypeError, "takes scalars and strings, not a f32x3"),
    (print_to_a_file, kiln.UnsupportedError, "takes sep= and end= (constant strings)"),
    (print_with_a_flag, kiln.UnsupportedError, "no other keywords"),
    (print_as_a_value, kiln.UnsupportedError, "print(...) is a statement of its own"),
    (print_an_array, kiln.KernelTypeError, "not a f32[:]"),
])
def test_print_misuse(kernel: kiln.Kernel, cls: type[kiln.KernelError], fragment: str) -> None:
    assert_kernel_error(kernel, cls, fragment)


def test_print_text_is_escaped_for_c() -> None:
    """Quotes, backslashes, percent signs, braces and non-ASCII text reach printf intact."""
    from kiln.lang.printing import printf

    code = printf([("text", 'a "b" \\ 50% {x} é\n'), ("int", "p0")], "c")
    assert code.startswith('printf("a \\042b\\042 \\134 50%% \\173x\\175 '
                           '\\303\\251\\012%d", {p0});')
    assert code.endswith("fflush(stdout);")
    assert "%ld" in printf([("long", "p0")], "opencl")
    assert "%lld" in printf([("long", "p0")], "cuda")


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
