"""The launch fast path: a validated launch, remembered per device and stream.

After a launch passes the executor's full checks, `remember` compiles a small Python
function (a *plan*) for its device and stream that re-checks only what can change between
calls with the same types: the grid and block (plain ints or tuples of ints, within the
device's limits), each argument's Python type, each array's device, dtype and rank, each
integer's (and narrow float's) range, each constexpr's value. When those hold, the plan
converts the scalars and calls the backend directly, skipping device selection, type
binding and the specialisation lookup. When they do not, the plan declines and the
executor's full path runs (and remembers a new plan). A launch whose grid, block or
scalar arguments change every call therefore costs what a repeated one costs.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..framework.backend import Dim3
from ..ir.types import ConstexprType, ScalarType, Type, i32
from ..runtime.array import DeviceArray
from ..runtime.device import CAPTURES, Device
from .dims import dims3, within_limits
from .state import LaunchState
from .tablewatch import TableWatch

_SCALAR_TYPES = (bool, int, float, np.generic)
MAX_PLANS = 64
"""Plans kept per kernel (one per device and stream)."""
MAX_DIMS = 256
"""Checked dimensions a plan remembers (`SEEN`), each as one pair of tuples, so that a
launch target can tell by identity that a launch has the dimensions of the last one."""


def plan_key(device: Any, stream: Any) -> tuple[Any, ...]:
    """A plan's key in `kernel.launch_plans`: the device as the launch named it and its
    stream by id, so that plans never keep a stream (its queue, its worker thread) alive;
    `remember` drops a stream's plans with it, before its id can be reused."""
    return (device, None if stream is None else id(stream))


def try_plan(kernel: LaunchState, grid: Any, block: Any, device: Any, stream: Any,
             args: Sequence[Any]) -> bool:
    """Run the launch through a remembered plan; False when none applies (or while a
    capture records: the recording path sees every launch)."""
    if CAPTURES[0]:
        return False
    try:
        plan = kernel.launch_plans.get(plan_key(device, stream))
    except TypeError:  # an unhashable device argument
        return False
    return plan is not None and plan(grid, block, args)


def _same(name: str, constant: str, value: Any) -> str:
    """The plan's test that dimension `name` is exactly the remembered `value`: an int
    equal to it, or the very same tuple (a tuple that is merely equal may hold floats)."""
    if type(value) is int:
        return f"type({name}) is int and {name} == {constant}"
    return f"{name} is {constant}"


def remember(kernel: LaunchState, key: tuple[Any, Any], grid: tuple[Any, Dim3],
             block: tuple[Any, Dim3], args: Sequence[Any], arg_types: tuple[Type, ...],
             dev: Device, call: Callable[..., None], after: tuple[Any, ...] = (),
             convert: bool = True, tables: TableWatch | None = None) -> None:
    """Compile and store the plan for a launch that just passed the full checks; `key` is
    its (device, stream) as the launch was given them, `grid` and `block` each the value
    given with its validated `Dim3`.

    The plan calls `call(grid3, block3, device_args, *after)` (the backend's launch).
    Scalars are converted to their parameters' NumPy types unless `convert` is false (a
    backend launch target that packs checked Python numbers itself). Launches with NumPy or
    foreign arrays (which need copies or adoption) get no plan. With `tables` (the kernel's
    constant tables, `kiln.execution.tablewatch`), the plan declines once one changed since
    the build.
    """
    try:
        hash(key)
    except TypeError:
        return
    checks, outs = [], []
    names = ", ".join(f"a{i}" for i in range(len(args)))
    scope: dict[str, Any] = {"DA": DeviceArray, "DEV": dev, "call": call, "DIMS": dims3,
                             "WITHIN": within_limits,
                             "G": grid[0], "G3": grid[1], "B": block[0], "B3": block[1],
                             "SEEN": {}}
    scope.update({f"A{j}": v for j, v in enumerate(after)})
    for i, (value, t) in enumerate(zip(args, arg_types)):
        a = f"a{i}"
        if isinstance(value, DeviceArray):
            scope[f"D{i}"] = value.dtype
            checks.append(f"type({a}) is DA and {a}.device is DEV and {a}.dtype is D{i} "
                          f"and len({a}.shape) == {value.ndim}")
            # an extent over i32's range takes the full path, which refuses it
            checks.extend(f"{a}.shape[{k}] <= {i32.range()[1]}" for k in range(value.ndim))
            outs.append(a)
        elif isinstance(value, _SCALAR_TYPES):
            scope[f"T{i}"] = type(value)
            checks.append(f"type({a}) is T{i}")
            if isinstance(t, ConstexprType):
                scope[f"V{i}"] = value
                checks.append(f"{a} == V{i}")
                continue
            assert isinstance(t, ScalarType)
            if t.is_int:
                lo, hi = t.range()
                checks.append(f"{lo} <= {a} <= {hi}")
            elif t.is_float and t.bits < 64:  # a finite value past its range: the full
                lo, hi = t.range()  # path refuses it (NaN and the infinities pass)
                checks.append(f"({lo!r} <= {a} <= {hi!r} or not -INF < {a} < INF)")
                scope["INF"] = math.inf
            scope[f"C{i}"] = t.dtype.type
            outs.append(f"C{i}({a})" if convert else a)
        else:
            return
    if tables is not None and tables.reads:  # changed: the full path builds it again
        scope["STALE"] = tables.changed
        checks.append("not STALE()")
    source = (
        "def plan(grid, block, a):\n"
        f"    if {_same('grid', 'G', grid[0])} and {_same('block', 'B', block[0])}:\n"
        "        g, b = G3, B3\n"
        "    else:\n"
        "        g, b = DIMS(grid), DIMS(block)\n"
        "        if g is None or b is None:\n            return False\n"
        "        seen = SEEN.get((g, b))\n"
        "        if seen is None:\n"
        "            if not WITHIN(g, b, DEV):\n                return False\n"
        f"            if len(SEEN) >= {MAX_DIMS}:\n                SEEN.clear()\n"
        "            seen = SEEN[g, b] = g, b\n"
        "        g, b = seen\n"
        f"    if len(a) != {len(args)}:\n        return False\n"
        + (f"    {names}, = a\n" if args else "")
        + (f"    if not ({' and '.join(checks)}):\n        return False\n" if checks else "")
        + "    call(g, b, "
        + ("a" if outs == names.split(", ") and not convert else f"[{', '.join(outs)}]")
        + f"{''.join(f', A{j}' for j in range(len(after)))})\n    return True\n"
    )
    exec(compile(source, f"<kiln launch plan {kernel.name}>", "exec"), scope)
    stream = key[1]
    key = plan_key(*key)
    if len(kernel.launch_plans) >= MAX_PLANS:  # the oldest goes, as launchers do
        del kernel.launch_plans[next(iter(kernel.launch_plans))]
    kernel.launch_plans[key] = scope["plan"]
    if stream is not None:
        weakref.finalize(stream, kernel.launch_plans.pop, key, None)
