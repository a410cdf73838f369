"""bf16 arithmetic in f32: every backend stores bf16 and converts it, none computes in it.

Each operation on bf16 values becomes the same operation on f32 operands, and a bf16 result
is rounded back to bf16 right away (`Cast`), so every backend rounds after each operation as
NumPy's `ml_dtypes.bfloat16` does. After this pass bf16 appears only in constants, variables,
loads and stores, selects, calls and casts.
"""

from __future__ import annotations

from .. import nodes as ir
from ..intrinsics import intrinsics
from ..types import ArrayType, Type, bf16, f32
from ..visit import Transformer, walk
from .common import all_functions, clone_program


def uses_bf16(program: ir.Program) -> bool:
    """Whether any parameter, local or expression of the program has bf16 type."""
    def is_bf16(t: Type) -> bool:
        return t == bf16 or (isinstance(t, ArrayType) and t.elem == bf16)

    for func in all_functions(program):
        types = [p.type for p in func.params] + list(func.locals.values())
        if any(map(is_bf16, types)):
            return True
        if any(isinstance(n, ir.Expr) and is_bf16(n.type) for n in walk(func.body)):
            return True
    return False


def lower_bf16(program: ir.Program) -> ir.Program:
    """A new program whose bf16 arithmetic runs in f32 (the input is unchanged)."""
    if not uses_bf16(program):
        return program
    program = clone_program(program)
    lowering = _InF32()
    for func in all_functions(program):
        func.body = lowering.transform_body(func.body)
    return program


def _widen(e: ir.Expr) -> ir.Expr:
    return ir.Cast(f32, e, loc=e.loc) if e.type == bf16 else e


def _narrow(e: ir.Expr, t: Type) -> ir.Expr:
    """`e` (computed in f32 in place of bf16 type `t`) rounded back to bf16."""
    if t != bf16:
        return e
    e.type = f32
    return ir.Cast(bf16, e, loc=e.loc)


class _InF32(Transformer):
    def visit_BinOp(self, e: ir.BinOp) -> ir.Expr:
        e.left, e.right = _widen(e.left), _widen(e.right)
        return _narrow(e, e.type)

    def visit_UnaryOp(self, e: ir.UnaryOp) -> ir.Expr:
        e.operand = _widen(e.operand)
        return _narrow(e, e.type)

    def visit_Compare(self, e: ir.Compare) -> ir.Expr:
        e.left, e.right = _widen(e.left), _widen(e.right)
        return e

    def visit_IntrinsicCall(self, e: ir.IntrinsicCall) -> ir.Expr:
        if intrinsics[e.name].category != "math":
            return e
        e.args = [_widen(a) for a in e.args]
        return _narrow(e, e.type)
