"""The `opencl` backend: OpenCL C through pyopencl, on any OpenCL platform (PoCL, NVIDIA, ...).

Every device of every platform is a kiln device `opencl:N`. A GPU ranks above the `cpu`
backend, a CPU device (PoCL's) below it. This module imports without pyopencl; the backend
is then unavailable and says why.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ...codegen.abi import device_scalar
from ...codegen.library import register_library_target
from ...framework.backend import (
    Availability,
    Capabilities,
    DeviceKind,
    Dim3,
    JITBackend,
    Pass,
)
from ...framework.registry import register_backend
from ...ir import nodes as ir
from ...ir.passes import pipeline_for
from ...options import KernelOptions
from ...runtime.array import DeviceArray
from . import runtime
from .build import Built, build
from .codegen import KERNEL_NAME, OpenCLEmitter
from .library import OpenCLLibrary

if TYPE_CHECKING:
    from ...runtime.device import Device

PRIORITY = {DeviceKind.GPU: 80, DeviceKind.ACCELERATOR: 60, DeviceKind.CPU: 30}
"""Device priorities: the `cpu` backend is 50, so an OpenCL GPU wins and PoCL's CPU loses."""


class OpenCLBackend(JITBackend):
    name = "opencl"
    intrinsic_namespaces = OpenCLEmitter.namespaces
    priority = max(PRIORITY.values())

    def __init__(self) -> None:
        self._devices: list[runtime.CLDevice] | None = None

    # ------------------------------------------------------------ devices

    def _discover(self) -> list[runtime.CLDevice]:
        if self._devices is None:
            self._devices = runtime.discover()
        return self._devices

    def availability(self) -> Availability:
        try:
            runtime.import_pyopencl()
        except ImportError as exc:
            return Availability(False, f"pyopencl is not installed ({exc}); "
                                       "install kiln[opencl]")
        try:
            devices = self._discover()
        except Exception as exc:  # no ICD loader, no platform, a broken driver
            return Availability(False, f"no OpenCL platform: {exc}")
        if not devices:
            return Availability(False, "OpenCL platforms have no devices")
        return Availability(True)

    def device_handles(self) -> Sequence[tuple[Any, Capabilities]]:
        return [(h, runtime.capabilities(h)) for h in self._discover()]

    def device_priority(self, capabilities: Capabilities, backend_priority: int) -> int:
        return PRIORITY.get(capabilities.kind, PRIORITY[DeviceKind.ACCELERATOR])

    def pipeline(self, device: Device | None) -> Sequence[Pass]:
        return pipeline_for(device)

    def build_identity(self, device: Device) -> str:
        return device.handle.identity

    # ------------------------------------------------------------ code

    def generate_source(self, program: ir.Program) -> str:
        return OpenCLEmitter().emit(program)

    def compile(self, source: str, device: Device, options: KernelOptions) -> Built:
        name = KERNEL_NAME.search(source)
        return build(device.handle, source, options, name[1] if name else "kernel")

    def export_code(self, code: Built, source: str, options: KernelOptions
                    ) -> tuple[str, KernelOptions]:
        """For the kernel cache: the source and options (the program binary is then found
        by its source key)."""
        return source, options

    def import_code(self, exported: tuple[str, KernelOptions], device: Device) -> Built:
        source, options = exported
        return self.compile(source, device, options)

    def launch(self, routine: Built, grid: Dim3, block: Dim3, args: Sequence[Any],
               stream: Any) -> None:
        routine.set_args(flatten(args))
        runtime.import_pyopencl().enqueue_nd_range_kernel(
            stream, routine.kernel, global_size(grid, block), block)

    def launch_target(self, routine: Built, grid: Dim3, block: Dim3, args: Sequence[Any],
                      stream: Any) -> Callable[[Sequence[Any]], None]:
        """The executor's fast path: sizes computed once, arguments set at each call (scalars
        arrive as Python numbers and take the NumPy types of this first launch's)."""
        kernel, size = routine.kernel, global_size(grid, block)
        enqueue = runtime.import_pyopencl().enqueue_nd_range_kernel
        scalar_types = [type(a) if isinstance(a, np.generic) else None for a in args]

        def target(device_args: Sequence[Any]) -> None:
            values = [a if t is None else t(a) for t, a in zip(scalar_types, device_args)]
            routine.set_args(flatten(values))
            enqueue(stream, kernel, size, block)

        return target

    def prepare_launch(self, routine: Built, grid: Dim3, block: Dim3, args: Sequence[Any],
                       stream: Any) -> Callable[[], None]:
        """`kernel.prepare(...)`: a kernel object of its own with its arguments set once."""
        cl = runtime.import_pyopencl()
        kernel = cl.Kernel(routine.program, routine.kernel.function_name)
        kernel.set_args(*flatten(args))
        return functools.partial(cl.enqueue_nd_range_kernel, stream, kernel,
                                 global_size(grid, block), block)

    # ------------------------------------------------------------ memory

    def allocate(self, device: Device, nbytes: int) -> Any:
        return runtime.allocate(device.handle, nbytes)

    def free(self, buffer: Any) -> None:
        buffer.release()

    def wrap_host(self, device: Device, array: np.ndarray) -> Any | None:
        return runtime.wrap_host(device.handle, array)

    def sub_buffer(self, device: Device, buffer: Any, offset: int, nbytes: int) -> Any:
        return buffer.get_sub_region(offset, nbytes) if nbytes else buffer

    def sub_buffer_alignment(self, device: Device) -> int:
        return max(int(device.handle.device.mem_base_addr_align) // 8, 1)

    def copy_host_to_device(self, dst: Any, src: np.ndarray, stream: Any) -> None:
        runtime.copy_host_to_device(stream, dst, src)

    def copy_device_to_host(self, dst: np.ndarray, src: Any, stream: Any) -> None:
        runtime.copy_device_to_host(stream, dst, src)

    def copy_device_to_device(self, dst: Any, src: Any, nbytes: int, stream: Any) -> None:
        runtime.copy_device_to_device(stream, dst, src, nbytes)

    # ------------------------------------------------------------ queues and events

    def create_stream(self, device: Device) -> Any:
        return runtime.create_queue(device.handle)

    def synchronize_stream(self, stream: Any) -> None:
        stream.finish()

    def create_event(self, device: Device) -> runtime.CLEvent:
        return runtime.CLEvent()

    def record_event(self, event: runtime.CLEvent, stream: Any) -> None:
        runtime.record(event, stream)

    def synchronize_event(self, event: runtime.CLEvent) -> None:
        runtime.wait(event)

    def elapsed_ms(self, start: runtime.CLEvent, end: runtime.CLEvent) -> float:
        return runtime.elapsed_ms(start, end)


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


backend = OpenCLBackend()
register_backend(backend, priority=backend.priority)
register_library_target(OpenCLLibrary())
