"""`@kiln.kernel(debug=True)`: run-time bounds checks on every backend (docs/language.md,
arrays): kernels with records, vectors and views, each checked against its own extent,
and the hidden status array that carries the failures."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import f32, f32x2, f32x4, i32, i64
from tests.helpers import marked_line, requires_backend

BACKENDS = [pytest.param(name, marks=requires_backend(name, f"the {name} backend is missing"))
            for name in ("interp", "cpu", "opencl", "serial", "cuda")]


def run(kernel: kiln.Kernel, backend: str, threads: int, *args: object) -> None:
    """One block of `threads` threads, then the synchronisation that reports failures."""
    kiln.launch(kernel, 1, threads, args, device=backend)
    kiln.device(backend).synchronize()


def cuda_source(kernel: kiln.Kernel) -> str:
    """The kernel's CUDA source (with its debug checks), which NVRTC compiles to PTX."""
    nvrtc = pytest.importorskip("kiln.builtin_backends.cuda.nvrtc",
                                reason="cuda-bindings is missing")
    pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-bindings is not installed")
    source = kernel.source("cuda")
    assert "kiln_check_" in source
    ptx = nvrtc.compile_source(source, kernel.name, nvrtc.options_for("sm_90", "ptx"), "ptx")
    assert b".entry" in ptx
    return source


# ---------------------------------------------------------------- records and vectors

@kiln.struct
class Node:
    x: f32
    y: f32


@kiln.kernel(debug=True)
def record_neighbours(nodes: Node[:], v: Node, out: f32[:], n: i32):
    i = kiln.global_id(0)
    if i < n:
        nodes[i].y = nodes[i].x * v.x
        out[i] = nodes[i + 1].x + v.y  # error


@kiln.kernel(debug=True)
def vector_neighbours(a: f32x2[:], s: f32x2, out: f32x2[:], n: i32):
    i = kiln.global_id(0)
    if i < n:
        out[i] = a[i + 1] + s  # error


@pytest.mark.parametrize("backend", BACKENDS)
def test_record_arguments_run_checked_and_written_records_come_back(backend: str) -> None:
    nodes = np.zeros(5, Node.dtype)
    nodes["x"] = np.arange(5)
    out = np.zeros(5, np.float32)
    run(record_neighbours, backend, 8, nodes, Node(2.0, 0.5), out, 4)
    np.testing.assert_array_equal(nodes["y"], [0, 2, 4, 6, 0])  # written: copied back
    np.testing.assert_array_equal(out, [1.5, 2.5, 3.5, 4.5, 0])
    with pytest.raises(kiln.IndexOutOfBoundsError) as info:
        run(record_neighbours, backend, 8, nodes, Node(2.0, 0.5), out, 5)
    assert info.value.message == ("kernel `record_neighbours`: thread (4, 0, 0) of block "
                                  "(0, 0, 0) read `nodes[5]`, outside its 5 elements")
    assert info.value.loc.line == marked_line(record_neighbours)


@pytest.mark.parametrize("backend", BACKENDS)
def test_vector_arguments_run_checked(backend: str) -> None:
    a = np.arange(10, dtype=np.float32).reshape(5, 2)
    out = np.zeros((5, 2), np.float32)
    run(vector_neighbours, backend, 8, a, (10.0, 20.0), out, 4)
    expected = np.zeros((5, 2), np.float32)
    expected[:4] = a[1:] + [10, 20]
    np.testing.assert_array_equal(out, expected)
    with pytest.raises(kiln.IndexOutOfBoundsError) as info:
        run(vector_neighbours, backend, 8, a, (10.0, 20.0), out, 5)
    assert info.value.message == ("kernel `vector_neighbours`: thread (4, 0, 0) of block "
                                  "(0, 0, 0) read `a[5]`, outside its 5 elements")
    assert info.value.loc.line == marked_line(vector_neighbours)


@kiln.struct
class Circle:
    r: f32


@kiln.struct
class Rect:
    w: f32
    h: f32


Shape = kiln.variant("Shape", Circle, Rect)


@kiln.kernel(debug=True)
def areas(shapes: Shape[:], out: f32[:], n: i32):
    i = kiln.global_id(0)
    if i < n:
        match shapes[i]:
            case Circle(r=r):
                out[i] = 3.0 * r * r
            case Rect(w=w, h=h):
                out[i] = w * h


@kiln.kernel(debug=True)
def record_rows(nodes: Node[:, :], out: f32[:], k: i32):
    i = kiln.global_id(0)
    row = nodes[i]
    out[i] = row[k].x + row[k].y


@pytest.mark.parametrize("backend", BACKENDS)
def test_variant_arrays_and_rows_of_records_run_checked(backend: str) -> None:
    shapes, out = Shape.array([Circle(1.0), Rect(2.0, 3.0)]), np.zeros(3, np.float32)
    run(areas, backend, 4, shapes, out, 2)
    np.testing.assert_array_equal(out, [3, 6, 0])
    with pytest.raises(kiln.IndexOutOfBoundsError, match="thread \\(2, 0, 0\\) of block "
                       "\\(0, 0, 0\\) read `shapes\\[2\\]`, outside its 2 elements"):
        run(areas, backend, 4, shapes, out, 3)
    nodes = np.zeros((3, 2), Node.dtype)
    nodes["x"], nodes["y"] = 1, np.arange(6).reshape(3, 2)
    run(record_rows, backend, 3, nodes, out, 1)
    np.testing.assert_array_equal(out, [2, 4, 6])
    with pytest.raises(kiln.IndexOutOfBoundsError, match="read `row\\[2\\]`, outside its 2"):
        run(record_rows, backend, 3, nodes, out, 2)


@kiln.kernel(debug=True)
def record_field_write(nodes: Node[:], k: i32):
    nodes[k].y = 3.0  # error


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_record_field_write_is_reported_as_a_write(backend: str) -> None:
    assert report(record_field_write, backend, np.zeros(4, Node.dtype), 4) == \
        "wrote `nodes[4]`, outside its 4 elements"
    nodes = np.zeros(4, Node.dtype)
    assert report(record_field_write, backend, nodes, 3) is None
    np.testing.assert_array_equal(nodes["y"], [0, 0, 0, 3])


@kiln.kernel(debug=True)
def wide_store(x: f32[:], k: i32):
    kiln.store(x, k, f32x4(1.0, 2.0, 3.0, 4.0))  # error


@kiln.kernel(debug=True)
def wide_store_64(x: f32[:], k: i64):
    kiln.store(x, k, f32x4(1.0, 2.0, 3.0, 4.0))  # error


@kiln.kernel(debug=True)
def wide_load(x: f32[:], out: f32[:], k: i32):
    v = kiln.load(f32x4, x, k)  # error
    out[0] = v.x + v.w


@kiln.kernel(debug=True)
def wide_load_2d(m: f32[:, :], out: f32[:], r: i32, j: i32):
    v = kiln.load(f32x4, m, r, j)  # error
    out[0] = v.x + v.w


@pytest.mark.parametrize("backend", BACKENDS)
def test_wide_loads_and_stores_are_checked_for_their_whole_extent(backend: str) -> None:
    """A wide access of 4 elements from 4k is checked for all 4, and reports the first
    element outside (the same index on every backend)."""
    x, out = np.zeros(10, np.float32), np.zeros(1, np.float32)
    for k, first in ((2, 10), (3, 12), (-1, -4), (-2147483648, -8589934592)):
        outside = f"`x[{first}]`, outside its 10 elements"
        assert report(wide_store, backend, x, k) == f"wrote {outside}"
        assert report(wide_load, backend, x, out, k) == f"read {outside}"
        assert report(wide_store_64, backend, x, k) == f"wrote {outside}"
    assert report(wide_store_64, backend, x, 2**40) == \
        "wrote `x[4398046511104]`, outside its 10 elements"
    x = np.zeros(10, np.float32)
    assert report(wide_store, backend, x, 1) is None
    np.testing.assert_array_equal(x[4:], [1, 2, 3, 4, 0, 0])  # nothing past the end
    assert report(wide_load, backend, x, out, 1) is None
    assert out[0] == 5
    m = np.arange(18, dtype=np.float32).reshape(3, 6)
    assert report(wide_load_2d, backend, m, out, 1, 1) == \
        "read `m[:, 6]`, outside its shape (axis 1 has 6 elements)"
    assert report(wide_load_2d, backend, m, out, 3, 0) == \
        "read `m[3, :]`, outside its shape (axis 0 has 3 elements)"
    assert report(wide_load_2d, backend, m, out, 2, 0) is None
    assert out[0] == 12 + 15


def test_record_and_vector_kernels_compile_for_cuda_with_checks() -> None:
    for kernel in (record_neighbours, vector_neighbours, areas, record_rows,
                   record_field_write, wide_store, wide_store_64, wide_load, wide_load_2d):
        cuda_source(kernel)


# ---------------------------------------------------------------- the status array

@kiln.kernel(debug=True)
def nothing_to_check(a: f32[:], x: f32):
    s = kiln.shared(f32, 64)
    s[kiln.thread_idx.x % 64] = x  # provably inside: no check, so no status array


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_kernel_with_nothing_to_check_launches(backend: str) -> None:
    run(nothing_to_check, backend, 4, np.zeros(1, np.float32), 1.0)
    program = nothing_to_check.compile(backend, f32[:], f32).program
    assert program is not None and not program.checks


# ---------------------------------------------------------------- views

def report(kernel: kiln.Kernel, backend: str, *args: object) -> str | None:
    """The message of the error one thread's launch reports (None: it ran clean)."""
    try:
        run(kernel, backend, 1, *args)
    except kiln.IndexOutOfBoundsError as exc:
        assert exc.loc is not None and exc.loc.line == marked_line(kernel)
        return exc.message.removeprefix(f"kernel `{kernel.name}`: thread (0, 0, 0) of block "
                                        "(0, 0, 0) ")
    return None


@kiln.kernel(debug=True)
def segment(a: f32[:], out: f32[:], lo: i32, hi: i32, k: i32):
    seg = a[lo:hi]
    out[0] = seg[k]  # error


@kiln.kernel(debug=True)
def segment_by_thread(a: f32[:], out: f32[:]):
    seg = a[0:4]
    i = kiln.global_id(0)
    out[i] = seg[i]  # error


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_slice_is_checked_against_its_own_length(backend: str) -> None:
    a, out = np.arange(10, dtype=np.float32), np.zeros(8, np.float32)
    assert report(segment, backend, a, out, 2, 6, 3) is None and out[0] == 5
    assert report(segment, backend, a, out, 2, 6, 4) == "read `seg[4]`, outside its 4 elements"
    with pytest.raises(kiln.IndexOutOfBoundsError) as info:
        run(segment_by_thread, backend, 8, a, out)
    assert info.value.message == ("kernel `segment_by_thread`: thread (4, 0, 0) of block "
                                  "(0, 0, 0) read `seg[4]`, outside its 4 elements")


@kiln.kernel(debug=True)
def bad_slice(a: f32[:], out: f32[:], lo: i32, hi: i32):
    seg = a[lo:hi]  # error
    out[0] = f32(len(seg))


@kiln.kernel(debug=True)
def slice_of_a_slice(a: f32[:], out: f32[:], hi: i32, k: i32):
    seg = a[2:6]
    part = seg[1:hi]  # error
    out[0] = part[k]


@pytest.mark.parametrize("backend", BACKENDS)
def test_slice_bounds_are_checked_against_what_they_slice(backend: str) -> None:
    a, out = np.arange(10, dtype=np.float32), np.zeros(1, np.float32)
    assert report(bad_slice, backend, a, out, 0, 10) is None and out[0] == 10
    assert report(bad_slice, backend, a, out, 10, 10) is None and out[0] == 0
    assert report(bad_slice, backend, a, out, -1, 3) == "sliced `a[-1:]`, outside its 10 elements"
    assert report(bad_slice, backend, a, out, 2, 11) == "sliced `a[:11]`, outside its 10 elements"
    assert report(slice_of_a_slice, backend, a, out, 4, 2) is None and out[0] == 5
    # `seg[1:5]` stays inside `a`, but not inside `seg`
    assert report(slice_of_a_slice, backend, a, out, 5, 0) == \
        "sliced `seg[:5]`, outside its 4 elements"


@kiln.kernel(debug=True)
def empty_slice(a: f32[:], out: f32[:], lo: i32, hi: i32, k: i32):
    seg = a[lo:hi]
    for j in range(len(seg)):
        out[0] += seg[j]
    if k >= 0:
        out[0] = seg[k]  # error


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_slice_with_lo_above_hi_is_empty(backend: str) -> None:
    a, out = np.arange(10, dtype=np.float32), np.ones(1, np.float32)
    assert report(empty_slice, backend, a, out, 5, 2, -1) is None and out[0] == 1
    assert report(empty_slice, backend, a, out, 5, 2, 0) == "read `seg[0]`, outside its 0 elements"
    # at the end of `a`: the failed check's index 0 is `a[10]`, which the interp reports
    # itself, after the view's failure (and no stale status reaches the next launch)
    assert report(empty_slice, backend, a, out, 10, 10, 0) == \
        "read `seg[0]`, outside its 0 elements"
    assert report(empty_slice, backend, a, out, 10, 10, -1) is None


@kiln.kernel(debug=True)
def nested_slices(a: f32[:], out: f32[:], k: i32):
    out[0] = a[2:10][1:4][k]  # error


@kiln.kernel(debug=True)
def rows_and_columns(m: f32[:, :], out: f32[:], i: i32, j: i32):
    row = m[i]
    col = m[:, j]  # error
    out[0] = row[j] + col[i]


@kiln.kernel(debug=True)
def row_of_a_block(m: f32[:, :], out: f32[:], i: i32):
    block = m[1:3]
    row = block[i]  # error
    out[0] = row[0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_rows_columns_and_views_of_views_are_checked(backend: str) -> None:
    a, out = np.arange(10, dtype=np.float32), np.zeros(1, np.float32)
    assert report(nested_slices, backend, a, out, 2) is None and out[0] == 5
    assert report(nested_slices, backend, a, out, 3) == \
        "read `a[2:10][1:4][3]`, outside its 3 elements"
    m = np.arange(20, dtype=np.float32).reshape(5, 4)
    assert report(rows_and_columns, backend, m, out, 4, 3) is None and out[0] == 38
    assert report(rows_and_columns, backend, m, out, 1, 4) == \
        "viewed `m[:, 4]`, outside its shape (axis 1 has 4 elements)"
    assert report(row_of_a_block, backend, m, out, 1) is None and out[0] == 8
    assert report(row_of_a_block, backend, m, out, 2) == \
        "viewed `block[2, :]`, outside its shape (axis 0 has 2 elements)"


@kiln.kernel(debug=True)
def writes_through_views(a: f32[:], k: i32, op: i32):
    seg = a[2:6]
    if op == 0:
        seg[k] = 1.0  # error
    elif op == 1:
        seg[k] += 1.0  # error
    else:
        kiln.atomic_add(seg, k, 1.0)  # error


@pytest.mark.parametrize("backend", BACKENDS)
def test_writes_and_atomics_through_views_are_checked(backend: str) -> None:
    a = np.zeros(10, np.float32)
    for op, verb in enumerate(("wrote", "read", "updated")):
        with pytest.raises(kiln.IndexOutOfBoundsError) as info:
            run(writes_through_views, backend, 1, a, 4, op)
        assert info.value.message.endswith(f"{verb} `seg[4]`, outside its 4 elements")
        run(writes_through_views, backend, 1, a, 3, op)
    # a failed write does not happen: only the three good launches wrote `a[5]`
    np.testing.assert_array_equal(a, [0, 0, 0, 0, 0, 3, 0, 0, 0, 0])


@kiln.func
def pick(x: f32[:], k: i32) -> f32:
    return x[k]  # error


@kiln.kernel(debug=True)
def views_to_functions(a: f32[:], m: f32[:, :], out: f32[:], k: i32):
    out[0] = pick(a[2:6], k) + pick(m[1], k)


@pytest.mark.parametrize("backend", BACKENDS)
def test_views_passed_to_device_functions_keep_their_extent(backend: str) -> None:
    a, m = np.arange(10, dtype=np.float32), np.arange(20, dtype=np.float32).reshape(5, 4)
    out = np.zeros(1, np.float32)
    run(views_to_functions, backend, 1, a, m, out, 3)
    assert out[0] == 5 + 7
    with pytest.raises(kiln.IndexOutOfBoundsError) as info:
        run(views_to_functions, backend, 1, a, m, out, 4)
    assert info.value.message.endswith("read `x[4]`, outside its 4 elements")
    assert info.value.loc.line == marked_line(pick)


def test_release_kernels_are_built_without_view_checks() -> None:
    plain = kiln.kernel(segment.pyfunc)
    assert "CheckedIndex" not in plain.ir() and "kiln_check" not in plain.source("opencl")
    assert "CheckedIndex" in kiln.ir.printer.format_program(  # type: ignore[attr-defined]
        segment.program((f32[:], f32[:], i32, i32, i32), checked=True))


@pytest.mark.parametrize("kernel", [segment, slice_of_a_slice, nested_slices, rows_and_columns,
                                    row_of_a_block, writes_through_views, views_to_functions])
def test_view_checks_compile_for_cuda(kernel: kiln.Kernel) -> None:
    assert "kiln_check_view" in cuda_source(kernel)


# ---------------------------------------------------------------- other launch paths

@pytest.mark.parametrize("backend", BACKENDS)
def test_prepared_and_repeated_launches_report_each_failure_once(backend: str) -> None:
    dev = kiln.device(backend)
    a, out = kiln.to_device(np.arange(10, dtype=np.float32), dev), kiln.zeros(1, f32, dev)
    good = segment.prepare(1, 1, a, out, 2, 6, 3)
    bad = segment.prepare(1, 1, a, out, 2, 6, 4)
    for _ in range(2):
        good()
        dev.synchronize()
        bad()
        with pytest.raises(kiln.IndexOutOfBoundsError, match="read `seg\\[4\\]`"):
            dev.synchronize()
    for _ in range(3):  # `kernel[grid, block]`: the launcher's path
        segment[1, 1](a, out, 2, 6, 3)
    dev.synchronize()
    assert out.numpy()[0] == 5


@kiln.kernel(debug=True)
def windows(x: f32[:], out: f32[:], rows: i32, reach: i32):
    i = kiln.global_id(0)
    if i < rows:
        window = x[i:i + reach]  # error
        out[i + 1] = window[reach - 1]  # x's halo row first: x[i + 1] is row i


@requires_backend("cpu", "sharding splits the cpu backend's device")
def test_sharded_launches_report_failures_of_every_shard_at_gather() -> None:
    cpu = kiln.device("cpu")
    parts = cpu.split(2) if cpu.capabilities.compute_units >= 2 else [cpu, kiln.device("interp")]
    x = np.arange(10, dtype=np.float32)
    a, b = kiln.shard(x, parts, halo=1), kiln.shard_empty(10, f32, parts, halo=1)
    kiln.launch_sharded(windows, (a, b, kiln.shard_rows, 3))
    np.testing.assert_array_equal(b.gather(), [1, 2, 3, 4, 5, 6, 7, 8, 9, 0])
    kiln.launch_sharded(windows, (a, b, kiln.shard_rows, 4))  # one past each shard's end
    with pytest.raises(kiln.ShardError, match="shard rows 0:5") as info:
        b.gather()
    cause = info.value.__cause__
    assert isinstance(cause, kiln.IndexOutOfBoundsError)
    assert cause.message.endswith("thread (4, 0, 0) of block (0, 0, 0) sliced `x[:8]`, "
                                  "outside its 7 elements")
    assert cause.loc.line == marked_line(windows)
    kiln.launch_sharded(windows, (a, b, kiln.shard_rows, 3))  # no stale failure of the
    np.testing.assert_array_equal(b.gather(), [1, 2, 3, 4, 5, 6, 7, 8, 9, 0])  # other shard


def test_raw_kernels_refuse_debug() -> None:
    with pytest.raises(kiln.OptionError, match="RawKernel scale: debug=True checks"):
        kiln.RawKernel('extern "C" __global__ void scale(float *a) {}', "scale", debug=True)
    assert not kiln.RawKernel("", "scale", debug=False).options.debug


def test_checks_of_an_unread_view_are_kept_as_statements_without_warnings() -> None:
    # `seg` of `bad_slice` is only measured: its start is never read, but its check stays
    source = bad_slice.source("opencl")
    assert source.count("kiln_check_bound_i32") == 3  # the checker, then `lo` and `hi`
    assert "(void)(" in source  # a C compiler warns of a statement `0 + check(lo, ...);`


@kiln.kernel(debug=True)
def view_bound_again(m: f32[:, :], out: f32[:], j: i32, n: i32):
    row = m[0, 0:n]
    for t in range(3):
        out[t] = row[j + t]  # error
        row = m[t + 1]  # the whole row from now on: checked against its 4 elements


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_view_bound_again_is_checked_against_its_latest_extent(backend: str) -> None:
    m, out = np.arange(16, dtype=np.float32).reshape(4, 4), np.zeros(3, np.float32)
    assert report(view_bound_again, backend, m, out, 1, 2) is None
    np.testing.assert_array_equal(out, [1, 6, 11])
    assert report(view_bound_again, backend, m, out, 2, 2) == \
        "read `row[2]`, outside its 2 elements"
