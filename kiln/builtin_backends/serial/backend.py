"""The `serial` backend: a CUSTOM backend that owns its whole compile path and its cache.

For each kernel, argument types and options it receives (a `KernelRequest`, before the
frontend) it runs kiln's frontend on the request, lowers the program with the cpu
backend's pipeline, renders C with the cpu backend's compiler part, and builds that C with
the system compiler *without* OpenMP, at `-O1 -g`: one thread runs every block and thread
in order, so a kernel can be stepped through in gdb or checked by valgrind, and its
results do not depend on thread scheduling. Its caches are its own: a kernel object per
request in memory, and shared libraries per source and block shape under
`KILN_CACHE_DIR/serial` (kiln's compile cache, keyed by this backend's flags).
"""

from __future__ import annotations

import dataclasses
import subprocess
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from ...backend import (
    Availability,
    Capabilities,
    CompiledKernel,
    CustomBackend,
    Dim3,
    HostAllocator,
    HostQueue,
    KernelRequest,
)
from ...framework.buildenv import BuildEnv, ToolNotFoundError
from ...framework.cache import CompileCache
from ...ir.nodes import Program
from ...options import DEFAULT_OPTIONS, KernelOptions
from ...runtime.device import Device
from ..cpu import backend as cpu
from ..cpu.backend import CpuKernel
from ..cpu.toolchain import OPTION_FLAGS, toolchain

FLAGS = ("-O1", "-g", "-fPIC", "-shared", "-fno-math-errno", "-ffp-contract=off", "-w")
"""No -fopenmp: the generated OpenMP pragmas are ignored and everything runs on the calling
stream's thread; -O1 -g keeps variables and lines for a debugger."""


def serial_env(options: KernelOptions = DEFAULT_OPTIONS) -> BuildEnv:
    """The system C compiler with this backend's flags (and those options ask for)."""
    tc = toolchain()
    asked = [f for k, v in options.as_dict().items() if v for f in OPTION_FLAGS.get(k, ())]
    return BuildEnv("serial", tc.env.compiler, tc.env.version, (*FLAGS, *asked))


def one_thread(grid: Dim3, block: Dim3, threads: int) -> int:
    return 1


class SerialBackend(CustomBackend):
    """Kernels as single-threaded C (see the module docstring)."""

    name = "serial"
    priority = 5  # never the default device: it exists to debug and to check
    intrinsic_namespaces = cpu.intrinsic_namespaces  # it renders the cpu dialect
    supports_recursion = True

    def intrinsic_implementation(self, name: str) -> Any:
        return cpu.intrinsic_implementation(name)

    def __init__(self) -> None:
        self.allocator, self.queue = HostAllocator(), HostQueue()
        self.binaries = CompileCache("serial", ".so")
        self._kernels: weakref.WeakKeyDictionary[Callable[..., Any], dict[Any, SerialKernel]] = (
            weakref.WeakKeyDictionary())

    def availability(self) -> Availability:
        try:
            toolchain()
        except (ToolNotFoundError, OSError, subprocess.SubprocessError) as exc:
            return Availability(False, str(exc))
        return Availability(True)

    def device_handles(self) -> Sequence[tuple[Any, Capabilities]]:
        (_, caps), = cpu.device_handles()
        return [(None, dataclasses.replace(caps, backend=self.name, compute_units=1,
                                           name=f"{caps.name} (one thread)"))]

    def build_identity(self, device: Device) -> str:
        return serial_env().identity

    def load_kernel(self, request: KernelRequest, device: Device) -> SerialKernel:
        """The kernel for one request, from this backend's memory cache or built: kiln's
        frontend, the cpu pipeline and C renderer, then (at the first launch of each block
        shape) the serial build of that C, found by its source in this backend's cache."""
        kernels = self._kernels.setdefault(request.pyfunc, {})
        program = request.frontend()  # the kernel's own cache: built once per signature
        tables = tuple((name, table.tobytes()) for name, table in program.tables.items())
        key = (request.arg_types, request.options, tables)  # tables change (kiln.lang.tables)
        found = kernels.get(key)
        if found is None:
            for stage in cpu.pipeline(device):
                program = stage(program)
            compiled: CompiledKernel = cpu.compiler.compile(program, device, request.options)
            found = kernels[key] = SerialKernel(compiled, self.binaries,
                                                serial_env(request.options), one_thread)
            found.program = program
        return found


class SerialKernel(CpuKernel):
    """A cpu kernel built single-threaded, with the lowered program it runs (`RunsProgram`:
    kiln then splits record arguments and passes run-time checks' status for it)."""

    program: Program
