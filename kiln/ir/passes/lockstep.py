"""`lower_lockstep_loops`: every `LockstepLoop` as its meaning, a plain `ThreadLoop`.

Runs after `lower_thread_loops`, for a thread-loop target that has no use for running a
lockstep loop's iterations a pass at a time (the C thread-loop emitter vectorises them; a
Python or HLS emitter gains nothing): it then emits only `BlockLoop` and `ThreadLoop`.
"""

from __future__ import annotations

from .. import nodes as ir
from ..visit import Transformer
from .common import clone_program


def lower_lockstep_loops(program: ir.Program) -> ir.Program:
    """Each `LockstepLoop(cond, body, setup, inductions, ...)` as `ThreadLoop([*setup,
    *(var = init), While(cond, body)], private + induction variables, loads, stores)`: the
    body already steps its inductions, so each thread runs its own iterations."""
    program = clone_program(program)
    program.kernel.body = _Unlock().transform_body(program.kernel.body)
    return program


class _Unlock(Transformer):
    def visit_LockstepLoop(self, s: ir.LockstepLoop) -> ir.ThreadLoop:
        inits: list[ir.Stmt] = [ir.Assign(ind.var, ind.init, loc=ind.loc)
                                for ind in s.inductions]
        private = list(dict.fromkeys([*s.private, *(ind.var for ind in s.inductions)]))
        body: list[ir.Stmt] = [*s.setup, *inits, ir.While(s.cond, s.body, loc=s.loc)]
        return ir.ThreadLoop(body, private, list(s.loads), list(s.stores), loc=s.loc)
