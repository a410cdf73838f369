"""Compiler diagnostics -> `BackendCompileError` at the user's Python line.

C emitters write `#line` directives, so compilers (gcc, clang, NVRTC, OpenCL) report errors
at `user_file.py:LINE`; lines kiln generated itself are reported in `GENERATED_FILE`. A
target without `#line` (Python source, a shader language) records a `SourceMap` while it
emits and asks it where a line of its output came from.
"""

from __future__ import annotations

import linecache
import re
from dataclasses import dataclass, field

from ..errors import BackendCompileError
from ..ir.nodes import Loc

_DIAGNOSTIC = re.compile(
    r"^(?P<file>.+?)[:(](?P<line>\d+)(?:[:,](?P<col>\d+))?\)?:\s*(?:fatal\s+)?error:?\s*(?P<msg>.*)$",
    re.MULTILINE,
)


def compile_error(log: str, source: str, backend: str, generated: str = "<kiln>"
                  ) -> BackendCompileError:
    """The first error in a compiler log, located at the user's line when it maps to one.

    The full log follows the message, so nothing the compiler said is lost.
    """
    log = log.strip()
    match = _DIAGNOSTIC.search(log)
    detail = f"\n{backend} compiler output:\n{log}" if log else ""
    if match is None:
        return BackendCompileError(f"{backend} compilation failed{detail}")
    file, line, msg = match["file"], int(match["line"]), match["msg"].strip()
    text = linecache.getline(file, line) if file != generated else ""
    if not text:
        where = _generated_line(source, line) if file == generated else ""
        return BackendCompileError(f"{msg}{where}{detail}")
    indent = len(text) - len(text.lstrip())
    loc = Loc(file, line, indent, len(text.rstrip()))
    return BackendCompileError(f"{msg}{detail}", loc)


def _generated_line(source: str, line: int) -> str:
    """Where in kiln's generated code an error is, with that line's text."""
    lines = source.splitlines()
    where = f" in kiln's generated code, line {line}"
    if 0 < line <= len(lines):
        where += f": {lines[line - 1].strip()}"
    return where


@dataclass
class SourceMap:
    """The user's location of each line of generated source (1-based) that has one."""

    locs: dict[int, Loc] = field(default_factory=dict)

    def add(self, line: int, loc: Loc | None) -> None:
        if loc is not None:
            self.locs[line] = loc

    def error(self, message: str, line: int, source: str, log: str = "",
              backend: str = "") -> BackendCompileError:
        """A target's error at `line` of its generated `source`: at the user's line where
        the map has one, else naming the generated line; `log` (the tool's whole output)
        follows the message."""
        detail = f"\n{backend} compiler output:\n{log.strip()}" if log.strip() else ""
        loc = self.locs.get(line)
        if loc is None:
            return BackendCompileError(f"{message}{_generated_line(source, line)}{detail}")
        return BackendCompileError(f"{message}{detail}", loc)
