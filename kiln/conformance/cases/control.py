"""Control flow, device functions, constants, grids, private arrays and array shapes.

The integer device functions here are plain Python too: the host runs their `pyfunc` as
the reference, so these cases check that kernels follow Python's semantics.
"""

from __future__ import annotations

import numpy as np

import kiln
from kiln import f32, i32

from ..checks import assert_close, assert_equal, blocks, rng, run
from ..registry import case, signatures

BLOCK = 64
SCALE = 3
OFFSET = 0.5
ENABLED = True
HALF = np.float32(0.5)


@kiln.func
def collatz_steps(x: i32) -> i32:
    """Divergent while loop: the trip count depends on the value."""
    steps = 0
    while x != 1:
        x = x // 2 if x % 2 == 0 else 3 * x + 1
        steps += 1
    return steps


@kiln.func
def digit_sum_without_sevens(x: i32) -> i32:
    """`continue` in a while loop."""
    total = 0
    while x > 0:
        digit = x % 10
        x //= 10
        if digit == 7:
            continue
        total += digit
    return total


@kiln.func
def smallest_factor(x: i32) -> i32:
    """Early returns from inside and after a loop, and `break`."""
    if x < 2:
        return 0
    found = x
    for d in range(2, x):
        if d * d > x:
            break
        if x % d == 0:
            return d
    return found


@kiln.func
def stepping(x: i32):
    """Nested loops, negative and variable steps; the return type is inferred."""
    total = 0
    for a in range(x % 13, -3, -2):
        for b in range(a):
            total += b - a
    step = x % 4 + 1
    for c in range(x % 17, 40, step):
        total += c
    for e in range(20, x % 9, -step):
        if e % 3 == 0:
            continue
        total -= e
        if total < -500:
            break
    return total


@kiln.func
def divisibility(x: i32) -> i32:
    """An if/elif/else chain."""
    if x % 15 == 0:
        return 15
    elif x % 5 == 0:
        return 5
    elif x % 3 == 0:
        return 3
    else:
        return 1


@kiln.func
def gcd(a: i32, b: i32) -> i32:
    """Tail recursion."""
    if b == 0:
        return a
    return gcd(b, a % b)


@kiln.func
def twice_next_factor(x: i32) -> i32:
    """A device function calling another."""
    return 2 * smallest_factor(x + 1)


@kiln.kernel
def control_flow(x: i32[:], out: i32[:, :], zero: i32):
    i = kiln.global_id(0)
    if i >= len(x):
        return
    v = x[i]
    out[0, i] = collatz_steps(v)
    out[1, i] = digit_sum_without_sevens(v)
    out[2, i] = smallest_factor(v)
    out[3, i] = stepping(v)
    out[4, i] = divisibility(v)
    count = 0
    for _ in range(0, 10, zero):  # a zero step that is not a constant runs no iteration
        count += 1
    k = 0
    while True:
        k += 1
        if k >= v % 5:
            break
    out[5, i] = count + 100 * k
    out[6, i] = twice_next_factor(v)
    out[7, i] = gcd(v, 36)


FUNCTIONS = (collatz_steps, digit_sum_without_sevens, smallest_factor, stepping, divisibility)


@case()
def control_flow_i32(device):
    """break, continue, early return, divergent and nested loops, negative steps, while,
    elif, tail recursion."""
    n = 250
    x = np.arange(1, n + 1, dtype=np.int32)
    out = np.zeros((8, n), np.int32)
    run(device, control_flow, blocks(n, BLOCK), BLOCK, x, out, 0)
    for row, fn in enumerate(FUNCTIONS):
        expected = [fn.pyfunc(int(v)) for v in x]
        assert_equal(out[row], np.array(expected, np.int32), f"{fn.name} (row {row})")
    assert_equal(out[5], 100 * np.maximum(1, x % 5), "zero step / while True with break")
    twice = [2 * smallest_factor.pyfunc(int(v) + 1) for v in x]
    assert_equal(out[6], np.array(twice, np.int32), "a device function calling another")
    assert_equal(out[7], np.gcd(x, 36), "tail-recursive gcd")


@kiln.func
def mark(hits: i32[:, :], row: i32, i: i32) -> bool:
    """A side effect that shows whether an operand was evaluated."""
    hits[row, i] += 1
    return True


@kiln.kernel
def short_circuit(x: f32[:], hits: i32[:, :], chosen: f32[:], n: i32):
    i = kiln.global_id(0)
    if i < n:
        big = x[i] > 0.5
        if big and mark(hits, 0, i):
            hits[4, i] += 10
        if big or mark(hits, 1, i):
            hits[5, i] += 10
        picked = mark(hits, 2, i) if x[i] > 0.25 else mark(hits, 3, i)
        if not picked:
            hits[4, i] = -1
        chosen[i] = x[i] * 2 if big else 7  # the branches' types meet: f32


@case()
def short_circuit_and_select(device):
    """`and`/`or` skip their right operand, `a if c else b` evaluates only one branch."""
    n = 200
    x = rng(20).random(n).astype(np.float32)
    hits = np.zeros((6, n), np.int32)
    chosen = np.zeros(n, np.float32)
    run(device, short_circuit, blocks(n, BLOCK), BLOCK, x, hits, chosen, n)
    big = x > 0.5
    expected = np.stack([big, ~big, x > 0.25, x <= 0.25, 10 * big, np.full(n, 10)])
    assert_equal(hits, expected.astype(np.int32), "evaluation counts")
    assert_equal(chosen, np.where(big, x * 2, 7).astype(np.float32), "chosen")


@kiln.kernel
def constants(x: f32[:], out: f32[:], n: i32):
    i = kiln.global_id(0)
    if i < n and ENABLED:
        out[i] = x[i] * SCALE + OFFSET - HALF * 2


@case()
def module_constants(device):
    """Module-level Python and NumPy constants are captured when the kernel compiles."""
    n = 100
    x = rng(21).random(n).astype(np.float32)
    out = np.zeros(n, np.float32)
    run(device, constants, blocks(n, BLOCK), BLOCK, x, out, n)
    assert_close(out, x * SCALE + OFFSET - HALF * 2, "out", rtol=1e-6, atol=1e-6)


@kiln.kernel
def index_3d(out: i32[:, :, :, :]):
    x, y, z = kiln.global_id(0), kiln.global_id(1), kiln.global_id(2)
    out[z, y, x, 0] = kiln.thread_idx.x
    out[z, y, x, 1] = kiln.thread_idx.y
    out[z, y, x, 2] = kiln.thread_idx.z
    out[z, y, x, 3] = kiln.block_idx.x
    out[z, y, x, 4] = kiln.block_idx.y
    out[z, y, x, 5] = kiln.block_idx.z
    out[z, y, x, 6] = kiln.block_dim.x
    out[z, y, x, 7] = kiln.block_dim.y
    out[z, y, x, 8] = kiln.block_dim.z
    out[z, y, x, 9] = kiln.grid_dim.x
    out[z, y, x, 10] = kiln.grid_dim.y
    out[z, y, x, 11] = kiln.grid_dim.z
    out[z, y, x, 12] = kiln.global_size(0)
    out[z, y, x, 13] = kiln.global_size(1)
    out[z, y, x, 14] = kiln.global_size(2)


@case()
def grid_3d(device):
    """Every index intrinsic on a 3-D grid of 3-D blocks."""
    grid, block = (3, 2, 4), (4, 3, 2)
    size = [g * b for g, b in zip(grid, block)]  # x, y, z
    out = np.full((size[2], size[1], size[0], 15), -1, np.int32)
    run(device, index_3d, grid, block, out)
    z, y, x = np.meshgrid(*(np.arange(s) for s in reversed(size)), indexing="ij")
    g = [x, y, z]
    expected = [g[d] % block[d] for d in range(3)] + [g[d] // block[d] for d in range(3)]
    expected += [np.full_like(x, v) for v in (*block, *grid, *size)]
    assert_equal(out, np.stack(expected, axis=-1), "index intrinsics")


@kiln.kernel
def index_2d(out: i32[:, :]):
    col, row = kiln.global_id(0), kiln.global_id(1)
    if row < out.shape[0] and col < out.shape[1]:
        out[row, col] = row * 1000 + col


@case()
def grid_2d(device):
    """A 2-D grid over a 37x23 array that blocks of 8x4 do not divide."""
    out = np.full((37, 23), -1, np.int32)
    run(device, index_2d, (blocks(23, 8), blocks(37, 4)), (8, 4), out)
    rows, cols = np.indices(out.shape)
    assert_equal(out, rows * 1000 + cols, "out")


@kiln.kernel
def local_sort(x: f32[:, :], out: f32[:, :], spread: i32[:, :]):
    i = kiln.global_id(0)
    if i >= x.shape[0]:
        return
    v = kiln.local(f32, 8)
    tally = kiln.local(i32, (2, 4))
    for k in range(8):
        v[k] = x[i, k]
        tally[k // 4, k % 4] = k
    for k in range(1, 8):  # insertion sort in private memory
        key = v[k]
        j = k - 1
        while j >= 0 and v[j] > key:  # short-circuit keeps v[-1] from being read
            v[j + 1] = v[j]
            j -= 1
        v[j + 1] = key
    for k in range(7, -1, -1):
        out[i, 7 - k] = v[k]
    spread[i, 0] = tally[1, 3] - tally[0, 0]


@case()
def local_arrays(device):
    """kiln.local private arrays (1-D and 2-D): a per-thread insertion sort."""
    n = 150
    x = rng(22).random((n, 8)).astype(np.float32)
    out = np.zeros_like(x)
    spread = np.zeros((n, 1), np.int32)
    run(device, local_sort, blocks(n, BLOCK), BLOCK, x, out, spread)
    assert_equal(out, -np.sort(-x, axis=1), "sorted descending")
    assert_equal(spread, np.full((n, 1), 7, np.int32), "2-D local array")


@kiln.kernel
def shapes(a: f32[:, :, :], v: f32[:], out: i32[:]):
    if kiln.global_id(0) == 0:
        out[0] = len(a)
        out[1] = a.shape[0]
        out[2] = a.shape[1]
        out[3] = a.shape[2]
        out[4] = a.shape[-1]
        out[5] = len(v)
        out[6] = a.size
        out[7] = a.ndim


@case()
def array_shapes(device):
    """len(a), a.shape[k] (negative k too), a.size and a.ndim read in a kernel."""
    a = np.zeros((3, 5, 7), np.float32)
    v = np.zeros(11, np.float32)
    out = np.zeros(8, np.int32)
    run(device, shapes, 1, 32, a, v, out)
    assert_equal(out, np.array([3, 3, 5, 7, 7, 11, 105, 3], np.int32), "shapes")


@signatures((f32[:], f32[:], i32, kiln.constexpr(3)))
@kiln.kernel
def unrolled(x: f32[:], out: f32[:], n: i32, width: kiln.constexpr):
    i = kiln.global_id(0)
    if i < n:
        acc = f32(0)
        for k in kiln.static_range(width):
            acc += x[i] * (k + 1)
        out[i] = acc


@case()
def constexpr_and_static_range(device):
    """A constexpr parameter and a loop unrolled with kiln.static_range."""
    n = 100
    x = rng(23).random(n).astype(np.float32)
    for width in (3, 5):
        out = np.zeros(n, np.float32)
        run(device, unrolled, blocks(n, BLOCK), BLOCK, x, out, n, width)
        assert_close(out, x * (width * (width + 1) // 2), f"width {width}", rtol=1e-6)
