"""Compile-time name resolution: globals, closure constants, builtins and annotations."""

from __future__ import annotations

import ast
import builtins
import inspect
from collections.abc import Callable
from typing import Any

from ..errors import KernelTypeError, UnknownNameError, UnsupportedError
from ..ir.hosttypes import type_from_object
from ..ir.nodes import Loc
from ..ir.types import (
    Type,
)
from .source import parse_function

_MISSING = object()


class StaticResolver:
    """Looks names up as the Python function would see them, at compile time."""

    def __init__(self, pyfunc: Callable[..., Any]) -> None:
        self.globals = pyfunc.__globals__
        closure = inspect.getclosurevars(pyfunc).nonlocals if pyfunc.__closure__ else {}
        self.closure = dict(closure)

    def lookup(self, name: str, loc: Loc) -> Any:
        for scope in (self.closure, self.globals, vars(builtins)):
            if name in scope:
                return scope[name]
        raise UnknownNameError(f"name '{name}' is not defined", loc)

    def resolve(self, node: ast.expr, loc: Loc) -> Any:
        """The Python object a name or attribute chain denotes (errors at `loc` if none)."""
        value = self._resolve(node)
        if value is _MISSING:
            raise UnknownNameError(f"'{ast.unparse(node)}' is not defined", loc)
        return value

    def try_resolve(self, node: ast.expr) -> Any:
        value = self._resolve(node)
        return None if value is _MISSING else value

    def _resolve(self, node: ast.expr) -> Any:
        if isinstance(node, ast.Name):
            for scope in (self.closure, self.globals, vars(builtins)):
                if node.id in scope:
                    return scope[node.id]
            return _MISSING
        if isinstance(node, ast.Attribute):
            base = self._resolve(node.value)
            if base is _MISSING:
                return _MISSING
            return getattr(base, node.attr, _MISSING)
        return _MISSING


def parameter_types(pyfunc: Callable[..., Any]) -> list[tuple[str, Type | None]]:
    """Parameter names and annotated types (None where a parameter has no annotation)."""
    parsed = parse_function(pyfunc)
    resolver = StaticResolver(pyfunc)
    args = parsed.tree.args
    if args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs or args.defaults:
        raise UnsupportedError(
            "kernel parameters must be plain positional parameters (no *args, **kwargs, "
            "keyword-only parameters or defaults)", parsed.loc(args.args[0] if args.args
                                                              else parsed.tree))
    out: list[tuple[str, Type | None]] = []
    for a in args.args:
        t = None
        if a.annotation is not None:
            t = annotation_type(resolver, a.annotation, parsed.loc(a.annotation))
        out.append((a.arg, t))
    return out


def annotation_type(resolver: StaticResolver, node: ast.expr, loc: Loc) -> Type:
    """Evaluate an annotation expression in the function's scope and map it to a kiln type."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        node = ast.parse(node.value, mode="eval").body
    try:
        scope = {**vars(builtins), **resolver.globals, **resolver.closure}
        obj = eval(compile(ast.Expression(node), "<annotation>", "eval"), scope)
    except NameError as exc:
        raise UnknownNameError(f"cannot evaluate the annotation '{ast.unparse(node)}': {exc}",
                               loc) from None
    except Exception as exc:
        raise KernelTypeError(f"cannot evaluate the annotation '{ast.unparse(node)}': {exc}",
                              loc) from None
    t = type_from_object(obj)
    if t is None:
        raise KernelTypeError(f"'{ast.unparse(node)}' is not a kiln type (use f32, i32, "
                              "f32[:], ...)", loc)
    return t
