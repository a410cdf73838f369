"""Barrier regions (PoCL's work-item loops): how the cpu backend runs a block without fibers.

The kernel body is split at barriers into *regions*, maximal runs of barrier-free
statements. Each region runs as one loop over the block's threads. Statements that contain
a barrier (or that leave a loop containing one) stay at *block level*: they are block-uniform
(the convergence check guarantees it), so their conditions are evaluated once per block.

Variables are classified by where they are used:
- PRIVATE: used in one region only and not carried around a block-level loop: a plain C
  local of that region's thread loop;
- THREAD: live across regions: a per-thread array indexed by the thread's linear id, read
  into a local at the start of each region and written back at its end;
- BLOCK: the variable of a block-level `for` loop: one value per block.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...framework.intrinsics import intrinsics
from ...ir import nodes as ir
from ...ir.enums import MemorySpace
from ...ir.types import ArrayType
from ...ir.visit import walk
from ...lang.errors import UnsupportedError


@dataclass
class Region:
    index: int
    body: list[ir.Stmt]
    in_loop: bool
    reads: set[str] = field(default_factory=set)
    writes: set[str] = field(default_factory=set)
    has_return: bool = False


@dataclass
class BlockIf:
    stmt: ir.If
    then: list[Item]
    orelse: list[Item]


@dataclass
class BlockLoop:
    stmt: ir.While | ir.For
    body: list[Item]


@dataclass
class BlockJump:
    stmt: ir.Break | ir.Continue | ir.Return


@dataclass
class Barrier:
    stmt: ir.ExprStmt


Item = Region | BlockIf | BlockLoop | BlockJump | Barrier


@dataclass
class Plan:
    items: list[Item]
    regions: list[Region]
    private: dict[str, int]  # variable -> the region declaring it
    thread: list[str]  # per-thread storage, in declaration order
    block: list[str]  # block-level loop variables
    exits: bool  # threads may return while later regions still run
    block_return: bool  # a uniform return leaves the block from block level

    @property
    def has_barrier(self) -> bool:
        return len(self.regions) > 1 or any(not isinstance(i, Region) for i in self.items)


def is_barrier(s: ir.Stmt) -> bool:
    return (isinstance(s, ir.ExprStmt) and isinstance(s.expr, ir.IntrinsicCall)
            and intrinsics[s.expr.name].convergent)


def _contains_barrier(s: ir.Stmt, program: ir.Program) -> bool:
    for n in walk(s):
        if isinstance(n, ir.IntrinsicCall) and intrinsics[n.name].convergent:
            return True
        if isinstance(n, ir.Call) and _function_has_barrier(program, n.func, set()):
            raise UnsupportedError(
                f"the cpu backend cannot run a barrier inside device function {n.func}; "
                "call barrier() from the kernel", n.loc)
    return False


def _function_has_barrier(program: ir.Program, name: str, seen: set[str]) -> bool:
    if name in seen:
        return False
    seen.add(name)
    for n in walk(program.function(name).body):
        if isinstance(n, ir.IntrinsicCall) and intrinsics[n.name].convergent:
            return True
        if isinstance(n, ir.Call) and _function_has_barrier(program, n.func, seen):
            return True
    return False


def _escapes(s: ir.Stmt) -> bool:
    """Whether `s` contains a return, or a break/continue of a loop around it."""

    def visit(node: ir.Stmt, depth: int) -> bool:
        if isinstance(node, ir.Return):
            return True
        if isinstance(node, (ir.Break, ir.Continue)):
            return depth == 0
        inner = depth + isinstance(node, (ir.While, ir.For))
        bodies = [getattr(node, name) for name in ("then", "orelse", "body")
                  if isinstance(getattr(node, name, None), list)]
        return any(visit(c, inner) for body in bodies for c in body)

    return visit(s, 0)


def _names(node: ir.Stmt | ir.Expr | list[ir.Stmt]) -> tuple[set[str], set[str]]:
    """Variables read and written under a node (arrays count as read when indexed)."""
    reads: set[str] = set()
    writes: set[str] = set()
    for n in walk(node):
        if isinstance(n, ir.Var):
            reads.add(n.name)
        elif isinstance(n, ir.Assign):
            writes.add(n.target)
        elif isinstance(n, ir.For):
            writes.add(n.var)
            reads.add(n.var)
    return reads, writes


class _Splitter:
    def __init__(self, program: ir.Program) -> None:
        self.program = program
        self.regions: list[Region] = []
        self.block_reads: set[str] = set()
        self.block_loop_vars: list[str] = []
        self.block_return = False

    def split(self, body: list[ir.Stmt], in_loop: bool) -> list[Item]:
        items: list[Item] = []
        run: list[ir.Stmt] = []

        def flush() -> None:
            if run:
                region = Region(len(self.regions), list(run), in_loop)
                region.reads, region.writes = _names(region.body)
                region.has_return = any(isinstance(n, ir.Return) for n in walk(region.body))
                self.regions.append(region)
                items.append(region)
                run.clear()

        for s in body:
            if is_barrier(s):
                flush()
                items.append(Barrier(s))  # type: ignore[arg-type]
            elif _contains_barrier(s, self.program) or (in_loop and _escapes(s)):
                flush()
                items.append(self.block_level(s, in_loop))
            else:
                run.append(s)
        flush()
        return items

    def block_level(self, s: ir.Stmt, in_loop: bool) -> Item:
        if isinstance(s, ir.If):
            self.block_reads |= _names(s.cond)[0]
            return BlockIf(s, self.split(s.then, in_loop), self.split(s.orelse, in_loop))
        if isinstance(s, ir.While):
            self.block_reads |= _names(s.cond)[0]
            return BlockLoop(s, self.split(s.body, True))
        if isinstance(s, ir.For):
            for e in (s.start, s.stop, s.step):
                self.block_reads |= _names(e)[0]
            self.block_loop_vars.append(s.var)
            return BlockLoop(s, self.split(s.body, True))
        if isinstance(s, (ir.Break, ir.Continue, ir.Return)):
            self.block_return |= isinstance(s, ir.Return)
            return BlockJump(s)
        raise UnsupportedError("barrier() must be a statement of its own", s.loc)


def _assigned_first(var: str, body: list[ir.Stmt]) -> bool:
    """Whether the first top-level statement using `var` assigns it without reading it."""
    for s in body:
        reads, writes = _names(s)
        if var in reads or var in writes:
            return (isinstance(s, ir.Assign) and s.target == var
                    and var not in _names(s.value)[0])
    return False


def plan_kernel(program: ir.Program) -> Plan:
    """Split the kernel into regions and classify its variables."""
    kernel = program.kernel
    splitter = _Splitter(program)
    items = splitter.split(kernel.body, in_loop=False)
    regions = splitter.regions
    block_vars = list(dict.fromkeys(splitter.block_loop_vars))
    for r in regions:
        clash = r.writes & set(block_vars)
        if clash:
            raise UnsupportedError(
                f"the cpu backend needs the variable of a loop containing a barrier "
                f"({sorted(clash)[0]}) not to be assigned elsewhere; use another name",
                r.body[0].loc)
    params = {p.name for p in kernel.params}
    candidates = [*(p.name for p in kernel.params if p.name in _all_writes(regions)),
                  *(n for n, t in kernel.locals.items()
                    if not (isinstance(t, ArrayType) and t.space is MemorySpace.SHARED))]
    private: dict[str, int] = {}
    thread: list[str] = []
    for name in candidates:
        if name in block_vars:
            continue
        users = [r for r in regions if name in r.reads or name in r.writes]
        if not users and name not in splitter.block_reads:
            continue
        t = kernel.var_type(name)
        carried = users and users[0].in_loop and (
            isinstance(t, ArrayType) or not _assigned_first(name, users[0].body))
        if (len(users) == 1 and name not in splitter.block_reads and not carried
                and name not in params):
            private[name] = users[0].index
        else:
            thread.append(name)
    exits = len(regions) > 1 and any(r.has_return for r in regions)
    return Plan(items, regions, private, thread, block_vars, exits, splitter.block_return)


def _all_writes(regions: list[Region]) -> set[str]:
    out: set[str] = set()
    for r in regions:
        out |= r.writes
    return out
