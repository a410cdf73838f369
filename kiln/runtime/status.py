"""Run-time checks of launched kernels (`kiln.ir.nodes.RuntimeCheck`), reported without
blocking the launch.

A specialisation whose program has checks gets one 1-element status array per stream it
runs on (zeroed once); each launch passes it and arms its `StatusWatch` on the stream. The
next synchronisation that covers the launch (its stream's or device's `synchronize`, an
event recorded after it, a copy to the host) reads the status and raises the failed check.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .array import DeviceArray, empty

if TYPE_CHECKING:
    from ..ir.nodes import RuntimeCheck
    from .device import Stream


class StatusWatch:
    """The status array of one specialisation on one stream, and the checks it reports."""

    def __init__(self, checks: list[RuntimeCheck], stream: Stream) -> None:
        self.checks = checks
        self.stream = stream
        self.array: DeviceArray = empty(1, np.int32, stream.device)
        self.array.copy_from_host(np.zeros(1, np.int32), stream)

    def arm(self) -> None:
        """Have the stream's next synchronisation check this status (after a launch)."""
        self.stream.pending[id(self)] = self

    def failed(self) -> RuntimeCheck | None:
        """The check the status reports, if any (the status is zeroed again). The stream
        must be synchronised."""
        backend, handle = self.stream.device.backend, self.stream.handle
        code = np.zeros(1, np.int32)
        backend.allocator.copy_device_to_host(code, self.array.buffer, handle)
        backend.queue.synchronize_stream(handle)
        if not code[0]:
            return None
        backend.allocator.copy_host_to_device(self.array.buffer, np.zeros(1, np.int32), handle)
        backend.queue.synchronize_stream(handle)
        return self.checks[int(code[0]) - 1]
