"""Reading a Python function's source: its AST and the locations of its nodes."""

from __future__ import annotations

import ast
import hashlib
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


@dataclass(frozen=True)
class Source:
    """A function's definition as text: its lines, from `first_line` of `file`."""

    lines: tuple[str, ...]
    first_line: int
    file: str


def read_source(pyfunc: Any) -> Source:
    """The lines that define `pyfunc` (a notebook cell's too: IPython keeps them in
    `linecache`), or an UnsupportedError naming the function."""
    try:
        lines, first_line = inspect.getsourcelines(pyfunc)
        file = inspect.getsourcefile(pyfunc) or inspect.getfile(pyfunc)
    except (OSError, TypeError) as exc:
        raise UnsupportedError(
            f"cannot read the source of {pyfunc.__qualname__} ({exc}); kiln kernels must be "
            "defined in a file or a notebook cell"
        ) from None
    return Source(tuple(lines), first_line, file)


def adopt_source(pyfunc: Any, source: Source) -> None:
    """Give a function rebuilt in another process from its code alone (pickled by value, as
    Dask ships a notebook's functions: the code no longer names a file there) the text of
    its definition. The lines go into `linecache` under a name of their own, which the code
    then names, so the frontend, fingerprints and error messages read them as from a file;
    the name holds a digest of the text, so a different definition never takes their place."""
    text = "".join(source.lines)
    digest = hashlib.sha256(f"{source.first_line}\n{text}".encode()).hexdigest()[:12]
    name = f"{source.file} (shipped {digest})"
    lines = ["\n"] * (source.first_line - 1) + list(source.lines)
    linecache.cache[name] = (len(text), None, lines, name)  # no mtime: never reloaded
    pyfunc.__code__ = pyfunc.__code__.replace(co_filename=name,
                                              co_firstlineno=source.first_line)


@cache
def parse_function(pyfunc: Any) -> ParsedFunction:
    """Parse a function's source once; locations map back to the original file."""
    found = read_source(pyfunc)
    lines, first_line, file = list(found.lines), found.first_line, found.file
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
