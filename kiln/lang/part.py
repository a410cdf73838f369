"""The base of the frontend's parts: each builds one kind of construct of a function."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ..errors import UnsupportedError

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

    def unsupported(self, node: ast.AST, known: Mapping[type, str], noun: str
                    ) -> UnsupportedError:
        """The error for a construct no handler takes: named in words where kiln knows it
        (`known`), else by its AST class (`noun`: "statements", "expressions")."""
        what = known.get(type(node))
        if what is not None:
            return UnsupportedError(f"kernels do not support {what}", self.loc(node))
        return UnsupportedError(f"{type(node).__name__} {noun} are not supported in kernels",
                                self.loc(node))
