"""A stateful property-based test of the host API: random sequences of allocations, views
of views, copies in every direction, streams and events, launches, sharded launches and
launches from worker threads, on every available backend, each step checked against a
NumPy model of every array's contents.

Every refusal must be kiln's (`kiln_refusal`) and its message must name the problem; a
raw exception, a value that differs from the model or a call that does not return within
`TIMEOUT` seconds is a failure. The suite runs a small derandomized budget;
`scripts/host_fuzz.py` runs the same machine for as long as you like (docs/fuzzing.md).
"""

from __future__ import annotations

import dis
import gc
import os
import pickle
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pytest

import kiln
from kiln import f32, i32
from kiln.runtime.array import copy_array
from tests.helpers import run_python

hypothesis = pytest.importorskip("hypothesis", reason="hypothesis is not installed (test extra)")
from hypothesis import HealthCheck, Phase, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.stateful import (  # noqa: E402
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

T = TypeVar("T")

CHECK_KNOWN_DEFECTS = os.environ.get("KILN_SKIP_KNOWN_DEFECTS") != "1"
"""Check the defects this machine was written to catch (see `KNOWN_DEFECTS`, all fixed):
always, unless KILN_SKIP_KNOWN_DEFECTS=1 (or `scripts/host_fuzz.py --skip-known`) says to
look past them, to hunt for new defects while a regression of one of them is being fixed."""

KNOWN_DEFECTS = {
    "out-shape": "copy_to_host/gather(out=) with an out of the wrong size or shape",
    "out-dtype": "copy_to_host(out=) of the wrong dtype",
    "foreign-stream": "a stream of another device given to a copy or a launch",
    "stale-shard-error": "gather after a failing sharded launch",
    "read-only-argument": "a kernel writing a read-only NumPy argument",
    "zero-d": "to_device of a 0-d array",
    "negative-size": "kiln.empty/zeros of a negative size",
    "unrecorded-event": "Event.synchronize of an event never recorded",
    "dim-overrun": "dim= launches running threads past n",
    "debug-view-bounds": "debug=True checking views against their base array",
}

FOUND_DEFECTS = {
    "serial-debug": "debug=True kernels on the serial backend do not check bounds",
    "debug-failed-write": "a failed debug=True store going on with index 0, past an empty view",
}
"""Defects this machine found (docs/fuzzing.md), fixed since; checked, and skipped with the
known ones."""
DEFECTS = {**KNOWN_DEFECTS, **FOUND_DEFECTS}

TIMEOUT = 60.0
"""Seconds any one call may take before the machine calls it a hang (compiles included)."""

KILN_SOURCE = Path(kiln.__file__).resolve().parent
BACKENDS = [e.name for e in kiln.backends() if e.available
            and e.name in os.environ.get("KILN_HOST_FUZZ_BACKENDS", e.name).split(",")]
"""Every available backend (KILN_HOST_FUZZ_BACKENDS, comma-separated, picks some)."""
COUNTS: Counter[str] = Counter()
"""How often each rule ran (and each kind of outcome), for scripts/host_fuzz.py."""


def known(defect: str) -> bool:
    """Whether to check `defect` (one of `DEFECTS`) in this run."""
    assert defect in DEFECTS
    return CHECK_KNOWN_DEFECTS


def all_devices() -> list[kiln.Device]:
    """One device of each available backend, and the CPU split in two where it can be."""
    found = [kiln.device(name) for name in BACKENDS]
    cpu = next((d for d in found if d.backend.name == "cpu"), None)
    if cpu is not None and cpu.capabilities.compute_units > 1:
        found += cpu.split(2)
    return found


DEVICES = all_devices()


# -- kernels -----------------------------------------------------------------------------

@kiln.kernel
def scale(x: f32[:], k: f32, n: i32):
    i = kiln.global_id(0)
    if i < n:
        x[i] = x[i] * k


@kiln.kernel
def axpy(a: f32, x: f32[:], y: f32[:], n: i32):
    i = kiln.global_id(0)
    if i < n:
        y[i] = a * x[i] + y[i]


@kiln.kernel
def add(x: i32[:], y: i32[:], out: i32[:], n: i32):
    i = kiln.global_id(0)
    if i < n:
        out[i] = x[i] + y[i]


@kiln.kernel
def scale2(m: f32[:, :], k: f32, h: i32, w: i32):
    i = kiln.global_id(0)
    j = kiln.global_id(1)
    if i < h and j < w:
        m[i, j] = m[i, j] * k


@kiln.kernel
def count_threads(counter: i32[:]):
    kiln.atomic_add(counter, 0, 1)  # no guard: the launch must run exactly dim threads


@kiln.kernel(debug=True)
def poke(x: f32[:], at: i32, value: f32):
    if kiln.global_id(0) == 0:
        x[at] = value


@kiln.kernel(debug=True)
def poke_segment(x: f32[:], lo: i32, hi: i32, at: i32, value: f32):
    if kiln.global_id(0) == 0:
        segment = x[lo:hi]  # an in-kernel view: checked against its own length
        segment[at] = value


@kiln.kernel
def shard_scale(x: f32[:], k: f32, rows: i32, halo: i32):
    i = kiln.global_id(0)
    if i < rows:
        x[i + halo] = x[i + halo] * k


@kiln.kernel
def sum_into(x: f32[:], total: f32[:], rows: i32, halo: i32):
    i = kiln.global_id(0)
    if i < rows:
        kiln.atomic_add(total, 0, x[i + halo])


FACTORS = (2.0, 0.5, -1.0, -2.0, 1.0)
"""Powers of two: products are exact, so every backend (fused or not) matches NumPy."""
DTYPES = (np.float32, np.float64, np.int32, np.int64, np.uint8, np.int16, np.bool_,
          np.float16)


# -- checking helpers --------------------------------------------------------------------

def within(call: Callable[[], T], what: str, seconds: float = TIMEOUT) -> T:
    """`call()`, run in a worker thread: a failure when it does not return in `seconds`
    (the thread is left blocked; it is a daemon)."""
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # handed to the caller below
            box["error"] = exc

    worker = threading.Thread(target=work, name=f"kiln-within-{what}", daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        raise AssertionError(f"hang: {what} did not return within {seconds:.0f} s")
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]


KILN_ERRORS = (kiln.KernelError, kiln.LaunchError, kiln.DeviceNotFoundError)


def kiln_refusal(exc: BaseException) -> bool:
    """Whether `exc` is kiln's own refusal: one of kiln's error classes, or an exception a
    `raise` statement in kiln's source made (the documented ValueError, TypeError,
    IndexError, RuntimeError of the host API). An exception from NumPy, a driver or a
    Python built-in that kiln merely let through is raw, also as a `ShardError`'s cause."""
    if isinstance(exc, kiln.ShardError) and exc.__cause__ is not None:
        return kiln_refusal(exc.__cause__)
    if isinstance(exc, KILN_ERRORS):
        return True
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return False
    code = tb.tb_frame.f_code  # its bytecode, not its source: files may change meanwhile
    inside = Path(code.co_filename).resolve().is_relative_to(KILN_SOURCE)
    return inside and dis.opname[code.co_code[tb.tb_lasti]] == "RAISE_VARARGS"


def assert_refused(call: Callable[[], Any], pattern: str, what: str,
                   defect: str | None = None) -> BaseException:
    """`call()` must fail with kiln's refusal whose message matches `pattern` (the problem
    named), within the timeout."""
    tag = f"[known defect {defect}: {DEFECTS[defect]}] " if defect else ""
    try:
        result = within(call, what)
    except AssertionError:
        raise
    except Exception as exc:  # the refusal we want, checked below
        if not kiln_refusal(exc):
            raise AssertionError(f"{tag}{what}: raw {type(exc).__name__} instead of a kiln "
                                 f"error: {exc}") from exc
        if not re.search(pattern, str(exc), re.IGNORECASE | re.DOTALL):
            raise AssertionError(f"{tag}{what}: the message does not say /{pattern}/: "
                                 f"{type(exc).__name__}: {exc}") from exc
        COUNTS["refusals"] += 1
        return exc
    raise AssertionError(f"{tag}{what}: accepted (returned {result!r:.200}) instead of "
                         f"refused with /{pattern}/")


def assert_same(actual: np.ndarray, model: np.ndarray, known_mask: np.ndarray,
                what: str) -> None:
    """Shape, dtype and every defined element equal the model's (NaNs equal NaNs)."""
    assert isinstance(actual, np.ndarray), f"{what}: got {type(actual).__name__}"
    assert actual.shape == model.shape, f"{what}: shape {actual.shape}, model {model.shape}"
    assert actual.dtype == model.dtype, f"{what}: dtype {actual.dtype}, model {model.dtype}"
    np.testing.assert_array_equal(np.where(known_mask, actual, 0), np.where(known_mask, model, 0),
                                  err_msg=what)


def random_values(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """Small integers (exact in every dtype, products by `FACTORS` too)."""
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    low = 0 if dt.kind == "u" else -8
    return rng.integers(low, 9, shape).astype(dt)


# -- the model -----------------------------------------------------------------------------

@dataclass(eq=False)
class Root:
    """A device array that owns its memory (or shares a NumPy array's), with the model of
    its contents and the streams that may still be working on it."""

    array: kiln.DeviceArray
    model: np.ndarray
    defined: np.ndarray  # which elements have known contents (kiln.empty's do not)
    host: np.ndarray | None = None  # the NumPy array it shares (as_device_array)
    streams: set[kiln.Stream] = field(default_factory=set)

    @property
    def device(self) -> kiln.Device:
        return self.array.device


@dataclass(eq=False)
class Handle:
    """An array or a view of one: its model is the same view of the root's model."""

    array: kiln.DeviceArray
    root: Root
    model: np.ndarray
    defined: np.ndarray
    label: str

    @property
    def contiguous(self) -> bool:
        return not isinstance(self.array, kiln.DeviceArrayView)


def one_of(data: st.DataObject, items: Sequence[T], label: str) -> T:
    return items[data.draw(st.integers(0, len(items) - 1), label=label)]


def index_strategy(n: int) -> st.SearchStrategy[Any]:
    """A valid-looking index for an axis of `n` elements (NumPy decides if it is in range)."""
    bound = st.one_of(st.none(), st.integers(-n - 2, n + 2))
    return st.one_of(st.integers(-n - 1, n),
                     st.builds(slice, bound, bound, st.sampled_from([None, 1, 2, 3])))


BAD_KEYS: list[tuple[Any, type[BaseException], str]] = [
    (slice(None, None, 0), TypeError, "positive slice steps"),
    (slice(None, None, -1), TypeError, "positive slice steps"),
    (1.5, TypeError, "basic indices"),
    (None, TypeError, "basic indices"),
    (True, TypeError, "basic indices"),
    ("x", TypeError, "basic indices"),
    (np.array([0]), TypeError, "basic indices"),
    ((0, 0, 0, 0), IndexError, "too many indices"),
]


class HostMachine(RuleBasedStateMachine):
    """The host API against a NumPy model (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.roots: list[Root] = []
        self.handles: list[Handle] = []
        self.streams: dict[str, list[kiln.Stream]] = {}
        self.rng = np.random.default_rng(0)
        self.seen: dict[kiln.Stream, int] = {}

    # -- helpers ----------------------------------------------------------------------------

    def in_order(self, streams: set[kiln.Stream]) -> list[kiln.Stream]:
        """`streams` in the order the machine first saw them (a set's order would make the
        draws, and so hypothesis's replays, depend on addresses)."""
        for stream in streams:
            self.seen.setdefault(stream, len(self.seen))
        return sorted(streams, key=self.seen.__getitem__)

    def stream_of(self, data: st.DataObject, device: kiln.Device) -> kiln.Stream:
        """The default stream or one of up to two more streams of `device`."""
        mine = self.streams.setdefault(device.name, [device.default_stream])
        pick = data.draw(st.integers(0, 2), label="stream")
        if pick >= len(mine):
            mine.append(kiln.Stream(device))
            return mine[-1]
        return mine[pick]

    def wait_for(self, stream: kiln.Stream, data: st.DataObject | None = None) -> None:
        """Wait for `stream` (by the stream itself, an event or its device), then forget it."""
        how = data.draw(st.sampled_from(["stream", "event", "device"]), label="wait by") \
            if data is not None else "stream"
        if how == "event":
            event = kiln.Event(stream.device).record(stream)
            within(event.synchronize, f"event on {stream.device.name}")
        elif how == "device":
            within(stream.device.synchronize, f"{stream.device.name}.synchronize()")
            for root in self.roots:
                root.streams = {s for s in root.streams if s.device is not stream.device}
            return
        else:
            within(stream.synchronize, f"stream of {stream.device.name}")
        self.forget(stream)

    def forget(self, stream: kiln.Stream) -> None:
        """`stream` has finished its work: no array waits for it any more."""
        for root in self.roots:
            root.streams.discard(stream)

    def touch(self, roots: Sequence[Root], stream: kiln.Stream, data: st.DataObject,
              ordered: Sequence[kiln.Stream] = ()) -> None:
        """Before queuing work on `stream` that uses `roots`: wait for every other stream
        still working on them (the user's duty: nothing orders two streams), except those
        kiln orders the work after (`ordered`); afterwards `stream` works on them."""
        for root in roots:
            for other in self.in_order(root.streams):
                if other is not stream and other not in ordered:
                    self.wait_for(other, data)
        for root in roots:
            root.streams = {stream} | (root.streams & set(ordered))

    def add_root(self, array: kiln.DeviceArray, model: np.ndarray, defined: bool,
                 label: str, host: np.ndarray | None = None,
                 stream: kiln.Stream | None = None) -> Handle:
        root = Root(array, model, np.full(model.shape, defined), host,
                    {stream} if stream is not None else set())
        self.roots.append(root)
        handle = Handle(array, root, root.model, root.defined, label)
        self.handles.append(handle)
        return handle

    def handle(self, data: st.DataObject, want: Callable[[Handle], bool] = lambda h: True
               ) -> Handle | None:
        found = [h for h in self.handles if want(h)]
        return one_of(data, found, "array") if found else None

    def read(self, handle: Handle, data: st.DataObject) -> None:
        """Copy `handle` to the host in one of the ways kiln offers, and compare."""
        array, root = handle.array, handle.root
        way = data.draw(st.sampled_from(["numpy", "copy_to_host", "out", "strided out",
                                         "stream"]), label="read by")
        stream = root.device.default_stream
        if way == "stream":
            stream = self.stream_of(data, root.device)
        self.touch([root], stream, data)
        what = f"{handle.label}.copy_to_host ({way})"
        if way == "numpy":
            got = within(array.numpy, what)
        elif way == "copy_to_host":
            got = within(array.copy_to_host, what)
        elif way == "out":
            out = np.full(array.shape, 99, array.dtype)
            got = within(lambda: array.copy_to_host(out), what)
            assert got is out, f"{what}: did not return out"
        elif way == "strided out":  # out= must be C-contiguous (docs/streams-events.md)
            wide = np.full((*array.shape, 2), 99, array.dtype)
            out = wide[..., 0]
            if out.size > 1:
                before = wide.copy()
                assert_refused(lambda: array.copy_to_host(out), "contiguous", what)
                assert np.array_equal(wide, before), f"{what}: a refused copy wrote into out"
            got = within(array.copy_to_host, what)
        else:
            got = within(lambda: array.copy_to_host(stream=stream), what)
        self.forget(stream)  # copy_to_host waited for it
        assert_same(got, handle.model, handle.defined, f"{what} on {root.device.name}")
        COUNTS["reads"] += 1

    # -- allocation ---------------------------------------------------------------------------

    @initialize(data=st.data())
    def first_array(self, data: st.DataObject) -> None:
        self.rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
        self.allocate(data)

    @initialize(data=st.data(), n=st.integers(1, 40))
    def kernels_arrays(self, data: st.DataObject, n: int) -> None:
        """An f32 and an i32 array of one size on one device, for the launch rules."""
        dev = one_of(data, DEVICES, "device")
        for dtype in (np.float32, np.int32):
            values = random_values(self.rng, (n,), dtype)
            self.add_root(kiln.to_device(values, dev), values.copy(), True,
                          f"to_device({n},):{np.dtype(dtype).name}@{dev.name}")

    @rule(data=st.data())
    def allocate(self, data: st.DataObject) -> None:
        dev = one_of(data, DEVICES, "device")
        dtype = data.draw(st.one_of(st.just(np.float32), st.just(np.int32),
                                    st.sampled_from(DTYPES)), label="dtype")  # kernels' own
        shape = data.draw(st.one_of(
            st.tuples(st.integers(0, 40)),
            st.tuples(st.integers(0, 6), st.integers(0, 6)),
            st.tuples(st.integers(1, 3), st.integers(0, 4), st.integers(1, 4))), label="shape")
        how = data.draw(st.sampled_from(["to_device", "zeros", "full", "empty",
                                         "to_device on a stream", "as_device_array"]),
                        label="how")
        values = random_values(self.rng, shape, dtype)
        label = f"{how}{shape}:{np.dtype(dtype).name}@{dev.name}"
        COUNTS[f"allocate {how}"] += 1
        if how == "empty":
            self.add_root(kiln.empty(shape, dtype, dev), np.zeros(shape, dtype), False, label)
        elif how == "zeros":
            self.add_root(kiln.zeros(shape, dtype, dev), np.zeros(shape, dtype), True, label,
                          stream=dev.default_stream)
        elif how == "full":
            value = values.reshape(-1)[0] if values.size else dtype(3)
            self.add_root(kiln.full(shape, value, dtype, dev), np.full(shape, value, dtype),
                          True, label, stream=dev.default_stream)
        elif how == "to_device":
            source = values.copy()
            array = kiln.to_device(source, dev)
            source[...] = 0  # to_device copied: this must not reach the device
            self.add_root(array, values, True, label)
        elif how == "to_device on a stream":
            stream = self.stream_of(data, dev)
            self.add_root(kiln.to_device(values.copy(), dev, stream=stream), values.copy(),
                          True, label, stream=stream)
        elif dev.capabilities.unified_memory:
            host = values.copy()
            self.add_root(kiln.as_device_array(host, dev), values.copy(), True, label, host)
        else:
            assert_refused(lambda: kiln.as_device_array(values, dev), "memory is not the host",
                           f"as_device_array on {dev.name}")

    @rule(data=st.data(), size=st.sampled_from([-5, -1, 2**62, 2**63, 2**70]),
          how=st.sampled_from(["empty", "zeros", "2-d empty"]))
    def allocate_impossible(self, data: st.DataObject, size: int, how: str) -> None:
        """Negative and impossibly large sizes are refused, naming the size."""
        dev = one_of(data, DEVICES, "device")
        COUNTS["allocate impossible"] += 1
        defect = "negative-size" if size < 0 else None
        if defect and not known(defect):
            return
        calls = {"empty": lambda: kiln.empty(size, f32, dev),
                 "zeros": lambda: kiln.zeros(size, f32, dev),
                 "2-d empty": lambda: kiln.empty((3, size), f32, dev)}
        assert_refused(calls[how], re.escape(str(size)) + "|negative|too large|too big|memory",
                       f"kiln.{how}({size}) on {dev.name}", defect)

    @rule(data=st.data())
    def allocate_bad_dtype(self, data: st.DataObject) -> None:
        dev = one_of(data, DEVICES, "device")
        dtype = data.draw(st.sampled_from([object, np.complex64, "U3", np.datetime64]),
                          label="bad dtype")
        COUNTS["allocate bad dtype"] += 1
        assert_refused(lambda: kiln.empty(4, dtype, dev), "numbers and bools",
                       f"kiln.empty(4, {dtype!r})")
        assert_refused(lambda: kiln.to_device(np.zeros(4, dtype), dev), "numbers and bools",
                       f"kiln.to_device(<{np.dtype(dtype)} array>)")

    @rule(data=st.data())
    def to_device_zero_d(self, data: st.DataObject) -> None:
        """A 0-d array either goes to the device and back unchanged, or is refused."""
        if not known("zero-d"):
            return
        dev = one_of(data, DEVICES, "device")
        value = np.array(7, np.float32)
        COUNTS["to_device 0-d"] += 1
        try:
            array = within(lambda: kiln.to_device(value, dev), "to_device of a 0-d array")
        except AssertionError:
            raise
        except Exception as exc:  # must be a named refusal
            assert kiln_refusal(exc) and re.search("0-d|dimension|scalar", str(exc)), (
                f"[known defect zero-d] to_device(0-d) on {dev.name}: {type(exc).__name__}: "
                f"{exc}")
            return
        back = within(array.numpy, "0-d numpy()")
        assert back.shape == () and back == value, f"0-d round trip gave {back!r}"

    # -- views ------------------------------------------------------------------------------

    @precondition(lambda self: self.handles)
    @rule(data=st.data())
    def view(self, data: st.DataObject) -> None:
        """A view of an array or of a view: NumPy decides what the same key gives."""
        handle = self.handle(data)
        assert handle is not None
        keys = tuple(data.draw(index_strategy(n), label=f"index {axis}")
                     for axis, n in enumerate(handle.model.shape))
        keys = keys[:data.draw(st.integers(1, max(len(keys), 1)), label="indexed axes")]
        key: Any = keys[0] if len(keys) == 1 and data.draw(st.booleans(), label="bare") \
            else keys
        what = f"{handle.label}[{key!r}]"
        COUNTS["view"] += 1
        try:
            model, defined = handle.model[key], handle.defined[key]
        except IndexError:
            assert_refused(lambda: handle.array[key], r"shape|index", what)
            return
        if model.ndim == 0:
            assert_refused(lambda: handle.array[key], "one element", what)
            return
        view = handle.array[key]
        assert view.shape == model.shape, f"{what}: shape {view.shape}, NumPy {model.shape}"
        assert view.dtype == model.dtype
        assert view.base is handle.root.array, f"{what}: base is not the root array"
        if not model.flags.c_contiguous and model.size > 1:
            assert isinstance(view, kiln.DeviceArrayView), f"{what}: strided but not a view"
        self.handles.append(Handle(view, handle.root, model, defined, what))

    @precondition(lambda self: self.handles)
    @rule(data=st.data(), bad=st.sampled_from(BAD_KEYS))
    def view_bad_key(self, data: st.DataObject,
                     bad: tuple[Any, type[BaseException], str]) -> None:
        handle = self.handle(data)
        assert handle is not None
        key, error, message = bad
        COUNTS["view bad key"] += 1
        exc = assert_refused(lambda: handle.array[key], message, f"{handle.label}[{key!r}]")
        assert isinstance(exc, error), f"{handle.label}[{key!r}]: {type(exc).__name__}"

    # -- reads ------------------------------------------------------------------------------

    @precondition(lambda self: self.handles)
    @rule(data=st.data())
    def copy_to_host(self, data: st.DataObject) -> None:
        handle = self.handle(data)
        assert handle is not None
        self.read(handle, data)

    @precondition(lambda self: self.handles)
    @rule(data=st.data(), bad=st.sampled_from(["short", "long", "shape", "dtype"]))
    def copy_to_host_bad_out(self, data: st.DataObject, bad: str) -> None:
        """An `out` that cannot take the array is refused, and left alone."""
        handle = self.handle(data, lambda h: h.array.size > 1)
        if handle is None:
            return
        defect = "out-dtype" if bad == "dtype" else "out-shape"
        if not known(defect):
            return
        array = handle.array
        n = array.size
        out = {"short": np.zeros(n - 1, array.dtype),
               "long": np.zeros(n + 1, array.dtype),
               "shape": np.zeros((n,) if array.ndim > 1 else (1, n), array.dtype),
               "dtype": np.zeros(array.shape, np.float64 if array.dtype != np.float64
                                 else np.float32)}[bad]
        before = out.copy()
        self.touch([handle.root], handle.root.device.default_stream, data)
        COUNTS["copy_to_host bad out"] += 1
        assert_refused(lambda: array.copy_to_host(out), "out|shape|dtype",
                       f"{handle.label}.copy_to_host(<{bad} out {out.dtype}{out.shape}>)", defect)
        np.testing.assert_array_equal(out, before, err_msg="a refused copy wrote out")

    @precondition(lambda self: self.roots)
    @invariant()
    def shared_numpy_arrays_follow(self) -> None:
        """Cheap: a NumPy array shared with a device (as_device_array) whose streams are
        idle holds the model's contents."""
        for root in self.roots:
            if root.host is not None and not root.streams:
                assert_same(root.host, root.model, root.defined, "shared NumPy array")

    @precondition(lambda self: self.handles)
    @rule(data=st.data())
    def pickle_and_interop(self, data: st.DataObject) -> None:
        """A pickled array comes back with its contents; arrays outside CUDA memory refuse
        DLPack and the CUDA array interface, naming why."""
        handle = self.handle(data)
        assert handle is not None
        array, root = handle.array, handle.root
        self.touch([root], root.device.default_stream, data)
        COUNTS["pickle and interop"] += 1
        back = within(lambda: pickle.loads(pickle.dumps(array)), f"pickle {handle.label}")
        assert isinstance(back, kiln.DeviceArray) and back.shape == array.shape
        assert_same(within(back.numpy, "unpickled numpy()"), handle.model, handle.defined,
                    f"unpickled {handle.label}")
        if root.device.backend.name == "cuda":
            return
        assert_refused(array.__dlpack__, "DLPack", f"{handle.label}.__dlpack__()")
        assert_refused(lambda: array.__cuda_array_interface__, "not in CUDA memory",
                       f"{handle.label}.__cuda_array_interface__")

    # -- writes from the host -----------------------------------------------------------

    @precondition(lambda self: self.handles)
    @rule(data=st.data())
    def copy_from_host(self, data: st.DataObject) -> None:
        handle = self.handle(data)
        assert handle is not None
        array, root = handle.array, handle.root
        values = random_values(self.rng, array.shape, array.dtype)
        on_stream = data.draw(st.booleans(), label="on a stream")
        stream = self.stream_of(data, root.device) if on_stream else root.device.default_stream
        what = f"{handle.label}.copy_from_host"
        COUNTS["copy_from_host"] += 1
        if not handle.contiguous:
            assert_refused(lambda: array.copy_from_host(values), "cannot be written", what)
            return
        self.touch([root], stream, data)
        source = values.copy()
        if on_stream:
            array.copy_from_host(source, stream=stream)
        else:
            array.copy_from_host(source)
        source[...] = 0  # the docs: kiln's backends copy at once (CUDA stages): no effect
        handle.model[...] = values
        handle.defined[...] = True

    @precondition(lambda self: self.handles)
    @rule(data=st.data(), bad=st.sampled_from(["shape", "strings", "ndim"]))
    def copy_from_host_bad(self, data: st.DataObject, bad: str) -> None:
        handle = self.handle(data, lambda h: h.contiguous and h.array.size > 0
                             and h.array.dtype != np.bool_)  # NumPy makes "x" True
        if handle is None:
            return
        array = handle.array
        source = {"shape": np.zeros(array.size + 1, array.dtype),
                  "strings": np.full(array.shape, "x"),
                  "ndim": np.zeros((*array.shape, 2), array.dtype)}[bad]
        COUNTS["copy_from_host bad"] += 1
        self.touch([handle.root], handle.root.device.default_stream, data)
        assert_refused(lambda: array.copy_from_host(source), "shape|dtype|convert|str",
                       f"{handle.label}.copy_from_host(<{bad}>)")

    # -- copies between devices ---------------------------------------------------------

    @precondition(lambda self: self.handles)
    @rule(data=st.data(), how=st.sampled_from(["to", "to on a stream", "copy", "copy_array"]))
    def device_copy(self, data: st.DataObject, how: str) -> None:
        """`array.to(dev)` (any two devices), `array.copy()`, and copy_array into a view."""
        handle = self.handle(data)
        assert handle is not None
        src, root = handle.array, handle.root
        COUNTS[f"device copy {how}"] += 1
        if how == "copy":
            self.touch([root], root.device.default_stream, data)
            new = src.copy()
            assert new.device is root.device and new.shape == src.shape
            self.add_root(new, handle.model.copy(), True, f"{handle.label}.copy()",
                          stream=root.device.default_stream).defined[...] = handle.defined
            return
        if how == "copy_array":
            target = self.handle(data, lambda h: h.array.shape == src.shape
                                 and h.array.dtype == src.dtype and h.root is not root)
            if target is None:
                return
            stream = target.root.device.default_stream
            if not (handle.contiguous and target.contiguous):
                assert_refused(lambda: copy_array(target.array, src), "copy\\(\\) it first",
                               f"copy_array({target.label}, {handle.label})")
                return
            self.touch([target.root], stream, data)
            self.touch([root], stream, data, ordered=[root.device.default_stream])
            copy_array(target.array, src)
            target.model[...] = handle.model
            target.defined[...] = handle.defined
            return
        dev = one_of(data, DEVICES, "to device")
        stream = self.stream_of(data, dev) if how == "to on a stream" else dev.default_stream
        what = f"{handle.label}.to({dev.name})"
        if not handle.contiguous:  # through the host, as kiln.to_device(view, dev) goes
            self.touch([root], root.device.default_stream, data)
            new, stream = src.to(dev), dev.default_stream
        else:
            self.touch([root], stream, data, ordered=[root.device.default_stream])
            new = src.to(dev, stream) if how == "to on a stream" else src.to(dev)
        assert new.device is dev and new.shape == src.shape and new.dtype == src.dtype
        copy = self.add_root(new, handle.model.copy(), True, what, stream=stream)
        copy.defined[...] = handle.defined

    # -- launches ---------------------------------------------------------------------------

    def launch_on(self, data: st.DataObject, kernel: kiln.Kernel, n: int | tuple[int, ...],
                  args: tuple[Any, ...], device: kiln.Device, roots: Sequence[Root]) -> None:
        """Launch in one of kiln's spellings, on the default stream or another one."""
        form = data.draw(st.sampled_from(["launch dim", "index dim", "grid block",
                                          "launch grid", "dim on a stream"]), label="form")
        stream = self.stream_of(data, device) if form == "dim on a stream" \
            else device.default_stream
        self.touch(roots, stream, data)
        COUNTS[f"launch {form}"] += 1
        if form == "launch dim":
            kiln.launch(kernel, dim=n, args=args)
        elif form in ("index dim", "dim on a stream"):
            kernel[kiln.dim(*((n,) if isinstance(n, int) else n)), stream](*args)
        else:
            dims = (n,) if isinstance(n, int) else n
            block = tuple(data.draw(st.sampled_from([1, 2, 4, 8, 32]), label="block")
                          for _ in dims)
            grid = tuple(max(1, -(-d // b)) for d, b in zip(dims, block))
            if form == "grid block":
                kernel[grid, block](*args)
            else:
                kiln.launch(kernel, grid=grid, block=block, args=args, device=device)

    @precondition(lambda self: self.handles)
    @rule(data=st.data(), factor=st.sampled_from(FACTORS))
    def launch_scale(self, data: st.DataObject, factor: float) -> None:
        handle = self.handle(data, lambda h: h.array.dtype == np.float32 and h.array.ndim <= 2)
        if handle is None:
            return
        array, root = handle.array, handle.root
        if not handle.contiguous:
            assert_refused(lambda: kiln.launch(scale, dim=max(array.size, 1),
                                               args=(array, factor, array.size)),
                           "C-contiguous|points kernels only", f"scale({handle.label})")
            return
        if array.size == 0:
            return  # dim=0 launches nothing; a grid of 0 blocks is refused (another rule)
        if array.ndim == 1:
            self.launch_on(data, scale, array.size, (array, factor, array.size),
                           root.device, [root])
        else:
            h, w = array.shape
            self.launch_on(data, scale2, (h, w), (array, factor, h, w), root.device, [root])
        handle.model[...] *= np.float32(factor)

    @precondition(lambda self: self.handles)
    @rule(data=st.data(), a=st.sampled_from(FACTORS))
    def launch_axpy(self, data: st.DataObject, a: float) -> None:
        y = self.handle(data, lambda h: h.contiguous and h.array.dtype == np.float32
                        and h.array.ndim == 1 and h.array.size > 0)
        if y is None:
            return
        x = self.handle(data, lambda h: h.contiguous and h.array.shape == y.array.shape
                        and h.array.dtype == np.float32)
        assert x is not None  # y itself qualifies
        n = y.array.size
        if x.array.device is not y.array.device:
            assert_refused(lambda: kiln.launch(axpy, dim=n, args=(a, x.array, y.array, n)),
                           "lives on", f"axpy({x.label}, {y.label})")
            return
        expect = np.float32(a) * x.model + y.model
        self.launch_on(data, axpy, n, (a, x.array, y.array, n), y.root.device,
                       [x.root, y.root])
        y.model[...] = expect
        y.defined &= x.defined

    @precondition(lambda self: self.handles)
    @rule(data=st.data())
    def launch_add(self, data: st.DataObject) -> None:
        """out = x + y on int32 arrays (wrapping, as NumPy's)."""
        out = self.handle(data, lambda h: h.contiguous and h.array.dtype == np.int32
                          and h.array.ndim == 1 and h.array.size > 0)
        if out is None:
            return
        same = [h for h in self.handles if h.contiguous and h.array.shape == out.array.shape
                and h.array.dtype == np.int32 and h.array.device is out.array.device]
        x, y = one_of(data, same, "x"), one_of(data, same, "y")
        n = out.array.size
        expect = x.model + y.model
        defined = x.defined & y.defined
        self.launch_on(data, add, n, (x.array, y.array, out.array, n), out.root.device,
                       [x.root, y.root, out.root])
        out.model[...] = expect
        out.defined[...] = defined

    @rule(data=st.data(), n=st.integers(0, 300))
    def launch_numpy_arguments(self, data: st.DataObject, n: int) -> None:
        """NumPy arguments the kernel writes come back; read-only ones are refused."""
        dev = one_of(data, DEVICES, "device")
        host = random_values(self.rng, (n,), np.float32)
        expect = host * np.float32(2)
        COUNTS["launch numpy"] += 1
        kiln.launch(scale, dim=n, args=(host, 2.0, n), device=dev)
        np.testing.assert_array_equal(host, expect, err_msg=f"NumPy argument on {dev.name}")
        if n and known("read-only-argument"):
            frozen = random_values(self.rng, (n,), np.float32)
            before = frozen.copy()
            frozen.flags.writeable = False
            assert_refused(lambda: within(lambda: (kiln.launch(
                               scale, dim=n, args=(frozen, 2.0, n), device=dev),
                               dev.synchronize()), "read-only launch"),
                           "read-only|writeable", f"scale(<read-only NumPy>) on {dev.name}",
                           "read-only-argument")
            np.testing.assert_array_equal(frozen, before, err_msg="a read-only array changed")

    @rule(data=st.data(), shape=st.one_of(st.tuples(st.integers(1, 600)),
                                          st.tuples(st.integers(1, 40), st.integers(1, 40))))
    def launch_counts_threads(self, data: st.DataObject, shape: tuple[int, ...]) -> None:
        """A dim= launch runs exactly prod(dim) threads."""
        if not known("dim-overrun"):
            return
        dev = one_of(data, DEVICES, "device")
        counter = kiln.zeros(1, i32, dev)
        COUNTS["launch count threads"] += 1
        kiln.launch(count_threads, dim=shape, args=(counter,))
        got = int(within(counter.numpy, "counter")[0])
        assert got == int(np.prod(shape)), (
            f"[known defect dim-overrun] dim={shape} on {dev.name} ran {got} threads")

    @precondition(lambda self: self.handles)
    @rule(data=st.data(), bad=st.sampled_from(["dtype", "ndim", "count", "grid 0", "block",
                                               "dim", "int for float", "huge int"]))
    def launch_bad(self, data: st.DataObject, bad: str) -> None:
        """Launches that cannot run are LaunchErrors naming the problem, and change nothing."""
        handle = self.handle(data, lambda h: h.contiguous and h.array.size > 0
                             and h.array.dtype == np.float32 and h.array.ndim == 1)
        if handle is None:
            return
        array, n = handle.array, handle.array.size
        calls: dict[str, tuple[Callable[[], Any], str]] = {
            "dtype": (lambda: kiln.launch(scale, dim=n, args=(
                np.zeros(n, np.float64), 2.0, n), device=array.device), "expected f32"),
            "ndim": (lambda: kiln.launch(scale, dim=n, args=(
                np.zeros((2, 2), np.float32), 2.0, n), device=array.device), "1-d|ndim|f32"),
            "count": (lambda: kiln.launch(scale, dim=n, args=(array, 2.0)), "takes 3"),
            "grid 0": (lambda: scale[0, 32](array, 2.0, n), "at least 1"),
            "block": (lambda: scale[1, 10**6](array, 2.0, n), "block|limit"),
            "dim": (lambda: kiln.launch(scale, dim=-n, args=(array, 2.0, n)), "negative"),
            "int for float": (lambda: kiln.launch(scale, dim=n, args=(array, 2.0, 1.5)),
                              "integer"),
            "huge int": (lambda: kiln.launch(scale, dim=n, args=(array, 2.0, 2**40)),
                         "does not fit"),
        }
        call, message = calls[bad]
        COUNTS[f"launch bad {bad}"] += 1
        assert_refused(call, message, f"bad launch ({bad}) with {handle.label}")

    @precondition(lambda self: self.handles)
    @rule(data=st.data())
    def launch_out_of_bounds(self, data: st.DataObject) -> None:
        """A debug kernel indexing past its array (or a view, empty ones included) raises
        IndexOutOfBoundsError at the next synchronisation, writes nothing (a failed write
        does not happen: docs/language.md), and leaves later work unharmed."""
        handle = self.handle(data, lambda h: h.contiguous and h.array.dtype == np.float32
                             and h.array.ndim == 1)
        if handle is None:
            return
        array, root = handle.array, handle.root
        n = array.size
        segment = data.draw(st.booleans(), label="a view in the kernel")
        defect = "debug-view-bounds" if segment else "debug-failed-write"
        if not known(defect):
            return
        stream = root.device.default_stream
        self.touch([root], stream, data)
        COUNTS["launch out of bounds"] += 1
        if segment:  # x[lo:hi][at], past the view's end (and maybe past x's)
            lo = data.draw(st.integers(0, n), label="lo")
            hi = data.draw(st.integers(lo, n), label="hi")
            at = hi - lo + data.draw(st.integers(0, 3), label="past the view's end")
            what = f"poke_segment({handle.label}, {lo}:{hi}, {at})"

            def run() -> None:
                poke_segment[1, 1](array, lo, hi, at, 99.0)
                stream.synchronize()
        else:
            at = n + data.draw(st.integers(0, 3), label="past the end")
            what = f"poke({handle.label}, {at})"

            def run() -> None:
                poke[1, 1](array, at, 99.0)
                stream.synchronize()

        assert_refused(run, "out of bounds|outside", what, defect)
        self.forget(stream)  # the synchronize (that raised) waited for it
        self.read(handle, data)  # nothing written, and the stream works again

    # -- streams and events -----------------------------------------------------------------

    @rule(data=st.data())
    def events(self, data: st.DataObject) -> None:
        """Recorded events time forwards; unrecorded ones are complete (as in CUDA) and
        cannot be timed."""
        dev = one_of(data, DEVICES, "device")
        stream = self.stream_of(data, dev)
        start, end = kiln.Event(dev), kiln.Event(dev)
        COUNTS["events"] += 1
        assert_refused(lambda: start.elapsed_time(end), "recorded", "elapsed_time unrecorded")
        if known("unrecorded-event"):
            within(start.synchronize, "[known defect unrecorded-event] synchronize() of an "
                   "event never recorded", seconds=10)
        start.record(stream)
        end.record(stream)
        ms = within(lambda: start.elapsed_time(end), "elapsed_time")
        assert ms >= 0, f"elapsed_time {ms}"
        within(end.synchronize, "event synchronize")

    @precondition(lambda self: self.handles)
    @rule(data=st.data(), what=st.sampled_from(["to_device", "copy_from_host", "launch",
                                                "copy_to_host", "record"]))
    def foreign_stream(self, data: st.DataObject, what: str) -> None:
        """A stream of another device is refused by copies, launches and events."""
        if not known("foreign-stream"):
            return
        handle = self.handle(data, lambda h: h.contiguous and h.array.dtype == np.float32
                             and h.array.ndim == 1)
        if handle is None:
            return
        array, dev = handle.array, handle.root.device
        others = [d for d in DEVICES if d is not dev]
        if not others:
            return
        stream = self.stream_of(data, one_of(data, others, "other device"))
        n = array.size
        self.touch([handle.root], dev.default_stream, data)
        calls: dict[str, Callable[[], Any]] = {
            "to_device": lambda: kiln.to_device(np.zeros(3, np.float32), dev, stream=stream),
            "copy_from_host": lambda: array.copy_from_host(np.zeros(n, np.float32), stream),
            "launch": lambda: kiln.launch(scale, dim=max(n, 1), args=(array, 2.0, n),
                                          device=dev, stream=stream),
            "copy_to_host": lambda: array.copy_to_host(stream=stream),
            "record": lambda: kiln.Event(dev).record(stream),
        }
        COUNTS[f"foreign stream {what}"] += 1
        assert_refused(calls[what], re.escape(stream.device.name) + "|stream",
                       f"{what} on {dev.name} with a stream of {stream.device.name}",
                       "foreign-stream")

    @precondition(lambda self: self.roots)
    @rule(data=st.data())
    def synchronize_and_check_everything(self, data: st.DataObject) -> None:
        """Wait for every stream, then every array (and shared NumPy array) is the model."""
        for stream in self.in_order({s for root in self.roots for s in root.streams}):
            self.wait_for(stream, data)
        for root in self.roots:
            got = within(root.array.numpy, f"{root.array!r}.numpy()")
            assert_same(got, root.model, root.defined, f"{root.array!r}")
            if root.host is not None:
                assert_same(root.host, root.model, root.defined, "shared NumPy array")
        COUNTS["check everything"] += 1

    # -- threads ------------------------------------------------------------------------------

    @precondition(lambda self: self.handles)
    @rule(data=st.data(), factor=st.sampled_from(FACTORS))
    def launch_in_threads(self, data: st.DataObject, factor: float) -> None:
        """A worker thread launches and copies on its own stream while this thread works on
        another array of another stream; both results are the model's."""
        handle = self.handle(data, lambda h: h.contiguous and h.array.dtype == np.float32
                             and h.array.ndim == 1 and h.array.size > 0)
        if handle is None:
            return
        array, root = handle.array, handle.root
        stream = kiln.Stream(root.device)
        self.touch([root], stream, data)
        n = array.size
        expect = handle.model * np.float32(factor)
        box: dict[str, Any] = {}

        def work() -> None:
            try:
                kiln.launch(scale, dim=n, args=(array, factor, n), stream=stream)
                box["got"] = array.copy_to_host(stream=stream)
            except BaseException as exc:  # reported by the main thread
                box["error"] = exc

        worker = threading.Thread(target=work, name="kiln-stateful-worker", daemon=True)
        worker.start()
        dev = one_of(data, DEVICES, "main thread's device")
        side = random_values(self.rng, (37,), np.float32)
        mine = kiln.Stream(dev)
        own = kiln.to_device(side, dev, stream=mine)
        kiln.launch(scale, dim=37, args=(own, 2.0, 37), stream=mine)
        worker.join(TIMEOUT)
        assert not worker.is_alive(), "hang: the worker thread's launch and copy"
        if "error" in box:
            raise box["error"]
        COUNTS["launch in threads"] += 1
        handle.model[...] = expect
        self.forget(stream)  # the worker's copy_to_host waited for it
        assert_same(box["got"], handle.model, handle.defined, f"worker's {handle.label}")
        within(dev.synchronize, "main thread's device")
        np.testing.assert_array_equal(within(own.numpy, "main thread's array"), side * 2)

    # -- sharded arrays -----------------------------------------------------------------

    def shard_devices(self, data: st.DataObject) -> list[kiln.Device]:
        parts = data.draw(st.integers(1, min(3, len(DEVICES))), label="shards")
        picked = data.draw(st.permutations(range(len(DEVICES))), label="devices")[:parts]
        return [DEVICES[k] for k in picked]

    @rule(data=st.data(), rows=st.integers(1, 30), cols=st.sampled_from([None, 1, 3]),
          halo=st.integers(0, 3), factor=st.sampled_from(FACTORS))
    def sharded(self, data: st.DataObject, rows: int, cols: int | None, halo: int,
                factor: float) -> None:
        """shard, launch_sharded, refresh_halo and gather against NumPy; bad halos and a
        failing launch are refused, and the array is usable afterwards."""
        devices = self.shard_devices(data)
        shape = (rows,) if cols is None else (rows, cols)
        host = random_values(self.rng, shape, np.float32)
        fewest = rows // len(devices)
        COUNTS["sharded"] += 1
        if len(devices) > 1 and halo > fewest:
            assert_refused(lambda: kiln.shard(host, devices, halo=halo), "halo",
                           f"shard({rows} rows, {len(devices)} devices, halo={halo})")
            return
        if fewest == 0:
            return  # a device with no rows: nothing to launch on it
        sharded = kiln.shard(host, devices, halo=halo)
        np.testing.assert_array_equal(within(sharded.gather, "gather"), host)
        model = host.copy()
        if cols is None:  # shard_scale takes 1-d shards
            kiln.launch_sharded(shard_scale, (sharded, factor, kiln.shard_rows, halo))
            model *= np.float32(factor)
        self.check_shards(sharded, model, data, "after a launch")
        if cols is None and len(devices) > 1:
            fail_on = data.draw(st.integers(1, len(devices) - 1), label="failing shard")
            shards = sharded.shards

            def size(s: kiln.Shard) -> int:
                return -1 if s is shards[fail_on] else s.rows

            assert_refused(lambda: kiln.launch_sharded(
                shard_scale, (sharded, factor, kiln.shard_rows, halo), dim=size),
                "negative", "a sharded launch failing on one shard")
            for s in shards[:fail_on]:
                model[s.start:s.stop] *= np.float32(factor)
            if known("stale-shard-error"):
                self.check_shards(sharded, model, data, "[known defect stale-shard-error] "
                                  "after a failing launch")
        if cols is None:
            total = kiln.partials(1, f32, devices, fill=1.0)
            kiln.launch_sharded(sum_into, (sharded, total, kiln.shard_rows, halo))
            combined = within(lambda: total.combine(np.add), "Partials.combine")
            assert combined[0] == model.sum(dtype=np.float64) + len(devices), (
                f"partial sums {combined} of {model}")
            self.sharded_out_of_bounds(sharded, model, data)
        if known("out-shape"):
            short = np.zeros((rows - 1, *shape[1:]), np.float32)
            assert_refused(lambda: sharded.gather(short), "out|shape",
                           "gather(<short out>)", "out-shape")
        assert_refused(lambda: kiln.shard(host, [devices[0], devices[0]]), "repeat",
                       "shard over a device twice")
        assert_refused(lambda: kiln.shard(host, []), "at least one device", "shard over none")

    def sharded_out_of_bounds(self, sharded: kiln.ShardedArray, model: np.ndarray,
                              data: st.DataObject) -> None:
        """A sharded debug launch indexing past every shard raises IndexOutOfBoundsError (at
        the launch or the next gather), writes nothing, and later gathers are right."""
        backends = {d.backend.name for d in sharded.devices}
        if not known("stale-shard-error") or backends - {"interp"}:
            return  # compiled backends' failing stores land on each shard's first row (docs)
        COUNTS["sharded out of bounds"] += 1

        def launch_and_gather() -> None:
            kiln.launch_sharded(poke, (sharded, 10**6, 99.0))
            sharded.gather()

        assert_refused(launch_and_gather, "out of bounds", "a sharded launch out of bounds",
                       "stale-shard-error")
        self.check_shards(sharded, model, data, "[known defect stale-shard-error] after a "
                          "sharded launch out of bounds")

    def check_shards(self, sharded: kiln.ShardedArray, model: np.ndarray,
                     data: st.DataObject, when: str) -> None:
        """gather(out) is the model; after refresh_halo (when drawn) every shard's
        ghost rows are its neighbours' edge rows (zeros past the ends)."""
        out = np.full(model.shape, 99, np.float32)
        got = within(lambda: sharded.gather(out), f"gather(out) {when}")
        assert got is out
        np.testing.assert_array_equal(got, model, err_msg=f"gather {when}")
        if data.draw(st.booleans(), label="refresh halo"):
            sharded.refresh_halo()
            h = sharded.halo
            padded = np.concatenate([np.zeros((h, *model.shape[1:]), np.float32), model,
                                     np.zeros((h, *model.shape[1:]), np.float32)])
            for s in sharded.shards:
                local = within(s.array.numpy, f"shard on {s.device.name}")
                np.testing.assert_array_equal(local, padded[s.start:s.stop + 2 * h],
                                              err_msg=f"shard {s.start}:{s.stop} {when}")

    def teardown(self) -> None:
        """Everything queued finishes without an error, and matches the model."""
        try:
            for stream in {s for root in self.roots for s in root.streams}:
                within(stream.synchronize, "teardown synchronize")
            for root in self.roots:
                got = within(root.array.numpy, f"{root.array!r}.numpy() at the end")
                assert_same(got, root.model, root.defined, f"{root.array!r} at the end")
        finally:
            COUNTS["runs"] += 1


SUITE_SETTINGS = settings(max_examples=30, stateful_step_count=40, derandomize=True,
                          deadline=None, database=None, print_blob=True,
                          phases=(Phase.explicit, Phase.generate),
                          suppress_health_check=list(HealthCheck))
"""The suite's bounded run: fixed examples, well under a minute on a loaded 2-core machine
once kiln's kernel cache is warm."""

HostMachine.TestCase.settings = SUITE_SETTINGS
test_host_api_against_a_numpy_model = pytest.mark.slow(HostMachine.TestCase)


# -- regressions: what the machine found, one test each, on every backend ----------------

@pytest.fixture(params=BACKENDS)
def dev(request: pytest.FixtureRequest) -> kiln.Device:
    return kiln.device(request.param)


@pytest.mark.parametrize("shape", [(3, 2**63), 2**62, (2**40, 2**40)])
def test_shapes_too_large_to_address_are_refused(dev: kiln.Device, shape: Any) -> None:
    with pytest.raises(ValueError, match="too large"):
        kiln.empty(shape, f32, dev)


@pytest.mark.parametrize("shape", [2.5, None, "ab", (2, 1.0)])
def test_shapes_that_are_not_ints_are_refused(dev: kiln.Device, shape: Any) -> None:
    with pytest.raises(TypeError, match="tuples of ints"):
        kiln.empty(shape, f32, dev)
    assert kiln.empty(np.zeros((2, 3)).shape, f32, dev).shape == (2, 3)
    assert kiln.empty(np.int64(4), f32, dev).shape == (4,)


def test_copy_from_host_of_unconvertible_values_is_a_type_error(dev: kiln.Device) -> None:
    array = kiln.zeros(3, f32, dev)
    with pytest.raises(TypeError, match="cannot copy <U1 values into a float32"):
        array.copy_from_host(np.full(3, "x"))
    np.testing.assert_array_equal(array.numpy(), np.zeros(3, np.float32))


def test_views_of_views_of_an_empty_array_keep_their_base(dev: kiln.Device) -> None:
    root = kiln.to_device(np.zeros((4, 0), np.int32), dev)
    inner = root[1:][1]  # offsets past the (empty) end: no sub-buffer there on OpenCL
    assert inner.base is root and inner.shape == (0,)
    assert inner.numpy().shape == (0,)
    assert root[2:2][0:].base is root


def test_as_device_array_of_an_empty_array(dev: kiln.Device) -> None:
    if not dev.capabilities.unified_memory:
        pytest.skip(f"{dev.name} does not share host memory")
    shared = kiln.as_device_array(np.zeros((2, 0), np.int16), dev)
    assert shared.shape == (2, 0) and shared.numpy().shape == (2, 0)


@pytest.mark.parametrize("name", [b for b in BACKENDS if b in ("interp", "cpu", "serial")])
def test_to_the_same_device_on_another_stream_waits_for_the_default_stream(name: str) -> None:
    """The default stream is held busy (a task waiting on a gate) with a write queued
    behind it; a copy to the same device on another stream must see that write."""
    dev = kiln.device(name)
    array = kiln.to_device(np.zeros(64, np.float32), dev)
    gate = threading.Event()
    dev.default_stream.handle.enqueue(gate.wait)
    array.copy_from_host(np.full(64, 7, np.float32))
    opener = threading.Timer(0.2, gate.set)
    opener.start()
    try:
        stream = kiln.Stream(dev)
        copy = array.to(dev, stream=stream)
        stream.synchronize()
        np.testing.assert_array_equal(copy.numpy(), np.full(64, 7, np.float32))
    finally:
        gate.set()
        opener.join()


@pytest.mark.parametrize("name", [b for b in BACKENDS if b in ("interp", "cpu", "serial")])
def test_streams_nobody_holds_end_their_threads(name: str) -> None:
    """Each host stream is a thread (with an OpenMP team once it ran cpu kernels): a
    program making streams as it goes must not keep them all (a long run of the machine
    reached thousands of threads, then crashed)."""
    dev = kiln.device(name)
    x = kiln.to_device(np.ones(8, np.float32), dev)
    before = threading.active_count()
    for _ in range(150):
        stream = kiln.Stream(dev)
        kiln.launch(scale, dim=8, args=(x, 1.0, 8), stream=stream)
        stream.synchronize()
    del stream
    gc.collect()
    for _ in range(100):  # the threads end after their queues' last task
        if threading.active_count() - before <= 70:
            break
        time.sleep(0.05)
    assert threading.active_count() - before <= 70, "streams' threads outlive the streams"


@pytest.mark.parametrize("name", BACKENDS)
def test_debug_kernels_check_bounds_on_every_backend(name: str, tmp_path: Path) -> None:
    """[fixed defect serial-debug] A debug=True store past the end raises
    IndexOutOfBoundsError at the next synchronisation, in a subprocess: where the check is
    missing the store really lands out of bounds."""
    code = f"""
import numpy as np, kiln
from kiln import f32, i32

@kiln.kernel(debug=True)
def poke(x: f32[:], at: i32, value: f32):
    if kiln.global_id(0) == 0:
        x[at] = value

dev = kiln.device({name!r})
x = kiln.to_device(np.zeros(8, np.float32), dev)
poke[1, 1](x, 9, 99.0)
try:
    dev.synchronize()
except kiln.IndexOutOfBoundsError as exc:
    print("raised:", exc)
"""
    script = tmp_path / "poke.py"  # kernels need a file (their source is read)
    script.write_text(code)
    done = run_python(f"import runpy; runpy.run_path({str(script)!r})")
    assert done.returncode == 0, done.stderr
    assert "raised:" in done.stdout and "x[9]" in done.stdout, (
        f"[known defect serial-debug] no IndexOutOfBoundsError on {name}: {done.stdout}")
