"""Streams and events for backends whose devices are the host (interp, cpu).

A `HostStream` is a worker thread running queued callables in order, so launches return at
once and `synchronize`, events and host reads wait (OCANNL: scheduling never blocks).
"""

from __future__ import annotations

import os
import queue
import threading
import time
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
    them with None)."""

    def __init__(self, name: str = "kiln-stream", threads: int | None = None) -> None:
        self.threads = threads
        self._queue: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._pending = 0
        self._lock = threading.Condition()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._thread.start()

    def _work(self) -> None:
        while True:
            task = self._queue.get()
            try:
                if task is not None and self._error is None:
                    task()
            except BaseException as exc:  # surfaced at the next synchronize
                self._error = exc
            finally:
                with self._lock:
                    self._pending -= 1
                    self._lock.notify_all()

    def enqueue(self, task: Callable[[], None]) -> None:
        with self._lock:
            self._pending += 1
        self._queue.put(task)

    def synchronize(self) -> None:
        with self._lock:
            while self._pending:
                self._lock.wait()
        if self._error is not None:
            error, self._error = self._error, None
            raise error


class HostEvent:
    def __init__(self) -> None:
        self._done = threading.Event()
        self.time = 0.0

    def record(self, stream: HostStream) -> None:
        self._done.clear()

        def stamp() -> None:
            self.time = time.perf_counter()
            self._done.set()

        stream.enqueue(stamp)

    def synchronize(self) -> None:
        self._done.wait()

    @staticmethod
    def elapsed_ms(start: HostEvent, end: HostEvent) -> float:
        start.synchronize()
        end.synchronize()
        return (end.time - start.time) * 1e3


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

        def copy() -> None:
            ready.synchronize()
            dst[:nbytes] = src[:nbytes]

        stream.enqueue(copy)


class HostQueue(Queue):
    """Streams of a host device: each a `HostStream` worker thread; events are stamps."""

    def create_stream(self, device: Device) -> HostStream:
        return HostStream(f"kiln-{device.name}")

    def synchronize_stream(self, stream: HostStream) -> None:
        stream.synchronize()

    def create_event(self, device: Device) -> HostEvent:
        return HostEvent()

    def record_event(self, event: HostEvent, stream: HostStream) -> None:
        event.record(stream)

    def synchronize_event(self, event: HostEvent) -> None:
        event.synchronize()

    def elapsed_ms(self, start: HostEvent, end: HostEvent) -> float:
        return HostEvent.elapsed_ms(start, end)
