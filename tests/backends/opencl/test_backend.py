"""The opencl backend on a real OpenCL platform (PoCL in CI), checked against NumPy."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import numpy as np
import pytest

import kiln
from kiln import f32, f64, i32, i64, u32
from kiln.codegen import compile_error
from kiln.conformance.cases.algorithms import shifted_cubes
from kiln.examples import block_sum, vector_add
from tests.helpers import TESTS, marked_line, requires_backend, run_python

pytestmark = [requires_backend("opencl", "no OpenCL device"), pytest.mark.compiler]


@pytest.fixture(scope="module")
def dev() -> kiln.Device:
    return kiln.device("opencl")


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    return tmp_path


@kiln.kernel
def atomics(f: f32[:], d: f64[:], q: i64[:], u: u32[:], x: f32[:], n: i32):
    lo = kiln.shared(f32, 1)
    if kiln.thread_idx.x == 0:
        lo[0] = f32(1e30)
    kiln.barrier()
    i = kiln.global_id(0)
    if i < n:
        kiln.atomic_add(d, 0, f64(x[i]))
        kiln.atomic_max(f, 0, x[i])
        kiln.atomic_min(lo, 0, x[i])
        kiln.atomic_add(q, 0, i64(i) * 3000000000)
        kiln.atomic_max(q, 1, i64(i))
        kiln.atomic_or(u, 0, u32(1) << u32(i % 32))
    kiln.barrier()
    if kiln.thread_idx.x == 0:
        kiln.atomic_min(f, 1, lo[0])


@kiln.kernel
def masked_copy(src: f32[:], dst: f32[:], enabled: bool, n: i32):
    i = kiln.global_id(0)
    if enabled and i < n:
        dst[i] = src[i]


@kiln.kernel
def double_it(x: f64[:]):
    i = kiln.global_id(0)
    x[i] = x[i] * 2


@kiln.kernel
def rotate_in_place(g: f32[:], n: i32):
    t = kiln.thread_idx.x
    v = g[(t + 1) % n]
    kiln.barrier()  # other threads read g before it and write g after it: global fence
    g[t] = v


def _fences(kernel: kiln.Kernel) -> list[str]:
    return [line.strip() for line in kernel.source("opencl").splitlines() if "barrier(" in line]


def test_barriers_fence_global_memory_only_where_needed(dev):
    assert _fences(block_sum) == ["barrier(CLK_LOCAL_MEM_FENCE);"] * 3  # one heads the loop
    assert _fences(rotate_in_place) == ["barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);"]
    g = np.arange(64, dtype=np.float32)
    rotate_in_place[1, 64](g, 64)
    dev.synchronize()
    np.testing.assert_array_equal(g, np.roll(np.arange(64, dtype=np.float32), -1))


def test_barrier_loops_begin_with_a_barrier():
    """Each loop that reaches a barrier starts with one, a shape PoCL's region formation
    takes; loops without barriers and loops already starting with one are left alone."""
    lines = [line.strip() for line in block_sum.source("opencl").splitlines()]
    grid_stride, tree = lines.index("while (i < n) {"), lines.index("while (k > 0) {")
    assert lines[grid_stride + 1] != "barrier(CLK_LOCAL_MEM_FENCE);"
    assert lines[tree + 1] == "barrier(CLK_LOCAL_MEM_FENCE);"
    source = shifted_cubes.source("opencl").split("__kernel")[1]
    assert source.count("barrier(") == 3


def test_pocl_survives_barrier_loops_that_once_aborted_it():
    """Run in a subprocess: the PoCL failure this guards against aborts the process."""
    script = TESTS / "fixtures" / "barrier_loops.py"
    result = subprocess.run([sys.executable, str(script), "opencl"], capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr[-2000:]
    assert "same as the interp" in result.stdout


def test_devices_rank_by_kind(dev):
    caps = dev.capabilities
    assert caps.backend == "opencl" and dev.name.startswith("opencl:")
    expected = {kiln.backend.DeviceKind.GPU: 80, kiln.backend.DeviceKind.CPU: 30}
    assert dev.priority == expected.get(caps.kind, 60)
    if caps.kind is kiln.backend.DeviceKind.CPU:
        assert caps.unified_memory  # PoCL's CPU device shares host memory: zero-copy
    assert {"atomic_add:f32", "atomic_min:f32", "atomic_cas:u32"} <= caps.atomics


def test_imports_without_pyopencl():
    code = ("import sys; sys.modules['pyopencl'] = None\n"
            "import kiln\n"
            "e = next(e for e in kiln.backends() if e.name == 'opencl')\n"
            "print(e.available, e.reason)")
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("False pyopencl is not installed")


def test_source_is_opencl_c():
    src = block_sum.source("opencl")
    assert "__kernel void block_sum(__global float *x, int x_shape0," in src
    assert "__local float s[256];" in src
    assert "get_local_id(0)" in src and "get_group_id(0)" in src
    assert "atomic_cmpxchg" in src  # f32 atomic add through compare-and-swap
    assert "cl_khr_fp64" not in src
    assert "#pragma OPENCL EXTENSION cl_khr_fp64 : enable" in double_it.source("opencl")
    assert "cl_khr_int64_base_atomics" in atomics.source("opencl")


def test_vector_add_and_reduce(dev):
    n = 10_000
    rng = np.random.default_rng(0)
    a, b = rng.random(n, np.float32), rng.random(n, np.float32)
    c = kiln.empty(n, f32, dev)
    vector_add[-(-n // 128), 128](kiln.to_device(a, dev), kiln.to_device(b, dev), c, n)
    np.testing.assert_array_equal(c.numpy(), a + b)
    out = kiln.zeros(1, f32, dev)
    block_sum[32, 64](kiln.to_device(a, dev), out, n)
    np.testing.assert_allclose(out.numpy()[0], a.sum(dtype=np.float64), rtol=1e-4)


def test_atomics_32_and_64_bit(dev):
    n = 1000
    x = np.random.default_rng(1).random(n).astype(np.float32) + 0.5
    f = np.array([-1.0, 1e30], np.float32)
    d, q, u = np.zeros(1), np.zeros(2, np.int64), np.zeros(1, np.uint32)
    atomics[-(-n // 128), 128](f, d, q, u, x, n)
    dev.synchronize()
    assert f[0] == x.max() and f[1] == x.min()
    np.testing.assert_allclose(d[0], x.astype(np.float64).sum(), rtol=1e-12)
    assert q[0] == np.arange(n, dtype=np.int64).sum() * 3_000_000_000 and q[1] == n - 1
    assert u[0] == 0xFFFFFFFF


def test_bool_argument(dev):
    src = np.arange(5, dtype=np.float32)
    for flag in (True, False):
        dst = np.zeros(5, np.float32)
        masked_copy[1, 32](src, dst, flag, 5)
        dev.synchronize()
        np.testing.assert_array_equal(dst, src if flag else 0)


def test_repeated_and_prepared_launches(dev):
    n = 256
    a = kiln.to_device(np.ones(n, np.float32), dev)
    c1, c2 = kiln.empty(n, f32, dev), kiln.empty(n, f32, dev)
    for out in (c1, c2, c1):  # arguments change between launches, or not
        vector_add[1, n](a, a, out, n)
    np.testing.assert_array_equal(c2.numpy(), 2)
    again = vector_add.prepare(1, n, c1, a, c2, n)
    again()
    np.testing.assert_array_equal(c2.numpy(), 3)
    a.copy_from_host(np.zeros(n, np.float32))
    again()  # the same arguments, new contents
    np.testing.assert_array_equal(c2.numpy(), 2)


def test_events_time_the_queue(dev):
    n = 1 << 20
    a = kiln.to_device(np.ones(n, np.float32), dev)
    c = kiln.empty(n, f32, dev)
    start, end = kiln.Event(dev), kiln.Event(dev)
    start.record()
    vector_add[n // 256, 256](a, a, c, n)
    end.record()
    end.synchronize()
    assert 0 < start.elapsed_time(end) < 10_000
    assert c.numpy()[-1] == 2


def test_zero_copy_shares_host_memory(dev):
    if not dev.capabilities.unified_memory:
        pytest.skip(f"{dev.capabilities.name} does not share host memory")
    host = np.arange(8, dtype=np.float64)
    arr = kiln.as_device_array(host, dev)
    assert arr.buffer.hostbuf is host
    double_it[1, 8](arr)
    np.testing.assert_array_equal(arr.numpy(), np.arange(8) * 2)
    assert host[3] == 6  # written in place


def test_binaries_are_cached_on_disk(dev, cache_dir):
    @kiln.kernel
    def scale(x: f32[:], k: f32):
        x[kiln.global_id(0)] *= k

    x = kiln.to_device(np.ones(4, np.float32), dev)
    scale[1, 4](x, f32(3))
    entries = list((cache_dir / "opencl").glob("*.clbin"))
    assert len(entries) == 1
    dev.handle.cache.forget()
    scale.specializations.clear()
    scale[1, 4](x, f32(2))  # rebuilt from the cached binary
    np.testing.assert_array_equal(x.numpy(), 6)
    assert list((cache_dir / "opencl").glob("*.clbin")) == entries


def test_build_errors_point_at_the_users_line(dev):
    from kiln.builtin_backends.opencl.build import build_from_source

    line = marked_line(test_build_errors_point_at_the_users_line)
    source = (f'__kernel void k(__global float *a) {{\n#line {line} "{__file__}"\n'
              "    a[0] = undefined_name;\n}\n")  # error
    with pytest.raises(kiln.BackendCompileError) as info:
        build_from_source(dev.handle, source, ["-cl-std=CL1.2"])
    assert info.value.loc is not None and info.value.loc.line == line
    assert info.value.loc.file == __file__
    assert "undefined_name" in str(info.value)


@kiln.kernel
def native_ok(x: f32[:], y: f32[:]):
    i = kiln.global_id(0)
    v = x[i]  # noqa: F841 - read by the native code
    r: f32 = 0
    kiln.native(opencl="{r} = native_sqrt({v});", c="{r} = sqrtf({v});")
    y[i] = r


@kiln.kernel
def native_bad(x: f32[:]):
    v = x[0]
    kiln.native(opencl="{v} = not_a_function({v});", c="")  # error
    x[0] = v


def test_native_opencl_code(dev):
    x = np.array([4.0, 9.0], np.float32)
    y = np.zeros(2, np.float32)
    kiln.launch(native_ok, 1, 2, (x, y), device=dev)
    dev.synchronize()
    np.testing.assert_allclose(y, [2, 3], rtol=1e-6)
    with pytest.raises(kiln.BackendCompileError, match="not_a_function") as info:
        native_bad.compile(dev)
    assert info.value.line == marked_line(native_bad)


def test_unnamed_diagnostics_map_through_line_directives():
    """NVIDIA's log names no file and counts physical lines: kiln applies `#line` itself."""
    from kiln.builtin_backends.opencl.build import normalize_log

    line = marked_line(test_unnamed_diagnostics_map_through_line_directives)
    source = (f'__kernel void k(__global float *a) {{\n#line {line} "{__file__}"\n'
              '    a[0] = undefined_name;\n#line 4 "<kiln>"\n}}\n')  # error
    log = ":3:12: error: use of undeclared identifier 'undefined_name'\n"
    error = compile_error(normalize_log(log, source), source, "OpenCL")
    assert error.loc is not None and (error.loc.file, error.loc.line) == (__file__, line)


def test_missing_fp64_is_a_device_feature_error(dev):
    caps = dataclasses.replace(dev.capabilities, fp64=False, name="no-fp64 device")
    no_fp64 = kiln.Device(dev.backend, dev.index, dev.handle, caps, dev.priority)

    @kiln.kernel
    def halve(x: f64[:]):
        x[0] = x[0] / 2  # error

    with pytest.raises(kiln.DeviceFeatureError, match="f64") as info:
        halve.compile(no_fp64)
    assert info.value.line == marked_line(halve)


def test_shared_host_memory_past_the_largest_buffer_is_out_of_memory(dev) -> None:
    """Sharing a NumPy array (`as_device_array`, a NumPy launch argument) larger than one
    OpenCL buffer may be is kiln's OutOfMemoryError, as `kiln.empty` of that size is."""
    if not dev.capabilities.unified_memory:
        pytest.skip(f"{dev.name} does not share host memory")
    limit = int(dev.handle.device.max_mem_alloc_size)
    if limit > 2**33:
        pytest.skip(f"{dev.name} maps buffers of {limit} bytes: more than this test allocates")
    big = np.zeros(limit // 4 + 16, np.float32)  # calloc: its pages are never touched
    with pytest.raises(kiln.OutOfMemoryError, match=f"{limit + 64} bytes.*largest buffer"):
        kiln.as_device_array(big, dev)
    with pytest.raises(kiln.OutOfMemoryError, match="largest buffer"):
        kiln.launch(vector_add, 1, 1, (big, big, big, 0), device=dev)
