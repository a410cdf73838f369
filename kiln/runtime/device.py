"""Devices, streams and events: user-facing wrappers over backend handles."""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from .status import StatusWatch, raise_failed
from .stdio import flush as flush_c_stdout

if TYPE_CHECKING:
    from ..framework.backend import Backend, Capabilities


@runtime_checkable
class Partitionable(Protocol):
    """Optional backend protocol: devices that split into sub-devices (OpenCL's device
    fission, OCANNL's multicore backend), each with part of the compute units and its
    own queues, sharing the parent's memory."""

    def partition(self, device: Device, parts: int) -> Sequence[tuple[Any, Capabilities]]:
        """`parts` (handle, capabilities) pairs, one per sub-device."""
        ...


class Device:
    """One device of one backend, named `backend:index` (e.g. `cuda:0`); a sub-device from
    `split` is `backend:index.part` (e.g. `cpu:0.1`)."""

    def __init__(self, backend: Backend, index: int, handle: Any, capabilities: Capabilities,
                 priority: int, part: int | None = None) -> None:
        self.backend = backend
        self.index = index
        self.handle = handle
        self.capabilities = capabilities
        self.priority = priority
        self.part = part
        self._default_stream: Stream | None = None
        self.streams: weakref.WeakSet[Stream] = weakref.WeakSet()

    @property
    def name(self) -> str:
        suffix = "" if self.part is None else f".{self.part}"
        return f"{self.backend.name}:{self.index}{suffix}"

    def split(self, parts: int) -> list[Device]:
        """This device as `parts` sub-devices that run their launches concurrently, each on
        its share of the compute units (the cpu backend splits its OpenMP threads). Arrays
        of one part are in memory the others can copy from directly."""
        if not isinstance(self.backend, Partitionable):
            raise ValueError(f"{self.name} cannot be split: the {self.backend.name} backend "
                             "does not partition its devices")
        if self.part is not None:
            raise ValueError(f"{self.name} is already a part of {self.backend.name}:"
                             f"{self.index}: split the whole device")
        if not isinstance(parts, int) or not 1 <= parts <= self.capabilities.compute_units:
            raise ValueError(f"{self.name} splits into 1 to {self.capabilities.compute_units} "
                             f"parts (its compute units), not {parts!r}")
        return [Device(self.backend, self.index, handle, caps, self.priority, part)
                for part, (handle, caps) in enumerate(self.backend.partition(self, parts))]

    def __repr__(self) -> str:
        return f"<kiln.Device {self.name} ({self.capabilities.name})>"

    @property
    def default_stream(self) -> Stream:
        if self._default_stream is None:
            self._default_stream = Stream(self)
        return self._default_stream

    def synchronize(self) -> None:
        """Wait for all work queued on this device (and raise a failed run-time check)."""
        self.backend.synchronize_device(self)
        flush_c_stdout()
        raise_failed([watch for stream in list(self.streams) for watch in stream.take_pending()])


class Stream:
    """An in-order queue of work on one device."""

    def __init__(self, device: Device | None = None) -> None:
        from .selection import device as default_device

        self.device = device or default_device()
        self.handle = self.device.backend.create_stream(self.device)
        self.device.streams.add(self)
        self.pending: dict[int, StatusWatch] = {}  # launches with run-time checks

    def synchronize(self) -> None:
        """Wait for the work queued on this stream (and raise a failed run-time check)."""
        self.device.backend.synchronize_stream(self.handle)
        flush_c_stdout()
        raise_failed(self.take_pending())

    def take_pending(self) -> list[StatusWatch]:
        """The run-time checks of the launches since the last synchronisation (removed)."""
        watches = list(self.pending.values())
        self.pending.clear()
        return watches

    def __repr__(self) -> str:
        return f"<kiln.Stream on {self.device.name}>"


class Event:
    """A point in a stream: `event.synchronize()` waits for the work queued before it, and
    `start.elapsed_time(end)` is the milliseconds between two of them (as in Numba, CuPy
    and PyTorch)."""

    def __init__(self, device: Device | None = None) -> None:
        from .selection import device as default_device

        self.device = device or default_device()
        self.handle = self.device.backend.create_event(self.device)
        self._recorded = False
        self._watches: list[StatusWatch] = []

    def record(self, stream: Stream | None = None) -> Event:
        stream = stream or self.device.default_stream
        self.device.backend.record_event(self.handle, stream.handle)
        self._recorded = True
        self._watches = list(stream.pending.values())
        return self

    def synchronize(self) -> None:
        """Wait for the work before the event (and raise a failed run-time check of the
        launches before it; reading their status waits for the stream's work)."""
        self.device.backend.synchronize_event(self.handle)
        flush_c_stdout()
        watches, self._watches = self._watches, []
        raise_failed(watches)

    def elapsed_time(self, end: Event) -> float:
        """Milliseconds from this event (the start) to `end`, both recorded; waits for
        `end`. An `end` that completed before the start is an error, never a negative
        time (the usual cause: the events swapped, `end.elapsed_time(start)`)."""
        if not (self._recorded and end._recorded):
            raise RuntimeError("both events must be recorded before elapsed_time: "
                               "start.record(); ...; end.record(); start.elapsed_time(end)")
        ms = self.device.backend.elapsed_ms(self.handle, end.handle)
        if ms < 0:
            raise ValueError(f"the end event completed {-ms:.3f} ms before the start: call "
                             "start.elapsed_time(end) (this event is the start)")
        return ms
