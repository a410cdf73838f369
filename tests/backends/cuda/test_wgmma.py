"""The native form of `kiln.wgmma` on CUDA: `wgmma.mma_async` with shared-memory matrix
descriptors, compiled by NVRTC for sm_90a (no GPU needed), and run on an sm_90 GPU against
NumPy (skipped without one)."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import bf16, f16, f32
from kiln.examples import make_matmul_wgmma, matmul_wgmma_launch
from tests.helpers import backend_entry, requires_backend
from tests.ir.passes.test_matrix_wgmma import product_kernel, run_products

nvrtc = pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-bindings is not installed")

from kiln.builtin_backends.cuda import backend as cuda  # noqa: E402
from kiln.builtin_backends.cuda import nvrtc as kiln_nvrtc  # noqa: E402
from kiln.builtin_backends.cuda.backend import has_warpgroup_mma  # noqa: E402
from kiln.builtin_backends.cuda.dialect import DYNAMIC_SHARED  # noqa: E402
from kiln.builtin_backends.cuda.wgmma import arch_for  # noqa: E402
from kiln.ir.passes import pipeline_for  # noqa: E402

pytestmark = pytest.mark.compiler
TYPES = {bf16: (bf16[:, :], bf16[:, :], f32[:, :]), f16: (f16[:, :], f16[:, :], f32[:, :])}


def hopper_source(elem: kiln.ScalarType, width: int) -> str:
    """The CUDA source of the products kernel lowered for an sm_90 device."""
    program = product_kernel(elem, width).program(TYPES[elem])
    for stage in pipeline_for(None, matrix_units=True, warpgroup_mma=True):
        program = stage(program)
    return cuda.compiler.generate_source(program)


@pytest.mark.parametrize("width", [8, 136, 256], ids=lambda w: f"n{w}")
@pytest.mark.parametrize("elem", [bf16, f16], ids=str)
def test_native_form_compiles_for_sm90a(elem: kiln.ScalarType, width: int) -> None:
    """ptxas accepts the inline PTX for sm_90a (a cubin), and the PTX holds the fence,
    the products, the commit and the wait; accumulators stay in registers."""
    src = hopper_source(elem, width)
    name = product_kernel(elem, width).name
    assert f"kiln_wgmma_pin<{width // 2}>(acc)" in src  # no read of acc above the wait
    assert kiln_nvrtc.compile_source(src, name, kiln_nvrtc.options_for("sm_90a", "cubin"))
    ptx = kiln_nvrtc.compile_source(src, name, kiln_nvrtc.options_for("sm_90a", "ptx"),
                                    "ptx").decode()
    shape = f"m64n{width}k16.f32.{elem.name}.{elem.name}"
    assert ptx.count(f"wgmma.mma_async.sync.aligned.{shape}") == 2
    for op in ("fence.proxy.async.shared::cta", "wgmma.fence.sync.aligned",
               "wgmma.commit_group.sync.aligned", "wgmma.wait_group.sync.aligned 0"):
        assert op in ptx, op
    assert ".local" not in ptx


def test_descriptors_describe_the_core_matrix_layout() -> None:
    """Start at tile[k // 8, row, 0]; k blocks one array block apart (136 rows * 16 bytes
    for A, 64 * 16 for B); core matrices 128 bytes apart along the rows."""
    src = hopper_source(bf16, 64)
    assert "kiln_wgmma_desc(sa, " in src and ", 2176)" in src and ", 1024)" in src
    assert "(uint64_t)(128u >> 4) << 32" in src


def test_only_wgmma_code_targets_sm90a() -> None:
    src = hopper_source(bf16, 8)
    assert arch_for(src, "sm_90") == "sm_90a"
    assert arch_for(src, "sm_100") == "sm_100"
    assert arch_for('#line 3 "my_wgmma.py"\nextern "C" __global__ void f() {}',
                    "sm_90") == "sm_90"


def test_source_uses_the_native_form_only_for_a_hopper_gpu_here() -> None:
    """Kernel.source lowers for the machine's first CUDA GPU; with none it targets any GPU,
    and newer ones than sm_90 lack wgmma."""
    src = product_kernel(bf16, 8).source("cuda", *TYPES[bf16])
    entry = backend_entry("cuda")
    hopper = entry.available and kiln.device("cuda").capabilities.arch == "sm_90"
    assert ("wgmma.mma_async" in src) == hopper


@pytest.mark.gpu
@requires_backend("cuda", "no CUDA GPU")
@pytest.mark.parametrize("width", [8, 64, 256], ids=lambda w: f"n{w}")
@pytest.mark.parametrize("elem", [bf16, f16], ids=str)
def test_wgmma_on_the_gpu_matches_numpy(elem: kiln.ScalarType, width: int) -> None:
    """On sm_90 the tensor cores (the source holds wgmma), elsewhere the scalar form."""
    device = kiln.device("cuda")
    c, ref = run_products(device, elem, width, seed=width)
    np.testing.assert_allclose(c, ref, rtol=0, atol=32 * 2.0**-24 * np.abs(ref).max() + 1e-6)
    native = has_warpgroup_mma(device)
    src = product_kernel(elem, width).source(device.backend, *TYPES[elem])
    assert ("wgmma.mma_async" in src) == native


@pytest.mark.parametrize("bn", [128, 256], ids=lambda n: f"n{n}")
def test_gemm_example_compiles_for_sm90a(bn: int) -> None:
    """The pipelined example: cp.async copies, wgmma m64nNk16 from descriptors, its
    accumulators in registers, shared tiles over 48 KiB in dynamic shared memory."""
    kernel = make_matmul_wgmma(bf16, bm=128, bn=bn, bk=64, stages=3)
    program = kernel.program((bf16[:, :], bf16[:, :], bf16[:, :]))
    for stage in pipeline_for(None, matrix_units=True, warpgroup_mma=True):
        program = stage(program)
    src = cuda.compiler.generate_source(program)
    assert DYNAMIC_SHARED.search(src)
    ptx = kiln_nvrtc.compile_source(src, kernel.name, kiln_nvrtc.options_for("sm_90a", "ptx"),
                                    "ptx").decode()
    assert f"wgmma.mma_async.sync.aligned.m64n{bn}k16.f32.bf16.bf16" in ptx
    assert "cp.async.cg.shared.global" in ptx and ".local" not in ptx
    assert kiln_nvrtc.compile_source(src, kernel.name, kiln_nvrtc.options_for("sm_90a", "cubin"))


@pytest.mark.gpu
@requires_backend("cuda", "no CUDA GPU")
@pytest.mark.parametrize("bn", [128, 256], ids=lambda n: f"n{n}")
def test_gemm_example_on_the_gpu_matches_numpy(bn: int) -> None:
    """The default tiling (96 KiB of shared memory at N = 128) over several block tiles and
    k steps; bf16 results are the f32 sums rounded once."""
    device = kiln.device("cuda")
    kernel = make_matmul_wgmma(bf16, bm=128, bn=bn, bk=64, stages=3)
    rng = np.random.default_rng(bn)
    a = rng.standard_normal((256, 512)).astype(bf16.dtype)
    bt = rng.standard_normal((512, 512)).astype(bf16.dtype)
    c = np.full((256, 512), np.nan, bf16.dtype)
    matmul_wgmma_launch(kernel, a, bt, c, device=device)
    ref = a.astype(np.float64) @ bt.T.astype(np.float64)
    np.testing.assert_allclose(c.astype(np.float64), ref, rtol=2.0**-8, atol=1e-3)
