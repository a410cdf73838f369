"""kiln.dask: kernels over dask arrays' chunks, threaded and on a local cluster of process
workers (one killed in the middle), compared with one device and NumPy."""

from __future__ import annotations

import importlib
import linecache
import os
import signal
import sys
import time

import numpy as np
import pytest

import kiln
from kiln import f32, i32
from kiln.examples import smooth_shard
from tests.helpers import requires_backend

pytestmark = pytest.mark.slow

da = pytest.importorskip("dask.array", reason="kiln[dask] (dask) is not installed")
distributed = pytest.importorskip("distributed", reason="kiln[dask] (distributed) is not "
                                  "installed")
kd = pytest.importorskip("kiln.dask")
cloudpickle = pytest.importorskip("cloudpickle", reason="kiln[dask] (cloudpickle) is not "
                                  "installed")


@kiln.kernel
def saxpy(x: f32[:], y: f32[:], out: f32[:], a: f32, rows: i32):
    i = kiln.global_id(0)
    if i < rows:
        out[i] = a * x[i] + y[i]


@kiln.kernel
def total(x: i32[:], acc: i32[:], rows: i32):
    i = kiln.global_id(0)
    if i < rows:
        kiln.atomic_add(acc, 0, x[i])


@kiln.kernel
def row_offsets(m: f32[:, :], out: f32[:, :], start: i32, rows: i32):
    r = kiln.global_id(0)
    c = kiln.global_id(1)
    if r < rows and c < m.shape[1]:
        out[r, c] = m[r, c] + f32(start + r)


@kiln.kernel
def weighted(m: i32[:, :], acc: i32[:], start: i32, rows: i32):
    r = kiln.global_id(0)
    c = kiln.global_id(1)
    if r < rows and c < m.shape[1]:
        kiln.atomic_add(acc, 0, (start + r) * m[r, c])


@kiln.kernel
def smooth_rows(m: f32[:, :], out: f32[:, :], start: i32, rows: i32, n: i32):
    r = kiln.global_id(0)
    c = kiln.global_id(1)
    if r < rows and c < m.shape[1]:
        if start + r == 0 or start + r == n - 1:
            out[r + 1, c] = m[r + 1, c]
        else:
            out[r + 1, c] = (m[r, c] + m[r + 1, c] + m[r + 2, c]) / 3.0


def data(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).random(n).astype(np.float32)


def test_map_blocks_matches_numpy():
    x, y = data(10_007, 1), data(10_007, 2)
    dx, dy = da.from_array(x, chunks=3000), da.from_array(y, chunks=3000)
    z = kd.map_blocks(saxpy, dx, dy, np.float32(2), kiln.shard_rows, out="out")
    assert z.dtype == np.float32 and z.chunks == dx.chunks
    assert z.name.startswith("saxpy-")  # Dask's dashboard shows the kernel's name
    assert np.array_equal(z.compute(), np.float32(2) * x + y)


def devices_here() -> list[object]:
    """Each backend's device, skipped (with the reason) where the backend is unavailable."""
    return [pytest.param(name, marks=requires_backend(name, f"kiln.dask on {name}"))
            for name in ("interp", "cpu", "opencl", "cuda")]


@pytest.mark.parametrize("device", devices_here())
def test_every_entry_gives_each_chunk_its_start(device):
    """Unequal chunks, an empty one, and chunks across columns too: `kiln.shard_start` is
    the chunk's first row in the whole array for map_blocks, map_overlap and reduction."""
    rows = ((16, 0, 30, 4), (4, 3))
    m = np.random.default_rng(3).random((50, 7)).astype(np.float32)
    out = kd.map_blocks(row_offsets, da.from_array(m, chunks=rows), kiln.shard_start,
                        kiln.shard_rows, out="out", device=device)
    assert np.array_equal(out.compute(), m + np.arange(50, dtype=np.float32)[:, None])
    ones = da.ones((1000, 3), dtype=np.int32, chunks=((300, 0, 450, 250), (2, 1)))
    weighted_sum = kd.reduction(weighted, ones, kiln.shard_start, kiln.shard_rows, out="acc",
                                device=device)
    assert int(weighted_sum.compute()) == 3 * 499_500  # 3 * sum(i for i < 1000)
    smooth = kd.map_overlap(smooth_rows, da.from_array(m, chunks=((13, 7, 30), 7)),
                            kiln.shard_start, kiln.shard_rows, 50, out="out", depth=1,
                            device=device)
    expect = m.copy()
    expect[1:-1] = (m[:-2] + m[1:-1] + m[2:]) / np.float32(3)
    np.testing.assert_allclose(smooth.compute(), expect, rtol=1e-6)


def test_map_overlap_refuses_chunks_across_columns():
    """Ghost rows come along the first axis only: a chunk that is part of its rows would
    miss its neighbours' columns, so it is refused, and the advice works."""
    m = np.random.default_rng(13).random((20, 6)).astype(np.float32)
    across = da.from_array(m, chunks=(10, 4))
    with pytest.raises(kiln.LaunchError, match=r"first axis only.*chunked along axis 1 too.*"
                                               r"x\.rechunk\(\{1: -1\}\)"):
        kd.map_overlap(smooth_rows, across, kiln.shard_start, kiln.shard_rows, 20, out="out",
                       depth=1)
    whole = kd.map_overlap(smooth_rows, across.rechunk({1: -1}), kiln.shard_start,
                           kiln.shard_rows, 20, out="out", depth=1)
    assert np.allclose(whole.compute()[1:-1], (m[:-2] + m[1:-1] + m[2:]) / 3, rtol=1e-6)


def test_map_overlap_stencil():
    n = 5003
    x = data(n, 4)
    out = kd.map_overlap(smooth_shard, da.from_array(x, chunks=1000), kiln.shard_start,
                         kiln.shard_rows, n, out="y", depth=1)
    expect = x.copy()
    expect[1:-1] = (x[:-2] + x[1:-1] + x[2:]) / np.float32(3)
    np.testing.assert_allclose(out.compute(), expect, rtol=1e-6)


def test_reduction_through_dask_tree():
    x = np.random.default_rng(5).integers(-100, 100, 40_000).astype(np.int32)
    s = kd.reduction(total, da.from_array(x, chunks=3000), kiln.shard_rows, out="acc")
    assert s.ndim == 0 and int(s.compute()) == int(x.sum())
    once = kd.reduction(total, da.from_array(x, chunks=3000), kiln.shard_rows, out="acc",
                        initial=1000)  # counted once, as by np.add.reduce, not per chunk
    assert int(once.compute()) == int(np.add.reduce(x, initial=1000))


def test_chunks_on_devices_are_not_computed_but_brought_back():
    x = data(300, 14)
    dx = da.from_array(x, chunks=100)
    y = kd.map_blocks(saxpy, dx, dx, np.float32(1), kiln.shard_rows, out="out", on_device=True)
    for wrong in (y, y.persist(), y.rechunk(300)):
        with pytest.raises(kiln.LaunchError, match=r"kept in device memory \(on_device=True\)"
                                                   r": bring them to the host with "
                                                   r"kiln\.dask\.to_host\(array\) first"):
            wrong.compute()
    assert np.array_equal(kd.to_host(y.persist()).compute(), x + x)
    assert np.array_equal(kd.to_host(x).compute(), x)  # host arrays pass as they are
    smooth = kd.map_overlap(smooth_shard, y, kiln.shard_start, kiln.shard_rows, 300, out="y",
                            depth=1)
    expect = x + x
    expect[1:-1] = (expect[:-2] + expect[1:-1] + expect[2:]) / np.float32(3)
    np.testing.assert_allclose(smooth.compute(), expect, rtol=1e-6)


def test_chained_calls_keep_chunks_on_the_device():
    x = data(4000, 6)
    dx = da.from_array(x, chunks=1000)
    y = kd.map_blocks(saxpy, dx, dx, np.float32(1), kiln.shard_rows, out="out", on_device=True)
    first = y.to_delayed().ravel()[0].compute(scheduler="sync")
    assert isinstance(first, kiln.DeviceArray)
    z = kd.to_host(kd.map_blocks(saxpy, y, y, np.float32(1), kiln.shard_rows, out="out"))
    assert np.array_equal(z.compute(), (x + x) + (x + x))


@kiln.kernel
def largest(x: f32[:], acc: f32[:], rows: i32):
    i = kiln.global_id(0)
    if i < rows:
        kiln.atomic_max(acc, 0, x[i])


def test_threaded_scheduler_with_many_chunks_at_once():
    """Dask's default scheduler runs chunks on several threads: one launch at a time per
    process keeps them right (kiln's launch path is not thread-safe)."""
    import dask

    x = data(1001, 11)
    dx = da.from_array(x, chunks=100)
    with dask.config.set(scheduler="threads", num_workers=4):
        for _ in range(3):
            z = kd.map_blocks(saxpy, dx, dx, np.float32(1), kiln.shard_rows, out="out")
            assert np.array_equal(z.compute(), x + x)


def test_reduction_without_identity_takes_initial():
    x = -1 - data(10_001, 12)  # all negative: a 0 start would win
    dx = da.from_array(x, chunks=1000)
    got = kd.reduction(largest, dx, kiln.shard_rows, out="acc", combine=np.maximum,
                       initial=-np.inf).compute()
    assert got == x.max()
    above = kd.reduction(largest, dx, kiln.shard_rows, out="acc", combine=np.maximum,
                         initial=7.0).compute()
    assert above == np.maximum.reduce(x, initial=7.0) == 7.0
    with pytest.raises(kiln.LaunchError, match="maximum has no identity; give initial="):
        kd.reduction(largest, dx, kiln.shard_rows, out="acc", combine=np.maximum)
    with pytest.raises(kiln.LaunchError, match="combines with a NumPy ufunc"):
        kd.reduction(largest, dx, kiln.shard_rows, out="acc", combine=max)


@kiln.kernel
def smallest(x: i32[:], acc: i32[:], rows: i32):
    i = kiln.global_id(0)
    if i < rows:
        kiln.atomic_min(acc, 0, x[i])


def test_reduction_initial_is_a_value_of_the_output_type():
    """`initial` follows the launch rule for a parameter of the output's type: no float
    (even a whole one) for an integer, nothing that does not fit, no string or complex."""
    ints = da.from_array(np.array([5, 3], np.int32), chunks=1)
    for initial, expect in ((4, 3), (np.int8(2), 2)):
        got = kd.reduction(smallest, ints, kiln.shard_rows, out="acc", combine=np.minimum,
                           initial=initial).compute()
        assert got == expect and got.dtype == np.int32
    for wrong in (1.5, 2.0, np.float32(1), 2**40, np.int64(2**40), "3", 1j, [1]):
        with pytest.raises(kiln.LaunchError, match=r"initial=.* is not a int32 value, the "
                                                   r"type of 'acc'"):
            kd.reduction(smallest, ints, kiln.shard_rows, out="acc", combine=np.minimum,
                         initial=wrong)
    floats = da.from_array(data(10, 21), chunks=5)
    for wrong in (1e300, "1"):
        with pytest.raises(kiln.LaunchError, match=r"is not a float32 value"):
            kd.reduction(largest, floats, kiln.shard_rows, out="acc", combine=np.maximum,
                         initial=wrong)


@kiln.kernel
def add_weight(w: f32[:], x: f32[:], out: f32[:], start: i32, rows: i32):
    i = kiln.global_id(0)
    if i < rows:
        out[i] = x[i] + w[(start + i) % w.shape[0]]


@kiln.kernel
def weighted_neighbours(x: f32[:], w: f32[:], out: f32[:], start: i32, rows: i32):
    i = kiln.global_id(0)
    if i < rows:
        out[i + 1] = x[i] + x[i + 2] + w[(start + i) % w.shape[0]]


@kiln.kernel
def weighted_total(x: i32[:], w: i32[:], acc: i32[:], start: i32, rows: i32):
    i = kiln.global_id(0)
    if i < rows:
        kiln.atomic_add(acc, 0, x[i] * w[(start + i) % w.shape[0]])


@pytest.mark.parametrize("device", devices_here())
def test_numpy_arrays_of_another_shape_go_whole_to_every_chunk(device):
    """A NumPy array of another shape than the dask arrays' (a table of weights) is passed
    whole to every chunk, by map_blocks, map_overlap and reduction alike."""
    x = data(20, 20)
    dx = da.from_array(x, chunks=(6, 6, 8))
    w = np.array([100, 200, 300], np.float32)
    each = w[np.arange(20) % 3]
    got = kd.map_blocks(add_weight, w, dx, kiln.shard_start, kiln.shard_rows, out="out",
                        device=device)
    assert np.array_equal(got.compute(), x + each)
    smooth = kd.map_overlap(weighted_neighbours, dx, w, kiln.shard_start, kiln.shard_rows,
                            out="out", depth=1, device=device)
    padded = np.pad(x, 1)
    np.testing.assert_allclose(smooth.compute(), padded[:-2] + padded[2:] + each, rtol=1e-6)
    ints = np.arange(20, dtype=np.int32)
    total_ = kd.reduction(weighted_total, da.from_array(ints, chunks=7), w.astype(np.int32),
                          kiln.shard_start, kiln.shard_rows, out="acc", device=device)
    assert int(total_.compute()) == int((ints * each.astype(np.int32)).sum())
    with pytest.raises(kiln.LaunchError, match=r"argument 'w' \(#1\) of add_weight: "
                                               r"expected f32\[:\]"):
        kd.map_blocks(add_weight, w.astype(np.float64), dx, kiln.shard_start, kiln.shard_rows,
                      out="out")


@pytest.mark.parametrize("device", devices_here())
def test_map_overlap_keeps_chunks_on_the_device(device):
    x = data(300, 22)
    dx = da.from_array(x, chunks=100)
    smooth = kd.map_overlap(smooth_shard, dx, kiln.shard_start, kiln.shard_rows, 300, out="y",
                            depth=1, device=device, on_device=True)
    first = smooth.to_delayed().ravel()[0].compute(scheduler="sync")
    assert isinstance(first, kiln.DeviceArray) and first.shape == (100,)
    with pytest.raises(kiln.LaunchError, match=r"kept in device memory"):
        smooth.compute()
    expect = kd.map_overlap(smooth_shard, dx, kiln.shard_start, kiln.shard_rows, 300, out="y",
                            depth=1)
    assert np.array_equal(kd.to_host(smooth).compute(), expect.compute())


def test_misuse_is_a_launch_error():
    dx = da.from_array(data(100, 7), chunks=50)
    for entry, extra in ((kd.map_blocks, {}), (kd.map_overlap, {"depth": 1}),
                         (kd.reduction, {})):
        with pytest.raises(kiln.LaunchError, match=r"launches a @kiln\.kernel over chunks, "
                                                   r"got function .*<lambda>$"):
            entry(lambda a: a, dx, out="a", **extra)

    @kiln.func
    def doubled(v: f32) -> f32:
        return v * 2.0

    with pytest.raises(kiln.LaunchError, match=r"over chunks, got DeviceFunction .*doubled"):
        kd.map_blocks(doubled, dx, out="v")
    with pytest.raises(kiln.LaunchError, match="no parameter 'z'"):
        kd.map_blocks(saxpy, dx, dx, 1.0, kiln.shard_rows, out="z")
    with pytest.raises(kiln.LaunchError, match=r"takes 4 argument\(s\) besides its outputs"):
        kd.map_blocks(saxpy, dx, dx, out="out")
    with pytest.raises(kiln.LaunchError, match="must be annotated as an array"):
        kd.map_blocks(saxpy, dx, dx, kiln.shard_rows, 1, out="a")
    other = da.from_array(data(100, 8), chunks=30)
    with pytest.raises(kiln.LaunchError, match=r"same shape and chunks.*rechunk"):
        kd.map_blocks(saxpy, dx, other, 1.0, kiln.shard_rows, out="out")
    uneven = da.from_array(data(10, 9), chunks=(4, 4, 2))
    with pytest.raises(kiln.LaunchError, match="depth 3 is more than the smallest chunk's 2"):
        kd.map_overlap(smooth_shard, uneven, kiln.shard_start, kiln.shard_rows, 10, out="y",
                       depth=3)
    for depth in (-1, 1.5, True):
        with pytest.raises(kiln.LaunchError, match="depth is a number of rows"):
            kd.map_overlap(smooth_shard, uneven, kiln.shard_start, kiln.shard_rows, 10,
                           out="y", depth=depth)


def test_mistakes_are_found_where_the_graph_is_built():
    """Each is a kiln error at the call, not a raw exception (or a wrong answer) from
    every chunk when the graph runs."""
    dx = da.from_array(data(100, 7), chunks=50)
    with pytest.raises(kiln.LaunchError, match=r"argument 'x' \(#1\) of saxpy: expected "
                                               r"f32\[:\] \(float32, 1-d\), got a float64"):
        kd.map_blocks(saxpy, dx.astype(np.float64), dx, 1.0, kiln.shard_rows, out="out")
    with pytest.raises(kiln.LaunchError, match=r"argument 'a' \(#4\) of saxpy: expected f32, "
                                               r"got str"):
        kd.map_blocks(saxpy, dx, dx, "2", kiln.shard_rows, out="out")
    with pytest.raises(kiln.LaunchError, match=r"out= names a parameter of saxpy twice"):
        kd.map_blocks(saxpy, dx, np.float32(1), kiln.shard_rows, out=("out", "out"))
    with pytest.raises(kiln.LaunchError, match=r"'x' of saxpy is a 0-d array;.*1 to 3 axes"):
        kd.map_blocks(saxpy, da.from_array(np.float32(1)), dx, 1.0, kiln.shard_rows,
                      out="out")
    some = dx[dx > 0.5]
    with pytest.raises(kiln.LaunchError, match=r"'x' of saxpy has chunks of unknown size"
                                               r".*x\.compute_chunk_sizes\(\) first"):
        kd.map_blocks(saxpy, some, some, 1.0, kiln.shard_rows, out="out")
    masked = da.from_array(np.ma.masked_array(np.ones(8, np.float32), mask=[0, 1] * 4),
                           chunks=4, asarray=False)
    with pytest.raises(kiln.LaunchError, match=r"'x' of saxpy is a masked array: kernels "
                                               r"take no masks.*dask\.array\.ma\.filled"):
        kd.map_blocks(saxpy, masked, masked, 1.0, kiln.shard_rows, out="out")
    with pytest.raises(kiln.LaunchError, match=r"output 'out' of row_offsets is f32\[:, :\]; "
                                               r"it holds one value, as a 1-d array"):
        kd.reduction(row_offsets, da.ones((4, 4), dtype=np.float32), kiln.shard_start,
                     kiln.shard_rows, out="out")
    square = da.ones((4, 4), dtype=np.int32, chunks=2)
    with pytest.raises(kiln.LaunchError, match=r"output 'acc' of weighted is i32\[:\], and "
                                               r"its chunks take the shape of the 2-d"):
        kd.map_blocks(weighted, square, kiln.shard_start, kiln.shard_rows, out="acc")
    with pytest.raises(kiln.LaunchError, match=r"initial=-inf is not a int32 value"):
        kd.reduction(total, dx.astype(np.int32), kiln.shard_rows, out="acc",
                     combine=np.maximum, initial=-np.inf)


def test_tasks_do_not_carry_the_input_arrays():
    """Each chunk's task goes to a worker on its own: it must not hold the dask arrays,
    whose graphs hold the data of `da.from_array`."""
    x = data(1_000_000, 18)
    dx = da.from_array(x, chunks=250_000)
    task = kd.ChunkLaunch(saxpy, (dx, dx, np.float32(1), kiln.shard_rows), "out", None)
    assert len(cloudpickle.dumps(task)) < 20_000
    partial = kd.PartialSum(kd.ChunkLaunch(largest, (dx, kiln.shard_rows), "acc", None),
                            np.maximum, -np.inf)
    assert len(cloudpickle.dumps(partial)) < 20_000
    whole = kd.ChunkLaunch(add_weight, (x, dx, kiln.shard_start, kiln.shard_rows), "out",
                           None)  # a NumPy array passed whole is in the graph once
    assert len(cloudpickle.dumps(whole)) < 20_000


RELOADED = """
import kiln
from kiln import f32, i32


@kiln.kernel
def edited(x: f32[:], out: f32[:], rows: i32):
    i = kiln.global_id(0)
    if i < rows:
        out[i] = x[i] * {factor}
"""


def test_a_reloaded_module_runs_its_new_kernel(tmp_path, monkeypatch):
    """An edited module, reloaded (as autoreload does in a notebook), sends its new kernel:
    the same module and name must not find the old one."""
    module = tmp_path / "kiln_dask_edited.py"
    module.write_text(RELOADED.format(factor="2.0"))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "kiln_dask_edited", raising=False)  # gone afterwards
    edited = importlib.import_module("kiln_dask_edited")
    dx = da.from_array(data(100, 19), chunks=40)
    assert np.array_equal(kd.map_blocks(edited.edited, dx, kiln.shard_rows, out="out").compute(),
                          dx.compute() * 2)
    module.write_text(RELOADED.format(factor="3.0") + "\n")  # a new size: reload sees it
    importlib.reload(edited)
    assert np.array_equal(kd.map_blocks(edited.edited, dx, kiln.shard_rows, out="out").compute(),
                          dx.compute() * 3)


def test_numpy_arrays_are_split_as_the_dask_array_is():
    x, y = data(100, 15), data(100, 16)
    z = kd.map_blocks(saxpy, da.from_array(x, chunks=30), y, np.float32(2), kiln.shard_rows,
                      out="out")
    assert z.chunks == ((30, 30, 30, 10),)
    assert np.array_equal(z.compute(), np.float32(2) * x + y)


@pytest.fixture(scope="module")
def cluster():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as c, distributed.Client(c) as client:
        yield client


def test_local_cluster_of_processes(cluster):
    x, y = data(200_003, 8), data(200_003, 9)
    z = kd.map_blocks(saxpy, da.from_array(x, chunks=25_000), da.from_array(y, chunks=25_000),
                      np.float32(3), kiln.shard_rows, out="out")
    assert np.array_equal(z.compute(), np.float32(3) * x + y)
    ints = np.arange(100_000, dtype=np.int32) % 7
    assert int(kd.reduction(total, da.from_array(ints, chunks=9_000), kiln.shard_rows,
                            out="acc").compute()) == int(ints.sum())
    w = np.array([100, 200, 300], np.float32)  # whole to every chunk, on every worker
    weighted = kd.map_blocks(add_weight, w, da.from_array(x, chunks=25_000), kiln.shard_start,
                             kiln.shard_rows, out="out")
    assert np.array_equal(weighted.compute(), x + w[np.arange(x.size) % 3])
    devices = cluster.run(lambda: kd.worker_device().name)
    assert len(devices) == 2


NOTEBOOK_CELL = """
import numpy as np
import kiln
from kiln import f32, i32

OFFSET = 0.5
TABLE = np.array([1.0, 2.0, 3.0, 4.0], np.float32)


@kiln.func(max_depth=8)
def triangle(n: i32) -> i32:
    if n <= 0:
        return 0
    return n + triangle(n - 1)


@kiln.func
def twice(v: f32) -> f32:
    return v * 2.0


@kiln.kernel
def cell_kernel(x: f32[:], out: f32[:], start: i32, rows: i32):
    i = kiln.global_id(0)
    if i < rows:
        g = start + i
        out[i] = twice(x[i]) + OFFSET + TABLE[g % 4] + f32(triangle(g % 5))


@kiln.kernel
def broken(x: f32[:], out: f32[:], rows: i32):
    i = kiln.global_id(0)
    if i < rows:
        out[i] = x[i] * undefined_scale
"""


def notebook_cell(monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    """NOTEBOOK_CELL run as Jupyter runs a cell: in `__main__`, from a file name that is
    no file (IPython keeps the text in `linecache`), so workers can import none of it; its
    kernels are also set on this process's `__main__`, as a script's guarded block leaves
    them where process workers (which import the script as `__mp_main__`) do not."""
    name = f"/tmp/ipykernel_{os.getpid()}/cell-1.py"
    monkeypatch.setitem(linecache.cache, name, (len(NOTEBOOK_CELL), None,
                                                NOTEBOOK_CELL.splitlines(True), name))
    namespace: dict[str, object] = {"__name__": "__main__"}
    exec(compile(NOTEBOOK_CELL, name, "exec"), namespace)
    for kernel in ("cell_kernel", "broken"):
        monkeypatch.setattr(sys.modules["__main__"], kernel, namespace[kernel], raising=False)
    return namespace


def make_scaled(a: float) -> kiln.Kernel:
    @kiln.kernel
    def scaled(x: f32[:], out: f32[:], rows: i32):
        i = kiln.global_id(0)
        if i < rows:
            out[i] = x[i] * a

    return scaled


def test_kernels_workers_cannot_import_travel_by_value(cluster, monkeypatch):
    """A notebook's kernels (with the constants, table and device functions they read) and
    a kernel made inside a function reach process workers with their source text."""
    cell = notebook_cell(monkeypatch)
    x = data(1_000, 17)
    dx = da.from_array(x, chunks=(300, 300, 400))
    got = kd.map_blocks(cell["cell_kernel"], dx, kiln.shard_start, kiln.shard_rows,
                        out="out").compute()
    g = np.arange(1_000)
    expect = x * 2 + np.float32(0.5) + np.float32([1, 2, 3, 4])[g % 4] + (g % 5) * (g % 5 + 1) // 2
    assert np.array_equal(got, expect.astype(np.float32))
    scaled = kd.map_blocks(make_scaled(np.float32(3)), dx, kiln.shard_rows, out="out")
    assert np.array_equal(scaled.compute(), np.float32(3) * x)
    line = NOTEBOOK_CELL.splitlines().index("        out[i] = x[i] * undefined_scale") + 1
    with pytest.raises(kiln.UnknownNameError, match=rf"cell-1\.py \(shipped [0-9a-f]+\):{line}:"
                                                    r".*undefined_scale"):
        kd.map_blocks(cell["broken"], dx, kiln.shard_rows, out="out").compute()


def test_a_module_workers_cannot_import_is_a_clear_error(cluster, tmp_path, monkeypatch):
    """A kernel's module on this process's path only (added after the workers started)."""
    (tmp_path / "kiln_dask_here_only.py").write_text(RELOADED.format(factor="2.0"))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "kiln_dask_here_only", raising=False)
    here = importlib.import_module("kiln_dask_here_only")
    dx = da.from_array(data(100, 20), chunks=50)
    with pytest.raises(kiln.LaunchError, match=r"this worker cannot import edited from "
                                               r"kiln_dask_here_only \(No module named"):
        kd.map_blocks(here.edited, dx, kiln.shard_rows, out="out").compute()


def _slow(chunk: np.ndarray) -> np.ndarray:
    time.sleep(0.4)
    return chunk


def test_killed_worker_is_replaced_and_the_result_is_right(cluster):
    x = data(64_000, 10)
    dx = da.from_array(x, chunks=4_000).map_blocks(_slow, dtype=np.float32)
    future = cluster.compute(kd.map_blocks(saxpy, dx, dx, np.float32(2), kiln.shard_rows,
                                           out="out"))
    time.sleep(1.0)
    pids = cluster.run(os.getpid)
    victim = sorted(pids.values())[0]
    os.kill(victim, signal.SIGKILL)
    result = future.result(timeout=120)
    assert np.array_equal(result, np.float32(2) * x + x)
    assert victim not in cluster.run(os.getpid).values()
