"""The IR printer: the text `kernel.ir(types...)` shows."""

from __future__ import annotations

from dataclasses import dataclass

import kiln
from kiln import f32, f64, i32
from kiln.examples import vector_add
from kiln.ir import nodes as ir
from kiln.ir.printer import format_expr, format_program
from kiln.ir.types import bool_, void


@kiln.func
def sign(x: f64) -> i32:
    if x > 0.0:
        return 1
    elif x < 0.0:
        return -1
    else:
        return 0


@kiln.kernel
def everything(a: f64[:, :], out: i32[:], n: i32):
    s = kiln.shared(f32, (4, 8))
    p = kiln.local(i32, 3)
    t = kiln.thread_idx.x
    for j in range(n - 1, -1, -1):
        if j % 2 == 0 and not (t > j):
            continue
        p[0] = sign(a[t, j] * 0.5)
    while True:
        break
    s[0, t] = f32(a.shape[1]) if t < 3 else 1.5
    kiln.barrier()
    kiln.atomic_add(out, 0, p[0])
    if t == 0:
        return


def test_vector_add() -> None:
    assert vector_add.ir() == """\
kernel vector_add(a: f32[:], b: f32[:], c: f32[:], n: i32):
    var i: i32
    i = ((block_idx_x() * block_dim_x()) + thread_idx_x()): i32
    if i < n:
        c[i] = (a[i] + b[i]): f32
"""


def test_functions_locals_and_statements() -> None:
    assert everything.ir() == """\
func sign(x: f64) -> i32:
    if x > f64(0.0):
        return 1
    elif x < f64(0.0):
        return -1
    else:
        return 0

kernel everything(a: f64[:, :], out: i32[:], n: i32):
    var s: shared f32[4, 8]
    var p: local i32[3]
    var t: i32
    var j: i32
    t = thread_idx_x(): i32
    for j in range(n - 1, -1, -1):
        if ((j % 2) == 0) and (not (t > j)):
            continue
        p[0] = sign(a[t, j] * f64(0.5)): i32
    while True:
        break
    s[0, t] = (f32(a.shape[1]) if (t < 3) else 1.5): f32
    barrier()
    atomic_add(out, 0, p[0]): i32
    if t == 0:
        return
"""


def test_expressions() -> None:
    x = ir.Var(i32, "x")
    assert format_expr(ir.UnaryOp(i32, "-", ir.BinOp(i32, "+", x, ir.Const(i32, 1)))) == \
        "-(x + 1)"
    assert format_expr(ir.Cast(f32, ir.BinOp(i32, "*", x, x))) == "f32(x * x)"
    assert format_expr(ir.Const(bool_, True)) == "True"
    assert format_expr(ir.Const(kiln.i64, 5)) == "i64(5)"
    both = ir.BoolOp(bool_, "or", [ir.Var(bool_, "p"), ir.UnaryOp(bool_, "not",
                                                                ir.Var(bool_, "q"))])
    assert format_expr(both, top=True) == "p or (not q)"


@dataclass(eq=False)
class Swizzle(ir.Expr):
    """A node kind the printer does not know (as a later lowering might add)."""

    value: ir.Expr
    lanes: str


def test_unknown_nodes_print_generically() -> None:
    node = Swizzle(f32, ir.Var(f32, "v"), "xy")
    assert format_expr(node) == "Swizzle(type=f32, value=v, lanes='xy')"
    kernel = ir.Function("k", [], void, [], {}, is_kernel=True)
    assert format_program(ir.Program(kernel)) == "kernel k():\n    pass\n"
