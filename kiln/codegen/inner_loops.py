"""Inner loops of a thread loop that can run lockstep, as data.

An escape-time loop (mandelbrot's `for k in range(n): if done: break; ...`, julia's
`while it < n and ...:`) inside a region runs each thread's iterations one thread after
another: a scalar, latency-bound loop that no compiler vectorises across threads. Run
lockstep instead (each pass one iteration of every thread still running, its variables
kept in per-thread arrays between passes), the threads are SIMD lanes, as in a
`LockstepLoop` (mandelbrot 768x1024, 200 iterations, one core: 95 -> 22-33 ms).
`inner_loop` finds such a loop: the first loop among a body's statements whose iterations
are straight arithmetic (no loops, calls, memory reads or writes, side effects or exits but
a leading `if ...: break`), in a body without `return`. A loop that reads memory stays
sequential: each thread's reads are then gathers across threads (spmv's row loop: 5.7 ->
10 ms run lockstep).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from ..ir import nodes as ir
from ..ir.analysis import reads_and_writes
from ..ir.intrinsics import intrinsics
from ..ir.visit import walk


@dataclass(frozen=True)
class InnerLoop:
    """`pre`, then `loop` (a `While`, or a `For` with a constant step), then `post`. Each
    iteration ends the thread's loop where `exit` holds (the loop's leading `if exit:
    break`; None without one), else runs `body`."""

    pre: list[ir.Stmt]
    loop: ir.While | ir.For
    exit: ir.Expr | None
    body: list[ir.Stmt]
    post: list[ir.Stmt]


def inner_loop(body: list[ir.Stmt]) -> InnerLoop | None:
    """The first loop of `body` that can run lockstep (see the module docstring), or None."""
    if any(isinstance(n, (ir.Return, ir.Native)) for n in walk(body)):
        return None
    for k, s in enumerate(body):
        loop: ir.While | ir.For
        if isinstance(s, ir.While):
            loop, test = s, [s.cond]
        elif (isinstance(s, ir.For) and s.unroll is None and isinstance(s.step, ir.Const)
              and s.step.value != 0):
            loop, test = s, [s.stop]
        else:
            continue
        inner, exit_test = loop.body, None
        first = inner[0] if inner else None
        if (isinstance(first, ir.If) and not first.orelse and len(first.then) == 1
                and isinstance(first.then[0], ir.Break)):
            inner, exit_test = inner[1:], first.cond
            test.append(exit_test)
        if _straight(inner, test):
            return InnerLoop(body[:k], loop, exit_test, inner, body[k + 1:])
    return None


def _straight(body: list[ir.Stmt], tests: list[ir.Expr]) -> bool:
    """Whether `body` and `tests` are straight arithmetic a pass of threads runs well as
    SIMD lanes: no loops, exits, calls, loads, stores, hand-written code or side effects."""
    banned = (ir.While, ir.For, ir.Break, ir.Continue, ir.Return, ir.Call, ir.Native,
              ir.Load, ir.Store, ir.SetField, ir.VectorAccess, ir.CheckedIndex)
    for n in itertools.chain(walk(body), *(walk(t) for t in tests)):
        if isinstance(n, banned):
            return False
        if isinstance(n, ir.IntrinsicCall) and (
                n.name not in intrinsics or intrinsics[n.name].side_effects):
            return False
    return True


def carried(found: InnerLoop, names: set[str]) -> list[str]:
    """The variables among `names` whose values pass from one part of the lockstep loop to
    the next: written before the loop or in it, and read in it or after it; not those
    each iteration assigns before reading them (temporaries), nor those only the initial
    assignments write (every part computes those again)."""
    loop = found.loop
    tests = [loop.cond] if isinstance(loop, ir.While) else [loop.stop, loop.step]
    if found.exit is not None:
        tests.append(found.exit)
    written = reads_and_writes(found.pre)[1] | reads_and_writes(found.body)[1]
    if isinstance(loop, ir.For):
        written.add(loop.var)
    read = reads_and_writes(found.body)[0] | reads_and_writes(found.post)[0]
    for t in tests:
        read |= reads_and_writes(t)[0]
    live = written & read & names
    temporaries = _temporaries(found.body, tests) - reads_and_writes(found.post)[0]
    temporaries -= reads_and_writes(found.pre)[1]
    return sorted(live - temporaries)


def _temporaries(body: list[ir.Stmt], tests: list[ir.Expr]) -> set[str]:
    """Variables an iteration assigns (at its top level) before it reads them."""
    seen = set().union(*(reads_and_writes(t)[0] for t in tests))
    out: set[str] = set()
    for s in body:
        reads, writes = reads_and_writes(s)
        if isinstance(s, ir.Assign):
            reads = reads_and_writes(s.value)[0]
        seen |= reads
        if isinstance(s, ir.Assign) and s.target not in seen:
            out.add(s.target)
        seen |= writes
    return out
