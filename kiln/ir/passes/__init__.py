"""IR passes: checks (raise KernelError) and transforms (Program -> Program)."""

from __future__ import annotations

from collections.abc import Callable

from ..nodes import Program


def check_program(program: Program) -> Program:
    """The checks every kernel gets whatever the backend (run once per signature)."""
    return program


def default_pipeline() -> list[Callable[[Program], Program]]:
    return []
