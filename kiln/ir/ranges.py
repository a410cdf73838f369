"""Value ranges of integer expressions, so C code keeps native signed arithmetic where no
overflow is possible.

kiln's integers wrap (two's complement); C, OpenCL C and CUDA let the compiler assume
signed `+ - *` never overflow. The C-family emitter therefore computes a signed operation
in the unsigned type of the same width and converts back, unless this analysis proves the
result fits: thread indices, global ids, loop counters and small offsets of them
(`tid + s`, `i + 1`) keep C's native form, which compilers fold into addressing.

The facts it relies on are checked at launch (`kiln.execution.dims.validate_dims`):
a block has at most `MAX_BLOCK_THREADS` threads per axis and `grid * block` per axis fits
an i32, so a global id is at most 2**31 - 2.
"""

from __future__ import annotations

from . import nodes as ir
from .types import ScalarType
from .visit import Visitor, walk

Interval = tuple[int, int]

MAX_BLOCK_THREADS = 1 << 16
"""kiln's limit on a block's extent along one axis (above every device's own)."""
MAX_GLOBAL = 2**31 - 1
"""The limit on `grid * block` along one axis: global ids and sizes are i32."""

_INDEX_RANGES: dict[str, Interval] = {
    "thread_idx": (0, MAX_BLOCK_THREADS - 1),
    "block_dim": (1, MAX_BLOCK_THREADS),
    "block_idx": (0, MAX_GLOBAL - 1),
    "grid_dim": (1, MAX_GLOBAL),
}


def type_range(t: ScalarType) -> Interval:
    lo, hi = t.range()
    return int(lo), int(hi)


def _whole(e: ir.Expr) -> Interval:
    """The range of `e`'s type (0..1 for a bool)."""
    t = e.type
    assert isinstance(t, ScalarType)
    return type_range(t) if not t.is_bool else (0, 1)


class Ranges(Visitor[Interval]):
    """Ranges of one function's integer expressions. A local's range is the hull of every
    value assigned to it (a loop variable's: of its start and stop), as long as none of
    them depends on the local itself through an unknown path. `visit_<Expr>` gives the
    bounds of an expression's mathematical value (`exact`)."""

    def __init__(self, func: ir.Function) -> None:
        self.sources: dict[str, list[ir.Expr | ir.For]] = {}
        self.opaque: set[str] = set()
        for node in walk(func.body):
            if isinstance(node, ir.Assign):
                self.sources.setdefault(node.target, []).append(node.value)
            elif isinstance(node, ir.For):
                self.sources.setdefault(node.var, []).append(node)
            elif isinstance(node, ir.Native):
                self.opaque |= {v.name for v in node.vars}
        self.params = {p.name for p in func.params}
        self._var_ranges: dict[str, Interval] = {}
        self._visiting: set[str] = set()

    def fits(self, e: ir.Expr) -> bool:
        """Whether `e`'s exact (unwrapped) value always fits its type."""
        t = e.type
        if not isinstance(t, ScalarType) or not t.is_int:
            return True
        lo, hi = self.exact(e)
        tlo, thi = type_range(t)
        return tlo <= lo and hi <= thi

    def of(self, e: ir.Expr) -> Interval:
        """The range of `e`'s value (its type's range when nothing better is known)."""
        t = e.type
        assert isinstance(t, ScalarType)
        lo, hi = self.exact(e)
        tlo, thi = type_range(t) if not t.is_bool else (0, 1)
        return (lo, hi) if tlo <= lo and hi <= thi else (tlo, thi)

    def exact(self, e: ir.Expr) -> Interval:
        """Bounds of the mathematical value of `e`, before any wrap-around of `e` itself."""
        t = e.type
        if not isinstance(t, ScalarType) or t.is_float:
            raise TypeError("integer expressions only")
        return self.visit(e)

    def generic_visit(self, e: ir.Expr | ir.Stmt) -> Interval:
        assert isinstance(e, ir.Expr)
        return _whole(e)

    def visit_Const(self, e: ir.Const) -> Interval:
        return int(e.value), int(e.value)

    def visit_IntrinsicCall(self, e: ir.IntrinsicCall) -> Interval:
        return _INDEX_RANGES.get(e.name[:-2]) or _whole(e)

    def visit_ArrayDim(self, e: ir.ArrayDim) -> Interval:
        return 0, MAX_GLOBAL

    def visit_Var(self, e: ir.Var) -> Interval:
        return self.var(e.name, _whole(e))

    def visit_Cast(self, e: ir.Cast) -> Interval:
        whole = _whole(e)
        if not isinstance(e.value.type, ScalarType) or e.value.type.is_float:
            return whole
        inner = self.of(e.value)
        return inner if whole[0] <= inner[0] and inner[1] <= whole[1] else whole

    def visit_BinOp(self, e: ir.BinOp) -> Interval:
        return self.binop(e, _whole(e))

    def visit_UnaryOp(self, e: ir.UnaryOp) -> Interval:
        if e.op != "-":
            return _whole(e)
        lo, hi = self.of(e.operand)
        return -hi, -lo

    def visit_Select(self, e: ir.Select) -> Interval:
        a, b = self.of(e.if_true), self.of(e.if_false)
        return min(a[0], b[0]), max(a[1], b[1])

    def var(self, name: str, whole: Interval) -> Interval:
        if name in self._var_ranges:
            return self._var_ranges[name]
        sources = self.sources.get(name)
        if name in self.params or name in self.opaque or not sources or name in self._visiting:
            return whole
        self._visiting.add(name)
        try:
            ranges = [self.loop(s) if isinstance(s, ir.For) else self.of(s) for s in sources]
        finally:
            self._visiting.discard(name)
        hull = min(r[0] for r in ranges), max(r[1] for r in ranges)
        self._var_ranges[name] = hull
        return hull

    def loop(self, s: ir.For) -> Interval:
        """A loop variable's range: from start to just before stop (a constant step)."""
        start, stop = self.of(s.start), self.of(s.stop)
        step = s.step.value if isinstance(s.step, ir.Const) else 0
        if step > 0:
            return start[0], max(start[0], stop[1] - 1)
        if step < 0:
            return min(start[1], stop[0] + 1), start[1]
        return min(start[0], stop[0]), max(start[1], stop[1])

    def binop(self, e: ir.BinOp, whole: Interval) -> Interval:
        if _is_block_offset(e):
            return 0, MAX_GLOBAL - 1
        if _is_global_size(e):
            return 1, MAX_GLOBAL
        a, b = self.of(e.left), self.of(e.right)
        if e.op == "+":
            return a[0] + b[0], a[1] + b[1]
        if e.op == "-":
            return a[0] - b[1], a[1] - b[0]
        if e.op == "*":
            corners = [x * y for x in a for y in b]
            return min(corners), max(corners)
        if e.op == "<<":
            if not 0 <= b[0] <= b[1] < 64:
                return -(2**127), 2**127  # unknown: never proven to fit
            corners = [x << y for x in a for y in b]
            return min(corners), max(corners)
        if e.op in ("//", ">>") and b[0] >= (1 if e.op == "//" else 0):
            divisors = (b[0], b[1]) if e.op == "//" else (1 << b[0], 1 << min(b[1], 63))
            corners = [x // y for x in a for y in divisors]
            return min(corners), max(corners)
        if e.op == "%" and b[0] >= 1:
            return 0, b[1] - 1
        if e.op == "&" and (a[0] >= 0 or b[0] >= 0):
            return 0, min(x[1] for x in (a, b) if x[0] >= 0)
        return whole


def _is_block_offset(e: ir.BinOp) -> bool:
    """`block_idx.a * block_dim.a` (+ `thread_idx.a`): below `grid * block` <= 2**31 - 1."""
    if e.op == "+" and isinstance(e.left, ir.BinOp) and _is_index(e.right, "thread_idx"):
        return _is_block_offset(e.left) and e.left.op == "*" \
            and e.right.name[-1] == _axis(e.left)  # type: ignore[attr-defined]
    if e.op != "*":
        return False
    names = {_index_name(e.left), _index_name(e.right)}
    return len({n[-1] for n in names if n}) == 1 and \
        {n[:-2] for n in names if n} == {"block_idx", "block_dim"}


def _is_global_size(e: ir.BinOp) -> bool:
    """`grid_dim.a * block_dim.a`: at most 2**31 - 1 (checked at launch)."""
    names = {_index_name(e.left), _index_name(e.right)}
    return e.op == "*" and None not in names and len({n[-1] for n in names if n}) == 1 \
        and {n[:-2] for n in names if n} == {"grid_dim", "block_dim"}


def _axis(e: ir.BinOp) -> str:
    return (_index_name(e.left) or "")[-1:]


def _index_name(e: ir.Expr) -> str | None:
    return e.name if isinstance(e, ir.IntrinsicCall) and e.name[:-2] in _INDEX_RANGES else None


def _is_index(e: ir.Expr, base: str) -> bool:
    return isinstance(e, ir.IntrinsicCall) and e.name[:-2] == base
