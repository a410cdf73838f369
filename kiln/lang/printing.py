"""`print(...)` in kernels: one line per thread, as a `Native` statement per language.

Each argument is a string constant or a scalar; the frontend evaluates the scalars into
temporaries and emits one `printf` per line for C, CUDA and OpenCL (so a thread's line is
never cut by another thread's), and for the interpreter a callable that writes each active
thread's line to `sys.stdout`. Every backend formats alike: integers in decimal, floats as
printf's `%g` (6 significant digits; every NaN as `nan`), bools as `True`/`False`.
"""

from __future__ import annotations

import ast
import inspect
import sys
from typing import TYPE_CHECKING

import numpy as np

from ..errors import KernelTypeError, UnsupportedError
from ..ir import nodes as ir
from ..ir.types import ScalarType, Type, f32, i32, u32
from ..stdio import printing_kernels
from .conversions import cast

if TYPE_CHECKING:
    from .frontend import FunctionBuilder

Piece = tuple[str, str]
"""("text", literal) or (kind, placeholder name), kind one of int, uint, long, ulong,
float, bool."""


def build_print(builder: FunctionBuilder, call: ast.Call) -> list[ir.Stmt]:
    """`print(a, "text", b, sep=" ", end="\\n")` as temporaries and one `Native` statement."""
    loc = builder.scope.loc(call)
    sep, end = " ", "\n"
    for kw in call.keywords:
        if kw.arg not in ("sep", "end") or not (isinstance(kw.value, ast.Constant)
                                                 and isinstance(kw.value.value, str)):
            raise UnsupportedError("print in kernels takes sep= and end= (constant strings) "
                                   "and no other keywords (it writes to stdout)",
                                   builder.scope.loc(kw.value if kw.arg else call))
        if kw.arg == "sep":
            sep = kw.value.value
        else:
            end = kw.value.value
    stmts: list[ir.Stmt] = []
    pieces: list[Piece] = []
    variables: list[ir.Var] = []
    for i, arg in enumerate(call.args):
        if i:
            pieces.append(("text", sep))
        if isinstance(arg, ast.Starred):
            raise UnsupportedError("print takes no *args in kernels", builder.scope.loc(arg))
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            pieces.append(("text", arg.value))
            continue
        value = builder.exprs.expr(arg)
        kind, t = _kind(value.type, builder.scope.loc(arg))
        name = builder.scope.temp(t)
        stmts.append(ir.Assign(name, cast(value, t, value.loc), loc=value.loc))
        variables.append(ir.Var(t, name, loc=value.loc))
        pieces.append((kind, f"p{len(variables) - 1}"))
    pieces.append(("text", end))
    if sum(kind == "bool" for kind, _ in pieces) > MAX_BOOLS:
        raise UnsupportedError(f"print in kernels takes at most {MAX_BOOLS} bools per call "
                               "(split the call, or print int(b))", loc)
    code: dict[str, object] = {lang: printf(pieces, lang) for lang in ("c", "cuda", "opencl")}
    code["python"] = PrintLines(pieces)
    names = [f"p{k}" for k in range(len(variables))]
    stmts.append(ir.Native(code, names, variables, loc=loc))
    return stmts


def _kind(t: Type, loc: ir.Loc | None) -> tuple[str, ScalarType]:
    """How a value prints, and the type it is printed from."""
    if not isinstance(t, ScalarType):
        raise KernelTypeError(f"print in kernels takes scalars and strings, not a {t} "
                              "(print its components or fields)", loc)
    if t.is_bool:
        return "bool", t
    if t.is_float:
        return "float", (t if t.bits == 64 else f32)
    if t.bits == 64:
        return ("ulong" if t.kind == "u" else "long"), t
    return ("uint", u32) if t.kind == "u" else ("int", i32)


_C_FORMATS = {"int": ("%d", "{v}"), "uint": ("%u", "{v}"),
              "float": ("%g", "({v} != {v} ? fabs({v}) : {v})")}
"""printf formats and arguments. A NaN prints as `nan` whatever its sign bit (glibc's printf
writes `-nan` for a negative one, Python and the GPU drivers `nan`): its sign is cleared."""
_C_LONG = {"long": ("%lld", "(long long){v}"), "ulong": ("%llu", "(unsigned long long){v}")}
_OPENCL_LONG = {"long": ("%ld", "{v}"), "ulong": ("%lu", "{v}")}
MAX_BOOLS = 4
"""Bools per print: each doubles the printf calls (see `printf`)."""


def printf(pieces: list[Piece], language: str, chosen: dict[str, bool] | None = None) -> str:
    """One printf call per line (then a flush of C's stdout on the cpu backend). A bool
    picks between calls whose formats spell True or False: OpenCL's printf takes only
    literal strings for %s, so `%s` of `b ? "True" : "False"` cannot be used."""
    chosen = chosen or {}
    open_bool = next((v for k, v in pieces if k == "bool" and v not in chosen), None)
    if open_bool is not None:
        yes = printf(pieces, language, {**chosen, open_bool: True})
        no = printf(pieces, language, {**chosen, open_bool: False})
        return f"if ({{{open_bool}}}) {{ {yes} }} else {{ {no} }}"
    formats = {**_C_FORMATS, **(_OPENCL_LONG if language == "opencl" else _C_LONG)}
    fmt, args = [], []
    for kind, value in pieces:
        if kind == "text":
            fmt.append(_c_text(value))
        elif kind == "bool":
            fmt.append(str(chosen[value]))
        else:
            spec, arg = formats[kind]
            fmt.append(spec)
            args.append(arg.replace("{v}", "{" + value + "}"))
    call = "printf(\"" + "".join(fmt) + "\"" + "".join(", " + a for a in args) + ");"
    return call + (" fflush(stdout);" if language == "c" else "")


def _c_text(text: str) -> str:
    """`text` inside a C string literal and a printf format (braces as octal escapes, so
    that kiln.native's `{name}` placeholders never match)."""
    out = []
    for ch in text:
        if ch == "%":
            out.append("%%")
        elif ch in "\\\"{}" or not ch.isprintable() or ord(ch) > 126:
            out.append("".join(f"\\{b:03o}" for b in ch.encode()))
        else:
            out.append(ch)
    return "".join(out)


class PrintLines:
    """The interpreter's print: called with each placeholder's values for the active
    threads (`kiln.native`'s python= protocol), it writes one line per thread."""

    def __init__(self, pieces: list[Piece]) -> None:
        self.pieces = pieces
        printing_kernels()

    def __setstate__(self, state: dict[str, object]) -> None:  # loaded from the kernel cache
        self.__dict__.update(state)
        printing_kernels()

    @property
    def __signature__(self) -> inspect.Signature:
        return inspect.Signature([inspect.Parameter(value, inspect.Parameter.KEYWORD_ONLY)
                                  for kind, value in self.pieces if kind != "text"])

    def __call__(self, **values: np.ndarray) -> None:
        count = len(next(iter(values.values()))) if values else 1
        lines = ["".join(_format(kind, value, values, lane) for kind, value in self.pieces)
                 for lane in range(count)]
        sys.stdout.write("".join(lines))
        sys.stdout.flush()


def _format(kind: str, value: str, values: dict[str, np.ndarray], lane: int) -> str:
    if kind == "text":
        return value
    v = values[value][lane]
    if kind == "bool":
        return "True" if v else "False"
    if kind == "float":
        return format(float(v), "g")  # C's %g: the same text as printf
    return str(int(v))
