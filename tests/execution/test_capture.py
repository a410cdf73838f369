"""`kiln.capture`: recorded launches replayed on every backend equal eager launches (checked
against NumPy), updates are checked as launches are, and what a capture cannot record is a
CaptureError that abandons it."""

from __future__ import annotations

import contextlib
import gc
import threading
import weakref
from pathlib import Path

import numpy as np
import pytest

import kiln
from kiln import f32, i32
from kiln.runtime.device import CAPTURES, RECORDING
from tests.helpers import requires_backend

BACKENDS = [pytest.param(name, marks=requires_backend(name, f"{name} is unavailable"))
            for name in ("interp", "cpu", "opencl", "serial", "cuda")]


@kiln.kernel
def nw_diagonal(h: i32[:, :], a: i32[:], b: i32[:], d: i32, lo: i32, count: i32, gap: i32):
    """One anti-diagonal (i + j == d) of Needleman-Wunsch's score matrix."""
    t = kiln.global_id(0)
    if t < count:
        i = lo + t
        j = d - i
        score = h[i - 1, j - 1] - 1
        if a[i - 1] == b[j - 1]:
            score = h[i - 1, j - 1] + 1
        score = max(score, h[i - 1, j] + gap)
        score = max(score, h[i, j - 1] + gap)
        h[i, j] = score


@kiln.kernel
def nw_border(h: i32[:, :], n: i32, gap: i32):
    t = kiln.global_id(0)
    if t <= n:
        h[t, 0] = t * gap
        h[0, t] = t * gap


@kiln.kernel
def axpy(x: f32[:], y: f32[:], k: f32, n: i32):
    i = kiln.global_id(0)
    if i < n:
        y[i] = y[i] + k * x[i]


@kiln.kernel
def add_int(x: i32[:], k: i32, n: i32):
    i = kiln.global_id(0)
    if i < n:
        x[i] = x[i] + k


def nw_numpy(a: np.ndarray, b: np.ndarray, gap: int) -> np.ndarray:
    n = len(a)
    h = np.zeros((n + 1, n + 1), np.int32)
    h[:, 0] = h[0, :] = np.arange(n + 1) * gap
    for i in range(1, n + 1):
        for j in range(1, n + 1):
            diag = h[i - 1, j - 1] + (1 if a[i - 1] == b[j - 1] else -1)
            h[i, j] = max(diag, h[i - 1, j] + gap, h[i, j - 1] + gap)
    return h


def nw_launches(h: kiln.DeviceArray, a: kiln.DeviceArray, b: kiln.DeviceArray, n: int,
                gap: int | kiln.Param, block: int = 8) -> None:
    """The whole wavefront: the border, then one launch per anti-diagonal."""
    nw_border[(n + block) // block, block](h, n, gap)
    for d in range(2, 2 * n + 1):
        lo, hi = max(1, d - n), min(n, d - 1)
        count = hi - lo + 1
        nw_diagonal[(count + block - 1) // block, block](h, a, b, d, lo, count, gap)


@pytest.fixture(params=BACKENDS)
def dev(request: pytest.FixtureRequest) -> kiln.Device:
    return kiln.device(request.param)


@pytest.fixture(autouse=True)
def no_capture_left() -> None:
    """Every test leaves no capture recording, in this thread or any other."""
    yield
    assert RECORDING.recorder is None and CAPTURES[0] == 0


def test_a_replayed_wavefront_equals_eager_launches_and_numpy(dev: kiln.Device) -> None:
    n = 12
    rng = np.random.default_rng(1)
    a_host, b_host = rng.integers(0, 4, n).astype(np.int32), rng.integers(0, 4, n).astype(np.int32)
    a, b = kiln.to_device(a_host, dev), kiln.to_device(b_host, dev)
    eager = kiln.zeros((n + 1, n + 1), i32, dev)
    nw_launches(eager, a, b, n, -1)
    h = kiln.zeros((n + 1, n + 1), i32, dev)
    with kiln.capture(dev) as g:
        a.copy_from_host(a_host)  # recorded: each replay reads a_host as it is then
        nw_launches(h, a, b, n, kiln.Param("gap", -1))
    assert len(g.launches) == 2 * n and g.params == {"gap": -1}
    assert not h.numpy().any()  # recorded, not run
    g.replay()
    expected = nw_numpy(a_host, b_host, -1)
    np.testing.assert_array_equal(h.numpy(), expected)
    np.testing.assert_array_equal(eager.numpy(), expected)
    a_host[:] = rng.integers(0, 4, n)  # new input, same arrays: replay with a new gap
    g.replay(gap=-2)
    np.testing.assert_array_equal(h.numpy(), nw_numpy(a_host, b_host, -2))
    assert g.params == {"gap": -2}
    g.replay()  # the Param keeps its value
    np.testing.assert_array_equal(h.numpy(), nw_numpy(a_host, b_host, -2))


def test_update_changes_one_launch_by_name_grid_and_dim(dev: kiln.Device) -> None:
    n = 40
    x = kiln.to_device(np.arange(n, dtype=np.float32), dev)
    y = kiln.zeros(n, f32, dev)
    with kiln.capture(dev) as g:
        axpy[1, 8](x, y, 1.0, n)  # 8 threads: the first 8 elements
        axpy[kiln.dim(n)](x, y, 10.0, n)
    g.replay()
    expected = np.arange(n, dtype=np.float32) * 10
    expected[:8] += np.arange(8)
    np.testing.assert_array_equal(y.numpy(), expected)
    g.update(g.launches[0], grid=5, k=2.0)  # now all 40, twice
    g.update(1, dim=20, k=-1.0)              # the first 20, by index
    assert g.launches[0].args[2] == 2.0 and g.launches[1].args[2] == -1.0
    g.replay()
    expected += 2 * np.arange(n)
    expected[:20] -= np.arange(20)
    np.testing.assert_array_equal(y.numpy(), expected)


def test_prepared_launches_and_several_streams(dev: kiln.Device) -> None:
    x = kiln.zeros(16, i32, dev)
    step = add_int.prepare(2, 8, x, 3, 16, device=dev)
    stream = kiln.Stream(dev)
    with kiln.capture(dev) as g:
        step()
        add_int[2, 8](x, 1, 16)
    g.replay()
    dev.synchronize()  # nothing orders two streams
    g.replay(stream=stream)  # another stream of the device
    stream.synchronize()
    np.testing.assert_array_equal(x.numpy(), 8)
    ones = np.ones(16, np.int32)
    with kiln.capture(stream) as g2:
        x.copy_from_host(ones)  # without stream=: the capture's stream, as launches
        add_int[2, 8, stream](x, 5, 16)
        add_int[2, 8](x, 5, 16)
    g2.replay()
    stream.synchronize()
    np.testing.assert_array_equal(x.numpy(), 11)


TABLE = np.array([1, 2, 3, 4], np.int32)


@kiln.kernel
def from_table(x: i32[:], k: i32):
    i = kiln.global_id(0)
    x[i] = x[i] + TABLE[i] * k


def test_a_changed_constant_table_is_never_replayed_stale(dev: kiln.Device) -> None:
    x = kiln.zeros(4, i32, dev)
    with kiln.capture(dev) as g:
        from_table[1, 4](x, kiln.Param("k", 1))
        add_int[1, 4](x, 100, 4)
    g.replay()
    np.testing.assert_array_equal(x.numpy(), [101, 102, 103, 104])
    TABLE[:] = [10, 20, 30, 40]  # as an eager launch would, the replay builds it again
    try:
        g.update(0, block=4)  # of the kernel as built again
        g.replay(k=2)
        np.testing.assert_array_equal(x.numpy(), [221, 242, 263, 284])
        g.replay(k=1)
        np.testing.assert_array_equal(x.numpy(), [331, 362, 393, 424])
    finally:
        TABLE[:] = [1, 2, 3, 4]


@kiln.struct
class Pair:
    a: i32
    b: i32


@kiln.kernel
def put(x: i32[:], p: Pair, k: i32):
    x[kiln.global_id(0)] = p.a * 10 + p.b + k


def test_params_and_updates_of_launches_with_records(dev: kiln.Device) -> None:
    x = kiln.zeros(4, i32, dev)
    with kiln.capture(dev) as g:
        put[1, 4](x, Pair(1, 2), kiln.Param("k", 100))
    g.replay(k=200)  # the record was split into scalars: the launch is bound again
    np.testing.assert_array_equal(x.numpy(), 212)
    g.update(0, p=Pair(3, 4))
    g.replay()
    np.testing.assert_array_equal(x.numpy(), 234)
    with pytest.raises(kiln.CaptureError, match="expected an integer"):
        g.replay(k=0.5)


def test_the_graph_keeps_its_arrays_alive(dev: kiln.Device) -> None:
    def make() -> tuple[kiln.Graph, weakref.ref[kiln.DeviceArray], kiln.DeviceArray]:
        tmp = kiln.zeros(8, i32, dev)
        out = kiln.zeros(8, i32, dev)
        with kiln.capture(dev) as g:
            add_int[1, 8](tmp, 2, 8)
            add_int[1, 8](out, 1, 8)
        return g, weakref.ref(tmp), out

    g, tmp, out = make()
    gc.collect()
    assert tmp() is not None  # held by the graph: replaying it is safe
    g.replay()
    np.testing.assert_array_equal(tmp().numpy(), 2)
    g.close()
    gc.collect()
    assert tmp() is None
    with pytest.raises(kiln.CaptureError, match="closed"):
        g.replay()
    np.testing.assert_array_equal(out.numpy(), 1)


@pytest.mark.parametrize("doing", ["stream", "device", "numpy", "event", "to_device", "zeros",
                                   "copy"])
def test_waiting_or_reading_back_inside_is_an_error_that_abandons_it(
        interp: kiln.Device, doing: str) -> None:
    x = kiln.zeros(4, i32, interp)
    actions = {
        "stream": lambda: interp.default_stream.synchronize(),
        "device": interp.synchronize,
        "numpy": x.numpy,
        "event": lambda: kiln.Event(interp).record(),
        "to_device": lambda: kiln.to_device(np.zeros(4), interp),
        "zeros": lambda: kiln.zeros(4, i32, interp),
        "copy": x.copy,
    }
    with pytest.raises(kiln.CaptureError, match="inside kiln.capture") as info, \
            kiln.capture(interp) as g:
        add_int[1, 4](x, 1, 4)
        actions[doing]()
    assert isinstance(info.value, kiln.LaunchError)
    with pytest.raises(kiln.CaptureError, match="cannot replay"):
        g.replay()
    add_int[1, 4](x, 1, 4)  # eager again: runs at once
    np.testing.assert_array_equal(x.numpy(), 1)


def test_a_swallowed_error_still_abandons_the_capture(interp: kiln.Device) -> None:
    x = kiln.zeros(4, i32, interp)
    with pytest.raises(kiln.CaptureError, match="abandoned: reading a device array back"), \
            kiln.capture(interp) as g:
        add_int[1, 4](x, 1, 4)
        with contextlib.suppress(kiln.CaptureError):
            x.numpy()
        with pytest.raises(kiln.CaptureError, match="abandoned"):
            add_int[1, 4](x, 1, 4)
    with pytest.raises(kiln.CaptureError):
        g.replay()


def test_other_streams_and_devices_inside_are_errors(interp: kiln.Device,
                                                     other_device: kiln.Device) -> None:
    x = kiln.zeros(4, i32, interp)
    elsewhere = kiln.zeros(4, i32, other_device)
    other = kiln.Stream(interp)
    with pytest.raises(kiln.CaptureError, match="on <kiln.Stream"), kiln.capture(interp):
        add_int[1, 4, other](x, 1, 4)
    with pytest.raises(kiln.CaptureError, match=f"on {other_device.name}"), \
            kiln.capture(interp):
        kiln.launch(add_int, 1, 4, (elsewhere, 1, 4), device=other_device)
    with pytest.raises(kiln.DeviceMismatchError), kiln.capture(interp):
        add_int[1, 4](elsewhere, 1, 4)  # its array's device: not the capture's
    with pytest.raises(kiln.CaptureError, match="copy_from_host on"), kiln.capture(interp):
        x.copy_from_host(np.ones(4, np.int32), stream=other)
    with pytest.raises(kiln.CaptureError, match="NumPy array argument"), kiln.capture(interp):
        add_int[1, 4](np.zeros(4, np.int32), 1, 4)
    np.testing.assert_array_equal(x.numpy(), 0)
    np.testing.assert_array_equal(elsewhere.numpy(), 0)


def test_a_converted_host_copy_is_refused(interp: kiln.Device) -> None:
    x = kiln.zeros(4, i32, interp)
    with pytest.raises(kiln.CaptureError, match="C-contiguous int32"), kiln.capture(interp):
        x.copy_from_host(np.ones(4, np.float64))


def test_empty_nested_and_exceptions(interp: kiln.Device) -> None:
    with pytest.raises(kiln.CaptureError, match="recorded nothing"), kiln.capture(interp):
        pass
    x = kiln.zeros(4, i32, interp)
    with pytest.raises(kiln.CaptureError, match="do not nest"), kiln.capture(interp) as outer:
        add_int[1, 4](x, 1, 4)
        with kiln.capture(interp):
            pass
    with pytest.raises(kiln.CaptureError, match="cannot replay"):
        outer.replay()
    with pytest.raises(ZeroDivisionError), kiln.capture(interp) as g:
        add_int[1, 4](x, 1, 4)
        1 / 0  # noqa: B018
    with pytest.raises(kiln.CaptureError, match="ZeroDivisionError raised inside"):
        g.replay()
    with pytest.raises(kiln.CaptureError, match="records once"), g:
        pass
    with pytest.raises(kiln.CaptureError, match="never captured"):
        kiln.capture(interp).replay()
    with pytest.raises(TypeError, match="kiln.capture takes"):
        kiln.capture(3)  # type: ignore[arg-type]
    np.testing.assert_array_equal(x.numpy(), 0)


def test_a_replay_inside_a_capture_and_its_own_capture_are_errors(interp: kiln.Device) -> None:
    x = kiln.zeros(4, i32, interp)
    with kiln.capture(interp) as g:
        add_int[1, 4](x, 1, 4)
        with pytest.raises(kiln.CaptureError, match="before its capture ended"):
            g.replay()
    with pytest.raises(kiln.CaptureError, match="replaying a graph inside"), \
            kiln.capture(interp):
        g.replay()


def test_bad_updates_are_errors_that_change_nothing(interp: kiln.Device) -> None:
    x, y = kiln.zeros(4, i32, interp), kiln.zeros(4, f32, interp)
    with kiln.capture(interp) as g:
        add_int[1, 4](x, kiln.Param("k", 1), 4)
        axpy[1, 4](y, y, 1.0, 4)
        axpy[kiln.dim(4)](y, y, 1.0, 4)
    launch = g.launches[1]
    cases = [
        (lambda: g.update(launch, k="a"), "expected f32"),
        (lambda: g.update(launch, n=2.5), "expected an integer"),
        (lambda: g.update(launch, k=x), "expected a scalar"),
        (lambda: g.update(launch, x=x), "expected f32.*int32 array"),
        (lambda: g.update(launch, z=1), "no parameter 'z'"),
        (lambda: g.update(launch, grid=1 << 40), "grid dimension x"),
        (lambda: g.update(launch, block=(4096,)), "block"),
        (lambda: g.update(launch, dim=8), "update grid= and block=, not dim="),
        (lambda: g.update(2, grid=3), "update dim=, not grid="),
        (lambda: g.update(2, dim=0), "positive size"),
        (lambda: g.update(0, k=3), "kiln.Param 'k'"),
        (lambda: g.update(7), "index"),
        (lambda: g.update(True), "index"),
        (lambda: g.replay(q=1), "no kiln.Param named 'q'"),
        (lambda: g.replay(k=2.5), "expected an integer"),
        (lambda: g.replay(k=1 << 40), "does not fit"),
    ]
    for action, message in cases:
        with pytest.raises(kiln.CaptureError, match=message):
            action()
    assert g.params == {"k": 1} and launch.args[2] == 1.0 and launch.grid == (1, 1, 1)
    g.replay()
    np.testing.assert_array_equal(x.numpy(), 1)
    np.testing.assert_array_equal(y.numpy(), 0)  # y + 1*y, twice: still 0


def test_params_are_checked_when_recorded(interp: kiln.Device) -> None:
    @kiln.kernel
    def fill(x: i32[:], v: kiln.constexpr):
        x[kiln.global_id(0)] = v

    x = kiln.zeros(4, i32, interp)
    with pytest.raises(kiln.CaptureError, match="constexpr"), kiln.capture(interp):
        fill[1, 4](x, kiln.Param("v", 3))
    with kiln.capture(interp) as g:  # a launch refused as it would be eagerly records nothing
        with pytest.raises(kiln.LaunchError, match="expected an integer"):
            add_int[1, 4](x, kiln.Param("k", 1), 2.5)
        add_int[1, 4](x, kiln.Param("k", 2), kiln.Param("n", 4))
        with pytest.raises(kiln.CaptureError, match="one name, one value"):
            add_int[1, 4](x, kiln.Param("m", 1), kiln.Param("m", 4))
    assert g.params == {"k": 2, "n": 4} and len(g.launches) == 1
    with pytest.raises(kiln.CaptureError, match="identifier"):
        kiln.Param("not a name", 1)
    with pytest.raises(kiln.CaptureError, match="stands for a number"):
        kiln.Param("k", x)  # type: ignore[arg-type]
    with pytest.raises(kiln.LaunchError, match="Param"):
        add_int[1, 4](x, kiln.Param("k", 1), 4)  # outside a capture: not a number


def test_replays_from_many_threads_are_serialised(dev: kiln.Device) -> None:
    x = kiln.zeros(64, i32, dev)
    with kiln.capture(dev) as g:
        for _ in range(3):
            add_int[8, 8](x, 1, 64)
    errors: list[BaseException] = []

    def replay() -> None:
        try:
            for _ in range(5):
                g.replay()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=replay) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    np.testing.assert_array_equal(x.numpy(), 4 * 5 * 3)


def test_other_threads_launch_at_once_while_one_records(interp: kiln.Device) -> None:
    x, y = kiln.zeros(4, i32, interp), kiln.zeros(4, i32, interp)
    seen: list[int] = []
    with kiln.capture(interp) as g:
        add_int[1, 4](x, 1, 4)
        worker = threading.Thread(target=lambda: (add_int[1, 4](y, 7, 4),
                                                  seen.append(int(y.numpy()[0]))))
        worker.start()
        worker.join()
        with pytest.raises(kiln.CaptureError, match="before its capture ended"):
            threading_replay(g)
    assert seen == [7] and len(g.launches) == 1


def threading_replay(g: kiln.Graph) -> None:
    """Replay `g` from another thread, raising what it raised."""
    failure: list[BaseException] = []

    def replay() -> None:
        try:
            g.replay()
        except BaseException as exc:
            failure.append(exc)

    t = threading.Thread(target=replay)
    t.start()
    t.join()
    if failure:
        raise failure[0]


def test_run_time_checks_of_replayed_launches_are_raised(dev: kiln.Device) -> None:
    @kiln.kernel(debug=True)
    def poke(x: i32[:], at: i32):
        x[at] = 1

    x = kiln.zeros(4, i32, dev)
    with kiln.capture(dev) as g:
        poke[1, 1](x, kiln.Param("at", 2))
    g.replay()
    np.testing.assert_array_equal(x.numpy(), [0, 0, 1, 0])
    with pytest.raises(kiln.IndexOutOfBoundsError):
        g.replay(at=9)
        dev.synchronize()
    if dev.backend.name != "interp":  # the interp checks indices itself, with no status
        with pytest.raises(kiln.CaptureError, match="run-time checks"):
            g.replay(stream=kiln.Stream(dev))


def test_kiln_graph_is_kiln_capture(interp: kiln.Device) -> None:
    x = kiln.zeros(4, i32, interp)
    with kiln.graph(interp) as g:
        add_int[1, 4](x, 2, 4)
    g.launch()
    np.testing.assert_array_equal(x.numpy(), 2)


@requires_backend("cpu", "the cpu backend is unavailable")
def test_sharded_launches_are_refused_and_each_part_captures_in_its_thread() -> None:
    parts = kiln.device("cpu").split(2)
    xs = kiln.shard(np.zeros(8, np.float32), parts)

    @kiln.kernel
    def inc(x: f32[:], n: i32):
        i = kiln.global_id(0)
        if i < n:
            x[i] = x[i] + 1

    with pytest.raises(kiln.CaptureError, match="launch_sharded"), kiln.capture(parts[0]):
        kiln.launch_sharded(inc, (xs, kiln.shard_rows))
    graphs: dict[int, kiln.Graph] = {}

    def record(k: int) -> None:
        shard = xs.shards[k]
        with kiln.capture(shard.device) as g:
            kiln.launch(inc, dim=shard.rows, args=(shard.array, shard.rows))
        graphs[k] = g

    threads = [threading.Thread(target=record, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for _ in range(3):
        for g in graphs.values():
            g.replay()
    np.testing.assert_array_equal(xs.gather(), 3)


def test_autotuned_kernels_are_recorded_once_tuned(interp: kiln.Device, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))  # no choice stored on disk yet

    @kiln.autotune(configs=[kiln.Config({"B": b}, block=b) for b in (4, 8)], key=["n"])
    @kiln.kernel
    def inc(x: i32[:], n: i32, B: kiln.constexpr):
        i = kiln.global_id(0)
        if i < n:
            x[i] = x[i] + 1

    x = kiln.zeros(16, i32, interp)
    with pytest.raises(kiln.CaptureError, match="autotuning inc for n=16"), \
            kiln.capture(interp):
        kiln.launch(inc, 4, None, (x, 16))  # tuning times the candidates: it waits
    kiln.launch(inc, 4, None, (x, 16))  # tuned now
    with kiln.capture(interp) as g:
        kiln.launch(inc, 4, None, (x, 16))
    g.replay()
    np.testing.assert_array_equal(x.numpy(), 2)
