"""The kernel cache: a disk-cache hit by the kernel key skips the frontend, the passes and
code generation; anything that changes what the kernel compiles to misses."""

from __future__ import annotations

import linecache
import os
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import kiln
from kiln import f32, f64, i32
from kiln.execution.fingerprint import fingerprint
from kiln.execution.kernelcache import _dumps, kernel_key
from kiln.framework import cache
from kiln.ir.enums import MemorySpace
from kiln.ir.hosttypes import kiln_type_of
from kiln.ir.printer import format_program
from kiln.ir.types import ArrayType, ConstexprType
from tests.helpers import run_python

cpu_entry = next(e for e in kiln.backends() if e.name == "cpu")
pytestmark = [pytest.mark.skipif(not cpu_entry.available,
                                 reason=f"no C compiler with OpenMP here: {cpu_entry.reason}"),
              pytest.mark.compiler]

HELPERS = """\
import kiln
from kiln import f32

OFFSET = 1.0


@kiln.func
def shift(v: f32) -> f32:
    return v + OFFSET


@kiln.struct
class Pair:
    a: f32
    b: f32 = 2.0
"""

KERNEL = """\
import kiln
from kiln import f32, i32
from fk_helpers import Pair, shift

SCALE = 2.0


@kiln.kernel
def k(p: Pair, x: f32[:], n: i32, m: kiln.constexpr):
    i = kiln.global_id(0)
    if i < n:
        x[i] = shift(x[i] * SCALE) + p.a * p.b + m
"""
EXPECTED = 14.0  # shift(1 * 2) + 3 * 2 + 5


class Project:
    """A kernel module and a helper module on disk, loaded afresh (new kernel, device
    function and struct objects) as a new process would."""

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.root, self.monkeypatch = root, monkeypatch
        self.write(KERNEL, HELPERS)

    def write(self, kernel: str, helpers: str) -> None:
        (self.root / "fk_kern.py").write_text(kernel)
        (self.root / "fk_helpers.py").write_text(helpers)
        linecache.clearcache()  # a rewrite may keep a file's size and modification time

    def load(self) -> types.ModuleType:
        self._module("fk_helpers")
        return self._module("fk_kern")

    def _module(self, name: str) -> types.ModuleType:
        path = self.root / f"{name}.py"
        module = types.ModuleType(name)
        module.__file__ = str(path)
        self.monkeypatch.setitem(sys.modules, name, module)
        exec(compile(path.read_text(), str(path), "exec"), module.__dict__)
        return module

    def run(self, module: types.ModuleType, device: str = "cpu") -> np.ndarray:
        x = np.ones(64, np.float32)
        pair = sys.modules["fk_helpers"].Pair(np.float32(3))
        kiln.launch(module.k, 1, 64, (pair, x, 64, 5), device=device)
        return x


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "cache"
    monkeypatch.setenv("KILN_CACHE_DIR", str(path))
    return path


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache_dir: Path) -> Project:
    return Project(tmp_path, monkeypatch)


def kernel_entries(cache_dir: Path, backend: str = "cpu") -> list[Path]:
    return sorted((cache_dir / backend).glob("*.kernel"))


# ---------------------------------------------------------------- hits


DRIVER = """
import sys
import numpy as np
import kiln
sys.path.insert(0, sys.argv[1])
import fk_kern
from fk_helpers import Pair
x = np.ones(64, np.float32)
kiln.launch(fk_kern.k, 1, 64, (Pair(np.float32(3)), x, 64, 5), device="cpu")
assert np.all(x == 14.0), x
print(fk_kern.k.frontend_runs)
"""


def test_a_fresh_process_skips_the_frontend(project: Project, cache_dir: Path) -> None:
    env = {**os.environ, "KILN_CACHE_DIR": str(cache_dir), "KILN_LOG": "info"}

    def run() -> subprocess.CompletedProcess:
        done = subprocess.run([sys.executable, "-c", DRIVER, str(project.root)], env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return done

    first, second = run(), run()
    assert first.stdout.strip() == "1" and "not in the kernel cache" in first.stderr
    assert second.stdout.strip() == "0", second.stderr  # no frontend run at all
    assert "cpu k: cached (disk, kernel key)" in second.stderr
    assert "cached (disk, source key)" in second.stderr  # the binary for the block shape
    assert "compiled" not in second.stderr


def test_a_hit_runs_the_right_code_and_a_change_runs_the_new_code(project: Project) -> None:
    first = project.load()
    assert np.all(project.run(first) == EXPECTED) and first.k.frontend_runs == 1
    again = project.load()
    assert np.all(project.run(again) == EXPECTED) and again.k.frontend_runs == 0
    project.write(KERNEL, HELPERS.replace("OFFSET = 1.0", "OFFSET = 2.0"))
    changed = project.load()
    assert np.all(project.run(changed) == EXPECTED + 1) and changed.k.frontend_runs == 1


def test_the_opencl_backend_uses_the_kernel_cache_too(project: Project) -> None:
    opencl = next(e for e in kiln.backends() if e.name == "opencl")
    if not opencl.available:
        pytest.skip(f"no OpenCL device: {opencl.reason}")
    first = project.load()
    assert np.all(project.run(first, "opencl") == EXPECTED) and first.k.frontend_runs == 1
    again = project.load()
    assert np.all(project.run(again, "opencl") == EXPECTED) and again.k.frontend_runs == 0


# ---------------------------------------------------------------- misses


def signature(module: types.ModuleType, x: Any = f32[:], m: Any = 5) -> tuple:
    pair = kiln_type_of(sys.modules["fk_helpers"].Pair)
    return (pair, x, i32, ConstexprType(m))


def key(project: Project, **change: Any) -> str:
    module = project.load()
    found = kernel_key(module.k.launch_state, signature(module, **change), kiln.device("cpu"))
    assert found is not None
    return found.key


def test_the_same_files_give_the_same_key(project: Project) -> None:
    assert key(project) == key(project)


CHANGES = {
    "kernel source": (KERNEL.replace("+ m\n", "+ m + 1.0\n"), HELPERS),
    "a module constant it reads": (KERNEL.replace("SCALE = 2.0", "SCALE = 3.0"), HELPERS),
    "a device function in another module": (
        KERNEL, HELPERS.replace("return v + OFFSET", "return v - OFFSET")),
    "a constant the device function reads": (KERNEL, HELPERS.replace("1.0", "1.5")),
    "a struct field's type": (KERNEL, HELPERS.replace("b: f32 = 2.0", "b: kiln.f64 = 2.0")),
    "a struct field's default": (KERNEL, HELPERS.replace("b: f32 = 2.0", "b: f32 = 4.0")),
    "kernel options": (KERNEL.replace("@kiln.kernel\n", "@kiln.kernel(fastmath=True)\n"),
                       HELPERS),
    "the kernel's place in its file": ("\n" + KERNEL, HELPERS),
}


@pytest.mark.parametrize("change", CHANGES)
def test_a_change_misses(project: Project, change: str) -> None:
    base = key(project)
    project.write(*CHANGES[change])
    assert key(project) != base


@pytest.mark.parametrize("change", [{"x": f64[:]}, {"x": ArrayType(f32, 2)}, {"m": 6},
                                    {"m": 5.0}, {"m": True}])
def test_another_signature_misses(project: Project, change: dict[str, Any]) -> None:
    assert key(project, **change) != key(project)


def test_kiln_code_is_part_of_the_key(project: Project, monkeypatch: pytest.MonkeyPatch
                                      ) -> None:
    from kiln.execution import kernelcache

    base = key(project)
    monkeypatch.setattr(kernelcache, "kiln_identity", lambda: "another kiln")
    assert key(project) != base


def test_an_intrinsic_implemented_anew_misses(project: Project) -> None:
    from kiln.builtin_backends.cpu import CpuEmitter
    from kiln.ir.intrinsics import intrinsics

    base = key(project)
    original = CpuEmitter.implementation("sqrt")
    try:
        intrinsics.implement("cpu", {"sqrt": "my_sqrt({0})"})
        assert key(project) != base
        intrinsics.implement("cpu", {"sqrt": original})  # the same spelling as kiln's own
        assert key(project) == base
    finally:
        intrinsics._impls.pop(("cpu", "sqrt"))
        intrinsics.revision += 1


# ---------------------------------------------------------------- fallbacks


UNKNOWN = """\
import types
import kiln
from kiln import f32, i32

CONFIG = types.SimpleNamespace(scale=3.0)


@kiln.kernel
def k(x: f32[:], n: i32):
    i = kiln.global_id(0)
    if i < n:
        x[i] = x[i] * CONFIG.scale
"""


def test_an_unknown_kind_of_global_falls_back(project: Project, cache_dir: Path,
                                              caplog: pytest.LogCaptureFixture) -> None:
    project.write(UNKNOWN, HELPERS)
    for scale in (3.0, 4.0):
        project.write(UNKNOWN.replace("3.0", str(scale)), HELPERS)
        module = project.load()
        with caplog.at_level("INFO", logger="kiln"):
            assert kernel_key(module.k.launch_state, (f32[:], i32), kiln.device("cpu")) is None
        assert "no kernel key ('CONFIG.scale' in k is a SimpleNamespace" in caplog.text
        x = np.ones(8, np.float32)
        kiln.launch(module.k, 1, 8, (x, 8), device="cpu")
        assert np.all(x == scale) and module.k.frontend_runs == 1
    assert kernel_entries(cache_dir) == []


SHADOWED = """\
import numpy as np
import kiln
from kiln import f32, i32

x = np.ones(8, np.float32)  # a script's data, named like the kernel's parameter and local
y = object()


@kiln.kernel
def k(x: f32[:], n: i32):
    i = kiln.global_id(0)
    y = x[i]
    if i < n:
        x[i] = y * 2.0
"""


def test_parameters_and_locals_hide_globals(project: Project) -> None:
    project.write(SHADOWED, HELPERS)
    assert kernel_key(project.load().k.launch_state, (f32[:], i32), kiln.device("cpu")) is not None


def test_string_annotations_and_closures_are_fingerprinted(tmp_path: Path) -> None:
    path = tmp_path / "fk_closure.py"
    path.write_text("import kiln\n\n\ndef make(c):\n    @kiln.kernel\n"
                    "    def k(x: 'kiln.f32[:]'):\n        x[0] = c\n    return k\n")
    module = types.ModuleType("fk_closure")
    exec(compile(path.read_text(), str(path), "exec"), module.__dict__)
    assert fingerprint(module.make(1.0)) != fingerprint(module.make(2.0))
    assert fingerprint(module.make(1.0)) == fingerprint(module.make(1.0))


# ---------------------------------------------------------------- damaged entries


@pytest.mark.parametrize("damage", ["truncate", "flip", "not a pickle"])
def test_damaged_entries_are_rebuilt(project: Project, cache_dir: Path, damage: str) -> None:
    project.run(project.load())
    (entry,) = kernel_entries(cache_dir)
    data = entry.read_bytes()
    if damage == "not a pickle":  # a whole entry whose payload kiln cannot read
        cache.write_entry(entry, b"not a pickle")
    else:
        entry.write_bytes(data[: len(data) // 2] if damage == "truncate"
                          else data[:40] + bytes([data[40] ^ 1]) + data[41:])
    rebuilt = project.load()
    assert np.all(project.run(rebuilt) == EXPECTED) and rebuilt.k.frontend_runs == 1
    assert cache.read_entry(entry) is not None  # written again, whole
    hit = project.load()
    assert np.all(project.run(hit) == EXPECTED) and hit.k.frontend_runs == 0


def test_programs_round_trip_through_pickle(project: Project) -> None:
    import pickle

    from kiln.ir.passes import pipeline_for

    module = project.load()
    dev = kiln.device("cpu")
    program = module.k.program(signature(module))
    for stage in pipeline_for(dev):
        program = stage(program)
    copy = pickle.loads(_dumps(program))
    assert format_program(copy) == format_program(program)
    assert [p.source for p in copy.kernel.params] == [p.source for p in program.kernel.params]
    x = next(p for p in copy.kernel.params if p.name == "x")
    assert x.type.elem is f32 and x.type.space is MemorySpace.GLOBAL  # singletons stay so


CONSTANT_SCRIPT = """
import sys
import numpy as np
import kiln
from kiln import f32

SCALE = {scale}

@kiln.kernel
def k(out: f32[:]):
    out[kiln.global_id(0)] = SCALE

out = np.zeros(2, np.float32)
if sys.argv[1] == "first":  # built on interp with 2.0; the constant changes; then cpu
    kiln.launch(k, 1, 2, (out,), device="interp")
    SCALE = 3.0
kiln.launch(k, 1, 2, (out,), device=sys.argv[2])
print(out.tolist())
"""


@pytest.mark.parametrize("backend", ["cpu", "opencl"])
def test_a_build_made_before_a_constant_changed_is_not_stored_under_its_key(
        tmp_path: Path, backend: str) -> None:
    """A module-level constant changed after the kernel was built: the same signature on
    another device reuses the build (the old value, as documented), but must not store it
    under the key of the new value, which a later process starting with it would find."""
    entry = next(e for e in kiln.backends() if e.name == backend)
    if not entry.available:
        pytest.skip(f"no {backend} backend here: {entry.reason}")
    script = tmp_path / "constant_script.py"
    env = {"KILN_CACHE_DIR": str(tmp_path / "cache")}
    for phase, scale, expected in (("first", 2.0, "[2.0, 2.0]"), ("second", 3.0, "[3.0, 3.0]")):
        script.write_text(CONSTANT_SCRIPT.format(scale=scale))
        code = (f"import runpy, sys; sys.argv = ['constant_script.py', {phase!r}, "
                f"{backend!r}]; runpy.run_path({str(script)!r}, run_name='__main__')")
        done = run_python(code, env)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == expected, (phase, done.stdout)
