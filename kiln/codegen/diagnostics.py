"""C compiler diagnostics -> `BackendCompileError` at the user's Python line.

Emitters write `#line` directives, so compilers (gcc, clang, NVRTC, OpenCL) report errors
at `user_file.py:LINE`; lines kiln generated itself are reported in `GENERATED_FILE`.
"""

from __future__ import annotations

import linecache
import re

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
        where = ""
        if file == generated:
            lines = source.splitlines()
            where = f" in kiln's generated code, line {line}"
            if 0 < line <= len(lines):
                where += f": {lines[line - 1].strip()}"
        return BackendCompileError(f"{msg}{where}{detail}")
    indent = len(text) - len(text.lstrip())
    loc = Loc(file, line, indent, len(text.rstrip()))
    return BackendCompileError(f"{msg}{detail}", loc)
