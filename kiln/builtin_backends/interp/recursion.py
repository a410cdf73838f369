"""Recursion on the interpreter: device functions call each other as Python calls, and the
depth a recursive group may reach is checked where the user gave one (`max_depth`), so that
a depth too small for backends that inline recursion shows up here as an error."""

from __future__ import annotations

from types import TracebackType

from ...errors import RecursionDepthError
from ...ir import nodes as ir
from ...ir.passes.recursion import recursive_groups


class DepthGuard:
    """Counts the nested active calls of one recursive group (a context manager)."""

    def __init__(self, names: list[str], limit: int | None, loc: ir.Loc | None) -> None:
        self.names = names
        self.limit = limit
        self.loc = loc
        self.depth = 0

    def __enter__(self) -> None:
        if self.limit is not None and self.depth >= self.limit:
            raise RecursionDepthError(
                f"`{self.names[0]}` recursed deeper than its max_depth={self.limit} (backends "
                "that cannot recurse would give wrong results here): raise max_depth", self.loc)
        self.depth += 1

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.depth -= 1
        if isinstance(exc, RecursionError):
            raise RecursionDepthError(f"`{self.names[0]}` recursed deeper than Python's stack "
                                      "allows on the interp backend", self.loc) from None


def recursion_guards(program: ir.Program) -> dict[str, DepthGuard]:
    """One guard per recursive group, under each of its functions' names."""
    guards: dict[str, DepthGuard] = {}
    for group in recursive_groups(program):
        funcs = [program.function(name) for name in group]
        depths = [f.max_depth for f in funcs if f.max_depth]
        guard = DepthGuard(group, min(depths) if depths else None, funcs[0].loc)
        guards.update(dict.fromkeys(group, guard))
    return guards
