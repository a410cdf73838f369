"""The checks and the pipelines of kiln.ir.passes. The convergence check: barriers every
thread of a block reaches compile; others are rejected at the barrier (or the call reaching
one), naming the divergent control flow. Also the structural check of hand-built IR, the
device feature check, the pipelines and deep copies of IR.

Rejected kernels mark the line the error must point at with `# error`, and the line of the
control flow the message must name with `# why`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

import kiln
from kiln import f32, i32, i64
from kiln.builtin_backends.interp import backend as interp
from kiln.framework.backend import Capabilities, DeviceKind
from kiln.ir import nodes as ir
from kiln.ir.enums import MemorySpace
from kiln.ir.intrinsics import atomic_capabilities
from kiln.ir.passes import (
    InternalError,
    check_program,
    default_pipeline,
    device_feature_check,
    fold_constants,
    inline_aggregate_returns,
    inline_functions,
    lower_aggregates,
    lower_bf16,
    lower_matrix_ops,
    pipeline_for,
    remove_dead_code,
)
from kiln.ir.types import ArrayType, void
from tests.helpers import LOC, at_loc, const, kernel_program, marked_line, var

HERE = str(Path(__file__).resolve())


# ---------------------------------------------------------------- device functions


@kiln.func
def block_step(s: f32[:], t: i32, k: i32):
    if t < k:
        s[t] += s[t + k]
    kiln.barrier()


@kiln.func
def calls_block_step(s: f32[:], t: i32):
    block_step(s, t, 1)


@kiln.func
def barrier_if_positive(x: i32):
    if x > 0:  # why
        kiln.barrier()  # error


@kiln.func
def returns_early_then_syncs(x: i32):
    if x == 0:
        return  # why
    kiln.barrier()  # error


@kiln.func
def is_even(x: i32) -> kiln.bool_:
    if x % 2 == 0:  # noqa: SIM103 - an early return that depends on the argument
        return True
    return False


# ---------------------------------------------------------------- accepted


@kiln.kernel
def uniform_loop(a: f32[:], n: i32):
    s = kiln.shared(f32, 64)
    for j in range(n):
        s[kiln.thread_idx.x] = a[j]
        kiln.barrier()


@kiln.kernel
def block_varying_while(a: f32[:]):
    s = kiln.shared(f32, 256)
    t = kiln.thread_idx.x
    s[t] = a[kiln.global_id(0)]
    kiln.barrier()
    k = kiln.block_dim.x // 2
    while k > 0:
        if t < k:
            s[t] += s[t + k]
        kiln.barrier()
        k //= 2
    if t == 0:
        a[kiln.block_idx.x] = s[0]


@kiln.kernel
def uniform_early_return(a: f32[:], n: i32):
    if n <= 0:
        return
    kiln.barrier()
    a[kiln.global_id(0)] = 1.0


@kiln.kernel
def block_dependent_if(a: f32[:]):
    if kiln.block_idx.x % 2 == 0:
        kiln.barrier()
    a[0] = 1.0


@kiln.kernel
def shared_value_loop(a: f32[:]):
    s = kiln.shared(f32, 1)
    if kiln.thread_idx.x == 0:
        s[0] = a[0]
    kiln.barrier()
    while s[0] > 1.0:
        kiln.barrier()
        if kiln.thread_idx.x == 0:
            s[0] = s[0] / 2.0
        kiln.barrier()


@kiln.kernel
def after_thread_loop(a: f32[:], n: i32):
    i = kiln.global_id(0)
    while i < n:
        a[i] = 0.0
        i += kiln.global_size(0)
    kiln.barrier()


@kiln.kernel
def uniform_break(a: f32[:], n: i32):
    for j in range(16):
        if j == n:
            break
        kiln.barrier()


@kiln.kernel
def thread_args_uniform_call(a: f32[:]):
    s = kiln.shared(f32, 64)
    t = kiln.thread_idx.x
    s[t] = a[t]
    kiln.barrier()
    calls_block_step(s, t)
    if is_even(kiln.block_idx.x):
        block_step(s, t, 2)


@kiln.kernel
def thread_if_without_barrier(a: f32[:]):
    t = kiln.thread_idx.x
    x = 0.0
    if t % 2 == 0:
        x = a[t]
    kiln.barrier()
    a[t] = x


@kiln.kernel
def after_thread_break_of_inner_loop(a: f32[:]):
    for _j in range(4):
        k = 0
        while True:
            if k == kiln.thread_idx.x:
                break
            k += 1
        kiln.barrier()


@kiln.kernel
def after_thread_return_in_callee(a: f32[:]):
    x = is_even(kiln.thread_idx.x)
    kiln.barrier()
    if x:
        a[kiln.thread_idx.x] = 1.0


ACCEPTED = [uniform_loop, block_varying_while, uniform_early_return, block_dependent_if,
            shared_value_loop, after_thread_loop, uniform_break, thread_args_uniform_call,
            thread_if_without_barrier, after_thread_break_of_inner_loop,
            after_thread_return_in_callee]


@pytest.mark.parametrize("kernel", ACCEPTED, ids=[k.name for k in ACCEPTED])
def test_accepted(kernel: kiln.Kernel) -> None:
    assert "barrier()" in kernel.ir()


# ---------------------------------------------------------------- rejected


@kiln.kernel
def barrier_under_thread_if(a: f32[:]):
    if kiln.thread_idx.x < 16:  # why
        kiln.barrier()  # error
    a[0] = 1.0


@kiln.kernel
def barrier_in_global_id_loop(a: f32[:]):
    for j in range(kiln.global_id(0)):  # why
        a[j] = 0.0
        kiln.barrier()  # error


@kiln.kernel
def barrier_in_grid_stride_loop(a: f32[:], n: i32):
    i = kiln.global_id(0)
    while i < n:  # why
        a[i] = 0.0
        kiln.barrier()  # error
        i += kiln.global_size(0)


@kiln.kernel
def barrier_after_thread_return(a: f32[:], n: i32):
    i = kiln.global_id(0)
    if i >= n:
        return  # why
    a[i] = 1.0
    kiln.barrier()  # error


@kiln.kernel
def barrier_before_thread_break(a: f32[:]):
    for j in range(16):
        kiln.barrier()  # error
        if j == kiln.thread_idx.x:
            break  # why


@kiln.kernel
def barrier_after_thread_continue(a: f32[:]):
    for j in range(16):
        if j == kiln.thread_idx.x:
            continue  # why
        kiln.barrier()  # error


@kiln.kernel
def call_under_thread_if(a: f32[:]):
    s = kiln.shared(f32, 64)
    t = kiln.thread_idx.x
    if a[t] > 0.0:  # why
        block_step(s, t, 1)  # error


@kiln.kernel
def nested_call_under_thread_while(a: f32[:]):
    s = kiln.shared(f32, 64)
    t = kiln.thread_idx.x
    while t < 64:  # why
        calls_block_step(s, t)  # error
        t += 32


@kiln.kernel
def thread_argument_reaches_barrier_condition(a: f32[:]):
    barrier_if_positive(kiln.thread_idx.x)


@kiln.kernel
def thread_argument_reaches_early_return(a: f32[:]):
    returns_early_then_syncs(kiln.thread_idx.x % 2)


@kiln.kernel
def local_assigned_under_thread_if(a: f32[:]):
    k = 0
    if kiln.thread_idx.x == 0:
        k = 1
    if k == 1:  # why
        kiln.barrier()  # error


@kiln.kernel
def loop_carried_thread_value(a: f32[:]):
    x = 0
    for _j in range(4):
        if x > 0:  # why
            kiln.barrier()  # error
        x = kiln.thread_idx.x


@kiln.kernel
def atomic_result_condition(counter: i32[:]):
    old = kiln.atomic_add(counter, 0, 1)
    if old == 0:  # why
        kiln.barrier()  # error


@kiln.kernel
def private_array_condition(a: f32[:]):
    p = kiln.local(f32, 4)
    p[0] = 1.0
    if p[0] > 0.0:  # why
        kiln.barrier()  # error


@kiln.kernel
def convergent_call_in_short_circuit(a: f32[:], out: i32[:]):
    s = kiln.shared(f32, 64)
    if (kiln.thread_idx.x < 4  # why
            and synced_is_positive(s, kiln.thread_idx.x)):  # error
        out[0] = 1


@kiln.func
def synced_is_positive(s: f32[:], t: i32) -> kiln.bool_:
    kiln.barrier()
    return s[t] > 0.0


REJECTED = [
    (barrier_under_thread_if, None, "the `if`"),
    (barrier_in_global_id_loop, None, "the `for` loop"),
    (barrier_in_grid_stride_loop, None, "the `while` loop"),
    (barrier_after_thread_return, None, "the early `return`"),
    (barrier_before_thread_break, None, "the `break`"),
    (barrier_after_thread_continue, None, "the `continue`"),
    (call_under_thread_if, None, "the `if`"),
    (nested_call_under_thread_while, None, "the `while` loop"),
    (thread_argument_reaches_barrier_condition, barrier_if_positive, "the `if`"),
    (thread_argument_reaches_early_return, returns_early_then_syncs, "the early `return`"),
    (local_assigned_under_thread_if, None, "the `if`"),
    (loop_carried_thread_value, None, "the `if`"),
    (atomic_result_condition, None, "the `if`"),
    (private_array_condition, None, "the `if`"),
    (convergent_call_in_short_circuit, None, "the `and`"),
]


@pytest.mark.parametrize(("kernel", "where", "control"), REJECTED,
                         ids=[k.name for k, _, _ in REJECTED])
def test_rejected(kernel: kiln.Kernel, where: kiln.DeviceFunction | None, control: str) -> None:
    with pytest.raises(kiln.ConvergenceError) as info:
        kernel.ir()
    exc = info.value
    where = where or kernel
    assert exc.loc is not None
    assert (exc.loc.file, exc.loc.line) == (HERE, marked_line(where))
    assert f"{control} at line {marked_line(where, '# why')}" in exc.message
    assert "every thread of a block must reach it" in exc.message


def test_message_names_the_barrier_or_the_call() -> None:
    with pytest.raises(kiln.ConvergenceError, match=r"barrier\(\) is inside control flow "
                       "that depends on the thread index"):
        barrier_under_thread_if.ir()
    with pytest.raises(kiln.ConvergenceError, match="the call of `block_step"):
        call_under_thread_if.ir()


# ---------------------------------------------------------------- the structural check

INVALID = {
    "binop operand types": [at_loc(ir.Assign("x", ir.BinOp(i32, "+", var("n"),
                                                               const(1, i64))))],
    "assign type": [at_loc(ir.Assign("x", const(1.0, f32)))],
    "index count": [at_loc(ir.Store(var("a", f32[:]), [const(0), const(0)], const(1.0, f32)))],
    "float index": [at_loc(ir.Store(var("a", f32[:]), [const(0.0, f32)], const(1.0, f32)))],
    "int condition": [at_loc(ir.If(var("n"), [ir.Break()]))],
    "unknown variable": [at_loc(ir.Assign("x", var("y")))],
    "break outside loop": [at_loc(ir.Break())],
    "compare result": [at_loc(ir.Assign("x", ir.Compare(i32, "<", var("n"), const(1))))],
    "integer division": [at_loc(ir.Assign("x", ir.BinOp(i32, "/", var("n"), const(2))))],
    "kernel returns value": [at_loc(ir.Return(const(1)))],
    "intrinsic types": [at_loc(ir.Assign("x", ir.IntrinsicCall(i32, "sqrt", [var("n")])))],
    "undeclared call": [at_loc(ir.Assign("x", ir.Call(i32, "f", [])))],
    "float constant of int type": [at_loc(ir.Assign("x", const(1.5)))],
}


@pytest.mark.parametrize("body", INVALID.values(), ids=INVALID.keys())
def test_invalid_ir_is_an_internal_error_at_the_node(body: list[ir.Stmt]) -> None:
    with pytest.raises(InternalError, match="bug in kiln") as info:
        check_program(kernel_program(body, {"x": i32}))
    assert info.value.loc == LOC


def test_shared_array_in_device_function_is_rejected() -> None:
    func = ir.Function("f", [], void, [], {"s": ArrayType(f32, 1, MemorySpace.SHARED, (4,))},
                       loc=LOC)
    with pytest.raises(kiln.UnsupportedError, match="only be declared in a kernel"):
        check_program(kernel_program([], functions=[func]))


def test_check_program_returns_the_program() -> None:
    program = kernel_program([ir.Assign("x", const(1, i64)),
                              ir.Assign("x", ir.BinOp(i64, "+", var("x", i64),
                                                      const(2**63 - 1, i64)))], {"x": i64})
    assert check_program(program) is program


# ---------------------------------------------------------------- device features


def caps(**changes: object) -> Capabilities:
    base = Capabilities(
        backend="test", name="Tiny GPU", kind=DeviceKind.GPU, max_threads_per_block=256,
        max_block_dims=(256, 256, 64), max_grid_dims=(65535, 65535, 65535),
        shared_memory_per_block=1024, compute_units=1, global_memory=2**20, warp_size=32,
        fp64=True, fp16=True,
        atomics=atomic_capabilities(frozenset({kiln.i32, kiln.u32, kiln.f32})))
    return dataclasses.replace(base, **changes)


@kiln.kernel
def uses_f64(a: f32[:]):
    x = kiln.f64(a[0]) * 0.5  # error
    a[0] = f32(x)


@kiln.kernel
def uses_f16(a: kiln.f16[:]):
    a[0] = a[1]  # error


@kiln.kernel
def f64_atomic(a: kiln.f64[:]):
    kiln.atomic_add(a, 0, 1.0)  # error


@kiln.kernel
def uses_i64(a: f32[:], n: i32):
    k = i64(n) * 3  # error
    a[0] = f32(k)


@kiln.kernel
def bool_array(flags: kiln.bool_[:]):  # error
    flags[0] = True


@kiln.kernel
def big_shared(a: f32[:]):
    s = kiln.shared(f32, (16, 17))
    s[0, 0] = a[0]


FEATURES = [
    (uses_f64, caps(fp64=False), "f64 (double precision)"),
    (uses_f16, caps(fp16=False), "f16 (half precision)"),
    (f64_atomic, caps(), "atomic_add on f64 elements"),
    (uses_i64, caps(scalar_types=frozenset({"i32", "f32"})), "i64 values"),
    (bool_array, caps(storage_types=frozenset({"i32", "f32"})),
     "arrays of bool_ in device memory"),
]


@pytest.mark.parametrize(("kernel", "capabilities", "feature"), FEATURES,
                         ids=[k.name for k, _, _ in FEATURES])
def test_device_feature_errors(kernel, capabilities, feature) -> None:
    program = kernel.program(tuple(t for _, t in kernel.signature))
    with pytest.raises(kiln.DeviceFeatureError) as info:
        device_feature_check(capabilities)(program)
    assert f"{feature} is not supported by device 'Tiny GPU' (test)" in info.value.message
    assert (info.value.loc.file, info.value.loc.line) == (HERE, marked_line(kernel))


def test_shared_memory_limit() -> None:
    program = big_shared.program((f32[:],))
    with pytest.raises(kiln.DeviceFeatureError, match="need 1088 bytes per block but device "
                       "'Tiny GPU' \\(test\\) has 1024"):
        device_feature_check(caps())(program)
    assert device_feature_check(caps(shared_memory_per_block=1088))(program) is program


def test_supported_features_pass() -> None:
    for kernel in (uses_f64, uses_f16, f64_atomic, uses_i64, bool_array):
        program = kernel.program(tuple(t for _, t in kernel.signature))
        full = caps(atomics=atomic_capabilities())
        assert device_feature_check(full)(program) is program


# ---------------------------------------------------------------- pipelines


class FakeBackend:
    name = "fake"
    supports_recursion = True
    intrinsic_namespaces = ("interp",)

    def intrinsic_implementation(self, name: str) -> Any:
        return interp.intrinsic_implementation(name)  # it runs what the interp runs


class FakeDevice:
    """What pipeline_for reads from a device: its capabilities and backend."""

    capabilities = caps(fp64=False)
    backend = FakeBackend()


def test_pipelines() -> None:
    scalar_matrix = lower_matrix_ops(False)
    assert list(default_pipeline()) == [scalar_matrix, inline_aggregate_returns, lower_aggregates,
                                        lower_bf16, fold_constants, remove_dead_code]
    assert pipeline_for(None) == default_pipeline()
    assert list(pipeline_for(None, matrix_units=True)) == [lower_matrix_ops(True),
                                                           *default_pipeline()[1:]]
    inlining = pipeline_for(None, inline=True)  # recursion bounded ([3]) before inlining
    assert list(inlining.without("recursion")) == [*default_pipeline(), inline_functions]
    with_device = pipeline_for(FakeDevice())  # type: ignore[arg-type]
    assert with_device[5:-1] == default_pipeline()[3:]  # registered operations lowered at [3]
    assert with_device[-1].__name__ == "check_intrinsic_implementations"
    passes = pipeline_for(FakeDevice(), inline=True)  # type: ignore[arg-type]
    assert passes[:3] == [scalar_matrix, inline_aggregate_returns, lower_aggregates]
    assert passes[6:-1] == [lower_bf16, fold_constants, remove_dead_code, inline_functions]
    with pytest.raises(kiln.DeviceFeatureError):
        passes[4](uses_f64.program((f32[:],)))


def test_pipeline_stages_by_name() -> None:
    """A backend edits the shared pipeline by stage name; an unknown name is a KeyError
    that lists the stages."""
    shared = pipeline_for(FakeDevice(), inline=True)  # type: ignore[arg-type]
    assert shared.names == ("matrix", "returns", "aggregates", "operations", "features",
                            "recursion", "bf16", "fold", "dead_code", "inline",
                            "implementations")
    assert shared.stage("fold") is fold_constants
    dropped = shared.without("fold")
    assert fold_constants not in list(dropped) and len(dropped) == len(shared) - 1
    native = shared.replace("matrix", lower_matrix_ops(True))
    assert native[0] == lower_matrix_ops(True) and native[1:] == shared[1:]
    assert list(shared.then("extra", remove_dead_code))[-1] is remove_dead_code
    with pytest.raises(KeyError, match="no pipeline stage 'nope'.*matrix"):
        shared.without("nope")


def test_deep_copies_of_ir_share_types() -> None:
    """A pass outside kiln may copy IR with copy.deepcopy; scalar types stay the objects
    that code compares by identity."""
    import copy

    program = uses_f64.program((f32[:],))
    clone = copy.deepcopy(program)
    assert clone is not program and clone.kernel is not program.kernel
    assert clone.kernel.params[0].type is program.kernel.params[0].type
    assert copy.deepcopy(kiln.f16) is kiln.f16 and copy.copy(f32[:]) == f32[:]
