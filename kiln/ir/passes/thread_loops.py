"""`lower_thread_loops`: a SIMT kernel as explicit loops over blocks and threads.

For targets that run all threads of a block on one OS thread (the cpu backend's C; any
non-SIMT target): the kernel body becomes one `BlockLoop` whose barrier-free regions are
`ThreadLoop`s and `LockstepLoop`s, with every variable's storage class decided (see
`regions.py` for the plan and docs/ir-conventions.md for the nodes' meaning). Device
functions receive the index intrinsics they use (directly or through their callees) as
trailing parameters, since only the kernel's thread loops know the current thread.
`widen_index_arithmetic` is a companion pass for vectorising C compilers.
"""

from __future__ import annotations

import dataclasses

from ...errors import UnsupportedError
from .. import nodes as ir
from ..intrinsics import intrinsics
from ..types import ArrayType, i8, i16, i32, i64
from ..visit import Transformer, walk
from .common import clone, clone_program
from .regions import (
    Barrier,
    BlockIf,
    BlockJump,
    BlockLoop,
    Item,
    Plan,
    Region,
    constant_trips,
    plan_kernel,
)

NARROW_SIGNED = (i8, i16, i32)


def lower_thread_loops(program: ir.Program) -> ir.Program:
    """The kernel's body as one `BlockLoop` of thread loops; index intrinsics passed to
    device functions as parameters."""
    _refuse_warp_operations(program)
    program = clone_program(program)
    _pass_index_intrinsics(program)
    plan = plan_kernel(program)
    kernel = program.kernel
    body = _Builder(plan, kernel).items(plan.items)
    kernel.body = [ir.BlockLoop(body, plan.thread, [*plan.block, *plan.uniform], plan.exits,
                                loc=kernel.loc)]
    return program


def _refuse_warp_operations(program: ir.Program) -> None:
    """Threads that run one after another are warps of one thread: the pipeline lowers warp
    operations only on devices that say so, so one left here means the backend's
    capabilities claim wider warps."""
    for func in (*program.functions, program.kernel):
        for node in walk(func.body):
            if isinstance(node, ir.IntrinsicCall) and intrinsics[node.name].category == "warp":
                raise UnsupportedError(
                    f"{node.name} cannot run on threads executed as loops: a backend using "
                    f"lower_thread_loops must give its devices Capabilities(warp_size=1), "
                    f"which lowers warp operations first", node.loc)


class _Builder:
    def __init__(self, plan: Plan, kernel: ir.Function) -> None:
        self.plan = plan
        self.kernel = kernel

    def items(self, items: list[Item]) -> list[ir.Stmt]:
        out: list[ir.Stmt] = []
        for item in items:
            if isinstance(item, Region):
                out.append(self.region(item))
            elif isinstance(item, BlockIf):
                s = item.stmt
                out.append(ir.If(_block_level(s.cond), self.items(item.then),
                                 self.items(item.orelse), loc=s.loc))
            elif isinstance(item, BlockLoop):
                out.append(self.block_loop(item))
            elif isinstance(item, BlockJump):
                out.append(item.stmt)
            else:
                assert isinstance(item, Barrier)  # the thread loops run one after another
        return out

    def block_loop(self, item: BlockLoop) -> ir.Stmt:
        s = item.stmt
        body = self.items(item.body)
        if isinstance(s, ir.While):
            return ir.While(_block_level(s.cond), body, loc=s.loc)
        return dataclasses.replace(s, start=_block_level(s.start), stop=_block_level(s.stop),
                                   step=_block_level(s.step), body=body)

    def region(self, region: Region) -> ir.Stmt:
        plan = self.plan
        used = region.reads | region.writes
        loads = [n for n in [*plan.thread, *plan.uniform] if n in used]
        stores = [n for n in loads if n in region.writes
                  and not isinstance(self.kernel.var_type(n), ArrayType)]
        setup: list[ir.Stmt] = [clone(plan.remat[n]) for n in region.remat]
        private = [*region.private, *region.remat]
        if region.loop is None:
            body = [*setup, *region.body]
            _unroll_short_loops(body)
            return ir.ThreadLoop(body, private, loads, stores, loc=region.body[0].loc)
        inductions = list(region.inductions)
        if region.counted is not None:  # the counted induction first
            inductions.remove(region.counted.induction)
            inductions.insert(0, region.counted.induction)
        return ir.LockstepLoop(region.loop.cond, region.body, setup, inductions,
                               region.counted is not None, private, loads, stores,
                               loc=region.loop.loc)


def _unroll_short_loops(body: list[ir.Stmt]) -> None:
    """Short constant loops inside a thread loop are unrolled whole (`constant_trips`)."""
    for n in walk(body):
        if isinstance(n, ir.For) and n.unroll is None:
            n.unroll = constant_trips(n)


class _BlockLevel(Transformer):
    """Block-level expressions are block-uniform: thread 0's view stands for the block."""

    def visit_IntrinsicCall(self, e: ir.IntrinsicCall) -> ir.Expr:
        if e.name.startswith("thread_idx_"):
            return ir.Const(i32, 0, loc=e.loc)
        return e


def _block_level(e: ir.Expr) -> ir.Expr:
    return _BlockLevel().transform(clone(e))


# ---------------------------------------------------------------- device functions


def _pass_index_intrinsics(program: ir.Program) -> None:
    """Each device function gets a trailing parameter per index intrinsic it uses, itself
    or through its callees (in registry order), which replaces the intrinsic in its body;
    every call passes them (the kernel its own intrinsics, a function its parameters)."""
    uses = _index_uses(program)
    params: dict[str, dict[str, str]] = {}
    for f in program.functions:
        taken = {p.name for p in f.params} | set(f.locals)
        names: dict[str, str] = {}
        for index in uses[f.name]:
            name = index
            while name in taken:
                name += "_"
            taken.add(name)
            names[index] = name
        params[f.name] = names
        f.params += [ir.Param(name, i32) for name in names.values()]
    for f in [*program.functions, program.kernel]:
        own = params.get(f.name, {})
        for n in walk(f.body):
            if isinstance(n, ir.Call) and uses.get(n.func):
                n.args += [ir.Var(i32, own[i]) if i in own else ir.IntrinsicCall(i32, i, [])
                           for i in uses[n.func]]
        if own:
            _ReplaceIndices(own).transform_body_in_place(f)


class _ReplaceIndices(Transformer):
    def __init__(self, names: dict[str, str]) -> None:
        self.names = names

    def transform_body_in_place(self, func: ir.Function) -> None:
        func.body = self.transform_body(func.body)

    def visit_IntrinsicCall(self, e: ir.IntrinsicCall) -> ir.Expr:
        name = self.names.get(e.name)
        return e if name is None else ir.Var(i32, name, loc=e.loc)


def _index_uses(program: ir.Program) -> dict[str, list[str]]:
    """Index intrinsics each device function uses, itself or through its callees."""
    order = intrinsics.names("index")
    uses: dict[str, set[str]] = {f.name: set() for f in program.functions}
    changed = True
    while changed:  # recursion: repeat until a fixed point
        changed = False
        for f in program.functions:
            found = set(uses[f.name])
            for n in walk(f.body):
                if isinstance(n, ir.IntrinsicCall) and n.name in order:
                    found.add(n.name)
                elif isinstance(n, ir.Call):
                    found |= uses[n.func]
            if found != uses[f.name]:
                uses[f.name] = found
                changed = True
    return {name: [i for i in order if i in used] for name, used in uses.items()}


# ---------------------------------------------------------------- index arithmetic


def widen_index_arithmetic(program: ir.Program) -> ir.Program:
    """Signed array-index arithmetic (`+ - *` on i8/i16/i32) computed in i64: the same
    value wherever the narrow one does not overflow. In an `omp simd` loop gcc 12 loads
    a conditional `s[t + k]` contiguously only when it is computed so; otherwise it
    gathers."""
    program = clone_program(program)
    widen = _Widen()
    for f in [*program.functions, program.kernel]:
        f.body = widen.transform_body(f.body)
    return program


class _Widen(Transformer):
    def visit_Load(self, e: ir.Load) -> ir.Load:
        e.indices = [_wide_index(i) for i in e.indices]
        return e

    def visit_Store(self, s: ir.Store) -> ir.Store:
        s.indices = [_wide_index(i) for i in s.indices]
        return s

    def visit_IntrinsicCall(self, e: ir.IntrinsicCall) -> ir.IntrinsicCall:
        array = e.args[0].type if e.args else None
        if intrinsics[e.name].category == "atomic" and isinstance(array, ArrayType):
            ndim = array.ndim
            e.args[1:1 + ndim] = [_wide_index(i) for i in e.args[1:1 + ndim]]
        return e


def _wide_index(e: ir.Expr) -> ir.Expr:
    if not (isinstance(e, ir.BinOp) and e.op in ("+", "-", "*") and e.type in NARROW_SIGNED):
        return e
    return ir.BinOp(i64, e.op, _wide(e.left), _wide(e.right), loc=e.loc)


def _wide(e: ir.Expr) -> ir.Expr:
    if isinstance(e, ir.BinOp) and e.op in ("+", "-", "*") and e.type in NARROW_SIGNED:
        return _wide_index(e)
    if isinstance(e, ir.Const) and e.type in NARROW_SIGNED:
        return ir.Const(i64, e.value, loc=e.loc)
    if e.type not in NARROW_SIGNED:
        return e
    return ir.Cast(i64, e, loc=e.loc)
