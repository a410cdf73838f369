"""Wide loads and stores: `kiln.load` / `kiln.store`, the `VectorAccess` hints that
`lower_aggregates` makes around whole vectors in memory, and the native vector accesses the
CUDA and OpenCL dialects emit for them (the PTX is checked with NVRTC, no GPU needed).
Misuse gets a clear error at the line marked `# error`. The conformance cases in
kiln/conformance/cases/wide.py check the results on every backend."""

from __future__ import annotations

import re
from collections import Counter

import numpy as np
import pytest

import kiln
from kiln import f32, f32x2, f32x4, f64x4, i32, i32x4
from kiln.codegen.vectors import wide_access
from kiln.conformance.cases import aggregates, wide
from kiln.ir import nodes as ir
from kiln.ir.passes import default_pipeline
from kiln.ir.printer import format_program
from kiln.ir.visit import walk
from tests.helpers import assert_kernel_error, requires_backend


def lowered(kernel: kiln.Kernel) -> ir.Program:
    """The kernel's program after the default pipeline, for its annotated types."""
    program = kernel.program(tuple(t for _, t in kernel.signature))  # type: ignore[misc]
    for stage in default_pipeline():
        program = stage(program)
    return program


def hints(program: ir.Program) -> list[ir.VectorAccess]:
    return [n for n in walk(program.kernel.body) if isinstance(n, ir.VectorAccess)]


# ---------------------------------------------------------------- lowering


def test_whole_vectors_in_memory_become_hints_of_16_bytes() -> None:
    groups = hints(lowered(wide.wide_doubles))  # f64x4 load, f64x4 store: 2 x 16 bytes each
    assert [len(g.body) for g in groups] == [2, 2, 2, 2]
    assert all(wide_access(g) is not None for g in groups)
    second = wide_access(groups[1])  # the loads of a[4i + 2], a[4i + 3]
    assert second is not None and len(second.targets) == 2
    index = second.first[0]
    assert isinstance(index, ir.BinOp) and index.right.value == 2  # type: ignore[attr-defined]
    assert not hints(lowered(aggregates.vector_geometry))  # f32x3: no native vector


@kiln.kernel
def uses_two_components(src: f32x4[:], out: f32[:], n: i32):
    i = kiln.global_id(0)
    if i < n:
        p = src[i]
        out[i] = p.x + p.y


@kiln.kernel
def stores_with_effects(out: f32x2[:], counter: f32[:]):
    out[0] = f32x2(kiln.atomic_add(counter, 0, 1.0), 0.0)


def test_dead_code_keeps_whole_vector_loads_and_effects_stay_scalar() -> None:
    (load,) = hints(lowered(uses_two_components))
    assert [s.target for s in load.body] == ["p_x", "p_y", "p_z", "p_w"]  # one 16-byte load
    assert not hints(lowered(stores_with_effects))


def test_printed_ir_names_wide_accesses() -> None:
    text = wide.wide_f32.ir()
    assert "v = load(f32x4, a, i): f32x4" in text
    assert "store(pairs, i, f32x2(" in text
    assert "vector access:" in format_program(lowered(wide.wide_f32))


def _load_group(indices: list[list[ir.Expr]], targets: list[str]) -> ir.VectorAccess:
    a = ir.Var(f32[:], "a")
    return ir.VectorAccess([ir.Assign(t, ir.Load(f32, a, at)) for t, at in zip(targets, indices)])


def test_a_hint_is_only_taken_while_its_body_keeps_the_form() -> None:
    j = ir.Var(i32, "j")

    def at(k: int) -> list[ir.Expr]:
        return [j if k == 0 else ir.BinOp(i32, "+", j, ir.Const(i32, k))]

    good = wide_access(_load_group([at(k) for k in range(4)], ["x", "y", "z", "w"]))
    assert good is not None and good.width == 4 and good.first[0] is j
    assert wide_access(_load_group([at(k) for k in range(3)], ["x", "y", "z"])) is None
    assert wide_access(_load_group([at(k) for k in (1, 0)], ["x", "y"])) is None
    assert wide_access(_load_group([at(0), at(1)], ["j", "y"])) is None  # reads its own load
    consts = wide_access(_load_group([[ir.Const(i32, 6)], [ir.Const(i32, 7)]], ["x", "y"]))
    assert consts is not None and consts.first[0].value == 6  # type: ignore[attr-defined]
    a = ir.Var(f32[:], "a")
    reading = ir.VectorAccess([ir.Store(a, at(k), ir.Load(f32, a, [ir.Const(i32, 0)]))
                               for k in range(2)])
    assert wide_access(reading) is None  # the values read the array stored to


# ---------------------------------------------------------------- CUDA and OpenCL


def _ptx(kernel: kiln.Kernel) -> Counter[str]:
    nvrtc = pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-bindings is not installed")
    del nvrtc
    from kiln.builtin_backends.cuda import nvrtc as kiln_nvrtc

    ptx = kiln_nvrtc.compile_source(kernel.source("cuda"), kernel.name,
                                    kiln_nvrtc.options_for("sm_90", "ptx"), "ptx")
    return Counter(re.findall(r"(?:ld|st)\.(?:global|shared)\.v\d\.\w+", ptx.decode()))


@pytest.mark.parametrize(("kernel", "wanted"), [
    (aggregates.vector_copy, {"ld.global.v4.f32": 1, "st.global.v4.f32": 1}),
    (wide.wide_f32, {"ld.global.v4.f32": 1, "st.global.v4.f32": 1, "st.global.v2.f32": 1}),
    (wide.wide_rows, {"ld.global.v4.f32": 1, "ld.global.v2.f32": 1, "st.global.v4.f32": 1,
                      "st.global.v2.f32": 1}),
    (wide.wide_integers, {"ld.global.v4.u32": 1, "st.global.v4.u32": 1,
                          "ld.global.v2.u32": 1, "st.global.v2.u32": 1}),
    (wide.wide_doubles, {"ld.global.v2.f64": 2, "st.global.v2.f64": 2}),
    (wide.wide_shared, {"ld.shared.v4.f32": 2, "st.shared.v4.f32": 2, "ld.global.v4.f32": 1,
                        "st.global.v4.f32": 1}),
], ids=lambda v: getattr(v, "name", ""))
def test_nvrtc_makes_16_byte_accesses(kernel: kiln.Kernel, wanted: dict[str, int]) -> None:
    found = _ptx(kernel)
    assert all(found[op] >= count for op, count in wanted.items()), found


def test_cuda_source_tests_alignment_and_keeps_a_scalar_path() -> None:
    src = aggregates.vector_copy.source("cuda")
    assert "float4 kiln_v = *(const float4 *)kiln_p;" in src
    assert "if (((uint64_t)kiln_p & 15) == 0) {" in src
    assert "*(float4 *)kiln_p_1 = kiln_v_1;" in src
    shared = wide.wide_shared.source("cuda")
    assert "__shared__ float s[256] __attribute__((aligned(16)));" in shared


@kiln.kernel
def private_vectors(out: f32x4[:]):
    t = kiln.local(f32x4, 2)
    t[0] = f32x4(1.0)
    out[0] = t[0]


def test_private_arrays_keep_scalar_accesses() -> None:
    src = private_vectors.source("cuda")
    assert src.count("*(float4 *)") == 1  # the store to `out` only
    assert "*(const float4 *)" not in src


def test_opencl_source_uses_vector_pointers() -> None:
    src = wide.wide_f32.source("opencl")
    assert "float4 kiln_v = *(__global const float4 *)kiln_p;" in src
    assert "*(__global float2 *)" in src and "(uintptr_t)kiln_p" in src


@pytest.mark.parametrize("backend", [e.name for e in kiln.backends() if e.available])
def test_unaligned_host_arrays(backend: str) -> None:
    """NumPy views 4 and 8 bytes past an aligned address (zero-copy on host devices, so
    OpenCL on PoCL reads them in place through the element fallback)."""
    n = 1000
    src = np.arange(4 * n + 1, dtype=np.float32)[1:].reshape(n, 4)
    dst = np.zeros(4 * n + 2, np.float32)[2:].reshape(n, 4)
    kiln.launch(aggregates.vector_copy, -(-n // 64), 64, (src, dst, np.float32(3), n),
                device=kiln.device(backend))
    np.testing.assert_array_equal(dst, src * 3)


@requires_backend("cuda", "no CUDA GPU")
def test_unaligned_foreign_arrays_take_the_scalar_path() -> None:
    cp = pytest.importorskip("cupy")
    n = 1000
    flat = cp.arange(4 * n + 1, dtype=cp.float32)
    src = flat[1:].reshape(n, 4)  # 4 bytes past an aligned address
    dst = cp.zeros(4 * n + 2, dtype=cp.float32)[2:].reshape(n, 4)
    aggregates.vector_copy[-(-n // 64), 64](src, dst, np.float32(3), n)
    np.testing.assert_array_equal(cp.asnumpy(dst), cp.asnumpy(src) * 3)


# ---------------------------------------------------------------- misuse


@kiln.kernel
def load_of_other_type(a: f32[:], out: i32x4[:]):
    out[0] = kiln.load(i32x4, a, 0)  # error


@kiln.kernel
def load_of_a_scalar_type(a: f32[:], out: f32[:]):
    out[0] = kiln.load(f32, a, 0)  # error


@kiln.kernel
def load_from_vectors(a: f32x4[:], out: f32x4[:]):
    out[0] = kiln.load(f32x4, a, 0)  # error


@kiln.kernel
def load_with_float_index(a: f32[:], out: f32x4[:]):
    out[0] = kiln.load(f32x4, a, 1.5)  # error


@kiln.kernel
def load_with_too_few_indices(m: f32[:, :], out: f32x4[:]):
    out[0] = kiln.load(f32x4, m, 0)  # error


@kiln.kernel
def load_without_index(a: f32[:], out: f32x4[:]):
    out[0] = kiln.load(f32x4, a)  # error


@kiln.kernel
def load_from_a_scalar(x: f32, out: f32x4[:]):
    out[0] = kiln.load(f32x4, x, 0)  # error


@kiln.kernel
def load_at_a_negative_index(a: f32[:], out: f32x4[:]):
    out[0] = kiln.load(f32x4, a, -1)  # error


@kiln.kernel
def store_of_a_scalar(a: f32[:]):
    kiln.store(a, 0, 1.0)  # error


@kiln.kernel
def store_narrowing(a: f32[:], v: f64x4):
    kiln.store(a, 0, v)  # error


@kiln.kernel
def store_as_a_value(a: f32[:], out: f32[:]):
    out[0] = kiln.store(a, 0, f32x2(1.0))  # error


@kiln.kernel
def field_of_a_wide_load(a: f32[:]):
    kiln.load(f32x4, a, 0).x = 1.0  # error


KERNEL_ERRORS = [
    (load_of_other_type, kiln.KernelTypeError, "'a' holds f32 (load a f32x4)"),
    (load_of_a_scalar_type, kiln.KernelTypeError, "a vector type such as f32x4, got 'f32'"),
    (load_from_vectors, kiln.KernelTypeError, "arrays of scalars; 'a' holds f32x4"),
    (load_with_float_index, kiln.KernelTypeError, "array indices must be integers"),
    (load_with_too_few_indices, kiln.KernelTypeError, "2 dimension(s) but kiln.load got 1"),
    (load_without_index, kiln.ArityError, "takes a vector type, an array and its indices"),
    (load_from_a_scalar, kiln.KernelTypeError, "kiln.load needs an array, got f32"),
    (load_at_a_negative_index, kiln.KernelError, "negative indices"),
    (store_of_a_scalar, kiln.KernelTypeError, "kiln.store writes a vector (f32x4, ...), got"),
    (store_narrowing, kiln.KernelTypeError, "cannot assign a f64x4 value to 4 elements of 'a'"),
    (store_as_a_value, kiln.UnsupportedError, "kiln.store(...) is a statement"),
    (field_of_a_wide_load, kiln.UnsupportedError, "can only assign fields of variables"),
]


@pytest.mark.parametrize(("kernel", "cls", "fragment"), KERNEL_ERRORS,
                         ids=[k.name for k, _, _ in KERNEL_ERRORS])
def test_kernel_error(kernel: kiln.Kernel, cls: type, fragment: str) -> None:
    assert_kernel_error(kernel, cls, fragment)


def test_load_and_store_are_kernel_only() -> None:
    with pytest.raises(RuntimeError, match="only be used inside"):
        kiln.load(f32x4, np.zeros(4, np.float32), 0)
    with pytest.raises(RuntimeError, match="only be used inside"):
        kiln.store(np.zeros(4, np.float32), 0, f32x4(1, 2, 3, 4))
