"""CUDA code generation without a GPU: every conformance kernel compiles to PTX (sm_90).

NVRTC runs without a driver, so CI keeps the CUDA dialect valid on every commit.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import backend_entry

import kiln
from kiln import examples, f32, f64
from kiln.examples import block_sum

nvrtc = pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-bindings is not installed")

from kiln.backends.cuda import backend as cuda  # noqa: E402
from kiln.backends.cuda import nvrtc as kiln_nvrtc  # noqa: E402
from kiln.backends.cuda.backend import compile_cached  # noqa: E402
from kiln.conformance.coverage import conformance_kernels, kernel_programs  # noqa: E402
from kiln.ir.passes import pipeline_for  # noqa: E402

PTX_OPTIONS = kiln_nvrtc.options_for("sm_90", "ptx")
KERNELS = sorted(conformance_kernels(), key=lambda k: k.name)


def cuda_source(program: kiln.ir.nodes.Program) -> str:  # type: ignore[name-defined]
    """The CUDA source for a program lowered by the shared pipeline (no GPU here to lower it
    for)."""
    for stage in pipeline_for(None):
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
    missing = kiln.intrinsics.missing(cuda.intrinsic_namespaces)
    assert [n for n in missing if kiln.intrinsics[n].category in spelled] == []


def test_raw_kernel_front_rejects_other_backends() -> None:
    k = kiln.RawKernel('extern "C" __global__ void f(float *a) {}', "f", backend="cuda")
    a = kiln.to_device(np.zeros(4, np.float32), "interp")
    with pytest.raises(kiln.LaunchError, match="cuda kernel"):
        k[1, 1](a)
