"""Thread guards: the test a thread loop's threads start with, as data.

GPU kernels open a region with a test of the thread's index: `if i < n:` (the bounds check
of an elementwise kernel), `if t < k:` (a step of a shared-memory tree reduction), `if i >=
n: return` (the threads past the end of a launch by size). Run as a loop over threads,
such a test makes every store of the region conditional (a masked vector store, which is
slow on many CPUs: 2.3x on vector_add on Zen 3) and, for `t < k`, visits threads that have
nothing to do. `thread_guard` finds that test and splits it: the conditions that bound
`thread_idx.x` (or a `Shift` of it, such as the global id) by a block-uniform value give
the x range of the loop; the rest, when it is pure and reads no memory (`y < h`), may be
tested for every thread first, so that a block whose threads all pass runs the body
untested.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..ir import nodes as ir
from ..ir.analysis import reads_and_writes
from ..ir.intrinsics import Variance, intrinsics
from ..ir.passes.common import has_side_effects
from ..ir.types import ScalarType, bool_
from ..ir.visit import walk

COPY_LIMIT = 400
"""IR nodes of a body that may be emitted twice (tested and untested): beyond it, compile
time would grow more than a region's test costs."""
NEGATED = {"<": ">=", ">=": "<", ">": "<=", "<=": ">", "==": "!=", "!=": "=="}
MIRRORED = {"<": ">", ">": "<", "<=": ">=", ">=": "<=", "==": "==", "!=": "!="}


@dataclass(frozen=True)
class Shift:
    """A thread's `thread_idx.x + sign * by` (`by` block-uniform; None: 0), computed
    without wrapping: `i = block_idx.x * block_dim.x + thread_idx.x` is `thread_idx.x +
    by` for the whole block."""

    by: ir.Expr | None = None
    sign: int = 1


@dataclass(frozen=True)
class Bound:
    """`value - sign * by + offset` (offset 0 or 1; `by` and `sign` a `Shift`'s), `value`
    and `by` block-uniform signed integers."""

    value: ir.Expr
    offset: int
    shift: Shift = Shift()


@dataclass(frozen=True)
class ThreadGuard:
    """A thread loop that runs `body` for the threads whose `thread_idx.x` is at least
    each of `lows` and below each of `highs` and for which `test` holds (None: nothing
    more to test). `uniform`: `test` may be evaluated for every thread before any body
    runs (no side effects, no memory read, neither by it nor by the assignments it
    reads), and `body` is small enough to be emitted twice."""

    lows: list[Bound]
    highs: list[Bound]
    test: ir.Expr | None
    body: list[ir.Stmt]
    uniform: bool


def thread_guard(blocks: ir.BlockLoop, loop: ir.ThreadLoop, initial: list[ir.Assign],
                 fits: Callable[[ir.Expr], bool]) -> ThreadGuard | None:
    """The guard of `loop`, whose body starts with the assignments `initial`: the rest is
    one `if` without `else`, or an `if` that only returns (where no later thread loop
    needs to know) followed by the body. None where there is none or nothing to gain.
    `fits(e)`: whether the target computes integer expression `e` without wrapping (a
    `Shift` is only taken from such a sum)."""
    rest = loop.body[len(initial):]
    if not rest or not isinstance(rest[0], ir.If) or rest[0].orelse:
        return None
    first = rest[0]
    if len(rest) == 1:
        test, body = first.cond, first.then
    elif (not blocks.exits and len(first.then) == 1 and isinstance(first.then[0], ir.Return)
          and first.then[0].value is None):
        test, body = negation(first.cond), rest[1:]
    else:
        return None
    if has_side_effects(test):
        return None
    local = {*blocks.thread_vars, *loop.private}
    shifts: dict[str, Shift] = {}
    for a in initial:
        shift = _shift(a.value, shifts, local, fits)
        if shift is not None:
            shifts[a.target] = shift
    lows: list[Bound] = []
    highs: list[Bound] = []
    others: list[ir.Expr] = []
    for term in conjuncts(test):
        bounds = _x_bounds(term, shifts, local, fits)
        if not bounds:
            others.append(term)
        for low, bound in bounds:
            (lows if low else highs).append(bound)
    rest_test = None if not others else (
        others[0] if len(others) == 1 else ir.BoolOp(bool_, "and", others, loc=test.loc))
    uniform = (rest_test is not None and _memory_free(rest_test, initial)
               and sum(1 for _ in walk(body)) <= COPY_LIMIT)
    if not lows and not highs and not uniform:
        return None
    return ThreadGuard(lows, highs, rest_test, body, uniform)


def negation(e: ir.Expr) -> ir.Expr:
    """`not e`, with integer comparisons flipped and `and`/`or` exchanged (De Morgan), so
    that `if i >= n: return` guards like `if i < n:`."""
    if isinstance(e, ir.Compare) and _signed_int(e.left.type):
        return ir.Compare(e.type, NEGATED[e.op], e.left, e.right, loc=e.loc)
    if isinstance(e, ir.BoolOp):
        op = "or" if e.op == "and" else "and"
        return ir.BoolOp(e.type, op, [negation(v) for v in e.values], loc=e.loc)
    if isinstance(e, ir.UnaryOp) and e.op == "not":
        return e.operand
    return ir.UnaryOp(bool_, "not", e, loc=e.loc)


def conjuncts(e: ir.Expr) -> list[ir.Expr]:
    """The terms of a (nested) `and`, in evaluation order."""
    if isinstance(e, ir.BoolOp) and e.op == "and":
        return [t for v in e.values for t in conjuncts(v)]
    return [e]


def _x_bounds(term: ir.Expr, shifts: dict[str, Shift], local: set[str],
              fits: Callable[[ir.Expr], bool]) -> list[tuple[bool, Bound]]:
    """`x OP value` (either way round; OP one of < <= > >= ==), `x` a `Shift` of
    `thread_idx.x` and `value` block-uniform, as bounds of `thread_idx.x` (`True` for a
    low bound, inclusive; `False` for a high one, exclusive); none for any other term."""
    if not isinstance(term, ir.Compare) or term.op not in ("<", "<=", ">", ">=", "=="):
        return []
    if not _signed_int(term.left.type):
        return []
    op, value = term.op, term.right
    shift = _shift(term.left, shifts, local, fits)
    if shift is None:
        shift = _shift(term.right, shifts, local, fits)
        if shift is None:
            return []
        op, value = MIRRORED[op], term.left
    if not _block_uniform(value, local):
        return []
    low, high = (True, Bound(value, 0, shift)), (False, Bound(value, 1, shift))
    return {"<": [(False, Bound(value, 0, shift))], "<=": [high],
            ">": [(True, Bound(value, 1, shift))], ">=": [low], "==": [low, high]}[op]


def _signed_int(t: object, bits: int = 64) -> bool:
    return isinstance(t, ScalarType) and t.is_int and t.is_signed and t.bits <= bits


def _shift(e: ir.Expr, shifts: dict[str, Shift], local: set[str],
           fits: Callable[[ir.Expr], bool]) -> Shift | None:
    """`e` as a `Shift` of `thread_idx.x`: the index itself, a private variable assigned
    one at the loop's start, `x + by`, `by + x` or `x - by` of 32 bits or fewer that cannot
    wrap, any of them widened to a signed integer (which keeps its value)."""
    while isinstance(e, ir.Cast) and _signed_int(e.type) and e.type.bits >= 32:  # type: ignore[attr-defined]
        e = e.value
    if isinstance(e, ir.Var):
        return shifts.get(e.name)
    if isinstance(e, ir.IntrinsicCall):
        return Shift() if e.name == "thread_idx_x" else None
    if not (isinstance(e, ir.BinOp) and e.op in ("+", "-") and _signed_int(e.type, 32)
            and fits(e)):
        return None
    pairs = [(e.left, e.right, 1 if e.op == "+" else -1)]
    if e.op == "+":
        pairs.append((e.right, e.left, 1))
    for x, by, sign in pairs:
        inner = _shift(x, shifts, local, fits)
        if inner is not None and inner.by is None and _block_uniform(by, local):
            return Shift(by, sign)
    return None


def _block_uniform(e: ir.Expr, local: set[str]) -> bool:
    """Whether `e` has one value for the whole block that block-level code can compute:
    constants, parameters, block variables and the grid's and block's indices and sizes;
    no memory read, call, thread index or per-thread variable."""
    for n in walk(e):
        if isinstance(n, (ir.Load, ir.Call, ir.CheckedIndex)):
            return False
        if isinstance(n, ir.IntrinsicCall) and (
                n.name not in intrinsics or intrinsics[n.name].category != "index"
                or intrinsics[n.name].variance is Variance.THREAD):
            return False
        if isinstance(n, ir.Var) and n.name in local:
            return False
    return True


def _memory_free(test: ir.Expr, initial: list[ir.Assign]) -> bool:
    """Whether `test` and the loop-start assignments it reads (directly or through each
    other) read no memory and have no side effects, and none of the assignments has side
    effects: testing every thread first evaluates them once more."""
    if any(has_side_effects(a.value) for a in initial):
        return False
    needed = reads_and_writes(test)[0]
    exprs = [test]
    for a in reversed(initial):
        if a.target in needed:
            needed |= reads_and_writes(a.value)[0]
            exprs.append(a.value)
    return not any(isinstance(n, (ir.Load, ir.Call, ir.CheckedIndex))
                   for e in exprs for n in walk(e))
