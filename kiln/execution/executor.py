"""The one executor: validate -> specialise -> launch.

Every launch goes through `launch`. Specialisations are cached in the kernel's launch state
(`kiln.execution.state`) by (argument types, device, backend build identity); the first
launch of a signature asks the driver of the backend's execution model for a launchable
(`kiln.execution.drivers`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import DeviceMismatchError, LaunchError
from ..framework.backend import Dim3, FastLaunch, Launchable, supports
from ..framework.registry import registry
from ..ir.hosttypes import kiln_type_of
from ..ir.types import (
    SCALAR_BY_DTYPE,
    ArrayType,
    ConstexprType,
    ScalarType,
    Type,
    fits,
    i32,
    is_aggregate,
    literal_type,
)
from ..lang.records import argument_error
from ..runtime.array import DeviceArray, DeviceArrayView, stage_host
from ..runtime.device import CAPTURES, Device, Stream, as_stream, recorder, stream_on
from ..runtime.device import device as resolve_device
from ..runtime.interop import adopt
from ..runtime.status import StatusWatch
from .arguments import lowered_arguments
from .dims import as_dim3, validate_dims
from .drivers import driver_for
from .fastpath import remember, try_plan
from .state import LaunchState, Specialization

I32_MAX = i32.range()[1]
"""The largest extent of a launch's array arguments (kernel dimensions are i32)."""


def describe_value(value: Any) -> str:
    if isinstance(value, (DeviceArray, np.ndarray)):
        dt = np.dtype(value.dtype)
        swapped = "" if dt.isnative else (" in the other byte order (pass "
                                          "x.astype(x.dtype.newbyteorder('=')))")
        return f"a {dt.name} array of shape {tuple(value.shape)}{swapped}"
    return f"{type(value).__name__} {value!r}"


def type_of_value(value: Any) -> Type | None:
    """The kiln type a launch argument carries, or None when it has none."""
    if isinstance(value, (DeviceArray, np.ndarray)):
        elem = SCALAR_BY_DTYPE.get(np.dtype(value.dtype))
        return ArrayType(elem, value.ndim) if elem is not None else None
    if isinstance(value, (bool, int, float, np.generic)):
        try:
            return literal_type(value)
        except (TypeError, KeyError):
            return None
    return kiln_type_of(type(value))  # an instance of a @kiln.struct class


def check_argument(kernel_name: str, pname: str, position: int, expected: Type | None,
                   value: Any) -> Type:
    """Check one argument against its parameter; return the type to specialise on."""
    where = f"argument '{pname}' (#{position + 1}) of {kernel_name}"
    _check_array_form(where, value)
    if expected is not None and is_aggregate(
            expected.elem if isinstance(expected, ArrayType) else expected):
        problem = argument_error(expected, value)
        if problem is not None:
            raise LaunchError(f"{where}: {problem}")
        return expected
    actual = type_of_value(value)
    if actual is None:
        raise LaunchError(f"{where}: expected {expected or 'an array or a number'}, "
                          f"got {describe_value(value)}")
    if expected is None:
        return actual
    if isinstance(expected, ConstexprType):
        if isinstance(actual, ArrayType):
            raise LaunchError(f"{where}: a constexpr is a number or bool, got "
                              f"{describe_value(value)}")
        return ConstexprType(_python_number(value))
    if isinstance(expected, ArrayType):
        if not isinstance(actual, ArrayType):
            raise LaunchError(f"{where}: expected an array {expected}, got {describe_value(value)}")
        if actual.elem != expected.elem or actual.ndim != expected.ndim:
            raise LaunchError(
                f"{where}: expected {expected} ({expected.elem.dtype.name}, {expected.ndim}-d), "
                f"got {describe_value(value)}"
            )
        return expected
    assert isinstance(expected, ScalarType)
    if isinstance(actual, ArrayType):
        raise LaunchError(f"{where}: expected a scalar {expected}, got {describe_value(value)}")
    if expected.is_int and isinstance(value, (float, np.floating)):
        raise LaunchError(f"{where}: expected an integer {expected}, got {describe_value(value)}")
    if not expected.is_bool and not fits(_python_number(value), expected):
        lo, hi = expected.range()
        raise LaunchError(f"{where}: {value!r} does not fit {expected} (range {lo}..{hi})")
    if expected.is_float and not _float_fits(value):
        raise LaunchError(f"{where}: an int of {int(value).bit_length()} bits is too large "
                          f"for {expected}")
    if expected.is_float and _overflows(value, expected):
        raise LaunchError(f"{where}: {value!r} is too large for {expected}, where it would be "
                          f"an infinity (pass float('inf') for one), as kiln.full refuses")
    return expected


def _overflows(value: Any, t: ScalarType) -> bool:
    """Whether a finite number becomes an infinity in float type `t`."""
    number = float(value)
    if not math.isfinite(number):
        return False
    with np.errstate(over="ignore"):
        return not math.isfinite(float(t.dtype.type(number)))


def _check_array_form(where: str, value: Any) -> None:
    """Refuse arrays no kernel takes: views that are not one block, masked arrays, and
    extents kernels cannot index."""
    if isinstance(value, DeviceArrayView):
        raise LaunchError(f"{where}: kernels take C-contiguous arrays, and this view cannot "
                          f"be one: {value.launch_problem}; pass view.copy()")
    if isinstance(value, np.ma.MaskedArray):
        raise LaunchError(f"{where}: kernels take no masked arrays (a kernel would ignore "
                          f"the mask); pass x.filled(value) or x.data")
    if isinstance(value, (DeviceArray, np.ndarray)) and max(value.shape, default=0) > I32_MAX:
        raise LaunchError(f"{where}: an array of shape {tuple(value.shape)} has an extent "
                          f"over {I32_MAX}; kernels index arrays with i32 (split it)")


def _float_fits(value: Any) -> bool:
    """Whether a number converts to a float (an int too large for one does not)."""
    try:
        float(value)
    except OverflowError:
        return False
    return True


def _python_number(value: Any) -> int | float | bool:
    return value.item() if isinstance(value, np.generic) else value


def pick_device(args: Sequence[Any], device: Device | str | None) -> Device:
    if device is not None:
        return resolve_device(device)
    for a in args:
        if isinstance(a, DeviceArray):
            return a.device
    return resolve_device(None)


def launch_device(name: str, args: Sequence[Any], device: Device | str | None,
                  stream: Stream | None) -> Device:
    """The device a launch runs on: `device`, else the stream's, else the first device
    array's, else the default; a stream of another device (or not a stream) is refused."""
    stream = as_stream(stream, f"launching {name}")
    dev = stream.device if stream is not None and device is None else pick_device(args, device)
    stream_on(dev, stream, f"launching {name} on {dev.name}")
    return dev


def specialize(kernel: LaunchState, arg_types: tuple[Type, ...], device: Device) -> Specialization:
    """Build (or fetch from the kernel's cache) the launchable for one signature and device,
    through the driver of the backend's execution model (`kiln.execution.drivers`)."""
    kernel.check_tables()
    key = (arg_types, device.name, device.backend.build_identity(device))
    spec = kernel.specializations.get(key)
    if spec is None:
        built = driver_for(device).build(kernel, arg_types, device)
        spec = Specialization(built.program, built.launchable, built.written, device)
        kernel.specializations[key] = spec
    return spec


def check_arity(kernel: LaunchState, args: Sequence[Any]) -> None:
    params = kernel.signature
    if len(args) != len(params):
        names = ", ".join(name for name, _ in params)
        raise LaunchError(
            f"{kernel.name} takes {len(params)} argument(s) ({names}), got {len(args)}"
        )


def bind_arguments(kernel: LaunchState, args: Sequence[Any]) -> tuple[Type, ...]:
    check_arity(kernel, args)
    params = kernel.signature
    return tuple(check_argument(kernel.name, name, i, expected, value)
                 for i, ((name, expected), value) in enumerate(zip(params, args)))


def launch(kernel: LaunchState, grid: int | Sequence[int], block: int | Sequence[int],
           args: Sequence[Any], device: Device | str | None = None,
           stream: Stream | None = None) -> None:
    """Validate, specialise and run one launch (asynchronously where the backend can); inside
    a capture, record it instead (`kiln.execution.capture`)."""
    if try_plan(kernel, grid, block, device, stream, args):
        return
    capture = recorder()
    if capture is not None:
        capture.record_launch(kernel, grid, block, args, device, stream)
        return
    b = bind_launch(kernel, grid, block, adopt_foreign(args), device, stream)
    b.routine.launch(b.grid, b.block, b.device_args, b.stream.handle)
    if b.watch is not None:
        b.watch.arm()
    elif b.args is args and not b.copy_back and not _lowered(b.arg_types):
        key, tables = (device, stream), kernel.tables()
        dims = (grid, b.grid), (block, b.block)
        if supports(b.routine, FastLaunch):  # its own fast launch; it packs Python numbers
            call = b.routine.launch_target(b.device_args, b.stream.handle)
            remember(kernel, key, *dims, args, b.arg_types, b.device, call, convert=False,
                     tables=tables)
        else:
            remember(kernel, key, *dims, args, b.arg_types, b.device, b.routine.launch,
                     (b.stream.handle,), tables=tables)
    for host, dev_array in b.copy_back:
        if dev_array._host is host:  # zero-copy: the launch writes host memory; wait for it
            b.stream.synchronize()
        elif host.flags.c_contiguous:
            dev_array.copy_to_host(host, b.stream)
        else:  # a strided NumPy argument: the device had a contiguous copy of it
            host[...] = dev_array.copy_to_host(stream=b.stream)


@dataclass
class BoundLaunch:
    """A launch that passed every check: what to launch, with which device arguments."""

    routine: Launchable
    grid: Dim3
    block: Dim3
    args: Sequence[Any]
    arg_types: tuple[Type, ...]
    device_args: list[Any]
    copy_back: list[tuple[np.ndarray, DeviceArray]]
    device: Device
    stream: Stream
    watch: StatusWatch | None  # the kernel's run-time checks, armed after each launch


def bind_launch(kernel: LaunchState, grid: int | Sequence[int], block: int | Sequence[int],
                args: Sequence[Any], device: Device | str | None = None,
                stream: Stream | None = None) -> BoundLaunch:
    """Validate and specialise a launch; NumPy arguments are queued for the device."""
    dev = launch_device(kernel.name, args, device, stream)
    grid3, block3 = as_dim3(grid, "grid"), as_dim3(block, "block")
    validate_dims(grid3, block3, dev)
    arg_types = bind_arguments(kernel, args)
    for i, a in enumerate(args):
        if isinstance(a, DeviceArray) and a.device is not dev:
            raise DeviceMismatchError(f"argument '{kernel.signature[i][0]}' of {kernel.name} "
                                      f"lives on {a.device.name}, but the launch runs on "
                                      f"{dev.name}")
    spec = specialize(kernel, arg_types, dev)
    _check_writable(kernel, args, spec)
    stream = stream or dev.default_stream
    device_args, copy_back = _to_device_args(kernel, args, arg_types, spec, stream)
    watch = spec.watch(stream)
    if watch is not None:
        device_args.append(watch.array)
    return BoundLaunch(spec.routine, grid3, block3, args, arg_types, device_args,
                       copy_back, dev, stream, watch)


def _check_writable(kernel: LaunchState, args: Sequence[Any], spec: Specialization) -> None:
    """Refuse, before anything is queued, a read-only NumPy array the kernel may write:
    the launch would copy its results back into it."""
    for position, ((name, _), value) in enumerate(zip(kernel.signature, args)):
        if (isinstance(value, np.ndarray) and name in spec.written
                and not value.flags.writeable):
            raise LaunchError(
                f"argument '{name}' (#{position + 1}) of {kernel.name}: the kernel writes it, "
                "and this NumPy array is read-only (np.frombuffer of bytes, or "
                "setflags(write=False)); pass a writeable copy (x.copy()) or a device array")


def _lowered(arg_types: tuple[Type, ...]) -> bool:
    """Whether arguments are split for records, variants or vectors (no fast-path plan)."""
    return any(is_aggregate(t.elem if isinstance(t, ArrayType) else t) for t in arg_types)


def adopt_foreign(args: Sequence[Any]) -> Sequence[Any]:
    """Foreign device arrays (CuPy, PyTorch, JAX, ...) become DeviceArrays sharing their
    memory, through the adopters backends register (`kiln.runtime.interop`)."""
    if all(isinstance(a, _NATIVE_ARGS) for a in args):
        return args

    registry.entries()  # backends register their adopters on import
    return tuple(a if isinstance(a, _NATIVE_ARGS) else adopt(a) or a for a in args)


_NATIVE_ARGS = (DeviceArray, np.ndarray, bool, int, float, np.generic)


def _to_device_args(kernel: LaunchState, args: Sequence[Any], arg_types: tuple[Type, ...],
                    spec: Specialization, stream: Stream
                    ) -> tuple[list[Any], list[tuple[np.ndarray, DeviceArray]]]:
    """NumPy arrays go to the device (written ones come back); scalars take their type;
    constexpr arguments are part of the compiled kernel and are not passed."""
    out: list[Any] = []
    copy_back: list[tuple[np.ndarray, DeviceArray]] = []
    for (name, _), value, t in zip(kernel.signature, args, arg_types):
        if isinstance(t, ConstexprType):
            continue
        if isinstance(value, np.ndarray):
            dev_array = stage_host(value, spec.device, stream)
            if name in spec.written:
                copy_back.append((value, dev_array))
            out.append(dev_array)
        elif isinstance(t, ScalarType):
            out.append(t.dtype.type(value))
        else:
            out.append(value)
    program = spec.program
    params = program.arguments() if program else []
    if params and params[0].source is not None:  # records, variants or vectors were split
        types = [t for t in arg_types if not isinstance(t, ConstexprType)]
        out = lowered_arguments(types, params, out)
    return out, copy_back


class PreparedLaunch:
    """`kernel.prepare(grid, block, *args)`: a launch checked and packed once; each call
    runs it again with no checks (the arguments' contents may change, not the arguments).

    A `FastLaunch` launchable packs its parameters once (CUDA, OpenCL).
    """

    def __init__(self, kernel_name: str, bound: BoundLaunch) -> None:
        if bound.copy_back or any(isinstance(a, np.ndarray) for a in bound.args):
            raise LaunchError(f"prepare({kernel_name}): pass device arrays, not NumPy arrays")
        routine = bound.routine
        if supports(routine, FastLaunch):
            self._run = routine.prepare_launch(bound.grid, bound.block, bound.device_args,
                                               bound.stream.handle)
        else:
            self._run = functools.partial(routine.launch, bound.grid, bound.block,
                                          bound.device_args, bound.stream.handle)
        self.name, self.bound = kernel_name, bound

    def __call__(self) -> None:
        if CAPTURES[0] and (capture := recorder()) is not None:  # one load when none is open
            capture.record_bound(self.name, self.bound)
            return
        self._run()
        if self.bound.watch is not None:
            self.bound.watch.arm()
