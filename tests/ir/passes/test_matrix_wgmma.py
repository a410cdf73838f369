"""Warpgroup matrix multiply-accumulate (`kiln.wgmma` and its fences, commits, waits and
stores): the same results on every available backend as NumPy (the scalar form on interp,
cpu and OpenCL, `wgmma.mma_async` on CUDA sm_90), PTX's accumulator layout, and the
errors."""

from __future__ import annotations

from functools import cache

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kiln
from kiln import bf16, f16, f32, f64, i32
from kiln.examples import make_matmul_wgmma, matmul_wgmma_launch
from kiln.ir.passes import pipeline_for
from tests.helpers import assert_kernel_error, marked_line

DEVICES = kiln.devices()
DTYPES = {bf16: ml_dtypes.bfloat16, f16: np.float16}


@cache
def product_kernel(elem: kiln.ScalarType, width: int) -> kiln.Kernel:
    """Two warpgroups per block, one per 64 rows of A's 128; each multiplies its rows by all
    of B (K = 32: two products per warpgroup) onto an accumulator of ones. Tiles are staged
    in shared memory in the core-matrix layout, A with 8 rows of padding above."""

    @kiln.kernel
    def products(a: elem[:, :], b: elem[:, :], c: f32[:, :]):  # type: ignore[valid-type]
        sa = kiln.shared(elem, (4, 136, 8))
        sb = kiln.shared(elem, (4, width, 8))
        acc = kiln.local(f32, width // 2)
        t = kiln.thread_idx.x
        for i in range(width // 2):
            acc[i] = 1.0
        for e in range(t, 128 * 32, 256):
            sa[(e % 32) // 8, 8 + e // 32, e % 8] = a[e // 32, e % 32]
        for e in range(t, 32 * width, 256):
            sb[(e // width) // 8, e % width, e // width % 8] = b[e // width, e % width]
        kiln.wgmma_fence()
        kiln.barrier()
        group = t // 128
        for k in kiln.static_range(2):
            kiln.wgmma(acc, sa, 8 + group * 64, k * 16, sb, k * 16, 0)
        kiln.wgmma_commit()
        kiln.wgmma_wait(0)
        kiln.wgmma_store(c, group * 64, 0, acc)

    return products


def operands(elem: kiln.ScalarType, width: int, seed: int
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((128, 32)).astype(DTYPES[elem])
    b = rng.standard_normal((32, width)).astype(DTYPES[elem])
    return a, b, a.astype(np.float64) @ b.astype(np.float64) + 1.0


def run_products(device: kiln.Device, elem: kiln.ScalarType, width: int,
                 seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    a, b, ref = operands(elem, width, seed)
    c = np.full((128, width), np.nan, np.float32)
    kiln.launch(product_kernel(elem, width), 1, 256, (a, b, c), device=device)
    device.synchronize()
    return c, ref


@pytest.mark.parametrize("width", [8, 24, 64], ids=lambda w: f"n{w}")
@pytest.mark.parametrize("elem", [bf16, f16], ids=str)
@pytest.mark.parametrize("device", DEVICES, ids=[d.backend.name for d in DEVICES])
def test_products_match_numpy(device: kiln.Device, elem: kiln.ScalarType, width: int) -> None:
    """Products are exact and 32 of them add in f32: within 32 f32 roundings of f64."""
    if elem == f16 and not device.capabilities.fp16:
        pytest.skip(f"{device.name} has no f16")
    c, ref = run_products(device, elem, width)
    np.testing.assert_allclose(c, ref, rtol=0, atol=32 * 2.0**-24 * np.abs(ref).max() + 1e-6)


def test_sums_run_in_order_in_f32(interp: kiln.Device) -> None:
    """Exactly NumPy's f32 sum of the exact products, k in order, onto the accumulator."""
    a, b, _ = operands(bf16, 16, seed=5)
    c = np.full((128, 16), np.nan, np.float32)
    kiln.launch(product_kernel(bf16, 16), 1, 256, (a, b, c), device=interp)
    expect = np.ones((128, 16), np.float32)
    for k in range(32):
        expect = expect + (a[:, k:k + 1].astype(np.float32) * b[k:k + 1, :].astype(np.float32))
    np.testing.assert_array_equal(c, expect)


@settings(max_examples=6, deadline=None)
@given(width=st.integers(1, 32).map(lambda w: 8 * w), seed=st.integers(0, 2**16))
def test_every_width_on_the_interpreter(width: int, seed: int) -> None:
    c, ref = run_products(kiln.device("interp"), bf16, width, seed)
    np.testing.assert_allclose(c, ref, rtol=0, atol=32 * 2.0**-24 * np.abs(ref).max() + 1e-6)


@kiln.kernel
def layout(out: f32[:, :]):
    """Each thread's accumulator element i holds 1000 * thread + i."""
    acc = kiln.local(f32, 8)
    for i in range(8):
        acc[i] = f32(1000 * kiln.thread_idx.x + i)
    kiln.wgmma_store(out, 0, 0, acc)


def test_accumulator_layout_is_ptx_m64nNk16(interp: kiln.Device) -> None:
    """Warp w holds rows 16 w..16 w + 15; lane l rows l // 4 and l // 4 + 8, in each 8
    columns 2 (l % 4) and 2 (l % 4) + 1 (PTX's wgmma accumulator figure)."""
    out = np.full((64, 16), np.nan, np.float32)
    kiln.launch(layout, 1, 128, (out,), device=interp)
    expect = np.empty((64, 16), np.float32)
    for thread in range(128):
        warp, lane = divmod(thread, 32)
        for i in range(8):
            row = 16 * warp + lane // 4 + 8 * (i // 2 % 2)
            col = 8 * (i // 4) + 2 * (lane % 4) + i % 2
            expect[row, col] = 1000 * thread + i
    np.testing.assert_array_equal(out, expect)


GEMM_DEVICES = [d for d in DEVICES if d.backend.name in ("interp", "cpu", "cuda")]


@pytest.mark.parametrize("device", GEMM_DEVICES, ids=[d.backend.name for d in GEMM_DEVICES])
def test_gemm_example(device: kiln.Device) -> None:
    """The pipelined example at a small tiling: three k tiles through two stages, two block
    rows and columns, bf16 results (the f32 sums rounded once)."""
    kernel = make_matmul_wgmma(bf16, bm=128, bn=32, bk=32, stages=2)
    rng = np.random.default_rng(7)
    a = rng.standard_normal((256, 96)).astype(ml_dtypes.bfloat16)
    bt = rng.standard_normal((64, 96)).astype(ml_dtypes.bfloat16)
    c = np.full((256, 64), np.nan, ml_dtypes.bfloat16)
    matmul_wgmma_launch(kernel, a, bt, c, device=device)
    device.synchronize()
    ref = a.astype(np.float64) @ bt.T.astype(np.float64)
    np.testing.assert_allclose(c.astype(np.float64), ref, rtol=2.0**-8, atol=1e-4)


def test_gemm_example_wide_tiles(interp: kiln.Device) -> None:
    """N = 128 per warpgroup (64 accumulators a thread); the default's 3 stages of k = 64
    need 96 KiB of shared memory, more than the interpreter's 48."""
    kernel = make_matmul_wgmma(bf16, bm=128, bn=128, bk=32, stages=2)
    rng = np.random.default_rng(8)
    a = rng.standard_normal((128, 128)).astype(ml_dtypes.bfloat16)
    bt = rng.standard_normal((128, 128)).astype(ml_dtypes.bfloat16)
    c = np.full((128, 128), np.nan, np.float32)
    matmul_wgmma_launch(kernel, a, bt, c, device=interp)
    ref = a.astype(np.float64) @ bt.T.astype(np.float64)
    np.testing.assert_allclose(c, ref, rtol=0, atol=128 * 2.0**-24 * np.abs(ref).max())


def test_gemm_launch_checks_shapes(interp: kiln.Device) -> None:
    kernel = make_matmul_wgmma()
    a = np.zeros((128, 64), ml_dtypes.bfloat16)
    with pytest.raises(ValueError, match="multiples of 128, 128, 64"):  # the default tiling
        matmul_wgmma_launch(kernel, a, np.zeros((100, 64), a.dtype),
                            np.zeros((128, 100), np.float32), device=interp)
    with pytest.raises(ValueError, match=r"\(128, 64\) and \(128, 32\).T"):
        matmul_wgmma_launch(kernel, a, np.zeros((128, 32), a.dtype),
                            np.zeros((128, 128), np.float32), device=interp)


@kiln.kernel
def offset_k(a: bf16[:, :], bt: bf16[:, :], c: f32[:, :], k: i32):
    """One product at a run-time k (A's and B's)."""
    sa = kiln.shared(bf16, (4, 64, 8))
    sb = kiln.shared(bf16, (4, 8, 8))
    acc = kiln.local(f32, 4)
    t = kiln.thread_idx.x
    for i in range(4):
        acc[i] = 0.0
    for e in range(t, 64 * 32, 128):
        sa[(e % 32) // 8, e // 32, e % 8] = a[e // 32, e % 32]
    for e in range(t, 8 * 32, 128):
        sb[(e % 32) // 8, e // 32, e % 8] = bt[e // 32, e % 32]
    kiln.wgmma_fence()
    kiln.barrier()
    kiln.wgmma(acc, sa, 0, k, sb, k, 0)
    kiln.wgmma_commit()
    kiln.wgmma_wait(0)
    kiln.wgmma_store(c, 0, 0, acc)


@pytest.mark.parametrize("k, used", [(16, 16), (8, 8), (13, 8)])
def test_run_time_depth_rounds_down_to_a_core_matrix(interp: kiln.Device, k: int,
                                                     used: int) -> None:
    """A run-time k that is not a multiple of 8 means the core matrix it falls in, as the
    descriptors of the native form address it."""
    rng = np.random.default_rng(k)
    a = rng.standard_normal((64, 32)).astype(ml_dtypes.bfloat16)
    bt = rng.standard_normal((8, 32)).astype(ml_dtypes.bfloat16)
    c = np.full((64, 8), np.nan, np.float32)
    kiln.launch(offset_k, 1, 128, (a, bt, c, np.int32(k)), device=interp)
    ref = a[:, used:used + 16].astype(np.float64) @ bt[:, used:used + 16].T.astype(np.float64)
    np.testing.assert_allclose(c, ref, rtol=0, atol=1e-5)


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize("device", DEVICES, ids=[d.backend.name for d in DEVICES])
def test_partial_warpgroups_are_reported(device: kiln.Device) -> None:
    """A block that is not whole warpgroups (192 threads) skips the products (natively
    they would wait for warps that do not exist) and raises at the next synchronisation,
    at the product's line, on every backend; the next launch is not affected."""
    kernel = product_kernel(bf16, 8)
    a, b, ref = operands(bf16, 8, seed=1)
    c = np.full((128, 8), np.nan, np.float32)
    with pytest.raises(kiln.ConvergenceError, match="multiple of 128 threads") as info:
        kiln.launch(kernel, 1, 192, (a, b, c), device=device)
        device.synchronize()
    assert info.value.loc is not None
    assert info.value.loc.line == marked_line(kernel, "kiln.wgmma(acc")
    kiln.launch(kernel, 1, 256, (a, b, c), device=device)
    device.synchronize()
    np.testing.assert_allclose(c, ref, rtol=0, atol=32 * 2.0**-24 * np.abs(ref).max() + 1e-6)


@kiln.kernel
def divergent(c: f32[:, :]):
    sa = kiln.shared(bf16, (2, 64, 8))
    acc = kiln.local(f32, 4)
    if kiln.thread_idx.x < 64:
        kiln.wgmma(acc, sa, 0, 0, sa, 0, 0)  # error


@kiln.kernel
def divergent_wait(c: f32[:, :]):
    if kiln.thread_idx.x % 2 == 0:
        kiln.wgmma_wait(0)  # error


@kiln.kernel
def odd_width(c: f32[:, :]):
    sa = kiln.shared(bf16, (2, 64, 8))
    acc = kiln.local(f32, 6)
    kiln.wgmma(acc, sa, 0, 0, sa, 0, 0)  # error


@kiln.kernel
def plain_tile(c: f32[:, :]):
    sa = kiln.shared(bf16, (64, 16))
    acc = kiln.local(f32, 4)
    kiln.wgmma(acc, sa, 0, 0, sa, 0, 0)  # error


@kiln.kernel
def short_tile(c: f32[:, :]):
    sa = kiln.shared(bf16, (2, 64, 8))
    acc = kiln.local(f32, 64)  # N = 128: B needs 128 rows
    kiln.wgmma(acc, sa, 0, 0, sa, 0, 0)  # error


@kiln.kernel
def mixed(c: f32[:, :]):
    sa = kiln.shared(bf16, (2, 64, 8))
    sb = kiln.shared(f16, (2, 64, 8))
    acc = kiln.local(f32, 4)
    kiln.wgmma(acc, sa, 0, 0, sb, 0, 0)  # error


@kiln.kernel
def global_tile(a: bf16[:, :, :], c: f32[:, :]):
    acc = kiln.local(f32, 4)
    kiln.wgmma(acc, a, 0, 0, a, 0, 0)  # error


def test_type_and_convergence_errors() -> None:
    assert_kernel_error(divergent, kiln.ConvergenceError, "warp")
    assert_kernel_error(divergent_wait, kiln.ConvergenceError, "warp")
    assert_kernel_error(odd_width, kiln.KernelTypeError, "kiln.local(f32, N // 2)")
    assert_kernel_error(plain_tile, kiln.KernelTypeError, "(k // 8, rows, 8)")
    assert_kernel_error(short_tile, kiln.KernelTypeError, "at least (2, 128, 8)")
    assert_kernel_error(mixed, kiln.KernelTypeError, "one element type")
    assert_kernel_error(global_tile, kiln.KernelTypeError, "kiln.shared array")


@kiln.kernel
def unaligned_depth(c: f32[:, :]):
    sa = kiln.shared(bf16, (4, 64, 8))
    acc = kiln.local(f32, 4)
    kiln.wgmma(acc, sa, 0, 4, sa, 0, 0)  # error


@kiln.kernel
def rows_outside(c: f32[:, :]):
    sa = kiln.shared(bf16, (2, 72, 8))
    acc = kiln.local(f32, 4)
    kiln.wgmma(acc, sa, 16, 0, sa, 0, 0)  # error


@kiln.kernel
def negative_wait(c: f32[:, :]):
    kiln.wgmma_wait(-1)  # error


@pytest.mark.parametrize("kernel, fragment", [
    (unaligned_depth, "a multiple of 8 from 0 to 16"),
    (rows_outside, "outside sa (0 to 8)"),
    (negative_wait, "at least 0"),
], ids=["unaligned_depth", "rows_outside", "negative_wait"])
@pytest.mark.parametrize("warpgroup", [False, True], ids=["scalar", "native"])
def test_constant_positions_are_checked(kernel: kiln.Kernel, fragment: str,
                                        warpgroup: bool) -> None:
    program = kernel.program((f32[:, :],))
    with pytest.raises(kiln.KernelTypeError, match=fragment.replace("(", r"\(")
                       .replace(")", r"\)")) as info:
        for stage in pipeline_for(None, matrix_units=True, warpgroup_mma=warpgroup):
            program = stage(program)
    assert info.value.loc is not None and info.value.loc.line == marked_line(kernel)


def test_accumulator_must_be_local_f32() -> None:
    @kiln.kernel
    def wide(c: f32[:, :]):
        acc = kiln.local(f64, 4)
        kiln.wgmma_store(c, 0, 0, acc)  # error

    assert_kernel_error(wide, kiln.KernelTypeError, "kiln.local(f32, N // 2)")
