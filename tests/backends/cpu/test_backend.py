"""The cpu backend end to end: real kernels compiled by cc with OpenMP, checked against NumPy."""

from __future__ import annotations

import os

import numpy as np
import pytest

import kiln
from kiln import f16, f32, f64, i32, i64, u32
from kiln.examples import TILE, block_sum, mandelbrot, matmul_tiled_square, vector_add
from tests.helpers import backend_entry, marked_line, run_python

pytestmark = pytest.mark.compiler


@pytest.fixture(scope="module")
def cpu() -> kiln.Device:
    entry = backend_entry("cpu")
    if not entry.available:
        pytest.skip(f"no C compiler with OpenMP here: {entry.reason}")
    return kiln.device("cpu")


def test_vector_add_is_zero_copy_and_asynchronous(cpu: kiln.Device) -> None:
    n = 1000
    a, b = np.arange(n, dtype=np.float32), np.ones(n, np.float32)
    c = np.zeros(n, np.float32)
    da, db = kiln.to_device(a, cpu), kiln.to_device(b, cpu)
    dc = kiln.as_device_array(c, cpu)
    vector_add[(n + 255) // 256, 256](da, db, dc, n)
    cpu.synchronize()
    np.testing.assert_array_equal(c, a + b)  # dc shares c's memory
    out = np.zeros(n, np.float32)
    vector_add[(n + 127) // 128, 128](a, b, out, n)  # NumPy in, result visible on return
    np.testing.assert_array_equal(out, a + b)


def test_block_sum_with_barriers_and_atomics(cpu: kiln.Device) -> None:
    x = np.random.default_rng(0).random(10_000).astype(np.float32)
    out = np.zeros(1, np.float32)
    block_sum[8, 256](kiln.to_device(x, cpu), kiln.as_device_array(out, cpu), x.size)
    cpu.synchronize()
    assert out[0] == pytest.approx(float(x.sum(dtype=np.float64)), rel=1e-4)


def test_tiled_matmul(cpu: kiln.Device) -> None:
    n = 64
    rng = np.random.default_rng(1)
    a, b = rng.random((n, n), np.float32), rng.random((n, n), np.float32)
    c = np.zeros((n, n), np.float32)
    matmul_tiled_square[(n // TILE, n // TILE), (TILE, TILE)](a, b, c, n)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)


def test_block_shapes_get_their_own_binaries(cpu: kiln.Device) -> None:
    n = 300
    a, b = np.ones(n, np.float32), np.full(n, 2, np.float32)
    for block in (32, 64, 128):
        c = np.zeros(n, np.float32)
        kiln.launch(vector_add, (n + block - 1) // block, block, (a, b, c, n), device=cpu)
        np.testing.assert_array_equal(c, 3)
    routine = vector_add.compile(cpu).routine
    assert {(32, 1, 1), (64, 1, 1), (128, 1, 1)} <= set(routine.binaries)


@kiln.func
def fib(n: i32, a: i32, b: i32) -> i32:
    if n == 0:
        return a
    return fib(n - 1, b, a + b)


@kiln.func
def scale_row(row: f32[:], k: f32):
    for j in range(len(row)):
        row[j] = row[j] * k + f32(kiln.thread_idx.x)


@kiln.kernel
def functions(out: i32[:], rows: f32[:]):
    i = kiln.global_id(0)
    out[i] = fib(i, 0, 1)
    if i == 0:
        scale_row(rows, 2.0)


def test_device_functions_recursion_and_hidden_thread_index(cpu: kiln.Device) -> None:
    out = np.zeros(10, np.int32)
    rows = np.ones(4, np.float32)
    functions[1, 10](out, rows)
    np.testing.assert_array_equal(out, [0, 1, 1, 2, 3, 5, 8, 13, 21, 34])
    np.testing.assert_array_equal(rows, 2.0)


@kiln.kernel
def int_semantics(a: i32[:], b: i32[:], q: i32[:], r: i32[:], p: i64[:]):
    i = kiln.global_id(0)
    q[i] = a[i] // b[i]
    r[i] = a[i] % b[i]
    p[i] = i64(b[i]) ** i64(3) + i64(a[i] // 4) + i64(a[i] % 8)


def test_python_floor_division_and_modulo(cpu: kiln.Device) -> None:
    a = np.array([7, -7, 7, -7, 5, -2**31, 0, 9], np.int32)
    b = np.array([2, 2, -2, -2, 0, -1, 3, 0], np.int32)
    q, r, p = np.zeros(8, np.int32), np.zeros(8, np.int32), np.zeros(8, np.int64)
    int_semantics[1, 8](a, b, q, r, p)
    with np.errstate(divide="ignore", over="ignore"):
        want_q = np.where(b == 0, 0, a // np.where(b == 0, 1, b))
        want_r = np.where((b == 0) | (b == -1), 0, a % np.where(b == 0, 1, b))
    want_q[5] = -2**31  # INT_MIN // -1 wraps
    np.testing.assert_array_equal(q, want_q)
    np.testing.assert_array_equal(r, want_r)
    np.testing.assert_array_equal(p, b.astype(np.int64) ** 3 + a // 4 + a % 8)


@kiln.kernel
def early_exit(x: f32[:], out: f32[:], nblocks: i32):
    s = kiln.shared(f32, 64)
    t = kiln.thread_idx.x
    if kiln.block_idx.x >= nblocks:  # block-uniform, so allowed before a barrier
        return
    s[t] = x[t] * 2.0
    kiln.barrier()
    out[kiln.global_id(0)] = s[t] + s[0]


def test_early_return_before_a_barrier(cpu: kiln.Device) -> None:
    x = np.arange(64, dtype=np.float32)
    out = np.full(128, -1, np.float32)
    early_exit[2, 64](x, out, 1)
    np.testing.assert_array_equal(out[:64], x * 2)
    np.testing.assert_array_equal(out[64:], -1)


@kiln.kernel
def histogram(data: i32[:], bins: u32[:], n: i32):
    local_bins = kiln.shared(u32, 16)
    t = kiln.thread_idx.x
    if t < 16:
        local_bins[t] = u32(0)
    kiln.barrier()
    i = kiln.global_id(0)
    while i < n:
        kiln.atomic_add(local_bins, data[i] % 16, u32(1))
        i += kiln.global_size(0)
    kiln.barrier()
    if t < 16:
        kiln.atomic_add(bins, t, local_bins[t])


def test_shared_and_global_atomics(cpu: kiln.Device) -> None:
    data = np.random.default_rng(2).integers(0, 1000, 100_000).astype(np.int32)
    bins = np.zeros(16, np.uint32)
    histogram[64, 256](data, bins, data.size)  # enough threads for every OpenMP thread
    np.testing.assert_array_equal(bins, np.bincount(data % 16, minlength=16))


@kiln.kernel
def private_across_barrier(x: f32[:], out: f32[:]):
    tmp = kiln.local(f32, 4)
    s = kiln.shared(f32, 32)
    t = kiln.thread_idx.x
    for j in range(4):
        tmp[j] = x[t] + f32(j)
    s[t] = tmp[3]
    kiln.barrier()
    out[t] = tmp[0] + s[(t + 1) % 32]


def test_private_arrays_live_across_barriers(cpu: kiln.Device) -> None:
    x = np.arange(32, dtype=np.float32)
    out = np.zeros(32, np.float32)
    private_across_barrier[1, 32](x, out)
    np.testing.assert_array_equal(out, x + np.roll(x, -1) + 3)


def test_mandelbrot_2d_grid_with_break(cpu: kiln.Device) -> None:
    h, w = 24, 40
    out = np.zeros((h, w), np.int32)
    mandelbrot[(w // 8, h // 8), (8, 8)](out, 50)
    ref = np.zeros((h, w), np.int32)
    interp_out = kiln.to_device(ref, "interp")
    mandelbrot[(w // 8, h // 8), (8, 8)](interp_out, 50)
    np.testing.assert_array_equal(out, interp_out.numpy())


@kiln.kernel
def halves(x: f16[:], y: f64[:], flags: kiln.bool_[:]):
    i = kiln.global_id(0)
    x[i] = kiln.sqrt(x[i]) * f16(2)
    y[i] = kiln.round(y[i]) + kiln.min(y[i], 1.0)
    flags[i] = kiln.isnan(y[i]) or y[i] > 2.0


def test_f16_f64_and_bool_arrays(cpu: kiln.Device) -> None:
    if not cpu.capabilities.fp16:
        pytest.skip("this compiler has no _Float16")
    x = np.array([1, 4, 9, 16], np.float16)
    y = np.array([0.5, 1.5, 2.5, np.nan])
    flags = np.zeros(4, np.bool_)
    halves[1, 4](x, y, flags)
    np.testing.assert_array_equal(x, [2, 4, 6, 8])
    np.testing.assert_array_equal(y[:3], [0.5, 3.0, 3.0])
    np.testing.assert_array_equal(flags, [False, True, True, True])


@kiln.kernel
def varying_loops(x: i32[:], steps: i32[:], found: i32[:], n: i32):
    i = kiln.global_id(0)
    if i >= n:
        return
    v = x[i]
    count = 0
    while v != 1:  # a thread-varying trip count, run lockstep with an activity mask
        if v % 2 == 0:  # noqa: SIM108 - a branch inside the masked loop
            v = v // 2
        else:
            v = 3 * v + 1
        count += 1
    steps[i] = count  # read after its loop: stored per thread, not recomputed
    j = 0
    while x[j] != x[i]:  # a test that reads memory
        j += 1
    found[i] = j


def collatz_steps(v: int) -> int:
    count = 0
    while v != 1:
        v = v // 2 if v % 2 == 0 else 3 * v + 1
        count += 1
    return count


def test_thread_varying_while_loops(cpu: kiln.Device) -> None:
    x = np.random.default_rng(3).permutation(np.arange(1, 301, dtype=np.int32))
    steps, found = np.zeros(320, np.int32), np.zeros(320, np.int32)
    varying_loops[5, 64](x, steps, found, x.size)
    np.testing.assert_array_equal(steps[:300], [collatz_steps(int(v)) for v in x])
    np.testing.assert_array_equal(found[:300], np.arange(300))
    np.testing.assert_array_equal(steps[300:], 0)


@kiln.kernel
def two_strides(x: f32[:], y: f32[:], out: f32[:], n: i32):
    acc = f32(0)
    i = kiln.global_id(0) + kiln.global_id(1) * kiln.global_size(0)
    while i < n:  # grid-stride: `i` is recomputed from the iteration number
        acc += x[i]
        i += kiln.global_size(0) * kiln.global_size(1)
    i = kiln.global_id(0) + kiln.global_id(1) * kiln.global_size(0)
    while i < n:
        acc += 2.0 * y[i]
        i += kiln.global_size(0) * kiln.global_size(1)
    out[kiln.global_id(0) + kiln.global_id(1) * kiln.global_size(0)] = acc


def test_grid_stride_loops_with_a_partial_last_pass(cpu: kiln.Device) -> None:
    n = 10_001
    rng = np.random.default_rng(4)
    x, y = rng.random(n, np.float32), rng.random(n, np.float32)
    out = np.zeros(2 * 3 * 8 * 4, np.float32)  # grid 2x3 blocks of 8x4 threads
    two_strides[(2, 3), (8, 4)](x, y, out, n)
    stride = out.size
    pad = (-n) % stride
    expected = [np.pad(v, (0, pad)).reshape(-1, stride).sum(axis=0, dtype=np.float64)
                for v in (x, y)]
    np.testing.assert_allclose(out, expected[0] + 2 * expected[1], rtol=1e-5)
    source = two_strides.source("cpu")
    assert "kiln_iteration * " in source and "kiln_active" in source
    assert source.count("kiln_full") == 6  # both loops: unmasked iterations first


@kiln.kernel
def block_strides(x: i32[:], out: i32[:], n: i32, first: i32):
    acc = 0
    i = first + kiln.thread_idx.x * 3
    while i < n - kiln.block_idx.x:  # bound and step differ per block, uniform within one
        acc += x[i]
        i += kiln.block_idx.x + 1
    out[kiln.global_id(0)] = acc


@pytest.mark.parametrize("first", [0, 25, 99, 200])
def test_counted_loops_with_per_block_bounds_and_steps(cpu: kiln.Device, first: int) -> None:
    n, blocks, threads = 100, 3, 16
    x = np.arange(1000, 1000 + n, dtype=np.int32)
    out = np.zeros(blocks * threads, np.int32)
    block_strides[blocks, threads](x, out, n, first)
    expected = [sum(int(x[i]) for i in range(first + 3 * t, n - b, b + 1))
                for b in range(blocks) for t in range(threads)]
    np.testing.assert_array_equal(out, expected)


@kiln.kernel
def shared_too_big(a: f32[:]):
    s = kiln.shared(f32, 20_000)
    s[0] = a[0]
    a[1] = s[0]


def test_shared_memory_over_the_limit(cpu: kiln.Device) -> None:
    with pytest.raises(kiln.DeviceFeatureError, match="80000 bytes per block"):
        shared_too_big.compile(cpu)


@kiln.kernel
def reassigns_param(out: i32[:], n: i32):
    t = kiln.thread_idx.x
    n = n + t
    kiln.barrier()
    out[t] = n


def test_assigned_scalar_parameter_is_per_thread(cpu: kiln.Device) -> None:
    out = np.zeros(8, np.int32)
    reassigns_param[1, 8](out, 100)
    np.testing.assert_array_equal(out, 100 + np.arange(8))


@kiln.kernel
def c_keywords(out: f32[:]):
    double = kiln.thread_idx.x
    auto = f32(double) * 2.0
    out[double] = auto  # named after the user's variables


def mapped_line(source: str, text: str) -> int:
    """The user line the C preprocessor attributes the generated line holding `text` to."""
    current = 0
    for line in source.splitlines():
        if line.startswith("#line "):
            current = int(line.split()[1]) - 1
            continue
        current += 1
        if text in line:
            return current
    raise AssertionError(f"{text!r} not in the source")


def test_generated_source_is_readable(cpu: kiln.Device) -> None:
    source = c_keywords.source("cpu")
    assert "double_ = kiln_thread_idx_x;" in source
    assert "out[double_] = auto_;" in source
    assert mapped_line(source, "out[double_] = auto_;") == marked_line(c_keywords, "# named")
    out = np.zeros(4, np.float32)
    c_keywords[1, 4](out)
    np.testing.assert_array_equal(out, [0, 2, 4, 6])
    kernel_source = matmul_tiled_square.source("cpu")
    assert "#pragma GCC unroll 16" in kernel_source  # a short constant loop, inside its region
    # recomputed; wrapping (computed unsigned): block_idx.y * 16 is not provably below 2**31
    assert "int32_t row = (int32_t)((uint32_t)kiln_block_idx_y * (uint32_t)16 + (uint32_t)ty);" \
        in kernel_source
    sum_source = block_sum.source("cpu")
    assert "int32_t k = k_b;" in sum_source  # block-uniform: one value per block


def test_events_time_work_on_the_stream(cpu: kiln.Device) -> None:
    n = 1 << 16
    a = kiln.to_device(np.ones(n, np.float32), cpu)
    c = kiln.empty(n, f32, cpu)
    start, end = kiln.Event(cpu).record(), kiln.Event(cpu)
    vector_add[n // 256, 256](a, a, c, n)
    end.record()
    assert start.elapsed_time(end) >= 0
    np.testing.assert_array_equal(c.numpy(), 2)


def test_capabilities(cpu: kiln.Device) -> None:
    caps = cpu.capabilities
    assert caps.kind is kiln.backend.DeviceKind.CPU and caps.unified_memory and caps.fp64
    assert caps.compute_units >= 1 and caps.global_memory > 0
    assert "atomic_add:f32" in caps.atomics
    assert caps.arch.startswith(__import__("platform").machine())


def test_missing_compiler_makes_the_backend_unavailable() -> None:
    code = ("import kiln; e = [b for b in kiln.backends() if b.name == 'cpu'][0]; "
            "print(e.available, e.reason)")
    result = run_python(code, {"KILN_CC": "no-such-compiler-kiln"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("False") and "no-such-compiler-kiln" in result.stdout


def test_num_threads_and_u32_wraparound(cpu: kiln.Device, tmp_path) -> None:
    script = tmp_path / "wrap.py"
    script.write_text("""
import os, sys
if sys.argv[-1] == "unset":
    os.environ.pop("OMP_WAIT_POLICY", None)
import numpy as np, kiln
from kiln import u32
@kiln.kernel
def wrap(x: u32[:]):
    i = kiln.global_id(0)
    x[i] = x[i] - u32(1)
x = np.zeros(4, np.uint32)
wrap[1, 4](x)
print(int(x[0]), kiln.device('cpu').capabilities.compute_units,
      os.environ.get("OMP_WAIT_POLICY", "unset"))
""")
    def run(mode: str, env: dict[str, str]):
        code = f"import runpy, sys; sys.argv.append({mode!r}); runpy.run_path({str(script)!r})"
        return run_python(code, {**env, "OMP_DISPLAY_ENV": "verbose"})

    result = run("unset", {"KILN_NUM_THREADS": "1", "KILN_BACKEND": "cpu"})
    assert result.returncode == 0, result.stderr
    # the user's environment stays as it was ...
    assert result.stdout.split() == [str(2**32 - 1), "1", "unset"]
    # ... while idle OpenMP workers sleep (spinning ones starve Python on a loaded machine)
    if "GOMP_SPINCOUNT = " not in result.stderr:
        pytest.skip("the OpenMP runtime is not libgomp, which shows its spin count")
    assert "GOMP_SPINCOUNT = '0'" in result.stderr
    # ... unless the user chose
    result = run("set", {"OMP_WAIT_POLICY": "active", "KILN_BACKEND": "cpu"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[2] == "active"
    assert "GOMP_SPINCOUNT = '0'" not in result.stderr


def test_launches_use_every_core_when_openmp_binds_its_threads(cpu: kiln.Device) -> None:
    """An OpenMP runtime told to bind threads binds the thread that starts it to one core;
    launches after that still use every core the process had."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    if cores < 2:
        pytest.skip("one core here: nothing to lose to a binding")
    code = """
import os, numpy as np, kiln
from kiln.codegen import host_threads
from kiln.examples import vector_add
x = np.ones(64, np.float32)
vector_add[1, 64](x, x, x, 64)
print(len(os.sched_getaffinity(0)), host_threads(), x[0])
"""
    result = run_python(code, {"OMP_PROC_BIND": "close", "KILN_BACKEND": "cpu"})
    assert result.returncode == 0, result.stderr
    bound, threads, value = result.stdout.split()
    if bound != "1":
        pytest.skip("this OpenMP runtime does not bind the thread that starts it")
    assert (int(threads), value) == (cores, "2.0")
