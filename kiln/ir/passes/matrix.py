"""Matrix multiply-accumulate and asynchronous copies, lowered for the device.

The operations (`kiln.mma_load_a`, `kiln.mma_load_b`, `kiln.mma`, `kiln.mma_store`,
`kiln.copy_async`, `kiln.copy_async_commit`, `kiln.copy_async_wait`) have one meaning on
every backend; this pass picks the representation:

- **native** (devices with matrix units, CUDA sm_80+): a fragment becomes a local u32 array
  holding the lane's part of the tile in PTX's `mma.m16n8k16` (f16, bf16) or `mma.m16n8k8`
  (tf32) layout, and each operation one "matrix_native" intrinsic that CUDA spells as
  `ldmatrix`/`mma.sync`/`cp.async` (`kiln.builtin_backends.cuda.matrix`).
- **scalar** (everywhere else): a fragment becomes a local copy of the whole tile in every
  thread, and `mma` computes the thread's own four accumulator elements as dot products in
  f32, adding the k products in order. No thread needs another's registers, so the same code
  runs on one-thread warps (cpu, OpenCL without subgroups) and on the interpreter.

Both forms agree on everything a kernel can observe: the accumulator's layout (lane
`l = linear thread index % 32` holds rows `l // 4` and `l // 4 + 8`, columns `2 (l % 4)` and
`2 (l % 4) + 1` of the 16 x 8 tile, in the order (row, col), (row, col + 1), (row + 8, col),
(row + 8, col + 1)), f32 inputs rounded to tf32 the same way (to nearest with 11 significant
bits, `c - (c - x)` for `c = 8193 x`; magnitudes from 2^100 up, infinities and NaN pass
unrounded), products exact (f16, bf16 and tf32 products fit f32).

Warpgroup products (`kiln.wgmma`, with `wgmma_fence`, `wgmma_commit`, `wgmma_wait` and
`wgmma_store`) read both operands from shared memory in the core-matrix layout (element
[r, k] at `s[k // 8, r, k % 8]`) and accumulate into PTX's m64nNk16 f32 layout (thread
`t = linear index % 128`, warp `w = t // 32`, lane `l = t % 32`: `acc[i]` is row
`16 w + l // 4 + 8 ((i // 2) % 2)`, column `8 (i // 4) + 2 (l % 4) + i % 2`). Natively
(`warpgroup`: CUDA sm_90) a product is one "matrix_native" intrinsic that CUDA spells as
`wgmma.mma_async` over shared-memory descriptors (`kiln.builtin_backends.cuda.wgmma`);
elsewhere each thread computes its N / 2 elements from shared memory, k in order, and the
fences, commits and waits vanish. Stores are the same scalar code in both forms. A block
that is not whole warpgroups skips each product (and, natively, each fence, commit and
wait) and reports a ConvergenceError through the status array (`kiln.ir.passes.status`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from ...errors import ConvergenceError, KernelTypeError
from .. import nodes as ir
from ..enums import MemorySpace
from ..intrinsics import WGMMA_CORE, WGMMA_DEPTH, WGMMA_ROWS, intrinsics, wgmma_width
from ..types import ArrayType, FragmentType, ScalarType, Type, bool_, f32, i32, u32, void
from ..visit import Transformer, walk
from .common import all_functions, clone_program
from .status import Status

TF32_SPLIT = 8193.0  # 2^13 + 1: Veltkamp's split keeps 24 - 13 = 11 significant bits
TF32_LIMIT = 2.0**100  # beyond it the split could overflow; such values pass unrounded
KINDS = {"f16": 0, "bf16": 1, "f32": 2}  # the element kind argument of native_mma
WARPGROUP = 128  # threads of a warpgroup: four consecutive warps


def lower_matrix_ops(native: bool, warpgroup: bool = False
                     ) -> Callable[[ir.Program], ir.Program]:
    """The pass for a device with (`native`) or without matrix units, and with warpgroup
    matrix units (`warpgroup`: Hopper's wgmma) or not (one function each, so pipelines
    compare equal)."""
    if warpgroup:
        return lower_matrix_ops_warpgroup
    return lower_matrix_ops_native if native else lower_matrix_ops_scalar


def _lower(program: ir.Program, native: bool, warpgroup: bool = False) -> ir.Program:
    if not _uses_matrix_ops(program):
        return program
    program = clone_program(program)
    status = Status(program)
    for func in all_functions(program):
        for p in func.params:
            if isinstance(p.type, FragmentType):
                raise KernelTypeError(f"matrix fragments cannot be passed to functions "
                                      f"(parameter '{p.name}' of {func.name})", func.loc)
        lowering = _Lowering(func, native, warpgroup, status)
        lowering.run()
        if lowering.reports:
            status.reporters.add(func.name)
    if status.reporters:
        status.thread()
    return program


def lower_matrix_ops_native(program: ir.Program) -> ir.Program:
    """Matrix operations as the native forms CUDA spells (ldmatrix, mma.sync, cp.async)."""
    return _lower(program, True)


def lower_matrix_ops_warpgroup(program: ir.Program) -> ir.Program:
    """The native forms, and warpgroup products as `wgmma.mma_async` (sm_90a)."""
    return _lower(program, True, True)


def lower_matrix_ops_scalar(program: ir.Program) -> ir.Program:
    """Matrix operations as scalar code (every backend without matrix units)."""
    return _lower(program, False)


def _uses_matrix_ops(program: ir.Program) -> bool:
    return any(isinstance(n, ir.IntrinsicCall) and intrinsics[n.name].category == "matrix"
               for func in all_functions(program) for n in walk(func.body))


def fragment_storage(t: FragmentType, native: bool) -> ArrayType:
    """The local array a fragment becomes: the lane's registers, or the whole tile."""
    if native:
        return ArrayType(u32, 1, MemorySpace.LOCAL, (4 if t.use == "a" else 2,))
    rows, cols = t.shape
    return ArrayType(t.elem, 1, MemorySpace.LOCAL, (rows * cols,))


# ---------------------------------------------------------------- IR building helpers


def _c(value: int | float, t: ScalarType = i32) -> ir.Expr:
    return ir.Const(t, value)


def _bin(op: str, left: ir.Expr, right: ir.Expr, t: Type | None = None) -> ir.Expr:
    return ir.BinOp(t or left.type, op, left, right)


def _add(*terms: ir.Expr) -> ir.Expr:
    out = terms[0]
    for term in terms[1:]:
        out = _bin("+", out, term)
    return out


def _cast(value: ir.Expr, t: ScalarType) -> ir.Expr:
    return value if value.type == t else ir.Cast(t, value)


def _linear_lane(group: int = 32) -> ir.Expr:
    """`(thread_idx.x + block_dim.x * (thread_idx.y + block_dim.y * thread_idx.z)) & 31`:
    the lane in 32-thread warps, whatever the device's own warp size (or the thread's
    place in its `group` of threads, a power of two: 128 for a warpgroup)."""
    def idx(base: str, axis: str) -> ir.Expr:
        return ir.IntrinsicCall(i32, f"{base}_{axis}", [])

    inner = _add(idx("thread_idx", "y"), _bin("*", idx("block_dim", "y"), idx("thread_idx", "z")))
    linear = _add(idx("thread_idx", "x"), _bin("*", idx("block_dim", "x"), inner))
    return _bin("&", linear, _c(group - 1))


Ref = tuple[ir.Var, ir.Expr]
"""A fragment in its storage: the local array and the offset of its first element."""


class _Lowering(Transformer):
    def __init__(self, func: ir.Function, native: bool, warpgroup: bool,
                 status: Status) -> None:
        self.func = func
        self.native = native
        self.warpgroup = warpgroup
        self.status = status
        self.reports = False  # whether a partial warpgroup's check writes the status
        self.count = 0
        self.sizes: dict[str, int] = {}  # fragment storage name -> elements per fragment

    def run(self) -> None:
        for name, t in list(self.func.locals.items()):
            frag = t.elem if isinstance(t, ArrayType) else t
            if isinstance(frag, FragmentType):
                per = fragment_storage(frag, self.native)
                count = t.size if isinstance(t, ArrayType) else 1
                self.func.locals[name] = ArrayType(per.elem, 1, MemorySpace.LOCAL,
                                                   (count * per.size,))
                self.sizes[name] = per.size
        self.func.body = self.transform_body(self.func.body)
        for n in walk(self.func.body):
            if isinstance(n, ir.Expr) and isinstance(n.type, FragmentType):
                raise KernelTypeError("a matrix fragment can only be stored, loaded with "
                                      "kiln.mma_load_a/b and passed to kiln.mma", n.loc)

    def fresh(self, hint: str, t: Type = i32) -> str:
        self.count += 1
        name = f"_mma{self.count}_{hint}"
        self.func.locals[name] = t
        return name

    def loop(self, hint: str, n: int, body: Callable[[ir.Expr], list[ir.Stmt]],
             unroll: int | None = None) -> ir.For:
        var = self.fresh(hint)
        return ir.For(var, _c(0), _c(n), _c(1), body(ir.Var(i32, var)), unroll)

    def storage(self, name: str) -> ir.Var:
        return ir.Var(self.func.locals[name], name)

    def ref(self, e: ir.Expr) -> Ref:
        """Where the fragment a variable or fragment-array element lives."""
        if isinstance(e, ir.Var):
            return self.storage(e.name), _c(0)
        assert isinstance(e, ir.Load)
        per = self.sizes[e.array.name]
        return self.storage(e.array.name), _bin("*", _flat(e.array, e.indices), _c(per))

    @staticmethod
    def at(ref: Ref, offset: ir.Expr) -> ir.Expr:
        return _add(ref[1], offset) if not (isinstance(ref[1], ir.Const)
                                            and ref[1].value == 0) else offset

    def visit_IntrinsicCall(self, e: ir.IntrinsicCall) -> ir.Expr:
        """`kiln.tf32(x)`, the one matrix operation with a value."""
        if e.name != "tf32":
            return e
        if self.native:
            return ir.IntrinsicCall(f32, "native_tf32", e.args, loc=e.loc)
        return self.tf32(e.args[0])

    # ---------------------------------------------------------------- statements

    def visit_Assign(self, s: ir.Assign) -> ir.Stmt | list[ir.Stmt]:
        if not isinstance(s.value.type, FragmentType):
            return s
        return self.located(self.define(self.storage(s.target), _c(0), s.value), s.loc)

    def visit_Store(self, s: ir.Store) -> ir.Stmt | list[ir.Stmt]:
        if not isinstance(s.value.type, FragmentType):
            return s
        target = ir.Load(s.value.type, s.array, s.indices)
        return self.located(self.define(*self.ref(target), s.value), s.loc)

    def define(self, target: ir.Var, offset: ir.Expr, value: ir.Expr) -> list[ir.Stmt]:
        """A fragment stored from a load, or copied from another fragment."""
        t = value.type
        assert isinstance(t, FragmentType)
        ref = (target, offset)
        if isinstance(value, ir.IntrinsicCall):
            return self.load(ref, t, value)
        source = self.ref(value)
        size = fragment_storage(t, self.native).size
        elem = source[0].type.elem  # type: ignore[attr-defined]
        return [self.loop("i", size, lambda i: [ir.Store(
            target, [self.at(ref, i)], ir.Load(elem, source[0], [self.at(source, i)]))])]

    def visit_ExprStmt(self, s: ir.ExprStmt) -> ir.Stmt | list[ir.Stmt]:
        e = s.expr
        if not (isinstance(e, ir.IntrinsicCall) and intrinsics[e.name].category == "matrix"):
            return s
        operation = self.statement_ops.get(e.name)
        if operation is None:  # a fragment load as a statement: `run` reports it
            return s
        return self.located(operation(self, *e.args, loc=e.loc), s.loc)

    @staticmethod
    def located(stmts: list[ir.Stmt], loc: ir.Loc | None) -> list[ir.Stmt]:
        for n in walk(stmts):
            if isinstance(n, (ir.Stmt, ir.Expr)) and n.loc is None:
                n.loc = loc
        return stmts

    # ---------------------------------------------------------------- fragment loads

    def load(self, ref: Ref, t: FragmentType, call: ir.IntrinsicCall) -> list[ir.Stmt]:
        array, row, col = call.args
        assert isinstance(array, ir.Var) and isinstance(array.type, ArrayType)
        if self.native:
            ld = ir.ArrayDim(i32, array, 1)
            return [ir.ExprStmt(ir.IntrinsicCall(
                void, f"native_load_{t.use}", [ref[0], ref[1], array, row, col, ld],
                loc=call.loc))]
        rows, cols = t.shape
        r0, c0 = self.fresh("row"), self.fresh("col")
        out: list[ir.Stmt] = [ir.Assign(r0, row), ir.Assign(c0, col)]

        def element(r: ir.Expr, k: ir.Expr) -> list[ir.Stmt]:
            value: ir.Expr = ir.Load(t.elem, array, [_add(ir.Var(i32, r0), r),
                                                     _add(ir.Var(i32, c0), k)])
            if t.elem == f32:
                value = self.tf32(value)
            return [ir.Store(ref[0], [self.at(ref, _add(_bin("*", r, _c(cols)), k))], value)]

        out.append(self.loop("r", rows, lambda r: [self.loop("k", cols,
                                                             lambda k: element(r, k))]))
        return out

    def tf32(self, value: ir.Expr) -> ir.Expr:
        """`value` rounded to tf32 (see the module docstring); the same on every backend."""
        c = _bin("*", value, _c(TF32_SPLIT, f32))
        high = _bin("-", c, _bin("-", c, value))
        small = ir.Compare(bool_, "<", ir.IntrinsicCall(f32, "abs", [value]),
                           _c(TF32_LIMIT, f32))
        return ir.Select(f32, small, high, value)

    # ---------------------------------------------------------------- operations

    def op_mma(self, acc: ir.Expr, tile: ir.Expr, a: ir.Expr, b: ir.Expr,
               loc: ir.Loc | None) -> list[ir.Stmt]:
        assert isinstance(acc, ir.Var) and isinstance(a.type, FragmentType)
        at = a.type
        ra, rb = self.ref(a), self.ref(b)
        base = _bin("*", tile, _c(4))
        if self.native:
            kind = _c(KINDS[at.elem.name])
            return [ir.ExprStmt(ir.IntrinsicCall(
                void, "native_mma", [acc, base, ra[0], ra[1], rb[0], rb[1], kind], loc=loc))]
        depth = at.k
        lane, b0 = self.fresh("lane"), self.fresh("acc")
        out: list[ir.Stmt] = [ir.Assign(lane, _linear_lane()), ir.Assign(b0, base)]
        lane_v = ir.Var(i32, lane)

        def element(i: ir.Expr) -> list[ir.Stmt]:
            row = _add(_bin(">>", lane_v, _c(2)), _bin("*", _bin(">>", i, _c(1)), _c(8)))
            col = _add(_bin("*", _bin("&", lane_v, _c(3)), _c(2)), _bin("&", i, _c(1)))
            r, n, s = self.fresh("r"), self.fresh("n"), self.fresh("sum", f32)
            sv = ir.Var(f32, s)
            slot = _add(ir.Var(i32, b0), i)

            def term(k: ir.Expr) -> list[ir.Stmt]:
                x = ir.Load(at.elem, ra[0], [self.at(ra, _add(_bin("*", ir.Var(i32, r),
                                                                  _c(depth)), k))])
                y = ir.Load(at.elem, rb[0], [self.at(rb, _add(_bin("*", k, _c(8)),
                                                              ir.Var(i32, n)))])
                return [ir.Assign(s, _bin("+", sv, _bin("*", _cast(x, f32), _cast(y, f32))))]

            return [ir.Assign(r, row), ir.Assign(n, col),
                    ir.Assign(s, ir.Load(f32, acc, [slot])),
                    self.loop("k", depth, term), ir.Store(acc, [slot], sv)]

        out.append(self.loop("i", 4, element))
        return out

    def op_mma_store(self, array: ir.Expr, row: ir.Expr, col: ir.Expr, acc: ir.Expr,
                     tile: ir.Expr, loc: ir.Loc | None) -> list[ir.Stmt]:
        assert isinstance(array, ir.Var) and isinstance(array.type, ArrayType)
        assert isinstance(acc, ir.Var)
        elem = array.type.elem
        assert isinstance(elem, ScalarType)
        lane, r0, c0, b0 = (self.fresh(h) for h in ("lane", "row", "col", "acc"))
        lane_v = ir.Var(i32, lane)
        out: list[ir.Stmt] = [
            ir.Assign(lane, _linear_lane()),
            ir.Assign(r0, _add(row, _bin(">>", lane_v, _c(2)))),
            ir.Assign(c0, _add(col, _bin("*", _bin("&", lane_v, _c(3)), _c(2)))),
            ir.Assign(b0, _bin("*", tile, _c(4))),
        ]

        def element(i: ir.Expr) -> list[ir.Stmt]:
            r = _add(ir.Var(i32, r0), _bin("*", _bin(">>", i, _c(1)), _c(8)))
            c = _add(ir.Var(i32, c0), _bin("&", i, _c(1)))
            value = ir.Load(f32, acc, [_add(ir.Var(i32, b0), i)])
            return [ir.Store(array, [r, c], _cast(value, elem))]

        out.append(self.loop("i", 4, element))
        return out

    def op_copy_async(self, *args: ir.Expr, loc: ir.Loc | None) -> list[ir.Stmt]:
        dst = args[0]
        assert isinstance(dst, ir.Var) and isinstance(dst.type, ArrayType)
        src = args[1 + dst.type.ndim]
        assert isinstance(src, ir.Var) and isinstance(src.type, ArrayType)
        dst_idx = list(args[1:1 + dst.type.ndim])
        src_idx = list(args[2 + dst.type.ndim:-1])
        count = args[-1]
        elem = dst.type.elem
        assert isinstance(elem, ScalarType)
        nbytes = int(count.value) * elem.itemsize if isinstance(count, ir.Const) else 0
        if self.native and nbytes in (4, 8, 16):
            flat = [_flat(dst, dst_idx), _flat(src, src_idx)]
            return [ir.ExprStmt(ir.IntrinsicCall(
                void, "native_copy_async", [dst, flat[0], src, flat[1], _c(nbytes)], loc=loc))]
        d0, s0, n = self.fresh("d"), self.fresh("s"), self.fresh("n")
        out: list[ir.Stmt] = [ir.Assign(d0, dst_idx[-1]), ir.Assign(s0, src_idx[-1]),
                              ir.Assign(n, count)]
        var = self.fresh("e")
        e = ir.Var(i32, var)
        body: list[ir.Stmt] = [ir.Store(
            dst, [*dst_idx[:-1], _add(ir.Var(i32, d0), e)],
            ir.Load(elem, src, [*src_idx[:-1], _add(ir.Var(i32, s0), e)]))]
        out.append(ir.For(var, _c(0), ir.Var(i32, n), _c(1), body))
        return out

    def op_copy_async_commit(self, loc: ir.Loc | None) -> list[ir.Stmt]:
        if not self.native:
            return []  # the copies already happened
        return [ir.ExprStmt(ir.IntrinsicCall(void, "native_copy_async_commit", [], loc=loc))]

    def op_copy_async_wait(self, count: ir.Expr, loc: ir.Loc | None) -> list[ir.Stmt]:
        if not self.native:
            return []
        pending = int(count.value) if isinstance(count, ir.Const) else 0  # else: wait for all
        return [ir.ExprStmt(ir.IntrinsicCall(void, "native_copy_async_wait", [_c(pending)],
                                             loc=loc))]

    # ---------------------------------------------------------------- warpgroup products

    def op_wgmma(self, acc: ir.Expr, sa: ir.Expr, a_row: ir.Expr, a_col: ir.Expr,
                 sb: ir.Expr, b_row: ir.Expr, b_col: ir.Expr,
                 loc: ir.Loc | None) -> list[ir.Stmt]:
        assert isinstance(acc, ir.Var) and isinstance(sa, ir.Var) and isinstance(sb, ir.Var)
        width = wgmma_width(acc.type)
        _check_tile(sa, a_row, a_col, WGMMA_ROWS, "A", loc)
        _check_tile(sb, b_col, b_row, width, "B", loc)
        code = self.status.add(ir.RuntimeCheck(
            ConvergenceError, "kiln.wgmma needs whole warpgroups: launch blocks of a multiple "
            f"of {WARPGROUP} threads", loc))
        self.reports = True
        report: list[ir.Stmt] = [ir.Store(self.status.var(), [_c(0)], _c(code))]
        return [ir.If(_partial_warpgroup(), report, self.product(
            acc, sa, a_row, a_col, sb, b_row, b_col, width, loc))]

    def product(self, acc: ir.Var, sa: ir.Var, a_row: ir.Expr, a_col: ir.Expr, sb: ir.Var,
                b_row: ir.Expr, b_col: ir.Expr, width: int,
                loc: ir.Loc | None) -> list[ir.Stmt]:
        """One warpgroup product, natively or as each thread's dot products."""
        if self.warpgroup:
            kind = _c(KINDS[_tile_type(sa).elem.name])
            return [ir.ExprStmt(ir.IntrinsicCall(
                void, "native_wgmma",
                [acc, sa, _core_offset(sa, a_row, a_col), _leading_bytes(sa),
                 sb, _core_offset(sb, b_col, b_row), _leading_bytes(sb), kind], loc=loc))]
        group, names = self.fresh("lane"), [self.fresh(h) for h in ("ar", "ak", "bk", "bn")]
        lane = ir.Var(i32, group)
        out: list[ir.Stmt] = [ir.Assign(group, _linear_lane(WARPGROUP))]
        out += [ir.Assign(name, value) for name, value in
                zip(names, (a_row, _bin(">>", a_col, _c(3)), _bin(">>", b_row, _c(3)), b_col))]
        ar, ak, bk, bn = (ir.Var(i32, name) for name in names)

        def element(i: ir.Expr) -> list[ir.Stmt]:
            row, col = _wgmma_place(lane, i)
            r, n, s = self.fresh("r"), self.fresh("n"), self.fresh("sum", f32)
            sv = ir.Var(f32, s)

            def operand(tile: ir.Var, block: ir.Var, at: ir.Expr, k: ir.Expr) -> ir.Expr:
                value = ir.Load(_tile_type(tile).elem, tile,
                                [_add(block, _bin(">>", k, _c(3))), at, _bin("&", k, _c(7))])
                return _cast(value, f32)

            def term(k: ir.Expr) -> list[ir.Stmt]:
                x = operand(sa, ak, _add(ar, ir.Var(i32, r)), k)
                y = operand(sb, bk, _add(bn, ir.Var(i32, n)), k)
                return [ir.Assign(s, _bin("+", sv, _bin("*", x, y)))]

            return [ir.Assign(r, row), ir.Assign(n, col), ir.Assign(s, ir.Load(f32, acc, [i])),
                    self.loop("k", WGMMA_DEPTH, term), ir.Store(acc, [i], sv)]

        out.append(self.loop("i", width // 2, element))
        return out

    def op_wgmma_store(self, array: ir.Expr, row: ir.Expr, col: ir.Expr, acc: ir.Expr,
                       loc: ir.Loc | None) -> list[ir.Stmt]:
        """The same scalar stores in every form: the layouts agree."""
        assert isinstance(array, ir.Var) and isinstance(acc, ir.Var)
        elem = _tile_type(array).elem
        assert isinstance(elem, ScalarType)
        group, r0, c0 = self.fresh("lane"), self.fresh("row"), self.fresh("col")
        out: list[ir.Stmt] = [ir.Assign(group, _linear_lane(WARPGROUP)), ir.Assign(r0, row),
                              ir.Assign(c0, col)]

        def element(i: ir.Expr) -> list[ir.Stmt]:
            r, c = _wgmma_place(ir.Var(i32, group), i)
            value = ir.Load(f32, acc, [i])
            return [ir.Store(array, [_add(ir.Var(i32, r0), r), _add(ir.Var(i32, c0), c)],
                             _cast(value, elem))]

        count = wgmma_width(acc.type) // 2  # unrolled: constant indices keep acc in registers
        out.append(self.loop("i", count, element, unroll=count))
        return out

    def warpgroup_sync(self, name: str, *args: ir.Expr, loc: ir.Loc | None) -> list[ir.Stmt]:
        """Fences, commits and waits order asynchronous products: none in the scalar form,
        where each product is done when its statement ends."""
        if not self.warpgroup:
            return []
        call = ir.ExprStmt(ir.IntrinsicCall(void, f"native_{name}", list(args), loc=loc))
        return [ir.If(_partial_warpgroup(), [], [call])]  # the product reports the block

    def op_wgmma_fence(self, loc: ir.Loc | None) -> list[ir.Stmt]:
        return self.warpgroup_sync("wgmma_fence", loc=loc)

    def op_wgmma_commit(self, loc: ir.Loc | None) -> list[ir.Stmt]:
        return self.warpgroup_sync("wgmma_commit", loc=loc)

    def op_wgmma_wait(self, count: ir.Expr, loc: ir.Loc | None) -> list[ir.Stmt]:
        pending = int(count.value) if isinstance(count, ir.Const) else 0  # else: wait for all
        if pending < 0:
            raise KernelTypeError(f"kiln.wgmma_wait({pending}): the count of product groups "
                                  "left pending is at least 0", loc)
        return self.warpgroup_sync("wgmma_wait", _c(pending), *self.accumulators(), loc=loc)

    def accumulators(self) -> list[ir.Var]:
        """The arrays asynchronous products of this function may write: their accumulators
        here and the f32 arrays it passes to functions. A native wait pins them after it
        (the C++ compiler must not read them earlier: it cannot see the products run on)."""
        found: dict[str, ir.Var] = {}
        for n in walk(self.func.body):
            if isinstance(n, ir.IntrinsicCall) and n.name == "wgmma":
                args: list[ir.Expr] = n.args[:1]
            elif isinstance(n, ir.Call):
                args = n.args
            else:
                continue
            for arg in args:
                t = arg.type
                if (isinstance(arg, ir.Var) and isinstance(t, ArrayType) and t.elem == f32
                        and t.space is MemorySpace.LOCAL and t.shape is not None
                        and t.ndim == 1 and t.size % 4 == 0 and 4 <= t.size <= 128):
                    found.setdefault(arg.name, arg)
        return list(found.values())

    statement_ops: ClassVar[dict[str, Callable[..., list[ir.Stmt]]]] = {
        "mma": op_mma, "mma_store": op_mma_store, "copy_async": op_copy_async,
        "copy_async_commit": op_copy_async_commit, "copy_async_wait": op_copy_async_wait,
        "wgmma": op_wgmma, "wgmma_store": op_wgmma_store, "wgmma_fence": op_wgmma_fence,
        "wgmma_commit": op_wgmma_commit, "wgmma_wait": op_wgmma_wait,
    }
    """The matrix intrinsics used as statements, and the method lowering each."""


def _flat(array: ir.Var, indices: list[ir.Expr]) -> ir.Expr:
    """The row-major element offset of `array[indices]`."""
    t = array.type
    assert isinstance(t, ArrayType)
    flat = indices[0]
    for axis in range(1, t.ndim):
        dim = _c(t.shape[axis]) if t.shape is not None else ir.ArrayDim(i32, array, axis)
        flat = _add(_bin("*", flat, dim), indices[axis])
    return flat


def _partial_warpgroup() -> ir.Expr:
    """Whether the block's thread count is not a whole number of warpgroups (uniform)."""
    def dim(axis: str) -> ir.Expr:
        return ir.IntrinsicCall(i32, f"block_dim_{axis}", [])

    threads = _bin("*", _bin("*", dim("x"), dim("y")), dim("z"))
    return ir.Compare(bool_, "!=", _bin("&", threads, _c(WARPGROUP - 1)), _c(0))


def _tile_type(array: ir.Var) -> ArrayType:
    assert isinstance(array.type, ArrayType)
    return array.type


def _wgmma_place(lane: ir.Expr, i: ir.Expr) -> tuple[ir.Expr, ir.Expr]:
    """Row and column of accumulator element `i` of warpgroup thread `lane` (PTX's
    m64nNk16 layout: warp w holds rows 16 w to 16 w + 15, each 8 columns as in mma's
    16 x 8 tile)."""
    warp_lane = _bin("&", lane, _c(31))
    row = _add(_bin("*", _bin(">>", lane, _c(5)), _c(16)), _bin(">>", warp_lane, _c(2)),
               _bin("*", _bin("&", _bin(">>", i, _c(1)), _c(1)), _c(8)))
    col = _add(_bin("*", _bin(">>", i, _c(2)), _c(8)), _bin("*", _bin("&", warp_lane, _c(3)),
                                                         _c(2)), _bin("&", i, _c(1)))
    return row, col


def _check_tile(tile: ir.Var, row: ir.Expr, depth: ir.Expr, rows: int, which: str,
                loc: ir.Loc | None) -> None:
    """Constant positions of a wgmma operand: `depth` on a core-matrix boundary, and the
    64 x 16 (A) or 16 x N (B) tile inside the array."""
    blocks, height, _ = _tile_type(tile).shape or (0, 0, 0)
    if isinstance(depth, ir.Const):
        k = int(depth.value)
        if k % WGMMA_CORE or not 0 <= k <= (blocks - 2) * WGMMA_CORE:
            raise KernelTypeError(f"wgmma's {which} tile starts at k = {k}: a multiple of 8 "
                                  f"from 0 to {(blocks - 2) * WGMMA_CORE} in {tile.name}", loc)
    if isinstance(row, ir.Const) and not 0 <= int(row.value) <= height - rows:
        raise KernelTypeError(f"wgmma's {which} tile of {rows} rows starts at {row.value}, "
                              f"outside {tile.name} (0 to {height - rows})", loc)


def _core_offset(tile: ir.Var, row: ir.Expr, depth: ir.Expr) -> ir.Expr:
    """The element offset of `tile[depth // 8, row, 0]`, where the descriptor starts."""
    height = (_tile_type(tile).shape or (0, 0, 0))[1]
    block = _bin(">>", depth, _c(3))
    return _bin("*", _add(_bin("*", block, _c(height)), row), _c(WGMMA_CORE))


def _leading_bytes(tile: ir.Var) -> ir.Expr:
    """Bytes from one core matrix to the next along k: one k block of the array."""
    height = (_tile_type(tile).shape or (0, 0, 0))[1]
    return _c(height * WGMMA_CORE * 2)
