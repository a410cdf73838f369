"""Reading a Python function's source: its AST and the locations of its nodes."""

from __future__ import annotations

import ast
import inspect
import linecache
import textwrap
from dataclasses import dataclass
from functools import cache
from typing import Any

from ..errors import UnsupportedError
from ..ir.nodes import Loc


@dataclass(frozen=True)
class ParsedFunction:
    tree: ast.FunctionDef
    file: str
    line_offset: int  # added to AST line numbers
    col_offset: int  # added to AST column numbers (the dedent)

    def loc(self, node: ast.AST) -> Loc:
        line = getattr(node, "lineno", 1) + self.line_offset
        col = getattr(node, "col_offset", 0) + self.col_offset
        end_line = getattr(node, "end_lineno", None)
        end_col = getattr(node, "end_col_offset", None)
        same_line = end_line is not None and end_line + self.line_offset == line
        return Loc(self.file, line, col,
                   end_col + self.col_offset if same_line and end_col is not None else None)


@cache
def parse_function(pyfunc: Any) -> ParsedFunction:
    """Parse a function's source once; locations map back to the original file."""
    try:
        lines, first_line = inspect.getsourcelines(pyfunc)
        file = inspect.getsourcefile(pyfunc) or inspect.getfile(pyfunc)
    except (OSError, TypeError) as exc:
        raise UnsupportedError(
            f"cannot read the source of {pyfunc.__qualname__} ({exc}); kiln kernels must be "
            "defined in a file"
        ) from None
    linecache.checkcache(file)
    source = "".join(lines)
    dedented = textwrap.dedent(source)
    indent = len(lines[0]) - len(lines[0].lstrip()) if dedented != source else 0
    module = ast.parse(dedented)
    tree = module.body[0]
    while isinstance(tree, ast.ClassDef):  # a method-like definition is not expected
        tree = tree.body[0]
    if isinstance(tree, ast.AsyncFunctionDef):
        where = Loc(file, tree.lineno + first_line - 1, tree.col_offset + indent)
        raise UnsupportedError(f"{pyfunc.__qualname__} is an `async def`: kernels and device "
                               "functions are plain `def` functions", where)
    if not isinstance(tree, ast.FunctionDef):
        raise UnsupportedError(f"{pyfunc.__qualname__} is not a plain function definition")
    return ParsedFunction(tree, file, first_line - 1, indent)
