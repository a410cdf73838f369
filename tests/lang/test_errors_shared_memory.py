"""Shared memory and barriers misused in kernels: a clear error at the line marked
`# error` (barriers that not every thread of a block reaches, arrays sized at run time or
over the device's limit, shared arrays outside kernels)."""

from __future__ import annotations

from pathlib import Path

import pytest

import kiln
from kiln import f32, i32
from tests.helpers import assert_kernel_error, compile_error, marked_line

HERE = str(Path(__file__).resolve())


@kiln.kernel
def shared_non_constant_size(a: f32[:], n: i32):
    s = kiln.shared(f32, n)  # error
    s[0] = 1.0
    a[0] = s[0]


@kiln.kernel
def barrier_under_thread_if(a: f32[:]):
    if kiln.thread_idx.x < 16:
        kiln.barrier()  # error
    a[0] = 1.0


@kiln.kernel
def barrier_in_thread_loop(a: f32[:]):
    for i in range(kiln.thread_idx.x):
        a[i] = 1.0
        kiln.barrier()  # error


@kiln.kernel
def barrier_after_thread_return(a: f32[:]):
    if kiln.global_id(0) >= len(a):
        return
    a[kiln.global_id(0)] = 1.0
    kiln.barrier()  # error


@kiln.kernel
def barrier_under_loaded_value(a: f32[:]):
    t = kiln.thread_idx.x
    x = a[t]
    if x > 0.0:
        kiln.barrier()  # error


KERNEL_ERRORS = [
    (shared_non_constant_size, kiln.ConstantError, "size fixed at compile time"),
    (barrier_under_thread_if, kiln.ConvergenceError, "barrier"),
    (barrier_in_thread_loop, kiln.ConvergenceError, "barrier"),
    (barrier_after_thread_return, kiln.ConvergenceError, "barrier"),
    (barrier_under_loaded_value, kiln.ConvergenceError, "barrier"),
]


@pytest.mark.parametrize(("kernel", "cls", "fragment"), KERNEL_ERRORS,
                         ids=[k.name for k, _, _ in KERNEL_ERRORS])
def test_kernel_error(kernel: kiln.Kernel, cls: type, fragment: str) -> None:
    assert_kernel_error(kernel, cls, fragment)


def test_shared_array_in_device_function() -> None:
    @kiln.func
    def makes_shared(x: f32) -> f32:
        s = kiln.shared(f32, 4)  # error
        s[0] = x
        return s[0]

    @kiln.kernel
    def caller(a: f32[:]):
        a[0] = makes_shared(a[1])

    exc = compile_error(caller)
    assert isinstance(exc, kiln.UnsupportedError) and "only be declared in kernels" in str(exc)
    assert exc.line == marked_line(makes_shared)


@kiln.kernel
def shared_too_big(a: f32[:]):  # error
    s = kiln.shared(f32, 100_000)
    s[0] = a[0]
    a[1] = s[0]


def test_shared_memory_over_the_device_limit(interp) -> None:
    with pytest.raises(kiln.DeviceFeatureError, match="400000 bytes per block") as info:
        shared_too_big.compile(interp)
    assert (info.value.loc.file, info.value.line) == (HERE, marked_line(shared_too_big))
