"""Out-of-bounds reads in kernels with `debug=True` (and on interp without it) raise an
IndexOutOfBoundsError naming the kernel, the array, the index, the thread and the line;
guarded accesses are not reported."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import f32, i32
from tests.helpers import backend_entry, marked_line

BACKENDS = [name for name in ("interp", "cpu", "opencl", "cuda") if backend_entry(name).available]


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
