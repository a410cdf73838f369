"""Kernels' `print` output through C stdio (the cpu backend's printf, the CUDA driver's
device printf) reaches the process's stdout by every synchronisation: `flush()` calls C's
`fflush` once a kernel that prints exists in this process (`printing_kernels()`), and costs
nothing before."""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any


def _c_fflush() -> Callable[[Any], int]:
    try:
        return ctypes.CDLL(None).fflush
    except (OSError, AttributeError):  # no C library to ask: nothing is buffered there
        return lambda _stream: 0


_state = {"printing": False}
_fflush = _c_fflush()


def printing_kernels() -> None:
    """Called when a kernel with `print` is built or loaded from the kernel cache."""
    _state["printing"] = True


def flush() -> None:
    if _state["printing"]:
        _fflush(None)
