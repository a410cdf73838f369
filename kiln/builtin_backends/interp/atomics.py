"""Atomics as if the active lanes ran one after another, in lane order.

Each implementation takes `(flat, index, *values, old=...)`: the target's flat NumPy array,
the flat element index of every active lane, and one array per value operand (same length,
the target's dtype). It applies the lanes' updates in order and, when `old` is true, returns
the value each lane saw before its own update (what a serial execution would return).

Lanes hitting one element form a segment of a stable sort by index; totals and old values
come from segmented scans (cumulative sums for add/sub, a doubling scan for the other
associative operators), so the common cases stay vectorised.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

CAS_ROUNDS = 32  # vectorised rounds of compare-and-swap before a serial finish


class Segments:
    """The active lanes grouped by target element, keeping lane order within a group."""

    def __init__(self, index: np.ndarray) -> None:
        n = index.size
        lo, hi = int(index.min()), int(index.max())
        if lo == hi:
            self.order = None
            self.index = index
        else:
            key = index - lo
            if hi - lo < 1 << 16:
                key = key.astype(np.uint16)  # NumPy radix-sorts 16-bit keys
            self.order = np.argsort(key, kind="stable")
            self.index = index[self.order]
        first = np.empty(n, bool)
        first[0] = True
        np.not_equal(self.index[1:], self.index[:-1], out=first[1:])
        self.first = first
        self.starts = np.flatnonzero(first)
        self.ends = np.append(self.starts[1:], n) - 1
        self.id = np.cumsum(first) - 1
        self.targets = self.index[self.starts]

    def sort(self, values: np.ndarray) -> np.ndarray:
        return values if self.order is None else values[self.order]

    def unsort(self, values: np.ndarray) -> np.ndarray:
        if self.order is None:
            return values
        out = np.empty_like(values)
        out[self.order] = values
        return out

    def previous(self, scanned: np.ndarray, base: np.ndarray,
                 combine: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> np.ndarray:
        """Old values from an inclusive scan: the base combined with the lanes before."""
        shifted = np.empty_like(scanned)
        shifted[1:] = scanned[:-1]
        at = base[self.id]
        old = combine(at, shifted)
        old[self.first] = at[self.first]
        return old


def _add(flat: np.ndarray, index: np.ndarray, values: np.ndarray, old: bool = True
         ) -> np.ndarray | None:
    if not old:
        np.add.at(flat, index, values)
        return None
    seg = Segments(index)
    dtype = flat.dtype
    acc = np.dtype(np.float64) if dtype.kind == "f" else dtype
    sv = seg.sort(values).astype(acc, copy=False)
    inclusive = np.cumsum(sv, dtype=acc)
    exclusive = inclusive - sv if dtype.kind != "f" else np.concatenate(([0], inclusive[:-1]))
    before = exclusive - exclusive[seg.starts][seg.id]  # sum of earlier lanes of the segment
    base = flat[seg.targets].astype(acc, copy=False)
    flat[seg.targets] = (base + (before[seg.ends] + sv[seg.ends])).astype(dtype)
    return seg.unsort((base[seg.id] + before).astype(dtype))


def _sub(flat: np.ndarray, index: np.ndarray, values: np.ndarray, old: bool = True
         ) -> np.ndarray | None:
    return _add(flat, index, np.negative(values), old)


def _scanning(op: np.ufunc) -> Callable[..., np.ndarray | None]:
    """An atomic for an associative, commutative ufunc (min, max, and, or, xor)."""

    def atomic(flat: np.ndarray, index: np.ndarray, values: np.ndarray, old: bool = True
               ) -> np.ndarray | None:
        if not old:
            op.at(flat, index, values)
            return None
        seg = Segments(index)
        scanned = seg.sort(values).copy()
        rank = np.arange(index.size) - seg.starts[seg.id]
        step, longest = 1, int(rank.max()) + 1
        while step < longest:  # Hillis-Steele scan within segments
            combined = op(scanned[step:], scanned[:-step])
            scanned[step:] = np.where(rank[step:] >= step, combined, scanned[step:])
            step *= 2
        base = flat[seg.targets]
        flat[seg.targets] = op(base, scanned[seg.ends])
        return seg.unsort(seg.previous(scanned, base, op))

    return atomic


def _exch(flat: np.ndarray, index: np.ndarray, values: np.ndarray, old: bool = True
          ) -> np.ndarray | None:
    seg = Segments(index)
    sv = seg.sort(values)
    base = flat[seg.targets]
    flat[seg.targets] = sv[seg.ends]
    if not old:
        return None
    return seg.unsort(seg.previous(sv, base, lambda at, prev: prev.copy()))


def _cas(flat: np.ndarray, index: np.ndarray, compare: np.ndarray, values: np.ndarray,
         old: bool = True) -> np.ndarray:
    """Each round settles every segment up to its next successful swap."""
    seg = Segments(index)
    cmp, val = seg.sort(compare), seg.sort(values)
    n = index.size
    position = np.arange(n)
    current = flat[seg.targets].copy()  # per segment
    cursor = seg.starts.copy()  # first unsettled lane per segment
    olds = np.empty(n, flat.dtype)
    live = np.ones(seg.starts.size, bool)
    for _ in range(CAS_ROUNDS):
        if not live.any():
            break
        pending = live[seg.id] & (position >= cursor[seg.id])
        hit = pending & (cmp == current[seg.id])
        first_hit = np.minimum.reduceat(np.where(hit, position, n), seg.starts)
        upto = np.where(first_hit < n, first_hit, seg.ends)
        settle = pending & (position <= upto[seg.id])
        olds[settle] = current[seg.id[settle]]
        swapped = first_hit < n
        current[swapped] = val[first_hit[swapped]]
        cursor = upto + 1
        live &= swapped & (cursor <= seg.ends)
    for s in np.flatnonzero(live):  # long chains of successes: finish one lane at a time
        cur = current[s]
        for k in range(cursor[s], seg.ends[s] + 1):
            olds[k] = cur
            if cmp[k] == cur:
                cur = val[k]
        current[s] = cur
    flat[seg.targets] = current
    return seg.unsort(olds)


ATOMICS: dict[str, Callable[..., np.ndarray | None]] = {
    "atomic_add": _add,
    "atomic_sub": _sub,
    "atomic_min": _scanning(np.fmin),
    "atomic_max": _scanning(np.fmax),
    "atomic_and": _scanning(np.bitwise_and),
    "atomic_or": _scanning(np.bitwise_or),
    "atomic_xor": _scanning(np.bitwise_xor),
    "atomic_exch": _exch,
    "atomic_cas": _cas,
}
