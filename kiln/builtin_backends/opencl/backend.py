"""The OpenCL backend's contract objects: devices from every platform, buffers, in-order
queues, and OpenCL C from the shared emitter, built by the driver when loaded."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...backend import (
    Allocator,
    Availability,
    Capabilities,
    CompiledKernel,
    DeviceKind,
    JITBackend,
    Loader,
    Queue,
)
from ...codegen.compiler import SourceCompiler
from ...runtime.device import Device
from . import runtime
from .build import build
from .dialect import OpenCLEmitter
from .launch import OpenCLKernel

PRIORITY = {DeviceKind.GPU: 80, DeviceKind.ACCELERATOR: 60, DeviceKind.CPU: 30}
"""Device priorities: the `cpu` backend is 50, so an OpenCL GPU wins and PoCL's CPU loses."""


class OpenCLCompiler(SourceCompiler):
    """OpenCL C from the shared emitter; the driver builds it when the loader loads it."""

    emitter = OpenCLEmitter


class OpenCLLoader(Loader):
    def load(self, compiled: CompiledKernel, device: Device) -> OpenCLKernel:
        """The program built for the device (found by its source in the compile cache)."""
        label = compiled.metadata.get("kernel", compiled.entry)
        return OpenCLKernel(build(device.handle, compiled.source, compiled.options, label))


class OpenCLAllocator(Allocator):
    """Buffers of one context; host-memory devices (PoCL) share NumPy arrays (`ZeroCopy`);
    views are sub-regions at the device's base address alignment (`SubBuffers`)."""

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


class OpenCLQueue(Queue):
    """Command queues (in order) and events recorded as markers."""

    def create_stream(self, device: Device) -> Any:
        return runtime.create_queue(device.handle)

    def synchronize_stream(self, stream: Any) -> None:
        stream.finish()

    def stream_idle(self, stream: Any) -> bool:
        return runtime.idle(stream)

    def create_event(self, device: Device) -> runtime.CLEvent:
        return runtime.CLEvent()

    def record_event(self, event: runtime.CLEvent, stream: Any) -> None:
        runtime.record(event, stream)

    def synchronize_event(self, event: runtime.CLEvent) -> None:
        runtime.wait(event)

    def query_event(self, event: runtime.CLEvent) -> bool:
        return runtime.done(event)

    def wait_event(self, stream: Any, event: runtime.CLEvent) -> None:
        runtime.wait_on_queue(stream, event)

    def elapsed_ms(self, start: runtime.CLEvent, end: runtime.CLEvent) -> float:
        return runtime.elapsed_ms(start, end)


class OpenCLBackend(JITBackend):
    name = "opencl"
    intrinsic_namespaces = OpenCLEmitter.namespaces
    priority = max(PRIORITY.values())

    def __init__(self) -> None:
        self._devices: list[runtime.CLDevice] | None = None
        self.allocator, self.queue = OpenCLAllocator(), OpenCLQueue()
        self.compiler, self.loader = OpenCLCompiler(), OpenCLLoader()

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

    def build_identity(self, device: Device) -> str:
        return device.handle.identity
