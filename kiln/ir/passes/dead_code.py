"""Dead code removal: unreachable statements, constant branches, unread assignments."""

from __future__ import annotations

import dataclasses

from .. import nodes as ir
from ..analysis import reads_and_writes
from ..visit import Transformer, Visitor, walk
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
    return _PRUNE.visit(s)


class _Prune(Visitor[list[ir.Stmt]]):
    """`visit_<Stmt>`: what replaces a statement once its unreachable and no-op parts are
    gone (nothing, the branch an `if` on a constant takes, or the statement itself)."""

    def visit_If(self, s: ir.If) -> list[ir.Stmt]:
        if isinstance(s.cond, ir.Const):
            return prune(s.then if python_value(s.cond) else s.orelse)
        self.generic_visit(s)
        return [s] if s.then or s.orelse or has_side_effects(s.cond) else []

    def visit_While(self, s: ir.While) -> list[ir.Stmt]:
        if isinstance(s.cond, ir.Const) and not python_value(s.cond):
            return []
        return self.generic_visit(s)

    def visit_For(self, s: ir.For) -> list[ir.Stmt]:
        bounds = [python_value(e) for e in (s.start, s.stop, s.step) if isinstance(e, ir.Const)]
        if len(bounds) == 3 and not range(*(int(b) for b in bounds)):
            return []
        return self.generic_visit(s)

    def visit_ExprStmt(self, s: ir.ExprStmt) -> list[ir.Stmt]:
        return [s] if has_side_effects(s.expr) else []

    def visit_VectorAccess(self, s: ir.VectorAccess) -> list[ir.Stmt]:
        self.generic_visit(s)
        return [s] if s.body else []

    def generic_visit(self, node: ir.Expr | ir.Stmt) -> list[ir.Stmt]:
        """The statement with its nested blocks pruned."""
        assert isinstance(node, ir.Stmt)
        for f in dataclasses.fields(node):
            value = getattr(node, f.name)
            if isinstance(value, list) and all(isinstance(v, ir.Stmt) for v in value):
                setattr(node, f.name, prune(value))
        return [node]


_PRUNE = _Prune()


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
