"""Helpers shared by the passes: copying programs, purity."""

from __future__ import annotations

import copy
import dataclasses
import typing
from typing import Any, TypeVar

from .. import nodes as ir
from ..intrinsics import intrinsics
from ..visit import walk

N = TypeVar("N")


def clone(node: N) -> N:
    """A deep copy of an IR tree (nodes and lists); types and locations are shared."""
    if isinstance(node, list):
        return [clone(item) for item in node]  # type: ignore[return-value]
    if not isinstance(node, (ir.Expr, ir.Stmt)):
        return node
    new = copy.copy(node)
    for f in dataclasses.fields(node):
        setattr(new, f.name, clone(getattr(node, f.name)))
    return typing.cast(N, new)


def clone_function(func: ir.Function) -> ir.Function:
    return dataclasses.replace(func, params=list(func.params), body=clone(func.body),
                               locals=dict(func.locals))


def clone_program(program: ir.Program) -> ir.Program:
    """A copy that a transform may mutate without touching the (cached) original."""
    return ir.Program(clone_function(program.kernel),
                      [clone_function(f) for f in program.functions], list(program.checks),
                      program.tables)


def all_functions(program: ir.Program) -> list[ir.Function]:
    """Device functions (callees first), then the kernel."""
    return [*program.functions, program.kernel]


def has_side_effects(node: Any) -> bool:
    """Whether evaluating an expression (or tree) may write memory or synchronise.

    Device function calls and intrinsics unknown to the registry count as side effects.
    """
    for n in walk(node):
        if isinstance(n, ir.Call):
            return True
        if isinstance(n, ir.IntrinsicCall) and (
            n.name not in intrinsics or intrinsics[n.name].side_effects
        ):
            return True
    return False


def line_of(loc: ir.Loc | None) -> str:
    """` at line N` when a location is known."""
    return f" at line {loc.line}" if loc else ""
