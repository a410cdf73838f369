"""The interp backend's contract object: one host device whose launches run the IR's
closures (`executor`) on a host stream."""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

from ...backend import (
    Availability,
    Capabilities,
    DeviceKind,
    Dim3,
    DirectBackend,
)
from ...ir.intrinsics import atomic_capabilities
from ...ir.nodes import Program
from ...runtime.host import HostAllocator, HostQueue, HostStream, host_memory_bytes
from .executor import ProgramCode
from .intrinsics import IMPLEMENTATIONS
from .warps import WARP_SIZE


class InterpBackend(DirectBackend):
    """Runs kernels with NumPy on the host; one device, `interp:0`."""

    name = "interp"
    priority = 10
    spellings = IMPLEMENTATIONS
    intrinsic_namespaces = ("interp",)
    supports_recursion = True  # calls are Python calls (max_depth is checked)
    checks_bounds = True  # every access, always (kiln.builtin_backends.interp.bounds)

    def __init__(self) -> None:
        self.allocator, self.queue = HostAllocator(), HostQueue()
        self._code: weakref.WeakKeyDictionary[Program, ProgramCode] = (
            weakref.WeakKeyDictionary())

    def availability(self) -> Availability:
        return Availability(True)

    def device_handles(self) -> Sequence[tuple[Any, Capabilities]]:
        caps = Capabilities(
            backend=self.name,
            name="NumPy interpreter",
            kind=DeviceKind.CPU,
            max_threads_per_block=1024,
            max_block_dims=(1024, 1024, 64),
            max_grid_dims=(2**31 - 1, 65535, 65535),
            shared_memory_per_block=48 * 1024,
            compute_units=1,
            global_memory=host_memory_bytes(),
            warp_size=WARP_SIZE,
            fp64=True,
            fp16=True,
            atomics=atomic_capabilities(),
            unified_memory=True,
            arch="numpy",
        )
        return [(None, caps)]

    def code(self, program: Program) -> ProgramCode:
        """The program compiled to closures (once per program)."""
        code = self._code.get(program)
        if code is None:
            code = self._code[program] = ProgramCode(program, self.intrinsic_implementation)
        return code

    def execute(self, program: Program, grid: Dim3, block: Dim3, args: Sequence[Any],
                stream: HostStream) -> None:
        code = self.code(program)
        bound = code.bind(args)
        stream.enqueue(lambda: code.run(grid, block, bound))
