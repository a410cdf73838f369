"""Module-level NumPy arrays as constant tables: misuse is an error at its line, the table
is frozen when the kernel is built, and its content is part of the kernel key."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import assert_kernel_error

import kiln
from kiln import f32, i32
from kiln.execution.kernelcache import kernel_key

TABLE = np.array([1.0, 2.0, 3.0], np.float32)
FLAGS = np.array([True, False])
CUBE = np.zeros((2, 2, 2, 2), np.float32)
HUGE = np.zeros(10_000, np.float64)
EMPTY = np.zeros(0, np.float32)


@kiln.func
def takes_table(t: f32[:]) -> f32:
    return t[0]


@kiln.kernel
def writes_table(i: i32):
    TABLE[i] = 1.0  # error


@kiln.kernel
def updates_table(i: i32):
    TABLE[i] += 1.0  # error


@kiln.kernel
def atomic_on_table(i: i32):
    kiln.atomic_add(TABLE, i, 1.0)  # error


@kiln.kernel
def passes_table(out: f32[:]):
    out[0] = takes_table(TABLE)  # error


@kiln.kernel
def bool_table(out: f32[:]):
    out[0] = f32(FLAGS[0])  # error


@kiln.kernel
def four_d_table(out: f32[:]):
    out[0] = CUBE[0, 0, 0, 0]  # error


@kiln.kernel
def huge_table(out: f32[:]):
    out[0] = f32(HUGE[0])  # error


@kiln.kernel
def empty_table(out: f32[:]):
    out[0] = EMPTY[0]  # error


@pytest.mark.parametrize(("kernel", "cls", "fragment"), [
    (writes_table, kiln.KernelTypeError, "'TABLE' is a module-level NumPy array, which "
     "kernels read as a constant table"),
    (updates_table, kiln.KernelTypeError, "read as a constant table"),
    (atomic_on_table, kiln.KernelTypeError, "atomic_add cannot update a module-level"),
    (passes_table, kiln.KernelTypeError, "device functions read it by name too"),
    (bool_table, kiln.KernelTypeError, "holds bool: constant tables hold numbers"),
    (four_d_table, kiln.KernelTypeError, "constant tables have 1 to 3 dimensions"),
    (huge_table, kiln.KernelTypeError, "80000 bytes, over the 32768 bytes"),
    (empty_table, kiln.KernelTypeError, "1 to 3 dimensions and elements"),
])
def test_table_misuse(kernel: kiln.Kernel, cls: type[kiln.KernelError], fragment: str) -> None:
    assert_kernel_error(kernel, cls, fragment)


@kiln.kernel
def reads_table(out: f32[:]):
    i = kiln.global_id(0)
    out[i] = TABLE[i]


def test_the_table_is_frozen_when_the_kernel_is_built(interp: kiln.Device) -> None:
    """As in Numba: the kernel keeps the values it was built with."""
    out = np.zeros(3, np.float32)
    kiln.launch(reads_table, 1, 3, (out,), device=interp)
    saved = TABLE.copy()
    try:
        TABLE[:] = -9.0
        kiln.launch(reads_table, 1, 3, (out,), device=interp)
    finally:
        TABLE[:] = saved
    np.testing.assert_array_equal(out, [1.0, 2.0, 3.0])


SOURCE = '''
import numpy as np
import kiln
from kiln import f32
LUT = np.array({values}, np.float32)
@kiln.kernel
def k(out: f32[:]):
    out[0] = LUT[1]
'''


def test_the_tables_content_is_in_the_kernel_key(tmp_path: Path) -> None:
    keys = []
    for values in ([1.0, 2.0], [1.0, 2.5], [1.0, 2.0]):
        path = tmp_path / "table_module.py"
        path.write_text(SOURCE.format(values=values))
        spec = importlib.util.spec_from_file_location("table_module", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["table_module"] = module
        spec.loader.exec_module(module)
        found = kernel_key(module.k, (kiln.ArrayType(f32, 1),), kiln.device("cpu"))
        assert found is not None
        keys.append(found.key)
    del sys.modules["table_module"]
    assert keys[0] != keys[1] and keys[0] == keys[2]
