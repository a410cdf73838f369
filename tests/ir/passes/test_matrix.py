"""Matrix multiply-accumulate (`kiln.mma` and its fragments) and asynchronous copies: the
same results on every available backend (the scalar form on interp, cpu and OpenCL, the
tensor cores on CUDA sm_80+), against NumPy; the tf32 rounding; the tensor-core GEMM of
`kiln.examples`; the native CUDA form compiled by NVRTC (no GPU needed); and the errors."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import kiln
from kiln import bf16, f16, f32, f64, i32
from kiln.examples import (
    make_matmul_f32,
    make_matmul_mma,
    make_matmul_tf32x3,
    matmul_mma_launch,
)
from tests.helpers import assert_kernel_error

DEVICES = kiln.devices()
DTYPES = {bf16: ml_dtypes.bfloat16, f16: np.float16, f32: np.float32}


def tf32(x: np.ndarray) -> np.ndarray:
    """kiln's tf32 rounding in NumPy float32 arithmetic (Veltkamp's split: 11 significant
    bits, to nearest; from 2^100 up, infinities and NaN unchanged)."""
    x = np.asarray(x, np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        c = x * np.float32(8193)
        high = c - (c - x)
    return np.where(np.abs(x) < np.float32(2.0**100), high, x).astype(np.float64)


def fragment_kernel(elem: kiln.ScalarType) -> kiln.Kernel:
    """One warp per 16 x 8 tile of c, fragments loaded straight from global memory."""
    depth = 8 if elem == f32 else 16

    @kiln.kernel
    def tiles(a: elem[:, :], b: elem[:, :], c: f32[:, :]):  # type: ignore[valid-type]
        fa = kiln.local(kiln.fragment_a(elem), 1)
        fb = kiln.local(kiln.fragment_b(elem), 2)
        acc = kiln.local(f32, 4)
        for i in range(4):
            acc[i] = 1.0  # accumulates onto what is there
        row = kiln.block_idx.y * 16
        col = kiln.block_idx.x * 8
        k = 0
        while k < a.shape[1]:
            fa[0] = kiln.mma_load_a(a, row, k)
            fb[1] = kiln.mma_load_b(b, k, col)
            kiln.mma(acc, 0, fa[0], fb[1])
            k += depth
        kiln.mma_store(c, row, col, acc, 0)

    return tiles


def operands(elem: kiln.ScalarType, m: int, n: int, k: int, seed: int
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(DTYPES[elem])
    b = rng.standard_normal((k, n)).astype(DTYPES[elem])
    wide = (tf32(a), tf32(b)) if elem == f32 else (a.astype(np.float64), b.astype(np.float64))
    return a, b, wide[0] @ wide[1]


def supports(device: kiln.Device, elem: kiln.ScalarType) -> bool:
    return elem != f16 or device.capabilities.fp16


@pytest.mark.parametrize("elem", [bf16, f16, f32], ids=str)
@pytest.mark.parametrize("device", DEVICES, ids=[d.backend.name for d in DEVICES])
def test_fragments_from_global_memory(device: kiln.Device, elem: kiln.ScalarType) -> None:
    if not supports(device, elem):
        pytest.skip(f"{device.name} has no f16")
    a, b, ref = operands(elem, 32, 16, 48, seed=3)
    c = np.full((32, 16), np.nan, np.float32)
    kiln.launch(fragment_kernel(elem), (2, 2), 32, (a, b, c), device=device)
    device.synchronize()
    np.testing.assert_allclose(c, ref + 1.0, rtol=1e-5, atol=1e-5)


def test_scalar_forms_agree_bit_for_bit(interp: kiln.Device) -> None:
    others = [d for d in DEVICES if d.backend.name in ("cpu", "opencl")]
    for elem in (bf16, f32):
        a, b, _ = operands(elem, 16, 8, 32, seed=4)
        results = []
        for device in [interp, *others]:
            c = np.zeros((16, 8), np.float32)
            kiln.launch(fragment_kernel(elem), (1, 1), 32, (a, b, c), device=device)
            device.synchronize()
            results.append(c)
        for other in results[1:]:
            np.testing.assert_array_equal(other, results[0])


def test_tf32_rounding_keeps_11_bits_and_specials(interp: kiln.Device) -> None:
    values = np.array([1 + 2.0**-11, 1 + 3 * 2.0**-12, 1.0009765, -3.14159265, 1e-30,
                       2.0**101, np.inf, -np.inf, 7.0, 0.0, 0.1, 1 - 2.0**-13, 65504.7,
                       -1e20, 3.0, 5.0], np.float32)
    a = np.zeros((16, 8), np.float32)
    a[:, 0] = values  # column 0 of a times row 0 of b (ones) puts the values in every column
    b = np.zeros((8, 8), np.float32)
    b[0, :] = 1.0
    c = np.zeros((16, 8), np.float32)
    kiln.launch(fragment_kernel(f32), (1, 1), 32, (a, b, c), device=interp)
    got = (c[:, 0] - np.float32(1.0)).astype(np.float64)
    assert np.isinf(got[6]) and np.isinf(got[7]) and got[5] == 2.0**101  # unrounded
    rounded = tf32(values)[np.isfinite(values)]
    mantissa, _ = np.frexp(rounded)
    assert np.all(mantissa * 2**11 == np.round(mantissa * 2**11))  # 11 significant bits
    exact = values[np.isfinite(values)].astype(np.float64)
    _, exponent = np.frexp(exact)
    assert np.all(np.abs(rounded - exact) <= np.ldexp(1.0, exponent - 12))  # to nearest
    small = np.abs(values) < 1e6  # where adding 1 keeps the rounded value exact
    np.testing.assert_array_equal(got[small], (tf32(values) + 1).astype(np.float32)[small] - 1)


@pytest.mark.parametrize("device", DEVICES, ids=[d.backend.name for d in DEVICES])
def test_pipelined_gemm_example(device: kiln.Device) -> None:
    """The example GEMM (shared-memory fragments, cp.async pipeline); small tiles except
    on CUDA, where the default kernel runs."""
    small = device.backend.name != "cuda"
    kernel = (make_matmul_mma(bf16, bm=32, bn=32, bk=16, wm=16, wn=16) if small
              else make_matmul_mma(bf16))
    m, n, k = (64, 32, 48) if small else (256, 256, 96)
    if device.backend.name == "cpu":
        kernel, (m, n, k) = make_matmul_mma(bf16, bm=16, bn=8, bk=16, wm=16, wn=8), (32, 16, 32)
    a, b, ref = operands(bf16, m, n, k, seed=5)
    c = np.full((m, n), np.nan, np.float32)
    matmul_mma_launch(kernel, a, b, c, device=device)
    device.synchronize()
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("elem,stages", [(f16, 3), (f32, 2)], ids=["f16", "tf32"])
def test_pipelined_gemm_other_types(interp: kiln.Device, elem: kiln.ScalarType,
                                    stages: int) -> None:
    kernel = make_matmul_mma(elem, bm=32, bn=16, bk=16, wm=16, wn=16, stages=stages)
    a, b, ref = operands(elem, 32, 32, 64, seed=6)
    c = np.full((32, 32), np.nan, np.float32)
    matmul_mma_launch(kernel, a, b, c, device=interp)
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-5)


FP32_GEMMS = [d for d in DEVICES if d.backend.name in ("interp", "cuda")]


@pytest.mark.parametrize("device", FP32_GEMMS, ids=[d.backend.name for d in FP32_GEMMS])
def test_fp32_gemm_examples(device: kiln.Device) -> None:
    """The fp32 GEMMs: register-blocked on the FP32 units, and 3xTF32 on the matrix units,
    both as accurate as NumPy's float32 product (about 1e-7 relative)."""
    rng = np.random.default_rng(7)
    a = rng.standard_normal((128, 64)).astype(np.float32)
    b = rng.standard_normal((64, 256)).astype(np.float32)
    ref = a.astype(np.float64) @ b
    small = device.backend.name != "cuda"
    kernels = [make_matmul_f32(8), make_matmul_f32(4),
               make_matmul_tf32x3(32, 32, 16, 16, 16) if small else make_matmul_tf32x3()]
    for kernel in kernels:
        c = np.full((128, 256), np.nan, np.float32)
        matmul_mma_launch(kernel, a, b, c, device=device)
        device.synchronize()
        assert np.linalg.norm(c - ref) / np.linalg.norm(ref) < 1e-6, kernel.name


def test_gemm_launch_checks_shapes(interp: kiln.Device) -> None:
    a = np.zeros((100, 64), ml_dtypes.bfloat16)
    with pytest.raises(ValueError, match="multiples of 128, 128, 32"):
        matmul_mma_launch(make_matmul_mma(bf16), a, np.zeros((64, 128), a.dtype),
                          np.zeros((100, 128), np.float32), device=interp)


@kiln.kernel
def copies(src: f32[:, :], out: f32[:, :]):
    s = kiln.shared(f32, (4, 8))
    t = kiln.thread_idx.x  # 8 threads: each copies 4 floats (16 bytes) of one row half
    kiln.copy_async(s, t // 2, (t % 2) * 4, src, t // 2 + 1, (t % 2) * 4, 4)
    kiln.copy_async_commit()
    kiln.copy_async_wait(0)
    kiln.barrier()
    for j in range(4):
        out[t // 2, (t % 2) * 4 + j] = s[3 - t // 2, (t % 2) * 4 + j]


@pytest.mark.parametrize("device", DEVICES, ids=[d.backend.name for d in DEVICES])
def test_copy_async(device: kiln.Device) -> None:
    src = np.arange(40, dtype=np.float32).reshape(5, 8)
    out = np.zeros((4, 8), np.float32)
    kiln.launch(copies, 1, 8, (src, out), device=device)
    device.synchronize()
    np.testing.assert_array_equal(out, src[1:][::-1])


# ---------------------------------------------------------------- errors


@kiln.kernel
def divergent_mma(a: bf16[:, :], b: bf16[:, :], c: f32[:, :]):
    fa = kiln.local(kiln.fragment_a(bf16), 1)
    if kiln.thread_idx.x < 16:
        fa[0] = kiln.mma_load_a(a, 0, 0)  # error


@kiln.kernel
def wrong_accumulator(a: bf16[:, :], b: bf16[:, :], c: f32[:, :]):
    fa = kiln.local(kiln.fragment_a(bf16), 1)
    fb = kiln.local(kiln.fragment_b(bf16), 1)
    acc = kiln.local(f64, 4)
    kiln.mma(acc, 0, fa[0], fb[0])  # error


@kiln.kernel
def mixed_fragments(a: bf16[:, :], b: f16[:, :], c: f32[:, :]):
    fa = kiln.local(kiln.fragment_a(bf16), 1)
    fb = kiln.local(kiln.fragment_b(f16), 1)
    acc = kiln.local(f32, 4)
    kiln.mma(acc, 0, fa[0], fb[0])  # error


@kiln.kernel
def swapped_operands(a: bf16[:, :], b: bf16[:, :], c: f32[:, :]):
    fa = kiln.local(kiln.fragment_a(bf16), 1)
    acc = kiln.local(f32, 4)
    kiln.mma(acc, 0, fa[0], fa[0])  # error


@kiln.kernel
def integer_matrix(a: i32[:, :]):
    kiln.mma_load_a(a, 0, 0)  # error


@kiln.kernel
def copy_from_shared(out: f32[:, :]):
    s = kiln.shared(f32, (4, 8))
    t = kiln.shared(f32, (4, 8))
    kiln.copy_async(s, 0, 0, t, 0, 0, 4)  # error


def test_errors() -> None:
    assert_kernel_error(divergent_mma, kiln.ConvergenceError, "warp")
    assert_kernel_error(wrong_accumulator, kiln.KernelTypeError, "kiln.local(f32, 4 * tiles)")
    assert_kernel_error(mixed_fragments, kiln.KernelTypeError, "one element type")
    assert_kernel_error(swapped_operands, kiln.KernelTypeError, "B fragment")
    assert_kernel_error(integer_matrix, kiln.KernelTypeError, "f16, bf16, f32")
    assert_kernel_error(copy_from_shared, kiln.KernelTypeError, "from a global f32 array")
    with pytest.raises(TypeError, match="f16, bf16 or f32"):
        kiln.fragment_a(i32)
