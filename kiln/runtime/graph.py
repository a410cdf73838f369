"""`kiln.graph()`: record the launches queued on a stream once, replay them with one call.

    with kiln.graph(dev) as g:          # or kiln.graph(stream)
        for _ in range(100):
            step[grid, block](x, y)      # recorded, not run
    g.launch()                           # runs all 100 launches (CUDA graphs on cuda)

A backend supports it by implementing the `GraphCapture` protocol (`begin_capture(stream)`,
`end_capture(stream) -> graph`, `launch_graph(graph, stream)`). The arguments are fixed
when recorded; their contents are read when the graph runs.
"""

from __future__ import annotations

from typing import Any

from ..framework.backend import GraphCapture, supports
from .device import Device, Stream, stream_on
from .device import device as resolve_device


class Graph:
    def __init__(self, stream: Stream) -> None:
        self.stream = stream
        backend = stream.device.backend
        if not supports(backend, GraphCapture):
            raise NotImplementedError(f"backend {backend.name!r} cannot record graphs")
        self.backend: GraphCapture = backend
        self.handle: Any = None

    def __enter__(self) -> Graph:
        self.backend.begin_capture(self.stream.handle)
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        handle = self.backend.end_capture(self.stream.handle)
        if exc_type is None:
            self.handle = handle

    def launch(self, stream: Stream | None = None) -> None:
        """Run the recorded launches (asynchronously) on `stream` (default: the recording one)."""
        if self.handle is None:
            raise RuntimeError("the graph was not recorded (use `with kiln.graph(...) as g:`)")
        where = stream_on(self.stream.device, stream or self.stream, "launching a graph")
        self.backend.launch_graph(self.handle, where.handle)


def graph(where: Device | Stream | str | None = None) -> Graph:
    """A graph recording the launches queued on a stream (a device's default stream)."""
    stream = where if isinstance(where, Stream) else resolve_device(where).default_stream
    return Graph(stream)
