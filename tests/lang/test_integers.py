"""Integer semantics are one answer on every backend: wrapping signed arithmetic in the
C-family dialects, literals typed as docs/language.md says, casts of literals that wrap
like casts of values, and constants beyond 64 bits rejected at their line."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import i32, i64, u32
from tests.helpers import assert_kernel_error, backend_entry

BACKENDS = [name for name in ("interp", "cpu", "opencl", "cuda") if backend_entry(name).available]
INT_MIN, INT_MAX = -(2**31), 2**31 - 1


@kiln.kernel
def edge_cases(a: i32[:], s: u32[:], out: i64[:]):
    i = kiln.global_id(0)
    d = -5 - a[i]                        # overflows for a = INT_MAX
    out[i * 6] = d
    out[i * 6 + 1] = d * 7 + (a[i] << 3)  # everything after an overflow agrees too
    out[i * 6 + 2] = -a[i]                # -INT_MIN wraps to INT_MIN
    out[i * 6 + 3] = (-9) >> (s[i] & 31)  # a negative literal beside u32 stays exact (i64)
    out[i * 6 + 4] = u32(-2) + i32(3000000000) + kiln.u8(300)  # literal casts wrap
    out[i * 6 + 5] = a[i] * a[i] - 1      # i32 product wraps before the subtraction


def expected(a: np.ndarray, s: np.ndarray) -> np.ndarray:
    """The same arithmetic in Python integers, wrapped to i32 after each operation."""
    def w(v: int) -> int:
        return (v + 2**31) % 2**32 - 2**31

    rows = []
    for x, y in zip(a.tolist(), s.tolist()):
        d = w(-5 - x)
        rows += [d, w(w(d * 7) + w(x << 3)), w(-x), -9 >> (y & 31),
                 (2**32 - 2 + (3000000000 - 2**32) % 2**32 + 44) % 2**32, w(w(x * x) - 1)]
    return np.array(rows, np.int64)


@pytest.mark.parametrize("backend", BACKENDS)
def test_signed_overflow_wraps_on_every_backend(backend: str) -> None:
    a = np.array([INT_MAX, INT_MIN, 5, -7, 46341, -1], np.int32)
    s = np.array([1, 3, 40, 0, 31, 2], np.uint32)
    out = np.zeros(6 * a.size, np.int64)
    kiln.launch(edge_cases, 1, a.size, (a, s, out), device=backend)
    np.testing.assert_array_equal(out, expected(a, s))


def test_wrapping_arithmetic_is_unsigned_in_c_and_index_arithmetic_is_not() -> None:
    source = edge_cases.source("opencl")
    assert "(int)((uint)-5 - (uint)a[i])" in source
    # a global id cannot overflow (grid * block fits an i32, checked at launch)
    assert "i = ((int)get_group_id(0)) * ((int)get_local_size(0)) + ((int)get_local_id(0));" \
        in source


def test_launch_beyond_i32_thread_indices_is_a_launch_error(interp: kiln.Device) -> None:
    out = np.zeros(6, np.int64)
    with pytest.raises(kiln.LaunchError, match="threads per axis"):
        kiln.launch(edge_cases, 2**22, 1024, (np.zeros(1, np.int32), np.zeros(1, np.uint32),
                                              out), device=interp)


@kiln.kernel
def literal_types(s: u32, n: kiln.u64, out: kiln.f64[:]):
    a = (-1) + s                 # exact: i64, not u32 (the literal does not fit u32)
    b = n + (-1)                 # u64: no wider type; wraps as u64 arithmetic does
    c = s + 5000000000           # i64
    d = 9223372036854775808 + 0  # u64: past i64
    e = s + 1                    # u32: the literal fits
    out[0] = a + b + c + d + e


def test_literals_adapt_only_when_they_fit() -> None:
    ir = literal_types.ir()
    for name, t in (("a", "i64"), ("b", "u64"), ("c", "i64"), ("d", "u64"), ("e", "u32")):
        assert f"var {name}: {t}" in ir, ir


@kiln.kernel
def folds_past_64_bits(out: i64[:]):
    out[0] = 2147483647 ** 4  # error


@kiln.kernel
def shifts_past_64_bits(out: i64[:]):
    out[0] = 1 << 100000000000  # error


def test_constants_beyond_64_bits_are_errors() -> None:
    assert_kernel_error(folds_past_64_bits, kiln.ConstantError, "does not fit in 64 bits")
    assert_kernel_error(shifts_past_64_bits, kiln.ConstantError, "does not fit in 64 bits")


@kiln.kernel
def cast_of_nan(out: i32[:]):
    out[0] = i32(float("nan"))  # error


def test_literal_casts_wrap_like_casts_of_values() -> None:
    program = edge_cases.ir()
    assert "4294967294" in program and "-1294967296" in program and "44" in program
    with pytest.raises(kiln.KernelError):
        cast_of_nan.ir()
