"""Public extension points used through the public API only: a registered intrinsic (its
typing, variance, implementation per backend, the error on a backend without one) and a
registered IR operation (lowered for backends without it, kept for those with it)."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import f32, i32
from kiln.ir import nodes as ir
from tests.helpers import assert_kernel_error


def _float_unary(types):
    (t,) = types
    if not (isinstance(t, kiln.ScalarType) and t.is_float):
        raise kiln.backend.IntrinsicTypeError(f"expects a float, got {t}")
    return [t], t


square = kiln.backend.register_intrinsic(
    "square_test", _float_unary, arity=1, variance=None,
    implementations={"c": "(({0}) * ({0}))", "interp": lambda x: x * x})
interp_only = kiln.backend.register_intrinsic("interp_only_test", _float_unary, arity=1,
                                      implementations={"interp": lambda x: -x})
lane = kiln.backend.register_intrinsic("lane_test", lambda types: ([], i32), arity=0,
                              variance=kiln.backend.Variance.THREAD)


def _lower_mad(args, t):
    a, b, c = args
    return ir.BinOp(t, "+", ir.BinOp(t, "*", a, b), c)


mad = kiln.backend.register_operation("mad_test", lambda types: ([f32] * 3, f32), _lower_mad,
                              arity=3)


@kiln.kernel
def squares(a: f32[:]):
    i = kiln.global_id(0)
    a[i] = square(a[i])


@kiln.kernel
def negate(a: f32[:]):
    a[0] = interp_only(a[0])  # error


@kiln.kernel
def bad_argument(a: i32[:]):
    a[0] = square(a[0])  # error


@kiln.kernel
def mads(out: f32[:], a: f32[:], b: f32[:]):
    i = kiln.global_id(0)
    out[i] = mad(a[i], b[i], a[i])


def builtin_devices() -> list[kiln.Device]:
    names = ("interp", "cpu", "opencl", "serial", "cuda")
    return [d for d in kiln.devices() if d.backend.name in names]


@pytest.mark.parametrize("device", builtin_devices(), ids=str)
def test_a_registered_intrinsic_runs_on_every_backend(device: kiln.Device) -> None:
    a = np.array([1.5, -2, 3, 0.5], np.float32)
    kiln.launch(squares, 1, 4, (a,), device=device)
    np.testing.assert_array_equal(a, np.array([1.5, -2, 3, 0.5], np.float32) ** 2)


@pytest.mark.parametrize("device", builtin_devices(), ids=str)
def test_a_backend_without_an_implementation_says_so(device: kiln.Device) -> None:
    a = np.ones(1, np.float32)
    if device.backend.name == "interp":
        kiln.launch(negate, 1, 1, (a,), device=device)
        assert a[0] == -1
        return
    with pytest.raises(kiln.UnsupportedError, match=f"intrinsic interp_only_test has no "
                       f"implementation for the {device.backend.name} backend") as info:
        kiln.launch(negate, 1, 1, (a,), device=device)
    assert info.value.loc is not None and info.value.loc.line == \
        negate.pyfunc.__code__.co_firstlineno + 2


def test_typing_rules_and_registration_errors() -> None:
    assert_kernel_error(bad_argument, kiln.KernelTypeError, "expects a float, got i32")
    with pytest.raises(ValueError, match="already registered"):
        kiln.backend.register_intrinsic("square_test", _float_unary, arity=1)
    with pytest.raises(ValueError, match="already registered"):
        kiln.backend.register_intrinsic("sqrt", _float_unary, arity=1)
    with pytest.raises(RuntimeError, match="only be used inside"):
        square(1.0)


def test_variance_of_a_registered_intrinsic_reaches_the_convergence_check() -> None:
    @kiln.kernel
    def divergent(a: f32[:]):
        if lane() == 0:  # a thread-varying condition around a barrier
            kiln.barrier()  # error
        a[0] = 1.0

    with pytest.raises(kiln.ConvergenceError):
        divergent.ir()


@pytest.mark.parametrize("device", builtin_devices(), ids=str)
def test_a_registered_operation_is_lowered_where_not_implemented(device: kiln.Device) -> None:
    a = np.arange(8, dtype=np.float32)
    b = np.full(8, 3, np.float32)
    out = np.zeros(8, np.float32)
    kiln.launch(mads, 1, 8, (out, a, b), device=device)
    np.testing.assert_array_equal(out, a * b + a)


def test_an_operation_a_backend_implements_reaches_it_unlowered() -> None:
    from kiln.builtin_backends.interp import backend as interp
    from kiln.ir.passes.operations import lower_operations
    from kiln.ir.visit import walk

    program = mads.program((f32[:], f32[:], f32[:]))
    lowered = lower_operations(interp.intrinsic_implementation)(program)
    assert not any(isinstance(n, ir.IntrinsicCall) and n.name == "mad_test"
                   for n in walk(lowered.kernel.body))
    kiln.backend.intrinsics.implement("native_mad_test", {"mad_test": "fmaf({0}, {1}, {2})"})
    kept = lower_operations(lambda name: kiln.backend.intrinsics.registered(
        name, ("native_mad_test",)))(program)
    assert kept is program  # nothing to lower: the backend spells mad_test itself
    assert any(isinstance(n, ir.IntrinsicCall) and n.name == "mad_test"
               for n in walk(program.kernel.body))


def test_a_lowering_does_not_repeat_side_effects() -> None:
    twice = kiln.backend.register_operation(
        "twice_test", lambda types: ([i32], i32),
        lambda args, t: ir.BinOp(t, "+", args[0], args[0]), arity=1)

    @kiln.kernel
    def bumps(a: i32[:]):
        a[1] = twice(kiln.atomic_add(a, 0, 1))  # error

    @kiln.kernel
    def doubles(a: i32[:]):
        a[1] = twice(a[0])

    with pytest.raises(kiln.UnsupportedError, match="uses an argument more than once"):
        kiln.launch(bumps, 1, 1, (np.zeros(2, np.int32),), device="interp")
    a = np.array([21, 0], np.int32)
    kiln.launch(doubles, 1, 1, (a,), device="interp")
    assert a.tolist() == [21, 42]
