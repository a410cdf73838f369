"""Device memory and host<->device copies on a stream.

Buffers are plain device allocations from the device's stream-ordered pool (never managed
memory), freed in stream order on the legacy default stream, which every blocking stream
(kiln's and the frameworks' defaults) is ordered with, so dropping an array while a kernel
still uses it is safe. Host-to-device copies of pageable NumPy arrays go through pinned
staging buffers, so they are truly asynchronous and the source may change at once.
"""

from __future__ import annotations

import contextlib
import ctypes
import threading
from typing import Any, ClassVar

import numpy as np

from .driver import Context, api, check

LEGACY_STREAM = 0
STAGING_MIN_BYTES = 1 << 16
"""Smaller host-to-device copies go straight from pageable memory (the driver stages them)."""
SMALL_READBACK_BYTES = 4096
"""Device-to-host copies up to this size go through one page-locked buffer per device."""


class Buffer:
    """A device allocation: `ptr` is the device address (0 for an empty buffer)."""

    __slots__ = ("ptr", "nbytes", "context", "owner", "__weakref__")

    def __init__(self, ptr: int, nbytes: int, context: Context, owner: Any = None) -> None:
        self.ptr = ptr
        self.nbytes = nbytes
        self.context = context
        self.owner = owner  # a foreign object whose memory this is (never freed here)

    @classmethod
    def allocate(cls, context: Context, nbytes: int) -> Buffer:
        ptr = 0
        if nbytes > 0:
            context.activate()
            drv = api()
            result = drv.cuMemAllocAsync(nbytes, LEGACY_STREAM)
            if result[0] == drv.CUresult.CUDA_ERROR_OUT_OF_MEMORY:
                raise MemoryError("CUDA_ERROR_OUT_OF_MEMORY")  # kiln.empty names the size
            ptr = int(check(result, "cuMemAllocAsync"))
        return cls(ptr, nbytes, context)

    def __del__(self) -> None:
        if self.ptr and self.owner is None:
            with contextlib.suppress(Exception):  # at shutdown the driver may be gone
                self.context.activate()
                api().cuMemFreeAsync(self.ptr, LEGACY_STREAM)

    def __repr__(self) -> str:
        return f"<cuda buffer 0x{self.ptr:x}, {self.nbytes} bytes>"


class PinnedStaging:
    """Reusable page-locked host buffers, each guarded by the event of its last copy. A
    lock makes choosing a free buffer, filling it and recording its event one step, so
    threads copying at once never fill the same buffer (the fill releases the GIL)."""

    _per_context: ClassVar[dict[int, PinnedStaging]] = {}
    _creating: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, context: Context) -> None:
        self.context = context
        self.blocks: list[tuple[int, int, Any]] = []  # (host pointer, size, event)
        self.readback: int | None = None  # page-locked, for `copy_small_to_host`
        self.readback_lock = threading.Lock()  # held while waiting: not the staging's lock
        self.lock = threading.Lock()

    @classmethod
    def of(cls, context: Context) -> PinnedStaging:
        """The staging buffers of one device."""
        staging = cls._per_context.get(context.ordinal)
        if staging is None:
            with cls._creating:
                staging = cls._per_context.get(context.ordinal)
                if staging is None:
                    staging = cls._per_context[context.ordinal] = cls(context)
        return staging

    def _block(self, nbytes: int) -> tuple[int, Any]:
        drv = api()
        for ptr, size, event in self.blocks:
            if size >= nbytes and drv.cuEventQuery(event)[0] == 0:
                return ptr, event
        size = max(nbytes, 1 << 20)
        ptr = int(check(drv.cuMemHostAlloc(size, 0), "cuMemHostAlloc"))
        event = check(drv.cuEventCreate(drv.CUevent_flags.CU_EVENT_DISABLE_TIMING),
                      "cuEventCreate")
        self.blocks.append((ptr, size, event))
        return ptr, event

    def copy_to_device(self, dst: int, src: np.ndarray, stream: Any) -> None:
        drv = api()
        nbytes = src.nbytes
        if nbytes < STAGING_MIN_BYTES:
            check(drv.cuMemcpyHtoDAsync(dst, src.ctypes.data, nbytes, stream),
                  "cuMemcpyHtoDAsync")
            return
        with self.lock:
            ptr, event = self._block(nbytes)
            ctypes.memmove(ptr, src.ctypes.data, nbytes)
            check(drv.cuMemcpyHtoDAsync(dst, ptr, nbytes, stream), "cuMemcpyHtoDAsync")
            check(drv.cuEventRecord(event, stream), "cuEventRecord")

    def copy_small_to_host(self, dst: np.ndarray, src: int, stream: Any) -> None:
        """A copy of at most `SMALL_READBACK_BYTES` (a flag, a counter) through page-locked
        memory, waited for here: a copy into pageable memory returns only once it is done
        anyway, and the driver's page-locked path is the shorter (H100: 9.5 against 12.2
        us from Python for 4 bytes, copy and wait)."""
        drv = api()
        nbytes = dst.nbytes
        with self.readback_lock:
            if self.readback is None:
                self.readback = int(check(drv.cuMemHostAlloc(SMALL_READBACK_BYTES, 0),
                                          "cuMemHostAlloc"))
            check(drv.cuMemcpyDtoHAsync(self.readback, src, nbytes, stream),
                  "cuMemcpyDtoHAsync")
            check(drv.cuStreamSynchronize(stream), "cuStreamSynchronize")
            ctypes.memmove(dst.ctypes.data, self.readback, nbytes)

    def close(self) -> None:
        drv = api()
        if self.readback is not None:
            drv.cuMemFreeHost(self.readback)
            self.readback = None
        for ptr, _, event in self.blocks:
            drv.cuEventSynchronize(event)
            drv.cuMemFreeHost(ptr)
            drv.cuEventDestroy(event)
        self.blocks.clear()
