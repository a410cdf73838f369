"""Launch geometry: a grid cut into chunks of whole blocks, and each chunk's index basis.

Lanes are the threads of one chunk, numbered block after block (x fastest within a block,
blocks in x-fastest order too). Every thread-dependent index value is a combination of the
seven *basis* variables below, which `Affine` values refer to.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from ...backend import Dim3

TX, TY, TZ, BX, BY, BZ, LANE = range(7)
NBASIS = 7


class Launch:
    """One launch: its dimensions, how many blocks go in a chunk, and vectors shared by chunks."""

    def __init__(self, grid: Dim3, block: Dim3, max_lanes: int) -> None:
        self.grid, self.block = grid, block
        gx, gy, _ = grid
        bx, by, bz = block
        self.threads = bx * by * bz
        self.blocks = grid[0] * grid[1] * grid[2]
        self.blocks_per_chunk = max(1, min(self.blocks, max_lanes // self.threads))
        self.block_dim = tuple(np.int32(d) for d in block)
        self.grid_dim = tuple(np.int32(d) for d in grid)
        t = self.threads
        # how far one step of each basis variable moves a thread's linear position
        self.strides = (1, bx, bx * by, t, t * gx, t * gx * gy, 1)
        # how many values each basis variable takes in this launch
        self.extent = (*block, *grid, self.blocks_per_chunk * t)
        self._thread_vectors: dict[int, tuple[np.ndarray, ...]] = {}
        self._lanes: dict[int, np.ndarray] = {}

    def chunks(self) -> Iterator[Chunk]:
        for b0 in range(0, self.blocks, self.blocks_per_chunk):
            yield Chunk(self, b0, min(self.blocks_per_chunk, self.blocks - b0))

    def lanes(self, n: int) -> np.ndarray:
        lanes = self._lanes.get(n)
        if lanes is None:
            lanes = self._lanes[n] = np.arange(n, dtype=np.int32)
        return lanes

    def thread_vectors(self, nblocks: int) -> tuple[np.ndarray, ...]:
        """thread_idx x, y, z of every lane of a chunk of `nblocks` blocks."""
        vectors = self._thread_vectors.get(nblocks)
        if vectors is None:
            bx, by, bz = self.block
            shape = (nblocks, bz, by, bx)
            vectors = tuple(
                np.broadcast_to(np.arange(d, dtype=np.int32).reshape(r), shape).reshape(-1)
                for d, r in ((bx, (bx,)), (by, (by, 1)), (bz, (bz, 1, 1)))
            )
            self._thread_vectors[nblocks] = vectors
        return vectors


class Chunk:
    """Consecutive whole blocks run together: `n` lanes starting at linear block `b0`."""

    CACHE_SIZE = 16
    regular = True
    """Lanes are whole blocks in order, so index values may be linear in the lane (a
    `compaction.LaneSubset` is not)."""

    def __init__(self, launch: Launch, b0: int, nblocks: int) -> None:
        self.launch = launch
        self.b0 = b0
        self.nblocks = nblocks
        self.n = nblocks * launch.threads
        gx, gy, _ = launch.grid
        first, last = _block_coords(b0, gx, gy), _block_coords(b0 + nblocks - 1, gx, gy)
        lo = [0, 0, 0, *first, 0]
        hi = [d - 1 for d in launch.block] + [*last, self.n - 1]
        if first[2] != last[2]:  # spans z-slices: whole x and y ranges may occur
            lo[BX], hi[BX], lo[BY], hi[BY] = 0, gx - 1, 0, gy - 1
        elif first[1] != last[1]:  # spans rows: any x may occur
            lo[BX], hi[BX] = 0, gx - 1
        self.lo, self.hi = tuple(lo), tuple(hi)
        self.first = (0, 0, 0, *first, 0)
        self.varying = tuple(a != b for a, b in zip(self.lo, self.hi))
        self.cache: dict[tuple, Any] = {}  # basis vectors and affine values (see values)

    def vector(self, k: int) -> np.ndarray:
        """The int32 values of basis variable `k` at every lane (cached)."""
        key = ("basis", k)
        vec = self.cache.get(key)
        if vec is None:
            launch = self.launch
            if k == LANE:
                vec = launch.lanes(self.n)
            elif k <= TZ:
                vec = launch.thread_vectors(self.nblocks)[k]
            else:
                vec = np.repeat(self.block_vector(k), launch.threads)
            self.cache[key] = vec
        return vec

    def block_vector(self, k: int) -> np.ndarray:
        """The int32 values of block coordinate `k` (BX, BY or BZ) for each block."""
        key = ("basis", k, "per block")
        vec = self.cache.get(key)
        if vec is None:
            gx, gy, _ = self.launch.grid
            blocks = np.arange(self.b0, self.b0 + self.nblocks, dtype=np.int64)
            coord = (blocks % gx, blocks // gx % gy, blocks // (gx * gy))[k - BX]
            vec = self.cache[key] = coord.astype(np.int32)
        return vec

    def remember(self, key: tuple, value: Any) -> None:
        """Keep a per-chunk value, evicting the oldest past a small bound."""
        if len(self.cache) >= self.CACHE_SIZE + 2 * NBASIS:
            for old in self.cache:
                if old[0] != "basis":
                    del self.cache[old]
                    break
        self.cache[key] = value


def _block_coords(b: int, gx: int, gy: int) -> tuple[int, int, int]:
    return b % gx, b // gx % gy, b // (gx * gy)
