"""inline_functions: every call inlined, early returns nested without a loop, recursion
refused; an inlined program computes what the original does on interp and OpenCL."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import f32, i32
from kiln.ir import nodes as ir
from kiln.ir.passes import check_program, inline_functions
from kiln.ir.printer import format_program
from kiln.ir.visit import walk
from tests.helpers import LOC, const, kernel_program, var


@kiln.func
def clamp01(x: f32) -> f32:
    if x < 0.0:
        return 0.0
    if x > 1.0:
        return 1.0
    return x


@kiln.func
def first_index_of(a: f32[:], value: f32, n: i32) -> i32:
    for j in range(n):
        while a[j] == value:
            return j
    return -1


@kiln.func
def bump(a: f32[:]) -> f32:
    a[0] += 1.0
    return a[0]


@kiln.kernel
def calls_everywhere(a: f32[:], out: i32[:], n: i32):
    i = kiln.global_id(0)
    if i < n and clamp01(a[i]) > 0.5:
        a[i] = clamp01(a[i] * 2.0) + a[0] + bump(a)
    while first_index_of(a, 3.0, n) >= 0:
        a[first_index_of(a, 3.0, n)] = 0.0
    out[i] = first_index_of(a, 2.0, n) if i > 0 else 7


def test_inline_removes_every_call() -> None:
    program = calls_everywhere.program((f32[:], i32[:], i32))
    inlined = inline_functions(program)
    assert inlined.functions == []
    assert not any(isinstance(n, ir.Call) for n in walk(inlined.kernel.body))
    check_program(inlined)  # still valid, typed and convergent IR
    assert len(program.functions) == 3 and any(
        isinstance(n, ir.Call) for n in walk(program.kernel.body))  # input unchanged
    text = format_program(inlined)
    assert "returned" in text  # the return inside loops of first_index_of sets a flag
    assert "while True:" in text
    assert "break\n            break" not in text
    # a[0] is read before bump(a) writes it: it is bound to a temporary first
    lines = [line.strip() for line in text.splitlines()]
    read = lines.index("tmp = (clamp01_result_1 + a[0]): f32")
    assert read < lines.index("a[0] = (a[0] + 1.0): f32")


@kiln.kernel
def calls_clamp(a: f32[:]):
    a[0] = clamp01(a[0])


def test_inline_nests_early_returns_without_a_loop() -> None:
    text = format_program(inline_functions(calls_clamp.program((f32[:],))))
    assert text.endswith('''
    clamp01_x = a[0]: f32
    if clamp01_x < 0.0:
        clamp01_result = 0.0
    elif clamp01_x > 1.0:
        clamp01_result = 1.0
    else:
        clamp01_result = clamp01_x
    a[0] = clamp01_result
''')


def test_recursive_function_cannot_be_inlined() -> None:
    call = ir.Call(i32, "f", [ir.BinOp(i32, "-", var("k"), const(1))], loc=LOC)
    f = ir.Function("f", [ir.Param("k", i32)], i32, [ir.Return(call)], {})
    program = kernel_program([ir.Store(var("out", i32[:]), [const(0)],
                                       ir.Call(i32, "f", [const(3)]))],
                             params=(("out", i32[:]),), functions=[f])
    check_program(program)
    with pytest.raises(kiln.UnsupportedError, match="`f` is recursive") as info:
        inline_functions(program)
    assert info.value.loc == LOC


def bump_row_py(a, r):
    a[r, 0] += 1.0
    return a[r, 0]


def find_py(a, r, value, n):
    for j in range(n):
        while a[r, j] == value:
            return j
    return -1


def collatz_steps_py(x):
    steps = 0
    while True:
        if x == 1:
            return steps
        if x % 2 == 0:
            x //= 2
        else:
            x = 3 * x + 1
        steps += 1


def mark_py(out, r):
    if r % 3 == 0:
        return
    out[r, 5] = 1


bump_row = kiln.func(bump_row_py)
find = kiln.func(find_py)
collatz_steps = kiln.func(collatz_steps_py)
mark = kiln.func(mark_py)


def inline_semantics_py(a, out, n, r):
    """What the kernel below computes for row `r`, in Python."""
    v = a[r, 0] + bump_row_py(a, r)
    out[r, 0] = int(v)
    out[r, 1] = find_py(a, r, 3.0, n) if r % 2 == 0 else collatz_steps_py(r + 1)
    k = 0
    while find_py(a, r, 3.0, n) >= 0:
        a[r, find_py(a, r, 3.0, n)] = 0.0
        k += 1
    out[r, 2] = k
    out[r, 3] = int(min(max(a[r, 1], 0.0), 1.0) * 10.0)
    if r > 2 and collatz_steps_py(r) > 3:
        out[r, 4] = 1
    mark_py(out, r)


@kiln.kernel
def inline_semantics(a: f32[:, :], out: i32[:, :], n: i32):
    r = kiln.global_id(0)
    if r < a.shape[0]:
        v = a[r, 0] + bump_row(a, r)
        out[r, 0] = i32(v)
        out[r, 1] = find(a, r, 3.0, n) if r % 2 == 0 else collatz_steps(r + 1)
        k = 0
        while find(a, r, 3.0, n) >= 0:
            a[r, find(a, r, 3.0, n)] = 0.0
            k += 1
        out[r, 2] = k
        out[r, 3] = i32(clamp01(a[r, 1]) * 10.0)
        if r > 2 and collatz_steps(r) > 3:
            out[r, 4] = 1
        mark(out, r)


def run_program(device: kiln.Device, program: ir.Program, grid: int, block: int,
                args: list) -> None:
    """Run an already lowered program on a device through the backend contract."""
    backend, stream = device.backend, device.default_stream.handle
    dims = ((grid, 1, 1), (block, 1, 1))
    if isinstance(backend, kiln.backend.JITBackend):
        compiled = backend.compiler.compile(program, device, kiln.KernelOptions())
        backend.loader.load(compiled, device).launch(*dims, args, stream)
    else:
        backend.execute(program, *dims, args, stream)
    device.synchronize()


def devices_for_inlining() -> list:
    """The interpreter, and OpenCL's first device when there is one (PoCL on a CPU will do)."""
    found = [d for d in kiln.devices() if d.backend.name == "opencl"][:1]
    opencl = found or [pytest.param(None, marks=pytest.mark.skip("no OpenCL device here"))]
    return ["interp", *opencl]


@pytest.mark.parametrize("device", devices_for_inlining(), ids=["interp", "opencl"])
def test_inlined_program_computes_the_same(device: kiln.Device | str) -> None:
    device = kiln.device(device) if isinstance(device, str) else device
    rng = np.random.default_rng(3)
    rows, n = 40, 6
    a0 = rng.integers(0, 5, (rows, n)).astype(np.float32)
    a0[:, 1] = rng.uniform(-0.5, 1.5, rows)
    expected_a, expected_out = a0.copy(), np.zeros((rows, 6), np.int32)
    for r in range(rows):
        inline_semantics_py(expected_a, expected_out, n, r)
    program = inline_semantics.program((f32[:, :], i32[:, :], i32))
    for variant in (program, inline_functions(program)):
        a, out = kiln.to_device(a0.copy(), device), kiln.zeros((rows, 6), i32, device)
        run_program(device, variant, 2, 32, [a, out, np.int32(n)])
        np.testing.assert_array_equal(out.numpy(), expected_out)
        np.testing.assert_array_equal(a.numpy(), expected_a)
