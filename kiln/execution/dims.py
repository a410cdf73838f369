"""A launch's grid and block: the forms kiln takes, and the limits they must respect
(the device's, and kiln's own: thread indices are i32). The full path converts and
checks them (`as_dim3`, `validate_dims`); the fast path takes the plain forms (`dims3`)
and checks dimensions it has not seen with the same test (`within_limits`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import LaunchError
from ..framework.backend import Dim3
from ..ir.ranges import MAX_BLOCK_THREADS, MAX_GLOBAL
from ..runtime.device import Device


def as_dim3(value: int | Sequence[int], what: str) -> Dim3:
    dims = (value,) if isinstance(value, (int, np.integer)) else value
    if not isinstance(dims, (tuple, list)) or not 1 <= len(dims) <= 3 \
            or not all(isinstance(d, (int, np.integer)) for d in dims):
        raise LaunchError(f"{what} must be an int or a tuple of 1 to 3 ints, got {value!r}")
    padded = tuple(int(d) for d in dims) + (1,) * (3 - len(dims))
    return padded  # type: ignore[return-value]


def validate_dims(grid: Dim3, block: Dim3, device: Device) -> None:
    caps = device.capabilities
    for what, dims, limits in (("grid", grid, caps.max_grid_dims),
                               ("block", block, caps.max_block_dims)):
        for axis, n, limit in zip("xyz", dims, limits):
            if n < 1:
                raise LaunchError(f"{what} dimension {axis} must be at least 1, got {n}")
            if n > limit:
                raise LaunchError(
                    f"{what} dimension {axis} is {n}, over {device.name}'s limit of {limit}"
                )
    for axis, g, b in zip("xyz", grid, block):
        if b > MAX_BLOCK_THREADS or g * b > MAX_GLOBAL:
            raise LaunchError(
                f"{g} blocks of {b} threads along {axis} is over kiln's limits of "
                f"{MAX_BLOCK_THREADS} threads per block and {MAX_GLOBAL} threads per axis "
                "(thread indices are i32)")
    threads = block[0] * block[1] * block[2]
    if threads > caps.max_threads_per_block:
        raise LaunchError(
            f"block of {block[0]}x{block[1]}x{block[2]} = {threads} threads is over "
            f"{device.name}'s limit of {caps.max_threads_per_block} threads per block"
        )


def within_limits(grid: Dim3, block: Dim3, device: Device) -> bool:
    """Whether `validate_dims` accepts the dimensions (the full path says why not)."""
    try:
        validate_dims(grid, block, device)
    except LaunchError:
        return False
    return True


def dims3(value: Any) -> Dim3 | None:
    """A grid or block given as an int or a tuple of 1 to 3 ints, padded with ones; None
    for any other form (the full path converts or refuses it)."""
    kind = type(value)
    if kind is int:
        return (value, 1, 1)
    if kind is tuple and 1 <= len(value) <= 3 and all(type(d) is int for d in value):
        return (*value, 1, 1)[:3]
    return None
