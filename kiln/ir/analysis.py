"""Small analyses over IR used by the executor and passes."""

from __future__ import annotations

from .nodes import ArrayType, Call, IntrinsicCall, Program, Store, Var
from .visit import walk


def written_params(program: Program) -> set[str]:
    """Names of the kernel's array parameters that it may write (stores, atomics, calls)."""
    kernel = program.kernel
    arrays = {p.name for p in kernel.params if isinstance(p.type, ArrayType)}
    written: set[str] = set()
    for node in walk(kernel.body):
        if isinstance(node, Store):
            written.add(node.array.name)
        elif isinstance(node, IntrinsicCall) and node.name.startswith("atomic_"):
            arg = node.args[0]
            if isinstance(arg, Var):
                written.add(arg.name)
        elif isinstance(node, Call):
            written.update(a.name for a in node.args if isinstance(a, Var))
    return written & arrays
