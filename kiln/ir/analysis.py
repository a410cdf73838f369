"""Small analyses over IR used by the executor, passes and backends."""

from __future__ import annotations

from .nodes import (
    ArrayType,
    Assign,
    Call,
    Expr,
    For,
    IntrinsicCall,
    Native,
    Program,
    Stmt,
    Store,
    Var,
)
from .visit import walk


def reads_and_writes(node: Stmt | Expr | list[Stmt]) -> tuple[set[str], set[str]]:
    """The variables read and written under `node`: an indexed array counts as read, a for
    loop's variable as both, and every variable of a `Native` block as both."""
    reads: set[str] = set()
    writes: set[str] = set()
    for n in walk(node):
        if isinstance(n, Var):
            reads.add(n.name)
        elif isinstance(n, Assign):
            writes.add(n.target)
        elif isinstance(n, For):
            writes.add(n.var)
            reads.add(n.var)
        elif isinstance(n, Native):  # hand-written code may write what it mentions
            writes |= {v.name for v in n.vars}
    return reads, writes


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
