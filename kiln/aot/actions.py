"""Actions (Futhark): procedures that turn lowered, specialised kernels into files.

An action has a name (what `kiln build --emit NAME` asks for), a description, and one
implementation per target it supports. Kiln registers the `library` action
(`kiln.aot.library`); backends add their targets to it when they are imported, and a
plugin registers a whole action, or a target of an existing one, the same way (or through
the entry-point group `kiln.actions`, whose objects are imported and, when they are
`Action`s, registered).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import import_module
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from ..framework.registry import registry
from ..ir.nodes import Program
from ..ir.types import Type
from ..options import DEFAULT_OPTIONS, KernelOptions

ENTRY_POINT_GROUP = "kiln.actions"
BUILTIN_ACTIONS = ("kiln.aot.library",)


class ActionError(Exception):
    """An action cannot do what was asked (a missing toolchain, an unknown architecture,
    a kernel it cannot take); the message says why and what to do."""


@dataclass(frozen=True)
class SpecialisedKernel:
    """One entry point to build: a kernel lowered by the target's pipeline for one
    signature. `types` are the kernel's parameter types as given (constexpr values
    included); `program` has the constexpr parameters folded away."""

    kernel: str
    types: tuple[Type, ...]
    parameters: tuple[str, ...]
    program: Program
    options: KernelOptions = DEFAULT_OPTIONS


@dataclass(frozen=True)
class ActionRequest:
    """What an action's target gets: kernels, where to write, and the build's settings."""

    name: str
    target: str
    kernels: Sequence[SpecialisedKernel]
    out_dir: Path
    architectures: tuple[str, ...] = ()
    settings: dict[str, Any] = field(default_factory=dict)


TargetProcedure = Callable[[ActionRequest], None]


@dataclass
class Action:
    """A named procedure; `targets` maps a target (backend) name to its implementation."""

    name: str
    description: str
    targets: dict[str, TargetProcedure] = field(default_factory=dict)

    def run(self, request: ActionRequest) -> None:
        procedure = self.targets.get(request.target)
        if procedure is None:
            raise ActionError(f"the {self.name} action has no target {request.target!r} "
                              f"(targets: {', '.join(sorted(self.targets)) or 'none'})")
        procedure(request)


_ACTIONS: dict[str, Action] = {}
_discovered = False


def register_action(action: Action) -> Action:
    """Register an action (an existing one of the same name keeps its targets)."""
    known = _ACTIONS.get(action.name)
    if known is not None:
        known.targets.update(action.targets)
        return known
    _ACTIONS[action.name] = action
    return action


def register_action_target(action: str, target: str, procedure: TargetProcedure) -> None:
    """Add (or replace) one target of a registered action."""
    _ACTIONS[action].targets[target] = procedure


def actions() -> list[Action]:
    """Every registered action, after importing the built-in ones, the backends (which
    add their targets) and the `kiln.actions` entry points."""
    global _discovered
    if not _discovered:
        _discovered = True
        for module in BUILTIN_ACTIONS:
            import_module(module)

        registry.entries()
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            found = ep.load()
            if isinstance(found, Action):
                register_action(found)
    return sorted(_ACTIONS.values(), key=lambda a: a.name)


def action_named(name: str) -> Action:
    for action in actions():
        if action.name == name:
            return action
    known = ", ".join(a.name for a in actions())
    raise ActionError(f"no action named {name!r} (actions: {known})")

