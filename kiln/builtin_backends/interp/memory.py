"""Arrays as the interpreter sees them, and how lanes read and write their elements.

Global arrays are flat views of device buffers. Shared arrays hold one copy per block of a
chunk, block after block. Local arrays hold one copy per lane, element-major (element `e` of
lane `l` at `e * n + l`), so that a uniform element index reads a contiguous slice.

Loads never fault: lanes whose address is out of range (only inactive ones, in a correct
kernel) read a clipped element.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...ir.enums import MemorySpace
from .geometry import BX, BY, BZ, LANE, NBASIS, Chunk
from .values import Affine, Mask, Value, cast, materialise

WIDE = 1 << 31  # element counts from here on need 64-bit addresses


@dataclass
class ArrayRef:
    """An array a kernel can index: its flat storage and its logical per-owner shape."""

    flat: np.ndarray
    shape: tuple[int, ...]
    space: MemorySpace

    @property
    def wide(self) -> bool:
        return self.flat.size >= WIDE


def address(ref: ArrayRef, indices: list[Value], chunk: Chunk, wide: bool) -> Value:
    """The flat element index each lane accesses."""
    if wide or ref.wide:
        indices = [cast(i, np.dtype(np.int64)) for i in indices]
    flat = indices[0]
    for index, dim in zip(indices[1:], ref.shape[1:]):
        flat = flat * dim + index
    dtype = flat.dtype
    if ref.space is MemorySpace.SHARED:
        size = int(np.prod(ref.shape))
        gx, gy, _ = chunk.launch.grid
        coef = [0] * NBASIS
        coef[BX], coef[BY], coef[BZ] = size, size * gx, size * gx * gy
        flat = flat + Affine.make(chunk, dtype, -chunk.b0 * size, tuple(coef))
    elif ref.space is MemorySpace.LOCAL:
        coef = [0] * NBASIS
        coef[LANE] = 1
        flat = flat * chunk.n + Affine.make(chunk, dtype, 0, tuple(coef))
    return flat


def lanes_in_range(size: int, addr: Value, n: int) -> tuple[slice, int, int] | None:
    """For addresses `start + step * lane` (step > 0): the elements of the lanes whose
    address lies in [0, size), and the range [first, end) of those lanes."""
    if not isinstance(addr, Affine):
        return None
    lin = addr.linear()
    if lin is None or lin[1] <= 0:
        return None
    start, step = lin
    first = max(0, -(start // step))
    end = min(n, (size - 1 - start) // step + 1) if start < size else 0
    end = max(first, end)
    return slice(start + step * first, start + step * (end - 1) + 1, step), first, end


def slice_view(flat: np.ndarray, addr: Value, n: int) -> np.ndarray | None:
    """The lanes' elements as a strided view, when their addresses form an in-range sequence."""
    found = lanes_in_range(flat.size, addr, n)
    if found is None or found[1] != 0 or found[2] != n:
        return None
    return flat[found[0]]


def gather(flat: np.ndarray, addr: Value, n: int, view_ok: bool) -> Value:
    """Every lane's element; a view of `flat` when `view_ok` and the addresses allow it."""
    if flat.size == 0:
        return np.zeros(n, flat.dtype)
    found = lanes_in_range(flat.size, addr, n)
    if found is not None:
        elements, first, end = found
        if (first, end) == (0, n):
            return flat[elements] if view_ok else flat[elements].copy()
        out = np.empty(n, flat.dtype)  # lanes out of range read the nearest end (clipped)
        out[first:end] = flat[elements]
        out[:first] = flat[0]
        out[end:] = flat[-1]
        return out
    if isinstance(addr, Affine):
        lin = addr.linear()
        if lin is not None and lin[1] == 0:
            addr = addr.dtype.type(lin[0])
        else:
            per_block = addr.per_block()
            if per_block is not None:  # one element per block, read by all its threads
                return np.repeat(flat.take(per_block, mode="clip"), n // per_block.size)
            addr = addr.array()
    if isinstance(addr, np.ndarray):
        return flat.take(addr, mode="clip")
    return flat[min(max(int(addr), 0), flat.size - 1)]


def scatter(flat: np.ndarray, addr: Value, value: Value, mask: Mask, n: int) -> None:
    """Store each active lane's value at its address (the last lane wins a shared address).

    Lanes whose address is out of range store nothing."""
    value = materialise(value)
    found = lanes_in_range(flat.size, addr, n)
    if found is not None:
        elements, first, end = found
        part = value[first:end] if isinstance(value, np.ndarray) else value
        if mask is None:
            flat[elements] = part
        else:
            np.copyto(flat[elements], part, where=mask[first:end], casting="unsafe")
        return
    if isinstance(addr, Affine):
        lin = addr.linear()
        addr = addr.dtype.type(lin[0]) if lin is not None and lin[1] == 0 else addr.array()
    if isinstance(addr, np.ndarray):
        if mask is None:
            flat[addr] = value
        elif isinstance(value, np.ndarray):
            flat[addr[mask]] = value[mask]
        else:
            flat[addr[mask]] = value
        return
    if isinstance(value, np.ndarray):
        value = value[-1] if mask is None else value[np.flatnonzero(mask)[-1]]
    flat[int(addr)] = value
