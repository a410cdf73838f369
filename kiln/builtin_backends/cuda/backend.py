"""The `cuda` backend: NVRTC-compiled CUDA C++ launched through the CUDA driver."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from ...backend import (
    Allocator,
    Availability,
    Capabilities,
    CompiledKernel,
    DeviceKind,
    GraphLaunch,
    JITBackend,
    Loader,
    Queue,
)
from ...codegen.compiler import SourceCompiler
from ...framework.buildenv import BuildEnv
from ...framework.cache import CompileCache, cache_key
from ...ir.intrinsics import atomic_capabilities
from ...ir.passes import Pass, pipeline_for
from ...options import KernelOptions
from . import interop, nvrtc
from .dialect import DYNAMIC_SHARED, CudaEmitter
from .driver import Context, api, check, probe
from .graphs import KernelGraph, build_graph
from .launch import Routine, load_module, raw_layout
from .memory import SMALL_READBACK_BYTES, Buffer, PinnedStaging
from .wgmma import arch_for

if TYPE_CHECKING:
    from ...runtime.device import Device

def has_matrix_units(device: Device | None) -> bool:
    """Whether kiln's `mma`/`ldmatrix`/`cp.async` forms apply: sm_80 and newer (and source
    generated without a device, which targets the newest)."""
    if device is None:
        return True
    arch = device.capabilities.arch
    return arch.startswith("sm_") and int(arch[3:].rstrip("a")) >= 80


def has_warpgroup_mma(device: Device | None) -> bool:
    """Whether `kiln.wgmma` runs as `wgmma.mma_async`: compute capability 9.0 (sm_90a's
    instructions, which newer GPUs lack; source generated without a device uses the scalar
    form, which runs on every GPU)."""
    return device is not None and device.capabilities.arch.rstrip("a") == "sm_90"



@dataclass(frozen=True)
class CudaCode:
    """Compiled code: a cubin (or PTX) image and the kernel's entry point."""

    name: str
    image: bytes
    target: str = "cubin"


class StreamHandle:
    """A CUDA stream owned by kiln (destroyed with its `kiln.Stream`)."""

    __slots__ = ("stream", "context")

    def __init__(self, context: Context) -> None:
        drv = api()
        context.activate()
        self.context = context
        self.stream = check(drv.cuStreamCreate(drv.CUstream_flags.CU_STREAM_DEFAULT.value),
                            "cuStreamCreate")

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            api().cuStreamDestroy(self.stream)


class EventHandle:
    __slots__ = ("event", "context")

    def __init__(self, context: Context) -> None:
        context.activate()
        self.context = context
        self.event = check(api().cuEventCreate(0), "cuEventCreate")

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            api().cuEventDestroy(self.event)


def _attribute(drv: Any, dev: Any, name: str) -> int:
    attr = getattr(drv.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{name}")
    return int(check(drv.cuDeviceGetAttribute(attr, dev), f"cuDeviceGetAttribute({name})"))


def capabilities_of(ordinal: int) -> Capabilities:
    """A device's capabilities, read from the driver."""
    drv = api()
    dev = check(drv.cuDeviceGet(ordinal), "cuDeviceGet")
    raw = check(drv.cuDeviceGetName(256, dev), "cuDeviceGetName")
    name = raw.split(b"\x00", 1)[0].decode()
    attr = {n: _attribute(drv, dev, n) for n in (
        "MAX_THREADS_PER_BLOCK", "MAX_BLOCK_DIM_X", "MAX_BLOCK_DIM_Y", "MAX_BLOCK_DIM_Z",
        "MAX_GRID_DIM_X", "MAX_GRID_DIM_Y", "MAX_GRID_DIM_Z", "MAX_SHARED_MEMORY_PER_BLOCK",
        "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN", "MULTIPROCESSOR_COUNT", "WARP_SIZE",
        "COMPUTE_CAPABILITY_MAJOR", "COMPUTE_CAPABILITY_MINOR")}
    major, minor = attr["COMPUTE_CAPABILITY_MAJOR"], attr["COMPUTE_CAPABILITY_MINOR"]
    return Capabilities(
        backend="cuda", name=name, kind=DeviceKind.GPU,
        max_threads_per_block=attr["MAX_THREADS_PER_BLOCK"],
        max_block_dims=(attr["MAX_BLOCK_DIM_X"], attr["MAX_BLOCK_DIM_Y"],
                        attr["MAX_BLOCK_DIM_Z"]),
        max_grid_dims=(attr["MAX_GRID_DIM_X"], attr["MAX_GRID_DIM_Y"], attr["MAX_GRID_DIM_Z"]),
        # what a kernel may opt in to (H100: 227 KiB); over 48 KiB kiln makes the kernel's
        # shared arrays dynamic and raises its limit at load (`CudaEmitter.declare_locals`)
        shared_memory_per_block=max(attr["MAX_SHARED_MEMORY_PER_BLOCK"],
                                    attr["MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"]),
        compute_units=attr["MULTIPROCESSOR_COUNT"],
        global_memory=int(check(drv.cuDeviceTotalMem(dev), "cuDeviceTotalMem")),
        warp_size=attr["WARP_SIZE"], fp64=True, fp16=(major, minor) >= (5, 3),
        atomics=atomic_capabilities(),
        unified_memory=False, arch=f"sm_{major}{minor}",
    )


class CudaCompiler(SourceCompiler):
    """CUDA C++ from the shared emitter, compiled by NVRTC to a cubin for the device."""

    emitter = CudaEmitter

    def finish(self, kernel: CompiledKernel, device: Device) -> CompiledKernel:
        arch = arch_for(kernel.source, device.capabilities.arch)
        code = compile_cached(kernel.source, kernel.entry, arch,
                              fastmath=kernel.options.fastmath,
                              contract=kernel.options.contract)
        dynamic = DYNAMIC_SHARED.search(kernel.source)  # over 48 KiB of shared arrays
        return dataclasses.replace(kernel, binary=code.image, metadata=MappingProxyType(
            {**kernel.metadata, "target": code.target,
             "shared_bytes": int(dynamic[1]) if dynamic else 0}))


class CudaLoader(Loader):
    def load(self, compiled: CompiledKernel, device: Device) -> Routine:
        """The cubin loaded into the device's context (`Routine` launches it)."""
        assert compiled.binary is not None, "CudaCompiler always sets the binary"
        context: Context = device.handle
        return Routine(context, load_module(context, compiled.binary), compiled.entry,
                       shared_bytes=int(compiled.metadata.get("shared_bytes", 0)))


class CudaAllocator(Allocator):
    """Device memory of one context; host copies go through pinned staging buffers; views
    are pointer offsets (`SubBuffers`); copies between GPUs are the driver's (`PeerCopy`)."""

    def __init__(self) -> None:
        self.peers_enabled: set[tuple[int, int]] = set()

    def allocate(self, device: Device, nbytes: int) -> Buffer:
        return Buffer.allocate(device.handle, nbytes)

    def sub_buffer(self, device: Device, buffer: Buffer, offset: int, nbytes: int) -> Buffer:
        return Buffer(buffer.ptr + offset if buffer.ptr else 0, nbytes, buffer.context,
                      owner=buffer)

    def sub_buffer_alignment(self, device: Device) -> int:
        return 1

    def copy_host_to_device(self, dst: Buffer, src: np.ndarray, stream: StreamHandle) -> None:
        if src.nbytes:
            dst.context.activate()
            PinnedStaging.of(dst.context).copy_to_device(dst.ptr, src, stream.stream)

    def copy_device_to_host(self, dst: np.ndarray, src: Buffer, stream: StreamHandle) -> None:
        if dst.nbytes:
            src.context.activate()
            if dst.nbytes <= SMALL_READBACK_BYTES:
                PinnedStaging.of(src.context).copy_small_to_host(dst, src.ptr, stream.stream)
                return
            check(api().cuMemcpyDtoHAsync(dst.ctypes.data, src.ptr, dst.nbytes, stream.stream),
                  "cuMemcpyDtoHAsync")

    def copy_device_to_device(self, dst: Buffer, src: Buffer, nbytes: int,
                              stream: StreamHandle) -> None:
        if nbytes:
            dst.context.activate()
            check(api().cuMemcpyDtoDAsync(dst.ptr, src.ptr, nbytes, stream.stream),
                  "cuMemcpyDtoDAsync")

    def copy_peer(self, dst: Buffer, src: Buffer, nbytes: int, src_stream: StreamHandle,
                  stream: StreamHandle) -> None:
        """From one GPU to another, queued on the destination's `stream` behind an event on
        `src_stream`: nothing waits on the host. Direct (NVLink or PCIe peer-to-peer) where
        the two devices can reach each other's memory, staged by the driver otherwise."""
        if not nbytes:
            return
        drv = api()
        ready = EventHandle(src.context)
        check(drv.cuEventRecord(ready.event, src_stream.stream), "cuEventRecord")
        self.enable_peer_access(dst.context, src.context)
        check(drv.cuStreamWaitEvent(stream.stream, ready.event, 0), "cuStreamWaitEvent")
        check(drv.cuMemcpyPeerAsync(dst.ptr, dst.context.handle, src.ptr, src.context.handle,
                                    nbytes, stream.stream), "cuMemcpyPeerAsync")

    def enable_peer_access(self, dst: Context, src: Context) -> None:
        """Let `dst`'s device (its context made current) reach `src`'s memory, once per
        pair, where the hardware allows: the copy engines then move the data over NVLink or
        PCIe without the host. kiln allocates from the device's stream-ordered pool, whose
        peers are granted per pool; memory from other libraries follows the context."""
        pair = (dst.ordinal, src.ordinal)
        dst.activate()
        if pair in self.peers_enabled:
            return
        self.peers_enabled.add(pair)
        drv = api()
        if not check(drv.cuDeviceCanAccessPeer(dst.device, src.device), "cuDeviceCanAccessPeer"):
            return  # cuMemcpyPeerAsync stages through the host
        # Already enabled (by another library in this process) or refused (too many peers):
        # either way cuMemcpyPeerAsync still copies, so the status is no error.
        drv.cuCtxEnablePeerAccess(src.handle, 0)
        access = drv.CUmemAccessDesc()
        access.location.type = drv.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        access.location.id = dst.ordinal
        access.flags = drv.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
        pool = check(drv.cuDeviceGetMemPool(src.device), "cuDeviceGetMemPool")
        check(drv.cuMemPoolSetAccess(pool, [access], 1), "cuMemPoolSetAccess")


class CudaQueue(Queue):
    """CUDA streams and events of one context."""

    def create_stream(self, device: Device) -> StreamHandle:
        return StreamHandle(device.handle)

    def synchronize_stream(self, stream: StreamHandle) -> None:
        check(api().cuStreamSynchronize(stream.stream), "cuStreamSynchronize")

    def create_event(self, device: Device) -> EventHandle:
        return EventHandle(device.handle)

    def record_event(self, event: EventHandle, stream: StreamHandle) -> None:
        check(api().cuEventRecord(event.event, stream.stream), "cuEventRecord")

    def synchronize_event(self, event: EventHandle) -> None:
        check(api().cuEventSynchronize(event.event), "cuEventSynchronize")

    def query_event(self, event: EventHandle) -> bool:
        drv = api()
        status, = drv.cuEventQuery(event.event)
        if status == drv.CUresult.CUDA_ERROR_NOT_READY:
            return False
        check((status,), "cuEventQuery")
        return True

    def wait_event(self, stream: StreamHandle, event: EventHandle) -> None:
        check(api().cuStreamWaitEvent(stream.stream, event.event, 0), "cuStreamWaitEvent")

    def elapsed_ms(self, start: EventHandle, end: EventHandle) -> float:
        """Waits for both events first: cuEventElapsedTime itself answers NOT_READY while
        either is pending, where kiln's (and Numba's, CuPy's) elapsed_time waits."""
        self.synchronize_event(start)
        self.synchronize_event(end)
        return float(check(api().cuEventElapsedTime(start.event, end.event),
                           "cuEventElapsedTime"))

    def keep_dropped(self, stream: StreamHandle) -> None:
        return None  # a destroyed stream's work still runs, and cuCtxSynchronize waits for it

    def synchronize_device(self, device: Device) -> None:
        device.handle.activate()
        check(api().cuCtxSynchronize(), "cuCtxSynchronize")


class CudaBackend(JITBackend):
    """NVIDIA GPUs: CUDA C++ from the shared emitter, NVRTC to cubin, cuda-bindings driver.

    Optional protocols: `RawKernels`, `KernelGraphs`, `CudaArrayInterop`, `DLPackInterop`;
    its routines are `FastLaunch`."""

    name = "cuda"
    priority = 100
    intrinsic_namespaces = CudaEmitter.namespaces
    supports_recursion = True  # device functions recurse on the thread's stack

    def __init__(self) -> None:
        self.allocator, self.queue = CudaAllocator(), CudaQueue()
        self.compiler, self.loader = CudaCompiler(), CudaLoader()

    def availability(self) -> Availability:
        return probe()

    def device_handles(self) -> Sequence[tuple[Any, Capabilities]]:
        count = int(check(api().cuDeviceGetCount(), "cuDeviceGetCount"))
        return [(Context(i), capabilities_of(i)) for i in range(count)]

    def pipeline(self, device: Device) -> Sequence[Pass]:
        """The shared pipeline, with matrix operations in their native forms on sm_80+
        (warpgroup products on sm_90)."""
        return pipeline_for(device, matrix_units=has_matrix_units(device),
                            warpgroup_mma=has_warpgroup_mma(device),
                            then=self.codegen_passes)

    def build_identity(self, device: Device) -> str:
        major, minor = nvrtc.version()
        return f"{device.capabilities.arch}/nvrtc{major}.{minor}"

    def load_raw(self, code: str | bytes, name: str, device: Device,
                 options: KernelOptions) -> Routine:
        """A hand-written kernel: CUDA C++ (compiled with NVRTC), PTX text or a cubin."""
        context: Context = device.handle
        if isinstance(code, bytes):
            image = code
        elif ".entry" in code and code.lstrip().startswith((".version", "//")):
            image = code.encode() + b"\0"
        else:
            image = compile_cached(code, name, device.capabilities.arch,
                                   fastmath=options.fastmath,
                                   contract=options.contract).image
        return Routine(context, load_module(context, image), name, layout=raw_layout)

    # ---- kiln.capture's graphs (kiln.backend.KernelGraphs: kiln/builtin_backends/cuda/graphs.py)
    def build_graph(self, device: Device, launches: Sequence[GraphLaunch]) -> KernelGraph | None:
        return build_graph(device.handle, launches)

    def update_graph(self, graph: KernelGraph, index: int, launch: GraphLaunch) -> None:
        graph.update(index, launch)

    def replay_graph(self, graph: KernelGraph, stream: StreamHandle) -> None:
        graph.launch(stream)

    # ---- interop (see kiln.runtime.array.DeviceArray)
    cuda_array_interface = staticmethod(interop.cuda_array_interface)
    dlpack = staticmethod(interop.dlpack)
    dlpack_device = staticmethod(interop.dlpack_device)


def build_env(arch: str, target: str, fastmath: bool, contract: bool = False) -> BuildEnv:
    """NVRTC, its version and the options for one target (part of every cache key)."""
    major, minor = nvrtc.version()
    flags = tuple(nvrtc.options_for(arch, target, fastmath, contract=contract))
    return BuildEnv("cuda", ("nvrtc",), f"{major}.{minor}", flags=flags)


def compile_cached(source: str, name: str, arch: str, fastmath: bool = False,
                   target: str = "cubin", contract: bool = False) -> CudaCode:
    """NVRTC compile through the compile cache (key: source, NVRTC version, arch, options)."""
    env = build_env(arch, target, fastmath, contract)
    key = cache_key("cuda", source, env, arch, {"target": target})

    def build() -> bytes:
        return nvrtc.compile_source(source, name, list(env.flags), target)

    return _CACHE.get_or_build(key, build, lambda e: CudaCode(name, e.payload, target), name)


_CACHE = CompileCache("cuda", ".cubin")
