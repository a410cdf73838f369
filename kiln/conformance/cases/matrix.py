"""Matrix multiply-accumulate and asynchronous copies (docs/language-advanced.md, "Matrix
multiply-accumulate"): a 32 x 16 product by two warps, operands staged in shared memory with
`copy_async`, fragments from shared memory (A) and global memory (B), accumulator tiles
stored with `mma_store`. Tensor cores on CUDA sm_80+, the scalar form elsewhere."""

from __future__ import annotations

import ml_dtypes
import numpy as np

import kiln
from kiln import bf16, f32

from ..checks import assert_close, assert_equal, rng, run
from ..registry import case

M, N, K = 32, 16, 32  # two warps, each 16 rows x 16 columns (two 16 x 8 tiles)


@kiln.kernel
def mma_product(a: bf16[:, :], b: bf16[:, :], c: f32[:, :]):
    sa = kiln.shared(bf16, (M, K + 8))  # rows padded by 16 bytes, as ldmatrix likes them
    t = kiln.thread_idx.x
    for j in range(2):  # 64 threads copy 32 rows of 4 pieces of 8 bf16 (16 bytes)
        piece = t + j * 64
        kiln.copy_async(sa, piece // 4, (piece % 4) * 8, a, piece // 4, (piece % 4) * 8, 8)
    kiln.copy_async_commit()
    kiln.copy_async_wait(0)
    kiln.barrier()
    fa = kiln.local(kiln.fragment_a(bf16), 2)
    fb = kiln.local(kiln.fragment_b(bf16), 2)
    acc = kiln.local(f32, 8)
    for i in range(8):
        acc[i] = 0.0
    row = (t // 32) * 16
    for k in kiln.static_range(0, K, 16):
        fa[k // 16] = kiln.mma_load_a(sa, row, k)
        for n in kiln.static_range(2):
            fb[n] = kiln.mma_load_b(b, k, n * 8)
            kiln.mma(acc, n, fa[k // 16], fb[n])
    for n in kiln.static_range(2):
        kiln.mma_store(c, row, n * 8, acc, n)


@case()
def mma_bf16_shared_and_global(device):
    """bf16 products accumulate exactly in f32 (to f32 rounding of the sums)."""
    a = rng(90).standard_normal((M, K)).astype(ml_dtypes.bfloat16)
    b = rng(91).standard_normal((K, N)).astype(ml_dtypes.bfloat16)
    c = np.full((M, N), np.nan, np.float32)
    run(device, mma_product, 1, 64, a, b, c)
    assert_close(c, a.astype(np.float64) @ b.astype(np.float64), "a @ b", rtol=1e-5,
                 atol=1e-5)


@kiln.kernel
def tf32_round(x: f32[:], out: f32[:]):
    i = kiln.global_id(0)
    out[i] = kiln.tf32(x[i])


@case()
def tf32_rounding(device):
    """kiln.tf32: 11 significant bits, to nearest (Veltkamp's split in f32), bit for bit;
    huge values, infinities and NaN unchanged."""
    x = rng(92).standard_normal(256).astype(np.float32) * np.float32(1000)
    x[:4] = [np.inf, -np.inf, np.nan, 3e38]
    out = np.zeros(256, np.float32)
    run(device, tf32_round, 4, 64, x, out)
    with np.errstate(over="ignore", invalid="ignore"):
        c = x * np.float32(8193)
        expected = np.where(np.abs(x) < np.float32(2.0**100), c - (c - x), x)
    assert_equal(out, expected, "tf32(x)")
