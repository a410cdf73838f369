"""The backend contract (docs/backends.md), all of it, in small parts; public as `kiln.backend`.

A backend is one `Backend` object, registered with `kiln.backend.register_backend`. It says
who it is (`name`, `priority`, `execution_model`, `contract_version`), whether it can run
here (`availability`, default yes), which devices it has (`device_handles`), which IR
passes it wants (`pipeline`, the full shared one by default) and what outside the IR
changes its code (`build_identity`), and it is composed of parts, each a small class:

- `allocator: Allocator`  device memory: allocate, free, host<->device, device<->device
- `queue: Queue`          streams, events, synchronisation

and, by execution model (each has a driver in `kiln.execution.drivers`):

- JIT (`JITBackend`):   `compiler: Compiler` (lowered program + device + options ->
  `CompiledKernel`: entry name, parameter layout, source, binary, metadata) and
  `loader: Loader` (`CompiledKernel` -> a `Launchable` bound to the device);
- DIRECT (`DirectBackend`): `execute(program, grid, block, args, stream)` runs lowered IR;
- CUSTOM (`CustomBackend`): `load_kernel(KernelRequest, device) -> Launchable` receives the
  kernel before the frontend (Python function, argument types, options) and owns
  compilation and caching; the launchable gets the launch configuration.

Every optional capability is a protocol below, checked with `supports(obj, Protocol)` (an
`isinstance` remembered per class) by the part of kiln that uses it, never looked up by
name: `ZeroCopy`, `SubBuffers` and `PeerCopy` (allocator), `FastLaunch` and `RunsProgram`
(launchables), `Partitionable`, `RawKernels`, `KernelGraphs`, `CudaArrayInterop`,
`DLPackInterop` (backend). Everything else without a default is required: `device_handles`,
the allocator's four methods, the queue's streams, and the model's part (a compiler's
`generate_source` and `compile` and a loader's `load`; `execute`; `load_kernel`).

A launch's `args` are, in parameter order, `DeviceArray`s for arrays and NumPy scalars of
the parameter types for scalars; `stream` is the backend's own stream handle (from
`Queue.create_stream`). Kernels and users never see backend types.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar, runtime_checkable

import numpy as np

from ..ir.abi import AbiParam
from ..ir.enums import ExtensibleEnum
from ..ir.intrinsics import Spelling, check_spellings, implementation_of
from ..ir.nodes import Program
from ..ir.passes import pipeline_for
from ..ir.target import Capabilities as Capabilities  # re-exported: part of the contract
from ..ir.target import DeviceKind as DeviceKind
from ..ir.target import Dim3 as Dim3
from ..ir.types import Type
from ..options import KernelOptions

if TYPE_CHECKING:
    from typing_extensions import TypeIs  # typing.TypeIs from Python 3.13

    from ..runtime.device import Device

CONTRACT_VERSION = 3
"""The version of this contract. A backend states the one it was written for
(`Backend.contract_version`); registering one kiln does not support is a `ContractError`
naming both. Version 2: events timed on the host by default, one `FastLaunch` protocol.
Version 3: `FastLaunch.launch_target` gives a target that takes each launch's grid and
block, so that a launch whose dimensions change keeps the fast path; `KernelGraphs`
(native graphs of recorded launches, updated in place) replaces `GraphCapture`."""

P = TypeVar("P")
Pass = Callable[[Program], Program]


class ExecutionModel(ExtensibleEnum):
    JIT: ClassVar[ExecutionModel]
    DIRECT: ClassVar[ExecutionModel]
    CUSTOM: ClassVar[ExecutionModel]


for _n in ("JIT", "DIRECT", "CUSTOM"):
    ExecutionModel.register(_n)




@dataclass
class HostTimedEvent:
    """The default `Queue`'s event: the host's clock when it was recorded."""

    time: float = 0.0


@dataclass(frozen=True)
class Availability:
    available: bool
    reason: str = ""


# ---------------------------------------------------------------- memory and queues


class Allocator(ABC):
    """Device memory. Buffers are the backend's own objects; copies are ordered on
    `stream` (a handle from `Queue.create_stream`) and may return before they finish."""

    @abstractmethod
    def allocate(self, device: Device, nbytes: int) -> Any: ...

    def free(self, buffer: Any) -> None:  # noqa: B027 - optional: most buffers free on GC
        """Release a buffer (default: let garbage collection do it)."""

    @abstractmethod
    def copy_host_to_device(self, dst: Any, src: np.ndarray, stream: Any) -> None: ...

    @abstractmethod
    def copy_device_to_host(self, dst: np.ndarray, src: Any, stream: Any) -> None: ...

    @abstractmethod
    def copy_device_to_device(self, dst: Any, src: Any, nbytes: int, stream: Any) -> None: ...


@runtime_checkable
class ZeroCopy(Protocol):
    """An allocator of host-memory devices: a buffer sharing a NumPy array's memory."""

    def wrap_host(self, device: Device, array: np.ndarray) -> Any | None:
        """The buffer, or None when `array` cannot be shared (e.g. not contiguous)."""


@runtime_checkable
class SubBuffers(Protocol):
    """An allocator whose buffers have sub-buffers sharing their memory: device-array views
    (`a[lo:hi]`) and the arrays kernels receive for them."""

    def sub_buffer(self, device: Device, buffer: Any, offset: int, nbytes: int) -> Any:
        """`nbytes` of `buffer` from byte `offset` (a multiple of `sub_buffer_alignment`)."""

    def sub_buffer_alignment(self, device: Device) -> int:
        """The byte multiple at which sub-buffers may start."""


@runtime_checkable
class PeerCopy(Protocol):
    """An allocator that copies between two of its backend's devices directly, queued on the
    destination's stream and ordered after the work queued on `src_stream`."""

    def copy_peer(self, dst: Any, src: Any, nbytes: int, src_stream: Any,
                  stream: Any) -> None: ...


class Queue(ABC):
    """Streams (ordered work queues) and events (points in a stream, timed).

    Only streams are required. The event methods default to events timed on the host: a
    recorded event waits for its stream and reads the host's clock, which is exact for a
    synchronous queue (work is done when the launch returns) and a correct, coarser answer
    for any other; a backend with device-side events overrides all four."""

    @abstractmethod
    def create_stream(self, device: Device) -> Any: ...

    @abstractmethod
    def synchronize_stream(self, stream: Any) -> None: ...

    def create_event(self, device: Device) -> Any:
        """A new event (default: a `HostTimedEvent`)."""
        return HostTimedEvent()

    def record_event(self, event: Any, stream: Any) -> None:
        """Mark the point after the work queued on `stream` so far (default: wait for the
        stream, then read the host's clock)."""
        self.synchronize_stream(stream)
        event.time = time.perf_counter()

    def synchronize_event(self, event: Any) -> None:  # noqa: B027 - optional, see above
        """Wait for the work before a recorded event (default: `record_event` waited)."""

    def elapsed_ms(self, start: Any, end: Any) -> float:
        """Milliseconds between two recorded events."""
        return float((end.time - start.time) * 1e3)

    def query_event(self, event: Any) -> bool:
        """Whether the work before a recorded event is done, without waiting. A backend
        that cannot ask waits for the event instead (and so answers True)."""
        self.synchronize_event(event)
        return True

    def wait_event(self, stream: Any, event: Any) -> None:
        """Have the work queued on `stream` from now on wait for a recorded event of the
        same device. A backend without a device-side wait has the host wait instead."""
        self.synchronize_event(event)

    def keep_dropped(self, stream: Any) -> Any | None:
        """What the device keeps of a dropped stream until its next synchronisation, which
        passes it to `synchronize_stream`: the stream itself by default; None where
        `synchronize_device` waits for the work of dropped streams anyway."""
        return stream

    def stream_idle(self, stream: Any) -> bool:
        """Whether the work queued on `stream` is done and has no failure to report,
        without waiting; False where the backend cannot tell (a dropped stream is then
        kept until the device's next synchronisation)."""
        return False

    def synchronize_device(self, device: Device) -> None:
        """Wait for every stream of the device (a backend may do this more directly)."""
        for stream in list(device.streams):
            self.synchronize_stream(stream.handle)


# ---------------------------------------------------------------- compiling and loading


@dataclass(frozen=True)
class CompiledKernel:
    """What a `Compiler` makes of one lowered program: plain, picklable data (the kernel
    cache keeps it on disk), loaded onto a device by the backend's `Loader`."""

    entry: str
    """The entry point's name in `source` / `binary`."""
    params: tuple[AbiParam, ...]
    """The parameter layout: the kernel's parameters flattened (`kiln.ir.abi`)."""
    source: str = ""
    binary: bytes | None = None
    """The compiled image, or None where the loader builds it (per block shape, or from a
    compile cache keyed by the source)."""
    options: KernelOptions = field(default_factory=KernelOptions)
    metadata: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    """Anything else the loader needs (a target name, build flags, ...); picklable."""

    def __reduce__(self) -> tuple[Any, ...]:  # a mappingproxy does not pickle
        return (_compiled_kernel, (self.entry, self.params, self.source, self.binary,
                                   self.options, dict(self.metadata)))


def _compiled_kernel(entry: str, params: tuple[AbiParam, ...], source: str,
                     binary: bytes | None, options: KernelOptions,
                     metadata: dict[str, Any]) -> CompiledKernel:
    return CompiledKernel(entry, params, source, binary, options, MappingProxyType(metadata))


class Compiler(ABC):
    """Lowered program + device + options -> a `CompiledKernel` (JIT backends)."""

    @abstractmethod
    def generate_source(self, program: Program) -> str:
        """The source code for a lowered program (what `kiln compile` prints)."""

    @abstractmethod
    def compile(self, program: Program, device: Device,
                options: KernelOptions) -> CompiledKernel: ...

    def intrinsic_implementation(self, name: str) -> Spelling:
        """How the generated code spells intrinsic `name` (a C-family compiler: its
        emitter's spelling), None where the compiler does not say (default): then its
        backend's own lookup decides (`Backend.intrinsic_implementation`)."""
        return None


class Launchable(Protocol):
    """A kernel bound to a device, ready to run: what a `Loader` (JIT) or a `CustomBackend`
    returns, and what `RawKernels.load_raw` returns."""

    def launch(self, grid: Dim3, block: Dim3, args: Sequence[Any], stream: Any) -> None: ...


class Loader(ABC):
    """A `CompiledKernel` -> a `Launchable` bound to one device (OCANNL's link)."""

    @abstractmethod
    def load(self, compiled: CompiledKernel, device: Device) -> Launchable: ...


@runtime_checkable
class FastLaunch(Protocol):
    """A launchable that lays a launch out once and replays it: the executor remembers, per
    device and stream, `launch_target(args, stream)` (laid out like `args`) and calls it as
    `f(grid, block, args)` with each later launch's validated dimensions and arguments
    (scalars as the user's checked Python numbers; the target converts them), and
    `kernel.prepare(...)` calls what `prepare_launch(...)` returns. Without it, both call
    `launch` with the arguments converted."""

    def launch_target(self, args: Sequence[Any], stream: Any
                      ) -> Callable[[Dim3, Dim3, Sequence[Any]], None]: ...

    def prepare_launch(self, grid: Dim3, block: Dim3, args: Sequence[Any],
                       stream: Any) -> Callable[[], None]: ...


@runtime_checkable
class RunsProgram(Protocol):
    """A CUSTOM backend's launchable that runs kiln's lowered IR (it ran kiln's frontend and
    pipeline): the executor then splits record, variant and vector arguments for its
    parameters, passes its run-time checks' status and copies back only what it writes."""

    program: Program


# ---------------------------------------------------------------- optional backend protocols


@runtime_checkable
class Partitionable(Protocol):
    """Devices that split into sub-devices (`Device.split`: OpenCL's device fission,
    OCANNL's multicore backend), each with part of the compute units and its own queues,
    sharing the parent's memory."""

    def partition(self, device: Device, parts: int) -> Sequence[tuple[Any, Capabilities]]:
        """`parts` (handle, capabilities) pairs, one per sub-device."""
        ...


@runtime_checkable
class RawKernels(Protocol):
    """`kiln.RawKernel`: hand-written source or a binary module, launched as is."""

    def load_raw(self, code: str | bytes, name: str, device: Device,
                 options: KernelOptions) -> Launchable: ...


GraphLaunch = tuple[Launchable, Dim3, Dim3, Sequence[Any]]
"""One recorded launch of a `kiln.capture` graph: the launchable, grid, block and the device
arguments its `launch` takes."""


@runtime_checkable
class KernelGraphs(Protocol):
    """`kiln.capture` replayed as native graphs: each run of recorded launches becomes one
    graph (None: not one this backend can build), whose nodes can be set again."""

    def build_graph(self, device: Device, launches: Sequence[GraphLaunch]) -> Any | None: ...

    def update_graph(self, graph: Any, index: int, launch: GraphLaunch) -> None: ...

    def replay_graph(self, graph: Any, stream: Any) -> None: ...


@runtime_checkable
class CudaArrayInterop(Protocol):
    """`DeviceArray.__cuda_array_interface__` for arrays of this backend."""

    def cuda_array_interface(self, array: Any) -> dict[str, Any]:
        """`array` is a `kiln.DeviceArray` of this backend."""


@runtime_checkable
class DLPackInterop(Protocol):
    """`DeviceArray.__dlpack__` / `__dlpack_device__` for arrays of this backend."""

    def dlpack(self, array: Any, stream: Any) -> Any: ...

    def dlpack_device(self, array: Any) -> tuple[int, int]: ...


_SUPPORTS: dict[tuple[type, type], bool] = {}


def supports(obj: object, protocol: type[P]) -> TypeIs[P]:
    """Whether `obj` implements the optional `protocol`: `isinstance`, remembered per class
    (capabilities are declared by classes; a protocol check costs 20-50 us on Python 3.11,
    a lookup here 0.1 us). `obj` is an instance: the answer is remembered for its class,
    so a class passed here would answer for every class."""
    if isinstance(obj, type):
        raise TypeError(f"kiln.backend.supports takes an object, not the class {obj.__name__}: "
                        f"ask about an instance")
    key = (type(obj), protocol)
    found = _SUPPORTS.get(key)
    if found is None:
        found = _SUPPORTS[key] = isinstance(obj, protocol)
    return found


# ---------------------------------------------------------------- the backend


class Backend(ABC):
    """The contract every backend implements; see the module docstring."""

    name: ClassVar[str]
    contract_version: ClassVar[int] = CONTRACT_VERSION
    """The contract version the backend was written for (`CONTRACT_VERSION`)."""
    priority: ClassVar[int] = 0
    """Default priority when registered without one (higher wins `kiln.device()`)."""
    execution_model: ClassVar[ExecutionModel]
    allocator: Allocator
    queue: Queue
    spellings: ClassVar[Mapping[str, Spelling]] = {}
    """The backend's own implementations of intrinsics, a direct backend's callables (the
    interp's); a JIT backend's come from its compiler (`Compiler.intrinsic_implementation`)."""
    intrinsic_namespaces: ClassVar[tuple[str, ...]] = ()
    """Where implementations that extensions register (`kiln.backend.intrinsics.implement`)
    are found for this backend, most specific first."""
    supports_recursion: ClassVar[bool] = False
    """Whether device functions may call themselves (directly or through others) natively;
    where not, the shared pipeline inlines recursion to the depth the user sets."""
    checks_bounds: ClassVar[bool] = False
    """Whether the backend checks every array index itself (the interp). Where not, a kernel
    with `debug=True` gets the shared bounds-check pass (`kiln.ir.passes.bounds`), which
    needs only `atomic_cas` on i32 and the index intrinsics: a new backend gets it free."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        check_spellings(cls)

    def availability(self) -> Availability:
        """Whether the backend can run here, and if not why. Must not raise. Default:
        available (a backend that needs nothing outside Python)."""
        return Availability(True)

    def intrinsic_implementation(self, name: str) -> Spelling:
        """What this backend runs for intrinsic `name`, None if nothing (the pipeline then
        lowers a registered operation, or refuses the kernel): by default its class's
        `spellings` and what extensions registered under `intrinsic_namespaces`
        (`kiln.ir.intrinsics.implementation_of` gives the order)."""
        return implementation_of(type(self), name, "intrinsic_namespaces")

    @abstractmethod
    def device_handles(self) -> Sequence[tuple[Any, Capabilities]]:
        """Enumerate devices as (backend handle, capabilities) pairs."""

    def device_priority(self, capabilities: Capabilities, backend_priority: int) -> int:
        """Priority of one device; a backend may rank device kinds differently."""
        return backend_priority

    codegen_passes: ClassVar[tuple[Pass, ...]] = ()
    """Passes this backend's code generator needs after the shared ones, whatever the device
    (also when code is generated without one: `kiln compile`, `kiln build`)."""

    def pipeline(self, device: Device) -> Sequence[Pass]:
        """The IR passes this backend wants, in order (after the frontend's checks): the full
        shared pipeline for `device` (feature check, recursion bounding, lowering of
        aggregates and warps, ...), then `codegen_passes`. Override to add or drop passes."""
        return pipeline_for(device, then=self.codegen_passes)

    def build_identity(self, device: Device) -> str:
        """Everything outside the IR that changes compiled code (for the in-memory cache)."""
        return device.capabilities.arch


class JITBackend(Backend):
    """Generates code, compiles, loads and launches: `compiler` and `loader` parts."""

    execution_model = ExecutionModel.JIT
    compiler: Compiler
    loader: Loader

    def intrinsic_implementation(self, name: str) -> Spelling:
        """The compiler's spelling of intrinsic `name`, else the backend's own lookup."""
        spelled = self.compiler.intrinsic_implementation(name)
        return spelled if spelled is not None else super().intrinsic_implementation(name)


class DirectBackend(Backend):
    """Executes the lowered IR with host machinery: no code, no toolchain."""

    execution_model = ExecutionModel.DIRECT

    @abstractmethod
    def execute(self, program: Program, grid: Dim3, block: Dim3, args: Sequence[Any],
                stream: Any) -> None: ...


@dataclass(frozen=True)
class KernelRequest:
    """What a CUSTOM backend receives instead of IR: the kernel as the user wrote it."""

    name: str
    pyfunc: Callable[..., Any]
    """The Python function (`kiln.frontend.build_program(pyfunc, arg_types)` gives kiln's
    IR for it, should the backend want it)."""
    arg_types: tuple[Type, ...]
    options: KernelOptions
    frontend: Callable[[], Program]
    """kiln's frontend on this kernel: the typed, checked IR for `arg_types` (cached), with
    the bounds checks of `debug=True` (`kiln.ir.passes.bounds`)."""


class CustomBackend(Backend):
    """Receives the kernel before the frontend and owns compilation and caching."""

    execution_model = ExecutionModel.CUSTOM

    @abstractmethod
    def load_kernel(self, request: KernelRequest, device: Device) -> Launchable:
        """A launchable for one argument-type signature on `device` (the executor keeps it
        per kernel, signature and device; the launchable receives grid and block)."""
