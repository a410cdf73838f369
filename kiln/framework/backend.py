"""The backend contract (SPEC §3).

A backend is one object. It says who it is (`name`, `execution_model`), whether it can run
here (`availability`), which devices it has and what they can do, how it moves memory,
which IR pass pipeline it wants, and how it runs a kernel:

- JIT:    generate_source(program) -> str; compile(source, device, options) -> code;
          link(code, device) -> routine; launch(routine, grid, block, args, stream);
          optionally export_code(code) / import_code(exported, device) for the kernel cache
- DIRECT: execute(program, grid, block, args, stream)
- CUSTOM: run(program, grid, block, args, stream)

`args` are, in parameter order, `DeviceArray`s for array parameters and NumPy scalars
(already of the parameter's type) for scalar parameters. Streams and events are backend
handles wrapped by `kiln.Stream` / `kiln.Event`; backends never see user-facing types
other than `DeviceArray`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ..ir.enums import ExtensibleEnum
from ..ir.nodes import Program
from ..ir.passes import default_pipeline
from ..ir.target import Capabilities as Capabilities  # re-exported: part of the contract
from ..ir.target import DeviceKind as DeviceKind
from ..ir.target import Dim3 as Dim3
from ..options import KernelOptions

if TYPE_CHECKING:
    from ..runtime.device import Device

Pass = Callable[[Program], Program]


class ExecutionModel(ExtensibleEnum):
    JIT: ClassVar[ExecutionModel]
    DIRECT: ClassVar[ExecutionModel]
    CUSTOM: ClassVar[ExecutionModel]


for _n in ("JIT", "DIRECT", "CUSTOM"):
    ExecutionModel.register(_n)


@dataclass(frozen=True)
class Availability:
    available: bool
    reason: str = ""


class Backend(ABC):
    """The contract every backend implements; see the module docstring."""

    name: ClassVar[str]
    execution_model: ClassVar[ExecutionModel]
    intrinsic_namespaces: ClassVar[tuple[str, ...]] = ()
    """Where this backend's intrinsic implementations live in the registry, most specific first."""
    supports_recursion: ClassVar[bool] = False
    """Whether device functions may call themselves (directly or through others) natively;
    where not, the shared pipeline inlines recursion to the depth the user sets."""

    @abstractmethod
    def availability(self) -> Availability:
        """Whether the backend can run here, and if not why. Must not raise."""

    @abstractmethod
    def device_handles(self) -> Sequence[tuple[Any, Capabilities]]:
        """Enumerate devices as (backend handle, capabilities) pairs."""

    def device_priority(self, capabilities: Capabilities, backend_priority: int) -> int:
        """Priority of one device; a backend may rank device kinds differently."""
        return backend_priority

    def pipeline(self, device: Device) -> Sequence[Pass]:
        """The IR passes this backend wants, in order (after the frontend's checks)."""
        return default_pipeline()

    def build_identity(self, device: Device) -> str:
        """Everything outside the IR that changes compiled code (for the in-memory cache)."""
        return device.capabilities.arch

    # ---- memory
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

    def wrap_host(self, device: Device, array: np.ndarray) -> Any | None:
        """Zero-copy: a buffer sharing `array`'s memory, or None when not possible."""
        return None

    def sub_buffer(self, device: Device, buffer: Any, offset: int, nbytes: int) -> Any | None:
        """A buffer for `nbytes` of `buffer` from byte `offset` (a multiple of
        `sub_buffer_alignment`), sharing its memory, for device-array views (`a[lo:hi]`);
        None when the backend has none."""
        return None

    def sub_buffer_alignment(self, device: Device) -> int:
        """The byte multiple at which sub-buffers may start (a kernel's arrays too)."""
        return 1

    # ---- streams and events
    @abstractmethod
    def create_stream(self, device: Device) -> Any: ...

    @abstractmethod
    def synchronize_stream(self, stream: Any) -> None: ...

    @abstractmethod
    def create_event(self, device: Device) -> Any: ...

    @abstractmethod
    def record_event(self, event: Any, stream: Any) -> None: ...

    @abstractmethod
    def synchronize_event(self, event: Any) -> None: ...

    @abstractmethod
    def elapsed_ms(self, start: Any, end: Any) -> float: ...

    def synchronize_device(self, device: Device) -> None:
        """Wait for every stream of the device (a backend may do this more directly)."""
        for stream in list(device.streams):
            self.synchronize_stream(stream.handle)


class JITBackend(Backend):
    execution_model = ExecutionModel.JIT

    @abstractmethod
    def generate_source(self, program: Program) -> str: ...

    @abstractmethod
    def compile(self, source: str, device: Device, options: KernelOptions) -> Any: ...

    def link(self, code: Any, device: Device) -> Any:
        """Bind compiled code to a device (default: the code is the routine)."""
        return code

    def export_code(self, code: Any, source: str, options: KernelOptions) -> Any:
        """Opt in to the kernel cache (`kiln.execution.kernelcache`): a picklable form of
        `code` (compiled from `source` with `options`) that `import_code` turns back into
        code in a later process, which then skips the frontend, the passes and code
        generation. A backend whose `compile` finds binaries by their source in the compile
        cache may return `(source, options)` and compile again on import. None keeps this
        code out; a backend that does not override this is not cached that way."""
        return None

    def import_code(self, exported: Any, device: Device) -> Any:
        """Compiled code again, from what `export_code` returned (in another process)."""
        raise NotImplementedError(f"the {self.name} backend does not export code")

    @abstractmethod
    def launch(self, routine: Any, grid: Dim3, block: Dim3, args: Sequence[Any],
               stream: Any) -> None: ...


class DirectBackend(Backend):
    execution_model = ExecutionModel.DIRECT

    @abstractmethod
    def execute(self, program: Program, grid: Dim3, block: Dim3, args: Sequence[Any],
                stream: Any) -> None: ...


class CustomBackend(Backend):
    execution_model = ExecutionModel.CUSTOM

    @abstractmethod
    def run(self, program: Program, grid: Dim3, block: Dim3, args: Sequence[Any],
            stream: Any) -> None: ...
