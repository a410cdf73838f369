"""An IR pass: conditional expressions whose arms have side effects become `if` statements.

WGSL's `select(f, t, c)` evaluates both arms; Python's `a if c else b` evaluates one. An
arm that calls a device function or an atomic must run only when chosen, so such a
conditional is computed into a fresh variable by an `if` before its statement. The rest
of that statement must have no side effects of its own (their order relative to the arm
would change): otherwise the conditional is an UnsupportedError naming the line.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from kiln import UnsupportedError
from kiln.backend import intrinsics
from kiln.ir import nodes as ir
from kiln.ir.visit import walk

BODIES = ("then", "orelse", "body")


def lower_effectful_selects(program: ir.Program) -> ir.Program:
    """A new program in which no conditional expression has an arm with side effects."""
    if not any(_effectful_select(n) for f in [program.kernel, *program.functions]
               for n in walk(f.body)):
        return program
    program = copy.deepcopy(program)
    for func in [program.kernel, *program.functions]:
        func.body = _Lowering(func).block(func.body)
    return program


def _effectful(node: ir.Expr) -> bool:
    return any(isinstance(n, ir.Call) or (isinstance(n, ir.IntrinsicCall)
                                          and intrinsics[n.name].category == "atomic")
               for n in walk(node))


def _effectful_select(node: Any) -> bool:
    return isinstance(node, ir.Select) and (_effectful(node.if_true)
                                            or _effectful(node.if_false))


class _Lowering:
    def __init__(self, func: ir.Function) -> None:
        self.func = func

    def block(self, body: list[ir.Stmt]) -> list[ir.Stmt]:
        out: list[ir.Stmt] = []
        for stmt in body:
            for name in BODIES:
                inner = getattr(stmt, name, None)
                if isinstance(inner, list):
                    setattr(stmt, name, self.block(inner))
            out += self.statement(stmt)
        return out

    def statement(self, stmt: ir.Stmt) -> list[ir.Stmt]:
        found = next((n for e in _expressions(stmt) for n in walk(e) if _effectful_select(n)),
                     None)
        if found is None:
            return [stmt]
        assert isinstance(found, ir.Select)
        others = [n for e in _expressions(stmt) for n in walk(e)
                  if n is not found and not _inside(n, found) and isinstance(n, ir.Expr)
                  and (isinstance(n, ir.Call) or (isinstance(n, ir.IntrinsicCall) and
                                                  intrinsics[n.name].category == "atomic"))]
        if others or isinstance(stmt, ir.While):
            raise UnsupportedError(
                "the webgpu backend evaluates a conditional expression whose arms have side "
                "effects only as a statement of its own (assign it to a variable first)",
                found.loc or stmt.loc)
        name = self.fresh("kiln_chosen")
        self.func.locals[name] = found.type
        target = ir.Var(found.type, name, loc=found.loc)
        _replace(stmt, found, target)
        choose = ir.If(found.cond, [ir.Assign(name, found.if_true, loc=found.loc)],
                       [ir.Assign(name, found.if_false, loc=found.loc)], loc=found.loc)
        choose.then, choose.orelse = self.block(choose.then), self.block(choose.orelse)
        return [choose, *self.statement(stmt)]

    def fresh(self, base: str) -> str:
        taken = set(self.func.locals) | {p.name for p in self.func.params}
        n = 0
        while f"{base}{n}" in taken:
            n += 1
        return f"{base}{n}"


def _expressions(stmt: ir.Stmt) -> list[ir.Expr]:
    """The statement's own expressions (not those of statements nested in it)."""
    out: list[ir.Expr] = []
    for f in dataclasses.fields(stmt):
        value = getattr(stmt, f.name)
        if isinstance(value, ir.Expr):
            out.append(value)
        elif isinstance(value, list):
            out += [v for v in value if isinstance(v, ir.Expr)]
    return out


def _inside(node: Any, outer: ir.Expr) -> bool:
    return any(n is node for n in walk(outer))


def _replace(root: Any, old: ir.Expr, new: ir.Expr) -> None:
    """Put `new` where `old` is, in the expressions under `root` (statement or expression)."""
    for f in dataclasses.fields(root):
        value = getattr(root, f.name)
        if value is old:
            setattr(root, f.name, new)
        elif isinstance(value, ir.Expr):
            _replace(value, old, new)
        elif isinstance(value, list):
            for i, item in enumerate(value):
                if item is old:
                    value[i] = new
                elif isinstance(item, ir.Expr):
                    _replace(item, old, new)
