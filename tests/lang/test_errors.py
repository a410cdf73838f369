"""Negative tests: unknown names, calls of the wrong arity, type errors and Python constructs
the language does not have get clear errors at the right line, and every error message
shows its location, the source line and a caret, without kiln's internals in the traceback.

Each malformed kernel marks its offending line with a trailing `# error` comment; the test
checks the error class, a fragment of the message, and that the error points at that line
of this file.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import kiln
from kiln import f32, i32
from tests.helpers import (
    assert_kernel_error,
    assert_only_entry_frames,
    compile_error,
    marked_line,
)

HERE = str(Path(__file__).resolve())
N = 64
NOT_A_NUMBER = [1, 2, 3]


@kiln.func
def add1(x: f32) -> f32:
    return x + 1.0


@kiln.func
def half_returns(x: f32):
    if x > 0.0:  # error
        return x


@kiln.func
def bad_body(x: f32):
    return x & 1  # error


@kiln.func
def takes_int(k: i32) -> i32:
    return k * 2


@kiln.kernel
def helper_kernel(a: f32[:]):
    a[0] = 1.0


# ---------------------------------------------------------------- unknown names


@kiln.kernel
def unknown_name(a: f32[:]):
    a[0] = undefined_thing + 1.0  # error  # noqa: F821


@kiln.kernel
def unknown_index_axis(a: f32[:]):
    a[0] = kiln.thread_idx.w  # error


@kiln.kernel
def unknown_kiln_function(a: f32[:]):
    a[0] = kiln.no_such_intrinsic(1.0)  # error


@kiln.kernel
def used_before_assigned(a: f32[:]):
    a[0] = v  # error  # noqa: F821
    v = 1.0
    a[1] = v


# ---------------------------------------------------------------- arity


@kiln.kernel
def intrinsic_arity(a: f32[:]):
    a[0] = kiln.sqrt(1.0, 2.0)  # error


@kiln.kernel
def device_function_arity(a: f32[:]):
    a[0] = add1(a[0], a[1])  # error


@kiln.kernel
def range_arity(a: f32[:]):
    for i in range(0, 4, 1, 2):  # error
        a[i] = 0.0


@kiln.kernel
def cast_arity(a: f32[:]):
    a[0] = f32(1, 2)  # error


@kiln.kernel
def global_id_arity(a: f32[:]):
    a[kiln.global_id()] = 0.0  # error


@kiln.kernel
def barrier_arity(a: f32[:]):
    kiln.barrier(1)  # error


# ---------------------------------------------------------------- types


@kiln.kernel
def float_into_int_param(a: f32[:], n: i32):
    n = a[0]  # error
    a[1] = n


@kiln.kernel
def float_into_annotated_local(a: f32[:]):
    x: i32 = a[0]  # error
    a[1] = x


@kiln.kernel
def float_into_int_array(b: i32[:]):
    b[0] = 1.5  # error


@kiln.kernel
def float_index(a: f32[:]):
    x = a[0]
    a[x] = 1.0  # error


@kiln.kernel
def float_bitwise(a: f32[:]):
    a[0] = a[1] & 1  # error


@kiln.kernel
def array_alias(a: f32[:], b: f32[:]):
    b = a  # error
    b[0] = 1.0


@kiln.kernel
def wrong_index_count(a: f32[:]):
    a[0, 1] = 0.0  # error


@kiln.kernel
def wrong_device_function_argument(a: f32[:], b: i32[:]):
    b[0] = takes_int(a[0])  # error


@kiln.kernel
def array_as_condition(a: f32[:]):
    if a:  # error
        a[0] = 1.0


@kiln.kernel
def len_of_scalar(a: f32[:], n: i32):
    a[0] = len(n)  # error


@kiln.kernel
def float_atomic_and(a: f32[:]):
    kiln.atomic_and(a, 0, 1.0)  # error


@kiln.kernel
def not_a_kiln_type(a: f32[:]):
    x: str = 1  # error
    a[0] = x


@kiln.kernel
def module_list_as_value(a: f32[:]):
    a[0] = NOT_A_NUMBER  # error


@kiln.kernel
def kernel_returns_value(a: f32[:]):
    return a[0]  # error


@kiln.kernel
def missing_return(a: f32[:]):
    a[0] = half_returns(a[1])


@kiln.kernel
def error_in_device_function(a: f32[:]):
    a[0] = bad_body(a[1])


# ---------------------------------------------------------------- unsupported constructs


@kiln.kernel
def nested_def(a: f32[:]):
    def inner(x):  # error
        return x
    a[0] = 0.0


@kiln.kernel
def uses_lambda(a: f32[:]):
    a[0] = (lambda x: x)(1.0)  # error


@kiln.kernel
def uses_try(a: f32[:]):
    try:  # error
        a[0] = 1.0
    except Exception:
        a[0] = 0.0


@kiln.kernel
def uses_with(a: f32[:]):
    with open("x"):  # error
        a[0] = 1.0


@kiln.kernel
def uses_generator(a: f32[:]):
    g = (x for x in range(3))  # error
    a[0] = g


@kiln.kernel
def list_literal(a: f32[:]):
    xs = [1.0, 2.0]  # error
    a[0] = xs


@kiln.kernel
def dict_literal(a: f32[:]):
    d = {"k": 1.0}  # error
    a[0] = d


@kiln.kernel
def string_value(a: f32[:]):
    s = "text"  # error
    a[0] = s


@kiln.kernel
def uses_print(a: f32[:]):
    a[1] = print(a[0])  # error


@kiln.kernel
def prints_five_bools(a: f32[:]):
    x = a[0]
    print(x > 0, x > 1, x > 2, x > 3, x > 4)  # error


@kiln.kernel
def while_else(a: f32[:]):
    i = 0
    while i < 4:  # error: at the `while` (the `else:` line has no location of its own)
        i += 1
    else:
        a[0] = 1.0


@kiln.kernel
def uses_slice(a: f32[:]):
    a[0] = a[1:3]  # error


@kiln.kernel
def uses_match(a: f32[:], n: i32):
    match n:  # error
        case 1:
            a[0] = 1.0


@kiln.kernel
def for_over_array(a: f32[:]):
    for x in a:  # error
        a[0] = x


@kiln.kernel
def calls_kernel(a: f32[:]):
    helper_kernel(a)  # error


@kiln.kernel
def for_else(a: f32[:]):
    for i in range(4):  # error: at the `for`
        a[i] = 0.0
    else:
        a[0] = 1.0


@kiln.kernel
def tuple_assignment_mismatch(a: f32[:]):
    x, y = 1.0, 2.0, 3.0  # error
    a[0] = x + y


@kiln.kernel
def zero_range_step(a: f32[:]):
    for i in range(0, 4, 0):  # error
        a[i] = 0.0


@kiln.kernel
def negative_constant_index(a: f32[:]):
    a[-1] = 0.0  # error


@kiln.kernel
def constant_division_by_zero(a: f32[:]):
    a[0] = 1 // 0  # error


@kiln.kernel
def matmul_operator(a: f32[:]):
    a[0] = a[1] @ a[2]  # error


@kiln.kernel
def array_into_element(a: f32[:], b: f32[:]):
    a[0] = b  # error


@kiln.kernel
def starred_call(a: f32[:]):
    a[0] = max(*a)  # error


@kiln.kernel
def membership(a: f32[:], n: i32):
    if n in a:  # error
        a[0] = 1.0


KERNEL_ERRORS = [
    (unknown_name, kiln.UnknownNameError, "'undefined_thing' is not defined"),
    (unknown_index_axis, kiln.UnknownNameError, ".x, .y and .z"),
    (unknown_kiln_function, kiln.UnknownNameError, "no_such_intrinsic"),
    (used_before_assigned, kiln.UnknownNameError, "'v'"),
    (intrinsic_arity, kiln.ArityError, "sqrt takes 1 argument(s), got 2"),
    (device_function_arity, kiln.ArityError, "add1 takes 1 argument(s), got 2"),
    (range_arity, kiln.ArityError, "range takes 1 to 3 arguments"),
    (cast_arity, kiln.ArityError, "f32 takes 1 argument(s), got 2"),
    (global_id_arity, kiln.ArityError, "global_id(dim) takes 1 argument"),
    (barrier_arity, kiln.ArityError, "barrier takes 0 argument(s), got 1"),
    (float_into_int_param, kiln.KernelTypeError, "f32 value to variable 'n' of type i32"),
    (float_into_annotated_local, kiln.KernelTypeError, "f32 value to variable 'x' of type i32"),
    (float_into_int_array, kiln.KernelTypeError, "an element of 'b'"),
    (float_index, kiln.KernelTypeError, "array indices must be integers, got f32"),
    (float_bitwise, kiln.KernelTypeError, "operator & needs integers"),
    (array_alias, kiln.UnsupportedError, "arrays cannot be aliased"),
    (wrong_index_count, kiln.KernelTypeError, "has 1 dimension(s) but is indexed with 2"),
    (wrong_device_function_argument, kiln.KernelTypeError, "parameter 'k' of takes_int"),
    (array_as_condition, kiln.KernelTypeError, "cannot be used as a condition"),
    (len_of_scalar, kiln.KernelTypeError, "len() needs an array"),
    (float_atomic_and, kiln.KernelTypeError, "atomic_and on f32 arrays is not supported"),
    (not_a_kiln_type, kiln.KernelTypeError, "'str' is not a kiln type"),
    (module_list_as_value, kiln.UnsupportedError, "cannot be used as a value"),
    (kernel_returns_value, kiln.KernelTypeError, "kernels cannot return a value"),
    (nested_def, kiln.UnsupportedError, "nested functions"),
    (uses_lambda, kiln.UnsupportedError, "lambdas"),
    (uses_try, kiln.UnsupportedError, "`try`"),
    (uses_with, kiln.UnsupportedError, "`with`"),
    (uses_generator, kiln.UnsupportedError, "generators"),
    (list_literal, kiln.UnsupportedError, "lists"),
    (dict_literal, kiln.UnsupportedError, "dicts"),
    (string_value, kiln.UnsupportedError, "strings"),
    (uses_print, kiln.UnsupportedError, "print(...) is a statement of its own"),
    (prints_five_bools, kiln.UnsupportedError, "at most 4 bools per call"),
    (while_else, kiln.UnsupportedError, "`while ... else`"),
    (uses_slice, kiln.KernelTypeError, "a[1:3] is a view of 'a', not a value"),
    (uses_match, kiln.KernelTypeError, "match takes a variant"),
    (for_over_array, kiln.UnsupportedError, "range(...)"),
    (calls_kernel, kiln.UnsupportedError, "make it a @kiln.func"),
    (for_else, kiln.UnsupportedError, "`for ... else`"),
    (tuple_assignment_mismatch, kiln.UnsupportedError, "tuple of the same length"),
    (zero_range_step, kiln.KernelError, "step must not be zero"),
    (negative_constant_index, kiln.KernelError, "negative indices do not wrap"),
    (constant_division_by_zero, kiln.KernelError, "division by zero"),
    (matmul_operator, kiln.UnsupportedError, "`@` operator"),
    (array_into_element, kiln.KernelTypeError, "cannot assign a f32[:] value to an element"),
    (starred_call, kiln.UnsupportedError, "*args"),
    (membership, kiln.UnsupportedError, "`in`"),
]


@pytest.mark.parametrize(("kernel", "cls", "fragment"), KERNEL_ERRORS,
                         ids=[k.name for k, _, _ in KERNEL_ERRORS])
def test_kernel_error(kernel: kiln.Kernel, cls: type, fragment: str) -> None:
    assert_kernel_error(kernel, cls, fragment)


@pytest.mark.parametrize(("kernel", "func", "cls", "fragment"), [
    (missing_return, half_returns, kiln.KernelTypeError, "without returning a value"),
    (error_in_device_function, bad_body, kiln.KernelTypeError, "operator & needs integers"),
])
def test_error_in_device_function_points_into_it(kernel, func, cls, fragment) -> None:
    exc = compile_error(kernel)
    assert type(exc) is cls and fragment in exc.message
    assert (exc.loc.file, exc.loc.line) == (HERE, marked_line(func))


def test_message_shows_location_source_line_and_caret() -> None:
    exc = compile_error(float_into_annotated_local)
    line = marked_line(float_into_annotated_local)
    first, source, caret = str(exc).splitlines()
    assert first.startswith(f"{HERE}:{line}:")
    assert "type error" in first
    assert source.strip() == "x: i32 = a[0]  # error"
    assert caret.strip() == "^^^^"
    assert source.index("a[0]") == caret.index("^")


def test_kernel_error_traceback_has_no_kiln_internals() -> None:
    exc = compile_error(float_bitwise)
    assert_only_entry_frames(exc, 1)
    assert exc.__cause__ is None and exc.__suppress_context__


def test_kernel_error_at_launch_has_no_kiln_internals(interp) -> None:
    with pytest.raises(kiln.KernelTypeError) as info:
        float_bitwise[1, 32](np.zeros(N, np.float32))
    assert info.value.line == marked_line(float_bitwise)
    assert_only_entry_frames(info.value, 2)
