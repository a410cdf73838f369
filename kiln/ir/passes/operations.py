"""Registered IR operations and intrinsics on backends (Futhark's extensible `Op`).

An operation a plugin registers (`kiln.backend.register_operation`) is an `IntrinsicCall` with a
*lowering* to existing IR: `lower_operations` expands it for backends that have no native
implementation of it (`Backend.intrinsic_implementation`); a backend that implements it (a
spelling, a callable) receives the call as is. `check_implementations` ends every
pipeline: a call left that the backend cannot run is a kernel error at the call, never a
failure inside code generation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ...errors import UnsupportedError
from .. import nodes as ir
from ..intrinsics import Lookup, intrinsics
from ..visit import Transformer, walk
from .common import all_functions, clone, clone_program, has_side_effects

Pass = Callable[[ir.Program], ir.Program]


def lower_operations(implementation: Lookup) -> Pass:
    """A pass expanding registered operations that `implementation` (a backend's
    `intrinsic_implementation`) has nothing for."""

    def lower_registered_operations(program: ir.Program) -> ir.Program:
        if not any(_lowerable(n, implementation) for f in all_functions(program)
                   for n in walk(f.body)):
            return program
        program = clone_program(program)
        expand = _Expand(implementation)
        for func in all_functions(program):
            func.body = expand.transform_body(func.body)
        return program

    return lower_registered_operations


def _lowerable(node: object, implementation: Lookup) -> bool:
    return (isinstance(node, ir.IntrinsicCall) and node.name in intrinsics
            and intrinsics[node.name].lowering is not None
            and implementation(node.name) is None)


class _Expand(Transformer):
    def __init__(self, implementation: Lookup) -> None:
        self.implementation = implementation

    def visit_IntrinsicCall(self, call: ir.IntrinsicCall) -> ir.Expr:
        if not _lowerable(call, self.implementation):
            return call
        lowering = intrinsics[call.name].lowering
        assert lowering is not None
        result = lowering(list(call.args), call.type)
        uses = {id(a): 0 for a in call.args}
        for node in walk(result):
            if id(node) in uses:
                uses[id(node)] += 1
        for arg in call.args:
            if uses[id(arg)] > 1 and has_side_effects(arg):
                raise UnsupportedError(
                    f"{call.name} uses an argument more than once, and this one has side "
                    "effects: assign it to a variable first", arg.loc or call.loc)
        if result.type != call.type:
            result = ir.Cast(call.type, result, loc=call.loc)
        return _unshare(result, set(uses))


def _unshare(expr: ir.Expr, args: set[int]) -> ir.Expr:
    """The lowering's tree with every repeated argument a copy of its own (passes may
    rewrite nodes in place)."""
    seen: set[int] = set()

    class Copy(Transformer):
        def transform(self, node: Any) -> Any:
            if id(node) in args:
                if id(node) in seen:
                    return clone(node)
                seen.add(id(node))
                return node
            return super().transform(node)

    return Copy().transform(expr)


def check_implementations(backend: str, implementation: Lookup,
                          namespaces: Sequence[str]) -> Pass:
    """A pass raising UnsupportedError at the first intrinsic call `backend` cannot run
    (`implementation`, its `intrinsic_implementation`, has nothing for it); the message
    names the `namespaces` an extension may register an implementation under."""

    def check_intrinsic_implementations(program: ir.Program) -> ir.Program:
        for func in all_functions(program):
            for node in walk(func.body):
                if isinstance(node, ir.IntrinsicCall) and node.name in intrinsics \
                        and implementation(node.name) is None:
                    raise UnsupportedError(
                        f"intrinsic {node.name} has no implementation for the {backend} "
                        f"backend (it spells none itself, and none is registered under its "
                        f"namespaces: {', '.join(namespaces) or 'none'})", node.loc or func.loc)
        return program

    return check_intrinsic_implementations
