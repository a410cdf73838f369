"""`kiln.load_library` (kiln/aot/loader.py): launches through a built library from Python,
refusing what `kiln.launch` refuses; CUDA arrays of other libraries; debug checks; the
OpenCL loader; the manifest's format."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess

import numpy as np
import pytest

import kiln
from tests.aot.helpers import (
    CHECKED,
    HERE,
    build,
    check_api_output,
    compile_program,
    opencl_loader_missing,
)
from tests.helpers import backend_entry

pytestmark = [pytest.mark.compiler, pytest.mark.slow]


def test_load_library_launches_through_the_library(examples_library) -> None:
    _, lib_dir = examples_library
    lib = kiln.load_library(lib_dir)
    rng = np.random.default_rng(3)
    n = 5000
    a, b = (rng.standard_normal(n, dtype=np.float32) for _ in range(2))
    c = np.zeros(n, np.float32)
    lib.vector_add((n + 127) // 128, 128, a, b, c, n)  # NumPy arrays: copied in and back
    np.testing.assert_array_equal(c, a + b)

    ma = rng.standard_normal((20, 30), dtype=np.float32)
    mb = rng.standard_normal((30, 10), dtype=np.float32)
    da, db, dc = lib.to_device(ma), lib.to_device(mb), lib.empty((20, 10), np.float32)
    lib.matmul_tiled((1, 2), (16, 16), da, db, dc)  # library memory: no copies
    np.testing.assert_allclose(dc.copy_to_host(), ma @ mb, rtol=1e-4, atol=1e-4)

    with pytest.raises(kiln.LaunchError, match=r"argument 'b' \(#2\) of vector_add: expected "
                       r"a 1-d float32 array, got a 1-d float64 one"):
        lib.vector_add(1, 32, a, b.astype(np.float64), c, n)
    with pytest.raises(kiln.LaunchError, match=r"argument 'b' \(#2\) of vector_add: expected "
                       r"a 1-d float32 array in this machine's byte order, got a big-endian "
                       r"one \(>f4\): pass x.astype"):
        lib.vector_add(1, 32, a, b.astype(">f4"), c, n)
    with pytest.raises(kiln.LaunchError, match="argument 'n' .*does not fit i32"):
        lib.vector_add(1, 32, a, b, c, 2**40)
    with pytest.raises(kiln.LaunchError, match="vector_add takes 4 argument"):
        lib.vector_add(1, 32, a, b, c)
    with pytest.raises(RuntimeError, match="block .* more than the device's"):
        lib.vector_add(1, 65536, a, b, c, n)


def test_load_library_refuses_launches_kiln_launch_refuses(checked_library) -> None:
    """grid x block over 2^31-1 along an axis is refused (as kiln.launch refuses it), not
    run with wrapped thread indices, and so is a grid over the device's limits; the context
    works afterwards."""
    target, lib_dir = checked_library
    lib = kiln.load_library(lib_dir)
    x = lib.empty(1000, np.float32)
    if target != "opencl":  # OpenCL grids take 2^31-1 along every axis
        with pytest.raises(kiln.LaunchError, match="fill: grid dimension y is 70000, over the "
                           "device's limit of 65535"):
            lib.fill((1, 70000), 64, x, 1.0)
    with pytest.raises(kiln.LaunchError, match=r"fill: 67108864 blocks of 64 threads along x "
                       r"is over 2\^31-1 threads per axis"):
        lib.fill(2**26, 64, x, 1.0)
    with pytest.raises(kiln.LaunchError, match=r"fill: 2 blocks of 1073741824 threads|"
                       r"block \(1073741824, 1, 1\) has more than"):
        lib.fill(2, 2**30, x, 1.0)
    lib.fill(16, 64, x, 2.5)
    np.testing.assert_array_equal(x.copy_to_host(), np.full(1000, 2.5, np.float32))
    with pytest.raises(kiln.LaunchError, match=r"grid must be 1 to 3 integers from 1 to 2\^31-1"):
        lib.fill(2**32 + 1, 64, x, 1.0)  # would wrap to 1 as a uint32
    with pytest.raises(kiln.LaunchError, match="shape is non-negative ints, got .-5,."):
        lib.empty(-5, np.float32)


def test_copy_to_host_checks_the_destination(checked_library) -> None:
    """A too-small, wrong-dtype, non-contiguous or read-only `out` is refused before the
    library writes anything."""
    _, lib_dir = checked_library
    lib = kiln.load_library(lib_dir)
    big = lib.to_device(np.arange(1000, dtype=np.float32))
    small = np.zeros(10, np.float32)
    with pytest.raises(kiln.LaunchError, match=r"expected shape \(1000,\) and dtype float32, "
                       r"got shape \(10,\) and dtype float32"):
        big.copy_to_host(small)
    assert not small.any()
    with pytest.raises(kiln.LaunchError, match="got shape .1000,. and dtype float64"):
        big.copy_to_host(np.zeros(1000, np.float64))
    with pytest.raises(kiln.LaunchError, match="not C-contiguous"):
        big.copy_to_host(np.zeros(2000, np.float32)[::2])
    frozen = np.zeros(1000, np.float32)
    frozen.flags.writeable = False
    with pytest.raises(kiln.LaunchError, match="read-only"):
        big.copy_to_host(frozen)
    with pytest.raises(kiln.LaunchError, match="expected a NumPy array, got list"):
        big.copy_to_host([0.0] * 1000)  # type: ignore[arg-type]
    out = np.empty(1000, np.float32)
    assert big.copy_to_host(out) is out
    np.testing.assert_array_equal(out, np.arange(1000, dtype=np.float32))


@pytest.mark.parametrize(("shape", "dtype", "message"), [
    ((2**21, 2**21, 2**22), np.float32, r"too large: over 2\*\*63 bytes"),  # wrapped to 0 bytes
    (2**62 + 16, np.float32, r"too large: over 2\*\*63 bytes"),
    ((4, -1), np.float32, "shape is non-negative ints"),
    (2.5, np.float32, "shape is non-negative ints"),
    ((True,), np.float32, "shape is non-negative ints"),
    (3, object, "not object"),
    (3, np.complex64, "not complex64"),
    (3, "U4", "not <U4"),
    (3, "no such dtype", "not 'no such dtype'"),
])
def test_library_arrays_refuse_shapes_and_dtypes_kiln_empty_refuses(
        checked_library, shape, dtype, message) -> None:
    """Shapes whose bytes pass 2**63 (not wrapped to a small size), negative or non-int
    extents, and dtypes no kernel parameter has are refused before anything is allocated."""
    lib = kiln.load_library(checked_library[1])
    with pytest.raises(kiln.LaunchError, match=message):
        lib.empty(shape, dtype)


def test_an_opencl_library_names_the_buffer_size_it_cannot_allocate(checked_library) -> None:
    """More bytes than the device's largest buffer: the library's message names the
    condition (CL_INVALID_BUFFER_SIZE), not only its number."""
    target, lib_dir = checked_library
    if target != "opencl" or not backend_entry("opencl").available:
        pytest.skip("an OpenCL library, with pyopencl to read the device's largest buffer")
    limit = int(kiln.device("opencl").handle.device.max_mem_alloc_size)
    lib = kiln.load_library(lib_dir)
    with pytest.raises(RuntimeError, match=r"OpenCL error -61 \(CL_INVALID_BUFFER_SIZE: more "
                       r"bytes than the device's largest buffer"):
        lib.empty(limit // 4 + 16, np.float32)
    np.testing.assert_array_equal(lib.to_device(np.ones(4, np.float32)).copy_to_host(), 1)


def test_to_device_takes_scalar_types_as_kiln_to_device_does(checked_library) -> None:
    """Object, complex and string arrays are refused by dtype (an object array's pointers
    are no data for a kernel); a 0-d array keeps shape (), and big-endian data arrives as
    its values."""
    lib = kiln.load_library(checked_library[1])
    for host, name in ((np.array([[1, 2, 3] * 100, "x" * 1000], dtype=object), "object"),
                       (np.ones(3, np.complex64), "complex64"), (np.array(["ab"]), "<U2")):
        with pytest.raises(kiln.LaunchError, match=f"not {name}"):
            lib.to_device(host)
    scalar = lib.to_device(np.float32(1.5))
    assert scalar.shape == kiln.to_device(np.float32(1.5), device="interp").shape == ()
    np.testing.assert_array_equal(scalar.copy_to_host(), np.float32(1.5))
    swapped = lib.to_device(np.arange(5, dtype=">f4"))
    assert swapped.dtype == np.float32
    np.testing.assert_array_equal(swapped.copy_to_host(), np.arange(5, dtype=np.float32))
    with pytest.raises(kiln.LaunchError, match="to_device takes an array"):
        lib.to_device([[1.0], [1.0, 2.0]])


class CudaArrayInterface:
    """An object that says it is a CUDA array (only its interface is read)."""

    def __init__(self, ptr: int, shape: tuple[int, ...], typestr: str = "<f4",
                 strides: tuple[int, ...] | None = None) -> None:
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr,
                                         "data": (ptr, False), "strides": strides,
                                         "version": 3, "stream": None}


def test_a_cuda_array_is_refused_by_a_library_of_another_target(checked_library) -> None:
    """Only a cuda library takes CUDA arrays; others refuse them by name, before launching
    (their pointers are not host memory)."""
    target, lib_dir = checked_library
    if target == "cuda":
        pytest.skip("the cuda library takes CUDA arrays (test_a_cuda_library_takes_...)")
    lib = kiln.load_library(lib_dir)
    with pytest.raises(kiln.LaunchError, match=rf"argument 'x' \(#1\) of fill: a "
                       rf"CudaArrayInterface lives in CUDA memory, which a {target} library "
                       r"cannot use; pass a NumPy array"):
        lib.fill(1, 64, CudaArrayInterface(0x1000, (64,)), 1.0)


@pytest.mark.skipif(not backend_entry("cuda").available,
                    reason=f"no CUDA GPU: {backend_entry('cuda').reason}")
def test_a_cuda_library_takes_cuda_arrays_of_other_libraries(tmp_path) -> None:
    """Arrays of another CUDA library (kiln's own, through `__cuda_array_interface__`) are
    registered for the launch: the kernels work on them in place, the same array may be
    passed twice, and a wrong dtype, a non-contiguous array, a span past the allocation or
    one of more bytes than a size_t holds is refused."""
    lib_dir = tmp_path / "lib"
    build(CHECKED, lib_dir, "--target", "cuda", "--block", "staged=64", name="chk")
    lib = kiln.load_library(lib_dir)
    x = kiln.to_device(np.arange(256, dtype=np.float32), device="cuda")
    out = kiln.to_device(np.zeros(256, np.float32), device="cuda")
    lib.staged(4, 64, x, out)
    np.testing.assert_array_equal(out.numpy(), np.concatenate(
        [np.arange(63, -1, -1) + 64 * k for k in range(4)]).astype(np.float32))
    lib.fill(4, 64, out, 2.5)
    np.testing.assert_array_equal(out.numpy(), np.full(256, 2.5, np.float32))
    lib.staged(4, 64, out, out)  # one array twice: registered once
    ptr = x.__cuda_array_interface__["data"][0]
    with pytest.raises(kiln.LaunchError, match="expected a 1-d float32 array, got a 1-d "
                       "float64 one"):
        lib.fill(1, 64, CudaArrayInterface(ptr, (32,), "<f8"), 1.0)
    with pytest.raises(kiln.LaunchError, match=r"is not C-contiguous \(strides \(8,\)\)"):
        lib.fill(1, 64, CudaArrayInterface(ptr, (128,), strides=(8,)), 1.0)
    with pytest.raises(kiln.LaunchError, match=r"shape \(2147483648,\) is not extents from 0 "
                       r"to 2\^31-1"):
        lib.fill(1, 64, CudaArrayInterface(ptr, (2**31,)), 1.0)
    with pytest.raises(kiln.LaunchError, match="__cuda_array_interface__ cannot be read"):
        lib.fill(1, 64, CudaArrayInterface(ptr, ("many",)), 1.0)
    with pytest.raises(kiln.LaunchError, match=r"shape \(2097152, 2097152, 4194304\) is "
                       r"over 2\*\*63 bytes"):  # 2^66 bytes: wraps to 0 as a size_t
        lib.fill3((1, 1, 1), (1, 1, 64), CudaArrayInterface(ptr, (2**21, 2**21, 2**22)))
    other = kiln.load_library(lib_dir).empty(256, np.float32)  # another context's cuMemAlloc
    with pytest.raises(kiln.LaunchError, match="register: 1073741824 bytes at 0x.*, whose "
                       "allocation has 1024 bytes from there"):
        lib.fill(1, 64, CudaArrayInterface(other.ptr, (2**28,)), 1.0)
    lib.fill(4, 64, CudaArrayInterface(other.ptr, (256,)), 3.0)
    np.testing.assert_array_equal(other.copy_to_host(), np.full(256, 3.0, np.float32))
    lib.fill(1, 64, CudaArrayInterface(ptr, (64,)), 7.0)  # x's first 64: fine afterwards
    np.testing.assert_array_equal(x.numpy()[:64], np.full(64, 7.0, np.float32))


def test_a_written_read_only_array_is_refused(checked_library) -> None:
    """An entry point writing a read-only NumPy array (here one over bytes) raises a kiln
    error before launching; read-only inputs are fine."""
    _, lib_dir = checked_library
    lib = kiln.load_library(lib_dir)
    data = bytes(4 * 128)
    frozen = np.frombuffer(data, np.float32)
    with pytest.raises(kiln.LaunchError, match=r"argument 'x' \(#1\) of fill: fill writes it, "
                       r"and the array is read-only"):
        lib.fill(2, 64, frozen, 1.0)
    assert data == bytes(4 * 128)
    out = np.zeros(128, np.float32)
    readonly_in = np.arange(128, dtype=np.float32)
    readonly_in.flags.writeable = False
    lib.staged(2, 64, readonly_in, out)
    np.testing.assert_array_equal(out, np.concatenate([np.arange(63, -1, -1),
                                                       np.arange(127, 63, -1)]))


def test_a_debug_kernel_reports_an_index_out_of_bounds(checked_library) -> None:
    """`@kiln.kernel(debug=True)` in a library: the launch raises IndexOutOfBoundsError
    naming the array, the index and the line, as in-process debug launches do; a launch in
    bounds afterwards succeeds (the status was reset)."""
    _, lib_dir = checked_library
    manifest = json.loads((lib_dir / "chk.json").read_text())
    entry = next(e for e in manifest["entry_points"] if e["kernel"] == "off_by_one")
    assert entry["options"] == {"debug": True}
    assert [p["name"] for p in entry["c_parameters"]] == ["x", "x_shape0", "n"]
    lib = kiln.load_library(lib_dir)
    x = lib.empty(100, np.float32)
    with pytest.raises(kiln.IndexOutOfBoundsError, match=r"checked_kernels.py:30:9: index out "
                       r"of bounds: kernel `off_by_one`: thread \(36, 0, 0\) of block \(1, 0, 0\) "
                       r"wrote `x\[100\]`, outside its 100 elements"):
        lib.off_by_one(4, 64, x, 100)
    lib.off_by_one(4, 64, x, 99)
    np.testing.assert_array_equal(x.copy_to_host(), np.ones(100, np.float32))


def test_a_debug_library_checks_views_against_their_own_extent(checked_library) -> None:
    """A view's index is checked against the view, not only the array under it, in built
    libraries as in-process: `seg = x[0:4]; seg[4]` is inside `x` and still an error."""
    _, lib_dir = checked_library
    lib = kiln.load_library(lib_dir)
    x = lib.empty(100, np.float32)
    with pytest.raises(kiln.IndexOutOfBoundsError,
                       match=r"head_of.*wrote `seg\[4\]`, outside its 4 elements"):
        lib.head_of(1, 64, x, 5)
    lib.head_of(1, 64, x, 4)
    np.testing.assert_array_equal(x.copy_to_host()[:4], np.full(4, 2, np.float32))


def test_a_debug_library_checks_the_tail_of_wide_stores(checked_library) -> None:
    """`kiln.store(x, 2, f32x4(...))` into 10 elements writes x[8:12]: refused at x[10],
    the first element outside, as in-process, instead of writing past the end."""
    _, lib_dir = checked_library
    lib = kiln.load_library(lib_dir)
    x = lib.to_device(np.zeros(10, np.float32))
    with pytest.raises(kiln.IndexOutOfBoundsError,
                       match=r"wide_tail.*wrote `x\[10\]`, outside its 10 elements"):
        lib.wide_tail(1, 1, x, 2)
    lib.wide_tail(1, 1, x, 1)
    np.testing.assert_array_equal(x.copy_to_host()[4:], [1, 2, 3, 4, 0, 0])


def bundled_opencl_loader(monkeypatch) -> str:
    """pyopencl's own ICD loader, as `opencl_loader()` finds it without a system one."""
    from kiln.aot import loader

    real = ctypes.CDLL

    def no_system_loader(name, *args, **kwargs):
        if name == "libOpenCL.so.1":
            raise OSError("hidden by the test")
        return real(name, *args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(loader.ctypes, "CDLL", no_system_loader)
        found = loader.opencl_loader()
    if found is None:
        pytest.skip("pyopencl's wheel bundles no ICD loader here")
    return found


@pytest.mark.skipif(bool(opencl_loader_missing()), reason=opencl_loader_missing())
def test_an_opencl_library_takes_the_loader_kiln_opencl_loader_names(tmp_path,
                                                                      monkeypatch) -> None:
    """Without a system libOpenCL.so.1 (pip-only PoCL), KILN_OPENCL_LOADER points the
    library at another loader: pyopencl's bundled one runs the C API checks here; a path
    that does not load is reported by context creation. `kiln.aot.opencl_loader()` names
    the bundled one when the system has none."""
    bundled = bundled_opencl_loader(monkeypatch)
    assert "pyopencl" in bundled
    lib = tmp_path / "lib"
    build(CHECKED, lib, "--target", "opencl", "--block", "staged=64", name="chk")
    exe = tmp_path / "client"
    compile_program(HERE / "api_checks_client.c", lib, "chk", exe)
    env = {**os.environ, "KILN_OPENCL_LOADER": bundled}
    result = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    check_api_output(result.stdout, "opencl")
    env["KILN_OPENCL_LOADER"] = str(tmp_path / "no-such-loader.so")
    result = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 1
    assert (f"chk_context_create failed (2): KILN_OPENCL_LOADER={tmp_path}/no-such-loader.so "
            "cannot be loaded") in result.stderr


def test_a_library_of_another_manifest_format_is_refused(checked_library, tmp_path) -> None:
    """A library built by a kiln with another C interface (format 1: copy_to_host without
    the host buffer's size) is refused by name, not called with the wrong arguments."""
    _, lib_dir = checked_library
    old = tmp_path / "old"
    shutil.copytree(lib_dir, old)
    manifest = json.loads((old / "chk.json").read_text())
    assert manifest["format"] == 2
    (old / "chk.json").write_text(json.dumps({**manifest, "format": 1}))
    with pytest.raises(ValueError, match="has manifest format 1; this kiln loads format 2: "
                       "rebuild the library"):
        kiln.load_library(old)
    (old / "chk.json").write_text("{not json")
    with pytest.raises(ValueError, match="is not the manifest of a kiln library"):
        kiln.load_library(old)
