"""The compile cache under real backends (cpu, OpenCL): threads compiling one new kernel,
folders kiln cannot write, and entries or folders it must not trust, which an attacker
fills with a working library of another kernel (so loading it would change the result);
and the other things kiln keeps there: the CUDA launch shim and the cpu toolchain's memo."""

from __future__ import annotations

import ctypes
import itertools
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import kiln
from kiln import f32, i32
from kiln.builtin_backends.cpu import toolchain
from kiln.framework import cache
from tests.helpers import REPO, give_away, requires_backend, warnings_about

pytestmark = pytest.mark.compiler

BACKENDS = [pytest.param("cpu", marks=requires_backend("cpu", "no C compiler with OpenMP")),
            pytest.param("opencl", marks=requires_backend("opencl", "no OpenCL device"))]
N = 256
_offsets = itertools.count(1)


def adder(offset: float) -> kiln.Kernel:
    """A kernel adding `offset`: each offset is a new kernel (its source holds the value)."""

    @kiln.kernel
    def add(x: f32[:], y: f32[:], n: i32):
        i = kiln.global_id(0)
        if i < n:
            y[i] = x[i] + offset

    return add


def run_adder(offset: float, backend: str) -> np.ndarray:
    """`x + offset` computed by a fresh kernel object on `backend`."""
    x = np.arange(N, dtype=np.float32)
    y = np.zeros(N, np.float32)
    kiln.launch(adder(offset), 1, N, (x, y, N), device=backend)
    return y - x


def forget_binaries(backend: str) -> None:
    """Empty the backend's in-memory binary cache: the next build reads the disk."""
    dev = kiln.device(backend)
    binaries = dev.handle.cache if backend == "opencl" else dev.backend.loader.cache
    binaries.forget()


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh cache folder, and a fallback folder of this test's own."""
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    yield tmp_path / "cache"


@pytest.mark.parametrize("backend", BACKENDS)
def test_threads_compiling_one_new_kernel(backend: str, cache_dir: Path,
                                          caplog: pytest.LogCaptureFixture) -> None:
    """Each thread its own kernel object of one new source: all miss, compile and store at
    once; none may delete another's fresh entry as corrupt (its load would then fail)."""
    caplog.set_level(logging.INFO, "kiln.cache")
    offset = float(next(_offsets))
    start = threading.Barrier(8)

    def compile_and_run(_: int) -> np.ndarray:
        start.wait()
        return run_adder(offset, backend)

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(compile_and_run, range(8)))
    assert all(np.array_equal(r, np.full(N, offset, np.float32)) for r in results)
    assert not warnings_about(caplog, ""), warnings_about(caplog, "")
    for entry in (cache_dir / backend).iterdir():
        assert cache.read_entry(entry) is not None and cache.TMP_MARK not in entry.name


def entry_swap(backend: str, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
               ) -> tuple[float, Path]:
    """Compile kernels `+a` and `+b` in a first cache folder; in `cache_dir`, put `+b`'s
    entries (valid, footer and all) under `+a`'s names, as an attacker would. Returns `a`
    and the backend's folder in `cache_dir` (each name `+a` will look for)."""
    first = cache_dir.with_name("first")
    a, b = float(next(_offsets)), float(next(_offsets))
    monkeypatch.setenv("KILN_CACHE_DIR", str(first))
    assert np.array_equal(run_adder(a, backend), np.full(N, a, np.float32))
    entries_a = {p.suffix: p for p in (first / backend).iterdir()}
    assert np.array_equal(run_adder(b, backend), np.full(N, b, np.float32))
    entries_b = {p.suffix: p for p in set((first / backend).iterdir()) - {*entries_a.values()}}
    monkeypatch.setenv("KILN_CACHE_DIR", str(cache_dir))
    folder = cache_dir / backend
    folder.mkdir(parents=True, mode=0o700)
    os.chmod(cache_dir, 0o700)
    for suffix, source in entries_b.items():
        shutil.copyfile(source, folder / entries_a[suffix].name)
        os.chmod(folder / entries_a[suffix].name, 0o600)
    assert len(entries_a) == len(entries_b) == 2  # the kernel key's and the binary's
    forget_binaries(backend)
    return a, folder


def as_link(path: Path) -> str:
    """`path` becomes a link to a copy of itself."""
    target = path.with_name(path.name + ".target")
    path.rename(target)
    path.symlink_to(target)
    return "symbolic link"


def as_folder(path: Path) -> str:
    path.unlink()
    path.mkdir()
    return "not a regular file"


ENTRY_DAMAGE: dict[str, Callable[[Path], str]] = {
    "symlink": as_link,
    "other owner": lambda p: give_away(p) or "owned by uid",
    "group-writable": lambda p: os.chmod(p, 0o620) or "writable by group or others",
    "other-writable": lambda p: os.chmod(p, 0o602) or "writable by group or others",
    "folder": as_folder,
}


@pytest.mark.parametrize("how", ENTRY_DAMAGE)
@pytest.mark.parametrize("backend", BACKENDS)
def test_untrusted_entries_are_not_loaded(backend: str, how: str, cache_dir: Path,
                                          caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    a, folder = entry_swap(backend, cache_dir, monkeypatch)
    entries = sorted(folder.iterdir())
    reasons = [ENTRY_DAMAGE[how](entry) for entry in entries]
    assert np.array_equal(run_adder(a, backend), np.full(N, a, np.float32))
    for entry, reason in zip(entries, reasons):
        assert warnings_about(caplog, f"entry {entry}:", reason, "compiling it again")


FOLDER_DAMAGE: dict[str, Callable[[Path], str]] = {
    "symlink": as_link,
    "other owner": lambda p: give_away(p) or "owned by uid",
    "group-writable": lambda p: os.chmod(p, 0o770) or "writable by group or others",
    "other-writable": lambda p: os.chmod(p, 0o707) or "writable by group or others",
}


@pytest.mark.parametrize("how", FOLDER_DAMAGE)
@pytest.mark.parametrize("backend", BACKENDS)
def test_untrusted_folders_are_not_used(backend: str, how: str, cache_dir: Path,
                                        caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    a, folder = entry_swap(backend, cache_dir, monkeypatch)
    reason = FOLDER_DAMAGE[how](folder)
    assert np.array_equal(run_adder(a, backend), np.full(N, a, np.float32))
    fallback = cache_dir.parent / f"kiln-cache-{os.geteuid()}" / backend
    assert warnings_about(caplog, f"folder {folder}:", reason, str(fallback))
    assert len(list(fallback.iterdir())) == 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_trusted_planted_entry_is_loaded(backend: str, cache_dir: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The control for the two tests above: the same swap, left trustworthy, is loaded
    (so their right answers come from refusing the entries, not from missing them)."""
    a, _ = entry_swap(backend, cache_dir, monkeypatch)
    assert not np.array_equal(run_adder(a, backend), np.full(N, a, np.float32))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_file_in_the_backend_folders_place(backend: str, cache_dir: Path,
                                             caplog: pytest.LogCaptureFixture) -> None:
    folder = cache_dir / backend
    cache_dir.mkdir(mode=0o700)
    folder.write_text("not a folder")
    offset = float(next(_offsets))
    assert np.array_equal(run_adder(offset, backend), np.full(N, offset, np.float32))
    assert warnings_about(caplog, f"folder {folder}:", "not a folder")


ADDERS = """
import sys
import numpy as np
from tests.framework.test_cache_safety import run_adder
for offset in map(float, sys.argv[2:]):
    assert np.array_equal(run_adder(offset, sys.argv[1]), np.full(256, offset, np.float32))
print("ok")
"""


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_read_only_cache_is_read_and_new_kernels_compile(backend: str,
                                                           tmp_path: Path) -> None:
    """A read-only cache: its entries load; new kernels compile into the fallback with one
    warning naming the folder and why, and the next process finds them there. Root writes
    anywhere, so as root the programs run without the capabilities that let it
    (`setpriv`)."""
    folders = (tmp_path / "cache", tmp_path / "cache" / backend)
    (tmp_path / "tmp").mkdir()
    env = {**os.environ, "KILN_CACHE_DIR": str(folders[0]), "TMPDIR": str(tmp_path / "tmp"),
           "PYTHONPATH": str(REPO), "KILN_LOG": "info"}
    adders = [sys.executable, "-c", ADDERS, backend]
    subprocess.run([*adders, "1"], env=env, check=True, capture_output=True, timeout=120)
    for folder in folders:
        folder.chmod(0o500)
    try:
        child, again = (subprocess.run([*unprivileged(), *adders, *offsets], env=env,
                                       capture_output=True, text=True, timeout=120)
                        for offsets in (["1", "2", "3"], ["2"]))
    finally:
        for folder in folders:
            folder.chmod(0o700)
    assert child.returncode == 0 and child.stdout.strip() == "ok", child.stderr
    assert child.stderr.count("cached (disk, kernel key)") == 1, child.stderr  # `+1`
    fallback = tmp_path / "tmp" / f"kiln-cache-{os.geteuid()}" / backend
    warned = [line for line in child.stderr.splitlines()
              if f"cannot write to the compile cache folder {folders[1]} (Permission denied)"
              in line and str(fallback) in line]
    assert len(warned) == 1, child.stderr  # once, though two kernels were compiled
    assert len(list(fallback.iterdir())) == 4  # two kernel keys, two binaries
    assert len(list(folders[1].iterdir())) == 2  # the read-only cache is unchanged
    assert again.returncode == 0 and "cached (disk, kernel key)" in again.stderr  # from there
    assert "compiled" not in again.stderr, again.stderr


def unprivileged() -> list[str]:
    """The command prefix that makes root's child respect file modes (nothing for others)."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root, and util-linux's setpriv (to drop the capability to "
                    "write read-only folders) is not installed")
    return [setpriv, "--bounding-set=-dac_override,-dac_read_search", "--"]


# ---------------------------------------------------------------- other native code it keeps


@requires_backend("cpu", "no C compiler to build the launch shim")
def test_the_cuda_launch_shim_is_a_checked_entry(cache_dir: Path,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    from kiln.builtin_backends.cuda import shim

    def fresh_shim() -> int:
        shim.compiled.cache_clear()
        shim._CACHE.forget()
        address = ctypes.cast(RETURN_SEVEN, ctypes.c_void_p).value
        _, arg = shim.record(1, (1, 1, 1), (1, 1, 1), 0, 0, 0, entry=address)
        return int(shim.compiled()(arg))

    try:
        assert fresh_shim() == 7
        (entry,) = (cache_dir / "cuda").iterdir()
        assert cache.read_entry(entry) is not None
        entry.chmod(0o666)
        assert fresh_shim() == 7
        assert warnings_about(caplog, f"entry {entry}:", "writable by group or others")
        assert entry.stat().st_mode & 0o777 == 0o600  # rebuilt and replaced
    finally:
        shim.compiled.cache_clear()


RETURN_SEVEN = ctypes.CFUNCTYPE(ctypes.c_int)(lambda *args: 7)


@requires_backend("cpu", "no C compiler with OpenMP")
@pytest.mark.parametrize("trusted", [False, True])
def test_the_toolchain_memo_is_a_checked_entry(cache_dir: Path, trusted: bool,
                                               caplog: pytest.LogCaptureFixture) -> None:
    """The probe's memo names the libraries every kernel links: planted where it is not
    trusted, it is ignored; the control shows the same memo, trusted, is used."""
    tc = toolchain.toolchain()
    compiler, flags = tc.env.compiler, tc.env.flags
    real = toolchain.probed(compiler, flags)
    (memo,) = (cache_dir / "toolchain").iterdir()
    cache.write_entry(memo, json.dumps({**real, "libraries": ["-lplanted"]}).encode())
    if not trusted:
        memo.chmod(0o646)
    assert (toolchain.probed(compiler, flags)["libraries"] == ["-lplanted"]) == trusted
    assert bool(warnings_about(caplog, f"entry {memo}:", "writable by")) != trusted
