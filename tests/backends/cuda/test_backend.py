"""The cuda backend on a GPU: launches, memory, streams, events, raw kernels, graphs.

Skipped where no NVIDIA GPU and driver are present (CI); scripts/gpu-suite.sh runs it.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import kiln
from kiln import f16, f32, f64, i32, i64
from kiln.examples import block_sum, vector_add
from tests.helpers import requires_backend

pytestmark = [requires_backend("cuda", "no CUDA GPU"), pytest.mark.gpu]


@pytest.fixture(scope="module")
def dev() -> kiln.Device:
    return kiln.device("cuda")


@kiln.kernel
def atomics(a64: f64[:], i64s: i64[:], fmax: f32[:], h: f16[:]):
    i = kiln.global_id(0)
    kiln.atomic_add(a64, 0, f64(0.5))
    kiln.atomic_sub(i64s, 0, i64(3))
    kiln.atomic_max(fmax, 0, f32(i))
    h[i] = h[i] * f16(2)


@kiln.kernel
def spin(x: f32[:], n: i32):
    i = kiln.global_id(0)
    v = x[i]
    for _ in range(n):
        v = v * f32(0.999) + f32(0.001)
    x[i] = v


def test_device_capabilities(dev: kiln.Device) -> None:
    caps = dev.capabilities
    assert dev.name == "cuda:0" and caps.arch.startswith("sm_")
    assert caps.max_threads_per_block >= 1024 and caps.warp_size == 32 and caps.fp64
    assert kiln.device().backend.name == "cuda"  # the highest priority


def test_vector_add_on_device_arrays(dev: kiln.Device) -> None:
    rng = np.random.default_rng(1)
    n = 1_000_003
    a, b = rng.random(n, np.float32), rng.random(n, np.float32)
    da, db, dc = kiln.to_device(a, dev), kiln.to_device(b, dev), kiln.full(n, np.nan, f32, dev)
    vector_add[(n + 255) // 256, 256](da, db, dc, n)
    np.testing.assert_array_equal(dc.numpy(), a + b)
    vector_add[(n + 255) // 256, 256](db, db, dc, n)  # the fast path with other arrays
    np.testing.assert_array_equal(dc.numpy(), b + b)


def test_numpy_arguments_are_copied_back(dev: kiln.Device) -> None:
    a, b, c = np.arange(300, dtype=np.float32), np.ones(300, np.float32), np.zeros(300, np.float32)
    kiln.launch(vector_add, 2, 256, (a, b, c, 300), device=dev)
    np.testing.assert_array_equal(c, a + 1)


def test_reduce_with_shared_memory_and_atomics(dev: kiln.Device) -> None:
    x = np.random.default_rng(2).random(1 << 20, np.float32)
    out = kiln.zeros(1, f32, dev)
    block_sum[264, 256](kiln.to_device(x, dev), out, x.size)
    assert abs(out.numpy()[0] - x.sum(dtype=np.float64)) < 1e-3 * x.size ** 0.5


def test_f64_i64_and_float_atomics_and_f16(dev: kiln.Device) -> None:
    a64, i64s, fmax = kiln.zeros(1, f64, dev), kiln.zeros(1, i64, dev), kiln.full(1, -1, f32, dev)
    h = kiln.to_device(np.linspace(-2, 2, 512).astype(np.float16), dev)
    atomics[2, 256](a64, i64s, fmax, h)
    assert a64.numpy()[0] == 256.0 and i64s.numpy()[0] == -1536 and fmax.numpy()[0] == 511
    np.testing.assert_array_equal(h.numpy(), np.linspace(-2, 2, 512).astype(np.float16) * 2)


def test_large_copies_through_pinned_staging(dev: kiln.Device) -> None:
    x = np.random.default_rng(3).random(3 << 20, np.float32)
    d = kiln.to_device(x, dev)
    x[:] = 0  # the copy was staged: changing the source afterwards is safe
    assert d.numpy().sum() > 0


@pytest.mark.parametrize("nbytes", [1, 4, 4095, 4096, 4097, 1 << 16])
def test_small_readbacks_through_page_locked_memory(dev: kiln.Device, nbytes: int) -> None:
    """Copies to the host up to 4 KiB go through one page-locked buffer, after the work
    queued before them, from several threads at once; larger ones as before."""
    x = np.random.default_rng(nbytes).integers(0, 256, nbytes).astype(np.uint8)
    d = kiln.to_device(x, dev)
    stream = kiln.Stream(dev)
    spin[1, 1, stream](kiln.zeros(1, f32, dev), 200_000)  # queued before the copy: it waits
    outs = [np.empty_like(x) for _ in range(8)]
    threads = [threading.Thread(target=d.copy_to_host, args=(out, stream)) for out in outs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for out in outs:
        np.testing.assert_array_equal(out, x)


def test_launches_are_asynchronous_and_events_time_them(dev: kiln.Device) -> None:
    x = kiln.zeros(1 << 16, f32, dev)
    spin[256, 256](x, 10)  # compile and warm up
    dev.synchronize()
    stream = kiln.Stream(dev)
    start, end = kiln.Event(dev), kiln.Event(dev)
    start.record(stream)
    t0 = time.perf_counter()
    spin[256, 256, stream](x, 5_000_000)  # about 10 ms on an H100
    host_ms = (time.perf_counter() - t0) * 1e3
    end.record(stream)
    end.synchronize()
    gpu_ms = start.elapsed_time(end)
    assert gpu_ms > 5 * host_ms, (gpu_ms, host_ms)


def test_prepared_launch_and_graph_replay(dev: kiln.Device) -> None:
    n = 4096
    a = kiln.to_device(np.ones(n, np.float32), dev)
    c = kiln.zeros(n, f32, dev)
    step = vector_add.prepare(n // 256, 256, a, c, c, n)
    for _ in range(3):
        step()
    np.testing.assert_array_equal(c.numpy(), 3)
    with kiln.graph(dev) as g:
        for _ in range(10):
            vector_add[n // 256, 256](a, c, c, n)
    np.testing.assert_array_equal(c.numpy(), 3)  # recorded, not run
    g.launch()
    g.launch()
    np.testing.assert_array_equal(c.numpy(), 23)


RAW_SOURCE = r'''
extern "C" __global__ void axpy(float a, const float *x, float *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
'''


def test_raw_kernel_from_cuda_c_and_from_ptx(dev: kiln.Device) -> None:
    from cuda.bindings import driver

    from kiln.builtin_backends.cuda import nvrtc

    x = kiln.to_device(np.arange(1000, dtype=np.float32), dev)
    y = kiln.zeros(1000, f32, dev)
    kiln.RawKernel(RAW_SOURCE, "axpy")[4, 256](np.float32(2), x, y, 1000)
    np.testing.assert_array_equal(y.numpy(), 2 * np.arange(1000))
    # PTX is handed to the driver, so it must not be newer than the driver's CUDA version
    _, version = driver.cuDriverGetVersion()
    if nvrtc.version() > (version // 1000, version % 1000 // 10):
        pytest.skip(f"NVRTC {nvrtc.version()} writes PTX newer than the driver's CUDA {version}")
    arch = dev.capabilities.arch
    ptx = nvrtc.compile_source(RAW_SOURCE, "axpy", nvrtc.options_for(arch, "ptx"), "ptx")
    kiln.RawKernel(ptx.rstrip(b"\0").decode(), "axpy")[4, 256](np.float32(1), x, y, 1000)
    np.testing.assert_array_equal(y.numpy(), 3 * np.arange(1000))


def test_fastmath_is_an_option(dev: kiln.Device) -> None:
    @kiln.kernel(fastmath=True)
    def fast_exp(x: f32[:]):
        i = kiln.global_id(0)
        x[i] = kiln.exp(x[i])

    x = kiln.to_device(np.linspace(-3, 3, 256).astype(np.float32), dev)
    fast_exp[1, 256](x)
    np.testing.assert_allclose(x.numpy(), np.exp(np.linspace(-3, 3, 256)), rtol=1e-5)
