"""The `webgpu` backend: kiln's JIT contract on WGSL compute shaders through `wgpu`.

Priorities per device kind: a GPU adapter (discrete or integrated) ranks above the `cpu`
backend (50) and below `cuda` (100); a CPU adapter (Mesa's lavapipe, SwiftShader) ranks
below `cpu`, so it is never the default on a machine without a GPU.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kiln import BackendCompileError, DeviceArray, KernelOptions, LaunchError
from kiln.backend import (
    Allocator,
    Availability,
    Capabilities,
    CompiledKernel,
    Compiler,
    DeviceKind,
    JITBackend,
    Loader,
    Queue,
)
from kiln.codegen import kernel_abi
from kiln.framework.buildenv import BuildEnv
from kiln.framework.cache import CacheEntry, cache_key
from kiln.ir import nodes as ir
from kiln.ir.passes import pipeline_for

from . import runtime
from .emitter import WGSLEmitter
from .layout import uniform_bytes
from .runtime import WebGPUDevice
from .selects import lower_effectful_selects
from .specialise import check_inlined_size, specialise_array_arguments

PRIORITY = {DeviceKind.GPU: 90, DeviceKind.ACCELERATOR: 45, DeviceKind.CPU: 20}
ENTRY = re.compile(r"^@compute[^\n]*\nfn ([^\s(]+)\(", re.MULTILINE)
NAGA_LOCATION = re.compile(r":(\d+):(\d+)")
SOURCE_MARK = re.compile(r"^\s*// at (.+):(\d+)$")


def _code_identity() -> str:
    """A hash of this package's modules: every one of them shapes the generated WGSL."""
    digest = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


CODE_IDENTITY = _code_identity()


class WebGPUCompiler(Compiler):
    """WGSL from the plugin's emitter; the shader module is made (and validated) when the
    loader loads it, per device."""

    def generate_source(self, program: ir.Program) -> str:
        return WGSLEmitter().emit(program)

    def intrinsic_implementation(self, name: str) -> Any:
        return WGSLEmitter.implementation(name)

    def compile(self, program: ir.Program, device: Any,
                options: KernelOptions) -> CompiledKernel:
        emitter = WGSLEmitter(exact=not (options.contract or options.fastmath))
        source = emitter.emit(program)
        entry = ENTRY.search(source)
        return CompiledKernel(entry[1] if entry else "kernel", tuple(kernel_abi(program)),
                              source, options=options)


class WebGPULoader(Loader):
    def load(self, compiled: CompiledKernel, device: Any) -> Compiled:
        """The validated module, found by its source in the device's compile cache."""
        handle: WebGPUDevice = device.handle
        env = BuildEnv("webgpu", ("wgpu",), handle.identity)
        key = cache_key("webgpu", compiled.source, env, handle.identity, compiled.options)

        def load(cached: CacheEntry) -> Compiled:
            return Compiled(handle, key, compiled.entry,
                            shader_module(handle, cached.payload.decode()))

        return handle.cache.get_or_build(key, compiled.source.encode, load, compiled.entry)


class WebGPUAllocator(Allocator):
    """Storage buffers; views are regions of their root buffer (`SubBuffers`)."""

    def allocate(self, device: Any, nbytes: int) -> Any:
        return runtime.allocate(device.handle, nbytes)

    def free(self, buffer: Any) -> None:
        if not isinstance(buffer, runtime.Region):  # a view's memory is its root's
            buffer.destroy()

    def sub_buffer(self, device: Any, buffer: Any, offset: int, nbytes: int) -> Any:
        gpu, start, _ = runtime.parts(buffer)
        return runtime.Region(gpu, start + offset, nbytes)

    def sub_buffer_alignment(self, device: Any) -> int:
        return int(device.handle.limit("min-storage-buffer-offset-alignment"))

    def copy_host_to_device(self, dst: Any, src: Any, stream: Any) -> None:
        runtime.copy_host_to_device(stream, dst, src)

    def copy_device_to_host(self, dst: Any, src: Any, stream: Any) -> None:
        runtime.copy_device_to_host(stream, dst, src)

    def copy_device_to_device(self, dst: Any, src: Any, nbytes: int, stream: Any) -> None:
        runtime.copy_device_to_device(stream, dst, src, nbytes)


class WebGPUQueue(Queue):
    """WebGPU has one queue per device: a stream is the device's handle."""

    def create_stream(self, device: Any) -> WebGPUDevice:
        return device.handle  # type: ignore[no-any-return]

    def synchronize_stream(self, stream: WebGPUDevice) -> None:
        runtime.wait_idle(stream)

    def create_event(self, device: Any) -> runtime.WebGPUEvent:
        return runtime.create_event(device.handle)

    def record_event(self, event: runtime.WebGPUEvent, stream: WebGPUDevice) -> None:
        runtime.record(event, stream)

    def synchronize_event(self, event: runtime.WebGPUEvent) -> None:
        runtime.wait(event)

    def elapsed_ms(self, start: runtime.WebGPUEvent, end: runtime.WebGPUEvent) -> float:
        return runtime.elapsed_ms(start, end)


class WebGPUBackend(JITBackend):
    name = "webgpu"
    intrinsic_namespaces = WGSLEmitter.namespaces
    priority = max(PRIORITY.values())

    def __init__(self) -> None:
        self._devices: list[WebGPUDevice] | None = None
        self.allocator, self.queue = WebGPUAllocator(), WebGPUQueue()
        self.compiler, self.loader = WebGPUCompiler(), WebGPULoader()

    def _discover(self) -> list[WebGPUDevice]:
        if self._devices is None:
            self._devices = runtime.discover()
        return self._devices

    def availability(self) -> Availability:
        try:
            runtime.import_wgpu()
        except ImportError as exc:
            return Availability(False, f"the wgpu package is not installed ({exc}); "
                                       "pip install kiln-webgpu")
        try:
            devices = self._discover()
        except Exception as exc:  # no Vulkan loader, no driver, a broken wgpu-native
            return Availability(False, f"wgpu cannot start: {exc}")
        if not devices:
            return Availability(False, "wgpu finds no Vulkan, Metal or D3D12 adapter "
                                       "(on Linux without a GPU: apt install mesa-vulkan-drivers)")
        return Availability(True)

    def device_handles(self) -> Sequence[tuple[Any, Capabilities]]:
        return [(h, runtime.capabilities(h)) for h in self._discover()]

    def device_priority(self, capabilities: Capabilities, backend_priority: int) -> int:
        return PRIORITY.get(capabilities.kind, PRIORITY[DeviceKind.ACCELERATOR])

    def pipeline(self, device: Any) -> Sequence[Any]:
        """The shared pipeline (recursion bounded: WGSL cannot recurse), conditional
        expressions with side effects as statements (WGSL's `select` evaluates both arms),
        then device functions copied per array argument (WGSL passes no storage pointers)."""
        return [*pipeline_for(device), lower_effectful_selects, specialise_array_arguments,
                check_inlined_size(device.capabilities.name if device is not None else "webgpu")]

    def build_identity(self, device: Any) -> str:
        """The driver, and this package's code generator (for kiln's kernel cache)."""
        return f"{device.handle.identity} | kiln-webgpu {CODE_IDENTITY}"


def shader_module(handle: WebGPUDevice, source: str) -> Any:
    """The validated module, or a BackendCompileError at the kernel's line."""
    try:
        return handle.device.create_shader_module(code=source)
    except Exception as exc:  # wgpu raises GPUValidationError with naga's report
        raise compile_error(str(exc), source, handle.name) from None


def compile_error(log: str, source: str, device: str) -> BackendCompileError:
    """naga's first `:LINE:COL` mapped to the user's line through the `// at` marks."""
    lines = source.splitlines()
    where = NAGA_LOCATION.search(log)
    loc = None
    if where is not None:
        for text in reversed(lines[:int(where[1])]):
            mark = SOURCE_MARK.match(text)
            if mark:
                loc = ir.Loc(mark[1], int(mark[2]), 0)
                break
    return BackendCompileError(f"WGSL does not validate on {device}:\n{log.strip()}", loc)


class Compiled:
    """A validated WGSL module; compute pipelines per block shape are made at first use."""

    def __init__(self, handle: WebGPUDevice, key: str, entry: str, module: Any) -> None:
        self.handle, self.key, self.entry, self.module = handle, key, entry, module
        self.bound: Bound | None = None

    def pipeline(self, block: tuple[int, int, int], arrays: int) -> Any:
        cache_key = (self.key, block, arrays)
        pipeline = self.handle.pipelines.get(cache_key)
        if pipeline is None:
            constants = {f"kiln_block_{a}": n for a, n in zip("xyz", block)}
            _, layout = self.handle.bind_group_layout(arrays)
            pipeline = self.handle.device.create_compute_pipeline(
                layout=layout, compute={"module": self.module, "entry_point": self.entry,
                                        "constants": constants})
            self.handle.pipelines[cache_key] = pipeline
        return pipeline

    def launch(self, grid: tuple[int, int, int], block: tuple[int, int, int],
               args: Sequence[Any], stream: Any = None) -> None:
        handle, device = self.handle, self.handle.device
        arrays = [a for a in args if isinstance(a, DeviceArray)]
        check_limits(handle, self.entry, args, arrays)
        blocks = grid[0] * grid[1] * grid[2]
        if blocks == 0:
            return
        if blocks >= 2**32:
            raise LaunchError(f"kernel {self.entry}: a grid of {blocks} blocks is more than "
                              "WebGPU can number (2**32 - 1)")
        pipeline = self.pipeline(block, len(arrays))
        data = uniform_bytes(grid, block, args)
        with handle.submitting:  # the uniform's write and the dispatch reading it
            bind_group = self.bind(arrays, data)
            encoder = device.create_command_encoder()
            compute = encoder.begin_compute_pass()
            compute.set_pipeline(pipeline)
            compute.set_bind_group(0, bind_group)
            compute.dispatch_workgroups(*dispatch_size(blocks, handle.limit(
                runtime.WORKGROUPS_PER_DIMENSION)))
            compute.end()
            device.queue.submit([encoder.finish()])

    def bind(self, arrays: list[DeviceArray], data: bytes) -> Any:
        """The bind group of the last launch when it bound the same buffers (its uniform
        block rewritten where the launch's values changed), else a new one. A queue write
        lands before the next submit and after every earlier one, so a dispatch in flight
        keeps the values it was launched with. Making a bind group and a uniform buffer
        cost more host time than the rest of a launch; a kernel keeps the last arrays it
        ran on bound (alive) until it runs on others."""
        wgpu = runtime.import_wgpu()
        handle, device = self.handle, self.handle.device
        bindings = tuple(runtime.binding_size(a.buffer) for a in arrays)
        last = self.bound
        if last is not None and last.bindings == bindings:
            if last.data != data:
                device.queue.write_buffer(last.params, 0, data)
                last.data = data
            return last.group
        params = device.create_buffer_with_data(
            data=data, usage=wgpu.BufferUsage.UNIFORM | wgpu.BufferUsage.COPY_DST)
        entries = [{"binding": 0, "resource": {"buffer": params}}]
        for n, (gpu, offset, size) in enumerate(bindings, 1):
            entries.append({"binding": n, "resource": {"buffer": gpu, "offset": offset,
                                                       "size": size}})
        layout, _ = handle.bind_group_layout(len(arrays))
        group = device.create_bind_group(layout=layout, entries=entries)
        self.bound = Bound(bindings, params, data, group)
        return group


@dataclass
class Bound:
    """A kernel's last bind group: the buffers it binds and its uniform block."""

    bindings: tuple[tuple[Any, int, int], ...]
    params: Any
    data: bytes
    group: Any


def dispatch_size(blocks: int, limit: int) -> tuple[int, int, int]:
    """Workgroups per dimension covering `blocks` with at most `limit` in each (the kernel
    numbers them linearly and returns past the last block)."""
    x = min(blocks, limit)
    rest = -(-blocks // x)
    y = min(rest, limit)
    return x, y, -(-rest // y)


def check_limits(handle: WebGPUDevice, kernel: str, args: Sequence[Any],
                 arrays: list[DeviceArray]) -> None:
    """The adapter's binding count and binding size, as a LaunchError naming the argument."""
    most = handle.limit("max-storage-buffers-per-shader-stage")
    if len(arrays) > most:
        raise LaunchError(f"kernel {kernel} takes {len(arrays)} arrays but {handle.name} binds "
                          f"at most {most} storage buffers per kernel "
                          "(max-storage-buffers-per-shader-stage)")
    largest = handle.limit("max-storage-buffer-binding-size")
    for position, a in enumerate(args):
        if isinstance(a, DeviceArray) and a.nbytes > largest:
            raise LaunchError(f"kernel {kernel}, argument {position}: an array of {a.nbytes} "
                              f"bytes is larger than {handle.name} binds ({largest} bytes, "
                              "max-storage-buffer-binding-size)")
