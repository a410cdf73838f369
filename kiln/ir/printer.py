"""A readable text form of the IR (`kernel.ir(types...)`, `kiln compile` for DIRECT backends).

Example:

    kernel vector_add(a: f32[:], b: f32[:], c: f32[:], n: i32):
        var i: i32
        i = ((block_idx_x() * block_dim_x()) + thread_idx_x()): i32
        if i < n:
            c[i] = (a[i] + b[i]): f32

Compound values of statements carry their type after a colon; constants of a type other
than the literal default (i32, f32, bool_) are written as a cast, e.g. `f64(0.5)`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from . import nodes as ir
from .types import ArrayType, Type, VoidType, bool_, f32, i32
from .visit import Visitor

INDENT = "    "
_DEFAULT_LITERAL = (i32, f32, bool_)


def format_program(program: ir.Program) -> str:
    """The device functions (callees first), then the kernel."""
    return "\n\n".join(format_function(f) for f in [*program.functions, program.kernel]) + "\n"


def format_function(func: ir.Function) -> str:
    params = ", ".join(f"{p.name}: {p.type}" for p in func.params)
    head = f"kernel {func.name}({params})" if func.is_kernel else f"func {func.name}({params})"
    if not func.is_kernel and not isinstance(func.return_type, VoidType):
        head += f" -> {func.return_type}"
    lines = [head + ":"]
    lines += [f"{INDENT}var {name}: {t}" for name, t in func.locals.items()]
    lines += format_block(func.body, 1)
    return "\n".join(lines)


def format_block(body: Sequence[ir.Stmt], depth: int) -> list[str]:
    if not body:
        return [INDENT * depth + "pass"]
    return [line for stmt in body for line in format_stmt(stmt, depth)]


def format_stmt(stmt: ir.Stmt, depth: int) -> list[str]:
    return _Statements(depth).visit(stmt)


class _Statements(Visitor[list[str]]):
    """The lines of one statement at an indentation depth."""

    def __init__(self, depth: int) -> None:
        self.depth = depth
        self.pad = INDENT * depth

    def nested(self, head: str, body: Sequence[ir.Stmt]) -> list[str]:
        return [f"{self.pad}{head}:", *format_block(body, self.depth + 1)]

    def visit_Assign(self, s: ir.Assign) -> list[str]:
        return [f"{self.pad}{s.target} = {typed(s.value)}"]

    def visit_Store(self, s: ir.Store) -> list[str]:
        if _wide(s.value.type, s.array):
            return [f"{self.pad}store({s.array.name}, {_join(s.indices)}, {typed(s.value)})"]
        return [f"{self.pad}{s.array.name}[{_join(s.indices)}] = {typed(s.value)}"]

    def visit_ExprStmt(self, s: ir.ExprStmt) -> list[str]:
        return [self.pad + typed(s.expr)]

    def visit_SetField(self, s: ir.SetField) -> list[str]:
        return [f"{self.pad}{format_expr(s.target)}.{s.name} = {typed(s.value)}"]

    def visit_If(self, s: ir.If) -> list[str]:
        return _format_if(s, self.depth, "if")

    def visit_While(self, s: ir.While) -> list[str]:
        return self.nested(f"while {format_expr(s.cond, top=True)}", s.body)

    def visit_For(self, s: ir.For) -> list[str]:
        return self.nested(f"for {s.var} in range({_join([s.start, s.stop, s.step])})", s.body)

    def visit_Break(self, s: ir.Break) -> list[str]:
        return [self.pad + "break"]

    def visit_Continue(self, s: ir.Continue) -> list[str]:
        return [self.pad + "continue"]

    def visit_Return(self, s: ir.Return) -> list[str]:
        return [self.pad + ("return" if s.value is None else f"return {typed(s.value)}")]

    def visit_VectorAccess(self, s: ir.VectorAccess) -> list[str]:
        return self.nested("vector access", s.body)

    def visit_BlockLoop(self, s: ir.BlockLoop) -> list[str]:
        notes = _notes(("thread vars", s.thread_vars), ("block vars", s.block_vars),
                       ("exits", s.exits))
        return self.nested(f"for each block{notes}", s.body)

    def visit_ThreadLoop(self, s: ir.ThreadLoop) -> list[str]:
        return self.nested(f"for each thread{_thread_notes(s)}", s.body)

    def visit_LockstepLoop(self, s: ir.LockstepLoop) -> list[str]:
        lines = [f"{self.pad}lockstep while {format_expr(s.cond, top=True)}{_thread_notes(s)}:"]
        if s.setup:
            lines += [f"{INDENT * (self.depth + 1)}each pass:", *format_block(s.setup,
                                                                            self.depth + 2)]
        return [*lines, *format_block(s.inductions, self.depth + 1),
                *format_block(s.body, self.depth + 1)]

    def visit_Induction(self, s: ir.Induction) -> list[str]:
        return [f"{self.pad}induction {s.var} = {format_expr(s.init)} + iteration * "
                f"{format_expr(s.step)}"]

    def generic_visit(self, node: ir.Expr | ir.Stmt) -> list[str]:
        return [self.pad + _generic(node)]


def _thread_notes(loop: ir.ThreadLoop | ir.LockstepLoop) -> str:
    counted = isinstance(loop, ir.LockstepLoop) and loop.counted
    return _notes(("counted", counted), ("private", loop.private), ("loads", loop.loads),
                  ("stores", loop.stores))


def _notes(*notes: tuple[str, list[str] | bool]) -> str:
    """` (name: a, b; flag)` for the non-empty lists and true flags."""
    parts = [name if isinstance(value, bool) else f"{name}: {', '.join(value)}"
             for name, value in notes if value]
    return f" ({'; '.join(parts)})" if parts else ""


def _format_if(stmt: ir.If, depth: int, keyword: str) -> list[str]:
    pad = INDENT * depth
    lines = [f"{pad}{keyword} {format_expr(stmt.cond, top=True)}:",
             *format_block(stmt.then, depth + 1)]
    match stmt.orelse:
        case []:
            pass
        case [ir.If() as nested]:
            lines += _format_if(nested, depth, "elif")
        case orelse:
            lines += [pad + "else:", *format_block(orelse, depth + 1)]
    return lines


def typed(expr: ir.Expr) -> str:
    """`expr: type` for compound expressions, the bare expression otherwise."""
    if isinstance(expr, (ir.Const, ir.Var)) or isinstance(expr.type, VoidType):
        return format_expr(expr, top=True)
    return f"{format_expr(expr)}: {expr.type}"


def format_expr(expr: ir.Expr, top: bool = False) -> str:
    """One expression; operators are parenthesised unless `top`."""
    text = _EXPRESSIONS.visit(expr)
    operator = isinstance(expr, (ir.BinOp, ir.Compare, ir.BoolOp, ir.Select)) or (
        isinstance(expr, ir.UnaryOp) and expr.op == "not")
    return f"({text})" if operator and not top else text


class _Expressions(Visitor[str]):
    """An expression's text, without the parentheses `format_expr` adds around operators."""

    def visit_Const(self, e: ir.Const) -> str:
        value = e.value
        text = repr(value.item() if hasattr(value, "item") else value)
        return text if e.type in _DEFAULT_LITERAL else f"{e.type}({text})"

    def visit_Var(self, e: ir.Var) -> str:
        return e.name

    def visit_BinOp(self, e: ir.BinOp | ir.Compare) -> str:
        return f"{format_expr(e.left)} {e.op} {format_expr(e.right)}"

    visit_Compare = visit_BinOp

    def visit_UnaryOp(self, e: ir.UnaryOp) -> str:
        return f"not {format_expr(e.operand)}" if e.op == "not" else \
            f"{e.op}{format_expr(e.operand)}"

    def visit_BoolOp(self, e: ir.BoolOp) -> str:
        return f" {e.op} ".join(format_expr(v) for v in e.values)

    def visit_Select(self, e: ir.Select) -> str:
        return f"{format_expr(e.if_true)} if {format_expr(e.cond)} else {format_expr(e.if_false)}"

    def visit_Cast(self, e: ir.Cast) -> str:
        return f"{e.type}({format_expr(e.value, top=True)})"

    def visit_Load(self, e: ir.Load) -> str:
        if _wide(e.type, e.array):
            return f"load({e.type}, {e.array.name}, {_join(e.indices)})"
        return f"{e.array.name}[{_join(e.indices)}]"

    def visit_ArrayDim(self, e: ir.ArrayDim) -> str:
        return f"{e.array.name}.shape[{e.axis}]"

    def visit_Call(self, e: ir.Call) -> str:
        return f"{e.func}({_join(e.args)})"

    def visit_IntrinsicCall(self, e: ir.IntrinsicCall) -> str:
        return f"{e.name}({_join(e.args)})"

    def visit_Construct(self, e: ir.Construct) -> str:
        return f"{e.type}({_join(e.values)})"

    def visit_Field(self, e: ir.Field) -> str:
        return f"{format_expr(e.value)}.{e.name}"

    def generic_visit(self, node: ir.Expr | ir.Stmt) -> str:
        return _generic(node)


_EXPRESSIONS = _Expressions()


def _wide(t: Type, array: ir.Var) -> bool:
    """Whether an access of a `t` to `array` is a wide one (`kiln.load(f32x4, a, i)`)."""
    return isinstance(array.type, ArrayType) and t != array.type.elem


def _join(exprs: list[ir.Expr]) -> str:
    return ", ".join(format_expr(e, top=True) for e in exprs)


def _paren(text: str, top: bool) -> str:
    return text if top else f"({text})"


def _generic(node: ir.Expr | ir.Stmt) -> str:
    """Node kinds this printer does not know (added by later lowerings): `Kind(field=...)`."""
    parts = []
    for f in dataclasses.fields(node):
        if f.name == "loc":
            continue
        value = getattr(node, f.name)
        if isinstance(value, ir.Expr):
            text = format_expr(value, top=True)
        elif isinstance(value, list) and value and isinstance(value[0], ir.Expr):
            text = "[" + _join(value) + "]"
        else:
            text = repr(value)
        parts.append(f"{f.name}={text}")
    return f"{type(node).__name__}({', '.join(parts)})"
