"""The compile cache: atomic entries, corruption detection, concurrent threads and
processes, keys, and what it refuses to trust (folders and entries others could write)."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from kiln.framework import cache
from kiln.framework.buildenv import BuildEnv
from tests.helpers import OTHER_UID, give_away, warnings_about

ENV = BuildEnv("test", ("cc",), "cc 1.0", ("-O2",))




@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    return tmp_path


@pytest.fixture
def fallback(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The shared fallback folder kiln would use, `<tmp>/kiln-cache-<uid>`, in a temporary
    folder of this test's own (not made yet)."""
    tmp = tmp_path_factory.mktemp("tmp")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    return tmp / f"kiln-cache-{os.geteuid()}"


def payload_and_folder(c: cache.CompileCache, key: str) -> tuple[bytes, Path]:
    """Build (`b"built"`) or load the entry for `key`: its payload and where it lives."""
    return c.get_or_build(key, lambda: b"built", lambda e: (e.payload, e.path.parent), "k")


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


def test_text_entries_stay_importable_and_detect_damage(cache_dir: Path) -> None:
    """A text entry's footer is a last comment line: the entry imports as Python, and a
    changed byte or a lost line still fails the check."""
    c = cache.CompileCache("test", ".py", comment="#")
    key = cache.cache_key("test", "source", ENV, "arch")
    source = b"def answer():\n    return 42\n"
    path = c.get_or_build(key, lambda: source, lambda e: e.path, "k")
    namespace: dict[str, object] = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    assert namespace["answer"]() == 42  # type: ignore[operator]
    assert cache.CompileCache("test", ".py", comment="#").lookup(key).payload == source
    with pytest.raises(cache.UnusableEntry, match="footer"):
        cache.split_entry(path.read_bytes().replace(b"42", b"43"), "#")
    with pytest.raises(cache.UnusableEntry, match="footer"):
        cache.split_entry(source, "#")
    with pytest.raises(cache.UnusableEntry, match="footer"):  # binary footer expected
        cache.split_entry(path.read_bytes())


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
    assert entry.path.read_bytes() == damaged  # left in place: the rebuild replaces it
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


@pytest.mark.slow
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


@pytest.mark.slow
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
        assert "not loading" not in err, err  # none took another's fresh entry for corrupt
    entries = list((cache_dir / "cpu").glob("*.so"))
    assert len(entries) == 1 and cache.read_entry(entries[0]) is not None
    assert not list((cache_dir / "cpu").glob("*.tmp-*"))
    again = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                           text=True, timeout=120)
    assert again.returncode == 0 and "cached (disk, kernel key)" in again.stderr, again.stderr
    assert "compiled" not in again.stderr


def test_threads_building_one_new_entry_never_discard_each_others(cache_dir: Path,
                                                                  caplog: pytest.LogCaptureFixture
                                                                  ) -> None:
    """Threads that miss at once all build and store; none may take an entry another has
    just written for a corrupt one and delete it (the other's load, a dlopen of the path in
    a backend, would then fail)."""
    caplog.set_level(logging.WARNING, "kiln.cache")
    payload = os.urandom(1 << 18)
    for attempt in range(6):
        key = cache.cache_key("test", f"race {attempt}", ENV, "arch")
        start = threading.Barrier(12)

        def build_and_load(_: int, key: str = key, start: threading.Barrier = start) -> bytes:
            c = cache.CompileCache("test", ".bin")  # a cache each: separate kernels
            start.wait()
            return c.get_or_build(key, lambda: payload, lambda e: e.path.read_bytes(), "k")

        with ThreadPoolExecutor(12) as pool:
            loaded = list(pool.map(build_and_load, range(12)))
        assert all(data.startswith(payload) for data in loaded)
        assert cache.read_entry(cache.CompileCache("test", ".bin").path(key)) == payload
    assert not caplog.records, [r.getMessage() for r in caplog.records]


def test_a_folder_in_an_entrys_place_means_compiling_into_the_fallback(
        cache_dir: Path, fallback: Path, caplog: pytest.LogCaptureFixture) -> None:
    c = cache.CompileCache("test", ".bin")
    key = cache.cache_key("test", "folder", ENV, "arch")
    c.path(key).mkdir(parents=True)
    assert payload_and_folder(c, key) == (b"built", fallback / "test")
    assert warnings_about(caplog, str(c.path(key)), "not a regular file")
    assert warnings_about(caplog, f"folder {c.directory} (Is a directory)", str(fallback / "test"))
    assert payload_and_folder(cache.CompileCache("test", ".bin"), key) == (
        b"built", fallback / "test")  # a fresh cache finds it there


def test_a_file_in_the_cache_folders_place_means_the_fallback(
        cache_dir: Path, fallback: Path, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    root = cache_dir / "file"
    root.write_text("not a folder")
    monkeypatch.setenv("KILN_CACHE_DIR", str(root))
    c = cache.CompileCache("test", ".bin")
    assert payload_and_folder(c, "k1") == (b"built", fallback / "test")
    assert payload_and_folder(c, "k2") == (b"built", fallback / "test")
    assert len(warnings_about(caplog, str(root), "not a folder", str(fallback))) == 1  # once
    assert os.stat(fallback).st_mode & 0o777 == 0o700


# ---------------------------------------------------------------- what the cache trusts


def plant(path: Path, payload: bytes = b"planted") -> Path:
    """A valid entry at `path` (footer and all): what an attacker would write."""
    cache.write_entry(path, payload)
    return path


def untrusted_entry(path: Path, how: str) -> str:
    """Make the entry at `path` untrustworthy in the way `how` names; the reason expected."""
    if how == "symlink":
        target = plant(path.with_name("elsewhere"))
        path.unlink()
        path.symlink_to(target)
        return "symbolic link"
    if how == "other owner":
        give_away(path)
        return f"owned by uid {OTHER_UID}"
    os.chmod(path, {"group-writable": 0o620, "other-writable": 0o602}[how])
    return "writable by group or others"


@pytest.mark.parametrize("how", ["symlink", "other owner", "group-writable", "other-writable"])
def test_untrusted_entries_are_not_loaded_but_rebuilt(cache_dir: Path, how: str,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    c = cache.CompileCache("test", ".bin")
    key = cache.cache_key("test", how, ENV, "arch")
    path = plant(c.path(key))
    reason = untrusted_entry(path, how)
    assert payload_and_folder(c, key) == (b"built", cache_dir / "test")
    assert warnings_about(caplog, str(path), reason, "compiling it again")
    assert not path.is_symlink() and cache.read_entry(path) == b"built"  # replaced
    st = os.stat(path)
    assert st.st_uid == os.geteuid() and st.st_mode & 0o777 == 0o600


def untrusted_folder(cache_dir: Path, how: str, monkeypatch: pytest.MonkeyPatch
                     ) -> tuple[Path, str]:
    """A cache folder holding a planted entry, made untrustworthy as `how` names: the
    folder and the reason expected."""
    folder = cache_dir / "test"
    plant(folder / "k.bin")
    if how == "symlink":
        folder.rename(cache_dir / "elsewhere")
        folder.symlink_to(cache_dir / "elsewhere")
        return folder, "symbolic link"
    if how == "root symlink":
        monkeypatch.setenv("KILN_CACHE_DIR", str(cache_dir / "link"))
        (cache_dir / "link").symlink_to(cache_dir)
        return cache_dir / "link", "symbolic link"
    if how == "other owner":
        give_away(folder)
        return folder, f"owned by uid {OTHER_UID}"
    os.chmod(folder, {"group-writable": 0o770, "other-writable": 0o707}[how])
    return folder, "writable by group or others"


@pytest.mark.parametrize("how", ["symlink", "root symlink", "other owner", "group-writable",
                                 "other-writable"])
def test_untrusted_folders_are_not_used(cache_dir: Path, fallback: Path, how: str,
                                        caplog: pytest.LogCaptureFixture,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    folder, reason = untrusted_folder(cache_dir, how, monkeypatch)
    assert payload_and_folder(cache.CompileCache("test", ".bin"), "k") == (
        b"built", fallback / "test")
    assert warnings_about(caplog, f"compile cache folder {folder}:", reason, str(fallback))


@pytest.mark.parametrize("how", ["symlink", "other owner", "readable by others"])
def test_an_existing_fallback_folder_is_checked_strictly(
        cache_dir: Path, fallback: Path, how: str, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Another user may make `<tmp>/kiln-cache-<uid>` first (or a link by that name) and
    plant entries in it: kiln then takes a fresh private folder of its own."""
    monkeypatch.setenv("KILN_CACHE_DIR", str(cache_dir / "unusable"))
    (cache_dir / "unusable").write_text("a file where the cache folder should be")
    planted = cache_dir / "planted"
    plant(planted / "test" / "k.bin")
    planted.chmod(0o700)
    if how == "symlink":
        fallback.symlink_to(planted)
        reason = "symbolic link"
    else:
        planted.rename(fallback)
        if how == "other owner":
            give_away(fallback)
            reason = f"owned by uid {OTHER_UID}"
        else:
            fallback.chmod(0o755)
            reason = "others can use it (mode 0o755)"
    payload, folder = payload_and_folder(cache.CompileCache("test", ".bin"), "k")
    assert payload == b"built" and fallback not in folder.parents and folder.parent != planted
    assert folder.name == "test" and os.stat(folder.parent).st_mode & 0o777 == 0o700
    assert warnings_about(caplog, f"fallback compile cache folder {fallback}:", reason,
                          str(folder.parent))


def test_clear_never_empties_a_folder_through_a_link(cache_dir: Path, tmp_path_factory:
                                                     pytest.TempPathFactory) -> None:
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    (elsewhere / "precious.txt").write_text("not kiln's")
    (cache_dir / "test").symlink_to(elsewhere)
    plant(cache_dir / "real" / "k.bin")
    assert cache.clear() == 1 and cache.clear("test") == 0
    assert (elsewhere / "precious.txt").read_text() == "not kiln's"
