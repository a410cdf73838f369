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
    them with None). The thread ends, after the work queued, once the stream is collected."""

    def __init__(self, name: str = "kiln-stream", threads: int | None = None) -> None:
        self.threads = threads
        self._worker = worker = _Worker()
        threading.Thread(target=worker.run, name=name, daemon=True).start()
        weakref.finalize(self, worker.queue.put, None)

    def enqueue(self, task: Callable[[], None]) -> None:
        worker = self._worker
        with worker.lock:
            worker.pending += 1
        worker.queue.put(task)

    def synchronize(self) -> None:
        worker = self._worker
        with worker.lock:
            while worker.pending:
                worker.lock.wait()
        if worker.error is not None:
            error, worker.error = worker.error, None
            raise error


class _Worker:
    """A `HostStream`'s queue and the state its thread shares with it. The thread holds this,
    not the stream: a stream nobody holds is collected, and `None` queued then ends the
    thread (each thread that ran cpu kernels also holds an OpenMP team)."""

    def __init__(self) -> None:
        self.queue: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self.pending = 0
        self.lock = threading.Condition()
        self.error: BaseException | None = None

    def run(self) -> None:
        while (task := self.queue.get()) is not None:
            try:
                if self.error is None:
                    task()
            except BaseException as exc:  # surfaced at the next synchronize
                self.error = exc
            finally:
                with self.lock:
                    self.pending -= 1
                    self.lock.notify_all()


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
