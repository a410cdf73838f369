"""The `cpu` backend: IR -> C11 + OpenMP -> the system C compiler -> ctypes -> launch."""

from __future__ import annotations

import ctypes
import os
import platform
import subprocess
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ... import settings
from ...backend import (
    Availability,
    Capabilities,
    CompiledKernel,
    DeviceKind,
    Dim3,
    JITBackend,
    Loader,
)
from ...codegen.compiler import SourceCompiler
from ...codegen.diagnostics import compile_error
from ...codegen.threadloops import (
    BLOCK_DIMS,
    host_threads,
    launch_format,
    process_cores,
    team_size,
)
from ...framework.buildenv import BuildEnv, ToolNotFoundError
from ...framework.cache import CacheEntry, CompileCache, cache_key
from ...ir.abi import abi_values
from ...ir.intrinsics import atomic_capabilities
from ...ir.passes import lower_thread_loops, widen_index_arithmetic
from ...options import DEFAULT_OPTIONS, KernelOptions
from ...runtime.device import Device
from ...runtime.host import HostAllocator, HostQueue, HostStream, host_memory_bytes
from .dialect import CpuEmitter
from .toolchain import OPTION_FLAGS, compile_command, toolchain

MAX_THREADS_PER_BLOCK = 1024
MAX_BLOCK_DIMS = (MAX_THREADS_PER_BLOCK, MAX_THREADS_PER_BLOCK, 64)
MAX_GRID_DIMS = (2**31 - 1, 65535, 65535)
"""The cpu device's limits (`Capabilities`; built libraries check the same)."""
SHARED_MEMORY_PER_BLOCK = 64 * 1024
@dataclass
class CpuBinary:
    """One loaded binary (for one block shape): the entry point and its library."""

    entry: Any
    library: ctypes.CDLL
    path: Path


class CpuCompiler(SourceCompiler):
    """C11 + OpenMP from the shared emitter; binaries are built by the loader, per block
    shape (the block shape is a compile-time constant of the generated C)."""

    emitter = CpuEmitter


class CpuKernel:
    """A loaded kernel (`Launchable`): its binary per block shape, built (or found in the
    compile cache) at the first launch with that shape."""

    def __init__(self, compiled: CompiledKernel, cache: CompileCache, env: BuildEnv,
                 team_size: Callable[[Dim3, Dim3, int], int]) -> None:
        self.compiled, self.cache, self.env, self.team_size = compiled, cache, env, team_size
        self.layout = launch_format(compiled.params)
        self.binaries: dict[Dim3, CpuBinary] = {}

    def binary(self, block: Dim3) -> CpuBinary:
        found = self.binaries.get(block)
        if found is None:
            env = self.env.with_defines(*(f"{n}={d}" for n, d in zip(BLOCK_DIMS, block)))
            source = self.compiled.source
            key = cache_key("cpu", source, env, toolchain().arch, self.compiled.options)
            name = self.compiled.metadata.get("kernel", self.compiled.entry)
            label = f"{name} (block {block[0]}x{block[1]}x{block[2]})"
            found = self.cache.get_or_build(key, lambda: _compile(env, source), _load, label)
            self.binaries[block] = found
        return found

    def launch(self, grid: Dim3, block: Dim3, args: Sequence[Any], stream: HostStream) -> None:
        entry = self.binary(block).entry
        values = abi_values(self.compiled.params, args, lambda a, _: a.buffer.ctypes.data)
        threads = self.team_size(grid, block, stream.threads or host_threads())
        packed = self.layout.pack(*values, *grid, threads)
        keep = [a.buffer for a in args if hasattr(a, "buffer")]  # alive until the launch ran

        def run() -> None:
            entry(packed)
            keep.clear()

        stream.enqueue(run)


class CpuLoader(Loader):
    def __init__(self) -> None:
        self.cache = CompileCache("cpu", ".so")

    def load(self, compiled: CompiledKernel, device: Device) -> CpuKernel:
        return CpuKernel(compiled, self.cache, build_env(compiled.options), team_size)


class CpuQueue(HostQueue):
    """Host streams; a sub-device's streams use its share of the OpenMP threads."""

    def create_stream(self, device: Device) -> HostStream:
        """A part of a split device runs on its share of the threads; the whole device on
        KILN_NUM_THREADS or every core, read at each launch."""
        threads = device.handle if device.part is not None else None
        return self.track(device, HostStream(f"kiln-{device.name}", threads=threads))


def build_env(options: KernelOptions = DEFAULT_OPTIONS) -> BuildEnv:
    """The build environment, with the flags kernel options ask for."""
    chosen = options.as_dict()
    flags = [f for k, v in chosen.items() if v for f in OPTION_FLAGS.get(k, ())]
    return toolchain().env.with_flags(*flags)


_OPENMP_LOCK = threading.Lock()
_openmp = {"started": False}  # whether a loaded kernel has started the OpenMP runtime


def _passive_waits() -> dict[str, str]:
    """Idle OpenMP workers sleep instead of spinning, unless the user chose a policy.
    libgomp's default spins for milliseconds after each kernel: on a machine with other
    load that starves the Python thread and the next launch waits for a scheduler slice (a
    small launch measured 12 ms instead of 40 us, on 2 cores with 2 busy processes).
    Sleeping costs a wake-up per launch (about 60 us on an idle 2-core machine)."""
    if "OMP_WAIT_POLICY" in os.environ or "GOMP_SPINCOUNT" in os.environ:
        return {}
    return {"OMP_WAIT_POLICY": "PASSIVE"}


def _open(path: Path) -> ctypes.CDLL:
    """A kernel's library, loaded. The first one starts the OpenMP runtime with the wait
    policy exported for that moment only (the runtime reads it once: libgomp as it loads,
    LLVM's libomp at its first call), so the user's environment, and child processes,
    keep theirs; the cores this process may use are read before (`process_cores`)."""
    with _OPENMP_LOCK:
        if _openmp["started"]:
            return ctypes.CDLL(str(path))
        process_cores()  # read before the runtime may bind this thread to one core
        with settings.exported(_passive_waits()):
            library = ctypes.CDLL(str(path))
            if hasattr(library, "omp_get_max_threads"):
                library.omp_get_max_threads()
                _openmp["started"] = True
        return library


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


class CpuBackend(JITBackend):
    """Kernels compiled to C with OpenMP: blocks on cores, threads as SIMD-friendly loops."""

    name = "cpu"
    priority = 50
    intrinsic_namespaces = CpuEmitter.namespaces
    supports_recursion = True  # C functions may call themselves
    codegen_passes = (lower_thread_loops, widen_index_arithmetic)
    """After the shared pipeline (its device feature check: f16 needs gcc's _Float16; warp
    operations lowered for one-thread warps): the block's threads as explicit loops, with
    index arithmetic in 64 bits for gcc's vectoriser."""

    def __init__(self) -> None:
        self.allocator, self.queue = HostAllocator(), CpuQueue()
        self.compiler, self.loader = CpuCompiler(), CpuLoader()

    def availability(self) -> Availability:
        try:
            toolchain()
        except (ToolNotFoundError, OSError, subprocess.SubprocessError) as exc:
            return Availability(False, str(exc))
        return Availability(True)

    def device_handles(self) -> Sequence[tuple[Any, Capabilities]]:
        tc = toolchain()
        threads = host_threads()
        caps = Capabilities(
            backend="cpu", name=_cpu_name(), kind=DeviceKind.CPU,
            max_threads_per_block=MAX_THREADS_PER_BLOCK,
            max_block_dims=MAX_BLOCK_DIMS, max_grid_dims=MAX_GRID_DIMS,
            shared_memory_per_block=SHARED_MEMORY_PER_BLOCK, compute_units=threads,
            global_memory=host_memory_bytes(), warp_size=1, fp64=True, fp16=tc.fp16,
            atomics=atomic_capabilities(), unified_memory=True, arch=tc.arch,
        )
        return [(threads, caps)]

    def partition(self, device: Device, parts: int) -> list[tuple[int, Capabilities]]:
        """Sub-devices (`Partitionable`) with a share of the device's OpenMP threads each; a
        launch on one runs its blocks on that many threads, beside launches on the others."""
        threads: int = device.handle
        shares = [threads // parts + (k < threads % parts) for k in range(parts)]
        return [(share, replace(device.capabilities, compute_units=share)) for share in shares]

    def build_identity(self, device: Device) -> str:
        return toolchain().env.identity + device.capabilities.arch


def _compile(env: BuildEnv, source: str) -> bytes:
    with tempfile.TemporaryDirectory(prefix="kiln-cpu-") as tmp:
        out = str(Path(tmp) / "kernel.so")
        result = subprocess.run(compile_command(env, out, toolchain().libraries), input=source,
                                capture_output=True,
                                text=True)
        if result.returncode != 0:
            raise compile_error(result.stderr or result.stdout, source, "cpu")
        return Path(out).read_bytes()


def _load(entry: CacheEntry) -> CpuBinary:
    library = _open(entry.path)
    fn = library.kiln_entry
    fn.argtypes = [ctypes.c_char_p]
    fn.restype = None
    return CpuBinary(fn, library, entry.path)
