"""`@kiln.kernel(debug=True)`: run-time bounds checks on every backend (docs/language.md,
arrays): kernels with records, vectors and views, each checked against its own extent,
and the hidden status array that carries the failures."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import marked_line, requires_backend

import kiln
from kiln import f32, f32x2, i32

BACKENDS = [pytest.param(name, marks=requires_backend(name, f"the {name} backend is missing"))
            for name in ("interp", "cpu", "opencl", "cuda")]


def run(kernel: kiln.Kernel, backend: str, threads: int, *args: object) -> None:
    """One block of `threads` threads, then the synchronisation that reports failures."""
    kiln.launch(kernel, 1, threads, args, device=backend)
    kiln.device(backend).synchronize()


def cuda_ptx(kernel: kiln.Kernel) -> bytes:
    """The kernel's CUDA source (with its debug checks) compiled to PTX by NVRTC."""
    nvrtc = pytest.importorskip("kiln.backends.cuda.nvrtc", reason="cuda-bindings is missing")
    pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-bindings is not installed")
    source = kernel.source("cuda")
    assert "kiln_check_index" in source
    ptx = nvrtc.compile_source(source, kernel.name, nvrtc.options_for("sm_90", "ptx"), "ptx")
    assert b".entry" in ptx
    return ptx


# ---------------------------------------------------------------- records and vectors

@kiln.struct
class Node:
    x: f32
    y: f32


@kiln.kernel(debug=True)
def record_neighbours(nodes: Node[:], v: Node, out: f32[:], n: i32):
    i = kiln.global_id(0)
    if i < n:
        nodes[i].y = nodes[i].x * v.x
        out[i] = nodes[i + 1].x + v.y  # error


@kiln.kernel(debug=True)
def vector_neighbours(a: f32x2[:], s: f32x2, out: f32x2[:], n: i32):
    i = kiln.global_id(0)
    if i < n:
        out[i] = a[i + 1] + s  # error


@pytest.mark.parametrize("backend", BACKENDS)
def test_record_arguments_run_checked_and_written_records_come_back(backend: str) -> None:
    nodes = np.zeros(5, Node.dtype)
    nodes["x"] = np.arange(5)
    out = np.zeros(5, np.float32)
    run(record_neighbours, backend, 8, nodes, Node(2.0, 0.5), out, 4)
    np.testing.assert_array_equal(nodes["y"], [0, 2, 4, 6, 0])  # written: copied back
    np.testing.assert_array_equal(out, [1.5, 2.5, 3.5, 4.5, 0])
    with pytest.raises(kiln.IndexOutOfBoundsError) as info:
        run(record_neighbours, backend, 8, nodes, Node(2.0, 0.5), out, 5)
    assert info.value.message == ("kernel `record_neighbours`: thread (4, 0, 0) of block "
                                  "(0, 0, 0) read `nodes[5]`, outside its 5 elements")
    assert info.value.loc.line == marked_line(record_neighbours)


@pytest.mark.parametrize("backend", BACKENDS)
def test_vector_arguments_run_checked(backend: str) -> None:
    a = np.arange(10, dtype=np.float32).reshape(5, 2)
    out = np.zeros((5, 2), np.float32)
    run(vector_neighbours, backend, 8, a, (10.0, 20.0), out, 4)
    expected = np.zeros((5, 2), np.float32)
    expected[:4] = a[1:] + [10, 20]
    np.testing.assert_array_equal(out, expected)
    with pytest.raises(kiln.IndexOutOfBoundsError) as info:
        run(vector_neighbours, backend, 8, a, (10.0, 20.0), out, 5)
    assert info.value.message == ("kernel `vector_neighbours`: thread (4, 0, 0) of block "
                                  "(0, 0, 0) read `a[5]`, outside its 5 elements")
    assert info.value.loc.line == marked_line(vector_neighbours)


def test_record_and_vector_kernels_compile_for_cuda_with_checks() -> None:
    cuda_ptx(record_neighbours)
    cuda_ptx(vector_neighbours)


# ---------------------------------------------------------------- the status array

@kiln.kernel(debug=True)
def nothing_to_check(a: f32[:], x: f32):
    s = kiln.shared(f32, 64)
    s[kiln.thread_idx.x % 64] = x  # provably inside: no check, so no status array


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_kernel_with_nothing_to_check_launches(backend: str) -> None:
    run(nothing_to_check, backend, 4, np.zeros(1, np.float32), 1.0)
    program = nothing_to_check.compile(backend, f32[:], f32).program
    assert program is not None and not program.checks
