"""The shared C-family emitter: dialect data, spellings, names, the ABI and #line mapping."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import kiln
from kiln import f32, i32, i64
from kiln.builtin_backends.cpu import CpuEmitter
from kiln.codegen import CEmitter, CExpr, NameTable, abi_values, compile_error, handles, kernel_abi
from kiln.codegen.diagnostics import SourceMap
from kiln.ir import nodes as ir
from kiln.ir.intrinsics import INDEX_BASES, intrinsics
from kiln.ir.passes import lower_thread_loops
from kiln.ir.types import u32
from tests.helpers import marked_line


class GpuDialect(CEmitter):
    """A GPU-style dialect written the way backends write theirs: data, no walker code."""

    spellings = {
        **{f"{b}_{a}": f"{b}.{a}" for b in INDEX_BASES for a in "xyz"},
        "barrier": "sync_block()",
        "atomic_add": "atomicAdd({0}, {1})",
    }
    namespaces = ("gpu_test", "c")
    kernel_qualifier = "__kernel__"
    space_qualifiers = {kiln.backend.MemorySpace.SHARED: "__shared_mem__"}

    @handles(ir.IntrinsicCall, when=lambda e, n: n.name == "exp2")
    def exp2_as_pow(self, call: ir.IntrinsicCall) -> CExpr:
        return CExpr(f"my_exp2({self.expr(call.args[0]).text})")


@kiln.kernel
def sample(x: f32[:, :], out: i64[:], n: i32):
    s = kiln.shared(f32, 64)
    i = kiln.global_id(0)
    s[i % 64] = kiln.exp2(x[i, 1]) + kiln.sqrt(x[1, i])
    kiln.barrier()
    out[i] = i64(n // 3) ** 2 + (i64(i) << 3 & 7)  # error
    kiln.atomic_add(out, 0, i64(1))


def emit(kernel: kiln.Kernel, dialect: type[CEmitter] = GpuDialect) -> str:
    program = kernel.program(kernel._types(()))
    if issubclass(dialect, CpuEmitter):  # a dialect of explicit thread loops
        program = lower_thread_loops(program)
    return dialect().emit(program)


def test_dialect_data_and_registry_spellings() -> None:
    src = emit(sample)
    assert "__kernel__ void sample(float *x, int32_t x_shape0, int32_t x_shape1, " \
           "int64_t *out, int32_t out_shape0, int32_t n) {" in src
    assert "__shared_mem__ float s[64];" in src
    assert "i = block_idx.x * block_dim.x + thread_idx.x;" in src
    assert "s[i & 63] = my_exp2(x[(int64_t)i * x_shape1 + 1]) + " \
           "sqrtf(x[(int64_t)1 * x_shape1 + i]);" in src
    assert "sync_block();" in src
    assert "atomicAdd(&out[0], 1LL);" in src
    assert "kiln_floordiv_i32(n, 3)" in src and "kiln_ipow_i64(" in src
    # the sum may overflow (it wraps, computed unsigned); the shift of a global id may not
    assert "+ (uint64_t)(((int64_t)i << 3LL) & 7LL));" in src
    assert "kiln_floormod" not in src and "kiln_min" not in src  # helpers only when used


def test_line_directives_map_statements_to_the_user_file() -> None:
    src = emit(sample)
    current, mapped = 0, None
    for line in src.splitlines():
        if line.startswith("#line "):
            current = int(line.split()[1]) - 1
            assert line.endswith(('"<kiln>"', f'"{sample.pyfunc.__code__.co_filename}"'))
            continue
        current += 1
        if "kiln_ipow_i64(" in line and "out[i]" in line:
            mapped = current
    assert mapped == marked_line(sample)


def test_literals_and_names() -> None:
    e = CEmitter()
    assert e.literal(1.5, f32).text == "1.5f"
    assert e.literal(1.0, kiln.f64).text == "1.0"
    assert e.literal(float("inf"), f32).text == "(1.0f / 0.0f)"  # constant in initialisers
    assert e.literal(float("-inf"), kiln.f64).text == "(-1.0 / 0.0)"
    assert e.literal(float("nan"), f32).text == "(0.0f / 0.0f)"
    assert e.literal(-2**31, i32).text == "(-2147483647 - 1)"
    assert e.literal(7, i64).text == "7LL" and e.literal(7, u32).text == "7u"
    assert e.literal(3, kiln.i8).text == "(int8_t)3"
    assert e.literal(True, kiln.bool_).text == "true"
    names = NameTable()
    assert [names.add(n) for n in ("int", "x", "kiln_t", "sqrtf", "int_")] == \
        ["int_", "x", "kiln_t_", "sqrtf_", "int__1"]
    assert names.fresh("x") == "x_1"


def test_kernel_abi_flattens_arrays_into_pointer_and_dims() -> None:
    abi = kernel_abi(sample.program(sample._types(())))
    assert [(p.param, p.kind, p.axis) for p in abi] == [
        ("x", "pointer", -1), ("x", "dim", 0), ("x", "dim", 1),
        ("out", "pointer", -1), ("out", "dim", 0), ("n", "scalar", -1)]
    assert abi[2].label == "x.shape[1]"
    x, out = np.zeros((3, 5), np.float32), np.zeros(4, np.int64)
    assert abi_values(abi, [x, out, np.int32(9)], lambda a, _: id(a)) == [
        id(x), 3, 5, id(out), 4, 9]
    typed = abi_values(abi, [x, out, np.int32(9)], lambda a, p: (p.param, p.type.name))
    assert [typed[0], typed[3]] == [("x", "f32"), ("out", "i64")]


@kiln.kernel
def tile(out: f32[:]):
    t = kiln.shared(f32, (4, 8))
    j = kiln.thread_idx.x
    t[2, j] = 1.0
    out[j] = t[2, j]


def test_shared_arrays_use_constant_strides() -> None:
    src = emit(tile)
    assert "t[2 * 8 + j] = 1.0f;" in src and "out[j] = t[2 * 8 + j];" in src


def test_compiler_errors_point_at_the_users_line() -> None:
    from kiln.builtin_backends.cpu.toolchain import compile_command, toolchain

    class Broken(CpuEmitter):
        spellings = {"sqrt": "sqrtf({0}"}  # a dialect bug: unbalanced

    try:
        env = toolchain().env.with_flags("-Dkiln_block_dim_x=1", "-Dkiln_block_dim_y=1",
                                         "-Dkiln_block_dim_z=1")
    except Exception as exc:
        pytest.skip(f"no C compiler: {exc}")
    source = emit(sample, Broken)
    result = subprocess.run(compile_command(env, "/dev/null"), input=source, text=True,
                            capture_output=True)
    assert result.returncode != 0
    error = compile_error(result.stderr, source, "cpu")
    assert isinstance(error, kiln.BackendCompileError)
    assert error.loc is not None and error.loc.line == marked_line(sample, "kiln.sqrt")
    assert "s[i % 64]" in str(error)  # the user's line, with a caret under it


def test_errors_in_generated_code_quote_the_c_line() -> None:
    source = "int a;\nint b = ;\n"
    error = compile_error("<kiln>:2:9: error: expected expression before ';' token", source,
                          "cpu")
    assert error.loc is None
    assert "expected expression" in str(error) and "int b = ;" in str(error)


def test_a_source_map_locates_a_non_c_targets_errors() -> None:
    """Python source has no `#line`: the emitter's map gives the user's line, and a line
    kiln generated itself is quoted."""
    source = "def k(a):\n    a[0] = (\n"
    here = ir.Loc(__file__, 7, 4, 20)
    lines = SourceMap()
    lines.add(2, here)
    lines.add(1, None)
    try:
        compile(source, "<kiln>", "exec")
    except SyntaxError as exc:
        error = lines.error(exc.msg, exc.lineno or 0, source, str(exc), "python")
    assert error.loc == here and "python compiler output" in str(error)
    unmapped = lines.error("bad", 1, source)
    assert unmapped.loc is None and "line 1: def k(a):" in str(unmapped)


class OrderBase(CEmitter):
    spellings = {"sqrt": "base_sqrt({0})", "exp": "base_exp({0})"}
    namespaces = ("order_base_test", "c")


class OrderDerived(OrderBase):
    spellings = {"sqrt": "derived_sqrt({0})"}
    namespaces = ("order_derived_test", *OrderBase.namespaces)


def test_spellings_merge_along_the_mro() -> None:
    assert OrderDerived.implementation("sqrt") == "derived_sqrt({0})"
    assert OrderDerived.implementation("exp") == "base_exp({0})"
    assert OrderDerived.implementation("tan") == CEmitter.implementation("tan") == "tan{f}({0})"
    assert OrderDerived.implementation("thread_idx_x") is None  # C spells math only


def test_a_registered_implementation_wins_where_its_namespace_comes_first() -> None:
    """At each namespace of the chain, what an extension registers there comes before the
    class spellings belonging to it: it overrides the base's own and those of less specific
    classes, and yields to a more specific class's own, as when every spelling was
    registered under its namespace."""
    intrinsics.implement("order_base_test", {"sqrt": "ext_sqrt({0})", "exp": "ext_exp({0})",
                                             "log": "ext_log({0})"})
    assert OrderDerived.implementation("sqrt") == "derived_sqrt({0})"
    assert OrderDerived.implementation("exp") == "ext_exp({0})"
    assert OrderDerived.implementation("log") == "ext_log({0})"  # over CEmitter's
    assert OrderBase.implementation("sqrt") == "ext_sqrt({0})"
    assert CEmitter.implementation("log") == "log{f}({0})"  # not in its chain
    intrinsics.implement("order_derived_test", {"sqrt": "mine({0})"})
    assert OrderDerived.implementation("sqrt") == "mine({0})"


def test_a_misspelt_spelling_is_refused_with_the_class() -> None:
    with pytest.raises(KeyError, match=r"Typo.spellings: unknown intrinsic\(s\) 'sqrtt'"):
        class Typo(CEmitter):
            spellings = {"sqrtt": "sqrt({0})"}
    with pytest.raises(KeyError, match="TypoBackend.spellings: unknown intrinsic"):
        class TypoBackend(kiln.backend.DirectBackend):
            spellings = {"exq": abs}


def test_no_builtin_module_registers_implementations() -> None:
    """kiln's spellings are class data: importing every backend registers nothing (an
    import left out cannot lose a spelling)."""
    code = """
import kiln
from kiln.builtin_backends.cpu import CpuEmitter
from kiln.builtin_backends.cuda.dialect import CudaEmitter
from kiln.builtin_backends.interp import backend as interp
from kiln.builtin_backends.opencl.dialect import OpenCLEmitter
from kiln.ir.intrinsics import intrinsics

chains = {interp.intrinsic_namespaces, CpuEmitter.namespaces, CudaEmitter.namespaces,
          OpenCLEmitter.namespaces}
found = [(name, chain) for name in intrinsics.names() for chain in chains
         if intrinsics.registered(name, chain) is not None]
assert found == [], found
for cls in (CpuEmitter, CudaEmitter, OpenCLEmitter):
    assert set(intrinsics.missing(cls.implementation)) <= set(intrinsics.names("warp")), cls
assert intrinsics.missing(interp.intrinsic_implementation) == []
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
