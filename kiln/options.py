"""Kernel options: `@kiln.kernel(fastmath=True)` as a frozen, validated object.

`KernelOptions` is what backends receive with a kernel (`Compiler.compile(..., options)`),
what cache keys hash (by value: equal options, equal keys) and what the frontend reads
(`max_depth`). An unknown name is an `OptionError` naming the closest valid one; a value of
the wrong kind is one too, at decoration time rather than at the first launch.

Adding an option is one field here: `option(default, expects, check)`.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import settings
from .errors import OptionError
from .ir.nodes import Loc


def option(default: Any, expects: str, check: Callable[[Any], bool]) -> Any:
    """A field of `KernelOptions`: its default, what it accepts (for the error message)
    and the test of a value."""
    return field(default=default, metadata={"expects": expects, "check": check})


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool)


def _positive_int_or_none(value: Any) -> bool:
    return value is None or (isinstance(value, int) and not isinstance(value, bool)
                             and value >= 1)


@dataclass(frozen=True)
class KernelOptions:
    """The options of one `@kiln.kernel` or `@kiln.func` (every field has a default)."""

    fastmath: bool = option(False, "True or False", _is_bool)
    """Let the backend compiler reassociate, contract and approximate float math."""
    contract: bool = option(False, "True or False", _is_bool)
    """Let the backend compiler fuse `a * b + c` into fused multiply-adds (off by default on
    every backend, so results round as written; docs/language.md, contraction)."""
    debug: bool = option(settings.debug(), "True or False", _is_bool)
    """Check every index at run time on every backend: of arrays (the interp always does),
    and of views against their own extent, with slices' bounds (docs/language.md, Bounds).
    An index out of bounds raises `IndexOutOfBoundsError` at the launch's next
    synchronisation. `KILN_DEBUG=1` in the environment (read when kiln is imported) turns
    it on for all."""
    max_depth: int | None = option(None, "a positive int or None", _positive_int_or_none)
    """How deep a recursive `@kiln.func` is inlined on backends that cannot recurse."""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if not f.metadata["check"](value):
                raise OptionError(f"option {f.name} must be {f.metadata['expects']}, "
                                  f"got {value!r}")

    @classmethod
    def of(cls, options: dict[str, Any], where: str = "",
           loc: Loc | None = None) -> KernelOptions:
        """Options from keyword arguments; `where` (e.g. "@kiln.kernel saxpy") and `loc`
        say where they were written, for the error."""
        names = [f.name for f in dataclasses.fields(cls)]
        prefix = f"{where}: " if where else ""
        for name in options:
            if name not in names:
                close = difflib.get_close_matches(name, names, n=1)
                hint = f"did you mean {close[0]!r}? " if close else ""
                raise OptionError(f"{prefix}unknown option {name!r} ({hint}valid options: "
                                  f"{', '.join(names)})", loc)
        try:
            return cls(**options)
        except OptionError as exc:
            raise OptionError(prefix + exc.message, loc) from None

    def as_dict(self) -> dict[str, Any]:
        """Every option by name (for cache keys and build flags)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def changed(self) -> dict[str, Any]:
        """The options that differ from their defaults."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if getattr(self, f.name) != f.default}


DEFAULT_OPTIONS = KernelOptions()
