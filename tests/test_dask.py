"""kiln.dask: kernels over dask arrays' chunks, threaded and on a local cluster of process
workers (one killed in the middle), compared with one device and NumPy."""

from __future__ import annotations

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

da = pytest.importorskip("dask.array", reason="kiln[dask] (dask) is not installed")
distributed = pytest.importorskip("distributed", reason="kiln[dask] (distributed) is not "
                                  "installed")
kd = pytest.importorskip("kiln.dask")


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
def row_offsets(m: f32[:, :], out: f32[:, :], start: i32, rows: i32, cols: i32):
    r = kiln.global_id(0)
    c = kiln.global_id(1)
    if r < rows and c < cols:
        out[r, c] = m[r, c] + f32(start + r)


def data(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).random(n).astype(np.float32)


def test_map_blocks_matches_numpy():
    x, y = data(10_007, 1), data(10_007, 2)
    dx, dy = da.from_array(x, chunks=3000), da.from_array(y, chunks=3000)
    z = kd.map_blocks(saxpy, dx, dy, np.float32(2), kiln.shard_rows, out="out")
    assert z.dtype == np.float32 and z.chunks == dx.chunks
    assert np.array_equal(z.compute(), np.float32(2) * x + y)


def test_map_blocks_2d_chunks_know_their_start():
    m = np.random.default_rng(3).random((50, 7)).astype(np.float32)
    out = kd.map_blocks(row_offsets, da.from_array(m, chunks=(16, 7)), kiln.shard_start,
                        kiln.shard_rows, 7, out="out")
    assert np.array_equal(out.compute(), m + np.arange(50, dtype=np.float32)[:, None])


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
    with pytest.raises(kiln.LaunchError, match="maximum has no identity; give initial="):
        kd.reduction(largest, dx, kiln.shard_rows, out="acc", combine=np.maximum)
    with pytest.raises(kiln.LaunchError, match="combines with a NumPy ufunc"):
        kd.reduction(largest, dx, kiln.shard_rows, out="acc", combine=max)


def test_misuse_is_a_launch_error():
    dx = da.from_array(data(100, 7), chunks=50)
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
