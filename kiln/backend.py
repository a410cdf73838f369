"""The backend contract, importable from one place: everything a backend author uses.

Kernel authors need none of it (`kiln` holds their API). A backend subclasses one of
`JITBackend`, `DirectBackend` or `CustomBackend`, gives it an `allocator` and a `queue`
(`HostAllocator()` and `HostQueue()` for host-memory devices) and registers it with
`register_backend`, which checks its parts and its `contract_version` against
`CONTRACT_VERSION`. docs/backends.md is the guide.
"""

from __future__ import annotations

from .aot.actions import (
    Action,
    ActionError,
    ActionRequest,
    SpecialisedKernel,
    register_action,
    register_action_target,
)
from .aot.library import LibraryTarget, register_library_target
from .errors import ContractError
from .execution.drivers import ExecutionDriver, register_execution_model
from .framework.backend import (
    CONTRACT_VERSION,
    Allocator,
    Availability,
    Backend,
    Capabilities,
    CompiledKernel,
    Compiler,
    CudaArrayInterop,
    CustomBackend,
    DeviceKind,
    Dim3,
    DirectBackend,
    DLPackInterop,
    ExecutionModel,
    FastLaunch,
    GraphLaunch,
    HostTimedEvent,
    JITBackend,
    KernelGraphs,
    KernelRequest,
    Launchable,
    Loader,
    Partitionable,
    Pass,
    PeerCopy,
    Queue,
    RawKernels,
    RunsProgram,
    SubBuffers,
    ZeroCopy,
    supports,
)
from .framework.registry import register_backend
from .ir.enums import ExtensibleEnum, MemorySpace
from .ir.intrinsics import Intrinsic, IntrinsicTypeError, Variance, atomic_capabilities, intrinsics
from .lang.extend import register_intrinsic, register_operation
from .runtime.host import HostAllocator, HostQueue, HostStream

__all__ = [
    "CONTRACT_VERSION", "Action", "ActionError", "ActionRequest", "Allocator", "Availability",
    "Backend", "Capabilities", "CompiledKernel", "Compiler", "ContractError",
    "CudaArrayInterop", "CustomBackend", "DLPackInterop", "DeviceKind", "Dim3", "DirectBackend",
    "ExecutionDriver", "ExecutionModel", "ExtensibleEnum", "FastLaunch",
    "GraphLaunch", "HostAllocator", "HostQueue", "HostStream", "HostTimedEvent", "Intrinsic",
    "IntrinsicTypeError", "JITBackend", "KernelGraphs", "KernelRequest", "Launchable",
    "LibraryTarget", "Loader", "MemorySpace", "Partitionable", "Pass", "PeerCopy", "Queue",
    "RawKernels", "RunsProgram", "SpecialisedKernel", "SubBuffers", "Variance", "ZeroCopy",
    "atomic_capabilities", "intrinsics", "register_action", "register_action_target",
    "register_backend", "register_execution_model", "register_intrinsic",
    "register_library_target", "register_operation", "supports",
]
