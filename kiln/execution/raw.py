"""`kiln.RawKernel`: hand-written kernel source (or a binary module) launched like a kernel.

The front is generic: a backend that supports raw kernels implements the `RawKernels`
protocol, `load_raw(code, name, device, options) -> Launchable`. Arguments are kiln arrays
(or foreign ones, adopted without copies), passed as pointers only, and scalars: NumPy
scalars keep their type, Python numbers follow kiln's literal rules (int -> int32, or int64
when it does not fit; float -> float32).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import DeviceMismatchError, LaunchError, OptionError
from ..framework.backend import Launchable, RawKernels, supports
from ..ir.types import literal_type
from ..options import KernelOptions
from ..runtime.array import DeviceArray
from ..runtime.device import Device, Stream, recorder
from .dims import as_dim3, validate_dims
from .executor import BoundLaunch, adopt_foreign, launch_device
from .kernel import caller_loc


class RawKernel:
    """`RawKernel(source, name, backend="cuda")`, launched with `k[grid, block](args...)`.

    `source` is backend source text (CUDA C++ with an `extern "C"` entry point), or a
    module the backend loads as is (PTX text, cubin bytes): the backend tells them apart.
    """

    def __init__(self, source: str | bytes, name: str, backend: str = "cuda",
                 **options: Any) -> None:
        self.source, self.name, self.backend_name = source, name, backend
        if options.get("debug"):  # KILN_DEBUG=1 (the default then) is fine: nothing to check
            raise OptionError(f"RawKernel {name}: debug=True checks the indices of kiln "
                              "kernels; a raw kernel's source runs as it is written")
        self.options = KernelOptions.of(options, f"RawKernel {name}", caller_loc())
        self._routines: dict[Device, Launchable] = {}

    def __repr__(self) -> str:
        return f"<kiln.RawKernel {self.name} ({self.backend_name})>"

    def __getitem__(self, config: tuple[Any, ...]) -> Any:
        if not isinstance(config, tuple) or not 2 <= len(config) <= 3:
            raise TypeError(f"write {self.name}[grid, block] or {self.name}[grid, block, stream]")
        grid, block, *rest = config
        return lambda *args: self.launch(grid, block, args, stream=rest[0] if rest else None)

    def routine(self, device: Device) -> Launchable:
        """The loaded kernel on `device` (compiled on first use)."""
        routine = self._routines.get(device)
        if routine is None:
            backend = device.backend
            if not supports(backend, RawKernels):
                raise LaunchError(f"backend {backend.name!r} does not load raw kernels")
            routine = self._routines[device] = backend.load_raw(self.source, self.name, device,
                                                                self.options)
        return routine

    def launch(self, grid: Any, block: Any, args: Sequence[Any],
               device: Device | str | None = None, stream: Stream | None = None) -> None:
        capture = recorder()
        if capture is not None:  # kiln.capture records it (kiln.execution.capture)
            capture.record_launch(self, grid, block, args, device, stream)
            return
        b = self.bind(grid, block, args, device, stream)
        b.routine.launch(b.grid, b.block, b.device_args, b.stream.handle)

    def bind(self, grid: Any, block: Any, args: Sequence[Any],
             device: Device | str | None = None, stream: Stream | None = None) -> BoundLaunch:
        """Check a launch and convert its arguments (without launching it)."""
        args = adopt_foreign(args)
        arrays = any(isinstance(a, DeviceArray) for a in args)
        if device is None and stream is None and not arrays:
            device = self.backend_name  # the best device of the kernel's backend
        dev = launch_device(self.name, args, device, stream)
        if dev.backend.name != self.backend_name:
            raise LaunchError(f"{self.name} is a {self.backend_name} kernel; "
                              f"{dev.name} is a {dev.backend.name} device")
        routine = self.routine(dev)  # first: a backend without raw kernels says so
        grid3, block3 = as_dim3(grid, "grid"), as_dim3(block, "block")
        validate_dims(grid3, block3, dev)
        values = [self._argument(i, a, dev) for i, a in enumerate(args)]
        return BoundLaunch(routine, grid3, block3, args, (), values, [], dev,
                           stream or dev.default_stream, None)

    def _argument(self, i: int, value: Any, dev: Device) -> Any:
        if isinstance(value, DeviceArray):
            if value.device is not dev:
                raise DeviceMismatchError(f"argument #{i + 1} of {self.name} lives on "
                                  f"{value.device.name}, not {dev.name}")
            return value
        if isinstance(value, np.generic):
            return value
        if isinstance(value, (bool, int, float)):
            return literal_type(value).dtype.type(value)
        raise LaunchError(f"argument #{i + 1} of {self.name}: expected a device array or a "
                          f"number, got {type(value).__name__}")
