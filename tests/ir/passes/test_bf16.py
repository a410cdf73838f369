"""bf16 (bfloat16): promotion, host values, scalar and array parameters on every available
backend, mixed f16/bf16 arithmetic, the C conversion helpers, and the errors (a bitwise
operator, a device without bf16). Arithmetic itself is the conformance case bf16_arithmetic."""

from __future__ import annotations

import dataclasses
import re

import ml_dtypes
import numpy as np
import pytest

import kiln
from kiln import bf16, f16, f32, f64, i32, u8
from kiln.ir.passes import device_feature_check
from kiln.ir.types import can_convert_implicitly, promote
from tests.helpers import assert_kernel_error, requires_backend

BF16 = ml_dtypes.bfloat16
DEVICES = [d for d in kiln.devices() if d.capabilities.bf16]  # bf16 is a capability


def bits(a: np.ndarray) -> np.ndarray:
    return np.asarray(a).view(np.uint16)


def test_promotion_and_implicit_conversion() -> None:
    assert promote(bf16, bf16) is bf16
    assert promote(bf16, f16) == promote(f16, bf16) == f32
    assert promote(bf16, f32) == f32 and promote(bf16, f64) == f64
    assert promote(bf16, i32) is bf16 and promote(u8, bf16) is bf16
    assert can_convert_implicitly(bf16, f32) and can_convert_implicitly(i32, bf16)
    assert not can_convert_implicitly(f16, bf16) and not can_convert_implicitly(bf16, f16)
    assert not can_convert_implicitly(f32, bf16)


def test_host_values() -> None:
    assert kiln.bfloat16 is bf16 and bf16.dtype == np.dtype(BF16) and bf16.itemsize == 2
    assert bits(bf16(1.1)) == bits(BF16(1.1))
    assert bf16.range()[1] == float(ml_dtypes.finfo(BF16).max)


@kiln.kernel
def scale(a: bf16[:], s: bf16, out: f32[:]):
    i = kiln.global_id(0)
    a[i] = a[i] * s
    out[i] = a[i] + f32(0.5)


@pytest.mark.parametrize("device", DEVICES, ids=[d.backend.name for d in DEVICES])
def test_scalar_and_array_parameters(device: kiln.Device) -> None:
    a = (np.arange(-8, 8) / 3).astype(BF16)
    expected = a * BF16(1.3)
    out = np.zeros(16, np.float32)
    kiln.launch(scale, 1, 16, (a, BF16(1.3), out), device=device)
    device.synchronize()
    np.testing.assert_array_equal(bits(a), bits(expected))
    np.testing.assert_array_equal(out, expected.astype(np.float32) + np.float32(0.5))
    kiln.launch(scale, 1, 16, (a, 2.0, out), device=device)  # a Python float adapts
    device.synchronize()
    np.testing.assert_array_equal(bits(a), bits(expected * BF16(2)))


@kiln.kernel
def mixed(h: f16[:], b: bf16[:], out: f32[:], back: f16[:]):
    i = kiln.global_id(0)
    out[i] = h[i] + b[i]
    back[i] = f16(b[i])


@pytest.mark.parametrize("device", [d for d in DEVICES if d.capabilities.fp16],
                         ids=lambda d: d.backend.name)
def test_f16_with_bf16_computes_in_f32(device: kiln.Device) -> None:
    h = (np.arange(8) / 7).astype(np.float16)
    b = (np.arange(8) / 3).astype(BF16)
    out, back = np.zeros(8, np.float32), np.zeros(8, np.float16)
    kiln.launch(mixed, 1, 8, (h, b, out, back), device=device)
    device.synchronize()
    np.testing.assert_array_equal(out, h.astype(np.float32) + b.astype(np.float32))
    np.testing.assert_array_equal(back, b.astype(np.float32).astype(np.float16))


@kiln.kernel
def convert(x: f32[:], y: bf16[:], z: f32[:]):
    i = kiln.global_id(0)
    y[i] = bf16(x[i])
    z[i] = f32(y[i])


@requires_backend("cpu", "no C compiler")
def test_c_conversion_rounds_to_nearest_even_and_keeps_specials() -> None:
    """The cpu helpers on halfway cases, overflow to infinity, subnormals, NaN and -0."""
    cpu = kiln.device("cpu")
    halfway = np.array([1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8)], np.float32)
    special = np.array([np.inf, -np.inf, 3.4e38, 1e-40, -0.0, np.nan, 0.1], np.float32)
    x = np.concatenate([halfway, special, np.random.default_rng(7).normal(0, 1e3, 100)
                        .astype(np.float32)])
    y, z = np.zeros(x.size, BF16), np.zeros(x.size, np.float32)
    kiln.launch(convert, 1, x.size, (x, y, z), device=cpu)
    cpu.synchronize()
    np.testing.assert_array_equal(bits(y), bits(x.astype(BF16)))
    np.testing.assert_array_equal(z, x.astype(BF16).astype(np.float32))


@kiln.kernel
def bf16_bitwise(a: bf16[:]):
    a[0] = a[1] & a[2]  # error


def test_bitwise_operator_on_bf16_is_a_type_error() -> None:
    assert_kernel_error(bf16_bitwise, kiln.KernelTypeError, "operator & needs integers")


def test_device_without_bf16_is_rejected() -> None:
    caps = dataclasses.replace(kiln.device("interp").capabilities, name="Tiny GPU", bf16=False)
    message = re.escape("bf16 (bfloat16) is not supported by device 'Tiny GPU'")
    with pytest.raises(kiln.DeviceFeatureError, match=message):
        device_feature_check(caps)(scale.program((bf16[:], bf16, f32[:])))
