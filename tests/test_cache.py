"""The compile cache: atomic entries, corruption detection, concurrent processes, keys."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from kiln.framework import cache
from kiln.framework.buildenv import BuildEnv

ENV = BuildEnv("test", ("cc",), "cc 1.0", ("-O2",))


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_entries_round_trip_and_get_or_build_builds_once(cache_dir: Path) -> None:
    c = cache.CompileCache("test", ".bin")
    key = cache.cache_key("test", "source", ENV, "arch")
    builds: list[int] = []

    def build() -> bytes:
        builds.append(1)
        return b"payload" * 100

    first = c.get_or_build(key, build, lambda e: e.payload, "k")
    assert first == b"payload" * 100
    assert c.get_or_build(key, build, lambda e: e.payload, "k") == first  # memory
    fresh = cache.CompileCache("test", ".bin")  # another process: disk
    assert fresh.get_or_build(key, build, lambda e: e.payload, "k") == first
    assert len(builds) == 1
    info = cache.info()
    assert info["test entries"] == 1 and info["total entries"] == 1
    assert cache.clear() == 1 and cache.info()["total entries"] == 0


def test_key_covers_source_compiler_flags_arch_and_options() -> None:
    base = cache.cache_key("cpu", "src", ENV, "x86_64-znver3", {"fastmath": False})
    variants = [
        cache.cache_key("cpu", "src2", ENV, "x86_64-znver3", {"fastmath": False}),
        cache.cache_key("cpu", "src", BuildEnv("test", ("cc",), "cc 1.1", ("-O2",)),
                        "x86_64-znver3", {"fastmath": False}),
        cache.cache_key("cpu", "src", ENV.with_flags("-ffast-math"), "x86_64-znver3",
                        {"fastmath": False}),
        cache.cache_key("cpu", "src", ENV, "x86_64-skylake", {"fastmath": False}),
        cache.cache_key("cpu", "src", ENV, "x86_64-znver3", {"fastmath": True}),
        cache.cache_key("cuda", "src", ENV, "x86_64-znver3", {"fastmath": False}),
    ]
    assert len({base, *variants}) == 7
    assert base == cache.cache_key("cpu", "src", ENV, "x86_64-znver3", {"fastmath": False})


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage", "empty"])
def test_corrupt_entries_are_detected_and_rebuilt(cache_dir: Path, damage: str) -> None:
    c = cache.CompileCache("test", ".bin")
    key = cache.cache_key("test", damage, ENV, "arch")
    entry = c.store(key, os.urandom(4096))
    data = entry.path.read_bytes()
    damaged = {"truncate": data[:1000], "flip": data[:10] + bytes([data[10] ^ 1]) + data[11:],
               "garbage": b"not a kiln entry", "empty": b""}[damage]
    entry.path.write_bytes(damaged)
    assert c.lookup(key) is None
    assert not entry.path.exists()  # removed, so the next build replaces it
    rebuilt = cache.CompileCache("test", ".bin").get_or_build(
        key, lambda: b"rebuilt", lambda e: e.payload, "k")
    assert rebuilt == b"rebuilt" and c.lookup(key).payload == b"rebuilt"


WRITER = """
import sys
from pathlib import Path
from kiln.framework import cache
path = Path(sys.argv[1])
print("writing", flush=True)
cache.write_entry(path, b"x" * (1 << 30))  # 1 GiB in 1 MiB chunks: killed long before the end
"""


def test_a_kill_during_a_write_leaves_no_entry(cache_dir: Path) -> None:
    path = cache_dir / "test" / "victim.bin"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE)
    assert proc.stdout.readline().strip() == b"writing"
    deadline = time.monotonic() + 30
    while not list(path.parent.glob("victim.bin.tmp-*")) and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    leftovers = list(path.parent.glob("victim.bin.tmp-*"))
    assert leftovers, "the writer was killed before it started writing"
    assert not path.exists() and cache.read_entry(path) is None
    assert cache.info()["temporary files"] == len(leftovers)
    cache.write_entry(path, b"whole")  # the next writer is not disturbed by the leftover
    assert cache.read_entry(path) == b"whole"
    assert cache.clear() == 1 + len(leftovers)


COMPILER = """
import sys, numpy as np, kiln
from kiln import f32, i32
@kiln.kernel
def saxpy(a: f32, x: f32[:], y: f32[:], n: i32):
    i = kiln.global_id(0)
    if i < n:
        y[i] = a * x[i] + y[i]
x = np.arange(1000, dtype=np.float32)
y = np.ones(1000, np.float32)
saxpy[4, 256](np.float32(2), x, y, 1000)
assert np.array_equal(y, 2 * x + 1), y
print("ok")
"""


def test_concurrent_processes_compile_the_same_kernel(cache_dir: Path, tmp_path: Path) -> None:
    import kiln

    cpu = next(e for e in kiln.backends() if e.name == "cpu")
    if not cpu.available:
        pytest.skip(f"no C compiler with OpenMP here: {cpu.reason}")
    script = tmp_path / "saxpy.py"
    script.write_text(textwrap.dedent(COMPILER))
    env = {**os.environ, "KILN_CACHE_DIR": str(cache_dir), "KILN_LOG": "info",
           "KILN_BACKEND": "cpu"}  # the cpu backend's cache entries, whatever else is here
    procs = [subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    results = [p.communicate(timeout=120) for p in procs]
    for (out, err), p in zip(results, procs):
        assert p.returncode == 0, err
        assert out.strip() == "ok"
    entries = list((cache_dir / "cpu").glob("*.so"))
    assert len(entries) == 1 and cache.read_entry(entries[0]) is not None
    assert not list((cache_dir / "cpu").glob("*.tmp-*"))
    again = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                           text=True, timeout=120)
    assert again.returncode == 0 and "cached (disk, kernel key)" in again.stderr, again.stderr
    assert "compiled" not in again.stderr
