"""The cpu backend beside NumPy and Numba on this machine's cores.

vector_add and reduce (2^24 f32) in GB/s against NumPy and Numba `parallel=True`; the
16x16 shared-memory tiled matmul (1024^2 f32) in GFLOP/s: kiln's SIMT kernel, Numba's i-k-j
loops and the same tiled algorithm in Numba (when numba is installed), NumPy's BLAS as the
roof; a row softmax (4096x1024 f32) against NumPy and a plain Numba `prange` loop; a
5-point 2-D stencil and mandelbrot against NumPy; each kiln kernel also on the OpenCL
backend's CPU device (PoCL) where there is one: the same source through another compiler.
Then the cold compile time of a small kernel and its load time from the disk cache.
Medians of timed runs after a warm-up; ratios are reference time / kiln time (above 1: kiln
is faster).

    python benchmarks/bench_cpu.py [--quick]          (also: kiln bench --backend cpu)

Exits at once (status 0) when another backend is asked for or the cpu backend is missing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from common import (
    backend_device,
    fresh_cache_dir,
    load_kernel,
    median_ms,
    quick,
    ratio,
    versions,
)

import kiln
from kiln import f32
from kiln.backend import DeviceKind
from kiln.builtin_backends.cpu.backend import build_env
from kiln.examples import (
    BLOCK,
    TILE,
    block_sum,
    mandelbrot,
    matmul_tiled_square,
    softmax_rows,
    vector_add,
)


@kiln.kernel
def stencil(u: f32[:, :], v: f32[:, :]):
    x = kiln.global_id(0)
    y = kiln.global_id(1)
    h, w = u.shape[0], u.shape[1]
    if x > 0 and y > 0 and x < w - 1 and y < h - 1:
        v[y, x] = 0.25 * (u[y - 1, x] + u[y + 1, x] + u[y, x - 1] + u[y, x + 1])


# ---------------------------------------------------------------- references


def numpy_mandelbrot(h: int, w: int, max_iter: int) -> np.ndarray:
    cr = (-2.0 + 3.0 * np.arange(w, dtype=np.float32) / np.float32(w))[None, :]
    ci = (-1.5 + 3.0 * np.arange(h, dtype=np.float32) / np.float32(h))[:, None]
    zr = np.zeros((h, w), np.float32)
    zi = np.zeros((h, w), np.float32)
    it = np.zeros((h, w), np.int32)
    for k in range(max_iter):
        live = zr * zr + zi * zi <= 4.0
        zr, zi = (np.where(live, zr * zr - zi * zi + cr, zr),
                  np.where(live, 2.0 * zr * zi + ci, zi))
        it[live] = k + 1
    return it


def numba_references() -> dict[str, Callable[..., object]]:
    """Numba `parallel=True` versions (empty without numba, which is then said): vector_add,
    sum, the i-k-j matmul loops, the same 16x16 tiled matmul as the kiln kernel and a row
    softmax."""
    try:
        import numba
    except ImportError:
        print("numba is not installed: its columns are left out (pip install numba)")
        return {}

    @numba.njit(parallel=True, fastmath=False)
    def add(a, b, c):  # pragma: no cover - compiled by numba
        for i in numba.prange(a.size):
            c[i] = a[i] + b[i]

    @numba.njit(parallel=True, fastmath=False)
    def total(a):  # pragma: no cover - compiled by numba
        s = np.float32(0)
        for i in numba.prange(a.size):
            s += a[i]
        return s

    @numba.njit(parallel=True, fastmath=False)
    def ikj(a, b, c):  # pragma: no cover - compiled by numba
        n = a.shape[0]
        for i in numba.prange(n):
            c[i, :] = 0
            for k in range(n):
                aik = a[i, k]
                for j in range(n):
                    c[i, j] += aik * b[k, j]

    @numba.njit(parallel=True, fastmath=False)
    def softmax(x, y):  # pragma: no cover - compiled by numba
        for i in numba.prange(x.shape[0]):
            top = x[i, 0]
            for j in range(x.shape[1]):
                top = max(top, x[i, j])
            total = np.float32(0)
            for j in range(x.shape[1]):
                e = np.exp(x[i, j] - top)
                y[i, j] = e
                total += e
            for j in range(x.shape[1]):
                y[i, j] /= total

    return {"add": add, "sum": total, "ikj": ikj, "tiled": numba_tiled_matmul(numba),
            "softmax": softmax}


def numpy_softmax(x: np.ndarray, y: np.ndarray) -> None:
    """Row softmax in NumPy, into `y`."""
    np.subtract(x, x.max(axis=1, keepdims=True), out=y)
    np.exp(y, out=y)
    y /= y.sum(axis=1, keepdims=True)


def numba_tiled_matmul(numba) -> Callable[[np.ndarray, np.ndarray, np.ndarray], None]:
    """The same 16x16 tiled algorithm in Numba, tiles in parallel."""

    @numba.njit(parallel=True, fastmath=False)
    def tiled(a, b, c):  # pragma: no cover - compiled by numba
        n = a.shape[0]
        tiles = n // TILE
        for tile in numba.prange(tiles * tiles):
            by, bx = tile // tiles, tile % tiles
            acc = np.zeros((TILE, TILE), np.float32)
            for t in range(0, n, TILE):
                As = a[by * TILE:(by + 1) * TILE, t:t + TILE].copy()
                Bs = b[t:t + TILE, bx * TILE:(bx + 1) * TILE].copy()
                for ty in range(TILE):
                    for k in range(TILE):
                        aval = As[ty, k]
                        for tx in range(TILE):
                            acc[ty, tx] += aval * Bs[k, tx]
            c[by * TILE:(by + 1) * TILE, bx * TILE:(bx + 1) * TILE] = acc

    return tiled


# ---------------------------------------------------------------- reporting


def row(name: str, kiln_ms: float, unit: str, amount: float, refs: dict[str, float]) -> None:
    rate = amount / (kiln_ms * 1e-3)
    parts = [f"{name:<22} kiln {kiln_ms:9.3f} ms {rate:8.2f} {unit}"]
    for ref, ms in refs.items():
        parts.append(f"{ref} {ms:9.3f} ms ({ratio(ms, kiln_ms):>6})")
    print("   ".join(parts), flush=True)


SAXPY = '''
import kiln
from kiln import f32, i32
@kiln.kernel
def saxpy(a: f32, x: f32[:], y: f32[:], n: i32):
    i = kiln.global_id(0)
    if i < n:
        y[i] = a * x[i] + y[i]
'''


def compile_times(dev: kiln.Device, hits: int = 9) -> tuple[float, float]:
    """Cold compile of a small kernel (empty cache), then the median of `hits` loads from
    the disk cache, each by a fresh kernel object (frontend and code generation included,
    as in a new process)."""
    x = kiln.to_device(np.ones(1024, np.float32), dev)
    times = []
    with fresh_cache_dir() as tmp:
        for _ in range(1 + hits):  # cold, then a fresh process's view: disk only
            saxpy = load_kernel(SAXPY, "saxpy", tmp)
            dev.backend.loader.cache.forget()  # a new process: the disk cache only
            start = time.perf_counter()
            saxpy[4, 256](np.float32(2), x, x, 1024)
            dev.synchronize()
            times.append((time.perf_counter() - start) * 1e3)
    return times[0], statistics.median(times[1:])


def pocl_device() -> kiln.Device | None:
    """The OpenCL backend's CPU device (PoCL), which runs the same kernels beside the cpu
    backend; None without one (its column is then left out, which is said)."""
    found = next((d for d in kiln.devices() if d.backend.name == "opencl"
                  and d.capabilities.kind is DeviceKind.CPU), None)
    if found is None:
        print("no OpenCL CPU device (PoCL): its column is left out")
    return found


@dataclass
class Bench:
    """What every benchmark row needs: the devices, the sizes' switch, the references."""

    dev: kiln.Device
    pocl: kiln.Device | None
    quick: bool
    repeat: int
    numba: dict[str, Callable[..., object]]
    rng: np.random.Generator = field(default_factory=lambda: np.random.default_rng(0))

    def kiln_and_pocl(self, time_on: Callable[[kiln.Device, int], float],
                      repeat: int | None = None) -> tuple[float, dict[str, float]]:
        """The kernel's median ms on the cpu backend, and PoCL's as a reference."""
        runs = repeat or self.repeat
        refs = {"pocl": time_on(self.pocl, runs)} if self.pocl else {}
        return time_on(self.dev, runs), refs


def bench_streams(b: Bench) -> None:
    """vector_add and reduce."""
    n = 1 << (20 if b.quick else 24)
    x, y = b.rng.random(n, np.float32), b.rng.random(n, np.float32)
    out = np.empty(n, np.float32)

    def time_add(d: kiln.Device, runs: int) -> float:
        dx, dy, dout = (kiln.to_device(v, d) for v in (x, y, out))

        def run() -> None:
            vector_add[n // BLOCK, BLOCK](dx, dy, dout, n)
            d.synchronize()

        ms = median_ms(run, runs)
        assert np.array_equal(dout.numpy(), x + y)
        return ms

    ms, refs = b.kiln_and_pocl(time_add)
    refs["numpy"] = median_ms(lambda: np.add(x, y, out=out), b.repeat)
    if b.numba:
        refs["numba-parallel"] = median_ms(lambda: b.numba["add"](x, y, out), b.repeat)
    row("vector_add", ms, "GB/s", 12 * n / 1e9, refs)

    zero = np.zeros(1, np.float32)

    def time_sum(d: kiln.Device, runs: int) -> float:
        dx, dsum = kiln.to_device(x, d), kiln.to_device(zero, d)

        def run() -> None:
            dsum.copy_from_host(zero)
            block_sum[n // (BLOCK * 16), BLOCK](dx, dsum, n)
            d.synchronize()

        ms = median_ms(run, runs)
        assert abs(dsum.numpy()[0] - x.sum(dtype=np.float64)) < 1e-3 * n
        return ms

    ms, refs = b.kiln_and_pocl(time_sum)
    refs["numpy"] = median_ms(lambda: x.sum(), b.repeat)
    if b.numba:
        refs["numba-parallel"] = median_ms(lambda: b.numba["sum"](x), b.repeat)
    row("reduce", ms, "GB/s", 4 * n / 1e9, refs)


def bench_matmul(b: Bench) -> None:
    m = 512 if b.quick else 1024
    am, bm = b.rng.random((m, m), np.float32), b.rng.random((m, m), np.float32)
    cm = np.empty((m, m), np.float32)

    def time_mm(d: kiln.Device, runs: int) -> float:
        dam, dbm, dcm = (kiln.to_device(v, d) for v in (am, bm, cm))

        def run() -> None:
            matmul_tiled_square[(m // TILE, m // TILE), (TILE, TILE)](dam, dbm, dcm, m)
            d.synchronize()

        ms = median_ms(run, runs)
        assert np.allclose(dcm.numpy(), am @ bm, rtol=1e-4, atol=1e-3)
        return ms

    ms, refs = b.kiln_and_pocl(time_mm)
    refs["numpy-blas"] = median_ms(lambda: np.matmul(am, bm, out=cm), b.repeat)
    for name in ("ikj", "tiled") if b.numba else ():
        refs[f"numba-{name}"] = median_ms(lambda f=b.numba[name]: f(am, bm, cm), b.repeat)
    row("matmul tiled 16x16", ms, "GFLOP/s", 2 * m**3 / 1e9, refs)


def bench_softmax(b: Bench) -> None:
    rows, cols = (1024, 1024) if b.quick else (4096, 1024)
    xs = (b.rng.standard_normal((rows, cols)) * 4).astype(np.float32)
    ys = np.empty_like(xs)
    numpy_softmax(xs, ys)
    expected = ys.copy()

    def time_softmax(d: kiln.Device, runs: int) -> float:
        dxs, dys = kiln.to_device(xs, d), kiln.to_device(ys, d)

        def run() -> None:
            softmax_rows[rows, BLOCK](dxs, dys)
            d.synchronize()

        ms = median_ms(run, runs)
        assert np.allclose(dys.numpy(), expected, rtol=1e-5, atol=1e-9)
        return ms

    ms, refs = b.kiln_and_pocl(time_softmax)
    refs["numpy"] = median_ms(lambda: numpy_softmax(xs, ys), b.repeat)
    if b.numba:
        refs["numba-prange"] = median_ms(lambda: b.numba["softmax"](xs, ys), b.repeat)
    row(f"softmax {rows}x{cols}", ms, "GB/s", 8 * rows * cols / 1e9, refs)


def bench_stencil(b: Bench) -> None:
    s = 1024 if b.quick else 2048
    u = b.rng.random((s, s), np.float32)
    v = np.zeros_like(u)

    def time_stencil(d: kiln.Device, runs: int) -> float:
        du, dv = kiln.to_device(u, d), kiln.to_device(v, d)

        def run() -> None:
            stencil[(s // 32, s // 8), (32, 8)](du, dv)
            d.synchronize()

        return median_ms(run, runs)

    def numpy_stencil() -> None:
        v[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])

    ms, refs = b.kiln_and_pocl(time_stencil)
    refs["numpy"] = median_ms(numpy_stencil, b.repeat)
    row("stencil 5-point 2-D", ms, "GB/s", 8 * s * s / 1e9, refs)


def bench_mandelbrot(b: Bench) -> None:
    h, w, iters = (256, 384, 100) if b.quick else (768, 1024, 200)
    img = np.zeros((h, w), np.int32)
    ref = numpy_mandelbrot(h, w, iters)

    def time_mandel(d: kiln.Device, runs: int) -> float:
        dimg = kiln.to_device(img, d)

        def run() -> None:
            mandelbrot[(w // 16, h // 16), (16, 16)](dimg, iters)
            d.synchronize()

        ms = median_ms(run, runs)
        assert (dimg.numpy() != ref).mean() < 0.01
        return ms

    ms, refs = b.kiln_and_pocl(time_mandel, max(3, b.repeat // 3))
    refs["numpy"] = median_ms(lambda: numpy_mandelbrot(h, w, iters), 1, warmup=0)
    row("mandelbrot", ms, "Mpixel/s", h * w / 1e6, refs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, fewer runs")
    args = parser.parse_args()
    args.quick = args.quick or quick()  # kiln bench --quick
    dev = backend_device("cpu", "bench_cpu")
    if dev is None:
        return 0
    print(f"cpu: {dev.capabilities.name}, {dev.capabilities.compute_units} threads, "
          f"{dev.capabilities.arch}; {versions()}, {build_env().version}")
    b = Bench(dev, pocl_device(), args.quick, 5 if args.quick else 15, numba_references())
    for bench in (bench_streams, bench_matmul, bench_softmax, bench_stencil, bench_mandelbrot):
        bench(b)
    cold, hit = compile_times(dev)
    print(f"{'compile (saxpy)':<22} cold {cold:7.1f} ms (goal < 300)   disk-cache hit "
          f"{hit:6.2f} ms, median (goal < 5; frontend and code generation included)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
