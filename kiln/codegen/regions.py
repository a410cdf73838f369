"""Region plans: what a thread loop of `lower_thread_loops`' output does per thread, as data.

Any thread-loop target (the C thread-loop emitter, a Python or HLS one) needs the same facts
about each `ThreadLoop` or `LockstepLoop`: which variables each thread copies in, which it
writes back, which are fresh per thread and which of those the body starts by assigning,
which block variables need a second variable so that no thread reads another's update, and
whether exited threads are skipped. `plan_region` computes them from the IR alone; an
emitter only spells them.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ir import nodes as ir
from ..ir.analysis import reads_and_writes


@dataclass(frozen=True)
class RegionPlan:
    """One thread loop's per-thread storage.

    `loads` start each thread with its (thread variable) or the block's (block variable)
    value; `stores` are written back at the thread's end; `private` are fresh per thread,
    `initial` the assignments the loop starts with that can declare one (`T x = v;`);
    `inductions` the lockstep loop's induction variables; `kept` the block variables among
    `stores`, whose old value every thread must still load (write through a second
    variable, copied back after the loop); `skips_exited`: threads that returned in an
    earlier thread loop skip this one; `lockstep`: a `LockstepLoop`'s pass."""

    loads: list[str]
    stores: list[str]
    private: list[str]
    initial: list[ir.Assign]
    inductions: list[str]
    kept: list[str]
    skips_exited: bool
    lockstep: bool

    @property
    def thread_locals(self) -> set[str]:
        """The names a thread reads as its own inside the loop."""
        return {*self.loads, *self.private, *self.inductions}


def plan_region(blocks: ir.BlockLoop, loop: ir.ThreadLoop | ir.LockstepLoop,
                reads: list[ir.Expr] | None = None) -> RegionPlan:
    """The plan of `loop` inside `blocks`; with `reads` (a pass that only evaluates those
    expressions, such as a lockstep loop's test) only what they read is loaded and nothing
    is stored."""
    if reads is None:
        loads, stores = loop.loads, loop.stores
    else:
        needed = set().union(*(reads_and_writes(e)[0] for e in reads))
        loads, stores = [n for n in loop.loads if n in needed], []
    block_vars = set(blocks.block_vars)
    lockstep = isinstance(loop, ir.LockstepLoop)
    start = loop.setup if isinstance(loop, ir.LockstepLoop) else loop.body
    inductions = ([i.var for i in loop.inductions if isinstance(i, ir.Induction)]
                  if isinstance(loop, ir.LockstepLoop) else [])
    return RegionPlan(
        loads=list(loads), stores=list(stores), private=list(loop.private),
        initial=initialisations(start, loop.private), inductions=inductions,
        kept=[n for n in stores if n in block_vars], skips_exited=bool(blocks.exits),
        lockstep=lockstep)


def initialisations(body: list[ir.Stmt], private: list[str]) -> list[ir.Assign]:
    """The assignments `body` starts with that can declare a private variable (`T x = v;`):
    the first of each, reading no private variable not declared before it."""
    out: list[ir.Assign] = []
    pending = set(private)
    for s in body:
        if not (isinstance(s, ir.Assign) and s.target in pending
                and not reads_and_writes(s.value)[0] & pending):
            break
        out.append(s)
        pending.discard(s.target)
    return out
