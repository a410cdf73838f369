"""The registry of conformance cases and what each needs from a device.

A case is a function `case(device) -> None` that launches kernels on `device` and raises
`AssertionError` (with a message saying what differed) when a result is wrong. A case whose
device lacks a capability it needs (f64, an atomic on some type) is skipped with the reason;
a case may also raise `Skipped` itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..framework.backend import Capabilities
from ..ir.passes.features import supports_atomic
from ..ir.types import ScalarType, Type, f64

if TYPE_CHECKING:
    from ..execution.kernel import Kernel
    from ..runtime.device import Device

CaseFunction = Callable[["Device"], None]


class Skipped(Exception):
    """Raised by a case that cannot run on a device; the message says why."""


@dataclass(frozen=True)
class Requirement:
    """A capability a case needs; `missing(caps)` is the reason it is absent, or None."""

    description: str
    missing: Callable[[Capabilities], str | None]


def _no_fp64(caps: Capabilities) -> str | None:
    return None if caps.fp64 else f"{caps.name} has no f64 support"


FP64 = Requirement("f64", _no_fp64)


def has_atomic(caps: Capabilities, name: str, t: ScalarType) -> bool:
    """Whether a device supports atomic `name` on `t` elements.

    `Capabilities.atomics` lists `"<atomic>:<type>"` entries (`"atomic_add:f32"`). f64 also
    needs fp64.
    """
    if t == f64 and not caps.fp64:
        return False
    return supports_atomic(caps.atomics, name, t.name)


def atomic(name: str, t: ScalarType) -> Requirement:
    def missing(caps: Capabilities) -> str | None:
        return None if has_atomic(caps, name, t) else f"{caps.name} lacks {name} on {t}"

    return Requirement(f"{name}:{t.name}", missing)


@dataclass(frozen=True)
class Case:
    name: str
    run: CaseFunction
    description: str
    requires: tuple[Requirement, ...] = ()

    def skip_reason(self, caps: Capabilities) -> str | None:
        """Why the case cannot run on a device with `caps`, or None when it can."""
        reasons = [r for r in (req.missing(caps) for req in self.requires) if r]
        return "; ".join(dict.fromkeys(reasons)) or None


_CASES: dict[str, Case] = {}
_SIGNATURES: dict[Kernel, list[tuple[Type, ...]]] = {}


def register(case_: Case) -> Case:
    if case_.name in _CASES:
        raise ValueError(f"conformance case {case_.name!r} is registered twice")
    _CASES[case_.name] = case_
    return case_


def case(name: str | None = None, *, requires: tuple[Requirement, ...] = (),
         description: str | None = None) -> Callable[[CaseFunction], CaseFunction]:
    """Register a case function under `name` (default: the function's name); the
    description defaults to the first line of its docstring."""

    def decorate(fn: CaseFunction) -> CaseFunction:
        doc = (fn.__doc__ or "").strip().splitlines()
        text = description if description is not None else (doc[0] if doc else "")
        register(Case(name or fn.__name__, fn, text, requires))
        return fn

    return decorate


def all_cases() -> list[Case]:
    """Every registered case, in registration order (the package registers the built-in
    cases when it is imported)."""
    return list(_CASES.values())


def signatures(*types: tuple[Type, ...]) -> Callable[[Kernel], Kernel]:
    """Declare the argument types a kernel with unannotated parameters is launched with.

    The IR coverage check builds each kernel's program for these (or its annotations).
    """

    def decorate(kernel: Kernel) -> Kernel:
        _SIGNATURES.setdefault(kernel, []).extend(types)
        return kernel

    return decorate


def declared_signatures(kernel: Kernel) -> list[tuple[Type, ...]]:
    return list(_SIGNATURES.get(kernel, ()))
