"""Misuse of the advanced kernel language (warp operations, kiln.native, recursion,
unrolling hints, f16/f64 capabilities) gives clear compile errors; plus the properties that
the conformance cases do not show (IR shape, registry entries, depth checks)."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

import kiln
from kiln import RecursionDepthError, f16, f32, f64, i32, u64
from kiln.ir import nodes as ir
from kiln.ir.intrinsics import intrinsics
from kiln.ir.passes import bound_recursion, device_feature_check, lower_single_lane_warps
from kiln.ir.visit import walk

# ---------------------------------------------------------------- warp operations


@kiln.kernel
def shuffle_under_thread_if(x: f32[:]):
    i = kiln.global_id(0)
    if x[i] > 0:
        x[i] = kiln.shuffle(x[i], 0)


@kiln.func
def warp_max(v: f32) -> f32:
    return max(v, kiln.shuffle_xor(v, 1))


@kiln.kernel
def warp_call_after_divergent_return(x: f32[:]):
    i = kiln.global_id(0)
    if i >= 10:
        return
    x[i] = warp_max(x[i])


@kiln.kernel
def shuffle_array(x: f32[:]):
    x[0] = kiln.shuffle(x, 0)


@kiln.kernel
def shuffle_float_lane(x: f32[:]):
    x[0] = kiln.shuffle(x[0], 1.5)


def test_warp_operations_are_registered_with_warp_convergence() -> None:
    for name in ("shuffle", "shuffle_down", "shuffle_xor", "vote_all", "vote_any", "ballot"):
        spec = intrinsics[name]
        assert spec.warp_convergent and not spec.convergent and spec.category == "warp"
    assert intrinsics["ballot"].typing([kiln.bool_])[1] == u64
    assert intrinsics["shuffle"].typing([f16, i32])[1] == f32  # f16 travels as f32


@kiln.kernel
def vote_in_short_circuit(x: f32[:]):
    i = kiln.global_id(0)
    x[i] = f32(kiln.vote_all(x[i] > 0) and kiln.vote_any(x[i] > 1))


@pytest.mark.parametrize(("kernel", "what"), [
    (shuffle_under_thread_if, r"shuffle\(\).*the `if`"),
    (vote_in_short_circuit, r"vote_any\(\).*the `and`"),
])
def test_warp_operation_under_thread_dependent_control_is_rejected(kernel, what) -> None:
    with pytest.raises(kiln.ConvergenceError, match=what + ".*every thread of a warp"):
        kernel.ir()


def test_call_reaching_a_warp_operation_after_a_divergent_return_is_rejected() -> None:
    with pytest.raises(kiln.ConvergenceError, match="warp_max.*shuffle_xor"):
        warp_call_after_divergent_return.ir()


@pytest.mark.parametrize(("kernel", "message"), [
    (shuffle_array, "exchange numbers"),
    (shuffle_float_lane, "must be an integer"),
])
def test_shuffle_argument_types(kernel: kiln.Kernel, message: str) -> None:
    with pytest.raises(kiln.KernelTypeError, match=message):
        kernel.ir()


@kiln.kernel
def warp_values(out: i32[:], bits: u64[:]):
    i = kiln.global_id(0)
    out[i] = kiln.warp_size * 100 + kiln.lane_id() + kiln.shuffle_down(i, 1)
    bits[i] = kiln.ballot(kiln.vote_all(i >= 0) & kiln.vote_any(i == 3))


def test_one_thread_warps_lower_to_plain_values() -> None:
    lowered = lower_single_lane_warps(warp_values.program((i32[:], u64[:])))
    assert not [n for n in walk(lowered.kernel.body) if isinstance(n, ir.IntrinsicCall)
                and intrinsics[n.name].category == "warp"]
    out, bits = np.zeros(64, np.int32), np.zeros(64, np.uint64)
    kiln.launch(warp_values, 1, 64, (out, bits), device="cpu")
    i = np.arange(64)
    np.testing.assert_array_equal(out, 100 + i)  # warp size 1, lane 0, own value
    np.testing.assert_array_equal(bits, (i == 3).astype(np.uint64))


def test_interp_warps_have_32_threads() -> None:
    out, bits = np.zeros(64, np.int32), np.zeros(64, np.uint64)
    kiln.launch(warp_values, 1, 64, (out, bits), device="interp")
    i = np.arange(64)
    down = np.where(i % 32 == 31, i, i + 1)
    np.testing.assert_array_equal(out, 3200 + i % 32 + down)
    np.testing.assert_array_equal(bits, np.where(i < 32, 2**32 - 1, 0).astype(np.uint64))


# ---------------------------------------------------------------- kiln.native


def adds_one(v, w):
    return {"w": v + 1}


def writes_elsewhere(v):
    return {"nope": v}


@kiln.kernel
def native_cuda_only(x: f32[:]):
    v = x[0]
    kiln.native(cuda="{v} = __fsqrt_rn({v});")
    x[0] = v


@kiln.kernel
def native_unknown_variable(x: f32[:]):
    kiln.native(c="{missing} = 1;")


@kiln.kernel
def native_as_value(x: f32[:]):
    x[0] = kiln.native(c="1")


@kiln.kernel
def native_positional(x: f32[:]):
    kiln.native("x = 1;")


@kiln.kernel
def native_python(x: i32[:], y: i32[:]):
    i = kiln.global_id(0)
    v = x[i]
    w = 0
    if v % 2 == 0:
        kiln.native(python=adds_one, c="{w} = {v} + 1;")
    y[i] = w


@kiln.kernel
def native_python_bad_result(x: i32[:]):
    v = x[0]  # noqa: F841 - read by the native code
    kiln.native(python=writes_elsewhere)


def test_native_ir_carries_the_variables() -> None:
    (node,) = [s for s in walk(native_python.program((i32[:], i32[:])).kernel.body)
               if isinstance(s, ir.Native)]
    assert node.names == ["v", "w"] and [v.name for v in node.vars] == ["v", "w"]
    assert set(node.code) == {"python", "c"}


@pytest.mark.parametrize("device", ["cpu", "interp"])
def test_native_for_another_backend_names_the_covered_ones(device: str) -> None:
    with pytest.raises(kiln.UnsupportedError, match=r"no code for .* this call only covers "
                                                    r"cuda="):
        kiln.launch(native_cuda_only, 1, 1, (np.ones(1, np.float32),), device=device)


@pytest.mark.parametrize(("kernel", "error", "message"), [
    (native_unknown_variable, kiln.UnknownNameError, "'missing', which is not a variable"),
    (native_as_value, kiln.UnsupportedError, "statement of its own"),
    (native_positional, kiln.UnsupportedError, "keyword arguments only"),
])
def test_native_misuse(kernel: kiln.Kernel, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        kernel.ir()


@pytest.mark.parametrize("device", ["cpu", "interp"])
def test_native_runs_under_divergent_control(device: str) -> None:
    x = np.arange(64, dtype=np.int32)
    y = np.zeros(64, np.int32)
    kiln.launch(native_python, 1, 64, (x, y), device=device)
    np.testing.assert_array_equal(y, np.where(x % 2 == 0, x + 1, 0))


def test_python_native_assigning_a_non_parameter_fails() -> None:
    with pytest.raises(kiln.KernelError, match="'nope', which is not one of its scalar"):
        kiln.launch(native_python_bad_result, 1, 1, (np.ones(1, np.int32),), device="interp")
        kiln.device("interp").synchronize()


# ---------------------------------------------------------------- recursion


@kiln.func
def countdown(n: i32) -> i32:
    if n <= 0:
        return 0
    return 1 + countdown(n - 1)


@kiln.func(max_depth=3)
def shallow(n: i32) -> i32:
    if n <= 0:
        return 0
    return 1 + shallow(n - 1)


@kiln.func
def unknown_result(n: i32):
    if n > 0:
        return unknown_result(n - 1) + 1
    return 0


@kiln.func
def endless(level: kiln.constexpr) -> i32:
    return endless(level + 1)


@kiln.kernel
def calls_countdown(out: i32[:]):
    i = kiln.global_id(0)
    out[i] = countdown(i)


@kiln.kernel
def calls_shallow(out: i32[:]):
    i = kiln.global_id(0)
    out[i] = shallow(i)


@kiln.kernel
def calls_unknown_result(out: i32[:]):
    out[0] = unknown_result(3)


@kiln.kernel
def calls_endless(out: i32[:]):
    out[0] = endless(0)


@kiln.kernel
def no_recursion(out: i32[:]):
    out[0] = 1


def test_recursion_without_a_depth_on_a_backend_that_cannot_recurse() -> None:
    program = calls_countdown.program((i32[:],))
    with pytest.raises(RecursionDepthError, match=r"`countdown` is recursive and the opencl "
                                                  r"backend cannot recurse.*max_depth=N"):
        bound_recursion("opencl")(program)


def test_bounded_recursion_copies_each_level_and_reports_the_cut() -> None:
    bounded = bound_recursion("opencl")(calls_shallow.program((i32[:],)))
    assert [f.name for f in bounded.functions] == [
        "shallow_too_deep", "shallow_depth3", "shallow_depth2", "shallow"]
    calls = {f.name: [n.func for n in walk(f.body) if isinstance(n, ir.Call)]
             for f in bounded.functions}
    assert calls == {"shallow": ["shallow_depth2"], "shallow_depth2": ["shallow_depth3"],
                     "shallow_depth3": ["shallow_too_deep"], "shallow_too_deep": []}
    # the status array: the kernel's last parameter, passed down to the reporter
    assert [p.name for p in bounded.kernel.params] == ["out", "kiln_status"]
    assert all(f.params[-1].name == "kiln_status" for f in bounded.functions)
    check, = bounded.checks
    assert check.error is RecursionDepthError and "max_depth=3" in check.message
    assert check.loc is not None and check.loc.line == shallow.pyfunc.__code__.co_firstlineno + 4
    plain = no_recursion.program((i32[:],))  # no recursion: no status array
    assert bound_recursion("opencl")(plain) is plain and not plain.checks


def test_interp_checks_max_depth() -> None:
    out = np.zeros(3, np.int32)
    kiln.launch(calls_shallow, 1, 3, (out,), device="interp")  # depth 3 at most: fine
    np.testing.assert_array_equal(out, [0, 1, 2])
    with pytest.raises(RecursionDepthError, match="deeper than its max_depth=3"):
        kiln.launch(calls_shallow, 1, 8, (np.zeros(8, np.int32),), device="interp")
        kiln.device("interp").synchronize()


@pytest.mark.parametrize(("kernel", "error", "message"), [
    (calls_unknown_result, kiln.KernelTypeError, "before its return type is known"),
    (calls_endless, kiln.KernelError, "specialise more than 64 levels"),
])
def test_recursion_misuse(kernel: kiln.Kernel, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        kernel.ir()


# ---------------------------------------------------------------- unrolling


@kiln.kernel
def unroll_runtime_bounds(x: f32[:], n: i32):
    for k in kiln.unroll(range(n)):
        x[k] = 0.0


@kiln.kernel
def unroll_bad_factor(x: f32[:], n: i32):
    for k in kiln.unroll(range(n), factor=n):
        x[k] = 0.0


def test_unroll_needs_constant_bounds_or_a_factor() -> None:
    with pytest.raises(kiln.ConstantError, match="factor=k"):
        unroll_runtime_bounds.ir()
    with pytest.raises(kiln.ConstantError, match="positive int constant"):
        unroll_bad_factor.ir()


# ---------------------------------------------------------------- f16 / f64 capabilities


@kiln.kernel
def half_kernel(x: f16[:]):
    x[0] = x[0] * f16(2)


@kiln.kernel
def double_kernel(x: f32[:]):
    x[0] = f32(f64(x[0]) * 2.0)


@pytest.mark.parametrize(("kernel", "types", "field", "feature"), [
    (half_kernel, (f16[:],), "fp16", "f16 (half precision)"),
    (double_kernel, (f32[:],), "fp64", "f64 (double precision)"),
])
def test_missing_float_feature_names_device_and_feature(kernel, types, field, feature) -> None:
    caps = dataclasses.replace(kiln.device("interp").capabilities, name="Tiny GPU",
                               **{field: False})
    message = re.escape(f"{feature} is not supported by device 'Tiny GPU'")
    with pytest.raises(kiln.DeviceFeatureError, match=message):
        device_feature_check(caps)(kernel.program(types))
