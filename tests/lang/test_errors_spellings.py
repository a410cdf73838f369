"""Misusing NumPy spellings (ufuncs) and vector components in kernels: a clear error at the
line marked `# error`."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import f32, f32x3, i32
from tests.helpers import assert_kernel_error


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
