"""The Python functions the frontend compiles: what `@kiln.kernel` and `@kiln.func` objects
share, and `@kiln.func` itself.

A device function lives here, with the frontend that inlines or calls it; a kernel (which
holds launch caches) is built on `Compilable` in `kiln/execution/kernel.py`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from ..ir.types import Type
from ..options import KernelOptions
from .resolve import parameter_types


class Compilable:
    """What kernels and device functions share: the Python function and its parameters."""

    def __init__(self, pyfunc: Callable[..., Any], options: KernelOptions) -> None:
        self.pyfunc = pyfunc
        self.name = pyfunc.__name__
        self.options = options
        functools.update_wrapper(self, pyfunc)  # type: ignore[arg-type]
        self._signature: list[tuple[str, Type | None]] | None = None

    @property
    def signature(self) -> list[tuple[str, Type | None]]:
        """Parameter names with their annotated kiln types (None where unannotated)."""
        if self._signature is None:
            self._signature = parameter_types(self.pyfunc)
        return self._signature


class DeviceFunction(Compilable):
    """A `@kiln.func`: callable from kernels and other device functions."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"{self.name} is a @kiln.func: call it from a kernel")
