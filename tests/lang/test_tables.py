"""Module-level NumPy arrays as constant tables: misuse is an error at its line, a table
changed after the build is read anew (never stale), and its content is part of the kernel
key."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import kiln
from kiln import f32, f64, i32
from kiln.execution.kernelcache import kernel_key
from tests.helpers import assert_kernel_error, run_python

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


BACKENDS = [e.name for e in kiln.backends() if e.available]
CENTRES = np.array([0.0, 10.0], np.float32)
SPECIALS_32 = np.array([np.inf, -np.inf, np.nan, -0.0, 1.5], np.float32)
SPECIALS_64 = np.array([np.inf, -np.inf, np.nan, -0.0, 1e300], np.float64)


@kiln.func
def nearest(x: f32) -> i32:
    return 0 if abs(x - CENTRES[0]) <= abs(x - CENTRES[1]) else 1


@kiln.kernel
def assign(x: f32[:], label: i32[:]):
    i = kiln.global_id(0)
    label[i] = nearest(x[i])


@kiln.kernel
def read_specials(out32: f32[:], out64: f64[:]):
    i = kiln.global_id(0)
    out32[i] = SPECIALS_32[i]
    out64[i] = SPECIALS_64[i]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_table_written_after_the_build_is_read_anew(backend: str) -> None:
    """As a k-means loop does with its centres: each launch sees the table's values when it
    is launched (the kernel is built again), through the explicit, sized and fast paths, and
    through a device function."""
    dev = kiln.device(backend)
    x = kiln.to_device(np.array([1.0, 4.0, 6.0, 9.0], np.float32), dev)
    label = kiln.empty(4, i32, dev)
    launcher = assign[1, 4]
    expected = {10.0: [0, 0, 1, 1], 3.0: [0, 1, 1, 1], 1.0: [1, 1, 1, 1]}
    saved = CENTRES.copy()
    try:
        for centre in (10.0, 3.0, 3.0, 10.0, 1.0):  # changed, the same, changed back, ...
            CENTRES[1] = centre
            launcher(x, label)
            assert label.numpy().tolist() == expected[centre], centre
            kiln.launch(assign, dim=4, args=(x, label))
            assert label.numpy().tolist() == expected[centre], centre
    finally:
        CENTRES[:] = saved


def test_a_table_name_bound_to_another_array_is_read_anew(interp: kiln.Device) -> None:
    global TABLE
    out = np.zeros(3, np.float32)
    kiln.launch(reads_table, 1, 3, (out,), device=interp)
    saved = TABLE
    try:
        TABLE = np.array([7.0, 8.0, 9.0], np.float32)
        kiln.launch(reads_table, 1, 3, (out,), device=interp)
        np.testing.assert_array_equal(out, [7.0, 8.0, 9.0])
        TABLE = np.array([7.0, 8.0, 9.0, 10.0], np.float32)  # another shape: another build
        kiln.launch(reads_table, 1, 3, (out,), device=interp)
        np.testing.assert_array_equal(out, [7.0, 8.0, 9.0])
    finally:
        TABLE = saved
    kiln.launch(reads_table, 1, 3, (out,), device=interp)
    np.testing.assert_array_equal(out, [1.0, 2.0, 3.0])


@pytest.mark.parametrize("backend", BACKENDS)
def test_tables_hold_infinities_and_nans(backend: str) -> None:
    """f32 and f64 tables with inf, -inf, NaN and -0.0 compile everywhere (PoCL once
    rejected the initialiser) and read back the same values and signs."""
    dev = kiln.device(backend)
    out32, out64 = np.zeros(5, np.float32), np.zeros(5, np.float64)
    if not dev.capabilities.fp64:
        pytest.skip(f"{dev.name} has no f64")
    kiln.launch(read_specials, dim=5, args=(out32, out64), device=dev)
    dev.synchronize()
    for got, table in ((out32, SPECIALS_32), (out64, SPECIALS_64)):
        np.testing.assert_array_equal(got, table)  # NaN matches NaN
        finite = ~np.isnan(table)
        np.testing.assert_array_equal(np.signbit(got[finite]), np.signbit(table[finite]))


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
        found = kernel_key(module.k.launch_state, (kiln.ArrayType(f32, 1),), kiln.device("cpu"))
        assert found is not None
        keys.append(found.key)
    del sys.modules["table_module"]
    assert keys[0] != keys[1] and keys[0] == keys[2]


CONSTS = """
import numpy as np
LUT = np.array([1.0, 2.0], np.float32)
"""
READER = """
import kiln
from kiln import f32
import table_consts

@kiln.kernel
def k(out: f32[:]):
    out[0] = table_consts.LUT[1]
"""


def test_a_table_read_through_a_module_attribute_is_read_anew(tmp_path: Path,
                                                              interp: kiln.Device) -> None:
    modules = {}
    for name, text in (("table_consts", CONSTS), ("table_reader", READER)):
        path = tmp_path / f"{name}.py"
        path.write_text(text)
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        modules[name] = sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(modules[name])
    try:
        consts, kernel = modules["table_consts"], modules["table_reader"].k
        out = np.zeros(1, np.float32)
        for value in (2.0, 5.0):
            consts.LUT[1] = value
            kiln.launch(kernel, 1, 1, (out,), device=interp)
            assert out[0] == value
        consts.LUT = np.array([0.0, -3.0], np.float32)  # another array under the name
        kiln.launch(kernel, 1, 1, (out,), device=interp)
        assert out[0] == -3.0
    finally:
        for name in modules:
            del sys.modules[name]


RAMP = np.array([1.0, 2.0], np.float32)


def reads_ramp(out: f32[:]):
    i = kiln.global_id(0)
    out[i] = RAMP[i]


SIZED_LAUNCHES = {
    "subscript": lambda k, out: k[kiln.dim(2)](out),
    "launch": lambda k, out: kiln.launch(k, dim=2, args=(out,)),
}


@pytest.mark.parametrize("how", SIZED_LAUNCHES)
@pytest.mark.parametrize("rebind", [False, True])
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_sized_launch_after_an_explicit_one_reads_a_changed_table(
        backend: str, rebind: bool, how: str) -> None:
    """A `dim=` launch first made after the table changed still sees the change, though the
    explicit launch built the kernel with the old values (the variant shares its watch)."""
    global RAMP
    saved, sized = RAMP, SIZED_LAUNCHES[how]
    kernel = kiln.kernel(reads_ramp)  # a fresh kernel object: nothing built yet
    out = kiln.zeros(2, f32, kiln.device(backend))
    try:
        kernel[1, 2](out)
        assert out.numpy().tolist() == [1.0, 2.0]
        if rebind:
            RAMP = np.array([5.0, 6.0], np.float32)
        else:
            RAMP[:] = [5.0, 6.0]
        sized(kernel, out)
        assert out.numpy().tolist() == [5.0, 6.0]
        RAMP[:] = [7.0, 8.0]  # and back the other way: the explicit launch sees it too
        sized(kernel, out)
        assert out.numpy().tolist() == [7.0, 8.0]
        RAMP[:] = [3.0, 4.0]
        kernel[1, 2](out)
        assert out.numpy().tolist() == [3.0, 4.0]
    finally:
        RAMP = saved
        RAMP[:] = [1.0, 2.0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_launch_after_printing_the_ir_reads_a_changed_table(backend: str) -> None:
    """`ir()` builds the kernel's program before any launch watched its tables: a launch
    after the table changed still builds it again."""
    kernel = kiln.kernel(reads_ramp)
    out = kiln.zeros(2, f32, kiln.device(backend))
    try:
        kernel.ir()
        RAMP[:] = [5.0, 6.0]
        kernel[1, 2](out)
        assert out.numpy().tolist() == [5.0, 6.0]
    finally:
        RAMP[:] = [1.0, 2.0]


def closure_table_kernel() -> tuple[kiln.Kernel, Callable[[np.ndarray], None]]:
    """A kernel reading a closure's table, and a function that binds the closure's name to
    another array (`nonlocal`)."""
    table = np.array([1.0, 2.0], np.float32)

    @kiln.kernel
    def reads_closure(out: f32[:]):
        i = kiln.global_id(0)
        out[i] = table[i]

    def rebind(array: np.ndarray) -> None:
        nonlocal table
        table = array

    return reads_closure, rebind


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_closure_table_bound_to_another_array_is_read_anew(backend: str) -> None:
    kernel, rebind = closure_table_kernel()
    out = kiln.zeros(2, f32, kiln.device(backend))
    kernel[1, 2](out)
    assert out.numpy().tolist() == [1.0, 2.0]
    rebind(np.array([5.0, 6.0], np.float32))
    kernel[1, 2](out)
    assert out.numpy().tolist() == [5.0, 6.0]
    kernel[kiln.dim(2)](out)
    assert out.numpy().tolist() == [5.0, 6.0]


SHARED_CONSTS = """
import numpy as np
import kiln
from kiln import i32
STEP = np.array([1, 2], np.int32)

@kiln.func
def step(i: i32) -> i32:
    return STEP[i]
"""
SHARED_MAIN = """
import sys
import numpy as np
import kiln
from kiln import i32
import shared_consts

BASE = np.array([1, 2], np.int32)

@kiln.kernel
def k(out: i32[:]):
    i = kiln.global_id(0)
    out[i] = BASE[i % 2] * shared_consts.step(i % 2)

backend, phase = sys.argv[1], sys.argv[2]
out = kiln.zeros(4, i32, kiln.device(backend))
if phase == "first":  # built with the old values, then launched by size with the new ones
    BASE[:] = [7, 4]
    shared_consts.STEP[:] = [5, 3]
    k[1, 4](out)
    BASE[:] = [2, 4]
    shared_consts.STEP[:] = [1, 1]
else:  # a fresh process that starts with the new values
    BASE[:] = [2, 4]
    shared_consts.STEP[:] = [1, 1]
k[kiln.dim(4)](out)
print(out.numpy().tolist())
"""


@pytest.mark.parametrize("backend", [b for b in BACKENDS if b != "interp"])
def test_a_stale_build_never_reaches_the_disk_cache(tmp_path: Path, backend: str) -> None:
    """Tables of the kernel's module and of a device function's module change between an
    explicit launch and a sized one: the sized launch builds with the new values, and a
    later process starting with them finds that build, not the old one, on disk."""
    (tmp_path / "shared_consts.py").write_text(SHARED_CONSTS)
    (tmp_path / "shared_main.py").write_text(SHARED_MAIN)
    env = {"KILN_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(tmp_path)}
    for phase in ("first", "second"):
        code = ("import runpy, sys; sys.argv = ['shared_main.py', "
                f"{backend!r}, {phase!r}]; runpy.run_path({str(tmp_path / 'shared_main.py')!r}, "
                "run_name='__main__')")
        done = run_python(code, env)
        assert done.returncode == 0, done.stderr
        assert done.stdout.split("\n")[-2] == "[2, 4, 2, 4]", (phase, done.stdout)
