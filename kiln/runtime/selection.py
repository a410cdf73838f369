"""`kiln.backends()`, `kiln.devices()` and `kiln.device(spec)`."""

from __future__ import annotations

import os

from ..framework.registry import BackendEntry, registry
from .device import Device


class DeviceNotFoundError(LookupError):
    """No device matches the request; the message says why."""


def backends() -> list[BackendEntry]:
    """Every registered backend, highest priority first, with `available` and `reason`."""
    return registry.entries()


def devices() -> list[Device]:
    """Every device of every available backend, best first."""
    found = [d for e in registry.entries() for d in e.devices()]
    return sorted(found, key=lambda d: -d.priority)


def device(spec: str | Device | None = None) -> Device:
    """A device by spec (`"cuda:0"`, `"opencl"`, `"cpu"`), or the best one available.

    With no spec, `KILN_BACKEND` names the backend to use when set.
    """
    if isinstance(spec, Device):
        return spec
    if spec is None:
        spec = os.environ.get("KILN_BACKEND") or None
    if spec is None:
        found = devices()
        if not found:  # interp is always there unless disabled
            raise DeviceNotFoundError("no backend is available (see `kiln info`)")
        return found[0]
    name, _, index = spec.partition(":")
    try:
        entry = registry.get(name)
    except KeyError as exc:
        raise DeviceNotFoundError(str(exc.args[0])) from None
    if not entry.available:
        raise DeviceNotFoundError(f"backend {name!r} is not available: {entry.reason}")
    devs = sorted(entry.devices(), key=lambda d: -d.priority) if not index else entry.devices()
    if not devs:
        raise DeviceNotFoundError(f"backend {name!r} has no devices")
    if not index:
        return devs[0]
    if not index.isdigit() or int(index) >= len(devs):
        raise DeviceNotFoundError(f"{spec!r}: backend {name!r} has devices 0..{len(devs) - 1}")
    return devs[int(index)]
