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


@kiln.kernel
def wgmma_product(a: bf16[:, :], bt: bf16[:, :], c: f32[:, :]):
    """One warpgroup: c = a @ bt.T for a of 64 x 32 and bt of 24 x 32 (N = 24), both staged
    in the core-matrix layout by 16-byte copies of 8 consecutive k."""
    sa = kiln.shared(bf16, (4, 64, 8))
    sb = kiln.shared(bf16, (4, 24, 8))
    t = kiln.thread_idx.x
    for j in range(2):  # 128 threads copy 64 rows of 4 pieces of 8 k
        piece = t + j * 128
        kiln.copy_async(sa, piece % 4, piece // 4, 0, a, piece // 4, (piece % 4) * 8, 8)
    if t < 96:  # 24 rows of 4 pieces
        kiln.copy_async(sb, t % 4, t // 4, 0, bt, t // 4, (t % 4) * 8, 8)
    kiln.copy_async_commit()
    kiln.copy_async_wait(0)
    acc = kiln.local(f32, 12)
    for i in range(12):
        acc[i] = 0.0
    kiln.wgmma_fence()
    kiln.barrier()
    for k in kiln.static_range(0, 32, 16):
        kiln.wgmma(acc, sa, 0, k, sb, k, 0)
    kiln.wgmma_commit()
    kiln.wgmma_wait(0)
    kiln.wgmma_store(c, 0, 0, acc)


@case()
def wgmma_bf16_core_matrices(device):
    """A warpgroup product from shared core-matrix tiles: exact products, f32 sums."""
    a = rng(93).standard_normal((64, 32)).astype(ml_dtypes.bfloat16)
    bt = rng(94).standard_normal((24, 32)).astype(ml_dtypes.bfloat16)
    c = np.full((64, 24), np.nan, np.float32)
    run(device, wgmma_product, 1, 128, a, bt, c)
    assert_close(c, a.astype(np.float64) @ bt.T.astype(np.float64), "a @ bt.T", rtol=1e-5,
                 atol=1e-5)
