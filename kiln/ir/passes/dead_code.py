"""Dead code removal: unreachable statements, constant branches, unread assignments."""

from __future__ import annotations

import dataclasses

from .. import nodes as ir
from ..analysis import reads_and_writes
from ..visit import Transformer, walk
from .common import all_functions, clone_program, has_side_effects
from .fold import python_value

TERMINATORS = (ir.Break, ir.Continue, ir.Return)


def remove_dead_code(program: ir.Program) -> ir.Program:
    """A new program without dead code (the input is not changed):

    - statements after a `return`, `break` or `continue` in the same block;
    - `if` on a constant (replaced by the branch taken), `while False`, `for` loops over
      constant empty ranges, `if`s with two empty branches and side-effect-free statements;
    - assignments to locals that are never read (their value is kept as a statement when it
      has side effects, e.g. an atomic), then locals that are no longer mentioned; the loads
      of one `VectorAccess` stay together while one of them is read.
    """
    program = clone_program(program)
    for func in all_functions(program):
        changed = True
        while changed:
            func.body = prune(func.body)
            remover = _UnreadAssignments(func)
            func.body = remover.transform_body(func.body)
            changed = remover.changed
        mentioned = set.union(*reads_and_writes(func.body))
        func.locals = {n: t for n, t in func.locals.items() if n in mentioned}
    return program


def prune(body: list[ir.Stmt]) -> list[ir.Stmt]:
    """The block without unreachable or no-op statements (nested blocks too)."""
    out: list[ir.Stmt] = []
    for stmt in body:
        out += _prune_stmt(stmt)
        if out and isinstance(out[-1], TERMINATORS):
            break
    return out


def _prune_stmt(s: ir.Stmt) -> list[ir.Stmt]:
    match s:
        case ir.If(cond=ir.Const() as cond):
            return prune(s.then if python_value(cond) else s.orelse)
        case ir.While(cond=ir.Const() as cond) if not python_value(cond):
            return []
        case ir.For(start=ir.Const() as start, stop=ir.Const() as stop, step=ir.Const() as step):
            if not range(int(python_value(start)), int(python_value(stop)),
                         int(python_value(step))):
                return []
        case ir.ExprStmt(expr=expr) if not has_side_effects(expr):
            return []
    for f in dataclasses.fields(s):
        value = getattr(s, f.name)
        if isinstance(value, list) and all(isinstance(v, ir.Stmt) for v in value):
            setattr(s, f.name, prune(value))
    if isinstance(s, ir.If) and not s.then and not s.orelse and not has_side_effects(s.cond):
        return []
    if isinstance(s, ir.VectorAccess) and not s.body:
        return []
    return [s]


class _UnreadAssignments(Transformer):
    """Drops assignments to locals and parameters that nothing reads."""

    def __init__(self, func: ir.Function) -> None:
        self.read = {n.name for n in walk(func.body) if isinstance(n, ir.Var)}
        for n in walk(func.body):  # a vector load is one access: all or none of it
            if isinstance(n, ir.VectorAccess):
                loaded = {s.target for s in n.body if isinstance(s, ir.Assign)}
                if loaded & self.read:
                    self.read |= loaded
        self.changed = False

    def visit_Assign(self, s: ir.Assign) -> ir.Stmt | None:
        if s.target in self.read:
            return s
        self.changed = True
        return ir.ExprStmt(s.value, loc=s.loc) if has_side_effects(s.value) else None
