"""kiln.ir.visit: the one traversal API. Dispatch by node class (through the class's MRO, so
a node kind a plugin adds reaches its base's handler or `generic_visit`), predicated
`@handles` methods, bottom-up rewriting, and the clear errors the emitter and the
interpreter give for a node kind they do not know."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

import kiln
from kiln import f32, i32
from kiln.builtin_backends.interp import backend as interp
from kiln.builtin_backends.interp.executor import ProgramCode
from kiln.builtin_backends.interp.memory import ArrayRef
from kiln.codegen import CEmitter
from kiln.errors import UnsupportedError
from kiln.ir import nodes as ir
from kiln.ir.enums import MemorySpace
from kiln.ir.types import void
from kiln.ir.visit import Transformer, Visitor, handles, walk


@dataclass(eq=False)
class Twice(ir.Expr):
    """A node kind kiln does not have, as a plugin's lowering might add."""

    value: ir.Expr


@dataclass(eq=False)
class Trace(ir.ExprStmt):
    """A statement kind derived from one kiln has."""


def c(v: int) -> ir.Const:
    return ir.Const(i32, v)


class Size(Visitor[int]):
    """Counts nodes; a method for a base class catches its subclasses."""

    def visit_Const(self, e: ir.Const) -> int:
        return 1

    def visit_BinOp(self, e: ir.BinOp) -> int:
        return 1 + self.visit(e.left) + self.visit(e.right)

    def visit_Expr(self, e: ir.Expr) -> int:
        return 100

    def generic_visit(self, node: ir.Expr | ir.Stmt) -> int:
        return 1000


def test_visitor_dispatches_on_the_nearest_class_of_the_node() -> None:
    size = Size()
    assert size.visit(ir.BinOp(i32, "+", c(1), ir.BinOp(i32, "*", c(2), c(3)))) == 5
    assert size.visit(Twice(i32, c(1))) == 100  # a plugin's expression: visit_Expr
    assert size.visit(ir.Break()) == 1000  # no method for any class of a statement


def test_the_default_visits_children_in_field_order() -> None:
    seen: list[int] = []

    class Consts(Visitor[None]):
        def visit_Const(self, e: ir.Const) -> None:
            seen.append(int(e.value))

    body: list[ir.Stmt] = [ir.If(ir.Compare(f32, "<", c(1), c(2)), [ir.ExprStmt(Twice(i32, c(3)))],
                                 [ir.Return(c(4))])]
    for s in body:
        Consts().visit(s)
    assert seen == [1, 2, 3, 4]
    assert [int(n.value) for n in walk(body) if isinstance(n, ir.Const)] == seen


def test_handles_takes_the_nodes_its_predicate_accepts() -> None:
    class Names(Visitor[str]):
        def visit_Const(self, e: ir.Const) -> str:
            return "const"

        @handles(ir.Const, when=lambda self, e: e.value == 0)
        def zero(self, e: ir.Const) -> str:
            return "zero"

    class Stricter(Names):
        @handles(ir.Const, when=lambda self, e: e.value < 0)
        def negative(self, e: ir.Const) -> str:
            return "negative"

    assert [Names().visit(c(v)) for v in (0, 5, -1)] == ["zero", "const", "const"]
    assert [Stricter().visit(c(v)) for v in (0, 5, -1)] == ["zero", "const", "negative"]


def test_transformer_rewrites_bottom_up_and_may_delete_or_expand() -> None:
    class Rewrite(Transformer):
        def visit_Const(self, e: ir.Const) -> ir.Expr:
            return c(int(e.value) * 10)

        def visit_Break(self, s: ir.Break) -> None:
            return None

        def visit_ExprStmt(self, s: ir.ExprStmt) -> list[ir.Stmt]:
            return [s, ir.Continue()]

    body = Rewrite().transform_body([ir.Break(), ir.ExprStmt(ir.BinOp(i32, "+", c(1), c(2)))])
    assert [type(s) for s in body] == [ir.ExprStmt, ir.Continue]
    expr = body[0].expr  # type: ignore[attr-defined]
    assert (expr.left.value, expr.right.value) == (10, 20)
    # a subclass of ExprStmt gets the ExprStmt method too
    assert [type(s) for s in Rewrite().transform_body([Trace(c(1))])] == [Trace, ir.Continue]


def _program(stmt: ir.Stmt) -> ir.Program:
    kernel = ir.Function("k", [ir.Param("a", kiln.f32[:])], void, [stmt], {}, is_kernel=True)
    return ir.Program(kernel)


def test_emitter_and_interp_name_a_node_kind_they_cannot_handle() -> None:
    program = _program(ir.ExprStmt(Twice(i32, c(1))))
    with pytest.raises(UnsupportedError, match="Plain cannot emit Twice"):
        Plain().emit(program)
    with pytest.raises(UnsupportedError, match="interp backend cannot run Twice expressions"):
        ProgramCode(program, interp.intrinsic_implementation)


class Plain(CEmitter):
    """A dialect that only sets data."""


def test_a_derived_statement_kind_runs_where_its_base_does() -> None:
    """Trace is an ExprStmt: the emitter and the interpreter handle it as one."""
    source = Plain().emit(_program(Trace(ir.IntrinsicCall(f32, "sqrt", [ir.Const(f32, 2.0)]))))
    assert "sqrtf(2.0f);" in source
    add = ir.IntrinsicCall(f32, "atomic_add", [ir.Var(kiln.f32[:], "a"), c(0), ir.Const(f32, 1.0)])
    a = ArrayRef(np.zeros(1, np.float32), (1,), MemorySpace.GLOBAL)
    code = ProgramCode(_program(Trace(add)), interp.intrinsic_implementation)
    code.run((2, 1, 1), (4, 1, 1), [a])
    assert a.flat[0] == 8.0  # every one of the 8 threads added 1
