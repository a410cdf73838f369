"""`kiln.native(...)`: hand-written code per backend language, as an IR `Native` statement.

`kiln.native(cuda="{y} = __fsqrt_rn({x});", opencl="{y} = sqrt({x});", c="{y} = sqrtf({x});",
python=fn)`: each keyword names a language; a string is source in which `{name}` (no spaces)
stands for the kernel variable `name`, and other braces are left alone. `python=` is a
module-level function whose parameter names are kernel variables (see docs/language-
advanced.md for how DIRECT backends call it). Every variable named must already be defined
(declare one the code only writes with `y: f32`); constexpr names become their value.
"""

from __future__ import annotations

import ast
import inspect
import re
from typing import TYPE_CHECKING, Any

from ..errors import KernelTypeError, UnknownNameError, UnsupportedError
from ..ir import nodes as ir

if TYPE_CHECKING:
    from .scope import Scope

PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
PYTHON = "python"


def build_native(scope: Scope, call: ast.Call) -> ir.Native:
    loc = scope.loc(call)
    if call.args or not call.keywords:
        raise UnsupportedError('kiln.native takes keyword arguments only, one per language: '
                               'kiln.native(cuda="...", opencl="...", c="...", python=fn)', loc)
    code: dict[str, object] = {}
    names: list[str] = []
    for kw in call.keywords:
        if kw.arg is None:
            raise UnsupportedError("kiln.native takes no **kwargs", loc)
        value = _static_value(scope, kw.value)
        if kw.arg == PYTHON:
            if not inspect.isfunction(value):
                raise KernelTypeError("python= needs a module-level function whose "
                                      "parameters name kernel variables", scope.loc(kw.value))
            mentioned = list(inspect.signature(value).parameters)
        elif isinstance(value, str):
            value = _substitute_constants(scope, value)
            mentioned = PLACEHOLDER.findall(value)
        else:
            raise KernelTypeError(f"{kw.arg}= needs a string of {kw.arg} source",
                                  scope.loc(kw.value))
        code[kw.arg] = value
        names += [n for n in mentioned if n not in names]
    variables = [_variable(scope, name, loc) for name in names]
    return ir.Native(code, names, variables, loc=loc)


def _static_value(scope: Scope, node: ast.expr) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, (ast.Name, ast.Attribute)) and not scope.is_local(node):
        return scope.resolver.resolve(node, scope.loc(node))
    raise UnsupportedError("kiln.native's arguments must be string literals, module-level "
                           "strings or module-level functions", scope.loc(node))


def _substitute_constants(scope: Scope, text: str) -> str:
    """`{n}` for a compile-time constant (a constexpr parameter) becomes its value."""

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name in scope.constants:
            return repr(scope.constants[name])
        return match.group(0)

    return PLACEHOLDER.sub(replace, text)


def _variable(scope: Scope, name: str, loc: ir.Loc) -> ir.Var:
    t = scope.type_of(name)
    if t is None:
        raise UnknownNameError(f"kiln.native mentions '{name}', which is not a variable here "
                               f"(declare it first, e.g. `{name}: f32`)", loc)
    if name not in scope.defined:
        raise UnknownNameError(f"kiln.native mentions '{name}' before it is assigned "
                               f"(declare it first, e.g. `{name}: {t}`)", loc)
    return ir.Var(t, name, loc=loc)


def native_code(node: ir.Native, language: str, who: str) -> object:
    """The code `node` has for `language`, or a clear error naming the languages it has."""
    code = node.code.get(language)
    if code is None:
        covered = ", ".join(f"{k}=" for k in node.code)
        raise UnsupportedError(f"kiln.native has no code for {who}, which needs {language}=; "
                               f"this call only covers {covered}", node.loc)
    return code
