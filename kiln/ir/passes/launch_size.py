"""Launches by size (`kiln.launch(k, dim=n)`): exactly `n` threads, as Warp's `wp.launch`.

The grid is rounded up to whole blocks, so the kernel that a `dim=` launch runs is a variant
of the user's: one more `i32` parameter per axis of `dim` after the user's, the launch's
size along that axis, and a return at its start for every thread whose `global_id` is past
it on some axis (the axes `dim` lacks have one block of one thread). A kernel written for an
explicit grid (with its own `if i < n:`) works unchanged; one without the guard no longer
writes past its arrays. Explicit `[grid, block]` launches run the user's kernel as it is.

Threads returning early must not skip a barrier the others wait at, nor leave a warp
operation short of lanes, and a kernel sizing shared memory by its block wants the block it
was written for: `needs_explicit_block` names what keeps a kernel from `dim=` launches.
"""

from __future__ import annotations

from .. import nodes as ir
from ..enums import MemorySpace
from ..intrinsics import intrinsics
from ..types import ArrayType, bool_, i32
from ..visit import walk
from .common import all_functions, clone_program
from .status import fresh

SIZE_PARAMS = ("kiln_size_x", "kiln_size_y", "kiln_size_z")
"""The size parameters' names by axis (made unique in each program)."""


def needs_explicit_block(program: ir.Program) -> str | None:
    """Why `program` must be launched with an explicit block (None when it need not)."""
    for func in all_functions(program):
        for name, t in func.locals.items():
            if isinstance(t, ArrayType) and t.space is MemorySpace.SHARED:
                return f"uses shared memory ('{name}', sized for the block it was written for)"
        for node in walk(func.body):
            if isinstance(node, ir.IntrinsicCall):
                spec = intrinsics[node.name]
                if spec.convergent:
                    return f"calls kiln.{node.name}(), which every thread of the block must reach"
                if spec.warp_convergent:
                    return f"calls kiln.{node.name}(), which needs every lane of its warp"
    return None


def bound_to_size(program: ir.Program, rank: int) -> ir.Program:
    """The program with the size parameters of a `rank`-axis size and the return of the
    threads past it."""
    program = clone_program(program)
    kernel = program.kernel
    taken = {f.name for f in all_functions(program)}
    for func in all_functions(program):
        taken |= {*func.locals, *(p.name for p in func.params)}
    names = [fresh(name, taken) for name in SIZE_PARAMS[:rank]]
    kernel.params += [ir.Param(name, i32) for name in names]
    past: list[ir.Expr] = [ir.Compare(bool_, ">=", _global_id(axis), ir.Var(i32, name))
                           for axis, name in zip("xyz", names)]
    beyond = past[0] if rank == 1 else ir.BoolOp(bool_, "or", past)
    kernel.body.insert(0, ir.If(beyond, [ir.Return()]))
    return program


def _global_id(axis: str) -> ir.Expr:
    def index(base: str) -> ir.Expr:
        return ir.IntrinsicCall(i32, f"{base}_{axis}", [])

    block_start = ir.BinOp(i32, "*", index("block_idx"), index("block_dim"))
    return ir.BinOp(i32, "+", block_start, index("thread_idx"))
