"""The cuda backend on an NVIDIA GPU, beside hand-written CUDA C, CuPy, PyTorch and Triton.

vector_add and reduce (2^26 f32) in GB/s, matmul fp32 4096^2 (naive, 16x16 shared tiles,
register-blocked) in TFLOP/s: each kiln kernel beside its hand-written CUDA C twin (the
same algorithm, launched through CuPy's RawKernel) and the libraries' own operations.
Then host launch overhead (4 arguments), prepared launches and CUDA-graph replay, cold
compile and cache hits. Device times are CUDA-event medians after warm-up, on random data.

    python benchmarks/bench_cuda.py [--quick] [--json FILE]

Exits at once (status 0) where no CUDA GPU is available.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from common import (
    backend_device,
    event_median_ms,
    fresh_cache_dir,
    kiln_event_median_ms,
    load_kernel,
    markdown_table,
    quick,
    ratio,
    timed_ms,
)

import kiln
from kiln import f32, i32
from kiln.examples import (
    BLOCK,
    TILE,
    block_sum,
    make_matmul_f32,
    make_matmul_mma,
    make_matmul_tf32x3,
    make_matmul_wgmma,
    matmul_mma_launch,
    matmul_naive,
    matmul_tiled_square,
    matmul_wgmma_launch,
    vector_add,
)

BM, BK, TM = 128, 8, 8  # register-blocked matmul: 128x128 tiles, 8 deep, 8x8 per thread

# ---------------------------------------------------------------- kiln kernels


@kiln.kernel
def vector_add4(a: f32[:], b: f32[:], c: f32[:], n: i32):
    """Four elements per thread, a block apart: four loads of each input in flight."""
    d = kiln.block_dim.x
    i = kiln.block_idx.x * d * 4 + kiln.thread_idx.x
    if i + 3 * d < n:
        a0, a1, a2, a3 = a[i], a[i + d], a[i + 2 * d], a[i + 3 * d]
        b0, b1, b2, b3 = b[i], b[i + d], b[i + 2 * d], b[i + 3 * d]
        c[i] = a0 + b0
        c[i + d] = a1 + b1
        c[i + 2 * d] = a2 + b2
        c[i + 3 * d] = a3 + b3
    else:
        while i < n:
            c[i] = a[i] + b[i]
            i += d


@kiln.kernel
def reduce_sum4(x: f32[:], out: f32[:], n: i32):
    """As block_sum with four independent accumulators (four loads in flight)."""
    s = kiln.shared(f32, 256)
    t = kiln.thread_idx.x
    g = kiln.global_size(0)
    acc0, acc1, acc2, acc3 = f32(0), f32(0), f32(0), f32(0)
    i = kiln.global_id(0)
    while i + 3 * g < n:
        acc0 += x[i]
        acc1 += x[i + g]
        acc2 += x[i + 2 * g]
        acc3 += x[i + 3 * g]
        i += 4 * g
    while i < n:
        acc0 += x[i]
        i += g
    s[t] = (acc0 + acc1) + (acc2 + acc3)
    kiln.barrier()
    k = kiln.block_dim.x // 2
    while k > 0:
        if t < k:
            s[t] += s[t + k]
        kiln.barrier()
        k //= 2
    if t == 0:
        kiln.atomic_add(out, 0, s[0])


@kiln.kernel
def matmul_regs(a: f32[:, :], b: f32[:, :], c: f32[:, :], n: i32):
    """128x128 block tiles, 8 deep; 256 threads each own 8x8 outputs, 16 apart (so shared
    reads are conflict-free and stores coalesce); n a multiple of 128."""
    sa = kiln.shared(f32, (BK, BM))  # A's tile transposed: sa[k, m]
    sb = kiln.shared(f32, (BK, BM))
    acc = kiln.local(f32, TM * TM)
    ra = kiln.local(f32, TM)
    rb = kiln.local(f32, TM)
    tid = kiln.thread_idx.x
    tr, tc = tid // 16, tid % 16
    row0, col0 = kiln.block_idx.y * BM, kiln.block_idx.x * BM
    for i in kiln.static_range(TM * TM):
        acc[i] = f32(0)
    ar, ak = tid // 2, (tid % 2) * 4
    bk, bc = tid // 32, (tid % 32) * 4
    for k0 in range(0, n, BK):
        for j in kiln.static_range(4):
            sa[ak + j, ar] = a[row0 + ar, k0 + ak + j]
            sb[bk, bc + j] = b[k0 + bk, col0 + bc + j]
        kiln.barrier()
        for k in kiln.static_range(BK):
            for m in kiln.static_range(TM):
                ra[m] = sa[k, tr + 16 * m]
                rb[m] = sb[k, tc + 16 * m]
            for m in kiln.static_range(TM):
                for q in kiln.static_range(TM):
                    acc[m * TM + q] += ra[m] * rb[q]
        kiln.barrier()
    for m in kiln.static_range(TM):
        for q in kiln.static_range(TM):
            c[row0 + tr + 16 * m, col0 + tc + 16 * q] = acc[m * TM + q]


# ---------------------------------------------------------------- hand-written CUDA C twins

CUDA_C = r"""
extern "C" __global__ void vector_add(const float *a, const float *b, float *c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

extern "C" __global__ void vector_add4(const float *a, const float *b, float *c, int n) {
    int d = blockDim.x;
    int i = blockIdx.x * d * 4 + threadIdx.x;
    if (i + 3 * d < n) {
        float a0 = a[i], a1 = a[i + d], a2 = a[i + 2 * d], a3 = a[i + 3 * d];
        float b0 = b[i], b1 = b[i + d], b2 = b[i + 2 * d], b3 = b[i + 3 * d];
        c[i] = a0 + b0; c[i + d] = a1 + b1; c[i + 2 * d] = a2 + b2; c[i + 3 * d] = a3 + b3;
    } else {
        for (; i < n; i += d) c[i] = a[i] + b[i];
    }
}

extern "C" __global__ void reduce_sum(const float *x, float *out, int n) {
    __shared__ float s[256];
    int t = threadIdx.x;
    float acc = 0.0f;
    for (int i = blockIdx.x * blockDim.x + t; i < n; i += gridDim.x * blockDim.x) acc += x[i];
    s[t] = acc;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k /= 2) {
        if (t < k) s[t] += s[t + k];
        __syncthreads();
    }
    if (t == 0) atomicAdd(out, s[0]);
}

extern "C" __global__ void reduce_sum4(const float *x, float *out, int n) {
    __shared__ float s[256];
    int t = threadIdx.x, g = gridDim.x * blockDim.x;
    float acc0 = 0.0f, acc1 = 0.0f, acc2 = 0.0f, acc3 = 0.0f;
    int i = blockIdx.x * blockDim.x + t;
    for (; i + 3 * g < n; i += 4 * g) {
        acc0 += x[i]; acc1 += x[i + g]; acc2 += x[i + 2 * g]; acc3 += x[i + 3 * g];
    }
    for (; i < n; i += g) acc0 += x[i];
    s[t] = (acc0 + acc1) + (acc2 + acc3);
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k /= 2) {
        if (t < k) s[t] += s[t + k];
        __syncthreads();
    }
    if (t == 0) atomicAdd(out, s[0]);
}

extern "C" __global__ void matmul_naive(const float *a, const float *b, float *c, int n) {
    int col = blockIdx.x * blockDim.x + threadIdx.x, row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < n && col < n) {
        float acc = 0.0f;
        for (int k = 0; k < n; k++) acc += a[row * n + k] * b[k * n + col];
        c[row * n + col] = acc;
    }
}

extern "C" __global__ void matmul_tiled(const float *a, const float *b, float *c, int n) {
    __shared__ float sa[16][16], sb[16][16];
    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * 16 + ty, col = blockIdx.x * 16 + tx;
    float acc = 0.0f;
    for (int k0 = 0; k0 < n; k0 += 16) {
        sa[ty][tx] = a[row * n + k0 + tx];
        sb[ty][tx] = b[(k0 + ty) * n + col];
        __syncthreads();
        #pragma unroll
        for (int k = 0; k < 16; k++) acc += sa[ty][k] * sb[k][tx];
        __syncthreads();
    }
    c[row * n + col] = acc;
}

extern "C" __global__ void matmul_regs(const float *a, const float *b, float *c, int n) {
    __shared__ float sa[8][128], sb[8][128];
    float acc[64], ra[8], rb[8];
    int tid = threadIdx.x, tr = tid / 16, tc = tid % 16;
    int row0 = blockIdx.y * 128, col0 = blockIdx.x * 128;
    #pragma unroll
    for (int i = 0; i < 64; i++) acc[i] = 0.0f;
    int ar = tid / 2, ak = (tid % 2) * 4, bk = tid / 32, bc = (tid % 32) * 4;
    for (int k0 = 0; k0 < n; k0 += 8) {
        #pragma unroll
        for (int j = 0; j < 4; j++) {
            sa[ak + j][ar] = a[(row0 + ar) * n + k0 + ak + j];
            sb[bk][bc + j] = b[(k0 + bk) * n + col0 + bc + j];
        }
        __syncthreads();
        #pragma unroll
        for (int k = 0; k < 8; k++) {
            #pragma unroll
            for (int m = 0; m < 8; m++) { ra[m] = sa[k][tr + 16 * m]; rb[m] = sb[k][tc + 16 * m]; }
            #pragma unroll
            for (int m = 0; m < 8; m++)
                #pragma unroll
                for (int q = 0; q < 8; q++) acc[m * 8 + q] += ra[m] * rb[q];
        }
        __syncthreads();
    }
    #pragma unroll
    for (int m = 0; m < 8; m++)
        #pragma unroll
        for (int q = 0; q < 8; q++)
            c[(row0 + tr + 16 * m) * n + col0 + tc + 16 * q] = acc[m * 8 + q];
}
"""

# ---------------------------------------------------------------- timing


def torch_event_median(fn: Callable[[], Any], repeat: int) -> float:
    """Median milliseconds of `fn` between PyTorch CUDA events, on the current PyTorch
    stream (the legacy default stream, which CuPy uses too)."""
    import torch

    return event_median_ms(fn, repeat, lambda: torch.cuda.Event(enable_timing=True),
                           torch.cuda.synchronize)


class Table:
    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def add(self, work: str, impl: str, value: float | None, unit: str, note: str = "",
            twin: str | None = None) -> None:
        self.rows.append({"work": work, "impl": impl, "value": value, "unit": unit,
                          "note": note, "twin": twin})
        shown = "n/a" if value is None else f"{value:.2f}"
        print(f"  {work:28s} {impl:36s} {shown:>10s} {unit} {note}", flush=True)

    def value(self, work: str, impl: str) -> float | None:
        return next((r["value"] for r in self.rows if r["work"] == work and r["impl"] == impl),
                    None)

    def markdown(self) -> str:
        cells = []
        for r in self.rows:
            value = "n/a" if r["value"] is None else f"{r['value']:.2f} {r['unit']}"
            versus = ""
            if r["twin"] and r["value"] is not None:
                twin = self.value(r["work"], r["twin"])
                if twin:
                    better_low = r["unit"] in ("us", "ms")
                    versus = (ratio(twin, r["value"], 3) if better_low
                              else ratio(r["value"], twin, 3))
            cells.append((r["work"], r["impl"], value, versus, r["note"]))
        return markdown_table(("work", "implementation", "result", "vs. hand CUDA C twin",
                               "note"), cells)


def guarded(table: Table, work: str, impl: str, unit: str, fn: Callable[[], float | None],
            note: str = "", twin: str | None = None) -> None:
    try:
        value = fn()
    except Exception as exc:  # one missing library must not end the run
        table.add(work, impl, None, unit, f"failed: {type(exc).__name__}: {exc}"[:160])
        return
    table.add(work, impl, value, unit, note, twin)


# ---------------------------------------------------------------- the benchmarks


def rel_error(actual: np.ndarray, expected: np.ndarray) -> float:
    return float(np.linalg.norm(actual - expected) / np.linalg.norm(expected))


def bench_bandwidth(table: Table, quick: bool) -> None:
    import cupy as cp

    dev = kiln.device("cuda")
    n = 1 << (22 if quick else 26)
    repeat = 10 if quick else 30
    rng = np.random.default_rng(0)
    a_h, b_h = rng.random(n, np.float32), rng.random(n, np.float32)
    a, b = kiln.to_device(a_h, dev), kiln.to_device(b_h, dev)
    c = kiln.full(n, np.nan, f32, dev)
    ca, cb, cc = cp.asarray(a), cp.asarray(b), cp.asarray(c)  # zero-copy views
    raw = cp.RawModule(code=CUDA_C)
    gbs = 3 * n * 4 / 1e6  # GB/s for a time in ms
    blocks1, blocks4 = (n + BLOCK - 1) // BLOCK, (n + 4 * BLOCK - 1) // (4 * BLOCK)

    def check_c(expected: np.ndarray) -> None:
        assert np.array_equal(c.numpy(), expected), "vector_add result differs"

    for name, kern, blocks in (("vector_add", vector_add, blocks1),
                               ("vector_add4", vector_add4, blocks4)):
        twin = raw.get_function(name)
        cc.fill(np.nan)
        kern[blocks, BLOCK](a, b, c, n)
        check_c(a_h + b_h)
        label = "1 element/thread" if name == "vector_add" else "4 elements/thread"
        guarded(table, "vector_add 2^26 f32", f"kiln {name}", "GB/s",
                lambda k=kern, bl=blocks: gbs / kiln_event_median_ms(
                    dev, lambda: k[bl, BLOCK](a, b, c, n), repeat), label,
                twin=f"CUDA C {name}")
        guarded(table, "vector_add 2^26 f32", f"CUDA C {name}", "GB/s",
                lambda t=twin, bl=blocks: gbs / torch_event_median(
                    lambda: t((bl,), (BLOCK,), (ca, cb, cc, np.int32(n))), repeat), label)
    guarded(table, "vector_add 2^26 f32", "CuPy cp.add", "GB/s",
            lambda: gbs / torch_event_median(lambda: cp.add(ca, cb, out=cc), repeat))
    guarded(table, "vector_add 2^26 f32", "PyTorch torch.add", "GB/s",
            lambda: _torch_add(gbs, ca, cb, cc, repeat))
    guarded(table, "vector_add 2^26 f32", "Triton (BLOCK 1024)", "GB/s",
            lambda: _triton_add(gbs, n, repeat))
    guarded(table, "device-to-device copy", "CuPy copy (read + write)", "GB/s",
            lambda: 2 * n * 4 / 1e6 / torch_event_median(lambda: cc.__setitem__(slice(None), ca),
                                                   repeat))

    # reduce: the sum of 2^26 floats; 8 blocks of 256 per SM
    gbs_r = n * 4 / 1e6
    out = kiln.zeros(1, f32, dev)
    cout = cp.asarray(out)
    blocks = 8 * dev.capabilities.compute_units
    expected = float(a_h.sum(dtype=np.float64))
    for name, kern in (("reduce_sum", block_sum), ("reduce_sum4", reduce_sum4)):
        twin = raw.get_function(name)
        cout.fill(0)
        kern[blocks, BLOCK](a, out, n)
        got = float(out.numpy()[0])
        assert abs(got - expected) <= 1e-5 * expected, f"{name}: {got} vs {expected}"
        label = ("1 load/iteration" if name == "reduce_sum" else "4 loads/iteration") + \
            f", {blocks} blocks"
        guarded(table, "reduce sum 2^26 f32", f"kiln {name}", "GB/s",
                lambda k=kern: gbs_r / kiln_event_median_ms(
                    dev, lambda: k[blocks, BLOCK](a, out, n), repeat),
                label, twin=f"CUDA C {name}")
        guarded(table, "reduce sum 2^26 f32", f"CUDA C {name}", "GB/s",
                lambda t=twin: gbs_r / torch_event_median(
                    lambda: t((blocks,), (BLOCK,), (ca, cout, np.int32(n))), repeat), label)
    guarded(table, "reduce sum 2^26 f32", "CuPy cp.sum", "GB/s",
            lambda: gbs_r / torch_event_median(lambda: ca.sum(), repeat))
    guarded(table, "reduce sum 2^26 f32", "PyTorch torch.sum", "GB/s",
            lambda: _torch_sum(gbs_r, ca, repeat))
    guarded(table, "reduce sum 2^26 f32", "Triton (tl.sum + atomic_add)", "GB/s",
            lambda: _triton_sum(gbs_r, n, repeat))


def _torch_add(gbs: float, ca: Any, cb: Any, cc: Any, repeat: int) -> float:
    import torch

    ta, tb, tc = (torch.as_tensor(x, device="cuda") for x in (ca, cb, cc))
    return gbs / torch_event_median(lambda: torch.add(ta, tb, out=tc), repeat)


def _torch_sum(gbs: float, ca: Any, repeat: int) -> float:
    import torch

    ta = torch.as_tensor(ca, device="cuda")
    return gbs / torch_event_median(lambda: ta.sum(), repeat)


def _triton_add(gbs: float, n: int, repeat: int) -> float:
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def add_kernel(x, y, out, n, BLOCK_SIZE: tl.constexpr):
        offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        mask = offs < n
        tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask),
                 mask=mask)

    x, y = torch.rand(n, device="cuda"), torch.rand(n, device="cuda")
    out = torch.empty_like(x)
    grid = (triton.cdiv(n, 1024),)
    add_kernel[grid](x, y, out, n, BLOCK_SIZE=1024)
    assert torch.equal(out, x + y)
    return gbs / torch_event_median(lambda: add_kernel[grid](x, y, out, n, BLOCK_SIZE=1024),
                                    repeat)


def _triton_sum(gbs: float, n: int, repeat: int) -> float:
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def sum_kernel(x, out, n, BLOCK_SIZE: tl.constexpr):
        offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        tl.atomic_add(out, tl.sum(tl.load(x + offs, mask=offs < n, other=0.0), axis=0))

    x = torch.rand(n, device="cuda")
    out = torch.zeros(1, device="cuda")
    grid = (triton.cdiv(n, 4096),)
    sum_kernel[grid](x, out, n, BLOCK_SIZE=4096)
    return gbs / torch_event_median(lambda: sum_kernel[grid](x, out, n, BLOCK_SIZE=4096),
                                    repeat)


def bench_matmul(table: Table, quick: bool) -> None:
    import cupy as cp
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = kiln.device("cuda")
    n = 1024 if quick else 4096
    repeat = 3 if quick else 10
    flops = 2 * n**3 / 1e9  # TFLOP/s for a time in ms
    rng = np.random.default_rng(1)
    a_h, b_h = rng.standard_normal((n, n), np.float32), rng.standard_normal((n, n), np.float32)
    ref = a_h.astype(np.float64) @ b_h.astype(np.float64) if n <= 2048 else None
    a, b = kiln.to_device(a_h, dev), kiln.to_device(b_h, dev)
    c = kiln.full((n, n), np.nan, f32, dev)
    ca, cb, cc = cp.asarray(a), cp.asarray(b), cp.asarray(c)
    raw = cp.RawModule(code=CUDA_C)
    if ref is None:  # spot-check rows of the big product against float64 NumPy
        rows = rng.choice(n, 16, replace=False)
        ref_rows = a_h[rows].astype(np.float64) @ b_h.astype(np.float64)

    def check(what: str) -> None:
        got = c.numpy()
        err = rel_error(got, ref) if ref is not None else rel_error(got[rows], ref_rows)
        assert err < 1e-5, f"{what}: relative error {err:.2e}"

    configs = (  # the kiln kernels, each with the arguments it takes, and their CUDA C twins
        ("matmul_naive", matmul_naive, (a, b, c), (n // 16, n // 16), (16, 16), "16x16 threads"),
        ("matmul_tiled", matmul_tiled_square, (a, b, c, n), (n // TILE, n // TILE), (TILE, TILE),
         "16x16 tiles"),
        ("matmul_regs", matmul_regs, (a, b, c, n), (n // BM, n // BM), (256,),
         "128x128x8 tiles, 8x8/thread"),
    )
    for name, kern, args, grid, block, label in configs:
        cc.fill(np.nan)
        kern[grid, block](*args)
        check(f"kiln {name}")
        guarded(table, f"matmul fp32 {n}^2", f"kiln {name}", "TFLOP/s",
                lambda k=kern, g=grid, bl=block, ar=args: flops / kiln_event_median_ms(
                    dev, lambda: k[g, bl](*ar), repeat), label, twin=f"CUDA C {name}")
        twin = raw.get_function(name)
        cc.fill(np.nan)
        twin(grid + (1,) * (3 - len(grid)), block, (ca, cb, cc, np.int32(n)))
        check(f"CUDA C {name}")
        guarded(table, f"matmul fp32 {n}^2", f"CUDA C {name}", "TFLOP/s",
                lambda t=twin, g=grid, bl=block: flops / torch_event_median(
                    lambda: t(g, bl, (ca, cb, cc, np.int32(n))), repeat), label)
    for bk in (8, 4):
        kern = make_matmul_f32(bk)
        cc.fill(np.nan)
        matmul_mma_launch(kern, a, b, c)
        check(f"kiln matmul_f32 bk={bk}")
        guarded(table, f"matmul fp32 {n}^2", f"kiln matmul_f32 (bk={bk})", "TFLOP/s",
                lambda k=kern: flops / kiln_event_median_ms(
                    dev, lambda: matmul_mma_launch(k, a, b, c), repeat),
                f"128x128x{bk}, float4 shared reads, register prefetch, 2 buffers, "
                f"{resources(kern)}")
    for bk, promote in ((16, False), (16, True), (32, True)):
        kern = make_matmul_tf32x3(bk=bk, promote=promote)
        cc.fill(np.nan)
        matmul_mma_launch(kern, a, b, c)
        got = c.numpy()
        err = rel_error(got, ref) if ref is not None else rel_error(got[rows], ref_rows)
        name = f"kiln matmul_tf32x3 (bk={bk}{', promote' if promote else ''})"
        guarded(table, f"matmul fp32 {n}^2", name, "TFLOP/s",
                lambda k=kern: flops / kiln_event_median_ms(
                    dev, lambda: matmul_mma_launch(k, a, b, c), repeat),
                f"tensor cores, 3 tf32 products, 128x128x{bk}, relative error {err:.1e}, "
                f"{resources(kern)}")
    guarded(table, f"matmul fp32 {n}^2", "CuPy cp.matmul (cuBLAS)", "TFLOP/s",
            lambda: flops / torch_event_median(lambda: cp.matmul(ca, cb, out=cc), repeat))
    ta, tb, tc = (torch.as_tensor(x, device="cuda") for x in (ca, cb, cc))
    guarded(table, f"matmul fp32 {n}^2", "PyTorch torch.matmul, TF32 off", "TFLOP/s",
            lambda: flops / torch_event_median(lambda: torch.matmul(ta, tb, out=tc), repeat))
    guarded(table, f"matmul fp32 {n}^2", "Triton tutorial matmul, ieee fp32", "TFLOP/s",
            lambda: _triton_matmul(flops, ta, tb, repeat))


def _triton_matmul(flops: float, a: Any, b: Any, repeat: int) -> float:
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def mm(a, b, c, n, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        pm, pn = tl.program_id(0), tl.program_id(1)
        rm = pm * BM + tl.arange(0, BM)
        rn = pn * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, n, BK):
            x = tl.load(a + rm[:, None] * n + (k + rk)[None, :])
            y = tl.load(b + (k + rk)[:, None] * n + rn[None, :])
            acc += tl.dot(x, y, input_precision="ieee")
        tl.store(c + rm[:, None] * n + rn[None, :], acc)

    n = a.shape[0]
    c = torch.empty_like(a)
    grid = (n // 128, n // 128)
    mm[grid](a, b, c, n, BM=128, BN=128, BK=32, num_warps=8, num_stages=3)
    return flops / torch_event_median(
        lambda: mm[grid](a, b, c, n, BM=128, BN=128, BK=32, num_warps=8, num_stages=3), repeat)


MMA_CONFIGS = (  # (bm, bn, bk, wm, wn, stages, group_m, prefetch)
    (128, 128, 32, 64, 32, 2, 8, True),
    (128, 128, 32, 64, 64, 3, 8, True),
    (128, 128, 32, 64, 64, 3, 8, False),
    (128, 256, 32, 64, 64, 3, 8, True),
    (128, 256, 64, 64, 64, 3, 8, True),
    (128, 128, 64, 64, 64, 4, 8, True),
)

WGMMA_CONFIGS = (  # (bm, bn, bk, stages): one warpgroup per 64 rows
    (128, 128, 64, 3),
    (128, 256, 64, 3),
    (128, 128, 64, 4),
)


def bench_matmul_mma(table: Table, quick: bool) -> None:
    """bf16 GEMM (f32 accumulation, bf16 result) on the tensor cores: kiln's
    `make_matmul_mma` and `make_matmul_wgmma` kernels beside cuBLAS (PyTorch) and Triton."""
    import torch

    dev = kiln.device("cuda")
    n = 2048 if quick else 8192
    repeat = 3 if quick else 10
    flops = 2 * n**3 / 1e9
    work = f"matmul bf16 {n}^3"
    rng = np.random.default_rng(2)
    a_h, b_h = (rng.standard_normal((n, n), np.float32).astype(kiln.bf16.dtype)
                for _ in range(2))
    a, b = kiln.to_device(a_h, dev), kiln.to_device(b_h, dev)
    rows = rng.choice(n, 16, replace=False)
    ref = a_h[rows].astype(np.float64) @ b_h.astype(np.float64)

    def check(what: str, got: np.ndarray) -> None:
        err = rel_error(got.astype(np.float64), ref)
        assert err < 1e-2, f"{what}: relative error {err:.2e}"  # bf16 result rounding

    def kiln_gemm(impl: str, label: str, make: Callable[[], kiln.Kernel],
                  launch: Callable[..., None], b_operand: Any) -> None:
        try:
            kern = make()
            c = kiln.full((n, n), np.nan, kiln.bf16, dev)
            launch(kern, a, b_operand, c)
            check(f"kiln {label}", c.numpy()[rows])
        except Exception as exc:
            table.add(work, impl, None, "TFLOP/s",
                      f"{label}: failed: {type(exc).__name__}: {exc}"[:200])
            return
        guarded(table, work, impl, "TFLOP/s",
                lambda: flops / kiln_event_median_ms(
                    dev, lambda: launch(kern, a, b_operand, c), repeat),
                f"{label}, {resources(kern)}")

    for bm, bn, bk, wm, wn, stages, group_m, prefetch in MMA_CONFIGS:
        label = (f"{bm}x{bn}x{bk}, warp {wm}x{wn}, {stages} stages, group {group_m}"
                 f"{', prefetch' if prefetch else ''}")
        kiln_gemm("kiln matmul_mma", label,
                  lambda c=(bm, bn, bk, wm, wn, stages, group_m, prefetch): make_matmul_mma(
                      kiln.bf16, *c), matmul_mma_launch, b)
    bt = kiln.to_device(np.ascontiguousarray(b_h.T), dev)  # wgmma's B is k-contiguous
    for bm, bn, bk, stages in WGMMA_CONFIGS:
        kiln_gemm("kiln matmul_wgmma (a @ bt.T)", f"{bm}x{bn}x{bk}, {stages} stages",
                  lambda c=(bm, bn, bk, stages): make_matmul_wgmma(kiln.bf16, *c),
                  matmul_wgmma_launch, bt)
    ta, tb = (torch.from_numpy(x.view(np.uint16)).view(torch.bfloat16).cuda() for x in (a_h, b_h))
    tc = torch.matmul(ta, tb)
    check("cuBLAS", tc[torch.as_tensor(rows, device="cuda")].float().cpu().numpy())
    guarded(table, work, "PyTorch torch.matmul (cuBLAS)", "TFLOP/s",
            lambda: flops / torch_event_median(lambda: torch.matmul(ta, tb, out=tc), repeat))
    guarded(table, work, "Triton tutorial matmul", "TFLOP/s",
            lambda: _triton_matmul_bf16(flops, ta, tb, repeat))


def resources(kernel: kiln.Kernel) -> str:
    """Registers per thread and local (spilled) bytes of a kernel's compiled routine."""
    from cuda.bindings import driver

    routine = next(iter(kernel.specializations.values())).routine
    attr = driver.CUfunction_attribute
    regs = driver.cuFuncGetAttribute(attr.CU_FUNC_ATTRIBUTE_NUM_REGS, routine.function)[1]
    local = driver.cuFuncGetAttribute(attr.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES,
                                      routine.function)[1]
    return f"{regs} regs, {local} B local"


def _triton_matmul_bf16(flops: float, a: Any, b: Any, repeat: int) -> float:
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def mm(a, b, c, n, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        pm, pn = tl.program_id(0), tl.program_id(1)
        rm = pm * BM + tl.arange(0, BM)
        rn = pn * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, n, BK):
            x = tl.load(a + rm[:, None] * n + (k + rk)[None, :])
            y = tl.load(b + (k + rk)[:, None] * n + rn[None, :])
            acc += tl.dot(x, y)
        tl.store(c + rm[:, None] * n + rn[None, :], acc.to(tl.bfloat16))

    n = a.shape[0]
    c = torch.empty_like(a)
    grid = (n // 128, n // 256)
    mm[grid](a, b, c, n, BM=128, BN=256, BK=64, num_warps=8, num_stages=3)
    return flops / torch_event_median(
        lambda: mm[grid](a, b, c, n, BM=128, BN=256, BK=64, num_warps=8, num_stages=3), repeat)


def host_us(fn: Callable[[], Any], count: int, rounds: int = 7) -> float:
    """Median host microseconds per call over `rounds` batches of `count` calls."""
    dev = kiln.device("cuda")
    per = []
    for _ in range(rounds):
        dev.synchronize()
        t0 = time.perf_counter()
        for _ in range(count):
            fn()
        per.append((time.perf_counter() - t0) / count * 1e6)
    dev.synchronize()
    return statistics.median(per)


def bench_launch(table: Table, quick: bool) -> None:
    import ctypes

    import cupy as cp
    from cuda.bindings import driver

    dev = kiln.device("cuda")
    count = 500 if quick else 2000
    a, b, c = (kiln.zeros(256, f32, dev) for _ in range(3))
    n = 256
    vector_add[1, 256](a, b, c, n)
    routine = vector_add.compile(dev).routine
    work = "launch, 4 args (host us)"
    # the floor: cuda.bindings cuLaunchKernel with prepacked parameters (kiln's ABI: 7 values)
    vals = [ctypes.c_uint64(a.buffer.ptr), ctypes.c_int32(256), ctypes.c_uint64(b.buffer.ptr),
            ctypes.c_int32(256), ctypes.c_uint64(c.buffer.ptr), ctypes.c_int32(256),
            ctypes.c_int32(n)]
    ptrs = (ctypes.c_void_p * 7)(*[ctypes.addressof(v) for v in vals])
    stream = dev.default_stream.handle.stream
    address = ctypes.addressof(ptrs)
    fn = routine.function
    launch = driver.cuLaunchKernel
    guarded(table, work, "cuda.bindings cuLaunchKernel, prepacked", "us",
            lambda: host_us(lambda: launch(fn, 1, 1, 1, 256, 1, 1, 0, stream, address, 0),
                            count), "the floor")
    from kiln.builtin_backends.cuda import shim

    if shim.shim() is not None:
        keep, record = shim.record(fn, (1, 1, 1), (256, 1, 1), 0, stream, address)
        run = shim.shim()
        guarded(table, work, "kiln's C launch shim, prepacked", "us",
                lambda: host_us(lambda: run(record), count), "one ctypes call, no checks")
    guarded(table, work, "kiln kernel[grid, block](a, b, c, n)", "us",
            lambda: host_us(lambda: vector_add[1, 256](a, b, c, n), count),
            "validated: types, ranges, devices")
    step = vector_add.prepare(1, 256, a, b, c, n)
    guarded(table, work, "kiln kernel.prepare(...)()", "us", lambda: host_us(step, count),
            "checked and packed once")
    guarded(table, work, "kiln.graph replay, per launch", "us", lambda: _graph_us(a, b, c, n),
            "1000 launches recorded; wall time incl. GPU")
    twin = cp.RawModule(code=CUDA_C).get_function("vector_add")
    ca, cb, cc = cp.asarray(a), cp.asarray(b), cp.asarray(c)
    guarded(table, work, "CuPy RawKernel", "us",
            lambda: host_us(lambda: twin((1,), (256,), (ca, cb, cc, np.int32(n))), count))
    guarded(table, work, "PyTorch torch.add(out=)", "us", lambda: _torch_launch(ca, count))


def _graph_us(a: Any, b: Any, c: Any, n: int) -> float:
    dev = kiln.device("cuda")
    with kiln.graph(dev) as g:
        for _ in range(1000):
            vector_add[1, 256](a, b, c, n)
    g.launch()
    dev.synchronize()
    per = []
    for _ in range(7):
        t0 = time.perf_counter()
        g.launch()
        dev.synchronize()
        per.append((time.perf_counter() - t0) / 1000 * 1e6)
    return statistics.median(per)


def _torch_launch(ca: Any, count: int) -> float:
    import torch

    t = torch.as_tensor(ca, device="cuda")
    return host_us(lambda: torch.add(t, t, out=t), count)


SMALL = '''
import kiln
from kiln import f32, i32
@kiln.kernel
def saxpy_{tag}(x: f32[:], y: f32[:], a: f32, n: i32):
    i = kiln.global_id(0)
    if i < n:
        y[i] = a * x[i] + y[i] + {tag}
'''


def bench_compile(table: Table) -> None:
    from kiln.builtin_backends.cuda import nvrtc
    from kiln.builtin_backends.cuda.backend import _CACHE

    dev = kiln.device("cuda")
    nvrtc.version()  # NVRTC loaded, as the goal states
    cold, hit, front = [], [], []
    with fresh_cache_dir() as tmp:
        for tag in range(5):
            source, name = SMALL.format(tag=tag), f"saxpy_{tag}"
            k1, k2 = load_kernel(source, name, tmp), load_kernel(source, name, tmp)
            front.append(timed_ms(lambda k=k1: k.program((f32[:], f32[:], f32, i32))))
            cold.append(timed_ms(lambda k=k1: k.compile(dev)))
            _CACHE.forget()  # a new process: the disk cache only
            k2.program((f32[:], f32[:], f32, i32))
            hit.append(timed_ms(lambda k=k2: k.compile(dev)))
    table.add("compile a small kernel", "frontend (Python -> typed IR)", statistics.median(front),
              "ms", "not part of the two rows below")
    table.add("compile a small kernel", "cold: passes, codegen, NVRTC cubin, load", statistics
              .median(cold), "ms", "NVRTC loaded, empty cache")
    table.add("compile a small kernel", "disk cache hit: passes, codegen, load", statistics
              .median(hit), "ms", "in-memory cache dropped")


def environment() -> dict[str, str]:
    from cuda.bindings import driver

    from kiln.builtin_backends.cuda import nvrtc

    dev = kiln.device("cuda")
    _, version = driver.cuDriverGetVersion()
    info = {"device": dev.capabilities.name, "arch": dev.capabilities.arch,
            "CUDA driver API": f"{version // 1000}.{version % 1000 // 10}",
            "NVRTC": "{}.{}".format(*nvrtc.version()), "python": sys.version.split()[0],
            "date": time.strftime("%Y-%m-%d")}
    for module in ("cuda.bindings", "cuda.core", "cupy", "torch", "triton", "numpy"):
        try:
            info[module] = __import__(module, fromlist=["_"]).__version__
        except Exception as exc:
            info[module] = f"unavailable ({type(exc).__name__})"
    return info


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, few repeats")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--markdown", help="write the table here")
    parser.add_argument("--only", help="comma-separated sections (compile, launch, "
                        "bandwidth, matmul, matmul_mma)")
    args = parser.parse_args()
    args.quick = args.quick or quick()  # kiln bench --quick
    if backend_device("cuda", "bench_cuda") is None:
        return 0
    env = environment()
    print("environment: " + ", ".join(f"{k} {v}" for k, v in env.items()), flush=True)
    table = Table()
    sections = (bench_compile, bench_launch, bench_bandwidth, bench_matmul, bench_matmul_mma)
    if args.only:
        wanted = {f"bench_{name}" for name in args.only.split(",")}
        sections = tuple(s for s in sections if s.__name__ in wanted)
    for section in sections:
        print(f"== {section.__name__}", flush=True)
        try:
            section(table) if section is bench_compile else section(table, args.quick)
        except Exception as exc:
            import traceback

            traceback.print_exc()
            table.add(section.__name__, "section failed", None, "", f"{type(exc).__name__}: {exc}")
    text = table.markdown()
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text + "\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"environment": env, "rows": table.rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
