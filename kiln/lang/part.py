"""The base of the frontend's parts: each builds one kind of construct of a function."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .frontend import FunctionBuilder


class Part:
    """One responsibility in building a function's IR (statements, loops, expressions,
    calls, ...). Parts share the function's `Scope` and reach each other through the
    builder they serve (`self.fb.exprs.expr(node)`), so every cross-call is typed."""

    def __init__(self, builder: FunctionBuilder) -> None:
        self.fb = builder
        self.scope = builder.scope
        self.resolver = builder.scope.resolver
        self.loc = builder.scope.loc
