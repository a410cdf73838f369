"""Definite assignment: a local must be assigned on every path to each of its reads.

Python raises `UnboundLocalError` where a kernel reads a local that the path taken did not
assign (`if i < 2: v = 1.0` then `a[i] = v`); compiled, such a read would give whatever the
register held (another thread's value on cpu and OpenCL, 0 on interp). The check is a
forward must-analysis over the structured IR: after an `if`, a local is assigned when both
branches assign it (a branch that returns, breaks or continues does not count); a loop body
may run zero times, so what it assigns is not assigned after it (except `while True`, left
only by `break`); a `for` loop's variable is assigned only inside its body. It checks the
frontend's output (`Kernel.program`), not what passes make of it: inlining assigns through
flags this analysis does not follow.
"""

from __future__ import annotations

from ...errors import UnknownNameError
from .. import nodes as ir
from ..types import ArrayType
from ..visit import Visitor, walk
from .common import all_functions

_UNREACHABLE: frozenset[str] = frozenset({"\0unreachable"})
"""The state after a return, break or continue: no path continues from there."""


def check_definite_assignment(program: ir.Program) -> None:
    """Raise `UnknownNameError` at the first read of a local that is not assigned on every
    path to it, naming the variable and the lines that assign it."""
    for func in all_functions(program):
        _Checker(func).body(func.body, frozenset(p.name for p in func.params))


def _join(a: frozenset[str], b: frozenset[str]) -> frozenset[str]:
    if a is _UNREACHABLE:
        return b
    if b is _UNREACHABLE:
        return a
    return a & b


class _Checker(Visitor[frozenset[str]]):
    """`visit_<Stmt>` maps the set of definitely assigned locals before a statement
    (`self.state`) to the set after it, checking the reads in between."""

    def __init__(self, func: ir.Function) -> None:
        self.checked = {name for name, t in func.locals.items() if not isinstance(t, ArrayType)}
        self.breaks: list[list[frozenset[str]]] = []
        self.func = func
        self.state: frozenset[str] = frozenset()

    def body(self, stmts: list[ir.Stmt], state: frozenset[str]) -> frozenset[str]:
        for s in stmts:
            if state is _UNREACHABLE:
                break
            self.state = state
            state = self.visit(s)
        return state

    def visit_Assign(self, s: ir.Assign) -> frozenset[str]:
        self.reads(s.value, self.state)
        return self.state | {s.target}

    def visit_If(self, s: ir.If) -> frozenset[str]:
        state = self.state
        self.reads(s.cond, state)
        return _join(self.body(s.then, state), self.body(s.orelse, state))

    def visit_While(self, s: ir.While) -> frozenset[str]:
        state = self.state
        self.reads(s.cond, state)
        self.breaks.append([])
        self.body(s.body, state)
        exits = self.breaks.pop()
        forever = isinstance(s.cond, ir.Const) and bool(s.cond.value)
        after = _UNREACHABLE if forever else state
        for exit_state in exits:
            after = _join(after, exit_state)
        return after

    def visit_For(self, s: ir.For) -> frozenset[str]:
        state = self.state
        for e in (s.start, s.stop, s.step):
            self.reads(e, state)
        self.breaks.append([])
        self.body(s.body, state | {s.var})
        self.breaks.pop()
        return state

    def visit_Break(self, s: ir.Break) -> frozenset[str]:
        self.breaks[-1].append(self.state)
        return _UNREACHABLE

    def visit_Continue(self, s: ir.Continue) -> frozenset[str]:
        return _UNREACHABLE

    def visit_Return(self, s: ir.Return) -> frozenset[str]:
        if s.value is not None:
            self.reads(s.value, self.state)
        return _UNREACHABLE

    def visit_Native(self, s: ir.Native) -> frozenset[str]:
        return self.state | {v.name for v in s.vars}  # hand-written code may assign them

    def visit_VectorAccess(self, s: ir.VectorAccess) -> frozenset[str]:
        return self.body(s.body, self.state)

    def visit_SetField(self, s: ir.SetField) -> frozenset[str]:
        state = self.state  # writing a part makes the local a value
        self.reads(s.value, state)
        place = s.target
        while isinstance(place, ir.Field):
            place = place.value
        if isinstance(place, ir.Var):
            return state | {place.name}
        self.reads(place, state)
        return state

    def visit_Store(self, s: ir.Store) -> frozenset[str]:
        for e in (s.array, *s.indices, s.value):
            self.reads(e, self.state)
        return self.state

    def visit_ExprStmt(self, s: ir.ExprStmt) -> frozenset[str]:
        self.reads(s.expr, self.state)
        return self.state

    def generic_visit(self, node: ir.Expr | ir.Stmt) -> frozenset[str]:
        return self.state

    def reads(self, e: ir.Expr, state: frozenset[str]) -> None:
        for n in walk(e):
            if isinstance(n, ir.Var) and n.name in self.checked and n.name not in state:
                self.fail(n)

    def fail(self, read: ir.Var) -> None:
        assigned = [n.loc for n in walk(self.func.body)
                    if isinstance(n, ir.Assign) and n.target == read.name and n.loc]
        loops = [n.loc for n in walk(self.func.body)
                 if isinstance(n, ir.For) and n.var == read.name and n.loc]
        if loops and not assigned:
            detail = (f"it is the variable of the loop at line {loops[0].line}, which may run "
                      "no iteration (Python would raise UnboundLocalError): copy it to "
                      "another local inside the loop")
        elif assigned:
            where = ", ".join(f"line {loc.line}" for loc in assigned)
            detail = (f"it is assigned at {where} only on some paths to this read (Python "
                      "would raise UnboundLocalError): assign it before the branch or loop")
        else:
            detail = "it is never assigned a value"
        raise UnknownNameError(f"local variable '{read.name}' may be read before it is assigned: "
                         f"{detail}", read.loc)

