"""What the launch engine keeps for one kernel, apart from the kernel object users hold.

A `Kernel` (and each of its `dim=` variants) creates one `LaunchState` and hands it to the
engine: the executor caches specialisations in it, the fast path its launch plans, and the
drivers and the kernel key reach the kernel's function and programs through it. The engine
modules (`executor`, `fastpath`, `drivers`, `kernelcache`) import this module, never the
kernel's: they run on any `LaunchState`, and the kernel sits on top of them.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..framework.backend import Launchable
from ..ir.nodes import Program
from ..ir.types import Type
from ..lang.functions import Compilable
from ..options import KernelOptions
from ..runtime.device import Device, Stream
from ..runtime.status import StatusWatch
from .tablewatch import TableWatch

Plan = Callable[[Any, Any, Sequence[Any]], bool]
"""A launch plan (`kiln.execution.fastpath`): `plan(grid, block, args)` launches, or
declines (False)."""


class ProgramOf(Protocol):
    """A kernel's typed IR for one signature; `checked`: with `debug=True`'s marks."""

    def __call__(self, arg_types: tuple[Type, ...], checked: bool = False) -> Program: ...


class ProgramSource(Protocol):
    """What the frontend's program of a kernel comes from: its options and its programs
    (a `LaunchState`, or the kernel itself)."""

    @property
    def options(self) -> KernelOptions: ...

    @property
    def program(self) -> ProgramOf: ...


@dataclass
class Specialization:
    """A kernel ready to run on one device for one argument-type signature."""

    program: Program | None  # None where a CUSTOM backend took the kernel before the frontend
    routine: Launchable
    written: frozenset[str]  # names of array parameters the kernel may write
    device: Device
    watches: weakref.WeakKeyDictionary[Stream, StatusWatch] = field(
        default_factory=weakref.WeakKeyDictionary)

    def watch(self, stream: Stream) -> StatusWatch | None:
        """The status of this kernel's run-time checks on `stream` (None without checks)."""
        if self.program is None or not self.program.checks:
            return None
        found = self.watches.get(stream)
        if found is None:
            found = self.watches[stream] = StatusWatch(self.program.checks, stream)
        return found


class LaunchState:
    """One kernel's launch caches, with the ways to reach what they are built from.

    `function` is the kernel as written (name, parameters, options, Python function);
    `program(arg_types, checked=False)` its typed IR for a signature (cached by the kernel);
    `built(arg_types)` whether that program exists already; `check_tables()` forgets what
    was built once a constant table changed, and `tables()` is the kernel's table watch
    (`kiln.execution.tablewatch`). The engine fills `specializations` (by argument types,
    device and build identity) and `launch_plans` (by `fastpath.plan_key`).
    """

    __slots__ = ("function", "program", "built", "check_tables", "tables",
                 "specializations", "launch_plans")

    def __init__(self, function: Compilable,
                 program: ProgramOf,
                 built: Callable[[tuple[Type, ...]], bool],
                 check_tables: Callable[[], None],
                 tables: Callable[[], TableWatch]) -> None:
        self.function = function
        self.program = program
        self.built = built
        self.check_tables = check_tables
        self.tables = tables
        self.specializations: dict[Any, Specialization] = {}
        self.launch_plans: dict[Any, Plan] = {}

    @property
    def name(self) -> str:
        return self.function.name

    @property
    def signature(self) -> list[tuple[str, Type | None]]:
        return self.function.signature

    @property
    def options(self) -> KernelOptions:
        return self.function.options

    @property
    def pyfunc(self) -> Callable[..., Any]:
        return self.function.pyfunc

    def clear(self) -> None:
        """Forget every specialisation and launch plan (the kernel is built again)."""
        self.specializations.clear()
        self.launch_plans.clear()
