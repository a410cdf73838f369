"""CUDA code generation without a GPU: every conformance kernel compiles to PTX (sm_90).

NVRTC runs without a driver, so CI keeps the CUDA dialect valid on every commit.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np
import pytest

import kiln
from kiln import examples, f32, f64
from kiln.examples import block_sum
from tests.helpers import backend_entry, requires_backend

nvrtc = pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-bindings is not installed")

from kiln.builtin_backends.cuda import backend as cuda  # noqa: E402
from kiln.builtin_backends.cuda import nvrtc as kiln_nvrtc  # noqa: E402
from kiln.builtin_backends.cuda import shim  # noqa: E402
from kiln.builtin_backends.cuda.backend import compile_cached  # noqa: E402
from kiln.conformance.coverage import conformance_kernels, kernel_programs  # noqa: E402
from kiln.ir.passes import pipeline_for  # noqa: E402

pytestmark = pytest.mark.compiler

PTX_OPTIONS = kiln_nvrtc.options_for("sm_90", "ptx")
KERNELS = sorted(conformance_kernels(), key=lambda k: k.name)


def cuda_source(program: kiln.ir.nodes.Program) -> str:  # type: ignore[name-defined]
    """The CUDA source for a program lowered by the shared pipeline (no GPU here to lower it
    for)."""
    for stage in pipeline_for(None, matrix_units=True):  # source for the newest GPUs
        program = stage(program)
    return cuda.compiler.generate_source(program)


@pytest.mark.parametrize("kernel", KERNELS, ids=[k.name for k in KERNELS])
def test_conformance_kernel_compiles_to_ptx(kernel: kiln.Kernel) -> None:
    for program in kernel_programs(kernel):
        ptx = kiln_nvrtc.compile_source(cuda_source(program), kernel.name, PTX_OPTIONS, "ptx")
        assert b".entry" in ptx and b".target sm_90" in ptx


@kiln.kernel
def add_f64(a: f64[:], x: f64):
    kiln.atomic_add(a, 0, x)


@kiln.kernel
def scale(a: f32[:], s: f32):
    i = kiln.global_id(0)
    a[i] = a[i] * s  # a marker line for the #line test


def test_source_uses_the_cuda_dialect() -> None:
    src = block_sum.source("cuda")
    assert 'extern "C" __global__ void block_sum(' in src
    assert "__shared__ float s[256];" in src
    assert "__syncthreads();" in src and "atomicAdd(&out[0], s[0])" in src
    assert f'"{examples.__file__}"' in src and "#line" in src
    assert "atomicAdd(&a[0], x)" in add_f64.source("cuda")


def test_source_needs_no_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KILN_DISABLE_CUDA", "1")
    assert "__global__" in scale.source("cuda")


def test_nvrtc_errors_point_at_the_python_line() -> None:
    src = scale.source("cuda").replace("a[i] * s;", "a[i] * undefined_name;")
    with pytest.raises(kiln.BackendCompileError) as info:
        kiln_nvrtc.compile_source(src, "scale", PTX_OPTIONS, "ptx")
    lines = Path(__file__).read_text().splitlines()
    marker = next(n for n, line in enumerate(lines, 1) if "a marker line" in line)
    assert info.value.loc is not None and info.value.loc.line == marker
    assert "undefined_name" in str(info.value)


def test_cubin_is_cached_on_disk_and_keyed_by_options(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    src = scale.source("cuda") + "// cache test\n"
    plain = compile_cached(src, "scale", "sm_90")
    assert plain.image[:4] == b"\x7fELF" and list((tmp_path / "cuda").iterdir())
    assert compile_cached(src, "scale", "sm_90") is plain
    fast = compile_cached(src, "scale", "sm_90", fastmath=True)
    assert fast is not plain and len(list((tmp_path / "cuda").iterdir())) == 2
    other_arch = compile_cached(src, "scale", "sm_80")
    assert other_arch.image != plain.image


def test_backend_is_registered_above_cpu() -> None:
    entry = backend_entry("cuda")
    assert entry.priority == 100
    if not entry.available:
        assert entry.reason  # says why (no driver, no GPU, no cuda-bindings)


def test_every_standard_intrinsic_has_a_cuda_spelling() -> None:
    spelled = ("index", "sync", "atomic", "math")  # vector operations are lowered by passes
    missing = kiln.backend.intrinsics.missing(cuda.intrinsic_implementation)
    assert [n for n in missing if kiln.backend.intrinsics[n].category in spelled] == []


def test_raw_kernel_front_rejects_other_backends() -> None:
    k = kiln.RawKernel('extern "C" __global__ void f(float *a) {}', "f", backend="cuda")
    a = kiln.to_device(np.zeros(4, np.float32), "interp")
    with pytest.raises(kiln.LaunchError, match="cuda kernel"):
        k[1, 1](a)


@pytest.mark.parametrize("elem", [kiln.bf16, kiln.f16, kiln.f32], ids=str)
def test_matrix_operations_compile_to_tensor_core_instructions(elem: kiln.ScalarType) -> None:
    """The tensor-core GEMM example: `mma.sync` (m16n8k16, or m16n8k8 for tf32), `ldmatrix`
    for 16-bit fragments from shared memory, `cp.async` with commit and wait; no local
    memory for the fragments and accumulators (their indices are all constants)."""
    kernel = examples.make_matmul_mma(elem)
    src = cuda_source(kernel.program((elem[:, :], elem[:, :], f32[:, :])))
    ptx = kiln_nvrtc.compile_source(src, kernel.name, kiln_nvrtc.options_for("sm_80", "ptx"),
                                    "ptx").decode()
    shape, kind = ("m16n8k8", "tf32") if elem == kiln.f32 else ("m16n8k16", elem.name)
    assert f"mma.sync.aligned.{shape}.row.col.f32.{kind}.{kind}.f32" in ptx
    assert ("ldmatrix.sync.aligned.m8n8.x4.shared.b16" in ptx) == (elem != kiln.f32)
    assert "cp.async.cg.shared.global" in ptx and "cp.async.wait_group 1" in ptx
    assert ".local" not in ptx


def test_large_shared_tiles_use_dynamic_shared_memory() -> None:
    kernel = examples.make_matmul_mma(kiln.bf16, bm=128, bn=256, bk=32, wm=64, wn=64,
                                      stages=4)
    src = cuda_source(kernel.program((kiln.bf16[:, :], kiln.bf16[:, :], f32[:, :])))
    assert "extern __shared__ __align__(16) unsigned char kiln_shared[];" in src
    compiled = kiln.backend.CompiledKernel(kernel.name, (), src)
    done = cuda.compiler.finish(compiled, _FakeDevice())  # type: ignore[arg-type]
    assert done.binary and done.metadata["shared_bytes"] == 4 * (128 * 40 + 32 * 264) * 2


class _FakeDevice:
    class capabilities:
        arch = "sm_90"


@requires_backend("cpu", "no C compiler to build the launch shim")
def test_launch_shim_passes_every_field_to_the_driver_entry() -> None:
    """The C launch shim (kiln/builtin_backends/cuda/shim.py), built with the system compiler,
    calls its entry point with the record's fields in cuLaunchKernel's order; a stand-in
    entry records them (no driver needed)."""
    seen: list[tuple[int, ...]] = []
    entry_type = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *[ctypes.c_uint] * 7,
                                  ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)

    def fake(*args: int | None) -> int:
        seen.append(tuple(a or 0 for a in args))
        return 7

    entry = entry_type(fake)
    address = ctypes.cast(entry, ctypes.c_void_p).value
    keep, arg = shim.record(0x1234, (2, 3, 4), (32, 2, 1), 49152, 0x99, 0x5678, entry=address)
    assert shim.compiled()(arg) == 7
    assert seen == [(0x1234, 2, 3, 4, 32, 2, 1, 49152, 0x99, 0x5678, 0)]


def test_tf32_split_gemm_compiles_without_local_memory() -> None:
    """3xTF32: `kiln.tf32` as the same rounding helper the fragment loads use, three
    tf32 mma per tile, fragments and accumulators in registers."""
    kernel = examples.make_matmul_tf32x3()
    src = cuda_source(kernel.program((f32[:, :], f32[:, :], f32[:, :])))
    assert "__uint_as_float(kiln_tf32(" in src
    ptx = kiln_nvrtc.compile_source(src, kernel.name, PTX_OPTIONS, "ptx").decode()
    assert ptx.count("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32") >= 3 * 16
    assert ".local" not in ptx


def test_dim_launch_variant_compiles_to_ptx() -> None:
    """What `dim=` launches run: the size parameters and the early return, in CUDA."""
    program = scale.sized(2).program((f32[:], f32, kiln.i32, kiln.i32))
    src = cuda_source(program)
    assert "int32_t kiln_size_x" in src and "return;" in src
    ptx = kiln_nvrtc.compile_source(src, "scale", PTX_OPTIONS, "ptx")
    assert b".entry" in ptx
    assert "kiln_size" not in scale.source("cuda")  # explicit launches: the kernel as written


SPECIALS = np.array([np.inf, -np.inf, np.nan, -0.0], np.float32)
SPECIALS_F64 = np.array([np.inf, -np.inf, np.nan, 1e300], np.float64)


@kiln.kernel
def reads_specials(out: f32[:], wide: f64[:]):
    i = kiln.global_id(0)
    out[i] = SPECIALS[i]
    wide[i] = SPECIALS_F64[i]


def test_tables_with_infinities_and_nans_compile_to_constant_memory() -> None:
    """`__constant__` takes no dynamic initialiser (INFINITY is `__int_as_float` here): the
    values are constant expressions, in the PTX's .const data."""
    src = reads_specials.source("cuda")
    assert "(1.0f / 0.0f), (-1.0f / 0.0f), (0.0f / 0.0f)" in src
    ptx = kiln_nvrtc.compile_source(src, "reads_specials", PTX_OPTIONS, "ptx").decode()
    assert ".const .align 4 .b8 _kt_SPECIALS[16] = {0, 0, 128, 127, 0, 0, 128, 255," in ptx
