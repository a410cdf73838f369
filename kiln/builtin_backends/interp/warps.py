"""Warp operations emulated over a chunk's lanes: warps of `WARP_SIZE` threads.

A block's threads, in linear order (x fastest), form warps of 32 consecutive threads, as on
CUDA; the last warp of a block whose size is no multiple of 32 is shorter. Lanes of a chunk
are numbered block after block in that same order (see `geometry`), so a warp is a run of
consecutive lanes and every operation is a gather or a segmented reduction. A shuffle whose
source lane lies outside the warp returns the calling thread's own value.

Calling convention (category "warp"): `impl(chunk, *args)`, each argument a scalar or an
array holding a value for every lane of the chunk.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .geometry import Chunk
from .values import Value

WARP_SIZE = 32


class _Warps:
    """Per-lane warp geometry of one chunk: lane id, first lane of the warp, warp length."""

    def __init__(self, chunk: Chunk) -> None:
        threads = chunk.launch.threads
        lanes = np.arange(chunk.n, dtype=np.int64)
        linear = lanes % threads
        self.lane_id = (linear % WARP_SIZE).astype(np.int32)
        self.base = lanes - self.lane_id
        self.length = np.minimum(WARP_SIZE, threads - (linear - self.lane_id))
        self.starts = np.flatnonzero(self.lane_id == 0)
        self.warp_of = np.cumsum(self.lane_id == 0) - 1
        self.lanes = lanes


def _warps(chunk: Chunk) -> _Warps:
    key = ("warps",)
    warps = chunk.cache.get(key)
    if warps is None:
        warps = _Warps(chunk)
        chunk.remember(key, warps)
    return warps


def _per_lane(value: Value, n: int) -> np.ndarray:
    return np.broadcast_to(np.asarray(value), (n,))


def _gather(chunk: Chunk, value: Value, source: np.ndarray) -> np.ndarray:
    """Each lane reads `value` at warp lane `source`, or keeps its own past the warp."""
    w = _warps(chunk)
    inside = (source >= 0) & (source < w.length)
    index = np.where(inside, w.base + np.where(inside, source, 0), w.lanes)
    return _per_lane(value, chunk.n)[index]


def _shuffle(chunk: Chunk, value: Value, lane: Value) -> np.ndarray:
    return _gather(chunk, value, np.asarray(lane, np.int64) % WARP_SIZE)


def _shuffle_down(chunk: Chunk, value: Value, delta: Value) -> np.ndarray:
    return _gather(chunk, value, _warps(chunk).lane_id + np.asarray(delta, np.int64))


def _shuffle_xor(chunk: Chunk, value: Value, mask: Value) -> np.ndarray:
    return _gather(chunk, value, _warps(chunk).lane_id ^ np.asarray(mask, np.int64))


def _reduce(ufunc: np.ufunc, chunk: Chunk, values: np.ndarray) -> np.ndarray:
    w = _warps(chunk)
    return ufunc.reduceat(values, w.starts)[w.warp_of]


def _vote_all(chunk: Chunk, pred: Value) -> np.ndarray:
    return _reduce(np.logical_and, chunk, _per_lane(pred, chunk.n))


def _vote_any(chunk: Chunk, pred: Value) -> np.ndarray:
    return _reduce(np.logical_or, chunk, _per_lane(pred, chunk.n))


def _ballot(chunk: Chunk, pred: Value) -> np.ndarray:
    bits = _per_lane(pred, chunk.n).astype(np.uint64) << _warps(chunk).lane_id.astype(np.uint64)
    return _reduce(np.bitwise_or, chunk, bits)


WARPS: dict[str, Any] = {
    "warp_size": lambda chunk: np.int32(WARP_SIZE),
    "lane_id": lambda chunk: _warps(chunk).lane_id,
    "shuffle": _shuffle,
    "shuffle_down": _shuffle_down,
    "shuffle_xor": _shuffle_xor,
    "vote_all": _vote_all,
    "vote_any": _vote_any,
    "ballot": _ballot,
}
