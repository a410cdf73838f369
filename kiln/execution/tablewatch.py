"""Constant tables that change after their kernel was built are never read stale.

A kernel reads a module-level NumPy array as a constant table (`kiln.lang.tables`): the
frontend copies it into the program, which the backend compiles in. A `TableWatch` keeps,
for every name chain the kernel and its device functions read that denotes an array (`LUT`,
`consts.LUT`), the array object and a copy of its bytes. A launch asks `changed()`
(`Kernel.check_tables`, before the executor specialises and before the frontend builds a
program; a fast-path plan before it launches): when a name now denotes another array, or
the array's shape, type or content differ, the kernel forgets what it compiled and is built
again with the new values (`Kernel.forget_compiled`). A `dim=` variant (`SizedKernel`) is
built from its kernel's programs, so it shares its kernel's watch. The
check costs a few dict lookups and one `tobytes` comparison per table (at most 32 KiB),
and only kernels that read tables pay it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..lang.functions import Compilable
from ..lang.source import parse_function
from .fingerprint import _MISSING, _Scope, _static


class TableRead:
    """One array a function reads by name, as it was when the watch was made."""

    __slots__ = ("scope", "chain", "names", "array", "dtype", "shape", "content")

    def __init__(self, scope: _Scope, chain: tuple[str, ...], array: np.ndarray) -> None:
        self.scope, self.chain, self.array = scope, chain, array
        self.dtype, self.shape, self.content = array.dtype, array.shape, array.tobytes()
        self.names = _names_holding(scope, chain)

    def changed(self) -> bool:
        array = self.array
        now = (self.names.get(self.chain[0], _MISSING) if self.names is not None
               else _resolve(self.scope, self.chain))
        return (now is not array or array.shape != self.shape or array.dtype is not self.dtype
                or array.tobytes() != self.content)

    def describe(self) -> str:
        return ".".join(self.chain)


def _names_holding(scope: _Scope, chain: tuple[str, ...]) -> dict[str, Any] | None:
    """For a plain global name, the module's globals to look it up in again; None for a
    closure's name (its cell, which `nonlocal` may rebind) or an attribute chain, resolved
    each time."""
    if len(chain) > 1 or chain[0] in scope.cells or chain[0] not in scope.globals:
        return None
    return scope.globals


class TableWatch:
    """The tables one kernel reads (through its device functions too), as built."""

    def __init__(self, kernel: Compilable) -> None:
        self.reads: tuple[TableRead, ...] = tuple(_reads(kernel, set()))

    def changed(self) -> bool:
        """Whether some table differs from what the kernel was built with."""
        return any(read.changed() for read in self.reads)

    def changed_names(self) -> list[str]:
        return [read.describe() for read in self.reads if read.changed()]


def _reads(fn: Compilable, seen: set[int]) -> list[TableRead]:
    """The arrays `fn` reads by name, then those of the device functions it names."""
    if id(fn) in seen:
        return []
    seen.add(id(fn))
    _, chains = _static(parse_function(fn.pyfunc))
    scope = _Scope(fn.pyfunc)
    out: list[TableRead] = []
    for chain, _local in chains:
        for end in range(1, len(chain) + 1):
            obj = _resolve(scope, chain[:end])
            if isinstance(obj, np.ndarray):
                out.append(TableRead(scope, chain[:end], obj))
                break
            if isinstance(obj, Compilable):
                out += _reads(obj, seen)
                break
            if obj is _MISSING:
                break
    return out


def _resolve(scope: _Scope, chain: tuple[str, ...]) -> Any:
    """What `a.b.c` denotes now (`_MISSING` where a part is absent or cannot be read)."""
    obj = scope.lookup(chain[0])
    for attr in chain[1:]:
        if obj is _MISSING:
            break
        try:
            obj = getattr(obj, attr, _MISSING)
        except Exception:  # a property that raises: not a table
            return _MISSING
    return obj
