"""Streams and events for backends whose devices are the host (interp, cpu).

A `HostStream` is a worker thread running queued callables in order, so launches return at
once and `synchronize`, events and host reads wait (OCANNL: scheduling never blocks).
"""

from __future__ import annotations

import os
import queue
import threading
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from ..framework.backend import Allocator, Queue

if TYPE_CHECKING:
    from .device import Device



class HostStream:
    """A worker thread running queued callables in order. `threads` is for the backend: how
    many host threads the work queued here may use (None: all); kiln only stores it, and a
    backend reads `stream.threads` when it launches (the cpu backend's `team_size`). A
    split device's queue makes its streams with its share (`HostQueue.create_stream` makes
    them with None). The thread ends once the stream is gone and its work is done."""

    def __init__(self, name: str = "kiln-stream", threads: int | None = None) -> None:
        self.threads = threads
        self._worker = Worker()
        threading.Thread(target=self._worker.run, name=name, daemon=True).start()

    def __del__(self) -> None:
        self._worker.tasks.put(None)  # after the work already queued

    def enqueue(self, task: Callable[[], None]) -> None:
        """Queue `task`. A failed task never stops the ones after it (as a failed check of
        a compiled kernel does not): its error waits for the next synchronisation."""
        self._worker.enqueue(task)

    def failures(self) -> list[BaseException]:
        """The errors of the tasks that failed so far and are not raised yet."""
        with self._worker.lock:
            return list(self._worker.errors)

    def raise_failed(self, among: list[BaseException] | None = None) -> None:
        """Raise the first failure not raised yet (of `among`, when given: those before an
        event); it and the ones before it are then reported and never raised again."""
        self._worker.raise_failed(among)

    def synchronize(self) -> None:
        self._worker.synchronize()


class Worker:
    """A stream's queue and the state its thread shares with it (the thread holds this,
    never the stream, so a dropped stream is collected and its thread ends)."""

    def __init__(self) -> None:
        self.tasks: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self.pending = 0
        self.lock = threading.Condition()
        self.errors: list[BaseException] = []  # failed tasks not yet raised, oldest first

    def run(self) -> None:
        while (task := self.tasks.get()) is not None:
            try:
                task()
            except BaseException as exc:  # surfaced at the next synchronize
                with self.lock:
                    self.errors.append(exc)
            finally:
                del task  # a finished task keeps nothing alive (its stream, its arrays)
                with self.lock:
                    self.pending -= 1
                    self.lock.notify_all()

    def enqueue(self, task: Callable[[], None]) -> None:
        with self.lock:
            self.pending += 1
        self.tasks.put(task)

    def drain(self) -> None:
        """Wait until every queued task has run."""
        with self.lock:
            while self.pending:
                self.lock.wait()

    def raise_failed(self, among: list[BaseException] | None = None) -> None:
        """`HostStream.raise_failed`."""
        with self.lock:
            found = [e for e in self.errors if among is None or any(e is a for a in among)]
            if not found:
                return
            del self.errors[:self.errors.index(found[-1]) + 1]
        raise found[0]

    def synchronize(self) -> None:
        self.drain()
        self.raise_failed()


class Stamp:
    """One `record` of a host event: set when the stream's worker reaches it."""

    def __init__(self, stream: HostStream | None = None) -> None:
        self.stream = stream
        self.done = threading.Event()
        self.time = 0.0
        self.failed: list[BaseException] = []  # the stream's failures before the stamp
        if stream is None:
            self.done.set()  # never recorded: complete, as a CUDA event is

    def wait(self) -> None:
        self.done.wait()

    def __call__(self) -> None:
        assert self.stream is not None
        self.time = time.perf_counter()
        self.failed = self.stream.failures()
        self.done.set()


class HostEvent:
    """The stamp of the latest `record` (a new one each time, so work waiting on an
    earlier record never waits for a later one). Never recorded, it counts as complete."""

    def __init__(self) -> None:
        self.stamp = Stamp()

    def record(self, stream: HostStream) -> None:
        self.stamp = Stamp(stream)
        stream.enqueue(self.stamp)

    def wait(self) -> None:
        """Wait for the stream to reach the event."""
        self.stamp.wait()

    def query(self) -> bool:
        return self.stamp.done.is_set()

    def synchronize(self) -> None:
        """Wait for the event and raise the first failure of the work before it."""
        stamp = self.stamp
        stamp.wait()
        failed, stamp.failed = stamp.failed, []
        if stamp.stream is not None and failed:
            stamp.stream.raise_failed(failed)

    def waiter(self) -> Callable[[], None]:
        """A task waiting for the event as it is recorded now (for another stream)."""
        return self.stamp.wait

    @staticmethod
    def elapsed_ms(start: HostEvent, end: HostEvent) -> float:
        start.wait()
        end.wait()
        return (end.stamp.time - start.stamp.time) * 1e3


def host_memory_bytes() -> int:
    """The host's physical memory in bytes (0 where the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


class HostAllocator(Allocator):
    """Memory of a device that is the host: buffers are flat uint8 NumPy arrays, copies are
    ordered on the stream, NumPy arrays are shared without a copy (`ZeroCopy`), views are
    slices (`SubBuffers`) and copies between host devices are direct (`PeerCopy`)."""

    def allocate(self, device: Device, nbytes: int) -> np.ndarray:
        return np.empty(max(nbytes, 1), dtype=np.uint8)

    def wrap_host(self, device: Device, array: np.ndarray) -> np.ndarray | None:
        if array.flags.c_contiguous and array.flags.writeable and array.flags.aligned:
            return array.reshape(-1).view(np.uint8)
        return None

    def sub_buffer(self, device: Device, buffer: np.ndarray, offset: int,
                   nbytes: int) -> np.ndarray:
        return buffer[offset:offset + nbytes]

    def sub_buffer_alignment(self, device: Device) -> int:
        return 1

    def copy_host_to_device(self, dst: np.ndarray, src: np.ndarray, stream: HostStream) -> None:
        data = src.reshape(-1).view("uint8").copy()
        stream.enqueue(lambda: dst.__setitem__(slice(0, data.size), data))

    def copy_device_to_host(self, dst: np.ndarray, src: np.ndarray, stream: HostStream) -> None:
        flat = dst.reshape(-1).view("uint8")
        stream.enqueue(lambda: flat.__setitem__(slice(None), src[: flat.size]))

    def copy_device_to_device(self, dst: np.ndarray, src: np.ndarray, nbytes: int,
                              stream: HostStream) -> None:
        stream.enqueue(lambda: dst.__setitem__(slice(0, nbytes), src[:nbytes]))

    def copy_peer(self, dst: np.ndarray, src: np.ndarray, nbytes: int,
                  src_stream: HostStream, stream: HostStream) -> None:
        """Between two devices in host memory (`PeerCopy`): queued on `stream`, after an
        event that `src_stream` reaches once the work queued on it before the copy is done."""
        ready = HostEvent()
        ready.record(src_stream)
        wait = ready.waiter()  # src_stream's failures are its own to raise

        def copy() -> None:
            wait()
            dst[:nbytes] = src[:nbytes]

        stream.enqueue(copy)


class HostQueue(Queue):
    """Streams of a host device: each a `HostStream` worker thread; events are stamps.
    The queue knows each device's workers while their threads run, so a device's
    synchronisation waits for the work of its dropped streams too."""

    def __init__(self) -> None:
        self._workers: weakref.WeakKeyDictionary[Device, weakref.WeakSet[Worker]] = \
            weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def create_stream(self, device: Device) -> HostStream:
        return self.track(device, HostStream(f"kiln-{device.name}"))

    def track(self, device: Device, stream: HostStream) -> HostStream:
        """`stream`, its worker counted among `device`'s."""
        with self._lock:
            self._workers.setdefault(device, weakref.WeakSet()).add(stream._worker)
        return stream

    def synchronize_stream(self, stream: HostStream) -> None:
        stream.synchronize()

    def keep_dropped(self, stream: HostStream) -> None:
        return None  # its worker runs on, and synchronize_device finds it

    def create_event(self, device: Device) -> HostEvent:
        return HostEvent()

    def record_event(self, event: HostEvent, stream: HostStream) -> None:
        event.record(stream)

    def synchronize_device(self, device: Device) -> None:
        """Every stream waited for, then the first failure raised: a failure of one stream
        never waits behind another's for a later synchronisation."""
        with self._lock:
            workers = list(self._workers.get(device, ()))
        failures = []
        for worker in workers:
            try:
                worker.synchronize()
            except Exception as exc:
                failures.append(exc)
        if failures:
            raise failures[0]

    def synchronize_event(self, event: HostEvent) -> None:
        event.synchronize()

    def query_event(self, event: HostEvent) -> bool:
        return event.query()

    def wait_event(self, stream: HostStream, event: HostEvent) -> None:
        stream.enqueue(event.waiter())

    def elapsed_ms(self, start: HostEvent, end: HostEvent) -> float:
        return HostEvent.elapsed_ms(start, end)
