"""Misusing `print` in kernels: a clear error at the line marked `# error`; the text it
prints reaches printf intact."""

from __future__ import annotations

import pytest

import kiln
from kiln import f32, f32x3
from tests.helpers import assert_kernel_error


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
