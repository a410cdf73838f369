"""Bounds checks for compiled kernels (`@kiln.kernel(debug=True)`, `KILN_DEBUG=1`).

Every index of an array load, store or atomic goes through a checker function of its type:
`kiln_check_index_i32(index, dim, code)` returns the index when `0 <= index < dim`;
otherwise it records the failure in the status array (the first failing thread claims it
with a compare-and-swap, then writes the index and its thread and block) and returns an
index that keeps the access harmless (below). The launch's next synchronisation raises
`IndexOutOfBoundsError` naming the kernel, the array, the index, the thread and the line
(`kiln.runtime.status`). The last index of a wide access (`kiln.load(f32x4, a, i)`,
`kiln.store`) has a checker of its own (`kiln_check_wide4_*`) for all its elements, which
reports the first element outside. The checker is a call where the index is evaluated, so
indices guarded by `and`, `or` or `if ... else` are checked only when evaluated.

Views index their array (`seg[k]` is `a[lo + k]`), so a program built with checks marks
each index of a view and each bound of a slice as an `ir.CheckedIndex` against the view's
own extent; those become calls of checkers of their own (`kiln_check_view_*`, and
`kiln_check_bound_*` for a slice's bounds, which may equal the extent). The interp checks
every array access itself (`Backend.checks_bounds`) and gets only the views' and the
wide accesses' checks (`arrays=False`).

A failed access does not happen: its array's checker returns -1, a view's or a slice
bound's the most negative index (so that the array index made from it is below 0 too),
and the access runs only where every index is at least 0. A store's indices (and those of
an element a `SetField` writes) are evaluated into locals first; a load or an atomic goes
through a function of its own (`kiln_guarded_load`, `kiln_guarded_atomic_add`, ...) that
gives a zero of its type without touching the array.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from ...errors import IndexOutOfBoundsError
from .. import nodes as ir
from ..ranges import Ranges
from ..types import (
    ArrayType,
    ScalarType,
    StructType,
    Type,
    VariantType,
    VectorType,
    bool_,
    i32,
    i64,
    u64,
)
from ..visit import Transformer, walk
from .common import all_functions, clone_program
from .status import STATUS_TYPE, Status, fresh

_THREAD = ("thread_idx_x", "thread_idx_y", "thread_idx_z",
           "block_idx_x", "block_idx_y", "block_idx_z")


def check_bounds(program: ir.Program, arrays: bool = True) -> ir.Program:
    """The program with each `ir.CheckedIndex` checked and, with `arrays`, every array
    index checked against its dimension."""
    program = clone_program(program)
    status = Status(program)
    taken = {f.name for f in all_functions(program)}
    checkers: dict[tuple[ScalarType, str, int], ir.Function] = {}
    guards: dict[tuple[str, tuple[Type, ...]], ir.Function] = {}
    kernel = program.kernel.name
    for func in all_functions(program):
        _Checked(func, status, checkers, guards, taken, kernel, arrays).transform_body_of(func)
    if not checkers:  # nothing to check: no status array to pass
        return program
    program.functions[:0] = [*checkers.values(), *guards.values()]
    status.reporters |= {f.name for f in checkers.values()}
    status.thread()
    return program


class _Checked(Transformer):
    def __init__(self, func: ir.Function, status: Status,
                 checkers: dict[tuple[ScalarType, str, int], ir.Function],
                 guards: dict[tuple[str, tuple[Type, ...]], ir.Function], taken: set[str],
                 kernel: str, arrays: bool) -> None:
        self.func, self.status, self.checkers, self.guards = func, status, checkers, guards
        self.taken, self.kernel, self.arrays = taken, kernel, arrays
        self.ranges = Ranges(func)
        self.written: set[int] = set()  # ids of the elements a `SetField` writes
        self.names = {*func.locals, *(p.name for p in func.params)}

    def transform_body_of(self, func: ir.Function) -> None:
        func.body = self.transform_body(func.body)

    def transform(self, node: object) -> object:
        if isinstance(node, ir.SetField):  # `ps[k].a = v` writes `ps[k]`: "wrote"
            place = node.target
            while isinstance(place, ir.Field):
                place = place.value
            self.written.add(id(place))
        return super().transform(node)

    def visit_CheckedIndex(self, e: ir.CheckedIndex) -> ir.Expr:
        extent = e.extent if e.extent.type == i32 else ir.Cast(i32, e.extent, loc=e.loc)
        return self.check(e.value, extent, e.message, "bound" if e.bound else "view", e.loc)

    def visit_Load(self, e: ir.Load) -> ir.Expr:
        """A checked read through `kiln_guarded_load`; an element a `SetField` writes is
        guarded there (`visit_SetField`)."""
        written = id(e) in self.written
        e.indices = self.checked(e.array, e.indices, "wrote" if written else "read", e.loc,
                                 _width(e.array, e.type))
        if written or not any(map(self.has_check, e.indices)):
            return e
        ndim = len(e.indices)
        return ir.Call(e.type, self.guard(
            "load", [e.array, *e.indices], ndim,
            lambda args: ir.Load(e.type, args[0], args[1:]), _zero(e.type)).name,  # type: ignore[arg-type]
            [e.array, *e.indices], loc=e.loc)

    def visit_SetField(self, s: ir.SetField) -> ir.Stmt | list[ir.Stmt]:
        place = s.target
        while isinstance(place, ir.Field):
            place = place.value
        if not isinstance(place, ir.Load) or not any(map(self.has_check, place.indices)):
            return s
        held = self.held(place.indices, s.loc)
        place.indices = [ir.Var(i.type, a.target) for i, a in zip(place.indices, held)]
        return [*held, ir.If(_all_at_least_0(place.indices), [s])]

    def held(self, indices: list[ir.Expr], loc: ir.Loc | None) -> list[ir.Assign]:
        """Assignments of `indices` to fresh locals: a write evaluates them before the
        guard that reads them."""
        out = []
        for index in indices:
            name = fresh("kiln_at", self.names)
            self.func.locals[name] = index.type
            out.append(ir.Assign(name, index, loc=loc))
        return out

    def visit_Store(self, s: ir.Store) -> ir.Stmt | list[ir.Stmt]:
        s.indices = self.checked(s.array, s.indices, "wrote", s.loc,
                                 _width(s.array, s.value.type))
        if not any(map(self.has_check, s.indices)):
            return s
        held = self.held(s.indices, s.loc)
        s.indices = [ir.Var(i.type, a.target) for i, a in zip(s.indices, held)]
        return [*held, ir.If(_all_at_least_0(s.indices), [s])]

    def visit_IntrinsicCall(self, e: ir.IntrinsicCall) -> ir.Expr:
        if e.name.startswith("atomic_") and e.args \
                and isinstance(e.args[0], ir.Var) and isinstance(e.args[0].type, ArrayType) \
                and e.args[0].name != self.status.name:
            array = e.args[0]
            assert isinstance(array, ir.Var) and isinstance(array.type, ArrayType)
            ndim = array.type.ndim
            indices = self.checked(array, e.args[1:1 + ndim], "updated", e.loc)
            e.args = [array, *indices, *e.args[1 + ndim:]]
            if any(map(self.has_check, indices)):
                name = e.name
                guard = self.guard(name, e.args, ndim,
                                   lambda args: ir.IntrinsicCall(e.type, name, args),
                                   _zero(e.type))
                return ir.Call(e.type, guard.name, e.args, loc=e.loc)
        return e

    def has_check(self, index: ir.Expr) -> bool:
        checkers = {f.name for f in self.checkers.values()}
        return any(isinstance(n, ir.Call) and n.func in checkers for n in walk(index))

    def guard(self, what: str, args: list[ir.Expr], ndim: int,
              access: Callable[[list[ir.Expr]], ir.Expr], zero: ir.Expr) -> ir.Function:
        """`kiln_guarded_<what>(array, index..., value...)`: the `access` of the array where
        every index is at least 0, else `zero` without touching the array."""
        types = tuple(a.type for a in args)
        found = self.guards.get((what, types))
        if found is None:
            params = [ir.Param(f"arg{k}", t) for k, t in enumerate(types)]
            values: list[ir.Expr] = [ir.Var(p.type, p.name) for p in params]
            body: list[ir.Stmt] = [
                ir.If(_all_at_least_0(values[1:1 + ndim]), [ir.Return(access(values))]),
                ir.Return(zero)]
            found = self.guards[what, types] = ir.Function(
                fresh(f"kiln_guarded_{what}", self.taken), params, zero.type, body, {})
        return found

    def checked(self, array: ir.Var, indices: list[ir.Expr], verb: str,
                loc: ir.Loc | None, width: int = 1) -> list[ir.Expr]:
        """The indices, each checked against its axis; the last one of a wide access
        (`width` elements from `width * index`) for its whole extent, also where the
        backend checks arrays itself (it sees `width * index` only, which may wrap)."""
        t = array.type
        assert isinstance(t, ArrayType)
        out = []
        for axis, index in enumerate(indices):
            n = width if axis == t.ndim - 1 else 1
            if not self.arrays and n == 1:
                out.append(index)  # the backend checks it (a wide one's `n * index` may wrap)
                continue
            if t.shape is not None and _within(self.ranges.of(index), t.shape[axis] // n):
                out.append(index)  # provably inside a fixed shape (`s[tid]`, `s[i % 64]`)
                continue
            dim = ir.ArrayDim(i32, ir.Var(t, array.name), axis, loc=loc)
            message = index_message(verb, array.name, axis, t.ndim)
            out.append(self.check(index, dim, message, "index" if n == 1 else "wide", loc, n))
        return out

    def check(self, index: ir.Expr, extent: ir.Expr, message: str, kind: str,
              loc: ir.Loc | None, width: int = 1) -> ir.Expr:
        """`index` through the checker of `kind` (`_checker`), which reports `message`
        when it is outside `extent` (a "wide" one: when any of the `width` elements from
        `width * index` is)."""
        code = self.status.add(ir.RuntimeCheck(
            IndexOutOfBoundsError,
            f"kernel `{self.kernel}`: thread {{thread}} of block {{block}} {message}", loc,
            details=True))
        index_type = index.type if index.type == i64 else i32
        value = index if index.type == index_type else ir.Cast(index_type, index)
        checker = self.checker(index_type, kind, width)  # type: ignore[arg-type]
        return ir.Call(index_type, checker.name, [value, extent, ir.Const(i32, code)], loc=loc)

    def checker(self, t: ScalarType, kind: str, width: int) -> ir.Function:
        found = self.checkers.get((t, kind, width))
        if found is None:
            name = f"kiln_check_{kind}{width if kind == 'wide' else ''}_{t.name}"
            found = self.checkers[t, kind, width] = _checker(
                fresh(name, self.taken), t, kind, self.status, width)
        return found


def _width(array: ir.Var, t: Type) -> int:
    """How many elements of `array` an access of a `t` moves: a vector's components for a
    wide access of a scalar array (`kiln.load(f32x4, a, i)`, `kiln.store`), else 1."""
    assert isinstance(array.type, ArrayType)
    if isinstance(t, VectorType) and isinstance(array.type.elem, ScalarType):
        return t.n
    return 1


def _within(bounds: tuple[int, int], extent: int) -> bool:
    return bounds[0] >= 0 and bounds[1] < extent


def _zero(t: Type) -> ir.Expr:
    """A zero of an element's type (what a failed load gives): a variant's holds its first
    case."""
    if isinstance(t, ScalarType):
        return ir.Const(t, False if t == bool_ else 0.0 if t.is_float else 0)
    if isinstance(t, VectorType):
        return ir.Construct(t, [_zero(t.elem)])
    if isinstance(t, StructType):
        return ir.Construct(t, [_zero(f) for _, f in t.fields])
    assert isinstance(t, VariantType), t
    return ir.Cast(t, _zero(t.cases[0]))


def _all_at_least_0(indices: list[ir.Expr]) -> ir.Expr:
    tests: list[ir.Expr] = [ir.Compare(bool_, ">=", i, ir.Const(i.type, 0)) for i in indices]
    return tests[0] if len(tests) == 1 else ir.BoolOp(bool_, "and", tests)


def index_message(verb: str, name: str, axis: int, ndim: int, place: str = "{index}") -> str:
    """What a failed check says after the thread: "read `a[{index}]`, outside its
    {extent} elements", "wrote `m[:, {index}]`, outside its shape (axis 1 has {extent}
    elements)"; `place` is what stands at the failing axis (`{index}:` for a slice's
    start). `name` is the array or view as written (braces in it are escaped)."""
    shown = name.replace("{", "{{").replace("}", "}}")
    where = ", ".join(place if k == axis else ":" for k in range(ndim))
    return f"{verb} `{shown}[{where}]`, {outside(axis, ndim, '{extent}')}"


def outside(axis: int, ndim: int, extent: int | str) -> str:
    """The end of an out-of-bounds message (shared with the interp's own checks)."""
    if ndim == 1:
        return f"outside its {extent} elements"
    return f"outside its shape (axis {axis} has {extent} elements)"


def _checker(name: str, t: ScalarType, kind: str, status: Status, width: int) -> ir.Function:
    """`name(index, dim, code)`: the index when in range, else, after reporting `code`, -1
    for an array's index, the most negative index for a view's index or a slice's bound
    (whatever is added to it stays below 0). In
    range: `0 <= index < dim` for an array's or a view's index (kind "index", "view"),
    `0 <= index <= dim` for a slice's bound ("bound"), elements `width * index` to
    `width * index + width - 1` all inside `dim` for a wide access ("wide", which reports
    the first element outside, as the interp does); a view's or a slice's `dim` below 0
    (a slice `a[lo:hi]` with `lo > hi`) is an empty axis, 0."""
    index, dim, code = ir.Var(t, "index"), ir.Var(i32, "dim"), ir.Var(i32, "code")
    array = ir.Var(STATUS_TYPE, status.name)
    tests: list[ir.Expr] = [
        ir.Compare(bool_, "<", index, ir.Const(t, 0)),
        ir.Compare(bool_, ">" if kind == "bound" else ">=", index,
                   dim if t == i32 else ir.Cast(t, dim))]
    reported: Callable[[], ir.Expr] = functools.partial(ir.Var, t, "index")
    if kind == "wide":
        past, reported = _wide(t, width)
        tests.append(past)
    outside = ir.BoolOp(bool_, "or", tests)
    claimed = ir.Compare(bool_, "==", ir.IntrinsicCall(
        i32, "atomic_cas", [array, ir.Const(i32, 0), ir.Const(i32, 0), code]), ir.Const(i32, 0))
    low = reported()
    high = (ir.Cast(i32, ir.BinOp(i64, ">>", reported(), ir.Const(i64, 32)))
            if low.type == i64 else
            ir.Select(i32, ir.Compare(bool_, "<", index, ir.Const(t, 0)),
                      ir.Const(i32, -1), ir.Const(i32, 0)))
    words: list[ir.Expr] = [
        low if low.type == i32 else ir.Cast(i32, low), high, dim,
        *(ir.IntrinsicCall(i32, n, []) for n in _THREAD)]
    report: list[ir.Stmt] = [ir.Store(array, [ir.Const(i32, k + 1)], w)
                             for k, w in enumerate(words)]
    body: list[ir.Stmt] = [
        ir.If(outside, [ir.If(claimed, report), ir.Return(ir.Const(t, _failed(t, kind)))]),
        ir.Return(index)]
    if kind in ("view", "bound"):
        empty = ir.Compare(bool_, "<", dim, ir.Const(i32, 0))
        body.insert(0, ir.Assign("dim", ir.Select(i32, empty, ir.Const(i32, 0), dim)))
    return ir.Function(name, [ir.Param("index", t), ir.Param("dim", i32),
                              ir.Param("code", i32)], t, body, {})


def _failed(t: ScalarType, kind: str) -> int:
    """What a checker of `kind` returns for an index outside (`_checker`)."""
    return -(1 << (t.bits - 1)) if kind in ("view", "bound") else -1


def _wide(t: ScalarType, width: int) -> tuple[ir.Expr, Callable[[], ir.Expr]]:
    """For a wide checker, whose index is inside `dim`: whether its last element is past
    it, and what makes the element reported (i64): the first, or `dim` when only the tail
    is outside. `width * index` wraps (through u64) as the interp's address does."""
    def first() -> ir.Expr:
        product = ir.BinOp(u64, "*", ir.Cast(u64, ir.Var(t, "index")), ir.Const(u64, width))
        return ir.Cast(i64, product)

    def dim() -> ir.Expr:
        return ir.Cast(i64, ir.Var(i32, "dim"))

    past = ir.Compare(bool_, ">", ir.BinOp(i64, "+", first(), ir.Const(i64, width)), dim())

    def reported() -> ir.Expr:
        inside = ir.BoolOp(bool_, "and", [ir.Compare(bool_, ">=", first(), ir.Const(i64, 0)),
                                          ir.Compare(bool_, "<", first(), dim())])
        return ir.Select(i64, inside, dim(), first())

    return past, reported
