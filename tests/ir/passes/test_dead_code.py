"""remove_dead_code: unused assignments go; reads, loops and side effects stay."""

from __future__ import annotations

import kiln
from kiln import f32, i32
from kiln.ir import nodes as ir
from kiln.ir.passes import fold_constants, remove_dead_code
from kiln.ir.printer import format_program
from kiln.ir.visit import walk
from tests.helpers import const, kernel_program, var

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
