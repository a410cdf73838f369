"""What a Numba or NumPy user writes without thinking: NumPy's spellings of the math
intrinsics and casts, vectors indexed like tuples (`v[1]`, `v[-1]`), and `print`."""

from __future__ import annotations

import numpy as np

import kiln
from kiln import f32, f32x3, i32, i32x4, i64

from ..checks import assert_close, assert_equal, captured_stdout, rng, run
from ..registry import case


@kiln.kernel
def numpy_math(a: f32[:], out: f32[:, :], n: i32):
    i = kiln.global_id(0)
    if i < n:
        x = a[i]
        out[i, 0] = np.exp(x) + np.sqrt(x)
        out[i, 1] = np.float32(i) * np.log(x + 1.0)
        out[i, 2] = np.minimum(x, 0.5) + np.maximum(x, 0.25)
        out[i, 3] = np.arctan2(x, 0.5) + np.absolute(x - 0.5)
        out[i, 4] = np.power(x, 3.0) + np.floor(x * 7.0) + np.rint(x * 10.0)
        out[i, 5] = np.float32(np.int32(x * 100.0))


@case()
def numpy_spellings(device):
    """np.exp, np.sqrt, np.minimum, np.arctan2, np.float32(x), ... are the math intrinsics
    and casts, with NumPy's answers."""
    n = 300
    a = rng(61).random(n, np.float32)
    out = np.zeros((n, 6), np.float32)
    run(device, numpy_math, 3, 128, a, out, n)
    expected = np.stack([
        np.exp(a) + np.sqrt(a),
        np.arange(n, dtype=np.float32) * np.log(a + np.float32(1)),
        np.minimum(a, np.float32(0.5)) + np.maximum(a, np.float32(0.25)),
        np.arctan2(a, np.float32(0.5)) + np.abs(a - np.float32(0.5)),
        a ** 3 + np.floor(a * 7) + np.rint(a * 10),
        (a * 100).astype(np.int32).astype(np.float32),
    ], axis=1)
    assert_close(out, expected, "out", rtol=2e-6, atol=1e-6)


@kiln.kernel
def vector_items(vs: f32x3[:], ks: i32x4[:], out: f32[:, :], n: i32):
    i = kiln.global_id(0)
    if i < n:
        v = vs[i]
        v[0] = v[1] * 2.0          # v.x = v.y * 2
        v[-1] += 1.0               # v.z += 1
        out[i, 0] = v[0] + v[2]
        out[i, 1] = vs[i][1]       # an element of an array of vectors
        k = ks[i]
        out[i, 2] = f32(k[3] - k[0])


@case()
def vector_indexing(device):
    """v[k] with a constant k (negative from the end) reads and writes a vector's
    components, as v.x / .y / .z / .w do."""
    n = 100
    r = rng(62)
    vs = r.random((n, 3), np.float32)
    ks = r.integers(-50, 50, (n, 4)).astype(np.int32)
    out = np.zeros((n, 3), np.float32)
    run(device, vector_items, 1, 128, vs, ks, out, n)
    assert_close(out[:, 0], vs[:, 1] * 2 + vs[:, 2] + 1, "v[0] + v[2]", rtol=1e-6)
    assert_equal(out[:, 1], vs[:, 1], "vs[i][1]")
    assert_equal(out[:, 2], (ks[:, 3] - ks[:, 0]).astype(np.float32), "k[3] - k[0]")


@kiln.kernel
def print_values(a: f32[:], n: i32):
    i = kiln.global_id(0)
    if i < n:
        print("item", i, "of", n, ': 100% {i} "q"', a[i], a[i] > 1.0, i64(i) - 3, sep=" ",
              end=";\n")


@case()
def print_in_kernels(device):
    """print(...) in a kernel: one whole line per thread on the process's stdout by the
    next synchronisation, formatted alike on every backend."""
    values = np.array([0.5, 1.25, -3.0, 1e10, 7.0, -0.0, np.inf, -np.inf, np.nan, 0.0],
                      np.float32)
    values[-1] = np.copysign(np.float32(np.nan), -1)  # a negative NaN prints `nan` too
    with captured_stdout() as lines:
        run(device, print_values, 3, 4, values, len(values))
    n = len(values)
    expected = {f'item {i} of {n} : 100% {{i}} "q" {float(v):g} {bool(v > 1.0)} {i - 3};'
                for i, v in enumerate(values)}
    printed = [line for line in lines if line.startswith("item ")]
    if sorted(printed) != sorted(expected):
        raise AssertionError(f"printed {printed}, expected (in any order) {sorted(expected)}")


WEIGHTS = np.array([0.25, -1.5, 3.0, 7.125, -0.5], np.float32)
"""A module-level table: kernels and device functions read it as a constant array."""
STENCIL = np.array([[1, 2, 1], [2, 4, 2], [1, 2, 1]], np.int32)


@kiln.func
def weighted(i: i32, x: f32) -> f32:
    return x * WEIGHTS[i % len(WEIGHTS)]


@kiln.kernel
def table_reads(x: f32[:], out: f32[:, :], n: i32):
    i = kiln.global_id(0)
    if i < n:
        out[i, 0] = weighted(i, x[i])
        acc = i32(0)
        for r in range(STENCIL.shape[0]):
            for c in range(3):
                acc += STENCIL[r, c] * (i + r - c)
        out[i, 1] = f32(acc)


@case()
def constant_tables(device):
    """Module-level NumPy arrays read in kernels and device functions as constant tables
    (1-D and 2-D, float and int, len() and .shape)."""
    n = 200
    x = rng(64).random(n, np.float32)
    out = np.zeros((n, 2), np.float32)
    run(device, table_reads, 2, 128, x, out, n)
    i = np.arange(n)
    r, c = np.indices((3, 3))
    expected_acc = [(STENCIL * (k + r - c)).sum() for k in i]
    assert_equal(out[:, 0], x * WEIGHTS[i % 5], "weighted")
    assert_equal(out[:, 1], np.array(expected_acc, np.float32), "stencil sums")


@kiln.func
def view_sum(v: f32[:]) -> f32:
    """Takes arrays and views alike (a specialisation per kind of view)."""
    s = f32(0)
    for k in range(len(v)):
        s += v[k]
    return s


@kiln.func
def bump_first(v: f32[:]):
    v[0] += 1.0


@kiln.kernel
def view_uses(m: f32[:, :], a: f32[:], counts: i32[:, :], out: f32[:, :], lo: i32):
    i = kiln.global_id(0)
    if i < m.shape[0]:
        row = m[i]                         # a row view
        total = f32(0)
        for j in range(len(row)):
            total += row[j]
        seg = a[lo:lo + 3]                 # a slice
        tail = a[lo:]                      # open-ended: its length is len(a) - lo
        out[i, 0] = total
        out[i, 1] = seg[0] + seg[2] + f32(len(seg)) + f32(tail.shape[0])
        out[i, 2] = m[i][1] + m[i, 2:][0]  # chained indexing, a row slice
        col = m[:, 3]                      # a strided view
        out[i, 3] = col[i] * 2.0
        mine = counts[i]
        kiln.atomic_add(mine, 0, 3)        # atomics through a view
        mine[1] += i32(len(mine))          # an update through a view
        for k in range(3):                 # binding a name again, in a loop
            r = m[k]
            out[i, 4] += r[0]
        out[i, 5] = view_sum(row) + view_sum(a[lo:lo + 2]) + view_sum(m[:, 4])  # passed on
        bump_first(m[i, 1:])


@case()
def views_in_kernels(device):
    """Row views, slices (open-ended too), chained indexing, strided (column) views,
    len()/.shape, writes, updates and atomics through views, a view bound in a loop, views
    passed to device functions (and written there)."""
    r = rng(65)
    m = r.random((37, 5), np.float32)
    a = r.random(20, np.float32)
    counts = np.zeros((37, 2), np.int32)
    out = np.zeros((37, 6), np.float32)
    lo = 4
    original = m.copy()
    run(device, view_uses, 1, 64, m, a, counts, out, lo)
    bumped, m = m, original
    expected = original.copy()
    expected[:, 1] += 1
    assert_equal(bumped, expected, "m after writes through views passed to a function")
    assert_close(out[:, 5], m.sum(axis=1, dtype=np.float64) + a[lo] + a[lo + 1]
                 + m[:, 4].sum(dtype=np.float64), "views passed to device functions",
                 rtol=1e-5)
    assert_close(out[:, 0], m.sum(axis=1, dtype=np.float64), "row sums", rtol=1e-5)
    assert_close(out[:, 1], a[lo] + a[lo + 2] + 3 + (20 - lo), "slices", rtol=1e-6)
    assert_equal(out[:, 2], m[:, 1] + m[:, 2], "chained indexing")
    assert_equal(out[:, 3], m[:, 3] * 2, "a column view")
    assert_close(out[:, 4], np.full(37, m[:3, 0].sum()), "a view bound in a loop", rtol=1e-6)
    assert_equal(counts, np.tile(np.array([3, 2], np.int32), (37, 1)), "atomics and updates")
