"""The backend contract v2: parts checked at registration, optional capabilities as
declared protocols (never looked up by name), execution models dispatched through drivers
that plugins can add."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import kiln
from kiln import f32, i32
from kiln.builtin_backends.interp import InterpBackend
from kiln.execution.drivers import DirectDriver, driver_for
from kiln.framework.registry import BackendRegistry, check_contract

KILN = Path(kiln.__file__).parent


@kiln.kernel
def scale(a: f32[:], k: f32, n: i32):
    i = kiln.global_id(0)
    if i < n:
        a[i] = a[i] * k


def test_no_backend_hook_is_looked_up_by_name() -> None:
    """getattr/hasattr on a backend, a routine or a launchable would be a hidden hook."""
    found = []
    for path in KILN.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                    and node.func.id in ("getattr", "hasattr") and node.args:
                target = ast.unparse(node.args[0])
                if any(w in target for w in ("backend", "routine", "launchable", "allocator")):
                    found.append(f"{path.relative_to(KILN)}:{node.lineno}: {ast.unparse(node)}")
    assert not found, found


def test_builtin_backends_declare_their_optional_protocols() -> None:
    from kiln.builtin_backends.cpu import backend as cpu
    from kiln.builtin_backends.cuda import backend as cuda
    from kiln.builtin_backends.opencl import backend as opencl

    kb = kiln.backend
    assert isinstance(cpu.allocator, kb.ZeroCopy) and isinstance(opencl.allocator, kb.ZeroCopy)
    for protocol in (kb.RawKernels, kb.KernelGraphs, kb.CudaArrayInterop, kb.DLPackInterop):
        assert isinstance(cuda, protocol) and not isinstance(cpu, protocol)
    from kiln.builtin_backends.cuda.launch import Routine
    from kiln.builtin_backends.opencl.launch import OpenCLKernel

    for launchable in (Routine, OpenCLKernel):
        assert issubclass(launchable, kiln.backend.FastLaunch)


def test_a_backend_without_raw_kernels_says_so_before_checking_arguments() -> None:
    k = kiln.RawKernel("void f(float *a) {}", "f", backend="interp")
    with pytest.raises(kiln.LaunchError, match="backend 'interp' does not load raw kernels"):
        k[1, 1](np.zeros(4, np.float32))  # a NumPy array, which raw kernels do not take


def test_supports_refuses_a_class() -> None:
    """Remembered per class, a class argument would get the answer cached for `type`."""

    class Fast:
        def launch(self, grid: Any, block: Any, args: Any, stream: Any) -> None: ...

        def launch_target(self, args: Any, stream: Any) -> Any: ...

        def prepare_launch(self, grid: Any, block: Any, args: Any, stream: Any) -> Any: ...

    class Slow:
        def launch(self, grid: Any, block: Any, args: Any, stream: Any) -> None: ...

        def launch_target(self, args: Any, stream: Any) -> Any: ...

    assert kiln.backend.supports(Fast(), kiln.backend.FastLaunch)
    assert not kiln.backend.supports(Slow(), kiln.backend.FastLaunch)
    with pytest.raises(TypeError, match="not the class Fast"):
        kiln.backend.supports(Fast, kiln.backend.FastLaunch)


def test_a_backend_missing_a_part_is_refused_naming_it() -> None:
    class NoQueue(kiln.backend.DirectBackend):
        name = "noqueue"
        allocator = kiln.backend.HostAllocator()

        def availability(self) -> kiln.backend.Availability:
            return kiln.backend.Availability(True)

        def device_handles(self) -> list:
            return []

        def execute(self, *args: Any) -> None: ...

    with pytest.raises(TypeError, match="backend 'noqueue' needs a `queue`: a kiln.backend.Queue"):
        kiln.backend.register_backend(NoQueue())
    with pytest.raises(TypeError, match="takes a kiln.backend.Backend"):
        check_contract(object())  # type: ignore[arg-type]


def test_a_plugin_missing_a_part_is_listed_unavailable_saying_why(tmp_path, monkeypatch) -> None:
    """Found through an entry point, the same plugin never stops kiln or other backends."""
    (tmp_path / "half_done_plugin.py").write_text(
        "import kiln\n"
        "class HalfDone(kiln.backend.DirectBackend):\n"
        "    name = 'halfdone'\n"
        "    def availability(self): return kiln.backend.Availability(True)\n"
        "    def device_handles(self): return []\n"
        "    def execute(self, *args): pass\n"
        "backend = HalfDone()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = BackendRegistry()
    registry._load("half_done_plugin:backend", "halfdone")
    entry = registry._entries["halfdone"]
    assert not entry.available
    assert "backend 'halfdone' needs a `allocator`" in entry.reason
    assert kiln.device("interp").name == "interp:0"


def test_compiled_kernels_carry_entry_layout_and_source(cpu_device) -> None:
    program = scale.program((f32[:], f32, i32))
    for stage in cpu_device.backend.pipeline(cpu_device):
        program = stage(program)
    compiled = cpu_device.backend.compiler.compile(program, cpu_device, kiln.KernelOptions())
    assert compiled.entry == "kiln_entry" and compiled.metadata["kernel"] == "scale"
    assert [(p.param, p.kind) for p in compiled.params] == [
        ("a", "pointer"), ("a", "dim"), ("k", "scalar"), ("n", "scalar")]
    assert "kiln_entry" in compiled.source and compiled.binary is None
    import pickle

    assert pickle.loads(pickle.dumps(compiled)) == compiled


@pytest.fixture
def cpu_device() -> kiln.Device:
    try:
        return kiln.device("cpu")
    except kiln.DeviceNotFoundError as exc:
        pytest.skip(f"no cpu backend here: {exc}")


# ---------------------------------------------------------------- execution models


class TracingDriver(kiln.backend.ExecutionDriver):
    """A plugin's execution model: DIRECT execution, with every build recorded."""

    def __init__(self) -> None:
        self.built: list[tuple[str, tuple]] = []

    def build(self, kernel, arg_types, device):
        self.built.append((kernel.name, arg_types))
        return DirectDriver().build(kernel, arg_types, device)


TRACER = TracingDriver()
TRACED = kiln.backend.register_execution_model("TRACED", TRACER)


class TracedBackend(InterpBackend):
    name = "traced"
    execution_model = TRACED


def test_a_plugin_registers_an_execution_model_with_its_driver() -> None:
    kiln.backend.register_backend(TracedBackend(), priority=0)
    dev = kiln.device("traced")
    assert driver_for(dev) is TRACER and TRACED in kiln.backend.ExecutionModel.members()
    a = np.arange(8, dtype=np.float32)
    kiln.launch(scale, 1, 8, (a, 3.0, 8), dev)
    np.testing.assert_array_equal(a, np.arange(8, dtype=np.float32) * 3)
    assert TRACER.built == [("scale", (f32[:], f32, i32))]


def test_a_model_without_a_driver_is_a_clear_launch_error() -> None:
    orphan = kiln.backend.ExecutionModel.register("ORPHAN_TEST")

    class Orphan(InterpBackend):
        name = "orphan"
        execution_model = orphan

    kiln.backend.register_backend(Orphan(), priority=0)
    with pytest.raises(kiln.LaunchError, match="execution model ExecutionModel.ORPHAN_TEST, "
                                               "which has no driver"):
        kiln.launch(scale, 1, 8, (np.zeros(8, np.float32), 1.0, 8), "orphan")


def test_register_execution_model_needs_a_driver() -> None:
    with pytest.raises(TypeError, match="must be an ExecutionDriver"):
        kiln.backend.register_execution_model("BROKEN", object())  # type: ignore[arg-type]



class SyncStream:
    """Runs each task when it is queued (what the interp backend's `execute` calls)."""

    def enqueue(self, task: Any) -> None:
        task()


class SyncQueue(kiln.backend.Queue):
    """The smallest queue: work runs when it is launched; no event method."""

    def create_stream(self, device: kiln.Device) -> SyncStream:
        return SyncStream()

    def synchronize_stream(self, stream: Any) -> None:
        pass


class Synchronous(InterpBackend):
    """The interp backend with a synchronous queue of two methods, events and all."""

    name = "synchronous"
    priority = -1  # never the default device of the tests after this one

    def __init__(self) -> None:
        super().__init__()
        self.queue = SyncQueue()

    def device_handles(self) -> list:
        caps = kiln.device("interp").capabilities
        return [("sync", dataclasses.replace(caps, backend=self.name, name="synchronous"))]


def test_a_synchronous_queue_gets_events_timed_on_the_host() -> None:
    kiln.backend.register_backend(Synchronous())
    dev = kiln.device("synchronous")
    a = np.ones(64, np.float32)
    start, end = kiln.Event(dev), kiln.Event(dev)
    start.record()
    kiln.launch(scale, 1, 64, (a, 3.0, 64), device=dev)
    end.record()
    end.synchronize()
    assert end.query() and np.all(a == 3.0)
    assert 0.0 <= start.elapsed_time(end) < 60_000.0
    assert isinstance(dev.backend.queue.create_event(dev), kiln.backend.HostTimedEvent)


def test_a_backend_of_another_contract_version_is_refused_naming_both(
        tmp_path, monkeypatch) -> None:
    class Future(InterpBackend):
        name = "future"
        contract_version = kiln.backend.CONTRACT_VERSION + 1

    message = (rf"backend 'future' declares contract version "
               rf"{kiln.backend.CONTRACT_VERSION + 1}, but this kiln supports version "
               rf"{kiln.backend.CONTRACT_VERSION} \(kiln.backend.CONTRACT_VERSION\)")
    with pytest.raises(kiln.backend.ContractError, match=message):
        kiln.backend.register_backend(Future())
    (tmp_path / "old_plugin.py").write_text(
        "from kiln.builtin_backends.interp import InterpBackend\n"
        "class Old(InterpBackend):\n"
        "    name = 'old'\n"
        "    contract_version = 1\n"
        "backend = Old()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = BackendRegistry()
    registry._load("old_plugin:backend", "old")
    entry = registry._entries["old"]
    assert not entry.available and "declares contract version 1" in entry.reason


def test_kiln_backends_stays_the_function_once_backends_are_imported() -> None:
    import importlib
    import types

    for name in ("interp", "cpu", "cuda", "opencl", "serial"):
        importlib.import_module(f"kiln.builtin_backends.{name}")
    assert isinstance(kiln.backends, types.FunctionType)
    assert "interp" in [entry.name for entry in kiln.backends()]
    assert "backends" in kiln.__all__ and "JITBackend" not in kiln.__all__
    assert not callable(importlib.import_module("kiln.builtin_backends"))


def test_a_backend_class_overrides_single_implementations() -> None:
    """A direct backend's implementations are class data, merged along its MRO; one
    registered under its namespaces comes first."""

    def doubled(x: Any) -> Any:
        return 2 * np.sqrt(x)

    class Doubling(InterpBackend):
        name = "doubling_test"
        spellings = {"sqrt": doubled}
        intrinsic_namespaces = ("doubling_test", *InterpBackend.intrinsic_namespaces)

    backend = Doubling()
    assert backend.intrinsic_implementation("sqrt") is doubled
    assert backend.intrinsic_implementation("exp") is InterpBackend.spellings["exp"]
    kiln.backend.intrinsics.implement("doubling_test", {"exp": np.exp2})
    assert backend.intrinsic_implementation("exp") is np.exp2
    assert InterpBackend().intrinsic_implementation("exp") is InterpBackend.spellings["exp"]


def test_a_jit_backend_runs_what_its_compilers_emitter_spells() -> None:
    from kiln.builtin_backends.cpu import CpuEmitter
    from kiln.builtin_backends.cpu import backend as cpu

    for name in kiln.backend.intrinsics.names():
        assert cpu.intrinsic_implementation(name) is CpuEmitter.implementation(name), name
    assert cpu.intrinsic_implementation("exp") is not None
