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
from ..visit import walk
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


class _Checker:
    def __init__(self, func: ir.Function) -> None:
        self.checked = {name for name, t in func.locals.items() if not isinstance(t, ArrayType)}
        self.breaks: list[list[frozenset[str]]] = []
        self.func = func

    def body(self, stmts: list[ir.Stmt], state: frozenset[str]) -> frozenset[str]:
        for s in stmts:
            if state is _UNREACHABLE:
                break
            state = self.stmt(s, state)
        return state

    def stmt(self, s: ir.Stmt, state: frozenset[str]) -> frozenset[str]:
        if isinstance(s, ir.Assign):
            self.reads(s.value, state)
            return state | {s.target}
        if isinstance(s, ir.If):
            self.reads(s.cond, state)
            return _join(self.body(s.then, state), self.body(s.orelse, state))
        if isinstance(s, ir.While):
            self.reads(s.cond, state)
            self.breaks.append([])
            self.body(s.body, state)
            exits = self.breaks.pop()
            forever = isinstance(s.cond, ir.Const) and bool(s.cond.value)
            after = _UNREACHABLE if forever else state
            for exit_state in exits:
                after = _join(after, exit_state)
            return after
        if isinstance(s, ir.For):
            for e in (s.start, s.stop, s.step):
                self.reads(e, state)
            self.breaks.append([])
            self.body(s.body, state | {s.var})
            self.breaks.pop()
            return state
        if isinstance(s, ir.Break):
            self.breaks[-1].append(state)
            return _UNREACHABLE
        if isinstance(s, ir.Continue):
            return _UNREACHABLE
        if isinstance(s, ir.Return):
            if s.value is not None:
                self.reads(s.value, state)
            return _UNREACHABLE
        if isinstance(s, ir.Native):  # hand-written code may assign what it names
            return state | {v.name for v in s.vars}
        if isinstance(s, ir.VectorAccess):
            return self.body(s.body, state)
        if isinstance(s, ir.SetField):  # writing a part makes the local a value
            self.reads(s.value, state)
            place = s.target
            while isinstance(place, ir.Field):
                place = place.value
            if isinstance(place, ir.Var):
                return state | {place.name}
            self.reads(place, state)
            return state
        for e in _top_expressions(s):
            self.reads(e, state)
        return state

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


def _top_expressions(s: ir.Stmt) -> list[ir.Expr]:
    if isinstance(s, ir.Store):
        return [s.array, *s.indices, s.value]
    if isinstance(s, ir.ExprStmt):
        return [s.expr]
    return []
