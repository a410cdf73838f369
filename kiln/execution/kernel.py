"""`@kiln.kernel` and `@kiln.func`: Python functions that kiln compiles."""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

from ..errors import KernelError, LaunchError, UnsupportedError
from ..framework.backend import Dim3, JITBackend
from ..framework.registry import registry, target_pipeline
from ..framework.sizing import Dim, as_shape, grid_and_block
from ..ir.nodes import Loc
from ..ir.passes import check_definite_assignment, check_program
from ..ir.passes.launch_size import SIZE_PARAMS, bound_to_size, needs_explicit_block
from ..ir.printer import format_program
from ..ir.types import Type, i32
from ..lang.frontend import build_program
from ..lang.functions import Compilable, DeviceFunction
from ..options import KernelOptions
from ..runtime.device import CAPTURES, devices_of
from ..runtime.device import device as resolve_device
from .drivers import frontend
from .executor import (
    PreparedLaunch,
    adopt_foreign,
    bind_launch,
    check_arity,
    launch_device,
    specialize,
)
from .executor import launch as execute_launch
from .fastpath import plan_key
from .state import LaunchState, Plan, Specialization
from .tablewatch import TableWatch

if TYPE_CHECKING:
    from ..framework.backend import Backend
    from ..ir.nodes import Program
    from ..runtime.device import Device, Stream

F = TypeVar("F", bound=Callable[..., Any])
Sizing: TypeAlias = "tuple[SizedKernel, Dim3, Dim3, tuple[int, ...]] | None"
"""A `dim=` launch worked out: the variant, grid, block and size arguments (None: no thread)."""
logger = logging.getLogger("kiln.cache")
MAX_LAUNCHERS = 64
"""Launchers kept per kernel (one per grid/block/stream configuration)."""


def _user_facing(method: F) -> F:
    """Re-raise kiln's errors from the public entry point, without internal frames."""

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except (KernelError, LaunchError) as exc:
            raise exc.with_traceback(None) from None

    return wrapper  # type: ignore[return-value]


class Kernel(Compilable):
    """A `@kiln.kernel`: launch with `kernel[grid, block](args...)` or `kiln.launch`."""

    def __init__(self, pyfunc: Callable[..., Any], options: KernelOptions) -> None:
        super().__init__(pyfunc, options)
        self.launch_state = LaunchState(self, self.program, self.built, self.check_tables,
                                        self.tables)
        """What the launch engine keeps for this kernel (`kiln.execution.state`)."""
        self._launchers: dict[Any, Launcher] = {}
        self._programs: dict[tuple[tuple[Type, ...], bool], Program] = {}
        self.frontend_runs = 0
        """How many signatures the frontend built for this kernel object (a kernel-cache
        hit runs none)."""
        self._sized: dict[int, SizedKernel] = {}
        self._sizings: dict[Any, Sizing] = {}
        self._tables: TableWatch | None = None

    @property
    def specializations(self) -> dict[Any, Specialization]:
        """The compiled kernels, by argument types, device and backend build identity."""
        return self.launch_state.specializations

    @property
    def launch_plans(self) -> dict[Any, Plan]:
        """The fast path's plans, by launch configuration (`kiln.execution.fastpath`)."""
        return self.launch_state.launch_plans

    def tables(self) -> TableWatch:
        """The constant tables this kernel reads, as it was built with them."""
        if self._tables is None:
            self._tables = TableWatch(self)
        return self._tables

    def check_tables(self) -> None:
        """Forget what was built if a table changed since, and watch the tables as the next
        build reads them: called before anything is built or looked up, so that no build
        (nor its kernel-cache entry, keyed by the tables' new content) holds stale values."""
        tables = self.tables()
        if tables.reads and tables.changed():
            logger.info("%s: rebuilt, module-level array(s) %s changed since it was built",
                        self.name, ", ".join(tables.changed_names()))
            self.forget_compiled()
            self.tables()

    def forget_compiled(self) -> None:
        """Drop every program, specialisation and launch plan, the `dim=` variants' too (a
        table changed): the next launch builds the kernel again, with the tables' new values."""
        for compiled in (self, *self._sized.values()):
            compiled._programs.clear()
            compiled.launch_state.clear()
            compiled._launchers.clear()
        self._tables = None

    def sized(self, rank: int = 1) -> SizedKernel:
        """The variant that `dim=` launches of `rank` axes run (`kiln.ir.passes.launch_size`)."""
        found = self._sized.get(rank)
        if found is None:
            found = self._sized[rank] = SizedKernel(self, rank)
        return found

    def sizing(self, dim: Any, device: Device) -> Sizing:
        """The grid, block and size arguments of a `dim=` launch on `device` (kept per
        size and device: a repeated launch by size pays one lookup)."""
        if not _exact_size(dim):  # 4.0 == 4 and True == 1 as keys: checked each time
            return self._new_sizing(dim, device)
        found = self._sizings.get((dim, device))
        if found is None:
            found = self._new_sizing(dim, device)
            if len(self._sizings) >= MAX_LAUNCHERS:
                self._sizings.clear()
            self._sizings[(dim, device)] = found
        return found

    def _new_sizing(self, dim: Any, device: Device) -> Sizing:
        shape = as_shape(dim)
        if 0 in shape:
            return None  # no elements, no threads (as Warp's wp.launch with dim=0)
        grid, block = grid_and_block(shape, device)
        return self.sized(len(shape)), grid, block, shape

    def __repr__(self) -> str:
        return f"<kiln.kernel {self.name}>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"launch a kernel with {self.name}[grid, block](...) or kiln.launch(...)")

    def __getitem__(self, config: Any) -> Launcher | SizedLauncher:
        try:  # launchers are kept per configuration: each remembers its fast-path plan
            launcher = self._launchers.get(config)
        except TypeError:  # an unhashable grid or block (a list)
            launcher = None
        # first: this lookup is all a repeated launch pays; an equal configuration of other
        # types (2.0 for 2) must not get the launcher of another (the full path refuses it)
        if launcher is not None and (launcher.config is config
                                     or _same_form(launcher.config, config)):
            return launcher
        if isinstance(config, Dim) or (isinstance(config, tuple) and len(config) == 2
                                       and isinstance(config[0], Dim)):
            size, stream = (config, None) if isinstance(config, Dim) else config
            return SizedLauncher(self, size, stream)
        if not isinstance(config, tuple) or not 2 <= len(config) <= 3:
            raise TypeError(f"write {self.name}[grid, block], {self.name}[grid, block, stream] "
                            f"or {self.name}[kiln.dim(n)]")
        launcher = Launcher(self, *config)
        launcher.config = config  # the very object: the next lookup's `is` test
        with contextlib.suppress(TypeError):
            if len(self._launchers) >= MAX_LAUNCHERS:
                self._launchers.clear()
            self._launchers[config] = launcher
        return launcher

    def program(self, arg_types: tuple[Type, ...], checked: bool = False) -> Program:
        """The typed IR for one argument-type signature (cached); `checked`: with views'
        indices and slices' bounds marked for `debug=True`'s checks."""
        self.check_tables()
        program = self._programs.get((arg_types, checked))
        if program is None:
            self.frontend_runs += 1
            program = check_program(build_program(self.pyfunc, arg_types, kernel=True,
                                                  checked=checked))
            check_definite_assignment(program)  # of the user's code (not of passes' output)
            self._programs[arg_types, checked] = program
        return program

    def built(self, arg_types: tuple[Type, ...]) -> bool:
        """Whether the frontend built this signature already (checked or not)."""
        return (arg_types, False) in self._programs or (arg_types, True) in self._programs

    def _types(self, types: Sequence[Type]) -> tuple[Type, ...]:
        if types:
            return tuple(types)
        missing = [name for name, t in self.signature if t is None]
        if missing:
            raise TypeError(f"{self.name}: give types for unannotated parameters {missing}")
        return tuple(t for _, t in self.signature)  # type: ignore[misc]

    @_user_facing
    def ir(self, *types: Type) -> str:
        """The IR printed for a signature (annotations when no types are given)."""
        return format_program(self.program(self._types(types)))

    @_user_facing
    def source(self, backend: str | Backend, *types: Type) -> str:
        """The source a JIT backend generates for a signature (lowered by its pipeline for
        its first device; by the shared device-independent one where it has none here),
        with the bounds checks of `debug=True`."""
        b = registry.get(backend).backend if isinstance(backend, str) else backend
        if not isinstance(b, JITBackend):
            raise UnsupportedError(f"the {b.name} backend generates no source (it runs the "
                                   f"IR itself): print {self.name}.ir() instead")
        program = frontend(self.launch_state, self._types(types), b)
        devices = devices_of(registry.get(b.name))
        for stage in b.pipeline(devices[0]) if devices else target_pipeline(b):
            program = stage(program)
        return b.compiler.generate_source(program)

    @_user_facing
    def prepare(self, grid: Any, block: Any, *args: Any, device: Device | str | None = None,
                stream: Stream | None = None) -> PreparedLaunch:
        """Check and pack a launch once; calling the result launches it again, unchecked."""
        return PreparedLaunch(self.name, bind_launch(self.launch_state, grid, block,
                                                     adopt_foreign(args), device, stream))

    @_user_facing
    def compile(self, device: Device | str | None = None, *types: Type) -> Specialization:
        """Compile ahead of a launch."""
        return specialize(self.launch_state, self._types(types), resolve_device(device))


def _same_form(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    """Whether two equal launch configurations also have the same types, item by item
    (and inside tuple items)."""
    for x, y in zip(a, b):
        if type(x) is not type(y):
            return False
        if type(x) is tuple and any(type(p) is not type(q) for p, q in zip(x, y)):
            return False
    return True


def _exact_size(dim: Any) -> bool:
    """Whether `dim` is a `kiln.dim`, an int or a tuple of ints (no bool, float or list)."""
    kind = type(dim)
    return kind is Dim or kind is int or (kind is tuple and all(type(d) is int for d in dim))


class SizedKernel(Kernel):
    """`kernel` bound to a launch's size of `rank` axes: the user's parameters, then the size
    along each axis (`i32`), and a return for the threads past it. Its specialisations,
    fast-path plans and kernel-cache entries are its own, apart from the explicit launches';
    the constant tables it watches are the kernel's (`tables`)."""

    def __init__(self, kernel: Kernel, rank: int) -> None:
        super().__init__(kernel.pyfunc, kernel.options)
        self.kernel, self.rank = kernel, rank
        self._signature = [*kernel.signature, *((name, i32) for name in SIZE_PARAMS[:rank])]

    def program(self, arg_types: tuple[Type, ...], checked: bool = False) -> Program:
        self.check_tables()
        program = self._programs.get((arg_types, checked))
        if program is None:
            user = self.kernel.program(arg_types[:-self.rank], checked)
            reason = needs_explicit_block(user)
            if reason is not None:
                raise LaunchError(f"{self.name} {reason}: launch it with the explicit "
                                  f"{self.name}[grid, block](...) it was written for, not by "
                                  "size (dim= runs exactly dim threads, in blocks kiln picks)")
            program = self._programs[arg_types, checked] = bound_to_size(user, self.rank)
        return program

    def tables(self) -> TableWatch:
        """The kernel's own watch: the variant is built from the kernel's programs, so a
        change either sees makes both build again (one watch, one rebuild)."""
        return self.kernel.tables()

    def built(self, arg_types: tuple[Type, ...]) -> bool:
        return super().built(arg_types) or self.kernel.built(arg_types[:-self.rank])

    def forget_compiled(self) -> None:
        self.kernel.forget_compiled()


class Launcher:
    """`kernel[grid, block]` or `kernel[grid, block, stream]`, ready to be called."""

    __slots__ = ("kernel", "grid", "block", "stream", "plan", "config")

    def __init__(self, kernel: Kernel, grid: Any, block: Any, stream: Stream | None = None):
        self.kernel, self.grid, self.block, self.stream = kernel, grid, block, stream
        self.plan: Plan | None = kernel.launch_plans.get(plan_key(None, stream))
        self.config: tuple[Any, ...] = (grid, block) if stream is None else (grid, block, stream)

    def __call__(self, *args: Any) -> None:
        plan = self.plan  # the fast path (execution.fastpath); it declines what it cannot run
        if plan is None or CAPTURES[0] or not plan(self.grid, self.block, args):
            state = self.kernel.launch_state
            try:
                execute_launch(state, self.grid, self.block, args, None, self.stream)
            except (KernelError, LaunchError) as exc:  # one frame, not kiln's internals
                raise exc.with_traceback(None) from None
            self.plan = state.launch_plans.get(plan_key(None, self.stream))


class SizedLauncher:
    """`kernel[kiln.dim(n)]` or `kernel[kiln.dim(n), stream]`: one thread per element."""

    __slots__ = ("kernel", "size", "stream")

    def __init__(self, kernel: Kernel, size: Any, stream: Stream | None = None) -> None:
        self.kernel, self.size, self.stream = kernel, size, stream

    def __call__(self, *args: Any) -> None:
        launch(self.kernel, args=args, stream=self.stream, dim=self.size)


@_user_facing
def launch(kernel: Kernel, grid: Any = None, block: Any = None, args: Sequence[Any] = (),
           device: Device | str | None = None, stream: Stream | None = None, *,
           dim: Any = None) -> None:
    """Launch `kernel` on a grid of `grid` blocks of `block` threads, or with `dim=n` (an int
    or a shape) one thread per element, the block chosen for the device."""
    autotuned = getattr(type(kernel), "launch_autotuned", None)  # kiln.autotune's kernels
    if autotuned is not None:
        autotuned(kernel, grid, block, args, device, stream, dim)
        return
    if not isinstance(kernel, Kernel):
        what = (f"{kernel.name} is a @kiln.func, which kernels call"
                if isinstance(kernel, DeviceFunction) else f"{kernel!r} is not a kernel")
        raise LaunchError(f"kiln.launch: {what}; launch a @kiln.kernel")
    if not isinstance(args, (tuple, list)):
        raise LaunchError(f"launching {kernel.name}: args= takes a tuple or list of the "
                          f"arguments, got {type(args).__name__} (for one: args=(x,))")
    if dim is None:
        if grid is None or block is None:
            raise LaunchError(f"launching {kernel.name} needs dim=n (one thread per element) "
                              "or both grid= and block=")
        execute_launch(kernel.launch_state, grid, block, args, device, stream)
        return
    if grid is not None or block is not None:
        raise LaunchError(f"launching {kernel.name}: give dim= or grid= and block=, not both "
                          "(dim chooses the grid and the block)")
    dev = launch_device(kernel.name, args, device, stream)
    sizing = kernel.sizing(dim, dev)
    check_arity(kernel.launch_state, args)
    if sizing is not None:
        sized, grid3, block3, shape = sizing
        execute_launch(sized.launch_state, grid3, block3, (*args, *shape),
                       dev if device is not None else None, stream)


def caller_loc() -> Loc | None:
    """Where user code (the first frame outside kiln) called into kiln."""
    frame = inspect.currentframe()
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(package):
        frame = frame.f_back
    if frame is None:
        return None
    return Loc(frame.f_code.co_filename, frame.f_lineno, 0)


def _decorator(cls: type[Compilable], decorator: str, fn: Callable[..., Any] | None,
               options: dict[str, Any]) -> Any:
    if fn is None:  # @kiln.kernel(...): check the options where they are written
        checked = _options(decorator, options, caller_loc())
        return lambda f: _decorator(cls, decorator, f, checked.changed())
    if not inspect.isfunction(fn):
        raise UnsupportedError(f"{decorator} decorates a function, got {fn!r}", caller_loc())
    code = fn.__code__
    return cls(fn, _options(f"{decorator} {fn.__name__}", options,
                            Loc(code.co_filename, code.co_firstlineno, 0)))


def _options(where: str, options: dict[str, Any], loc: Loc | None = None) -> KernelOptions:
    try:
        return KernelOptions.of(options, where, loc)
    except KernelError as exc:  # one frame: the decorator's line
        raise exc.with_traceback(None) from None


def kernel(fn: Callable[..., Any] | None = None, **options: Any) -> Any:
    """Decorate a SIMT kernel. Options (`kiln.KernelOptions`: `fastmath=True`, ...) reach
    the backend compiler; an unknown one is an `OptionError` naming the closest."""
    return _decorator(Kernel, "@kiln.kernel", fn, options)


def func(fn: Callable[..., Any] | None = None, **options: Any) -> Any:
    """Decorate a device function callable from kernels (`max_depth=N` for recursion)."""
    return _decorator(DeviceFunction, "@kiln.func", fn, options)
