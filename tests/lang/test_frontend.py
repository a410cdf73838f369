"""Unit tests of the frontend: the typed IR that `kernel.program(types)` builds."""

from __future__ import annotations

import math

import numpy as np
import pytest

import kiln
from kiln import f32, f64, i8, i32, i64, u8, u32
from kiln.ir import nodes as ir
from kiln.ir.enums import MemorySpace
from kiln.ir.types import ArrayType, ScalarType, bool_, promote
from kiln.ir.visit import walk

SCALE = 3
OFFSET = 0.5


def program(kernel: kiln.Kernel, *types) -> ir.Program:
    return kernel.program(tuple(types) or tuple(t for _, t in kernel.signature))


def nodes(kernel: kiln.Kernel, cls: type, *types) -> list:
    return [n for n in walk(program(kernel, *types).kernel.body) if isinstance(n, cls)]


def assigned(kernel: kiln.Kernel, name: str, *types) -> ir.Expr:
    """The value of the last assignment to local `name`."""
    return [n for n in nodes(kernel, ir.Assign, *types) if n.target == name][-1].value


# ---------------------------------------------------------------- inferred locals


@kiln.kernel
def locals_kernel(a: f64[:], n: i64):
    i = kiln.global_id(0)
    one = 1
    half = 0.5
    x = a[i]
    big = n + 1
    mixed = i + half
    flag = i < 4 and x > 0.0
    widened = 0
    widened = x
    a[0] = x + mixed + big + one + widened + flag


def test_types_inferred_for_locals() -> None:
    found = program(locals_kernel).kernel.locals
    assert found == {"i": i32, "one": i32, "half": f32, "x": f64, "big": i64, "mixed": f32,
                     "flag": bool_, "widened": f64}


def test_widened_local_converts_every_assignment() -> None:
    first = [n for n in nodes(locals_kernel, ir.Assign) if n.target == "widened"][0]
    assert isinstance(first.value, ir.Const) and first.value.type == f64


# ---------------------------------------------------------------- literals adapt


@kiln.kernel
def literal_kernel(a, b, n):
    a[0] = a[1] * 2
    a[1] = a[2] + 1.5
    b[0] = n + 1
    b[1] = n + 2**40


@pytest.mark.parametrize(("elem", "scalar", "float_type", "int_type", "big_type"), [
    (f32, i32, f32, i32, i64),
    (f64, i64, f64, i64, i64),
    (f32, u8, f32, i32, i64),
    (f64, u32, f64, u32, i64),
])
def test_literals_take_the_type_of_their_context(elem, scalar, float_type, int_type,
                                                 big_type) -> None:
    types = (ArrayType(elem, 1), ArrayType(i64, 1), scalar)
    ops = nodes(literal_kernel, ir.BinOp, *types)
    times, plus_float, plus_int, plus_big = ops
    assert (times.type, plus_float.type) == (float_type, float_type)
    assert isinstance(times.right, ir.Const) and times.right.type == float_type
    assert plus_float.right.value == 1.5 and plus_float.right.type == float_type
    assert plus_int.type == int_type
    assert plus_big.type == big_type


@kiln.kernel
def literal_store(a: f64[:], b: u8[:]):
    a[0] = 1
    b[0] = 200


def test_literal_stores_take_the_element_type() -> None:
    consts = [s.value for s in nodes(literal_store, ir.Store)]
    assert [(c.type, c.value) for c in consts] == [(f64, 1.0), (u8, 200)]


@kiln.kernel
def literal_too_big(b: u8[:]):
    b[0] = 300


def test_literal_that_does_not_fit_is_an_error() -> None:
    with pytest.raises(kiln.KernelTypeError, match="cannot assign"):
        literal_too_big.ir()


@kiln.kernel
def folded(a: f32[:]):
    a[0] = SCALE * 2 + 1


def test_literal_expressions_fold() -> None:
    (store,) = nodes(folded, ir.Store)
    assert isinstance(store.value, ir.Const) and store.value.value == 7.0


# ---------------------------------------------------------------- promotion


@pytest.mark.parametrize(("a", "b", "expected"), [
    (i32, f32, f32), (i32, i64, i64), (u32, i32, u32), (u32, i64, i64), (i8, i8, i32),
    (u8, i8, i32), (f32, f64, f64), (i64, f32, f32), (bool_, bool_, i32), (u8, u32, u32),
])
def test_promotion_rules(a: ScalarType, b: ScalarType, expected: ScalarType) -> None:
    assert promote(a, b) == expected
    assert promote(b, a) == expected


@kiln.kernel
def binary(out, x, y):
    out[0] = x + y


@pytest.mark.parametrize(("x", "y", "expected"), [
    (i32, f32, f32), (i8, u8, i32), (u32, i32, u32), (f32, f64, f64), (i64, u32, i64),
])
def test_kernel_arithmetic_uses_promotion(x, y, expected) -> None:
    (op,) = nodes(binary, ir.BinOp, ArrayType(f64, 1), x, y)
    assert op.type == expected
    assert op.left.type == op.right.type == expected


@kiln.kernel
def compare_mixed(out: i32[:], x: u32, y: i32):
    out[0] = i32(x < y)


@kiln.kernel
def compare_negative_literal(out: i32[:], x: u32, c: u8):
    out[0] = i32(x > -1)
    out[1] = i32(c > -1)
    out[2] = i32(x > 5)


def test_mixed_signedness_comparison_is_exact() -> None:
    (cmp,) = nodes(compare_mixed, ir.Compare)
    assert cmp.left.type == cmp.right.type == i64
    assert [c.left.type for c in nodes(compare_negative_literal, ir.Compare)] == [i64, i32, u32]


def test_unsigned_compares_exactly_with_negative_literal(interp) -> None:
    out = np.zeros(3, np.int32)
    compare_negative_literal[1, 1](out, 3, 3)
    interp.synchronize()
    assert out.tolist() == [1, 1, 0]


# ---------------------------------------------------------------- division and modulo


@kiln.kernel
def division(out: f64[:], iout: i32[:], m: i32, k: i32, x: f64):
    out[0] = m / k
    iout[0] = m // k
    iout[1] = m % k
    out[1] = x / k
    out[2] = x // 2.0


def test_true_division_of_ints_gives_f32() -> None:
    ops = {(n.op, n.type) for n in nodes(division, ir.BinOp)}
    assert ("/", f32) in ops
    assert ("//", i32) in ops and ("%", i32) in ops
    assert ("/", f64) in ops and ("//", f64) in ops
    assert all(n.type.is_float for n in nodes(division, ir.BinOp) if n.op == "/")


# ---------------------------------------------------------------- casts and conditions


@kiln.kernel
def casts(a: f32[:], b: i32[:], n: i32):
    b[0] = i32(a[0])
    a[1] = f32(n)
    a[2] = f32(3)
    b[1] = int(a[3])
    if n:
        b[2] = i32(bool(a[4]))


def test_casts() -> None:
    kinds = [(type(s.value).__name__, s.value.type) for s in nodes(casts, ir.Store)]
    assert kinds[:4] == [("Cast", i32), ("Cast", f32), ("Const", f32), ("Cast", i32)]
    (cond,) = [s.cond for s in nodes(casts, ir.If)]
    assert isinstance(cond, ir.Compare) and cond.op == "!=" and cond.right.value == 0


@kiln.kernel
def bool_ops(out: i32[:], x: f32, n: i32):
    both = x > 0.0 and n > 0
    either = n or x
    out[0] = i32(both) + i32(either) + i32(not n)


def test_and_or_not_give_bools() -> None:
    bool_nodes = nodes(bool_ops, ir.BoolOp)
    assert [b.op for b in bool_nodes] == ["and", "or"]
    assert all(v.type == bool_ for b in bool_nodes for v in b.values)
    (negation,) = nodes(bool_ops, ir.UnaryOp)
    assert negation.op == "not" and negation.operand.type == bool_


# ---------------------------------------------------------------- indexing and intrinsics


@kiln.kernel
def indexing(m: f32[:, :], v: f32[:]):
    s = kiln.shared(f32, (4, 8))
    p = kiln.local(i32, 3)
    t = kiln.thread_idx.y
    s[t, 0] = m[m.shape[0] - 1, len(v)]
    p[0] = kiln.global_size(1)
    v[0] = s[t, 0] + p[0] + kiln.sqrt(t) + math.floor(OFFSET * t) + max(v[1], 0)


def test_shared_and_local_arrays_are_locals_with_constant_shapes() -> None:
    found = program(indexing).kernel.locals
    assert found["s"] == ArrayType(f32, 2, MemorySpace.SHARED, (4, 8))
    assert found["p"] == ArrayType(i32, 1, MemorySpace.LOCAL, (3,))


def test_index_intrinsics_and_dims() -> None:
    names = {n.name for n in nodes(indexing, ir.IntrinsicCall)}
    assert {"thread_idx_y", "grid_dim_y", "block_dim_y", "sqrt", "floor", "max"} <= names
    dims = {(n.array.name, n.axis) for n in nodes(indexing, ir.ArrayDim)}
    assert dims == {("m", 0), ("v", 0)}


def test_math_on_ints_and_literals() -> None:
    calls = {n.name: n for n in nodes(indexing, ir.IntrinsicCall) if n.args}
    assert calls["sqrt"].type == f32 and calls["sqrt"].args[0].type == f32
    assert calls["max"].type == f32
    assert isinstance(calls["max"].args[1], ir.Const) and calls["max"].args[1].type == f32


@kiln.kernel
def loops(a: f32[:], n: i64):
    for i in range(n):
        a[i] = 0.0
    for j in range(10, 0, -2):
        a[j] = 1.0


def test_range_loops() -> None:
    first, second = nodes(loops, ir.For)
    found = program(loops).kernel.locals
    assert found["i"] == i64 and found["j"] == i32
    assert isinstance(second.step, ir.Const) and second.step.value == -2


@kiln.kernel
def swap(a: f32[:]):
    x, y = a[0], a[1]
    x, y = y, x
    a[0] = x - y


def test_tuple_assignment_evaluates_right_side_first() -> None:
    targets = [s.target for s in nodes(swap, ir.Assign)]
    assert [t if t in "xy" else "tmp" for t in targets] == ["tmp", "tmp", "x", "y"] * 2


# ---------------------------------------------------------------- device functions


@kiln.func
def twice(x):
    return x * 2


@kiln.func
def clamp01(x: f32) -> f32:
    return min(max(x, 0.0), 1.0)


@kiln.kernel
def calls(a: f32[:], b: i32[:]):
    a[0] = twice(a[1]) + clamp01(a[2])
    b[0] = twice(b[1])


def test_device_functions_specialise_per_argument_types() -> None:
    prog = program(calls)
    specialised = {(f.params[0].type, f.return_type) for f in prog.functions
                   if f.name.startswith("twice")}
    assert specialised == {(f32, f32), (i32, i32)}
    names = [f.name for f in prog.functions]
    assert len(set(names)) == len(names) == 3
    assert {c.func for c in nodes(calls, ir.Call)} == set(names)


# ---------------------------------------------------------------- module constants


LIMIT = 5


@kiln.kernel
def uses_limit(a: i32[:]):
    a[0] = LIMIT


def test_module_constants_are_captured_at_first_compile() -> None:
    global LIMIT
    before = uses_limit.ir()
    assert "5" in before
    LIMIT = 6
    try:
        assert uses_limit.ir() == before
    finally:
        LIMIT = 5


def test_ir_printer_round_trip_is_readable() -> None:
    text = locals_kernel.ir()
    assert text.startswith("kernel locals_kernel(a: f64[:], n: i64):")
    assert "var widened: f64" in text
