"""Execution-model drivers: how the executor turns a kernel into a launchable, per model.

The executor dispatches on `backend.execution_model` through this table, never on the
model itself: `JIT` compiles (through the kernel cache) and loads, `DIRECT` hands lowered
IR to the backend, `CUSTOM` hands the backend the kernel before the frontend. A plugin adds
a model with `register_execution_model(name, driver)`.
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import LaunchError
from ..framework.backend import (
    Backend,
    CustomBackend,
    DirectBackend,
    ExecutionModel,
    JITBackend,
    KernelRequest,
    Launchable,
    RunsProgram,
    supports,
)
from ..ir.analysis import written_params
from ..ir.nodes import Program
from ..ir.passes.bounds import check_bounds
from ..ir.types import ArrayType, Type
from .kernelcache import kernel_key
from .state import LaunchState, ProgramSource

if TYPE_CHECKING:
    from ..runtime.device import Device


@dataclass(frozen=True)
class Built:
    """What a driver makes for one signature on one device: the launchable, the lowered
    program (None where the backend took the kernel before the frontend) and the names of
    the array parameters the kernel may write (copied back when given NumPy arrays)."""

    launchable: Launchable
    program: Program | None
    written: frozenset[str]


class ExecutionDriver(ABC):
    """Builds launchables for the backends of one execution model, from a kernel's launch
    state (`kiln.execution.state.LaunchState`: its name, signature, options, Python
    function and `program(arg_types)`)."""

    @abstractmethod
    def build(self, kernel: LaunchState, arg_types: tuple[Type, ...], device: Device) -> Built: ...


def frontend(kernel: ProgramSource, arg_types: tuple[Type, ...], backend: Backend) -> Program:
    """The program `backend`'s pipeline receives: the frontend's, and with `debug=True`
    its bounds checks (`kiln.ir.passes.bounds`: of views only, where the backend checks
    every array access itself)."""
    if not kernel.options.debug:
        return kernel.program(arg_types)
    return check_bounds(kernel.program(arg_types, checked=True),
                        arrays=not backend.checks_bounds)


def lower(kernel: LaunchState, arg_types: tuple[Type, ...], device: Device
          ) -> tuple[Program, frozenset[str]]:
    """The frontend, then the backend's pipeline: the lowered program and the names of the
    (original) parameters it may write."""
    program = original = frontend(kernel, arg_types, device.backend)
    for stage in device.backend.pipeline(device):
        program = stage(program)
    return program, written_by(original, program)


def written_by(original: Program, program: Program) -> frozenset[str]:
    """The names of the parameters of `original` (the frontend's program) that `program`
    (lowered from it) may write."""
    params = program.arguments()  # not the status array of run-time checks
    written = written_params(program) & {p.name for p in params}
    if params and params[0].source is not None:  # records, variants or vectors were split
        names = [p.name for p in original.arguments()]
        written = {names[p.source.index] for p in params
                   if p.name in written and p.source is not None}
    return frozenset(written)


class JITDriver(ExecutionDriver):
    """Compile (or find in the kernel cache, before the frontend) and load."""

    def build(self, kernel: LaunchState, arg_types: tuple[Type, ...], device: Device) -> Built:
        backend = device.backend
        assert isinstance(backend, JITBackend)
        stored = kernel_key(kernel, arg_types, device)
        found = stored.load() if stored is not None else None
        if found is not None:
            program, compiled, written = found.program, found.compiled, found.written
        else:
            program, written = lower(kernel, arg_types, device)
            compiled = backend.compiler.compile(program, device, kernel.options)
        launchable = backend.loader.load(compiled, device)
        if stored is not None and found is None:
            stored.store(program, written, compiled)
        return Built(launchable, program, written)


class DirectProgram:
    """A lowered program bound to a DIRECT backend: `launch` is its `execute`."""

    def __init__(self, backend: DirectBackend, program: Program) -> None:
        self.launch = functools.partial(backend.execute, program)


class DirectDriver(ExecutionDriver):
    def build(self, kernel: LaunchState, arg_types: tuple[Type, ...], device: Device) -> Built:
        backend = device.backend
        assert isinstance(backend, DirectBackend)
        program, written = lower(kernel, arg_types, device)
        return Built(DirectProgram(backend, program), program, written)


class CustomDriver(ExecutionDriver):
    """The backend receives the kernel as written and returns a launchable. One that runs
    kiln's lowered IR (`RunsProgram`) gets kiln's argument handling for that program
    (records split, run-time checks, written arrays copied back); any other receives the
    arguments as passed, and every array may be written."""

    def build(self, kernel: LaunchState, arg_types: tuple[Type, ...], device: Device) -> Built:
        backend = device.backend
        assert isinstance(backend, CustomBackend)
        request = KernelRequest(kernel.name, kernel.pyfunc, arg_types, kernel.options,
                                functools.partial(frontend, kernel, arg_types, backend))
        launchable = backend.load_kernel(request, device)
        if supports(launchable, RunsProgram):
            program = launchable.program
            return Built(launchable, program, written_by(kernel.program(arg_types), program))
        written = frozenset(name for (name, _), t in zip(kernel.signature, arg_types)
                            if isinstance(t, ArrayType))
        return Built(launchable, None, written)


_DRIVERS: dict[ExecutionModel, ExecutionDriver] = {
    ExecutionModel.JIT: JITDriver(),
    ExecutionModel.DIRECT: DirectDriver(),
    ExecutionModel.CUSTOM: CustomDriver(),
}


def register_execution_model(name: str, driver: ExecutionDriver) -> ExecutionModel:
    """Add an execution model (or give an existing one a new driver); backends name it as
    their `execution_model`."""
    if not isinstance(driver, ExecutionDriver):
        raise TypeError(f"the driver of execution model {name} must be an ExecutionDriver, "
                        f"got {driver!r}")
    model = ExecutionModel.register(name)
    _DRIVERS[model] = driver
    return model


def driver_for(device: Device) -> ExecutionDriver:
    model = device.backend.execution_model
    driver = _DRIVERS.get(model)
    if driver is None:
        raise LaunchError(f"backend {device.backend.name!r} runs kernels by execution model "
                          f"{model!r}, which has no driver (a plugin registers one with "
                          "kiln.backend.register_execution_model)")
    return driver
