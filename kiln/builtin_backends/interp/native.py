"""`kiln.native(python=fn)` on the interpreter.

`fn` is called once per statement execution with the active threads together: each
parameter names a kernel variable and receives, for a scalar, a 1-D NumPy array of the
active threads' values (in lane order), and for an array parameter, the NumPy array itself
(global arrays only), which `fn` may write in place. `fn` returns None or a dict mapping
scalar variables among its parameters to new values (one per active thread, or one for all).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ...errors import KernelError, UnsupportedError
from ...ir import nodes as ir
from ...ir.enums import MemorySpace
from ...ir.types import ArrayType, ScalarType
from ...lang.native import native_code
from .memory import ArrayRef
from .values import Mask, materialise

if TYPE_CHECKING:
    from .executor import Frame, FunctionCode


def native_statement(code: FunctionCode, s: ir.Native) -> Callable[[Frame, Mask], Mask]:
    python = native_code(s, "python", "the interp backend")
    assert callable(python)
    fn: Callable[..., object] = python
    params = list(inspect.signature(fn).parameters)
    variables = {name: var for name, var in zip(s.names, s.vars) if name in params}
    assigners = {name: code._assigner(var.name) for name, var in variables.items()
                 if isinstance(var.type, ScalarType)}

    def run(f: Frame, m: Mask) -> Mask:
        if m is False:
            return m
        n = f.chunk.n
        active = np.ones(n, bool) if m is None else np.asarray(m)
        count = int(np.count_nonzero(active))
        kwargs = {name: _argument(f.vars[var.name], var, active, s) for name, var in
                  variables.items()}
        result = fn(**kwargs)
        if result is None:
            return m
        if not isinstance(result, dict):
            raise KernelError(f"kiln.native's python function returned {type(result).__name__}"
                              "; return None or a dict of new values", s.loc)
        for name, value in result.items():
            if name not in assigners:
                raise KernelError(f"kiln.native's python function assigned '{name}', which is "
                                  "not one of its scalar parameters", s.loc)
            scalar = variables[name].type
            assert isinstance(scalar, ScalarType)
            dtype = scalar.dtype
            full = np.zeros(n, dtype)
            full[active] = np.broadcast_to(np.asarray(value, dtype), (count,))
            assigners[name](f, full, m)
        return m

    return run


def _argument(value: Any, var: ir.Var, active: np.ndarray, s: ir.Native) -> Any:
    if isinstance(var.type, ArrayType):
        assert isinstance(value, ArrayRef)
        if value.space is not MemorySpace.GLOBAL:
            raise UnsupportedError(f"kiln.native's python code can use global arrays only; "
                                   f"'{var.name}' is a {value.space.value} array", s.loc)
        return value.flat.reshape(value.shape)
    value = materialise(value)
    if isinstance(value, np.ndarray) and value.ndim:
        return value[active]
    return np.full(int(np.count_nonzero(active)), value, var.type.dtype)  # type: ignore[attr-defined]
