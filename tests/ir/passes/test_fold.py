"""fold_constants: folded arithmetic, shifts, casts, comparisons and selects match NumPy;
undefined results are left to the device; the input program is not changed."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import f32, i32
from kiln.ir import nodes as ir
from kiln.ir.passes import fold_constants
from tests.helpers import const, kernel_program, var

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
