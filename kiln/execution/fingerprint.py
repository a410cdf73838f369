"""Fingerprints of what a kernel sees at compile time, read without running the frontend.

`fingerprint(kernel)` hashes the kernel's source text and location and, for every global or
closure name its AST reads (attribute chains such as `kiln.thread_idx` or `math.pi`
included), the object the name denotes, by kind: numbers, bools and strings by value;
`@kiln.func` device functions recursively, by their own source and fingerprint; struct
classes and variants by their field layout and defaults; kiln types by structure; kiln
builtins and members of `kiln`, `math`, `numpy` and Python's builtins by their name;
modules by name. Any other object raises `NotFingerprintable`: what the frontend would make
of it is unknown, so its kernel gets no frontend-free cache key (correctness first).
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import hashlib
import linecache
import math
from functools import cache
from types import ModuleType
from typing import Any

import numpy as np

from ..ir import types as kiln_types
from ..ir.hosttypes import kiln_type_of
from ..ir.types import (
    ArrayType,
    ConstexprType,
    ScalarType,
    StructType,
    Type,
    VariantType,
    VectorType,
    VoidType,
)
from ..lang import builtins as kiln_builtins
from ..lang import functions, records
from ..lang.builtins import KernelOnly
from ..lang.functions import Compilable
from ..lang.records import Variant, field_defaults
from ..lang.source import ParsedFunction, parse_function

_MISSING = object()
_SCALARS = (bool, int, float, complex, str, bytes, type(None))


class NotFingerprintable(Exception):
    """A name the kernel reads denotes an object of a kind `fingerprint` does not know."""


def fingerprint(fn: Compilable) -> str:
    """The SHA-256 (hex) of a kernel or device function and everything it can see."""
    return hashlib.sha256("\n".join(_Walker().function(fn)).encode()).hexdigest()


def type_fingerprint(t: Type) -> str:
    """A kiln type with everything that shapes compiled code (a record's fields and
    defaults, not just its name)."""
    return _Walker().type(t)


class _Walker:
    def __init__(self) -> None:
        self.seen: dict[int, int] = {}  # id of a device function -> its number (recursion)

    def function(self, fn: Compilable) -> list[str]:
        number = self.seen.get(id(fn))
        if number is not None:
            return [f"ref {number}"]
        self.seen[id(fn)] = len(self.seen)
        pyfunc = fn.pyfunc
        text, chains = _static(parse_function(pyfunc))
        out = [f"{type(fn).__name__} {pyfunc.__qualname__} {text}",
               f"options {self.mapping(fn.options.as_dict())}"]
        scope = _Scope(pyfunc)
        for chain, local in chains:
            name = ".".join(chain)
            try:
                out.append(f"name {name} = {self.chain(scope, chain, local)}")
            except NotFingerprintable as exc:
                raise NotFingerprintable(f"'{name}' in {pyfunc.__qualname__} is {exc}, not a "
                                         "kind of value kiln fingerprints") from None
        return out

    def chain(self, scope: _Scope, chain: tuple[str, ...], local: bool) -> str:
        """Every object along `a.b.c` that is not a module, by kind. A name the function
        also assigns is local where the frontend sees the assignment first; its global
        counts when known and is skipped otherwise."""
        obj = scope.lookup(chain[0])
        parts = []
        for attr in (None, *chain[1:]):
            if attr is not None:
                obj = getattr(obj, attr, _MISSING)
            if obj is _MISSING:
                parts.append("missing")
                break
            try:
                parts.append(self.value(obj))
            except NotFingerprintable:
                if local:
                    return "local"
                raise
        return " ".join(parts)

    def value(self, obj: Any) -> str:
        if isinstance(obj, _SCALARS):
            return f"{type(obj).__name__}:{obj!r}"
        if isinstance(obj, np.generic):
            return f"np:{obj.dtype.str}:{obj.tobytes().hex()}"
        if isinstance(obj, np.ndarray):  # a constant table: its content (kiln.lang.tables)
            digest = hashlib.sha256(np.ascontiguousarray(obj).tobytes()).hexdigest()
            return f"ndarray:{obj.dtype.str}:{obj.shape}:{digest}"
        if isinstance(obj, tuple):
            return f"({', '.join(self.value(v) for v in obj)})"
        if isinstance(obj, Type):
            return self.type(obj)
        if isinstance(obj, Compilable):
            return "{" + "\n".join(self.function(obj)) + "}"
        record = kiln_type_of(obj)
        if record is not None:
            if isinstance(obj, (type, Variant)):
                return f"{type(obj).__name__} {self.type(record)}"
            if isinstance(record, StructType):  # an instance: its type and field values
                values = tuple(getattr(obj, n, None) for n, _ in record.fields)
                return f"{self.type(record)} {self.value(values)}"
        if isinstance(obj, KernelOnly):
            return f"kiln builtin {obj.name}:{obj.intrinsic}"
        if isinstance(obj, ModuleType):
            return f"module {obj.__name__}"
        name = _known_names().get(id(obj))
        if name is not None and name[0] is obj:
            return name[1]
        raise NotFingerprintable(_describe(obj))

    def type(self, t: Type) -> str:
        if isinstance(t, (ScalarType, VectorType, VoidType)):
            return repr(t)
        if isinstance(t, ArrayType):
            return f"array({self.type(t.elem)}, {t.ndim}, {t.space.name}, {t.shape})"
        if isinstance(t, ConstexprType):
            return "constexpr" if t.value is None else f"constexpr({self.value(t.value)})"
        if isinstance(t, StructType):
            fields = ", ".join(f"{n}: {self.type(ft)}" for n, ft in t.fields)
            return f"struct {t.name}({fields}; defaults {self.mapping(field_defaults(t))})"
        if isinstance(t, VariantType):
            return f"variant {t.name}({', '.join(self.type(c) for c in t.cases)})"
        raise NotFingerprintable(f"the type {t!r} ({type(t).__name__})")

    def mapping(self, values: dict[str, Any]) -> str:
        return ", ".join(f"{k}={self.value(v)}" for k, v in sorted(values.items()))


class _Scope:
    """Names as the frontend's resolver sees them: closure, module globals, builtins. Cells
    are read at each lookup (`nonlocal` may bind another value), as module globals are."""

    def __init__(self, pyfunc: Any) -> None:
        self.cells = dict(zip(pyfunc.__code__.co_freevars, pyfunc.__closure__ or ()))
        self.globals = pyfunc.__globals__

    def lookup(self, name: str) -> Any:
        cell = self.cells.get(name)
        if cell is not None:
            with contextlib.suppress(ValueError):  # an empty cell: as if there were none
                return cell.cell_contents
        for scope in (self.globals, vars(builtins)):
            if name in scope:
                return scope[name]
        return _MISSING


@cache
def _static(parsed: ParsedFunction) -> tuple[str, tuple[tuple[tuple[str, ...], bool], ...]]:
    """What a function's fingerprint takes from its source alone (cached with its parse):
    its location and text, and the name chains it reads (`a`, `a.b.c`), once each in source
    order, each with whether the function also binds the chain's first name."""
    tree = parsed.tree
    first = min([tree.lineno, *(d.lineno for d in tree.decorator_list)])
    lines = linecache.getlines(parsed.file)[first + parsed.line_offset - 1:
                                            (tree.end_lineno or tree.lineno) + parsed.line_offset]
    text = (f"{parsed.file}:{first + parsed.line_offset}:{parsed.col_offset}\n"
            + ("".join(lines) or ast.dump(tree)))
    chains: list[tuple[str, ...]] = []
    bound: set[str] = set()
    for field in ("args", "returns", "body"):  # decorators ran already: their result is `fn`
        _scan_field(getattr(tree, field), chains, bound)
    params = {a.arg for a in tree.args.args}
    found: dict[tuple[str, ...], bool] = {}
    for chain in chains:
        if chain[0] not in params:
            found.setdefault(chain, chain[0] in bound)
    return text, tuple(found.items())


def _scan(node: ast.AST, chains: list[tuple[str, ...]], bound: set[str]) -> None:
    """Collect the name chains `node` reads and the names it binds."""
    if isinstance(node, ast.Name):
        if isinstance(node.ctx, ast.Load):
            chains.append((node.id,))
        else:
            bound.add(node.id)
        return
    if isinstance(node, ast.Attribute):
        chain = _dotted(node)
        if chain is not None:
            chains.append(chain)
            return
    elif isinstance(node, ast.arg):
        bound.add(node.arg)
    elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
        bound.add(node.name)
    for field in node._fields:
        child = getattr(node, field, None)
        if field in ("annotation", "returns") and isinstance(child, ast.Constant) \
                and isinstance(child.value, str):  # a string annotation is evaluated too
            with contextlib.suppress(SyntaxError):
                _scan(ast.parse(child.value, mode="eval"), chains, bound)
        else:
            _scan_field(child, chains, bound)


def _scan_field(child: Any, chains: list[tuple[str, ...]], bound: set[str]) -> None:
    if isinstance(child, ast.AST):
        _scan(child, chains, bound)
    elif isinstance(child, list):
        for item in child:
            if isinstance(item, ast.AST):
                _scan(item, chains, bound)


def _dotted(node: ast.expr) -> tuple[str, ...] | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return (node.id, *reversed(parts))


@cache
def _known_names() -> dict[int, tuple[Any, str]]:
    """Members of kiln's kernel language (the modules kiln's public names come from), math,
    numpy and Python's builtins, by identity: what they mean in a kernel is kiln's code
    (part of the cache key through kiln's own identity)."""
    known: dict[int, tuple[Any, str]] = {}
    for module in (kiln_types, kiln_builtins, records, functions, math, np, builtins):
        for name, value in vars(module).items():
            known.setdefault(id(value), (value, f"{module.__name__}.{name}"))
    return known


def _describe(obj: Any) -> str:
    name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
    return f"{type(obj).__name__} {name}" if name else f"a {type(obj).__name__}"
