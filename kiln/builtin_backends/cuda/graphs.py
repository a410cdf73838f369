"""CUDA graphs for `kiln.capture` (the backend's `KernelGraphs`).

A run of recorded launches becomes one graph built node by node (`cuGraphAddKernelNode`,
each node depending on the one before, as a stream orders them) and instantiated once;
`cuGraphLaunch` replays it with one driver call. Building nodes explicitly, rather than
capturing a stream, keeps each node's handle, so that `graph.update` sets one launch's
grid and parameters in the instantiated graph (`cuGraphExecKernelNodeSetParams`) without
building it again. The driver copies a node's parameters when it is added or set, so a
routine's one parameter block serves each of its nodes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

from ...framework.backend import GraphLaunch
from .driver import Context, api, check
from .launch import Routine


def node_params(function: Any, shared_bytes: int, grid: tuple[int, int, int],
                block: tuple[int, int, int], params: int) -> Any:
    """A kernel node's parameters: `function` on `grid` x `block`, its arguments read
    through `params` (the address of an array of pointers to each, as cuLaunchKernel's)."""
    p = api().CUDA_KERNEL_NODE_PARAMS()
    p.func = function
    p.gridDimX, p.gridDimY, p.gridDimZ = grid
    p.blockDimX, p.blockDimY, p.blockDimZ = block
    p.sharedMemBytes = shared_bytes
    p.kernelParams = params
    return p


def _params_of(launch: GraphLaunch) -> Any:
    routine, grid, block, args = launch
    assert isinstance(routine, Routine)
    return node_params(routine.function, routine.shared_bytes, grid, block,
                       routine.pack(args))


class KernelGraph:
    """A chain of kernel nodes, instantiated: `launch` replays it, `update` sets a node."""

    __slots__ = ("context", "graph", "exec", "nodes")

    def __init__(self, context: Context, launches: Sequence[GraphLaunch]) -> None:
        drv = api()
        context.activate()
        self.context = context
        self.graph = check(drv.cuGraphCreate(0), "cuGraphCreate")
        self.exec: Any = None
        self.nodes: list[Any] = []
        for launch in launches:
            after = self.nodes[-1:]
            self.nodes.append(check(drv.cuGraphAddKernelNode(
                self.graph, after, len(after), _params_of(launch)), "cuGraphAddKernelNode"))
        self.exec = check(drv.cuGraphInstantiate(self.graph, 0), "cuGraphInstantiate")

    def update(self, index: int, launch: GraphLaunch) -> None:
        self.context.activate()
        check(api().cuGraphExecKernelNodeSetParams(self.exec, self.nodes[index],
                                                   _params_of(launch)),
              "cuGraphExecKernelNodeSetParams")

    def launch(self, stream: Any) -> None:
        """Queue every node on `stream` (a kiln `StreamHandle`)."""
        self.context.activate()
        check(api().cuGraphLaunch(self.exec, stream.stream), "cuGraphLaunch")

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # at interpreter shutdown the driver may be gone
            if self.exec is not None:
                api().cuGraphExecDestroy(self.exec)
            api().cuGraphDestroy(self.graph)


def build_graph(context: Context, launches: Sequence[GraphLaunch]) -> KernelGraph | None:
    """One CUDA graph of `launches`, or None when one is not a kernel this backend loaded."""
    if not all(isinstance(routine, Routine) for routine, *_ in launches):
        return None
    return KernelGraph(context, launches)
