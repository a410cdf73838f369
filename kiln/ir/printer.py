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
    pad = INDENT * depth
    match stmt:
        case ir.Assign(target=target, value=value):
            return [f"{pad}{target} = {typed(value)}"]
        case ir.Store(array=array, indices=indices, value=value) if _wide(value.type, array):
            return [f"{pad}store({array.name}, {_join(indices)}, {typed(value)})"]
        case ir.Store(array=array, indices=indices, value=value):
            return [f"{pad}{array.name}[{_join(indices)}] = {typed(value)}"]
        case ir.ExprStmt(expr=expr):
            return [pad + typed(expr)]
        case ir.SetField(target=target, name=name, value=value):
            return [f"{pad}{format_expr(target)}.{name} = {typed(value)}"]
        case ir.If():
            return _format_if(stmt, depth, "if")
        case ir.While(cond=cond, body=body):
            return [f"{pad}while {format_expr(cond, top=True)}:", *format_block(body, depth + 1)]
        case ir.For(var=var, start=start, stop=stop, step=step, body=body):
            bounds = _join([start, stop, step])
            return [f"{pad}for {var} in range({bounds}):", *format_block(body, depth + 1)]
        case ir.Break():
            return [pad + "break"]
        case ir.Continue():
            return [pad + "continue"]
        case ir.Return(value=None):
            return [pad + "return"]
        case ir.Return(value=value):
            return [f"{pad}return {typed(value)}"]
        case ir.VectorAccess(body=body):
            return [f"{pad}vector access:", *format_block(body, depth + 1)]
        case ir.BlockLoop(body=body, thread_vars=thread_vars, block_vars=block_vars):
            notes = _notes(("thread vars", thread_vars), ("block vars", block_vars),
                           ("exits", stmt.exits))
            return [f"{pad}for each block{notes}:", *format_block(body, depth + 1)]
        case ir.ThreadLoop(body=body):
            return [f"{pad}for each thread{_thread_notes(stmt)}:", *format_block(body, depth + 1)]
        case ir.LockstepLoop(cond=cond, body=body, setup=setup, inductions=inductions):
            head = f"{pad}lockstep while {format_expr(cond, top=True)}{_thread_notes(stmt)}:"
            inner = INDENT * (depth + 1)
            lines = [head]
            if setup:
                lines += [f"{inner}each pass:", *format_block(setup, depth + 2)]
            return [*lines, *format_block(inductions, depth + 1), *format_block(body, depth + 1)]
        case ir.Induction(var=var, init=init, step=step):
            return [f"{pad}induction {var} = {format_expr(init)} + iteration * "
                    f"{format_expr(step)}"]
    return [pad + _generic(stmt)]


def _thread_notes(loop: ir.ThreadLoop | ir.LockstepLoop) -> str:
    counted = isinstance(loop, ir.LockstepLoop) and loop.counted
    return _notes(("counted", counted), ("private", loop.private), ("loads", loop.loads),
                  ("stores", loop.stores))


def _notes(*notes: tuple[str, list[str] | bool]) -> str:
    """` (name: a, b; flag)` for the non-empty lists and true flags."""
    parts = [name if value is True else f"{name}: {', '.join(value)}"  # type: ignore[arg-type]
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
    match expr:
        case ir.Const(value=value, type=t):
            text = repr(value.item() if hasattr(value, "item") else value)
            return text if t in _DEFAULT_LITERAL else f"{t}({text})"
        case ir.Var(name=name):
            return name
        case ir.BinOp(op=op, left=left, right=right) | ir.Compare(op=op, left=left, right=right):
            return _paren(f"{format_expr(left)} {op} {format_expr(right)}", top)
        case ir.UnaryOp(op="not", operand=operand):
            return _paren(f"not {format_expr(operand)}", top)
        case ir.UnaryOp(op=op, operand=operand):
            return f"{op}{format_expr(operand)}"
        case ir.BoolOp(op=op, values=values):
            return _paren(f" {op} ".join(format_expr(v) for v in values), top)
        case ir.Select(cond=cond, if_true=if_true, if_false=if_false):
            text = f"{format_expr(if_true)} if {format_expr(cond)} else {format_expr(if_false)}"
            return _paren(text, top)
        case ir.Cast(type=t, value=value):
            return f"{t}({format_expr(value, top=True)})"
        case ir.Load(array=array, indices=indices) if _wide(expr.type, array):
            return f"load({expr.type}, {array.name}, {_join(indices)})"
        case ir.Load(array=array, indices=indices):
            return f"{array.name}[{_join(indices)}]"
        case ir.ArrayDim(array=array, axis=axis):
            return f"{array.name}.shape[{axis}]"
        case ir.Call(func=name, args=args) | ir.IntrinsicCall(name=name, args=args):
            return f"{name}({_join(args)})"
        case ir.Construct(type=t, values=values):
            return f"{t}({_join(values)})"
        case ir.Field(value=value, name=name):
            return f"{format_expr(value)}.{name}"
    return _generic(expr)


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
