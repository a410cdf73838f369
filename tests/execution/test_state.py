"""The launch engine on its own state (`kiln.execution.state`): the executor, fast path,
drivers and kernel key run on a `LaunchState`, with no `Kernel` object behind it."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import f32, i32
from kiln.execution import executor
from kiln.execution.state import LaunchState
from kiln.execution.tablewatch import TableWatch
from kiln.ir.nodes import Program
from kiln.ir.passes import check_program
from kiln.ir.types import Type
from kiln.lang.frontend import build_program
from kiln.lang.functions import Compilable
from kiln.options import KernelOptions
from tests.helpers import requires_backend

BACKENDS = [pytest.param(name, marks=requires_backend(name, f"the {name} backend is missing"))
            for name in ("interp", "cpu", "opencl")]


def axpy(a: f32, x: f32[:], y: f32[:], n: i32):
    i = kiln.global_id(0)
    if i < n:
        y[i] = a * x[i] + y[i]


def bare_state(pyfunc: object) -> tuple[LaunchState, list[tuple[Type, ...]]]:
    """A launch state over a plain Python function, and the signatures its frontend built."""
    function = Compilable(pyfunc, KernelOptions())  # type: ignore[arg-type]
    builds: list[tuple[Type, ...]] = []
    programs: dict[tuple[tuple[Type, ...], bool], Program] = {}

    def program(arg_types: tuple[Type, ...], checked: bool = False) -> Program:
        if (arg_types, checked) not in programs:
            builds.append(arg_types)
            programs[arg_types, checked] = check_program(
                build_program(function.pyfunc, arg_types, kernel=True, checked=checked))
        return programs[arg_types, checked]

    tables = TableWatch(function)
    state = LaunchState(function, program, lambda types: (types, False) in programs,
                        lambda: None, lambda: tables)
    return state, builds


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_executor_launches_a_bare_launch_state(backend: str) -> None:
    dev = kiln.device(backend)
    state, builds = bare_state(axpy)
    x = kiln.to_device(np.arange(100, dtype=np.float32), dev)
    y = kiln.to_device(np.ones(100, np.float32), dev)
    for _ in range(3):  # the first builds and remembers a plan; the others run the plan
        executor.launch(state, 1, 128, (2.0, x, y, 100), dev)
    np.testing.assert_array_equal(y.copy_to_host(), 1 + 3 * 2 * np.arange(100))
    assert builds in ([], [(f32, f32[:], f32[:], i32)])  # none on a kernel-cache hit
    assert len(state.specializations) == 1 and len(state.launch_plans) == 1
    (spec,) = state.specializations.values()
    assert spec.device is dev and spec.written == frozenset({"y"})


def test_a_kernel_keeps_its_caches_in_its_launch_state(interp: kiln.Device) -> None:
    k = kiln.kernel(axpy)
    x, y = (kiln.zeros(8, f32, interp) for _ in range(2))
    k[1, 8](1.0, x, y, 8)
    assert k.specializations is k.launch_state.specializations
    assert k.launch_plans is k.launch_state.launch_plans
    assert len(k.specializations) == 1 and k.launch_state.name == "axpy"
    k.forget_compiled()
    assert not k.specializations and not k.launch_plans


def test_a_bare_launch_state_refuses_bad_arguments_as_a_kernel_does(interp) -> None:
    state, builds = bare_state(axpy)
    with pytest.raises(kiln.LaunchError, match="axpy takes 4 argument"):
        executor.launch(state, 1, 8, (1.0,), interp)
    with pytest.raises(kiln.LaunchError, match="argument 'x' .* of axpy: expected an array"):
        executor.launch(state, 1, 8, (1.0, 2.0, kiln.zeros(8, f32, interp), 8), interp)
    assert builds == [] and not state.specializations
