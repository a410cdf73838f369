"""Code generation shared by the C-family backends (cpu, cuda, opencl, ...).

`CEmitter` is the one walker over IR; a backend's dialect is a small subclass that sets
data and registers spellings in `kiln.ir.intrinsics` under its namespace.
`kernel_abi` is the one definition of how kernel parameters are flattened for launches.
"""

from ..ir.abi import AbiParam, abi_values, function_abi, kernel_abi
from ..ir.visit import handles
from . import c_intrinsics  # noqa: F401 - registers the "c" namespace
from .diagnostics import compile_error
from .emitter import GENERATED_FILE, CEmitter, CExpr
from .names import NameTable

__all__ = ["AbiParam", "CEmitter", "CExpr", "GENERATED_FILE", "NameTable", "abi_values",
           "compile_error", "function_abi", "handles", "kernel_abi"]
