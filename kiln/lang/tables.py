"""Module-level NumPy arrays read by kernels: read-only constant tables.

`LUT = np.array([...], np.float32)` at module level and `LUT[i]` in a kernel or device
function: the frontend copies the array when it builds the kernel (a launch after the NumPy
array changed builds it again: `kiln.execution.tablewatch`), names it `_kt_<name>` in
`Program.tables`, and
gives each function that reads it a local of type `ArrayType(space=CONSTANT, shape=...)`.
Backends declare it once at program scope: CUDA's `__constant__`, OpenCL's `__constant`,
C's `static const`; the interp reads the array. The kernel key fingerprints globals by
content, so a changed table misses the disk cache.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..errors import KernelTypeError
from ..ir import nodes as ir
from ..ir.enums import MemorySpace
from ..ir.types import SCALAR_BY_DTYPE, ArrayType

if TYPE_CHECKING:
    import ast

    from .frontend import FunctionBuilder

MAX_TABLE_BYTES = 32 * 1024
"""Largest table: half of CUDA's 64 KiB of constant memory, so that a few fit together."""


def table_expr(builder: FunctionBuilder, array: np.ndarray, node: ast.AST, label: str
               ) -> ir.Var:
    """The table variable for `array` (the module-level global `label`)."""
    loc = builder.scope.loc(node)
    elem = SCALAR_BY_DTYPE.get(array.dtype)
    if elem is None or array.dtype == np.bool_:
        raise KernelTypeError(f"module-level array '{label}' holds {array.dtype}: constant "
                              "tables hold numbers (pass other arrays as arguments)", loc)
    if not 1 <= array.ndim <= 3 or array.size == 0:
        raise KernelTypeError(f"module-level array '{label}' has shape {array.shape}: "
                              "constant tables have 1 to 3 dimensions and elements", loc)
    if array.nbytes > MAX_TABLE_BYTES:
        raise KernelTypeError(f"module-level array '{label}' has {array.nbytes} bytes, over "
                              f"the {MAX_TABLE_BYTES} bytes of a constant table: pass it as "
                              "an argument", loc)
    tables = builder.ctx.tables
    name = f"_kt_{label.replace('.', '_')}"
    while name in tables and not _same(tables[name], array):
        name += "_"
    if name not in tables:
        frozen = np.array(array, copy=True)
        frozen.flags.writeable = False
        tables[name] = frozen
    t = ArrayType(elem, array.ndim, MemorySpace.CONSTANT, tuple(int(n) for n in array.shape))
    builder.scope.local_types[name] = t
    builder.scope.defined.add(name)
    return ir.Var(t, name, loc=loc)


def _same(table: np.ndarray, array: np.ndarray) -> bool:
    """The same table, bit for bit (NaNs included, which `np.array_equal` calls different)."""
    return (table.dtype == array.dtype and table.shape == array.shape
            and table.tobytes() == array.tobytes())
