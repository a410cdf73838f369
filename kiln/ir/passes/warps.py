"""Warp operations on devices whose warps have one thread (`capabilities.warp_size == 1`).

Every thread is its own warp there, so each operation has a closed form: `warp_size` is 1,
`lane_id` is 0, a shuffle returns the thread's own value (lane `src % 1` is the thread
itself; `shuffle_down` and `shuffle_xor` past the warp return the own value, as on CUDA),
the votes return the predicate and `ballot` its bit 0. Backends without native warp
operations (cpu, OpenCL devices without subgroups) get them through this pass.
"""

from __future__ import annotations

from .. import nodes as ir
from ..types import u64
from ..visit import Transformer
from .common import all_functions, clone_program

_PASS_VALUE = ("shuffle", "shuffle_down", "shuffle_xor", "vote_all", "vote_any")


def lower_single_lane_warps(program: ir.Program) -> ir.Program:
    """A new program without warp intrinsics, for one-thread warps (the input is unchanged)."""
    program = clone_program(program)
    lowering = _SingleLane()
    for func in all_functions(program):
        func.body = lowering.transform_body(func.body)
    return program


class _SingleLane(Transformer):
    def visit_IntrinsicCall(self, e: ir.IntrinsicCall) -> ir.Expr:
        if e.name == "warp_size":
            return ir.Const(e.type, 1, loc=e.loc)
        if e.name == "lane_id":
            return ir.Const(e.type, 0, loc=e.loc)
        if e.name in _PASS_VALUE:
            return e.args[0]
        if e.name == "ballot":
            return ir.Cast(u64, e.args[0], loc=e.loc)
        return e
