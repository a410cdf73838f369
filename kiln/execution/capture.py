"""`kiln.capture`: record a sequence of launches (and host-to-device copies) once, replay it
with one call, with scalar arguments, grids and sizes updated between replays.

    with kiln.capture(dev) as g:            # or a kiln.Stream
        for d in range(1, 2 * n):
            step[cells(d), 64](h, d, kiln.Param("gap", -1))
    g.replay()                              # every recorded launch, in order
    g.replay(gap=-2)                        # a kiln.Param set for every launch using it
    g.update(g.launches[3], grid=8, d=5)    # one launch changed (CUDA graph node update)

A capture records, on the thread that enters it, what the launch engine would have queued on
the capture's stream: the executor, prepared launches and raw kernels hand launches to the
thread's `Recorder` (`kiln.runtime.device`) instead of running them, and the runtime hands it
`copy_from_host` and refuses work that waits or reads back. A replay runs the recorded plan:
each run of launches as one native graph where the backend builds them (`KernelGraphs`:
CUDA graphs on cuda), else each launch through its prepared call (`FastLaunch`) or its
`launch`. The graph holds its arrays, so none is freed while it can replay them.
docs/graphs.md is the contract.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import numpy as np

from ..errors import CaptureError, LaunchError
from ..framework.backend import Dim3, FastLaunch, GraphLaunch, KernelGraphs, supports
from ..ir.types import ConstexprType, ScalarType, Type
from ..runtime.device import CAPTURES, RECORDING, Device, Stream, stream_on
from ..runtime.device import device as resolve_device
from ..runtime.status import StatusWatch
from .dims import as_dim3, validate_dims
from .executor import BoundLaunch, adopt_foreign, bind_launch, check_argument
from .kernel import SizedKernel
from .raw import RawKernel
from .state import LaunchState

_CAPTURES_LOCK = threading.Lock()
_NUMBERS = (bool, int, float, np.generic)
Run = Callable[[], None]


class Param:
    """A named scalar argument of captured launches: `kiln.Param("gap", -1)` launches with
    -1 and `graph.replay(gap=-2)` sets every launch that took it. Only captures take one."""

    __slots__ = ("name", "value")

    def __init__(self, name: str, value: Any) -> None:
        if not isinstance(name, str) or not name.isidentifier():
            raise CaptureError(f"kiln.Param takes a name that is a Python identifier, got "
                               f"{name!r}")
        if not isinstance(value, _NUMBERS):
            raise CaptureError(f"kiln.Param {name!r} stands for a number (an int, float, "
                               f"bool or NumPy scalar), got {type(value).__name__}")
        self.name, self.value = name, value

    def __repr__(self) -> str:
        return f"kiln.Param({self.name!r}, {self.value!r})"


class CapturedLaunch:
    """One recorded launch of a graph (`graph.launches[i]`): its kernel's name, its grid and
    block, and its arguments as they are now (`graph.update` changes them)."""

    __slots__ = ("index", "name", "kernel", "bound", "params", "device_arg")

    def __init__(self, index: int, name: str, kernel: LaunchState | None, bound: BoundLaunch,
                 params: dict[int, str], device_arg: Any) -> None:
        self.index, self.name, self.kernel, self.bound = index, name, kernel, bound
        self.params = params  # argument position -> kiln.Param name
        self.device_arg = device_arg  # the launch's device= as given (None, or the device)

    @property
    def grid(self) -> tuple[int, int, int]:
        return self.bound.grid

    @property
    def block(self) -> tuple[int, int, int]:
        return self.bound.block

    @property
    def args(self) -> tuple[Any, ...]:
        """The kernel's arguments (a `dim=` launch's sizes left out)."""
        rank = self._rank()
        args = tuple(self.bound.args)
        return args[:-rank] if rank else args

    def _rank(self) -> int:
        function = self.kernel.function if self.kernel is not None else None
        return function.rank if isinstance(function, SizedKernel) else 0

    def graph_launch(self) -> GraphLaunch:
        b = self.bound
        return (b.routine, b.grid, b.block, b.device_args)

    def __repr__(self) -> str:
        return f"<kiln launch #{self.index} {self.name}[{self.grid}, {self.block}]>"


class _Copy:
    """A recorded host-to-device copy: `copy(stream_handle)` queues it."""

    __slots__ = ("copy",)

    def __init__(self, copy: Callable[[Any], None]) -> None:
        self.copy = copy


Step = CapturedLaunch | _Copy


class Graph:
    """A recorded sequence of launches and copies (`kiln.capture(...)`); see docs/graphs.md.

    `replay(stream=None, **params)` runs it (asynchronously, as launches); `update(launch,
    grid=, block=, dim=, **args)` changes one launch; `launches` lists them; `params` the
    current `kiln.Param` values; `close()` lets go of its arrays and native graphs.
    """

    def __init__(self, stream: Stream) -> None:
        self.stream, self.device = stream, stream.device
        self._steps: list[Step] = []
        self._launches: list[CapturedLaunch] = []
        self._params: dict[str, Any] = {}
        self._state = "new"  # recording, ready, abandoned or closed
        self._error: CaptureError | None = None
        self._why = ""
        self._lock = threading.RLock()
        self._units: list[tuple[list[Step], Any]] = []  # steps and their native graph
        self._unit_of: dict[int, tuple[int, int]] = {}  # launch index -> unit, position
        self._runs: weakref.WeakKeyDictionary[Stream, list[Run]] = weakref.WeakKeyDictionary()
        self._watches: list[StatusWatch] = []
        self._kernels: list[LaunchState] = []  # of the launches (not raw or prepared ones)

    def __repr__(self) -> str:
        return (f"<kiln.Graph of {len(self.launches)} launch(es) on {self.device.name}, "
                f"{self._state}>")

    # ---- recording (the thread's Recorder: kiln.runtime.device)
    def __enter__(self) -> Graph:
        outer = RECORDING.recorder
        if outer is not None:
            outer.refuse("kiln.capture (captures do not nest)")
        if self._state != "new":
            raise CaptureError(f"this graph is {self._state}: a graph records once; make a new "
                               "one with kiln.capture(...)")
        self._state = "recording"
        RECORDING.recorder = self
        with _CAPTURES_LOCK:
            CAPTURES[0] += 1
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        RECORDING.recorder = None
        with _CAPTURES_LOCK:
            CAPTURES[0] -= 1
        if exc_type is not None:
            self._abandon(f"{exc_type.__name__} raised inside the capture: {exc}")
            return
        if self._error is not None:
            self._abandon(str(self._error))
            raise CaptureError(f"the capture was abandoned: {self._error}") from None
        if not self._steps:
            self._abandon("nothing was recorded")
            raise CaptureError(f"kiln.capture on {self.device.name} recorded nothing: only "
                               "launches and copy_from_host made by this thread inside the "
                               "`with` block are recorded")
        self._state = "ready"
        self._watches = list({id(w): w for w in self._watch_list()}.values())
        self._kernels = list({id(n.kernel): n.kernel for n in self._launches
                              if n.kernel is not None}.values())

    def _abandon(self, why: str) -> None:
        self._state, self._why, self._steps, self._launches = "abandoned", why, [], []

    def refuse(self, doing: str) -> NoReturn:
        """Raise (and remember: the capture is abandoned) a CaptureError for `doing`."""
        error = CaptureError(
            f"{doing} inside kiln.capture on {self.device.name}: a capture records launches "
            "and copy_from_host to replay them later, and cannot record this (waiting, reading "
            "back or other streams' work happens before the capture or after a replay)")
        if self._error is None:
            self._error = error
        raise error

    def record_copy(self, stream: Stream, copy: Callable[[Any], None], doing: str) -> None:
        self._check_recording(doing)
        if stream is not self.stream:
            self.refuse(f"{doing} on {stream!r} (the capture records {self.stream!r})")
        self._steps.append(_Copy(copy))

    def record_launch(self, kernel: Any, grid: Any, block: Any, args: Sequence[Any],
                      device: Any, stream: Any) -> None:
        name = kernel.name
        self._check_recording(f"launching {name}")
        if stream is not None and stream is not self.stream:
            self.refuse(f"launching {name} on {stream!r} (the capture records "
                        f"{self.stream!r}; launches without stream= go there)")
        if device is not None and resolve_device(device) is not self.device:
            self.refuse(f"launching {name} on {resolve_device(device).name}")
        values, params = self._take_params(name, args)
        if any(isinstance(a, np.ndarray) for a in values):
            self.refuse(f"launching {name} with a NumPy array argument (its copy back is a "
                        "read back): pass device arrays")
        if isinstance(kernel, RawKernel):
            if params:
                raise CaptureError(f"{name}: raw kernels take no kiln.Param (their arguments "
                                   "have no parameter types to check updates against)")
            bound = kernel.bind(grid, block, values, device, self.stream)
            self._add(name, None, bound, params, device)
            return
        assert isinstance(kernel, LaunchState)
        bound = bind_launch(kernel, grid, block, adopt_foreign(values), device, self.stream)
        for position in params:
            if isinstance(bound.arg_types[position], ConstexprType):
                raise CaptureError(f"{name}: argument #{position + 1} is a constexpr, compiled "
                                   "into the kernel: it cannot be a kiln.Param")
        self._add(name, kernel, bound, params, device)

    def record_bound(self, name: str, bound: BoundLaunch) -> None:
        self._check_recording(f"launching {name}")
        if bound.stream is not self.stream:
            self.refuse(f"launching {name} (prepared for {bound.stream!r}) on another stream "
                        f"than the capture's {self.stream!r}")
        self._add(name, None, bound, {}, None)

    def _check_recording(self, doing: str) -> None:
        if self._error is not None:
            raise CaptureError(f"{doing}: the capture was abandoned: {self._error}")

    def _take_params(self, name: str, args: Sequence[Any]) -> tuple[list[Any], dict[int, str]]:
        """The arguments with each kiln.Param's value, and which positions took which."""
        values, params, seen = list(args), {}, dict(self._params)
        for i, a in enumerate(args):
            if isinstance(a, Param):
                known = seen.setdefault(a.name, a.value)
                if known is not a.value and (type(known) is not type(a.value)
                                             or known != a.value):
                    raise CaptureError(f"launching {name} with kiln.Param {a.name!r} = "
                                       f"{a.value!r} after it was {known!r} (one name, one "
                                       "value)")
                values[i], params[i] = a.value, a.name
        return values, params

    def _add(self, name: str, kernel: LaunchState | None, bound: BoundLaunch,
             params: dict[int, str], device: Any) -> None:
        for position, param in params.items():  # known once the launch is recorded
            self._params.setdefault(param, bound.args[position])
        node = CapturedLaunch(len(self._launches), name, kernel, bound, params, device)
        self._steps.append(node)
        self._launches.append(node)

    def _watch_list(self) -> list[StatusWatch]:
        return [n.bound.watch for n in self._launches if n.bound.watch is not None]

    # ---- what was recorded
    @property
    def launches(self) -> tuple[CapturedLaunch, ...]:
        """The recorded launches, in order (copies left out)."""
        return tuple(self._launches)

    @property
    def native(self) -> bool:
        """Whether replays run (some) launches as the backend's own graphs (CUDA graphs)."""
        with self._lock:
            self._check_ready("asking about")
            if not self._units:
                self._units = self._group()
            return any(native is not None for _, native in self._units)

    @property
    def params(self) -> dict[str, Any]:
        """The current value of each `kiln.Param` the launches took."""
        return dict(self._params)

    # ---- replaying
    def replay(self, stream: Stream | None = None, **params: Any) -> None:
        """Set the named `kiln.Param`s (kept for later replays), then queue every recorded
        launch and copy, in order, on `stream` (by default the capture's)."""
        with self._lock:
            self._check_ready("replaying")
            if params:
                self._set_params(params)
            where = stream_on(self.device, stream, "replaying a graph")
            self._refresh_stale()
            if where is not self.stream and self._watches:
                raise CaptureError("a graph of kernels with run-time checks (debug=True) "
                                   "replays on the stream it was captured on")
            runs = self._runs.get(where)
            if runs is None:
                runs = self._runs[where] = self._build_runs(where)
            for run in runs:
                run()
            for watch in self._watches:
                watch.arm()

    launch = replay

    def _refresh_stale(self) -> None:
        """Never replay a kernel built with constant tables that changed since, as a launch
        never runs one (docs/language.md): its launches are bound again, which builds it
        again with the new values, and the replay plan is made again."""
        stale = {id(k) for k in self._kernels if k.tables().reads and k.tables().changed()}
        if not stale:
            return
        for node in self._launches:
            if node.kernel is not None and id(node.kernel) in stale:
                b = node.bound
                node.bound = bind_launch(node.kernel, b.grid, b.block, list(b.args),
                                         node.device_arg, self.stream)
        self._units, self._unit_of = [], {}
        self._runs = weakref.WeakKeyDictionary()
        self._watches = list({id(w): w for w in self._watch_list()}.values())

    def update(self, launch: CapturedLaunch | int, *, grid: Any = None, block: Any = None,
               dim: Any = None, **args: Any) -> None:
        """Change one recorded launch: its grid and block (or `dim=` for a launch made with
        `dim=`) and arguments by parameter name; checked as a launch is, and kept."""
        with self._lock:
            self._check_ready("updating")
            self._refresh_stale()  # the update keeps the kernel's current build
            node = self._launch(launch)
            bound = self._rebound(node, grid, block, dim, args)
            self._apply([(node, bound)])

    def close(self) -> None:
        """Let go of the recorded arrays and native graphs now (a replay is then an error)."""
        with self._lock:
            if self._state == "recording":
                raise CaptureError("close() inside the graph's own capture")
            self._state, self._why = "closed", "closed"
            self._steps, self._launches, self._units, self._watches = [], [], [], []
            self._kernels = []
            self._runs = weakref.WeakKeyDictionary()
            self._unit_of = {}

    def _check_ready(self, doing: str) -> None:
        if self._state == "ready":
            if RECORDING.recorder is not None:
                RECORDING.recorder.refuse(f"{doing} a graph")
            return
        if self._state == "recording":
            raise CaptureError(f"{doing} a graph before its capture ended")
        if self._state == "new":
            raise CaptureError(f"{doing} a graph that was never captured (write `with "
                               "kiln.capture(...) as g:`)")
        raise CaptureError(f"{doing} a graph that cannot replay: {self._why}")

    def _launch(self, launch: CapturedLaunch | int) -> CapturedLaunch:
        launches = self._launches
        if isinstance(launch, CapturedLaunch):
            if launch.index < len(launches) and launches[launch.index] is launch:
                return launch
            raise CaptureError(f"{launch!r} is not a launch of this graph")
        if isinstance(launch, (int, np.integer)) and not isinstance(launch, bool) \
                and -len(launches) <= launch < len(launches):
            return launches[launch]
        raise CaptureError(f"update takes one of graph.launches or its index (0 to "
                           f"{len(launches) - 1}), got {launch!r}")

    def _set_params(self, values: dict[str, Any]) -> None:
        unknown = sorted(set(values) - set(self._params))
        if unknown:
            raise CaptureError(f"replay: no kiln.Param named {', '.join(map(repr, unknown))} "
                               f"(this graph's: {', '.join(map(repr, self._params)) or 'none'})")
        values = {name: v for name, v in values.items()  # an unchanged value costs nothing
                  if type(v) is not type(self._params[name]) or v != self._params[name]}
        changes: list[tuple[CapturedLaunch, BoundLaunch]] = []
        converted: dict[tuple[Type, type, Any], Any] = {}
        for node in self._launches:
            named = {pos: values[n] for pos, n in node.params.items() if n in values}
            if named:
                changes.append((node, self._with_scalars(node, named, converted)))
        self._apply(changes)
        self._params.update(values)

    def _with_scalars(self, node: CapturedLaunch, named: dict[int, Any],
                      converted: dict[tuple[Type, type, Any], Any]) -> BoundLaunch:
        """The node's launch with scalar arguments `named` (by position) changed: each
        checked against its parameter's type (once per type and value: `converted`), then
        converted in place in the device arguments, with no new binding (a Param of
        thousands of launches changes in milliseconds). Where arguments were split
        (records), bound again instead."""
        old = node.bound
        kept = [i for i, t in enumerate(old.arg_types) if not isinstance(t, ConstexprType)]
        if node.kernel is None or len(kept) != len(old.device_args) - (old.watch is not None):
            return self._rebind(node, named, old.grid, old.block)
        slot = {position: k for k, position in enumerate(kept)}
        args, device_args = list(old.args), list(old.device_args)
        names = node.kernel.signature
        for position, value in named.items():
            t = old.arg_types[position]
            key = (t, type(value), value)
            if key not in converted:
                try:
                    check_argument(node.name, names[position][0], position, t, value)
                except LaunchError as exc:
                    raise CaptureError(f"updating launch #{node.index} of {node.name}: "
                                       f"{exc}") from None
                assert isinstance(t, ScalarType)  # a Param is a number, never a constexpr
                converted[key] = t.dtype.type(value)
            args[position], device_args[slot[position]] = value, converted[key]
        return dataclasses.replace(old, args=args, device_args=device_args)

    def _rebound(self, node: CapturedLaunch, grid: Any, block: Any, dim: Any,
                 args: dict[str, Any]) -> BoundLaunch:
        """The node's launch with the changes `update` asked for, checked."""
        rank = node._rank()
        if dim is not None and not rank:
            raise CaptureError(f"update: launch #{node.index} of {node.name} was made with a "
                               "grid and block: update grid= and block=, not dim=")
        if rank and (grid is not None or block is not None):
            raise CaptureError(f"update: launch #{node.index} of {node.name} was made with "
                               "dim=: update dim=, not grid= or block=")
        if node.kernel is None and args:
            raise CaptureError(f"update: launch #{node.index} of {node.name} is a raw or "
                               "prepared launch: only its grid and block can change")
        names = [n for n, _ in node.kernel.signature] if node.kernel is not None else []
        names = names[:-rank] if rank else names
        changed: dict[int, Any] = {}
        for pname, value in args.items():
            if pname not in names:
                raise CaptureError(f"update: {node.name} has no parameter {pname!r} "
                                   f"(its parameters: {', '.join(names)})")
            position = names.index(pname)
            if position in node.params:
                raise CaptureError(f"update: argument {pname!r} of launch #{node.index} is "
                                   f"kiln.Param {node.params[position]!r}: set it with "
                                   f"graph.replay({node.params[position]}=...)")
            changed[position] = value
        grid = node.bound.grid if grid is None else grid
        block = node.bound.block if block is None else block
        if dim is not None:
            assert node.kernel is not None
            sized = node.kernel.function
            assert isinstance(sized, SizedKernel)
            sizing = sized.kernel.sizing(dim, self.device)
            if sizing is None or sizing[0] is not sized:
                raise CaptureError(f"update: dim={dim!r} for launch #{node.index} of "
                                   f"{node.name}, made with a {rank}-axis dim, must be "
                                   f"{rank} positive size(s)")
            _, grid, block, shape = sizing
            changed.update({len(names) + axis: n for axis, n in enumerate(shape)})
        return self._rebind(node, changed, grid, block)

    def _rebind(self, node: CapturedLaunch, changed: dict[int, Any], grid: Any,
                block: Any) -> BoundLaunch:
        """Bind the node's launch again with arguments `changed` (by position) and `grid`,
        `block`: the same specialisation, or a CaptureError."""
        old = node.bound
        args = list(old.args)
        for position, value in changed.items():
            if isinstance(value, (Param, np.ndarray)):
                raise CaptureError(f"update: argument #{position + 1} of {node.name}: pass a "
                                   f"number or a device array, not {type(value).__name__}")
            args[position] = value
        try:
            if node.kernel is None:
                if changed:
                    raise CaptureError("only the grid and block of this launch can change")
                return BoundLaunch(old.routine, *self._dims(grid, block), old.args,
                                   old.arg_types, old.device_args, [], old.device, old.stream,
                                   old.watch)
            bound = bind_launch(node.kernel, grid, block, adopt_foreign(args), node.device_arg,
                                self.stream)
        except LaunchError as exc:
            raise CaptureError(f"updating launch #{node.index} of {node.name}: {exc}") from None
        if bound.routine is not old.routine or bound.arg_types != old.arg_types:
            raise CaptureError(
                f"updating launch #{node.index} of {node.name}: the new arguments' types "
                f"{bound.arg_types} differ from the recorded {old.arg_types} (another "
                "specialisation of the kernel): capture again with those types")
        return bound

    def _dims(self, grid: Any, block: Any) -> tuple[Dim3, Dim3]:
        grid3, block3 = as_dim3(grid, "grid"), as_dim3(block, "block")
        validate_dims(grid3, block3, self.device)
        return grid3, block3

    def _apply(self, changes: list[tuple[CapturedLaunch, BoundLaunch]]) -> None:
        """Give each node its checked launch, and its unit (native graph or run) too."""
        for node, bound in changes:
            node.bound = bound
            found = self._unit_of.get(node.index)
            if found is None:
                continue  # no runs built yet: the first replay builds them
            unit, position = found
            steps, native = self._units[unit]
            if native is not None:
                graphs = self.device.backend
                assert supports(graphs, KernelGraphs)
                graphs.update_graph(native, position, node.graph_launch())
            else:  # unprepared: preparing again can cost more than it saves (OpenCL)
                for stream, runs in self._runs.items():
                    runs[unit] = _run_of(node, stream, prepared=False)

    # ---- the plan: native graphs where the backend builds them, else prepared runs
    def _build_runs(self, stream: Stream) -> list[Run]:
        if not self._units:
            self._units = self._group()
        runs: list[Run] = []
        graphs = self.device.backend
        for steps, native in self._units:
            if native is not None:
                assert supports(graphs, KernelGraphs)
                runs.append(functools.partial(graphs.replay_graph, native, stream.handle))
            elif isinstance(steps[0], _Copy):
                runs.append(functools.partial(steps[0].copy, stream.handle))
            else:
                runs.append(_run_of(steps[0], stream))
        return runs

    def _group(self) -> list[tuple[list[Step], Any]]:
        """Units of replay: each run of launches as one native graph where the backend
        builds one, else one unit per step."""
        units: list[tuple[list[Step], Any]] = []
        backend = self.device.backend
        graphs = backend if supports(backend, KernelGraphs) else None
        pending: list[CapturedLaunch] = []

        def flush() -> None:
            native = (graphs.build_graph(self.device, [n.graph_launch() for n in pending])
                      if graphs is not None and pending else None)
            if native is not None:
                units.append((list(pending), native))
            else:
                units.extend(([n], None) for n in pending)
            pending.clear()

        for step in self._steps:
            if isinstance(step, CapturedLaunch):
                pending.append(step)
            else:
                flush()
                units.append(([step], None))
        flush()
        self._unit_of = {step.index: (u, k) for u, (steps, _) in enumerate(units)
                         for k, step in enumerate(steps) if isinstance(step, CapturedLaunch)}
        return units


def _run_of(node: CapturedLaunch, stream: Stream, prepared: bool = True) -> Run:
    """One launch on `stream`, packed once where the launchable can (`FastLaunch`) and
    `prepared` asks for it."""
    b = node.bound
    if prepared and supports(b.routine, FastLaunch):
        return b.routine.prepare_launch(b.grid, b.block, b.device_args, stream.handle)
    return functools.partial(b.routine.launch, b.grid, b.block, b.device_args, stream.handle)


def capture(where: Device | Stream | str | None = None) -> Graph:
    """A graph recording the launches (and `copy_from_host`) this thread makes inside `with
    kiln.capture(where) as g:` on a stream (a device's default stream), for `g.replay()`."""
    if isinstance(where, Stream):
        return Graph(where)
    if where is not None and not isinstance(where, (Device, str)):
        raise TypeError(f"kiln.capture takes a kiln.Device, a kiln.Stream, a device name or "
                        f"nothing, got {type(where).__name__}")
    return Graph(resolve_device(where).default_stream)
