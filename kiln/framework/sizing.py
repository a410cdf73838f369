"""Launch by problem size (`kiln.launch(k, dim=n)`, `k[kiln.dim(n)](...)`): one thread per
element, the block chosen for the device, as Warp's `wp.launch(k, dim=n)` does.

Axis k of `dim` is `kiln.global_id(k)`. The grid is rounded up to whole blocks; the threads
past `dim` return at once (`kiln.ir.passes.launch_size`), so exactly `dim` threads run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import LaunchError
from .backend import Dim3

if TYPE_CHECKING:
    from ..runtime.device import Device

DEFAULT_BLOCKS: dict[int, Dim3] = {1: (256, 1, 1), 2: (16, 16, 1), 3: (8, 8, 4)}
"""Threads per block by the rank of `dim` before the device's limits apply: 256 threads,
a multiple of every GPU's warp, enough to hide memory latency, and small enough for
OpenCL devices that allow only 256 work-items per group."""


@dataclass(frozen=True)
class Dim:
    """A problem size: `kernel[kiln.dim(n)](...)` launches one thread per element."""

    shape: tuple[int, ...]

    def __repr__(self) -> str:
        return f"kiln.dim({', '.join(map(str, self.shape))})"


def dim(*shape: int | Sequence[int]) -> Dim:
    """`kiln.dim(n)`, `kiln.dim(h, w)` or `kiln.dim((h, w))`: a launch size for indexing."""
    only = shape[0] if len(shape) == 1 else shape
    return Dim(as_shape(only))


def as_shape(value: Any) -> tuple[int, ...]:
    """A launch size of 1 to 3 non-negative ints (a NumPy shape works as it is)."""
    if isinstance(value, Dim):
        return value.shape
    dims = (value,) if _is_int(value) else value
    if not isinstance(dims, (tuple, list)) or not 1 <= len(dims) <= 3 \
            or not all(_is_int(d) for d in dims):
        raise LaunchError(f"dim must be an int or a tuple of 1 to 3 ints (one thread per "
                          f"element), got {value!r}")
    if any(d < 0 for d in dims):
        raise LaunchError(f"dim must not be negative, got {value!r}")
    return tuple(int(d) for d in dims)


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def block_for(shape: tuple[int, ...], device: Device) -> Dim3:
    """The block for a launch of `shape` on `device`: the default for its rank, no larger
    than the device allows, and (in 1-D) no more warps than the problem fills."""
    caps = device.capabilities
    block = list(DEFAULT_BLOCKS[len(shape)])
    if len(shape) == 1:
        block[0] = min(block[0], _round_up(max(shape[0], 1), max(caps.warp_size, 1)))
    for axis in range(3):
        block[axis] = max(1, min(block[axis], caps.max_block_dims[axis]))
    while block[0] * block[1] * block[2] > caps.max_threads_per_block:
        widest = max(range(3), key=lambda a: block[a])
        block[widest] //= 2
    return block[0], block[1], block[2]


def grid_and_block(shape: tuple[int, ...], device: Device) -> tuple[Dim3, Dim3]:
    """Whole blocks covering `shape` (each axis of `shape` is at least 1)."""
    block = block_for(shape, device)
    padded = (*shape, 1, 1)[:3]
    grid = tuple(-(-n // b) for n, b in zip(padded, block))
    return grid, block  # type: ignore[return-value]
