"""The convergence check: barriers every thread of a block reaches compile; others are
rejected at the barrier (or the call reaching one), naming the divergent control flow.

Rejected kernels mark the line the error must point at with `# error`, and the line of the
control flow the message must name with `# why`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from conftest import marked_line

import kiln
from kiln import f32, i32, i64
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
from kiln.ir.printer import format_program
from kiln.ir.types import ArrayType, Type, void
from kiln.ir.visit import walk

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

LOC = ir.Loc("kernel.py", 7, 4)


def var(name: str, t: Type = i32) -> ir.Var:
    return ir.Var(t, name)


def const(value: int | float | bool, t: Type = i32) -> ir.Const:
    return ir.Const(t, value)


def kernel_program(body: list[ir.Stmt], locals_: dict[str, Type] | None = None,
                   params: tuple[tuple[str, Type], ...] = (("a", f32[:]), ("n", i32)),
                   functions: list[ir.Function] | None = None) -> ir.Program:
    kernel = ir.Function("k", [ir.Param(n, t) for n, t in params], void, body,
                         dict(locals_ or {}), is_kernel=True, loc=LOC)
    return ir.Program(kernel, functions or [])


def at_loc(stmt: ir.Stmt) -> ir.Stmt:
    stmt.loc = LOC
    return stmt


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


# ---------------------------------------------------------------- constant folding

INT_TYPES = [kiln.i8, kiln.i16, kiln.i32, kiln.i64, kiln.u8, kiln.u16, kiln.u32, kiln.u64]
FLOAT_TYPES = [kiln.f16, kiln.f32, kiln.f64]


def folded(e: ir.Expr) -> ir.Expr:
    """`e` after fold_constants, as the value of an assignment in a kernel."""
    program = fold_constants(kernel_program([ir.Assign("x", e)], {"x": e.type}))
    return program.kernel.body[0].value


def random_values(t: kiln.ScalarType, rng: np.random.Generator, n: int) -> np.ndarray:
    lo, hi = t.range()
    if t.is_float:
        return (rng.standard_normal(n) * 1000).astype(t.dtype)
    edges = np.array([lo, hi, 0, 1, -1 if lo else 2, lo + 1, hi - 1], dtype=object)
    values = rng.integers(lo, hi, n - len(edges), dtype=t.dtype, endpoint=True)
    return np.concatenate([edges.astype(t.dtype), values])


NUMPY_OPS = {"+": np.add, "-": np.subtract, "*": np.multiply, "&": np.bitwise_and,
             "|": np.bitwise_or, "^": np.bitwise_xor, "//": np.floor_divide,
             "%": np.remainder, "/": np.true_divide}


@pytest.mark.parametrize("t", INT_TYPES + FLOAT_TYPES, ids=str)
def test_folded_arithmetic_matches_numpy(t: kiln.ScalarType) -> None:
    rng = np.random.default_rng(1)
    a, b = random_values(t, rng, 40), random_values(t, rng, 40)[::-1].copy()
    ops = ["+", "-", "*", "/"] if t.is_float else ["+", "-", "*", "&", "|", "^", "//", "%"]
    for op in ops:
        with np.errstate(all="ignore"):
            expected = NUMPY_OPS[op](a, b)
        for x, y, want in zip(a, b, expected):
            if (not t.is_float and y == 0) or (t.is_float and not np.isfinite(want)):
                continue
            if op in ("//", "%") and t.is_signed and x == t.range()[0] and y == -1:
                continue  # NumPy's own overflow rule; checked below
            e = folded(ir.BinOp(t, op, const(x.item(), t), const(y.item(), t)))
            assert isinstance(e, ir.Const), (op, x, y)
            assert e.value == want.item(), (op, x, y)


def test_folded_shifts_and_powers() -> None:
    cases = [
        (kiln.i32, "<<", 1, 31, -(2**31)), (kiln.u8, "<<", 3, 7, 128), (kiln.i32, ">>", -8, 1, -4),
        (kiln.u32, ">>", 2**32 - 1, 31, 1), (kiln.i32, "**", 3, 4, 81),
        (kiln.i32, "**", 2, 31, -(2**31)), (kiln.i32, "**", 2, -1, 0), (kiln.i32, "**", 1, -5, 1),
        (kiln.i32, "**", -1, -3, -1), (kiln.i32, "**", -1, -4, 1),
        (kiln.i32, "//", -(2**31), -1, -(2**31)), (kiln.i32, "%", -7, 2, 1),
        (kiln.i32, "//", -7, 2, -4), (kiln.i64, "//", 7, -2, -4),
    ]
    for t, op, a, b, want in cases:
        e = folded(ir.BinOp(t, op, const(a, t), const(b, t)))
        assert isinstance(e, ir.Const) and e.value == want, (t, op, a, b, e)


@pytest.mark.parametrize(("t", "op", "a", "b"), [
    (kiln.i32, "//", 5, 0), (kiln.i32, "%", 5, 0), (kiln.u64, "//", 5, 0),
    (kiln.i32, "<<", 1, 32), (kiln.i32, ">>", 1, -1), (kiln.f32, "/", 1.0, 0.0),
    (kiln.f32, "*", 3e38, 10.0), (kiln.f32, "%", 5.5, 2.0), (kiln.f64, "**", 2.0, 0.5),
])
def test_undefined_or_library_results_are_not_folded(t, op, a, b) -> None:
    assert isinstance(folded(ir.BinOp(t, op, const(a, t), const(b, t))), ir.BinOp)


def test_folded_casts_match_numpy() -> None:
    rng = np.random.default_rng(2)
    for src in INT_TYPES + FLOAT_TYPES:
        for dst in INT_TYPES + FLOAT_TYPES:
            for x in random_values(src, rng, 12):
                with np.errstate(all="ignore"):
                    want = np.array(x).astype(dst.dtype)
                if dst.is_int and src.is_float:
                    lo, hi = dst.range()
                    if not (np.isfinite(x) and lo <= np.trunc(float(x)) <= hi):
                        assert isinstance(folded(ir.Cast(dst, const(float(x), src))), ir.Cast)
                        continue
                if dst.is_float and not np.isfinite(want):
                    continue
                e = folded(ir.Cast(dst, const(x.item(), src)))
                assert isinstance(e, ir.Const) and e.value == want.item(), (src, dst, x, e)


def test_folded_comparisons_logic_and_selects() -> None:
    true, false = const(True, kiln.bool_), const(False, kiln.bool_)
    flag = var("flag", kiln.bool_)
    assert folded(ir.Compare(kiln.bool_, "<", const(-1), const(2))).value is True
    assert folded(ir.Compare(kiln.bool_, "==", const(0.1, f32), const(0.1, f32))).value is True
    assert folded(ir.UnaryOp(kiln.bool_, "not", true)).value is False
    assert folded(ir.UnaryOp(kiln.u8, "~", const(0, kiln.u8))).value == 255
    assert folded(ir.UnaryOp(i32, "-", const(-(2**31)))).value == -(2**31)
    alone = folded(ir.BoolOp(kiln.bool_, "and", [true, flag]))
    assert isinstance(alone, ir.Var) and alone.name == "flag"
    assert folded(ir.BoolOp(kiln.bool_, "and", [false, flag])).value is False
    assert folded(ir.BoolOp(kiln.bool_, "or", [false, false])).value is False
    kept = folded(ir.BoolOp(kiln.bool_, "or", [flag, true, flag]))
    assert isinstance(kept, ir.BoolOp) and len(kept.values) == 2  # `flag or True`
    assert folded(ir.Select(i32, true, const(1), var("n"))).value == 1
    nested = ir.BinOp(i32, "*", ir.BinOp(i32, "+", const(2), const(3)), var("n"))
    e = folded(nested)
    assert isinstance(e, ir.BinOp) and e.left.value == 5


def test_f32_constants_round_like_the_device() -> None:
    e = folded(ir.BinOp(f32, "+", const(0.1, f32), const(0.2, f32)))
    assert e.value == float(np.float32(0.1) + np.float32(0.2))
    assert e.value != 0.1 + 0.2


def test_fold_does_not_change_its_input() -> None:
    program = kernel_program([ir.Assign("x", ir.BinOp(i32, "+", const(1), const(2)))],
                             {"x": i32})
    fold_constants(program)
    assert isinstance(program.kernel.body[0].value, ir.BinOp)


# ---------------------------------------------------------------- dead code

DEBUG = False


@kiln.kernel
def with_dead_code(a: f32[:], counter: i32[:], n: i32):
    i = kiln.global_id(0)
    unused = a[i] * 2.0  # noqa: F841
    old = kiln.atomic_add(counter, 0, 1)  # noqa: F841
    if DEBUG:
        a[i] = -1.0
    while False:
        a[i] = -2.0
    for _j in range(3, 3):
        a[i] = -3.0
    if i >= n:
        return
        a[i] = -4.0
    a[i] = 1.0


def statements(program: ir.Program) -> list[ir.Stmt]:
    return [n for n in walk(program.kernel.body) if isinstance(n, ir.Stmt)]


def test_remove_dead_code() -> None:
    program = with_dead_code.program((f32[:], i32[:], i32))
    cleaned = remove_dead_code(fold_constants(program))
    text = format_program(cleaned)
    for gone in ("unused", "old", "-1.0", "-2.0", "-3.0", "-4.0", "_j"):
        assert gone not in text, gone
    assert "atomic_add(counter, 0, 1)" in text  # its side effect stays
    assert [type(s).__name__ for s in cleaned.kernel.body] == [
        "Assign", "ExprStmt", "If", "Store"]
    assert set(cleaned.kernel.locals) == {"i"}
    assert "unused" in format_program(program)  # the input is unchanged


def test_dead_code_keeps_reads_and_loops() -> None:
    body = [
        ir.Assign("x", const(0)),
        ir.While(ir.Compare(kiln.bool_, "<", var("x"), var("n")),
                 [ir.Assign("x", ir.BinOp(i32, "+", var("x"), const(1)))]),
        ir.Store(var("a", f32[:]), [const(0)], ir.Cast(f32, var("x"))),
    ]
    cleaned = remove_dead_code(kernel_program(body, {"x": i32}))
    assert format_program(cleaned) == format_program(kernel_program(body, {"x": i32}))


# ---------------------------------------------------------------- inlining


@kiln.func
def clamp01(x: f32) -> f32:
    if x < 0.0:
        return 0.0
    if x > 1.0:
        return 1.0
    return x


@kiln.func
def first_index_of(a: f32[:], value: f32, n: i32) -> i32:
    for j in range(n):
        while a[j] == value:
            return j
    return -1


@kiln.func
def bump(a: f32[:]) -> f32:
    a[0] += 1.0
    return a[0]


@kiln.kernel
def calls_everywhere(a: f32[:], out: i32[:], n: i32):
    i = kiln.global_id(0)
    if i < n and clamp01(a[i]) > 0.5:
        a[i] = clamp01(a[i] * 2.0) + a[0] + bump(a)
    while first_index_of(a, 3.0, n) >= 0:
        a[first_index_of(a, 3.0, n)] = 0.0
    out[i] = first_index_of(a, 2.0, n) if i > 0 else 7


def test_inline_removes_every_call() -> None:
    program = calls_everywhere.program((f32[:], i32[:], i32))
    inlined = inline_functions(program)
    assert inlined.functions == []
    assert not any(isinstance(n, ir.Call) for n in walk(inlined.kernel.body))
    check_program(inlined)  # still valid, typed and convergent IR
    assert len(program.functions) == 3 and any(
        isinstance(n, ir.Call) for n in walk(program.kernel.body))  # input unchanged
    text = format_program(inlined)
    assert "returned" in text  # the return inside loops of first_index_of sets a flag
    assert "while True:" in text
    assert "break\n            break" not in text
    # a[0] is read before bump(a) writes it: it is bound to a temporary first
    lines = [line.strip() for line in text.splitlines()]
    read = lines.index("tmp = (clamp01_result_1 + a[0]): f32")
    assert read < lines.index("a[0] = (a[0] + 1.0): f32")


@kiln.kernel
def calls_clamp(a: f32[:]):
    a[0] = clamp01(a[0])


def test_inline_nests_early_returns_without_a_loop() -> None:
    text = format_program(inline_functions(calls_clamp.program((f32[:],))))
    assert text.endswith('''
    clamp01_x = a[0]: f32
    if clamp01_x < 0.0:
        clamp01_result = 0.0
    elif clamp01_x > 1.0:
        clamp01_result = 1.0
    else:
        clamp01_result = clamp01_x
    a[0] = clamp01_result
''')


def test_recursive_function_cannot_be_inlined() -> None:
    call = ir.Call(i32, "f", [ir.BinOp(i32, "-", var("k"), const(1))], loc=LOC)
    f = ir.Function("f", [ir.Param("k", i32)], i32, [ir.Return(call)], {})
    program = kernel_program([ir.Store(var("out", i32[:]), [const(0)],
                                       ir.Call(i32, "f", [const(3)]))],
                             params=(("out", i32[:]),), functions=[f])
    check_program(program)
    with pytest.raises(kiln.UnsupportedError, match="`f` is recursive") as info:
        inline_functions(program)
    assert info.value.loc == LOC


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


class FakeDevice:
    """What pipeline_for reads from a device: its capabilities and backend."""

    capabilities = caps(fp64=False)
    backend = FakeBackend()


def test_pipelines() -> None:
    scalar_matrix = lower_matrix_ops(False)
    assert default_pipeline() == [scalar_matrix, inline_aggregate_returns, lower_aggregates,
                                  lower_bf16, fold_constants, remove_dead_code]
    assert pipeline_for(None) == default_pipeline()
    assert pipeline_for(None, matrix_units=True) == [lower_matrix_ops(True),
                                                     *default_pipeline()[1:]]
    inlining = pipeline_for(None, inline=True)  # recursion bounded ([3]) before inlining
    assert [*inlining[:3], *inlining[4:]] == [*default_pipeline(), inline_functions]
    with_device = pipeline_for(FakeDevice())  # type: ignore[arg-type]
    assert with_device[5:-1] == default_pipeline()[3:]  # registered operations lowered at [3]
    assert with_device[-1].__name__ == "check_intrinsic_implementations"
    passes = pipeline_for(FakeDevice(), inline=True)  # type: ignore[arg-type]
    assert passes[:3] == [scalar_matrix, inline_aggregate_returns, lower_aggregates]
    assert passes[6:-1] == [lower_bf16, fold_constants, remove_dead_code, inline_functions]
    with pytest.raises(kiln.DeviceFeatureError):
        passes[4](uses_f64.program((f32[:],)))


# ---------------------------------------------------------------- inlining, run


def bump_row_py(a, r):
    a[r, 0] += 1.0
    return a[r, 0]


def find_py(a, r, value, n):
    for j in range(n):
        while a[r, j] == value:
            return j
    return -1


def collatz_steps_py(x):
    steps = 0
    while True:
        if x == 1:
            return steps
        if x % 2 == 0:
            x //= 2
        else:
            x = 3 * x + 1
        steps += 1


def mark_py(out, r):
    if r % 3 == 0:
        return
    out[r, 5] = 1


bump_row = kiln.func(bump_row_py)
find = kiln.func(find_py)
collatz_steps = kiln.func(collatz_steps_py)
mark = kiln.func(mark_py)


def inline_semantics_py(a, out, n, r):
    """What the kernel below computes for row `r`, in Python."""
    v = a[r, 0] + bump_row_py(a, r)
    out[r, 0] = int(v)
    out[r, 1] = find_py(a, r, 3.0, n) if r % 2 == 0 else collatz_steps_py(r + 1)
    k = 0
    while find_py(a, r, 3.0, n) >= 0:
        a[r, find_py(a, r, 3.0, n)] = 0.0
        k += 1
    out[r, 2] = k
    out[r, 3] = int(min(max(a[r, 1], 0.0), 1.0) * 10.0)
    if r > 2 and collatz_steps_py(r) > 3:
        out[r, 4] = 1
    mark_py(out, r)


@kiln.kernel
def inline_semantics(a: f32[:, :], out: i32[:, :], n: i32):
    r = kiln.global_id(0)
    if r < a.shape[0]:
        v = a[r, 0] + bump_row(a, r)
        out[r, 0] = i32(v)
        out[r, 1] = find(a, r, 3.0, n) if r % 2 == 0 else collatz_steps(r + 1)
        k = 0
        while find(a, r, 3.0, n) >= 0:
            a[r, find(a, r, 3.0, n)] = 0.0
            k += 1
        out[r, 2] = k
        out[r, 3] = i32(clamp01(a[r, 1]) * 10.0)
        if r > 2 and collatz_steps(r) > 3:
            out[r, 4] = 1
        mark(out, r)


def run_program(device: kiln.Device, program: ir.Program, grid: int, block: int,
                args: list) -> None:
    """Run an already lowered program on a device through the backend contract."""
    backend, stream = device.backend, device.default_stream.handle
    dims = ((grid, 1, 1), (block, 1, 1))
    if isinstance(backend, kiln.backend.JITBackend):
        compiled = backend.compiler.compile(program, device, kiln.KernelOptions())
        backend.loader.load(compiled, device).launch(*dims, args, stream)
    else:
        backend.execute(program, *dims, args, stream)
    device.synchronize()


def devices_for_inlining() -> list:
    """The interpreter, and OpenCL's first device when there is one (PoCL on a CPU will do)."""
    found = [d for d in kiln.devices() if d.backend.name == "opencl"][:1]
    opencl = found or [pytest.param(None, marks=pytest.mark.skip("no OpenCL device here"))]
    return ["interp", *opencl]


@pytest.mark.parametrize("device", devices_for_inlining(), ids=["interp", "opencl"])
def test_inlined_program_computes_the_same(device: kiln.Device | str) -> None:
    device = kiln.device(device) if isinstance(device, str) else device
    rng = np.random.default_rng(3)
    rows, n = 40, 6
    a0 = rng.integers(0, 5, (rows, n)).astype(np.float32)
    a0[:, 1] = rng.uniform(-0.5, 1.5, rows)
    expected_a, expected_out = a0.copy(), np.zeros((rows, 6), np.int32)
    for r in range(rows):
        inline_semantics_py(expected_a, expected_out, n, r)
    program = inline_semantics.program((f32[:, :], i32[:, :], i32))
    for variant in (program, inline_functions(program)):
        a, out = kiln.to_device(a0.copy(), device), kiln.zeros((rows, 6), i32, device)
        run_program(device, variant, 2, 32, [a, out, np.int32(n)])
        np.testing.assert_array_equal(out.numpy(), expected_out)
        np.testing.assert_array_equal(a.numpy(), expected_a)


def test_deep_copies_of_ir_share_types() -> None:
    """A pass outside kiln may copy IR with copy.deepcopy; scalar types stay the objects
    that code compares by identity."""
    import copy

    program = uses_f64.program((f32[:],))
    clone = copy.deepcopy(program)
    assert clone is not program and clone.kernel is not program.kernel
    assert clone.kernel.params[0].type is program.kernel.params[0].type
    assert copy.deepcopy(kiln.f16) is kiln.f16 and copy.copy(f32[:]) == f32[:]
