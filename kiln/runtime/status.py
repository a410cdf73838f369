"""Run-time checks of launched kernels (`kiln.ir.nodes.RuntimeCheck`), reported without
blocking the launch.

A specialisation whose program has checks gets one status array per stream it runs on
(`STATUS_WORDS` i32s, zeroed once); each launch passes it and arms its `StatusWatch` on
the stream. The next synchronisation that covers the launch (its stream's or device's
`synchronize`, an event recorded after it, a copy to the host) reads the status and raises
the failed check.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

import numpy as np

from ..ir.nodes import STATUS_WORDS_NAMES as WORDS
from .array import DeviceArray, empty

STATUS_WORDS = len(WORDS)

if TYPE_CHECKING:
    from ..ir.nodes import RuntimeCheck
    from .device import Stream


class StatusWatch:
    """The status array of one specialisation on one stream, and the checks it reports."""

    def __init__(self, checks: list[RuntimeCheck], stream: Stream) -> None:
        self.checks = checks
        self.stream = weakref.ref(stream)  # a watch, kept per stream, never keeps it alive
        self.device, self.handle = stream.device, stream.handle
        self.array: DeviceArray = empty(STATUS_WORDS, np.int32, stream.device)
        zeros = np.zeros(STATUS_WORDS, np.int32)  # at once, even inside a capture
        stream.device.backend.allocator.copy_host_to_device(self.array.buffer, zeros,
                                                            stream.handle)

    def arm(self) -> None:
        """Have the stream's next synchronisation check this status (after a launch)."""
        stream = self.stream()
        if stream is not None:
            stream.pending[id(self)] = self

    def failed(self) -> tuple[RuntimeCheck, str] | None:
        """The check the status reports, if any, and its message (the status is zeroed
        again). The stream must be synchronised."""
        backend, handle = self.device.backend, self.handle
        words = np.zeros(STATUS_WORDS, np.int32)
        backend.allocator.copy_device_to_host(words, self.array.buffer, handle)
        backend.queue.synchronize_stream(handle)
        if not words[0]:
            return None
        zeros = np.zeros(STATUS_WORDS, np.int32)
        backend.allocator.copy_host_to_device(self.array.buffer, zeros, handle)
        backend.queue.synchronize_stream(handle)
        check = self.checks[int(words[0]) - 1]
        return check, describe(check, words)


def describe(check: RuntimeCheck, words: np.ndarray) -> str:
    """The check's message, with the failing index and thread where it reports them."""
    if not check.details:
        return check.message
    w = dict(zip(WORDS, (int(x) for x in words)))
    index = (w["index_high"] << 32) | (w["index_low"] & 0xFFFFFFFF)
    return check.message.format(
        index=index, extent=w["extent"], thread=(w["thread_x"], w["thread_y"], w["thread_z"]),
        block=(w["block_x"], w["block_y"], w["block_z"]))

