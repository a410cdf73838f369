"""The backend registry: priorities, entry points, KILN_BACKEND and KILN_DISABLE_<NAME>."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import import_module
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

from .. import settings
from ..errors import ContractError
from ..ir.passes import lower_thread_loops, pipeline_for
from .backend import (
    CONTRACT_VERSION,
    Allocator,
    Availability,
    Backend,
    Capabilities,
    Compiler,
    ExecutionModel,
    JITBackend,
    Loader,
    Pass,
    Queue,
)

if TYPE_CHECKING:
    from ..runtime.device import Device

ENTRY_POINT_GROUP = "kiln.backends"
SUPPORTED_VERSIONS = (CONTRACT_VERSION,)
"""The contract versions a backend may declare."""
BUILTIN_BACKENDS = (
    "kiln.builtin_backends.interp:backend",
    "kiln.builtin_backends.cpu:backend",
    "kiln.builtin_backends.cuda:backend",
    "kiln.builtin_backends.opencl:backend",
    "kiln.builtin_backends.serial:backend",
)


@dataclass
class BackendEntry:
    backend: Backend
    priority: int
    _availability: Availability | None = None
    device_cache: list[Device] | None = None
    """Its devices, made on first use by `kiln.runtime.device.devices_of`."""

    @property
    def name(self) -> str:
        return self.backend.name

    @property
    def availability(self) -> Availability:
        if self._availability is None:
            self._availability = self._probe()
        return self._availability

    @property
    def available(self) -> bool:
        return self.availability.available

    @property
    def reason(self) -> str:
        return self.availability.reason

    def _probe(self) -> Availability:
        if settings.backend_disabled(self.name):
            return Availability(False, f"disabled by KILN_DISABLE_{self.name.upper()}")
        try:
            return self.backend.availability()
        except Exception as exc:  # a broken plugin must not break kiln
            return Availability(False, f"availability check failed: {exc}")


class BackendRegistry:
    def __init__(self) -> None:
        self._entries: dict[str, BackendEntry] = {}
        self._discovered = False
        self._discovering = threading.RLock()

    def register(self, backend: Backend, priority: int | None = None) -> BackendEntry:
        check_contract(backend)
        entry = BackendEntry(backend, backend.priority if priority is None else priority)
        self._entries[backend.name] = entry
        return entry

    def _discover(self) -> None:
        """Load every backend once; threads that ask meanwhile wait for all of them (a
        second thread must not see a half-filled registry: "no backend is available")."""
        if self._discovered:
            return
        with self._discovering:
            if self._discovered:
                return
            for spec in BUILTIN_BACKENDS:
                self._load(spec)
            for ep in entry_points(group=ENTRY_POINT_GROUP):
                self._load(ep.value, ep.name)
            self._discovered = True

    def _load(self, spec: str, name: str | None = None) -> None:
        """Import `module:attr` and register it unless already registered by name.

        A backend module registers itself on import (`register_backend(...)`); a plugin's
        attribute may instead be a backend object, registered here with its `priority`.
        """
        module_name, _, attr = spec.partition(":")
        label = name or module_name.rsplit(".", 1)[-1]
        try:
            module = import_module(module_name)
            obj = getattr(module, attr) if attr else None
        except Exception as exc:
            self._broken(label, f"failed to import: {exc}")
            return
        if isinstance(obj, Backend) and obj.name not in self._entries:
            try:
                self.register(obj)
            except TypeError as exc:  # a plugin that misses a part of the contract
                self._broken(obj.name, str(exc))

    def _broken(self, name: str, reason: str) -> None:
        """A plugin that cannot be used is listed as unavailable, saying why, and never
        stops kiln (or the other backends) from working."""
        if name not in self._entries:
            self._entries[name] = BackendEntry(_Broken(name, reason), 0)

    def entries(self) -> list[BackendEntry]:
        self._discover()
        return sorted(self._entries.values(), key=lambda e: -e.priority)

    def get(self, name: str) -> BackendEntry:
        self._discover()
        if name not in self._entries:
            known = ", ".join(sorted(self._entries))
            raise KeyError(f"no backend named {name!r} (registered: {known})")
        return self._entries[name]


class _Broken(Backend):
    """Stands in for a plugin backend that failed to import or to meet the contract, to
    report why."""

    execution_model = ExecutionModel.Undefined

    def __init__(self, name: str, reason: str) -> None:
        self.name = name  # type: ignore[misc]
        self._reason = reason

    def availability(self) -> Availability:
        return Availability(False, self._reason)

    def device_handles(self) -> Sequence[tuple[Any, Capabilities]]:
        return []


def check_contract(backend: Backend) -> None:
    """A backend of another contract version, or missing a part of the contract, is a
    `ContractError` at registration, naming the versions or the part."""
    if not isinstance(backend, Backend):
        raise ContractError(f"register_backend takes a kiln.backend.Backend, got {backend!r}")
    version = backend.contract_version
    if version not in SUPPORTED_VERSIONS:
        raise ContractError(
            f"backend {backend.name!r} declares contract version {version!r}, but this kiln "
            f"supports version {CONTRACT_VERSION} (kiln.backend.CONTRACT_VERSION): update "
            f"the backend, or a kiln that supports its version")
    parts: dict[str, tuple[type, Callable[[], Any]]] = {
        "allocator": (Allocator, lambda: backend.allocator),
        "queue": (Queue, lambda: backend.queue)}
    if isinstance(backend, JITBackend):
        jit = backend
        parts.update(compiler=(Compiler, lambda: jit.compiler), loader=(Loader, lambda: jit.loader))
    for attr, (part, read) in parts.items():
        try:
            value = read()
        except AttributeError:
            value = None
        if not isinstance(value, part):
            raise ContractError(f"backend {backend.name!r} needs a `{attr}`: a kiln.backend."
                                f"{part.__name__} (see docs/backends.md), got {value!r}")


registry = BackendRegistry()


def target_pipeline(backend: Backend) -> Sequence[Pass]:
    """For code generated without a device (`kiln build` for another machine): the shared
    passes that need no device, with what depends on the backend alone (recursion bounded
    where it cannot recurse, warps of one thread where threads run as loops, as in-process
    compiles do), then its `codegen_passes`."""
    loops = lower_thread_loops in backend.codegen_passes
    return pipeline_for(None, backend=backend, single_lane_warps=loops,
                        then=backend.codegen_passes)


def register_backend(backend: Backend, priority: int | None = None) -> None:
    """Register a backend object; higher priority (default: the backend's `priority`) wins
    when choosing a default device."""
    registry.register(backend, priority)
