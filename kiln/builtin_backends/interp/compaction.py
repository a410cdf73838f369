"""Compacting a divergent loop: when few of a chunk's lanes still run a loop, the rest of
it runs on those lanes alone.

Lanes run in lockstep, so a loop whose threads need different trip counts (a CSR row's
length, an escape-time iteration) costs every iteration the work of the whole chunk, even
when most lanes have left it. Once the active lanes drop to `COMPACT_FRACTION` of the
chunk, the loop's state moves to a `LaneSubset` holding only them (their per-lane values,
local arrays and index basis), the loop runs on there, and what it changed goes back.
Loops that need their lanes in place (barriers, warp operations, native code) are not
compacted.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...ir import nodes as ir
from ...ir.enums import MemorySpace
from ...ir.intrinsics import intrinsics
from ...ir.visit import walk
from .geometry import LANE, Chunk
from .memory import ArrayRef
from .values import Affine, Mask, materialise

COMPACT_FRACTION = 0.5
"""Compact when at most this share of the lanes is active. Measured on the benchmarks'
CSR spmv and Julia set (benchmarks/RESULTS.md): 0.35 to 0.75 within noise of each other,
1/8 up to 1.8x slower (too many iterations at full width), none 3-8x slower."""
MIN_LANES = 2048
"""Chunks narrower than this run their loops as they are (NumPy's per-call cost dominates)."""


class LaneSubset(Chunk):
    """Some lanes of a chunk, renumbered 0..n-1; their index basis is the parent's at them.

    Their positions follow no pattern, so index values over them are never linear in the
    lane (`regular` is False): loads and stores gather and scatter."""

    regular = False

    def __init__(self, parent: Chunk, lanes: np.ndarray) -> None:
        self.parent, self.lanes = parent, lanes
        self.launch, self.b0, self.nblocks = parent.launch, parent.b0, parent.nblocks
        self.n = int(lanes.size)
        lo, hi = list(parent.lo), list(parent.hi)
        lo[LANE], hi[LANE] = 0, self.n - 1
        self.lo, self.hi, self.first = tuple(lo), tuple(hi), parent.first
        self.varying = (*parent.varying[:LANE], self.n > 1)
        self.cache = {}

    def vector(self, k: int) -> np.ndarray:
        key = ("basis", k)
        vec = self.cache.get(key)
        if vec is None:
            vec = (self.launch.lanes(self.n) if k == LANE
                   else self.parent.vector(k)[self.lanes])
            self.cache[key] = vec
        return vec


def compactable(stmts: list[ir.Stmt], program: ir.Program) -> bool:
    """Whether a loop may run on a subset of its lanes: nothing in it (or in the device
    functions it calls) needs the other lanes of its warp or block, or runs native code."""
    functions = {fn.name: fn for fn in program.functions}
    seen: set[str] = set()
    pending: list[Any] = list(stmts)
    while pending:
        for node in walk(pending.pop()):
            if isinstance(node, ir.Native):
                return False
            if isinstance(node, ir.IntrinsicCall):
                spec = intrinsics[node.name]
                if spec.convergent or spec.warp_convergent or spec.category == "warp":
                    return False
            elif isinstance(node, ir.Call) and node.func not in seen:
                seen.add(node.func)
                if node.func in functions:
                    pending.extend(functions[node.func].body)
    return True


def worth_compacting(active: Mask, chunk: Chunk) -> bool:
    if not isinstance(active, np.ndarray) or chunk.n < MIN_LANES:
        return False
    return bool(np.count_nonzero(active) <= COMPACT_FRACTION * chunk.n)


def is_local(value: Any) -> bool:
    return isinstance(value, ArrayRef) and value.space is MemorySpace.LOCAL


def narrow(value: Any, sub: LaneSubset) -> Any:
    """A frame value as the subset's lanes see it."""
    n = sub.parent.n
    if isinstance(value, Affine):
        if value.coef[LANE]:  # the parent's lane numbers: not the subset's
            return value.array()[sub.lanes]
        return Affine.make(sub, value.dtype, value.const, value.coef)
    if isinstance(value, np.ndarray) and value.ndim == 1 and value.size == n:
        return value[sub.lanes]
    if is_local(value):
        size = math.prod(value.shape)
        flat = value.flat.reshape(size, n)[:, sub.lanes].reshape(-1)
        return ArrayRef(flat, value.shape, value.space)
    if isinstance(value, tuple):
        return tuple(narrow(v, sub) for v in value)
    return value


def widen(old: Any, new: Any, sub: LaneSubset) -> Any:
    """The parent's value after the subset's lanes changed theirs from `old` to `new`."""
    n, lanes = sub.parent.n, sub.lanes
    if is_local(new):
        size = math.prod(new.shape)
        old.flat.reshape(size, n)[:, lanes] = new.flat.reshape(size, sub.n)
        return old
    if isinstance(new, tuple):
        return tuple(widen(o, v, sub) for o, v in zip(old, new))
    before = materialise(old)
    if isinstance(before, np.ndarray):
        full = before.copy()
    else:
        full = np.full(n, before, dtype=np.asarray(before).dtype)
    full[lanes] = materialise(new)
    return full


def expand_mask(mask: Mask, sub: LaneSubset) -> Mask:
    """A subset's mask as a mask of the parent's lanes."""
    if mask is False:
        return False
    full = np.zeros(sub.parent.n, dtype=bool)
    full[sub.lanes if mask is None else sub.lanes[mask]] = True
    return full if full.any() else False

