"""Which barriers order global memory and which device functions reach a barrier: dataflow
over the IR for dialects whose barrier fences are chosen per call (OpenCL's
`CLK_GLOBAL_MEM_FENCE`), where CUDA's `__syncthreads` always orders global memory."""

from __future__ import annotations

from . import nodes as ir
from .enums import MemorySpace
from .intrinsics import intrinsics
from .types import ArrayType, Type
from .visit import walk

Access = tuple[frozenset[str], frozenset[str]]
"""Global arrays (kernel parameter names; `*` for any) read and written."""
NONE: Access = (frozenset(), frozenset())
ANY = frozenset("*")


def global_barriers(program: ir.Program) -> set[int]:
    """Ids of the barrier calls that need CLK_GLOBAL_MEM_FENCE: where one global array may be
    written on one side of the barrier and read or written on the other (loops count both
    ways), as in CUDA, where __syncthreads orders global memory too. Distinct array
    arguments are taken not to overlap. Barriers in device functions always get it."""
    touches: dict[str, Access] = {}
    fenced: set[int] = set()
    for func in program.functions:  # callees first
        reads, writes = _access(func.body, touches)
        touches[func.name] = (ANY if reads else frozenset(), ANY if writes else frozenset())
        fenced |= {id(n) for n in walk(func.body) if is_barrier(n)}
    before: dict[int, Access] = {}
    after: dict[int, Access] = {}

    def scan(body: list[ir.Stmt], seen: Access, out: dict[int, Access], forward: bool
             ) -> Access:
        for stmt in body if forward else reversed(body):
            if isinstance(stmt, ir.If):
                cond = _access(stmt.cond, touches)
                start = _union(seen, cond) if forward else seen
                seen = _union(cond, *(scan(b, start, out, forward)
                                      for b in (stmt.then, stmt.orelse)))
            elif isinstance(stmt, (ir.While, ir.For)):
                seen = _union(seen, _access(stmt, touches))  # the next iteration counts too
                scan(stmt.body, seen, out, forward)
            elif isinstance(stmt, ir.ExprStmt) and is_barrier(stmt.expr):
                out[id(stmt.expr)] = seen
            else:
                seen = _union(seen, _access(stmt, touches))
        return seen

    scan(program.kernel.body, NONE, before, True)
    scan(program.kernel.body, NONE, after, False)
    for key, (reads0, writes0) in before.items():
        reads1, writes1 = after[key]
        if _meet(writes0, reads1 | writes1) or _meet(reads0, writes1):
            fenced.add(key)
    return fenced


def _union(*accesses: Access) -> Access:
    return (frozenset().union(*(a[0] for a in accesses)),
            frozenset().union(*(a[1] for a in accesses)))


def _meet(a: frozenset[str], b: frozenset[str]) -> bool:
    return bool(a & b) or bool(a and "*" in b) or bool(b and "*" in a)


def _access(node: ir.Expr | ir.Stmt | list[ir.Stmt], touches: dict[str, Access]) -> Access:
    reads: set[str] = set()
    writes: set[str] = set()
    for n in walk(node):
        if isinstance(n, ir.Load) and _is_global(n.array.type):
            reads.add(n.array.name)
        elif isinstance(n, ir.Store) and _is_global(n.array.type):
            writes.add(n.array.name)
        elif (isinstance(n, ir.IntrinsicCall) and intrinsics[n.name].category == "atomic"
              and _is_global(n.args[0].type)):
            reads.add(n.args[0].name)  # type: ignore[attr-defined]
            writes.add(n.args[0].name)  # type: ignore[attr-defined]
        elif isinstance(n, ir.Call):
            called = touches.get(n.func, NONE)
            reads |= called[0]
            writes |= called[1]
    return frozenset(reads), frozenset(writes)


def barrier_functions(program: ir.Program) -> set[str]:
    """Names of the device functions that reach a barrier (themselves or through calls)."""
    found: set[str] = set()
    for func in program.functions:  # callees first
        if any(is_barrier(n) or (isinstance(n, ir.Call) and n.func in found)
               for n in walk(func.body)):
            found.add(func.name)
    return found


def is_barrier(node: ir.Expr | ir.Stmt) -> bool:
    return isinstance(node, ir.IntrinsicCall) and node.name == "barrier"


def _is_global(t: Type) -> bool:
    return isinstance(t, ArrayType) and t.space is MemorySpace.GLOBAL
