"""Errors raised for user mistakes: in kernels (KernelError) and at launches (LaunchError),
and the source location (`Loc`) a kernel error points at.

The bottom of the layer stack (docs/architecture.md): every layer raises these, so this
module imports nothing of kiln.
"""

from __future__ import annotations

import linecache
from dataclasses import dataclass


@dataclass(frozen=True)
class Loc:
    """A position in user source: 1-based line, 0-based column."""

    file: str
    line: int
    col: int
    end_col: int | None = None

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col + 1}"


class KernelError(Exception):
    """A kernel that kiln cannot compile; the message points at the user's source."""

    kind = "kernel error"

    def __init__(self, message: str, loc: Loc | None = None) -> None:
        self.message = message
        self.loc = loc
        super().__init__(self._render())

    def _render(self) -> str:
        if self.loc is None:
            return self.message
        text = f"{self.loc}: {self.kind}: {self.message}"
        line = linecache.getline(self.loc.file, self.loc.line).rstrip("\n")
        if line:
            stripped = line.lstrip()
            indent = len(line) - len(stripped)
            width = max(1, (self.loc.end_col or self.loc.col + 1) - self.loc.col)
            caret = " " * (self.loc.col - indent) + "^" * width
            text += f"\n    {stripped}\n    {caret}"
        return text

    @property
    def line(self) -> int | None:
        return self.loc.line if self.loc else None


class UnknownNameError(KernelError):
    kind = "unknown name"


class KernelTypeError(KernelError):
    kind = "type error"


class ArityError(KernelError):
    kind = "wrong number of arguments"


class UnsupportedError(KernelError):
    kind = "unsupported"


class ConvergenceError(KernelError):
    kind = "divergent barrier"


class ConstantError(KernelError):
    kind = "not a compile-time constant"


class DeviceFeatureError(KernelError):
    kind = "device lacks a feature"


class BackendCompileError(KernelError):
    kind = "backend compiler error"


class RecursionDepthError(KernelError):
    """Recursion without a depth where the backend cannot recurse, or deeper than its
    `max_depth` (raised at run time: by the interp at once, by backends that inline
    recursion at the launch's next synchronisation)."""

    kind = "recursion"


class IndexOutOfBoundsError(KernelError, IndexError):
    """An array index outside the array, found while the kernel runs: by the interp at once,
    by the other backends with `debug=True` at the launch's next synchronisation. Also an
    IndexError, as in Python."""

    kind = "index out of bounds"


class OptionError(KernelError, TypeError):
    """An unknown kernel option (the message names the closest valid one) or a bad value;
    also a TypeError, as an unknown keyword argument is in Python."""

    kind = "kernel option"


class LaunchError(Exception):
    """A launch that cannot run: bad grid/block, wrong argument count, type or shape."""


class DeviceMismatchError(LaunchError, ValueError):
    """A stream, event or array of one device given to work on another: a launch (hence a
    LaunchError), a copy or an event (hence also a ValueError, as other bad arguments of
    the host API are). kiln never moves work between devices behind the user's back."""


class CaptureError(LaunchError):
    """Work that `kiln.capture` cannot record or a recorded graph cannot replay: waiting or
    reading back inside a capture, work on another stream or device, a bad update. An error
    inside a capture abandons it (docs/graphs.md)."""


class CopyError(ValueError):
    """A copy whose two sides do not fit: an `out` or a source of another shape or dtype,
    or an `out` that is not C-contiguous or is read-only. The message names both sides."""


class SettingError(ValueError):
    """A `KILN_*` environment variable kiln cannot use (docs/configuration.md); the message
    names the variable, its value and what it expects. A ValueError, as a bad argument is."""


class OutOfMemoryError(MemoryError):
    """An allocation the device cannot make (too large for it, or its memory is full);
    the message names the size and the device. A MemoryError, as NumPy's is."""


for _error in (KernelError, UnknownNameError, KernelTypeError, ArityError, UnsupportedError,
               ConvergenceError, ConstantError, DeviceFeatureError, BackendCompileError,
               IndexOutOfBoundsError, LaunchError, DeviceMismatchError, CaptureError, CopyError,
               SettingError, OutOfMemoryError):
    _error.__module__ = "kiln"  # tracebacks name them as users import them: kiln.LaunchError


class ContractError(TypeError):
    """A backend that kiln cannot register: a missing part of the contract, or a contract
    version kiln does not support (the message names both versions). Also a TypeError, as
    an object of the wrong kind is in Python."""
