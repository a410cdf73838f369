"""Barrier regions (PoCL's work-item loops): the plan `lower_thread_loops` builds its loops from.

The kernel body is split at barriers into *regions*, maximal runs of barrier-free
statements. Each region runs as one loop over the block's threads. Statements that contain
a barrier (or that leave a loop containing one) stay at *block level*: they are block-uniform
(the convergence check guarantees it), so their conditions are evaluated once per block.

A `for` loop whose bounds are block-uniform and which no `break`/`continue`/`return`
leaves also runs at block level ("lockstep"): each iteration runs the block's threads,
which is a valid SIMT schedule and lets gcc vectorise the body across threads (the tiled
matmul's inner `for k in range(TILE)`).

A barrier-free `while` loop with a straight-line body (no loops, calls, side-effecting
intrinsics or early exits) runs lockstep too, with an activity mask: its region is the loop
body, run once per iteration for the threads whose condition still holds, until none does
(`Region.loop`). An integer variable that the body steps once per iteration (`i += step`
at its top level, the step loop-invariant) and that is not read after the loop is an
*induction*: recomputed from the iteration number as `init + iteration * step` instead of
stored per thread, so a grid-stride loop's loads are affine in the thread index and
vectorise as contiguous loads. When the loop's test is `var < bound` for such an induction,
with `bound` and the step block-uniform and loop-invariant (`Region.counted`), every thread
runs at least the trip count of the thread that starts highest: those iterations run first
with no test and no mask, and only the rest run masked.

Variables are classified by where they are used:
- PRIVATE: no value flows between regions (used in one region only, or assigned before
  any read in each region but the first) and none is carried around a block-level loop:
  a plain C local of each region's thread loop;
- THREAD: live across regions: a per-thread array indexed by the thread's linear id, read
  into a local at the start of each region and written back at its end;
- UNIFORM: live across regions, but block-uniform by the convergence analysis (every thread
  of the block computes the same value): one variable per block, so that gcc sees it is
  the same for every thread (`s[t + k]` is a contiguous load, not a gather);
- BLOCK: the variable of a block-level `for` loop: one value per block (a region that
  runs its own loop over the same name gets a private shadow);
- REMAT: assigned once, at the top of the first region, from thread indices, parameters
  and constants: recomputed in each region instead of stored, so gcc still sees that
  `row = block_idx.y * 16 + thread_idx.y` is affine in the thread index.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from ...errors import UnsupportedError
from .. import nodes as ir
from ..analysis import reads_and_writes
from ..enums import MemorySpace
from ..intrinsics import Variance, intrinsics
from ..types import ArrayType, ScalarType, i8, i16, i32
from ..visit import Visitor, child_blocks, walk
from .convergence import Control, FunctionVariance, analyze

UNROLLED_TRIPS = 32


@dataclass(frozen=True)
class Counted:
    """A lockstep loop whose test is `induction.var < bound`, `bound` and the step
    block-uniform and loop-invariant, so its trip count follows from the initial value."""

    induction: ir.Induction
    bound: ir.Expr


@dataclass
class Region:
    index: int
    body: list[ir.Stmt]
    in_loop: bool
    reads: set[str] = field(default_factory=set)
    writes: set[str] = field(default_factory=set)
    has_return: bool = False
    private: list[str] = field(default_factory=list)  # declared in this region
    remat: list[str] = field(default_factory=list)  # recomputed at this region's start
    loop: ir.While | None = None  # the lockstep `while` whose body this region is
    inductions: list[ir.Induction] = field(default_factory=list)  # recomputed per pass
    counted: Counted | None = None  # trip counts known up front

    @property
    def sequence(self) -> list[ir.Stmt]:
        """The statements in the order a thread first meets them (a loop's test first)."""
        return [ir.ExprStmt(self.loop.cond), *self.body] if self.loop else self.body

    @property
    def test_reads(self) -> set[str]:
        """The variables a lockstep loop's condition reads."""
        if self.loop is None:
            return set()
        return reads_and_writes(self.loop.cond)[0] - {ind.var for ind in self.inductions}


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
    thread: list[str]  # per-thread storage, in declaration order
    uniform: list[str]  # live across regions but block-uniform: one value per block
    block: list[str]  # block-level loop variables
    remat: dict[str, ir.Assign]  # recomputed variables and their one assignment
    exits: bool  # threads may return while later regions still run
    block_return: bool  # a uniform return leaves the block from block level

    @property
    def masked(self) -> bool:
        """Whether a region runs a lockstep `while` loop (and needs the activity mask)."""
        return any(r.loop is not None for r in self.regions)

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
                f"a barrier inside device function {n.func} cannot run with explicit thread "
                "loops (the cpu backend); call barrier() from the kernel", n.loc)
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


def _escapes(s: ir.Stmt, loops: int = 0) -> bool:
    """Whether `s` contains a return, or a break/continue of a loop around it (`loops`:
    the loops between `s` and the statement asked about)."""
    if isinstance(s, ir.Return):
        return True
    if isinstance(s, (ir.Break, ir.Continue)):
        return loops == 0
    inner = loops + isinstance(s, (ir.While, ir.For))
    return any(_escapes(c, inner) for body in child_blocks(s) for c in body)


class _Splitter(Visitor[Item]):
    def __init__(self, program: ir.Program) -> None:
        self.program = program
        self.variance: FunctionVariance = analyze(program)[0]
        self.regions: list[Region] = []
        self.block_reads: set[str] = set()
        self.block_loop_vars: list[str] = []
        self.block_return = False
        self.in_loop = False  # whether the statement `block_level` splits is in a loop

    def region(self, body: list[ir.Stmt], in_loop: bool, loop: ir.While | None = None) -> Region:
        region = Region(len(self.regions), body, in_loop, loop=loop)
        region.reads, region.writes = reads_and_writes(region.sequence)
        region.has_return = any(isinstance(n, ir.Return) for n in walk(region.body))
        self.regions.append(region)
        return region

    def split(self, body: list[ir.Stmt], in_loop: bool) -> list[Item]:
        items: list[Item] = []
        run: list[ir.Stmt] = []

        def flush() -> None:
            if run:
                items.append(self.region(list(run), in_loop))
                run.clear()

        for k, s in enumerate(body):
            if is_barrier(s):
                flush()
                items.append(Barrier(s))  # type: ignore[arg-type]
            elif (_contains_barrier(s, self.program) or (in_loop and _escapes(s))
                  or self.lockstep(s)):
                flush()
                items.append(self.block_level(s, in_loop))
            elif isinstance(s, ir.While) and _straight_loop(s):
                flush()
                region = self.region(s.body, True, loop=s)
                region.inductions = _inductions(s, body[:k], self.program.kernel)
                items.append(region)
            else:
                run.append(s)
        flush()
        return items

    def lockstep(self, s: ir.Stmt) -> bool:
        """A `for` loop with block-uniform bounds that nothing leaves early (and that gcc
        does not unroll whole inside the thread loop: see `constant_trips`)."""
        if (not isinstance(s, ir.For) or any(_escapes(b) for b in s.body)
                or constant_trips(s) is not None):
            return False
        return all(self.variance.expr(e, Control()) <= Variance.BLOCK
                   for e in (s.start, s.stop, s.step))

    def block_level(self, s: ir.Stmt, in_loop: bool) -> Item:
        """A statement that holds a barrier or leaves a loop, as block-level control flow
        around the regions of its bodies (its `visit_<Stmt>`)."""
        self.in_loop = in_loop
        item: Item = self.visit(s)
        return item

    def visit_If(self, s: ir.If) -> Item:
        in_loop = self.in_loop
        self.block_reads |= reads_and_writes(s.cond)[0]
        return BlockIf(s, self.split(s.then, in_loop), self.split(s.orelse, in_loop))

    def visit_While(self, s: ir.While) -> Item:
        self.block_reads |= reads_and_writes(s.cond)[0]
        return BlockLoop(s, self.split(s.body, True))

    def visit_For(self, s: ir.For) -> Item:
        for e in (s.start, s.stop, s.step):
            self.block_reads |= reads_and_writes(e)[0]
        self.block_loop_vars.append(s.var)
        return BlockLoop(s, self.split(s.body, True))

    def visit_Break(self, s: ir.Break | ir.Continue | ir.Return) -> Item:
        self.block_return |= isinstance(s, ir.Return)
        return BlockJump(s)

    visit_Continue = visit_Return = visit_Break

    def generic_visit(self, node: ir.Expr | ir.Stmt) -> Item:
        raise UnsupportedError("barrier() must be a statement of its own", node.loc)


def constant_trips(s: ir.For) -> int | None:
    """The trip count of a barrier-free loop with constant bounds, when at most
    UNROLLED_TRIPS: such a loop stays inside its region, unrolled whole, so the thread loop
    around it vectorises with the loop's values in registers (the tiled matmul's
    `for k in range(16)`: 29 -> 40 GFLOP/s on one core, against running it lockstep)."""
    bounds = [e.value for e in (s.start, s.stop, s.step) if isinstance(e, ir.Const)]
    if len(bounds) < 3:
        return None
    start, stop, step = (int(b) for b in bounds)
    trips = len(range(start, stop, step))
    return trips if trips <= UNROLLED_TRIPS else None


def _straight_loop(s: ir.While) -> bool:
    """A `while` loop whose test and body have no loops, calls, side effects, hand-written
    code or exits from the loop: run lockstep with an activity mask, it vectorises."""
    if any(_escapes(b) for b in s.body):
        return False
    for n in itertools.chain(walk(s.cond), walk(s.body)):
        if isinstance(n, (ir.While, ir.For, ir.Call, ir.Native)):
            return False
        if isinstance(n, ir.IntrinsicCall) and intrinsics[n.name].side_effects:
            return False
    return True


def _invariant(e: ir.Expr, written: set[str]) -> bool:
    """A pure expression (index intrinsics allowed) of variables not in `written`."""
    for n in walk(e):
        if isinstance(n, ir.IntrinsicCall):
            if intrinsics[n.name].category != "index":
                return False
        elif not isinstance(n, PURE) or (isinstance(n, ir.Var) and n.name in written):
            return False
    return True


def _inductions(loop: ir.While, before: list[ir.Stmt], kernel: ir.Function
                ) -> list[ir.Induction]:
    """The integer variables the loop body steps once per iteration (`var += step` at its
    top level, `step` invariant, `var` assigned nowhere else in the body), each assigned
    `var = init` by the last statement before the loop that writes it."""
    written = [n.target for n in walk(loop.body) if isinstance(n, ir.Assign)]
    found: list[ir.Induction] = []
    for s in loop.body:
        if not (isinstance(s, ir.Assign) and isinstance(s.value, ir.BinOp)
                and s.value.op == "+" and written.count(s.target) == 1):
            continue
        var, left, right = s.target, s.value.left, s.value.right
        step = (right if isinstance(left, ir.Var) and left.name == var
                else left if isinstance(right, ir.Var) and right.name == var else None)
        t = kernel.var_type(var)
        if not (step is not None and isinstance(t, ScalarType) and t.is_int
                and _invariant(step, set(written))):
            continue
        init = next((x for x in reversed(before) if var in reads_and_writes(x)[1]), None)
        if isinstance(init, ir.Assign) and init.target == var:
            found.append(ir.Induction(var, init.value, step, loc=s.loc))
    return found


def _assigned_first(var: str, body: list[ir.Stmt]) -> bool:
    """Whether the first top-level statement using `var` assigns it (an assignment or a
    `for` loop over it) without reading it first. A vector-access hint is a plain block."""
    for s in _flatten_vector_access(body):
        reads, writes = reads_and_writes(s)
        if var in reads or var in writes:
            if isinstance(s, ir.For) and s.var == var:
                return not any(var in reads_and_writes(e)[0] for e in (s.start, s.stop, s.step))
            return (isinstance(s, ir.Assign) and s.target == var
                    and var not in reads_and_writes(s.value)[0])
    return False


def _flatten_vector_access(body: list[ir.Stmt]) -> list[ir.Stmt]:
    out: list[ir.Stmt] = []
    for s in body:
        out.extend(_flatten_vector_access(s.body) if isinstance(s, ir.VectorAccess) else [s])
    return out


def plan_kernel(program: ir.Program) -> Plan:
    """Split the kernel into regions and classify its variables."""
    kernel = program.kernel
    splitter = _Splitter(program)
    items = splitter.split(kernel.body, in_loop=False)
    regions = splitter.regions
    block_vars = list(dict.fromkeys(splitter.block_loop_vars))
    writes = set().union(*(r.writes for r in regions)) if regions else set()
    params = {p.name for p in kernel.params}
    inputs = params - writes - set(block_vars)
    remat = _rematerialisable(kernel, items, inputs, splitter.block_reads)
    fresh = {r.index: {ind.var for ind in r.inductions} for r in regions}
    for r in regions:
        _keep_inductions(r, regions, inputs | set(remat), splitter.block_reads, fresh)
        r.counted = _counted(r, splitter.variance)
        r.private += [n for n in block_vars if n in r.writes]  # shadows
        if r is not regions[0]:
            init_reads = set().union(*(reads_and_writes(i.init)[0] for i in r.inductions))
            r.remat = _needed(remat, r.reads | init_reads)
    candidates = [*(p for p in kernel.params if p.name in writes),
                  *(ir.Param(n, t) for n, t in kernel.locals.items()  # tables: program scope
                    if not (isinstance(t, ArrayType)
                            and t.space in (MemorySpace.SHARED, MemorySpace.CONSTANT)))]
    thread: list[str] = []
    for p in candidates:
        name = p.name
        if name in block_vars or name in remat:
            continue
        users = [r for r in regions if name in r.reads or name in r.writes]
        if not users and name not in splitter.block_reads:
            continue
        carried = bool(users) and users[0].in_loop and (
            isinstance(p.type, ArrayType) or not _assigned_first(name, users[0].sequence))
        if (name not in splitter.block_reads and not carried and name not in params
                and all(_assigned_first(name, r.sequence) for r in users[1:])):
            for r in users:  # no value flows between regions: a local in each
                r.private.append(name)
        else:
            thread.append(name)
    for name, assign in remat.items():
        owner = next(r for r in regions if assign in r.body)
        owner.private.append(name)
    exits = len(regions) > 1 and any(r.has_return for r in regions)
    variance = splitter.variance.var
    uniform = [n for n in thread if n not in params
               and not isinstance(kernel.var_type(n), ArrayType)
               and variance.get(n, Variance.UNIFORM) <= Variance.BLOCK]
    thread = [n for n in thread if n not in uniform]
    return Plan(items, regions, thread, uniform, block_vars, remat, exits, splitter.block_return)


PURE = (ir.Const, ir.Var, ir.BinOp, ir.UnaryOp, ir.Cast, ir.Compare, ir.Select, ir.BoolOp,
        ir.ArrayDim)


def _keep_inductions(region: Region, regions: list[Region], inputs: set[str],
                     block_reads: set[str], fresh: dict[int, set[str]]) -> None:
    """Keep the inductions whose initial value is recomputable from `inputs` and whose
    variable is dead after the loop: every other region that reads it assigns it first
    (or, per `fresh`, gives it its own initial value right before its loop). They leave
    the region's variables (recomputed in each pass)."""

    def dead(var: str) -> bool:
        return var not in block_reads and all(
            var not in r.reads or var in fresh[r.index] or _assigned_first(var, r.sequence)
            for r in regions if r is not region)

    region.inductions = [ind for ind in region.inductions if dead(ind.var)
                         and _invariant(ind.init, set(reads_and_writes(ind.init)[0]) - inputs)]
    for ind in region.inductions:
        region.reads.discard(ind.var)
        region.writes.discard(ind.var)


def _counted(region: Region, variance: FunctionVariance) -> Counted | None:
    """`Region.counted` for a lockstep loop tested `var < bound` (or `bound > var`) on a
    signed induction of at most 32 bits (its trip count is computed in 64 bits)."""
    cond = region.loop.cond if region.loop else None
    if not isinstance(cond, ir.Compare) or cond.op not in ("<", ">"):
        return None
    var, bound = (cond.left, cond.right) if cond.op == "<" else (cond.right, cond.left)
    ind = next((i for i in region.inductions
                if isinstance(var, ir.Var) and var.name == i.var), None)
    written = reads_and_writes(region.body)[1]
    if (ind is None or var.type not in (i8, i16, i32)
            or not all(_invariant(e, written) and variance.expr(e, Control()) <= Variance.BLOCK
                       for e in (bound, ind.step))):
        return None
    return Counted(ind, bound)


def _needed(remat: dict[str, ir.Assign], reads: set[str]) -> list[str]:
    """The recomputed variables a region reads, with what they are computed from, in order."""
    need = set(reads) & set(remat)
    for name in reversed(remat):  # later definitions depend only on earlier ones
        if name in need:
            need |= reads_and_writes(remat[name].value)[0] & set(remat)
    return [n for n in remat if n in need]


def _rematerialisable(kernel: ir.Function, items: list[Item], inputs: set[str],
                      block_reads: set[str]) -> dict[str, ir.Assign]:
    """Locals assigned once, at the top level of the first region, from pure expressions of
    thread/block indices, unassigned parameters, constants and earlier such locals."""
    if not items or not isinstance(items[0], Region) or items[0].loop is not None:
        return {}
    counts: dict[str, int] = {}
    for n in walk(kernel.body):
        if isinstance(n, ir.Assign):
            counts[n.target] = counts.get(n.target, 0) + 1
        elif isinstance(n, ir.For):
            counts[n.var] = counts.get(n.var, 2) + 2
        elif isinstance(n, ir.Native):
            for v in n.vars:
                counts[v.name] = counts.get(v.name, 0) + 2
    out: dict[str, ir.Assign] = {}
    for s in items[0].body:
        if (not isinstance(s, ir.Assign) or counts.get(s.target) != 1
                or s.target in block_reads):
            continue
        if isinstance(kernel.var_type(s.target), ArrayType):
            continue
        ok = True
        for n in walk(s.value):
            if isinstance(n, ir.IntrinsicCall):
                ok = ok and intrinsics[n.name].category == "index"
            elif isinstance(n, ir.Var):
                ok = ok and (n.name in inputs or n.name in out)
            else:
                ok = ok and isinstance(n, PURE)
        if ok:
            out[s.target] = s
    return out
