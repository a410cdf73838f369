"""Devices, streams and events (user-facing wrappers over backend handles), and device
selection: `kiln.backends()`, `kiln.devices()` and `kiln.device(spec)`."""

from __future__ import annotations

import threading
import weakref
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

from .. import settings
from ..errors import DeviceMismatchError
from ..framework.backend import Backend, Capabilities, Partitionable, supports
from ..framework.registry import BackendEntry, registry
from ..stdio import flush as flush_c_stdout

if TYPE_CHECKING:
    from .status import StatusWatch


class Recorder(Protocol):
    """A capture recording its thread's work (`kiln.capture`, kiln.execution.capture): the
    launch engine hands it launches, the runtime host-to-device copies and what it refuses."""

    stream: Stream  # where launches and copies without stream= go

    def refuse(self, doing: str) -> NoReturn: ...

    def record_copy(self, stream: Stream, copy: Callable[[Any], None], doing: str) -> None: ...

    def record_launch(self, kernel: Any, grid: Any, block: Any, args: Any, device: Any,
                      stream: Any) -> None: ...

    def record_bound(self, name: str, bound: Any) -> None: ...


class _Recording(threading.local):
    recorder: Recorder | None = None


RECORDING = _Recording()
"""The capture recording the calling thread's work, if any (one per thread)."""
CAPTURES = [0]
"""How many captures are recording, in any thread: launch plans decline while there is one."""


def recorder() -> Recorder | None:
    """The capture recording this thread's work, if any."""
    return RECORDING.recorder if CAPTURES[0] else None


def not_recording(doing: str) -> None:
    """Refuse work that waits or reads back inside a capture (it cannot be replayed)."""
    found = recorder()
    if found is not None:
        found.refuse(doing)


_DEFAULT_STREAM_LOCK = threading.Lock()
_DEVICES_LOCK = threading.RLock()  # a backend's device_handles may ask for other devices


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
        # dropped streams' handles and checks, appended by finalizers (which take no lock:
        # a collection may run one while this thread holds it)
        self._dropped: deque[tuple[Any | None, dict[int, StatusWatch]]] = deque()
        self._dropped_lock = threading.Lock()

    @property
    def name(self) -> str:
        suffix = "" if self.part is None else f".{self.part}"
        return f"{self.backend.name}:{self.index}{suffix}"

    def split(self, parts: int) -> list[Device]:
        """This device as `parts` sub-devices that run their launches concurrently, each on
        its share of the compute units (the cpu backend splits its OpenMP threads). Arrays
        of one part are in memory the others can copy from directly."""
        if not supports(self.backend, Partitionable):
            raise ValueError(f"{self.name} cannot be split: the {self.backend.name} backend "
                             "does not partition its devices")
        if self.part is not None:
            raise ValueError(f"{self.name} is already a part of {self.backend.name}:"
                             f"{self.index}: split the whole device")
        if isinstance(parts, bool) or not isinstance(parts, int) \
                or not 1 <= parts <= self.capabilities.compute_units:
            raise ValueError(f"{self.name} splits into 1 to {self.capabilities.compute_units} "
                             f"parts (its compute units), not {parts!r}")
        return [Device(self.backend, self.index, handle, caps, self.priority, part)
                for part, (handle, caps) in enumerate(self.backend.partition(self, parts))]

    def __repr__(self) -> str:
        return f"<kiln.Device {self.name} ({self.capabilities.name})>"

    @property
    def default_stream(self) -> Stream:
        """Made on first use, once even when threads ask at the same moment (two would
        split the work that must wait for each other)."""
        if self._default_stream is None:
            with _DEFAULT_STREAM_LOCK:
                if self._default_stream is None:
                    self._default_stream = Stream(self)
        return self._default_stream

    def synchronize(self) -> None:
        """Wait for all work queued on this device, on dropped streams too (and raise a
        failed run-time check)."""
        not_recording(f"{self.name}.synchronize()")
        with self._dropped_lock:
            dropped = self._take_dropped()
        queue = self.backend.queue

        def wait() -> None:
            failures = []
            for handle in [h for h, _ in dropped if h is not None]:
                try:
                    queue.synchronize_stream(handle)
                except Exception as exc:
                    failures.append(exc)
            queue.synchronize_device(self)
            if failures:
                raise failures[0]

        settle(wait, lambda: [w for stream in list(self.streams) for w in stream.take_pending()]
               + [w for _, pending in dropped for w in take_pending(pending)])

    def adopt(self, handle: Any, pending: dict[int, StatusWatch]) -> None:
        """Keep what the backend needs of a dropped stream (and its launches' run-time
        checks) until `synchronize` waits for it: its queued work still runs, and the
        device's synchronisation covers it. Called by the stream's finalizer."""
        kept = self.backend.queue.keep_dropped(handle)
        if kept is not None or pending:
            self._dropped.append((kept, pending))

    def let_go_of_idle(self) -> None:
        """Let go of the dropped streams the backend knows are done, with no check to
        report (each new stream does this, so dropping streams costs nothing)."""
        if not self._dropped:
            return
        queue = self.backend.queue
        with self._dropped_lock:
            self._dropped.extend([(h, p) for h, p in self._take_dropped()
                                  if p or (h is not None and not queue.stream_idle(h))])

    def _take_dropped(self) -> list[tuple[Any | None, dict[int, StatusWatch]]]:
        """Every dropped stream kept, removed (the caller holds the lock)."""
        taken = []
        while self._dropped:
            taken.append(self._dropped.popleft())
        return taken


class Stream:
    """An in-order queue of work on one device."""

    def __init__(self, device: Device | str | None = None) -> None:
        self.device = _resolve(device)
        self.handle = self.device.backend.queue.create_stream(self.device)
        self.device.let_go_of_idle()
        self.device.streams.add(self)
        self.pending: dict[int, StatusWatch] = {}  # launches with run-time checks
        weakref.finalize(self, self.device.adopt, self.handle, self.pending).atexit = False

    def synchronize(self) -> None:
        """Wait for the work queued on this stream (and raise a failed run-time check)."""
        not_recording("stream.synchronize()")
        settle(lambda: self.device.backend.queue.synchronize_stream(self.handle),
               self.take_pending)

    def wait_event(self, event: Event) -> None:
        """Have the work queued on this stream from now on wait for `event` (the work
        queued before its latest `record`), without the host waiting, as CUDA's
        `cudaStreamWaitEvent`. The event must be of this stream's device (to wait for
        another device, `event.synchronize()` on the host); a never-recorded one is
        complete, so nothing waits."""
        if not isinstance(event, Event):
            raise TypeError(f"wait_event takes a kiln.Event, got {type(event).__name__}")
        not_recording("stream.wait_event()")
        if event.device is not self.device:
            raise DeviceMismatchError(
                f"a stream of {self.device.name} cannot wait for an event of "
                f"{event.device.name}: synchronize the event on the host instead")
        if event._recorded:
            self.device.backend.queue.wait_event(self.handle, event.handle)

    def take_pending(self) -> list[StatusWatch]:
        """The run-time checks of the launches since the last synchronisation."""
        return take_pending(self.pending)

    def __repr__(self) -> str:
        return f"<kiln.Stream on {self.device.name}>"


class Event:
    """A point in a stream: `event.synchronize()` waits for the work queued before it, and
    `start.elapsed_time(end)` is the milliseconds between two of them (as in Numba, CuPy
    and PyTorch). As in CUDA, an event never recorded counts as complete: synchronizing it
    returns at once. An event belongs to its device: it is recorded on that device's
    streams only."""

    def __init__(self, device: Device | str | None = None) -> None:
        self.device = _resolve(device)
        self.handle = self.device.backend.queue.create_event(self.device)
        self._recorded = False
        self._watches: list[StatusWatch] = []

    def record(self, stream: Stream | None = None) -> Event:
        not_recording("event.record()")
        stream = stream_on(self.device, stream, f"recording an event of {self.device.name}")
        self.device.backend.queue.record_event(self.handle, stream.handle)
        self._recorded = True
        self._watches = list(stream.pending.values())
        return self

    def synchronize(self) -> None:
        """Wait for the work before the event (and raise a failed run-time check of the
        launches before it; reading their status waits for the stream's work)."""
        not_recording("event.synchronize()")
        if not self._recorded:
            return

        def watches() -> list[StatusWatch]:
            taken, self._watches = self._watches, []
            return taken

        settle(lambda: self.device.backend.queue.synchronize_event(self.handle), watches)

    def query(self) -> bool:
        """Whether the work before the event is done, without waiting (True for an event
        never recorded). Failed run-time checks wait for `synchronize()`."""
        return not self._recorded or self.device.backend.queue.query_event(self.handle)

    def elapsed_time(self, end: Event) -> float:
        """Milliseconds from this event (the start) to `end`, both recorded on one device;
        waits for both. An `end` that completed before the start is an error, never a
        negative time (the usual cause: the events swapped, `end.elapsed_time(start)`)."""
        if not isinstance(end, Event):
            raise TypeError(f"elapsed_time takes the end kiln.Event, got {type(end).__name__}")
        not_recording("event.elapsed_time()")
        if end.device is not self.device:
            raise DeviceMismatchError(
                f"elapsed_time measures between events of one device: the start is on "
                f"{self.device.name}, the end on {end.device.name} (their clocks differ)")
        if not (self._recorded and end._recorded):
            raise RuntimeError("both events must be recorded before elapsed_time: "
                               "start.record(); ...; end.record(); start.elapsed_time(end)")
        ms = self.device.backend.queue.elapsed_ms(self.handle, end.handle)
        if ms < 0:
            raise ValueError(f"the end event completed {-ms:.3f} ms before the start: call "
                             "start.elapsed_time(end) (this event is the start)")
        return ms

    def __repr__(self) -> str:
        state = "recorded" if self._recorded else "never recorded"
        return f"<kiln.Event on {self.device.name}, {state}>"


def take_pending(pending: dict[int, StatusWatch]) -> list[StatusWatch]:
    """The run-time checks in `pending` (removed, one at a time: a check another thread
    arms meanwhile is taken now or left whole for the next synchronisation, never
    dropped)."""
    watches = []
    while pending:
        try:
            watches.append(pending.popitem()[1])
        except KeyError:  # another thread took the last one
            break
    return watches


def stream_on(device: Device, stream: Stream | None, doing: str) -> Stream:
    """The stream that work `doing` something on `device` is queued on: `stream`, which
    must be one of `device`'s (a stream orders only its own device's work, and a backend
    handle of another device or backend would lose it), or the device's default one."""
    stream = as_stream(stream, doing)
    if stream is None:
        return device.default_stream
    if stream.device is not device:
        raise DeviceMismatchError(
            f"{doing}: the stream is on {stream.device.name}, not {device.name}; pass a "
            f"stream of {device.name} ({_stream_call(device)}) or none for its default")
    return stream


def _stream_call(device: Device) -> str:
    """How to make a stream of `device`: by spec, or for a part of a split device (which
    no spec names) from the Device itself."""
    if device.part is None:
        return f"kiln.Stream({device.name!r})"
    return f"kiln.Stream(part), with part the {device.name} Device that split() returned"


def as_stream(stream: Any, doing: str) -> Stream | None:
    """`stream`, refused unless it is a kiln.Stream (or None)."""
    if stream is not None and not isinstance(stream, Stream):
        raise TypeError(f"{doing}: stream= takes a kiln.Stream, got {type(stream).__name__} "
                        f"{stream!r}")
    return stream


class DeviceNotFoundError(LookupError):
    """No device matches the request; the message says why."""


def backends() -> list[BackendEntry]:
    """Every registered backend, highest priority first, with `available` and `reason`."""
    return registry.entries()


def devices() -> list[Device]:
    """Every device of every available backend, best first."""
    found = [d for e in registry.entries() for d in devices_of(e)]
    return sorted(found, key=lambda d: -d.priority)


def device(spec: str | Device | None = None) -> Device:
    """A device by spec (`"cuda:0"`, `"opencl"`, `"cpu"`), or the best one available.

    With no spec, `KILN_BACKEND` names the backend to use when set.
    """
    if isinstance(spec, Device):
        return spec
    if spec is not None and not isinstance(spec, str):
        raise TypeError(f"a device is a kiln.Device or a spec such as 'cuda:0' or 'cpu', "
                        f"not {type(spec).__name__} {spec!r}")
    if spec is None:
        spec = settings.backend()
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
    devs = sorted(devices_of(entry), key=lambda d: -d.priority) if not index else devices_of(entry)
    if not devs:
        raise DeviceNotFoundError(f"backend {name!r} has no devices")
    if not index:
        return devs[0]
    if "." in index:
        raise DeviceNotFoundError(f"{spec!r} names a part of a split device, which only "
                                  f"its kiln.Device object (from split()) stands for")
    if not index.isdigit() or int(index) >= len(devs):
        raise DeviceNotFoundError(f"{spec!r}: backend {name!r} has devices 0..{len(devs) - 1}")
    return devs[int(index)]


def _resolve(spec: Device | str | None) -> Device:
    """`device(spec)`, for the methods whose parameter `device` hides the function."""
    return device(spec)


def devices_of(entry: BackendEntry) -> list[Device]:
    """The devices of one registered backend (none when it is unavailable), made once, even
    when threads ask at the same moment: each device is one object, which arrays, streams
    and launches compare by identity."""
    if entry.device_cache is None:
        with _DEVICES_LOCK:
            if entry.device_cache is None:
                entry.device_cache = _make_devices(entry)
    return entry.device_cache


def _make_devices(entry: BackendEntry) -> list[Device]:
    if not entry.available:
        return []
    backend = entry.backend
    return [Device(backend, i, handle, caps, backend.device_priority(caps, entry.priority))
            for i, (handle, caps) in enumerate(backend.device_handles())]


def default_device() -> Device:
    """The device a stream, an event or an array gets when none is given."""
    return device(None)


def settle(wait: Callable[[], None], covered: Callable[[], list[StatusWatch]]) -> None:
    """Run `wait` (a synchronisation), then read the statuses of the launches it covers and
    raise the first failed check; where the wait itself raised (the interp raises its own
    bounds errors from its worker), a failed check wins, since it ran first. Every status
    it covers is read, so none is raised again by a later, unrelated synchronisation."""
    try:
        wait()
    except Exception as exc:
        failure: Exception | None = exc
    else:
        failure = None
    flush_c_stdout()
    raise_failed(covered())
    if failure is not None:
        raise failure


def raise_failed(watches: Iterable[StatusWatch]) -> None:
    """Read each (synchronised) status and raise the first failed check."""
    failed = [found for found in (w.failed() for w in watches) if found is not None]
    if failed:
        check, message = failed[0]
        raise check.error(message, check.loc)
