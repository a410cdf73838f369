"""WebGPU adapters, devices, buffers, queues and events through the `wgpu` package.

Each adapter of a primary native API (Vulkan, Metal, D3D12; not OpenGL, whose compute
support wgpu limits) is one kiln device, with a `wgpu` device opened on first use that asks
for the adapter's own limits (binding counts, buffer sizes, workgroup storage) rather than
WebGPU's defaults, and for `shader-f16` and timestamp queries where the adapter has them.

WebGPU has one queue per device; a kiln stream is a handle on it, and each launch or copy
is a command encoder submitted at once (submission is asynchronous). Reading a buffer back
waits for the queue. Events are timestamp queries written between submissions where the
adapter can write them inside encoders, otherwise the host's clock when the queue has
drained (`WebGPUDevice.host_timing`).
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kiln import LaunchError, f32, i32, u32
from kiln.backend import Capabilities, DeviceKind
from kiln.framework.cache import CompileCache
from kiln.ir.intrinsics import atomic_capabilities

PRIMARY_BACKENDS = ("Vulkan", "Metal", "DX12")
ADAPTER_KINDS = {"DiscreteGPU": DeviceKind.GPU, "IntegratedGPU": DeviceKind.GPU,
                 "CPU": DeviceKind.CPU}
"""wgpu's adapter types; a virtual or unknown adapter is an accelerator to kiln."""
OPTIONAL_FEATURES = ("shader-f16", "timestamp-query", "timestamp-query-inside-encoders")
MAX_GRID = 2**31 - 1
"""Blocks per grid dimension kiln accepts; the launcher folds them into 65,535-workgroup
dispatch dimensions (the kernel computes its block index from the linear workgroup number)."""
WORKGROUPS_PER_DIMENSION = "max-compute-workgroups-per-dimension"


def import_wgpu() -> Any:
    import wgpu

    return wgpu


@dataclass(eq=False)
class WebGPUDevice:
    """The backend handle of one kiln WebGPU device: an adapter and its device, opened lazily."""

    adapter: Any
    info: dict[str, Any]
    limits: dict[str, int]
    features: frozenset[str]
    cache: CompileCache = field(default_factory=lambda: CompileCache("webgpu", ".wgsl"))
    """WGSL sources on disk and in memory (the driver's own pipeline cache compiles them)."""
    pipelines: dict[Any, Any] = field(default_factory=dict)
    """Compute pipelines by (source key, block shape): built once per process."""
    submitting: threading.Lock = field(default_factory=threading.Lock)
    """Held from a launch's uniform write to its submit (threads launching one kernel)."""
    _device: Any = None
    _fence: Any = None
    _layouts: dict[int, Any] = field(default_factory=dict)

    @property
    def device(self) -> Any:
        if self._device is None:
            wanted = [f for f in OPTIONAL_FEATURES if f in self.features]
            self._device = self.adapter.request_device_sync(
                label="kiln", required_features=wanted, required_limits=dict(self.limits))
        return self._device

    @property
    def name(self) -> str:
        return str(self.info.get("device") or self.info.get("description") or "WebGPU adapter")

    @property
    def kind(self) -> DeviceKind:
        return ADAPTER_KINDS.get(str(self.info.get("adapter_type")), DeviceKind.ACCELERATOR)

    @property
    def identity(self) -> str:
        """The compiler of this device's shaders: wgpu's version and the driver's."""
        wgpu = import_wgpu()
        i = self.info
        return (f"wgpu {wgpu.__version__} | {i.get('backend_type')} | {i.get('vendor')} "
                f"{self.name} | {i.get('description')}")

    @property
    def host_timing(self) -> bool:
        """Whether events take the host's clock (no timestamp queries inside encoders)."""
        return "timestamp-query-inside-encoders" not in self.features

    def limit(self, name: str) -> int:
        return int(self.limits[name])

    def bind_group_layout(self, arrays: int) -> Any:
        """One uniform block, then `arrays` read-write storage buffers (explicit, so that
        arrays a kernel never touches still bind)."""
        layout = self._layouts.get(arrays)
        if layout is None:
            wgpu = import_wgpu()
            compute = wgpu.ShaderStage.COMPUTE
            entries = [{"binding": 0, "visibility": compute, "buffer": {"type": "uniform"}}]
            entries += [{"binding": n, "visibility": compute, "buffer": {"type": "storage"}}
                        for n in range(1, arrays + 1)]
            group = self.device.create_bind_group_layout(entries=entries)
            layout = (group, self.device.create_pipeline_layout(bind_group_layouts=[group]))
            self._layouts[arrays] = layout
        return layout


def discover() -> list[WebGPUDevice]:
    """Every adapter of the primary native APIs (raises when wgpu cannot start)."""
    wgpu = import_wgpu()
    _primary_backends_only()
    found = []
    for adapter in wgpu.gpu.enumerate_adapters_sync():
        info = dict(adapter.info)
        if info.get("backend_type") not in PRIMARY_BACKENDS:
            continue
        found.append(WebGPUDevice(adapter, info, dict(adapter.limits),
                                  frozenset(adapter.features)))
    return found


def _primary_backends_only() -> None:
    """Ask wgpu-native not to start OpenGL (slow, and compute there is limited); only
    possible before wgpu's instance exists, which another user of wgpu may have made."""
    if os.environ.get("WGPU_BACKEND_TYPE"):
        return
    try:
        from wgpu.backends.wgpu_native.extras import set_instance_extras

        set_instance_extras(backends=list(PRIMARY_BACKENDS))
    except Exception:  # an instance exists already: its adapters are filtered by type
        pass


TYPES = frozenset({"i32", "u32", "f32", "bool_"})
"""Scalar types every WebGPU device computes with (f16 with `shader-f16`)."""
STORED = frozenset({"i32", "u32", "f32"})
"""Element types of storage buffers (bool is not host-shareable in WGSL)."""


def typed_capabilities(features: frozenset[str]) -> dict[str, Any]:
    """The `Capabilities` fields an adapter's optional features decide: a kernel computing
    with a type the adapter lacks is refused by name (`DeviceFeatureError`)."""
    fp16 = "shader-f16" in features
    return {"fp64": False, "fp16": fp16,
            "scalar_types": TYPES | ({"f16"} if fp16 else set()),
            "storage_types": STORED | ({"f16"} if fp16 else set())}


def capabilities(handle: WebGPUDevice) -> Capabilities:
    block = tuple(handle.limit(f"max-compute-workgroup-size-{a}") for a in "xyz")
    return Capabilities(
        backend="webgpu",
        name=handle.name,
        kind=handle.kind,
        max_threads_per_block=handle.limit("max-compute-invocations-per-workgroup"),
        max_block_dims=block,  # type: ignore[arg-type]
        max_grid_dims=(MAX_GRID, handle.limit(WORKGROUPS_PER_DIMENSION),
                       handle.limit(WORKGROUPS_PER_DIMENSION)),
        shared_memory_per_block=handle.limit("max-compute-workgroup-storage-size"),
        compute_units=1,
        global_memory=handle.limit("max-buffer-size"),
        warp_size=1,
        bf16=False,
        atomics=atomic_capabilities(frozenset({i32, u32, f32})),
        arch=handle.identity,
        **typed_capabilities(handle.features),
    )


# ---------------------------------------------------------------- memory


def padded(nbytes: int) -> int:
    """WebGPU sizes and copies are multiples of 4 bytes; a buffer is never empty."""
    return max(4, (nbytes + 3) // 4 * 4)


def allocate(handle: WebGPUDevice, nbytes: int) -> Any:
    wgpu = import_wgpu()
    size = padded(nbytes)
    if size > handle.limit("max-buffer-size"):
        raise LaunchError(f"cannot allocate {nbytes} bytes on {handle.name}: its largest "
                          f"buffer is {handle.limit('max-buffer-size')} bytes")
    usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
    return handle.device.create_buffer(size=size, usage=usage)


@dataclass(frozen=True)
class Region:
    """A device-array view's memory: `size` bytes of a buffer from `offset` (a multiple of
    the adapter's storage-buffer offset alignment), bound with that offset."""

    buffer: Any
    offset: int
    size: int


def parts(buffer: Any) -> tuple[Any, int, int]:
    """(GPU buffer, byte offset, byte size) of an allocation or a Region."""
    if isinstance(buffer, Region):
        return buffer.buffer, buffer.offset, buffer.size
    return buffer, 0, buffer.size


def binding_size(buffer: Any) -> tuple[Any, int, int]:
    """What a bind group entry names: sizes rounded up to 4 bytes within the buffer."""
    gpu, offset, size = parts(buffer)
    return gpu, offset, min(padded(size), gpu.size - offset)


def copy_host_to_device(handle: WebGPUDevice, dst: Any, src: np.ndarray) -> None:
    """`write_buffer` copies the data at once and orders it on the queue (in whole 4-byte
    words: a partial last word is read back and merged first)."""
    data = np.ascontiguousarray(src).reshape(-1).view(np.uint8)
    if data.nbytes == 0:
        return
    gpu, offset, _ = parts(dst)
    if data.nbytes % 4:
        tail = padded(data.nbytes) - 4
        word = np.frombuffer(handle.device.queue.read_buffer(gpu, offset + tail, 4), np.uint8)
        data = np.concatenate([data, word[data.nbytes - tail:]])
    handle.device.queue.write_buffer(gpu, offset, data)


def copy_device_to_host(handle: WebGPUDevice, dst: np.ndarray, src: Any) -> None:
    """Waits for the queue (WebGPU maps buffers asynchronously; kiln reads after this)."""
    if dst.nbytes == 0:
        return
    gpu, offset, _ = parts(src)
    data = handle.device.queue.read_buffer(gpu, offset, padded(dst.nbytes))
    dst.reshape(-1).view(np.uint8)[:] = np.frombuffer(data, np.uint8, dst.nbytes)


def copy_device_to_device(handle: WebGPUDevice, dst: Any, src: Any, nbytes: int) -> None:
    if nbytes == 0:
        return
    (source, start, _), (target, at, _) = parts(src), parts(dst)
    size = min(padded(nbytes), source.size - start, target.size - at)
    if size % 4:  # a view ending inside the last word: copy through the host
        host = np.empty(nbytes, np.uint8)
        copy_device_to_host(handle, host, src)
        copy_host_to_device(handle, dst, host)
        return
    encoder = handle.device.create_command_encoder()
    encoder.copy_buffer_to_buffer(source, start, target, at, size)
    handle.device.queue.submit([encoder.finish()])


def wait_idle(handle: WebGPUDevice) -> None:
    """Wait for everything submitted so far: reading a 4-byte buffer back does (wgpu 0.32's
    `on_submitted_work_done_sync` fails on a callback signature that changed in
    wgpu-native; reading back is public API on every version)."""
    if handle._device is None:
        return
    if handle._fence is None:
        wgpu = import_wgpu()
        handle._fence = handle.device.create_buffer(
            size=4, usage=wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST)
    handle.device.queue.read_buffer(handle._fence, 0, 4)


# ---------------------------------------------------------------- events


@dataclass(eq=False)
class WebGPUEvent:
    """A kiln event: a timestamp written into a query set, or the host's clock."""

    handle: WebGPUDevice
    query_set: Any = None
    resolved: Any = None
    host_seconds: float | None = None


def create_event(handle: WebGPUDevice) -> WebGPUEvent:
    return WebGPUEvent(handle)


def record(event: WebGPUEvent, handle: WebGPUDevice) -> None:
    if handle.host_timing:
        wait_idle(handle)
        event.host_seconds = time.perf_counter()
        return
    wgpu = import_wgpu()
    from wgpu.backends.wgpu_native.extras import write_timestamp

    device = handle.device
    if event.query_set is None:
        event.query_set = device.create_query_set(type="timestamp", count=1)
        event.resolved = device.create_buffer(
            size=8, usage=wgpu.BufferUsage.QUERY_RESOLVE | wgpu.BufferUsage.COPY_SRC)
    encoder = device.create_command_encoder()
    write_timestamp(encoder, event.query_set, 0)
    encoder.resolve_query_set(event.query_set, 0, 1, event.resolved, 0)
    device.queue.submit([encoder.finish()])


def wait(event: WebGPUEvent) -> None:
    wait_idle(event.handle)


def nanoseconds(event: WebGPUEvent) -> float:
    if event.host_seconds is not None:
        return event.host_seconds * 1e9
    if event.resolved is None:
        raise RuntimeError("elapsed_ms of an event that was never recorded")
    data = event.handle.device.queue.read_buffer(event.resolved, 0, 8)
    return float(np.frombuffer(data, np.uint64)[0])


def elapsed_ms(start: WebGPUEvent, end: WebGPUEvent) -> float:
    """Milliseconds between two events (wgpu reports timestamps in nanoseconds)."""
    return (nanoseconds(end) - nanoseconds(start)) * 1e-6

