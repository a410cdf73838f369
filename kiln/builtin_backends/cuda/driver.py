"""The CUDA driver through NVIDIA's cuda-bindings, loaded lazily and probed safely.

Nothing here imports cuda-bindings at module import, so `import kiln` works without it.
`probe()` decides availability once: without a driver, `cuInit` fails cleanly, but loading
a module afterwards would raise `SystemError` and hang every later driver call, so no
module is ever loaded unless the probe succeeded.
"""

from __future__ import annotations

import threading
from functools import cache
from typing import Any

from ...backend import Availability


class CudaError(RuntimeError):
    """A CUDA driver call failed; the message names the call and the driver's error."""


@cache
def api() -> Any:
    """The `cuda.bindings.driver` module."""
    from cuda.bindings import driver

    return driver


def check(result: tuple[Any, ...], what: str) -> Any:
    """Unpack a cuda-bindings result `(status, *values)`, raising CudaError on failure."""
    status = result[0]
    if status != 0:
        raise CudaError(f"{what} failed: {error_name(status)}")
    if len(result) == 1:
        return None
    return result[1] if len(result) == 2 else result[1:]


def error_name(status: Any) -> str:
    drv = api()
    err, name = drv.cuGetErrorName(status)
    err2, text = drv.cuGetErrorString(status)
    name_s = name.decode() if err == 0 and name else str(status)
    text_s = text.decode() if err2 == 0 and text else ""
    return f"{name_s} ({text_s})" if text_s else name_s


@cache
def probe() -> Availability:
    """Whether the CUDA driver and at least one GPU are usable here (never raises)."""
    try:
        drv = api()
    except ImportError:
        return Availability(False, "cuda-bindings is not installed (pip install 'kiln[cuda]')")
    try:
        status, = drv.cuInit(0)
    except Exception as exc:  # DynamicLibNotFoundError when libcuda is absent
        return Availability(False, f"no NVIDIA driver: {exc}")
    if status != 0:
        return Availability(False, f"cuInit failed: {error_name(status)}")
    status, count = drv.cuDeviceGetCount()
    if status != 0 or count == 0:
        return Availability(False, "the NVIDIA driver reports no GPU")
    return Availability(True)


def driver_version() -> int:
    """The CUDA version the driver supports, e.g. 13000 for 13.0."""
    return int(check(api().cuDriverGetVersion(), "cuDriverGetVersion"))


class Context:
    """A device's primary context, made current on demand in whichever thread needs it."""

    _current = threading.local()

    def __init__(self, ordinal: int) -> None:
        drv = api()
        self.ordinal = ordinal
        self.device = check(drv.cuDeviceGet(ordinal), "cuDeviceGet")
        self.handle = check(drv.cuDevicePrimaryCtxRetain(self.device), "cuDevicePrimaryCtxRetain")

    def activate(self) -> None:
        """Make this context current in the calling thread (cheap when it already is)."""
        if getattr(self._current, "ctx", None) is not self:
            check(api().cuCtxSetCurrent(self.handle), "cuCtxSetCurrent")
            self._current.ctx = self
