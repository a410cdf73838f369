"""Launching OpenCL kernels: a built program bound to its device (`Launchable`), with its
own fast path and prepared launches (`FastLaunch`)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ...backend import Dim3
from ...ir.abi import device_scalar
from ...runtime.array import DeviceArray
from . import runtime
from .build import Built


class OpenCLKernel:
    def __init__(self, built: Built) -> None:
        self.built = built

    def launch(self, grid: Dim3, block: Dim3, args: Sequence[Any], stream: Any) -> None:
        self.built.set_args(flatten(args))
        runtime.import_pyopencl().enqueue_nd_range_kernel(
            stream, self.built.kernel, global_size(grid, block), block)

    def launch_target(self, args: Sequence[Any], stream: Any
                      ) -> Callable[[Dim3, Dim3, Sequence[Any]], None]:
        """The executor's fast path: arguments set at each call (scalars arrive as Python
        numbers and take the NumPy types of this first launch's), sizes from each call's
        dimensions."""
        built = self.built
        kernel, enqueue = built.kernel, runtime.import_pyopencl().enqueue_nd_range_kernel
        scalar_types = [type(a) if isinstance(a, np.generic) else None for a in args]

        def target(grid: Dim3, block: Dim3, device_args: Sequence[Any]) -> None:
            values = [a if t is None else t(a) for t, a in zip(scalar_types, device_args)]
            built.set_args(flatten(values))
            enqueue(stream, kernel, global_size(grid, block), block)

        return target

    def prepare_launch(self, grid: Dim3, block: Dim3, args: Sequence[Any],
                       stream: Any) -> Callable[[], None]:
        """`kernel.prepare(...)`: a kernel object of its own with its arguments set once."""
        cl = runtime.import_pyopencl()
        kernel = cl.Kernel(self.built.program, self.built.kernel.function_name)
        kernel.set_args(*flatten(args))
        return functools.partial(cl.enqueue_nd_range_kernel, stream, kernel,
                                 global_size(grid, block), block)


def global_size(grid: Dim3, block: Dim3) -> Dim3:
    """OpenCL's NDRange counts work-items, not work-groups."""
    return (grid[0] * block[0], grid[1] * block[1], grid[2] * block[2])


def flatten(args: Sequence[Any]) -> list[Any]:
    """Kernel arguments in the shared ABI: each array as its buffer then its i32 dimensions,
    each scalar as the NumPy scalar the executor made (a bf16 as its bits)."""
    out: list[Any] = []
    for a in args:
        if isinstance(a, DeviceArray):
            out.append(a.buffer)
            out += [np.int32(n) for n in a.shape]
        else:
            out.append(device_scalar(a))
    return out
