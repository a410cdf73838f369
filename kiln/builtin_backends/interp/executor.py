"""SIMT as SIMD: IR compiled to closures that run each statement for all lanes of a chunk.

Expression closures take `(frame, mask)` and return a value (see `values`); statement
closures take `(frame, mask)` and return the mask of lanes still running after them (lanes
that `break`, `continue` or `return` drop out and are recorded on the frame). Divergent
branches and loops narrow the mask; lanes of a block run in lockstep, so `barrier()` needs
no work. Each statement evaluates everything it reads before it writes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ...errors import UnsupportedError
from ...ir import nodes as ir
from ...ir.enums import MemorySpace
from ...ir.intrinsics import Lookup, intrinsics
from ...ir.types import ArrayType, ScalarType, Type
from ...ir.visit import Visitor, walk
from . import ops
from .bounds import check_indices
from .compaction import (
    LaneSubset,
    compactable,
    expand_mask,
    is_local,
    narrow,
    widen,
    worth_compacting,
)
from .geometry import Chunk, Launch
from .memory import ArrayRef, address, gather, scatter, slice_view
from .native import native_statement
from .recursion import recursion_guards
from .values import (
    Mask,
    Value,
    cast,
    is_uniform,
    mask_and,
    mask_and_not,
    mask_or,
    materialise,
    merge,
    owned,
)

ExprFn = Callable[["Frame", Mask], Value]
StmtFn = Callable[["Frame", Mask], Mask]

CHUNK_LANES = 1 << 20  # lanes run together (whole blocks), unless memory says fewer
CHUNK_MEMORY = 256 << 20  # bytes of shared and local arrays one chunk may allocate


class Frame:
    """One activation of a kernel or device function over a chunk's lanes."""

    __slots__ = ("chunk", "vars", "loops", "result")

    def __init__(self, chunk: Chunk, variables: dict[str, Any]) -> None:
        self.chunk = chunk
        self.vars = variables
        self.loops: list[list[Mask]] = []  # per enclosing loop: [break mask, continue mask]
        self.result: Value = None


def _scalar_type(t: Type, where: ir.Expr | ir.Stmt | ir.Function) -> ScalarType:
    if not isinstance(t, ScalarType):
        raise UnsupportedError(f"the interp backend cannot run values of type {t}", where.loc)
    return t


def _own_expressions(stmt: ir.Stmt) -> list[ir.Expr]:
    """The expressions a statement evaluates itself (not those of nested bodies)."""
    found: list[ir.Expr] = []
    for value in vars(stmt).values():
        if isinstance(value, ir.Expr):
            found.append(value)
        elif isinstance(value, list):
            found.extend(v for v in value if isinstance(v, ir.Expr))
    return found


def _has_effects(exprs: list[ir.Expr]) -> bool:
    return any(
        isinstance(node, ir.Call)
        or (isinstance(node, ir.IntrinsicCall) and intrinsics[node.name].side_effects)
        for e in exprs for node in walk(e)
    )


def _active_lanes(value: Value, m: Mask, count: int, dtype: np.dtype) -> np.ndarray:
    """The values of the `count` lanes active in `m`, as an array."""
    value = materialise(value)
    if isinstance(value, np.ndarray):
        return value if m is None else value[m]
    return np.full(count, value, dtype)


def _is_uniform_bool(c: Value) -> bool:
    return isinstance(c, (np.bool_, bool))


class FunctionCode(Visitor[Any]):
    """A kernel or device function compiled to closures: `visit_<Node>` builds a node's."""

    def __init__(self, fn: ir.Function, program: ProgramCode) -> None:
        self.fn = fn
        self.program = program
        self.params = [p.name for p in fn.params]
        self.scalars: dict[str, Any] = {}
        self.arrays: list[tuple[str, ArrayType]] = []
        for name, t in fn.locals.items():
            if isinstance(t, ArrayType) and t.space is MemorySpace.CONSTANT:  # a table
                assert t.shape is not None
                self.scalars[name] = ArrayRef(program.program.tables[name].reshape(-1),
                                              t.shape, t.space)
            elif isinstance(t, ArrayType):
                self.arrays.append((name, t))
            else:
                self.scalars[name] = _scalar_type(t, fn).dtype.type(0)
        self.result = (fn.return_type.dtype.type(0)
                       if isinstance(fn.return_type, ScalarType) else None)
        self._views = True
        self.body = self.block(fn.body)

    def checked_as(self, array: ir.Var) -> tuple[str, int]:
        """How bounds errors name `array` and how many of its axes they check: one split
        from an array of records or vectors by that array's name, without the axis of an
        element's words (which the passes index, always inside)."""
        assert isinstance(array.type, ArrayType)
        origin = self.fn.split_arrays.get(array.name)
        if origin is None:
            return array.name, array.type.ndim
        return origin, array.type.ndim - 1

    # ---- running
    def frame(self, chunk: Chunk, args: Sequence[Any]) -> Frame:
        variables = dict(self.scalars)
        variables.update(zip(self.params, map(owned, args)))
        for name, t in self.arrays:
            assert t.shape is not None
            owners = chunk.nblocks if t.space is MemorySpace.SHARED else chunk.n
            variables[name] = ArrayRef(np.zeros(owners * t.size, t.elem.dtype), t.shape, t.space)
        frame = Frame(chunk, variables)
        frame.result = self.result
        return frame

    def call(self, chunk: Chunk, args: Sequence[Any], mask: Mask) -> Value:
        frame = self.frame(chunk, args)
        self.body(frame, mask)
        return frame.result

    # ---- statements
    def block(self, stmts: list[ir.Stmt]) -> StmtFn:
        fns = [self.stmt(s) for s in stmts]
        if len(fns) == 1:
            return fns[0]

        def run(f: Frame, m: Mask) -> Mask:
            for fn in fns:
                m = fn(f, m)
                if m is False:
                    return False
            return m

        return run

    def generic_visit(self, node: ir.Stmt | ir.Expr) -> Any:
        what = "statements" if isinstance(node, ir.Stmt) else "expressions"
        raise UnsupportedError(f"the interp backend cannot run {type(node).__name__} {what}",
                               node.loc)

    def stmt(self, s: ir.Stmt) -> StmtFn:
        self._views = not _has_effects(_own_expressions(s))
        fn: StmtFn = self.visit(s)
        return fn

    def _assigner(self, name: str) -> Callable[[Frame, Value, Mask], None]:
        dtype = _scalar_type(self.fn.var_type(name), self.fn).dtype

        def assign(f: Frame, value: Value, m: Mask) -> None:
            f.vars[name] = owned(value) if m is None else merge(m, value, f.vars[name], dtype)

        return assign

    def visit_Assign(self, s: ir.Assign) -> StmtFn:
        value, assign = self.expr(s.value), self._assigner(s.target)

        def run(f: Frame, m: Mask) -> Mask:
            assign(f, value(f, m), m)
            return m

        return run

    def visit_Store(self, s: ir.Store) -> StmtFn:
        name = s.array.name
        indices = [self.expr(i) for i in s.indices]
        wide = any(_scalar_type(i.type, i).bits == 64 for i in s.indices)
        value = self.expr(s.value)
        into = getattr(value, "into", None)

        kernel, loc = self.program.program.kernel.name, s.loc
        shown, axes = self.checked_as(s.array)

        def run(f: Frame, m: Mask) -> Mask:
            ref = f.vars[name]
            chunk = f.chunk
            values = [i(f, m) for i in indices]
            check_indices(kernel, shown, ref.shape[:axes], values, chunk, m, "wrote", loc)
            addr = address(ref, values, chunk, wide)
            if into is not None and m is None:
                view = slice_view(ref.flat, addr, chunk.n)
                if view is not None:
                    into(f, m, view)
                    return m
            scatter(ref.flat, addr, value(f, m), m, chunk.n)
            return m

        return run

    def visit_ExprStmt(self, s: ir.ExprStmt) -> StmtFn:
        e = s.expr
        if isinstance(e, ir.IntrinsicCall) and intrinsics[e.name].category == "atomic":
            value = self._atomic(e, old=False)
        else:
            value = self.expr(e)

        def run(f: Frame, m: Mask) -> Mask:
            value(f, m)
            return m

        return run

    def visit_If(self, s: ir.If) -> StmtFn:
        cond = self.expr(s.cond)
        then = self.block(s.then)
        orelse = self.block(s.orelse) if s.orelse else None

        def run(f: Frame, m: Mask) -> Mask:
            c = cond(f, m)
            if _is_uniform_bool(c):
                if c:
                    return then(f, m)
                return orelse(f, m) if orelse is not None else m
            out: Mask = False
            taken = mask_and(m, c)
            if taken is not False:
                out = then(f, taken)
            rest = mask_and_not(m, c)
            if rest is not False:
                out = mask_or(out, orelse(f, rest) if orelse is not None else rest)
            return out

        return run

    def _loop(self, cond: Callable[[Frame, Mask], Value], body: StmtFn,
              step: Callable[[Frame, Mask], None] | None,
              compact: bool) -> Callable[[Frame, Mask], Mask]:
        """Run `body` while `cond` holds per lane; returns the lanes that leave normally.
        With `compact`, the loop goes on over its active lanes alone once few are left
        (`compaction.py`)."""

        def run(f: Frame, m: Mask) -> Mask:
            record: list[Mask] = [False, False]
            f.loops.append(record)
            done: Mask = False
            active = m
            try:
                while True:
                    if compact and worth_compacting(active, f.chunk):
                        return mask_or(done, self._compacted(run, f, active))
                    c = cond(f, active)
                    if _is_uniform_bool(c):
                        if not c:
                            return mask_or(done, active)
                    else:
                        done = mask_or(done, mask_and_not(active, c))
                        active = mask_and(active, c)
                        if active is False:
                            return done
                    active = mask_or(body(f, active), record[1])
                    done = mask_or(done, record[0])
                    record[0] = record[1] = False
                    if active is False:
                        return done
                    if step is not None:
                        step(f, active)
            finally:
                f.loops.pop()

        return run

    def _compacted(self, loop: StmtFn, f: Frame, active: np.ndarray) -> Mask:
        """The rest of `loop` over the lanes active in `active` alone: their state narrowed
        to a `LaneSubset`, run, and what changed widened back. Returns the lanes (of `f`'s
        chunk) that leave the loop normally."""
        sub = LaneSubset(f.chunk, np.flatnonzero(active))
        narrowed = {name: narrow(value, sub) for name, value in f.vars.items()}
        inner = Frame(sub, dict(narrowed))
        inner.result = start = narrow(f.result, sub)
        left = loop(inner, None)
        for name, before in narrowed.items():
            after = inner.vars[name]
            if after is not before or is_local(after):  # local arrays change in place
                f.vars[name] = widen(f.vars[name], after, sub)
        if inner.result is not start:
            f.result = widen(f.result, inner.result, sub)
        return expand_mask(left, sub)

    def visit_While(self, s: ir.While) -> StmtFn:
        return self._loop(self.expr(s.cond), self.block(s.body), None,
                          compactable([s], self.program.program))

    def visit_For(self, s: ir.For) -> StmtFn:
        start, stop_fn, step_fn = self.expr(s.start), self.expr(s.stop), self.expr(s.step)
        assign = self._assigner(s.var)
        var = s.var
        less, greater = ops.comparison("<"), ops.comparison(">")
        add = ops.binary("+", _scalar_type(s.step.type, s.step))
        constant_step = s.step.value if isinstance(s.step, ir.Const) else None
        key = f"\0range{id(s)}"  # the frame slot holding this loop's (stop, step)

        def cond(f: Frame, m: Mask) -> Value:
            stop, step = f.vars[key]
            v = f.vars[var]
            if constant_step is not None:
                return less(v, stop) if constant_step > 0 else greater(v, stop)
            if is_uniform(step):
                return less(v, stop) if step > 0 else greater(v, stop) if step < 0 else False
            return np.where(step > 0, less(v, stop), (step < 0) & greater(v, stop))

        def advance(f: Frame, m: Mask) -> None:
            assign(f, add(f.vars[var], f.vars[key][1]), m)

        loop = self._loop(cond, self.block(s.body), advance,
                          compactable([s], self.program.program))

        def run(f: Frame, m: Mask) -> Mask:
            assign(f, start(f, m), m)
            f.vars[key] = (owned(stop_fn(f, m)), owned(step_fn(f, m)))
            return loop(f, m)

        return run

    def visit_Native(self, s: ir.Native) -> StmtFn:
        return native_statement(self, s)

    def visit_VectorAccess(self, s: ir.VectorAccess) -> StmtFn:  # a hint: run its body
        return self.block(s.body)

    def visit_Break(self, s: ir.Break) -> StmtFn:
        return self._exit(0)

    def visit_Continue(self, s: ir.Continue) -> StmtFn:
        return self._exit(1)

    @staticmethod
    def _exit(which: int) -> StmtFn:
        def run(f: Frame, m: Mask) -> Mask:
            record = f.loops[-1]
            record[which] = mask_or(record[which], m)
            return False

        return run

    def visit_Return(self, s: ir.Return) -> StmtFn:
        if s.value is None:
            return lambda f, m: False
        value = self.expr(s.value)
        dtype = _scalar_type(self.fn.return_type, s).dtype

        def run(f: Frame, m: Mask) -> Mask:
            v = value(f, m)
            f.result = owned(v) if m is None else merge(m, v, f.result, dtype)
            return False

        return run

    # ---- expressions
    def expr(self, e: ir.Expr) -> ExprFn:
        fn: ExprFn = self.visit(e)
        return fn

    def visit_Const(self, e: ir.Const) -> ExprFn:
        with np.errstate(over="ignore"):  # 1e308 as an f32 is inf, as in C
            value = _scalar_type(e.type, e).dtype.type(e.value)
        return lambda f, m: value

    def visit_Var(self, e: ir.Var) -> ExprFn:
        name = e.name
        return lambda f, m: f.vars[name]

    def visit_BinOp(self, e: ir.BinOp) -> ExprFn:
        t = _scalar_type(e.type, e)
        left, right = self.expr(e.left), self.expr(e.right)
        if e.op in ("<<", ">>") and e.right.type != t:
            right = self._converted(right, t.dtype)
        fn = ops.binary(e.op, t)

        def ev(f: Frame, m: Mask) -> Value:
            return fn(left(f, m), right(f, m))

        ufunc = ops.binary_ufunc(e.op, t)
        if ufunc is not None:
            def into(f: Frame, m: Mask, out: np.ndarray) -> None:
                ufunc(materialise(left(f, m)), materialise(right(f, m)), out=out)

            ev.into = into  # type: ignore[attr-defined]
        return ev

    @staticmethod
    def _converted(fn: ExprFn, dtype: np.dtype) -> ExprFn:
        return lambda f, m: cast(fn(f, m), dtype)

    def visit_UnaryOp(self, e: ir.UnaryOp) -> ExprFn:
        operand, fn = self.expr(e.operand), ops.unary(e.op)
        return lambda f, m: fn(operand(f, m))

    def visit_Compare(self, e: ir.Compare) -> ExprFn:
        left, right, fn = self.expr(e.left), self.expr(e.right), ops.comparison(e.op)
        return lambda f, m: fn(left(f, m), right(f, m))

    def visit_BoolOp(self, e: ir.BoolOp) -> ExprFn:
        values = [self.expr(v) for v in e.values]
        is_and = e.op == "and"

        def ev(f: Frame, m: Mask) -> Value:
            result = values[0](f, m)
            for value in values[1:]:
                if _is_uniform_bool(result):
                    if bool(result) != is_and:  # settled for every lane
                        return result
                    result = value(f, m)
                    continue
                rest = mask_and(m, result) if is_and else mask_and_not(m, result)
                if rest is False:
                    return result
                nxt = value(f, rest)
                result = (result & nxt) if is_and else (result | nxt)
            return result

        return ev

    def visit_Select(self, e: ir.Select) -> ExprFn:
        cond, if_true, if_false = self.expr(e.cond), self.expr(e.if_true), self.expr(e.if_false)
        dtype = _scalar_type(e.type, e).dtype

        def ev(f: Frame, m: Mask) -> Value:
            c = cond(f, m)
            if _is_uniform_bool(c):
                return if_true(f, m) if c else if_false(f, m)
            taken, rest = mask_and(m, c), mask_and_not(m, c)
            if rest is False:
                return if_true(f, taken)
            if taken is False:
                return if_false(f, rest)
            return merge(c, if_true(f, taken), if_false(f, rest), dtype)

        return ev

    def visit_Cast(self, e: ir.Cast) -> ExprFn:
        value = self.expr(e.value)
        dtype = _scalar_type(e.type, e).dtype
        if _scalar_type(e.value.type, e.value).dtype == dtype:
            return value
        return self._converted(value, dtype)

    def visit_Load(self, e: ir.Load) -> ExprFn:
        name = e.array.name
        indices = [self.expr(i) for i in e.indices]
        wide = any(_scalar_type(i.type, i).bits == 64 for i in e.indices)
        view_ok = self._views
        kernel, loc = self.program.program.kernel.name, e.loc
        shown, axes = self.checked_as(e.array)

        def ev(f: Frame, m: Mask) -> Value:
            ref = f.vars[name]
            chunk = f.chunk
            values = [i(f, m) for i in indices]
            check_indices(kernel, shown, ref.shape[:axes], values, chunk, m, "read", loc)
            addr = address(ref, values, chunk, wide)
            return gather(ref.flat, addr, chunk.n, view_ok)

        return ev

    def visit_ArrayDim(self, e: ir.ArrayDim) -> ExprFn:
        name, axis = e.array.name, e.axis
        return lambda f, m: np.int32(f.vars[name].shape[axis])

    def visit_Call(self, e: ir.Call) -> ExprFn:
        args = [self.expr(a) for a in e.args]
        functions, name = self.program.functions, e.func
        if name not in {fn.name for fn in self.program.program.functions}:
            raise UnsupportedError(f"call of unknown device function {name!r}", e.loc)
        guard = self.program.guards.get(name)
        if guard is not None:  # a recursive function: its depth is counted
            depth = guard

            def recursive(f: Frame, m: Mask) -> Value:
                with depth:
                    return functions[name].call(f.chunk, [a(f, m) for a in args], m)

            return recursive

        def ev(f: Frame, m: Mask) -> Value:
            return functions[name].call(f.chunk, [a(f, m) for a in args], m)

        return ev

    def visit_IntrinsicCall(self, e: ir.IntrinsicCall) -> ExprFn:
        spec = intrinsics[e.name]
        if spec.category == "atomic":
            return self._atomic(e, old=True)
        impl = self._implementation(e)
        if spec.category in ("index", "sync"):
            return lambda f, m: impl(f.chunk)
        args = [self.expr(a) for a in e.args]
        if spec.category == "warp":  # every lane's operands: a warp reads its other lanes
            return lambda f, m: impl(f.chunk, *[materialise(a(f, m)) for a in args])
        dtype = _scalar_type(e.type, e).dtype

        def ev(f: Frame, m: Mask) -> Value:
            result = impl(*[materialise(a(f, m)) for a in args])
            if isinstance(result, np.ndarray) and result.ndim == 0:
                result = result[()]  # a uniform argument gives a scalar (np.vectorize: 0-d)
            return result if result.dtype == dtype else cast(result, dtype)

        return ev

    def _implementation(self, e: ir.IntrinsicCall) -> Any:
        impl = self.program.implementation(e.name)
        if impl is None:
            raise UnsupportedError(f"intrinsic {e.name} has no implementation for the interp "
                                   "backend", e.loc)
        return impl

    def _atomic(self, e: ir.IntrinsicCall, old: bool) -> ExprFn:
        impl = self._implementation(e)
        target = e.args[0]
        assert isinstance(target, ir.Var) and isinstance(target.type, ArrayType)
        ndim = target.type.ndim
        name, dtype = target.name, target.type.elem.dtype
        indices = [self.expr(i) for i in e.args[1 : 1 + ndim]]
        wide = any(_scalar_type(i.type, i).bits == 64 for i in e.args[1 : 1 + ndim])
        operands = [self.expr(v) for v in e.args[1 + ndim :]]
        kernel, loc = self.program.program.kernel.name, e.loc
        shown, axes = self.checked_as(target)

        def ev(f: Frame, m: Mask) -> Value:
            ref = f.vars[name]
            chunk = f.chunk
            values = [i(f, m) for i in indices]
            check_indices(kernel, shown, ref.shape[:axes], values, chunk, m, "updated", loc)
            addr = address(ref, values, chunk, wide)
            values = [v(f, m) for v in operands]
            count = chunk.n if m is None else int(np.count_nonzero(m))
            addr = _active_lanes(addr, m, count, np.dtype(np.intp))
            values = [_active_lanes(v, m, count, dtype) for v in values]
            before = impl(ref.flat, addr, *values, old=old)
            if not old or m is None:
                return before
            out = np.zeros(chunk.n, dtype)
            out[m] = before
            return out

        return ev


class ProgramCode:
    """A whole program (kernel and device functions) compiled for the interpreter."""

    def __init__(self, program: ir.Program, implementation: Lookup) -> None:
        self.program = program
        self.implementation = implementation
        self.guards = recursion_guards(program)
        self.functions: dict[str, FunctionCode] = {}
        for fn in program.functions:
            self.functions[fn.name] = FunctionCode(fn, self)
        self.kernel = FunctionCode(program.kernel, self)
        codes = (self.kernel, *self.functions.values())
        lane_bytes = sum(t.size * t.elem.itemsize for code in codes
                         for _, t in code.arrays if t.space is MemorySpace.LOCAL)
        block_bytes = sum(t.size * t.elem.itemsize for _, t in self.kernel.arrays
                          if t.space is MemorySpace.SHARED)
        self._lane_bytes, self._block_bytes = lane_bytes, block_bytes

    def bind(self, args: Sequence[Any]) -> list[Any]:
        """Launch arguments as the kernel's frame holds them (arrays become flat views)."""
        bound: list[Any] = []
        for p, a in zip(self.program.kernel.params, args):
            if isinstance(p.type, ArrayType):
                flat = a.buffer[: math.prod(a.shape) * a.dtype.itemsize].view(a.dtype)
                bound.append(ArrayRef(flat, a.shape, MemorySpace.GLOBAL))
            else:
                bound.append(a)
        return bound

    def max_lanes(self, threads_per_block: int) -> int:
        per_lane = self._lane_bytes + -(-self._block_bytes // threads_per_block)
        return max(1, min(CHUNK_LANES, CHUNK_MEMORY // max(per_lane, 1)))

    def run(self, grid: tuple[int, int, int], block: tuple[int, int, int],
            args: Sequence[Any]) -> None:
        launch = Launch(grid, block, self.max_lanes(block[0] * block[1] * block[2]))
        with np.errstate(all="ignore"):
            for chunk in launch.chunks():
                self.kernel.call(chunk, args, None)
