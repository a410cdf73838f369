"""OpenCL devices, memory, queues and events through pyopencl.

Every device of every platform is one kiln device with its own context. Streams are
in-order command queues with profiling enabled, so events are markers whose timestamps
give `elapsed_ms`. Devices that share memory with the host (CPU devices such as PoCL's)
get zero-copy buffers: `CL_MEM_USE_HOST_PTR` over NumPy arrays, `CL_MEM_ALLOC_HOST_PTR`
for fresh allocations.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ...backend import Capabilities, DeviceKind
from ...framework.cache import CompileCache
from ...ir.intrinsics import atomic_capabilities
from ...ir.types import f32, f64, i32, i64, u32, u64
from .warps import SUBGROUP_EXTENSIONS

if TYPE_CHECKING:
    import pyopencl as cl

MAX_GRID = 2**31 - 1
"""Work-groups per dimension: OpenCL has no limit, kiln's i32 indices do."""


@dataclass(eq=False)
class CLDevice:
    """The backend handle of one kiln OpenCL device."""

    platform: cl.Platform
    device: cl.Device
    context: cl.Context
    extensions: frozenset[str]
    zero_copy: bool
    cache: CompileCache = field(default_factory=lambda: CompileCache("opencl", ".clbin"))
    """Programs built for this device: its own memory level, the shared disk cache."""

    @property
    def identity(self) -> str:
        """What names the binary target: platform, device and driver versions."""
        d = self.device
        return (f"{self.platform.name.strip()} {self.platform.version.strip()} | "
                f"{d.name.strip()} | {d.version.strip()} | driver {d.driver_version.strip()}")

    @property
    def fp64(self) -> bool:
        return "cl_khr_fp64" in self.extensions or bool(self.device.double_fp_config)

    @property
    def correct_division(self) -> bool:
        """Whether f32 division and sqrt can be correctly rounded (a build option)."""
        flag = import_pyopencl().device_fp_config.CORRECTLY_ROUNDED_DIVIDE_SQRT
        return bool(self.device.single_fp_config & flag)

    @property
    def int64_atomics(self) -> bool:
        return "cl_khr_int64_base_atomics" in self.extensions

    @property
    def int64_extended_atomics(self) -> bool:
        return "cl_khr_int64_extended_atomics" in self.extensions


def import_pyopencl() -> Any:
    import pyopencl

    return pyopencl


def discover() -> list[CLDevice]:
    """Every device of every platform, in platform order (raises if no ICD loads)."""
    cl = import_pyopencl()
    found: list[CLDevice] = []
    for platform in cl.get_platforms():
        try:
            devices = platform.get_devices()
        except cl.Error:  # a platform with no devices raises DEVICE_NOT_FOUND
            continue
        for dev in devices:
            extensions = frozenset(dev.extensions.split())
            shares_host = bool(dev.type & cl.device_type.CPU) or _host_unified(dev)
            found.append(CLDevice(platform, dev, cl.Context([dev]), extensions, shares_host))
    return found


def _host_unified(dev: cl.Device) -> bool:
    try:
        return bool(dev.host_unified_memory)
    except Exception:  # removed from OpenCL 3.0 drivers that do not report it
        return False


def device_kind(handle: CLDevice) -> DeviceKind:
    cl = import_pyopencl()
    t = handle.device.type
    if t & cl.device_type.GPU:
        return DeviceKind.GPU
    if t & cl.device_type.CPU:
        return DeviceKind.CPU
    return DeviceKind.ACCELERATOR


def _warp_size(handle: CLDevice) -> int:
    """The subgroup size kernels see: the vendor's SIMD width on devices with the subgroup
    extensions warp operations need (`warps.SUBGROUP_EXTENSIONS`); 1 elsewhere, where each
    work-item is its own subgroup."""
    if not all(ext in handle.extensions for ext in SUBGROUP_EXTENSIONS):
        return 1
    d = handle.device
    if "cl_nv_device_attribute_query" in handle.extensions:
        return int(d.warp_size_nv)
    if "cl_amd_device_attribute_query" in handle.extensions:
        return int(d.wavefront_width_amd)
    return 1


def atomics_of(handle: CLDevice) -> frozenset[str]:
    """32-bit types always (float ones through compare-and-swap), i64/u64 with both
    cl_khr_int64 atomics extensions, f64 (add, through compare-and-swap) with the base one
    and fp64."""
    types = {i32, u32, f32}
    if handle.int64_atomics and handle.int64_extended_atomics:
        types |= {i64, u64}
    if handle.int64_atomics and handle.fp64:
        types.add(f64)
    return atomic_capabilities(frozenset(types))


def capabilities(handle: CLDevice) -> Capabilities:
    d = handle.device
    sizes = tuple(int(s) for s in d.max_work_item_sizes[:3])
    return Capabilities(
        backend="opencl",
        name=d.name.strip(),
        kind=device_kind(handle),
        max_threads_per_block=int(d.max_work_group_size),
        max_block_dims=(sizes + (1, 1, 1))[:3],  # type: ignore[arg-type]
        max_grid_dims=(MAX_GRID, MAX_GRID, MAX_GRID),
        shared_memory_per_block=int(d.local_mem_size),
        compute_units=int(d.max_compute_units),
        global_memory=int(d.global_mem_size),
        warp_size=_warp_size(handle),
        fp64=handle.fp64,
        fp16="cl_khr_fp16" in handle.extensions,
        atomics=atomics_of(handle),
        unified_memory=handle.zero_copy,
        arch=handle.identity,
    )


# ---------------------------------------------------------------- memory


def _check_size(handle: CLDevice, nbytes: int) -> None:
    """MemoryError where `nbytes` is more than one buffer of the device may hold."""
    limit = int(handle.device.max_mem_alloc_size)
    if nbytes > limit:
        raise MemoryError(f"its largest buffer is {limit} bytes")


def allocate(handle: CLDevice, nbytes: int) -> cl.Buffer:
    """A buffer of `nbytes`; MemoryError where the device cannot make one that large."""
    cl = import_pyopencl()
    _check_size(handle, nbytes)
    flags = cl.mem_flags.READ_WRITE
    if handle.zero_copy:
        flags |= cl.mem_flags.ALLOC_HOST_PTR
    try:
        return cl.Buffer(handle.context, flags, size=max(nbytes, 1))
    except cl.Error as exc:
        if exc.code in (cl.status_code.MEM_OBJECT_ALLOCATION_FAILURE,
                        cl.status_code.OUT_OF_RESOURCES, cl.status_code.OUT_OF_HOST_MEMORY):
            raise MemoryError(str(exc)) from None
        raise


def wrap_host(handle: CLDevice, array: np.ndarray) -> cl.Buffer | None:
    """A buffer over `array`'s memory on devices that share host memory; MemoryError where
    the device cannot make one that large."""
    if not (handle.zero_copy and array.flags.writeable and array.flags.aligned
            and array.nbytes > 0):
        return None
    _check_size(handle, array.nbytes)
    cl = import_pyopencl()
    flags = cl.mem_flags.READ_WRITE | cl.mem_flags.USE_HOST_PTR
    return cl.Buffer(handle.context, flags, hostbuf=array)


def _same_memory(buffer: cl.Buffer, array: np.ndarray) -> bool:
    host = buffer.hostbuf
    return (host is not None and isinstance(host, np.ndarray)
            and host.ctypes.data == array.ctypes.data)


def copy_host_to_device(queue: cl.CommandQueue, dst: cl.Buffer, src: np.ndarray) -> None:
    cl = import_pyopencl()
    if _same_memory(dst, src):
        return
    # a non-blocking write reads `src` later: keep a private copy alive until it has
    cl.enqueue_copy(queue, dst, np.array(src, copy=True), is_blocking=False)


def copy_device_to_host(queue: cl.CommandQueue, dst: np.ndarray, src: cl.Buffer) -> None:
    cl = import_pyopencl()
    if _same_memory(src, dst):
        # zero-copy: mapping (then unmapping) makes the device's writes visible in place
        mapped, _ = cl.enqueue_map_buffer(queue, src, cl.map_flags.READ, 0, dst.nbytes,
                                          np.uint8, is_blocking=False)
        mapped.base.release(queue)
        return
    cl.enqueue_copy(queue, dst.reshape(-1).view(np.uint8), src, is_blocking=False)


def copy_device_to_device(queue: cl.CommandQueue, dst: cl.Buffer, src: cl.Buffer,
                          nbytes: int) -> None:
    if nbytes:
        import_pyopencl().enqueue_copy(queue, dst, src, byte_count=nbytes)


# ---------------------------------------------------------------- queues and events


def create_queue(handle: CLDevice) -> cl.CommandQueue:
    cl = import_pyopencl()
    return cl.CommandQueue(handle.context, handle.device,
                           properties=cl.command_queue_properties.PROFILING_ENABLE)


@dataclass(eq=False)
class CLEvent:
    """A kiln event: the marker enqueued by the last `record`."""

    marker: Any = None


def record(event: CLEvent, queue: cl.CommandQueue) -> None:
    event.marker = import_pyopencl().enqueue_marker(queue)


def wait(event: CLEvent) -> None:
    if event.marker is not None:
        event.marker.wait()


def done(event: CLEvent) -> bool:
    """Whether the marker has completed (a never-recorded event has)."""
    if event.marker is None:
        return True
    status = event.marker.command_execution_status
    return bool(status == import_pyopencl().command_execution_status.COMPLETE)


def idle(queue: cl.CommandQueue) -> bool:
    """Whether the commands enqueued on `queue` are done, without waiting (a marker after
    them has completed)."""
    event = CLEvent()
    record(event, queue)
    queue.flush()
    return done(event)


def wait_on_queue(queue: cl.CommandQueue, event: CLEvent) -> None:
    """Commands enqueued on `queue` from now on start after the event's marker."""
    if event.marker is not None:
        import_pyopencl().enqueue_barrier(queue, wait_for=[event.marker])


def elapsed_ms(start: CLEvent, end: CLEvent) -> float:
    """Milliseconds between two markers, from the queue's profiling timestamps."""
    wait(start)
    wait(end)
    return (end.marker.profile.end - start.marker.profile.end) * 1e-6
