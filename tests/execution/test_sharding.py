"""Several devices in one process: sub-devices of the cpu backend, copies between devices,
sharded launches with halos and partial results, compared with one device and NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import f32, i32
from kiln.examples import smooth_shard, vector_add
from tests.helpers import backend_entry, requires_backend

pytestmark = [requires_backend("cpu", "sharding tests split the cpu backend's device"),
              pytest.mark.compiler]


@kiln.kernel
def count_into(x: i32[:], total: i32[:], rows: i32):
    i = kiln.global_id(0)
    if i < rows:
        kiln.atomic_add(total, 0, x[i])


@kiln.kernel
def scale_rows(m: f32[:, :], out: f32[:, :], start: i32, rows: i32, cols: i32):
    r = kiln.global_id(0)
    c = kiln.global_id(1)
    if r < rows and c < cols:
        out[r, c] = m[r, c] * f32(start + r)


def smooth_numpy(x: np.ndarray, steps: int) -> np.ndarray:
    for _ in range(steps):
        y = x.copy()
        y[1:-1] = (x[:-2] + x[1:-1] + x[2:]) / np.float32(3)
        x = y
    return x


@pytest.fixture(scope="module")
def cpu_parts() -> list[kiln.Device]:
    cpu = kiln.device("cpu")
    return cpu.split(2) if cpu.capabilities.compute_units >= 2 else [cpu, kiln.device("interp")]


@pytest.fixture(scope="module", params=["cpu parts", "two GPUs"])
def parts(request: pytest.FixtureRequest, cpu_parts: list[kiln.Device]) -> list[kiln.Device]:
    """The two devices every sharding test runs over: the cpu's halves, and two GPUs (copies
    between them are the driver's peer copies) where the machine has them."""
    if request.param == "cpu parts":
        return cpu_parts
    gpus = [d for d in kiln.devices() if d.backend.name == "cuda"]
    if len(gpus) < 2:
        pytest.skip(f"sharding over GPUs needs two CUDA GPUs; this machine has {len(gpus)}")
    return gpus[:2]


def test_split_names_threads_and_memory(cpu_parts):
    cpu = kiln.device("cpu")
    if cpu.capabilities.compute_units < 2:
        pytest.skip("this machine has one core: nothing to split")
    parts = cpu_parts
    assert [d.name for d in parts] == ["cpu:0.0", "cpu:0.1"]
    assert sum(d.capabilities.compute_units for d in parts) == cpu.capabilities.compute_units
    a = kiln.to_device(np.arange(10, dtype=np.float32), parts[0])
    assert np.array_equal(a.to(parts[1]).numpy(), np.arange(10, dtype=np.float32))


def test_split_errors():
    cpu = kiln.device("cpu")
    with pytest.raises(ValueError, match="splits into 1 to"):
        cpu.split(0)
    with pytest.raises(ValueError, match="does not partition"):
        kiln.device("interp").split(2)
    if cpu.capabilities.compute_units >= 2:
        with pytest.raises(ValueError, match="already a part"):
            cpu.split(2)[0].split(2)


@pytest.mark.parametrize("target", ["cpu", "interp", "opencl", "cuda"])
def test_to_copies_between_devices(parts, target):
    entry = backend_entry(target)
    if not entry.available:
        pytest.skip(f"no {target} device here: {entry.reason}")
    host = np.random.default_rng(1).random((7, 5)).astype(np.float32)
    a = kiln.to_device(host, parts[0])
    b = a.to(target)
    assert b.device.name.startswith(target) and np.array_equal(b.numpy(), host)
    assert np.array_equal(b.to(parts[1]).numpy(), host)


def test_to_orders_after_queued_work(parts):
    n = 1 << 16
    x = np.random.default_rng(2).random(n).astype(np.float32)
    a, b = kiln.to_device(x, parts[0]), kiln.to_device(x, parts[0])
    c = kiln.empty(n, f32, parts[0])
    kiln.launch(vector_add, dim=n, args=(a, b, c, n))
    assert np.array_equal(c.to(parts[1]).numpy(), x + x)


def test_sharded_elementwise_matches_one_device(parts):
    n = 100_003
    rng = np.random.default_rng(3)
    x, y = (rng.random(n).astype(np.float32) for _ in range(2))
    xs, ys = kiln.shard(x, parts), kiln.shard(y, parts)
    out = kiln.shard_empty(n, f32, parts)
    kiln.launch_sharded(vector_add, (xs, ys, out, kiln.shard_rows))
    one = np.empty(n, np.float32)
    kiln.launch(vector_add, dim=n, args=(x, y, one, n), device=parts[0])
    assert np.array_equal(out.gather(), one)
    assert np.array_equal(out.gather(), x + y)


def test_sharded_stencil_with_halo(parts):
    n, steps = 4099, 12
    x = np.random.default_rng(4).random(n).astype(np.float32)
    a, b = kiln.shard(x, parts, halo=1), kiln.shard_empty(n, f32, parts, halo=1)
    for _ in range(steps):
        kiln.launch_sharded(smooth_shard, (a, b, kiln.shard_start, kiln.shard_rows, n))
        b.refresh_halo()
        a, b = b, a
    whole = kiln.shard(x, [parts[0]], halo=1)
    other = kiln.shard_empty(n, f32, [parts[0]], halo=1)
    for _ in range(steps):
        kiln.launch_sharded(smooth_shard, (whole, other, kiln.shard_start, kiln.shard_rows, n))
        whole, other = other, whole
    assert np.array_equal(a.gather(), whole.gather())
    np.testing.assert_allclose(a.gather(), smooth_numpy(x, steps), rtol=1e-6)


def test_sharded_reduction_with_partials(parts):
    x = np.random.default_rng(5).integers(-1000, 1000, 50_001).astype(np.int32)
    total = kiln.partials(1, i32, parts)
    kiln.launch_sharded(count_into, (kiln.shard(x, parts), total, kiln.shard_rows))
    assert int(total.combine()[0]) == int(x.sum())


def test_sharded_2d_rows_know_their_start(parts):
    m = np.random.default_rng(6).random((37, 19)).astype(np.float32)
    ms = kiln.shard(m, parts)
    out = kiln.shard_empty(m.shape, f32, parts)
    kiln.launch_sharded(scale_rows, (ms, out, kiln.shard_start, kiln.shard_rows, m.shape[1]))
    assert np.array_equal(out.gather(), m * np.arange(37, dtype=np.float32)[:, None])


@pytest.mark.parametrize("other", ["interp", "opencl", "cuda"])
def test_mixed_backends_shard_like_one_device(parts, other):
    entry = backend_entry(other)
    if not entry.available:
        pytest.skip(f"no {other} device here: {entry.reason}")
    if parts[0].backend.name == other:
        pytest.skip(f"{parts[0].name} is already a {other} device: nothing to mix")
    devices = [parts[0], other]
    n = 3001
    x = np.random.default_rng(7).random(n).astype(np.float32)
    a, b = kiln.shard(x, devices, halo=1), kiln.shard_empty(n, f32, devices, halo=1)
    kiln.launch_sharded(smooth_shard, (a, b, kiln.shard_start, kiln.shard_rows, n))
    b.refresh_halo()
    kiln.launch_sharded(smooth_shard, (b, a, kiln.shard_start, kiln.shard_rows, n))
    np.testing.assert_allclose(a.gather(), smooth_numpy(x, 2), rtol=1e-6)


def test_sharded_launch_errors_name_the_shard(parts):
    n = 64
    xs = kiln.shard(np.zeros(n, np.float32), parts)
    with pytest.raises(kiln.LaunchError, match="no argument is a ShardedArray"):
        kiln.launch_sharded(vector_add, (np.zeros(n, np.float32),) * 3 + (n,))
    other = kiln.shard(np.zeros(n, np.float32), parts[:1])
    with pytest.raises(kiln.LaunchError, match="same devices at the same rows"):
        kiln.launch_sharded(vector_add, (xs, other, xs, kiln.shard_rows))
    ints = kiln.shard(np.zeros(n, np.int32), parts)
    with pytest.raises(kiln.ShardError, match=r"shard rows 0:32 on .*expected f32\[:\]") as info:
        kiln.launch_sharded(vector_add, (ints, xs, xs, kiln.shard_rows))
    assert isinstance(info.value.__cause__, kiln.LaunchError)
    assert info.value.errors == [info.value.__cause__] and info.value.shards == [ints.shards[0]]
    with pytest.raises(ValueError, match="halo of 40 rows needs shards of 40 rows or more"):
        kiln.shard(np.zeros(n, np.float32), parts, halo=40)
    haloed = kiln.shard(np.zeros(n, np.float32), parts, halo=1)
    with pytest.raises(kiln.LaunchError, match="with the same halo"):
        kiln.launch_sharded(vector_add, (xs, haloed, xs, kiln.shard_rows))
    with pytest.raises(TypeError, match="takes a NumPy ufunc"):
        kiln.partials(1, f32, parts).combine(sum)


@kiln.kernel(debug=True)
def write_row_past_end(x: f32[:], total: f32[:], rows: i32):
    i = kiln.global_id(0)
    if i < rows:
        x[i + 1] = 1.0
        total[i + 1] = 1.0


@pytest.fixture(params=["parts", "interp and cpu"])
def two_devices(request: pytest.FixtureRequest, parts: list[kiln.Device]) -> list[kiln.Device]:
    """The sharding devices, and two devices of different backends (interp's failures are
    raised by its stream's worker, the cpu's by its debug checks)."""
    return parts if request.param == "parts" else [kiln.device("interp"), kiln.device("cpu")]


def test_a_failed_sharded_launch_is_reported_once_with_every_shard(two_devices):
    xs = kiln.shard(np.zeros(8, np.float32), two_devices)
    sums = kiln.partials(5, f32, two_devices)
    kiln.launch_sharded(write_row_past_end, (xs, sums, kiln.shard_rows))
    with pytest.raises(kiln.ShardError, match=r"2 failures on 2 shards") as info:
        xs.gather()
    names = [d.name for d in two_devices]
    assert [s.device.name for s in info.value.shards] == names
    message = str(info.value)
    assert all(f"gathering shard rows {rows} on {name}: IndexOutOfBoundsError" in message
               for rows, name in zip(("0:4", "4:8"), names))
    assert all(isinstance(e, kiln.IndexOutOfBoundsError) for e in info.value.errors)
    # reported once: nothing is left to surface in later, unrelated work
    fresh = kiln.shard(np.arange(8, dtype=np.float32), two_devices)
    np.testing.assert_array_equal(fresh.gather(), np.arange(8))
    assert sums.combine().shape == (5,)  # a failed launch's writes are undefined
    for device in two_devices:
        device.synchronize()


def test_combine_reports_every_failing_device(two_devices):
    sums = kiln.partials(4, f32, two_devices)
    xs = kiln.shard(np.zeros(8, np.float32), two_devices)
    kiln.launch_sharded(write_row_past_end, (xs, sums, kiln.shard_rows))
    with pytest.raises(kiln.ShardError, match=r"combining the partial result on") as info:
        sums.combine()
    assert [s.device.name for s in info.value.shards] == [d.name for d in two_devices]
    assert xs.gather().shape == (8,)  # nothing left to raise


def test_gather_refuses_an_out_that_does_not_fit(parts):
    xs = kiln.shard(np.arange(12, dtype=np.float32).reshape(6, 2), parts)
    readonly = np.zeros((6, 2), np.float32)
    readonly.flags.writeable = False
    for out, given in ((np.zeros((5, 2), np.float32), r"its shape is \(5, 2\)"),
                       (np.zeros(12, np.float32), r"its shape is \(12,\)"),
                       (np.zeros((6, 2), np.float64), "its dtype is float64"),
                       (np.zeros((6, 4), np.float32)[:, ::2], "it is not C-contiguous"),
                       (readonly, "it is read-only")):
        with pytest.raises(kiln.CopyError, match=r"float32 array of shape \(6, 2\); " + given):
            xs.gather(out)
    with pytest.raises(kiln.CopyError, match="takes a NumPy array, got list"):
        xs.gather([0.0] * 12)
    out = np.zeros((6, 2), np.float32)
    assert xs.gather(out) is out
    np.testing.assert_array_equal(out, np.arange(12).reshape(6, 2))


def test_refresh_halo_after_a_failed_launch_reports_every_shard_once():
    devices = [kiln.device("interp"), kiln.device("cpu")]  # copies go through the host
    xs = kiln.shard(np.zeros(8, np.float32), devices, halo=1)  # 6 rows a shard
    sums = kiln.partials(7, f32, devices)
    kiln.launch_sharded(write_row_past_end, (xs, sums, 6), dim=6)  # writes row 6
    with pytest.raises(kiln.ShardError, match="refreshing the ghost rows of shard rows") as info:
        xs.refresh_halo()
    assert {s.device.name for s in info.value.shards} <= {d.name for d in devices}
    xs.refresh_halo()  # reported once: nothing is left to raise
    assert xs.gather().shape == (8,)


def test_halos_and_shapes_are_checked_first(parts):
    for halo in (1.5, True, "1", None):
        with pytest.raises(TypeError, match="halo is a number of rows"):
            kiln.shard(np.zeros(8, np.float32), parts, halo=halo)
    with pytest.raises(ValueError, match="one or more dimensions"):
        kiln.shard_empty((), f32, parts)


def test_a_failing_dim_function_launches_nothing(parts):
    """`dim` as a function is called for every shard before any launch: its failure on the
    second shard is a ShardError naming that shard, and the first shard is untouched."""
    n = 64
    xs = kiln.shard(np.ones(n, np.float32), parts)
    out = kiln.shard(np.zeros(n, np.float32), parts)

    def size(shard: kiln.Shard) -> int:
        if shard.start:
            raise ValueError(f"no size for rows {shard.start}:{shard.stop}")
        return shard.rows

    with pytest.raises(kiln.ShardError, match=r"preparing vector_add for shard rows 32:64 on "
                                              r".*ValueError: no size for rows 32:64") as info:
        kiln.launch_sharded(vector_add, (xs, xs, out, kiln.shard_rows), dim=size)
    assert isinstance(info.value.__cause__, ValueError)
    assert info.value.shards == [xs.shards[1]]
    np.testing.assert_array_equal(out.gather(), np.zeros(n))  # no shard launched
    kiln.launch_sharded(vector_add, (xs, xs, out, kiln.shard_rows), dim=lambda s: s.rows)
    np.testing.assert_array_equal(out.gather(), np.full(n, 2))
