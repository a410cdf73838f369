"""The compile cache every JIT backend uses: in memory, and on disk under `KILN_CACHE_DIR`.

Keys (`cache_key`) hash everything that changes a binary: kiln's version, the backend, the
generated source, the build environment's identity (compiler, version, flags), the target
architecture and the backend options. An entry on disk is one file,
`<root>/<backend>/<key><suffix>`: the payload (a shared library, a cubin, ...) followed by
a footer (magic, payload length, SHA-256). Payloads stay directly loadable (ELF loaders
ignore trailing bytes). Writes go to a temporary file renamed into place, so a reader sees
a whole entry or none; a truncated or corrupt entry fails its footer check and is rebuilt;
processes sharing the directory at most compile the same kernel twice.

`KILN_LOG=info` logs one line per kernel: compiled or cached, and how long it took.
A second level keyed before the frontend runs, the kernel key, is `kiln.execution.kernelcache`.
The `kiln cache` command uses `info()` and `clear()`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import struct
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from ..options import KernelOptions
from ..version import __version__
from .buildenv import BuildEnv

T = TypeVar("T")

MAGIC = b"KILNC001"
FOOTER = struct.Struct("<8sQ32s")
TMP_MARK = ".tmp-"
STALE_TMP_SECONDS = 600.0

logger = logging.getLogger("kiln.cache")


def _configure_logging() -> None:
    """Honour KILN_LOG (e.g. `info`, `debug`) when the application configured nothing."""
    level = os.environ.get("KILN_LOG", "").strip().upper()
    root = logging.getLogger("kiln")
    if not level or root.handlers or not isinstance(logging.getLevelName(level), int):
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("kiln: %(message)s"))
    root.addHandler(handler)
    root.setLevel(level)


_configure_logging()


def cache_root() -> Path:
    """`KILN_CACHE_DIR`, else the platform's user cache directory for kiln."""
    env = os.environ.get("KILN_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("kiln"))


def cache_key(backend: str, source: str, env: BuildEnv, arch: str,
              options: KernelOptions | dict[str, Any] | None = None) -> str:
    """The hex key of one compiled binary (options by value: equal options, equal keys)."""
    named = options.as_dict() if isinstance(options, KernelOptions) else options or {}
    parts = {"kiln": __version__, "backend": backend, "env": env.identity, "arch": arch,
             "options": sorted((str(k), repr(v)) for k, v in named.items())}
    h = hashlib.sha256(json.dumps(parts).encode())
    h.update(b"\0")
    h.update(source.encode())
    return h.hexdigest()


# ---------------------------------------------------------------- disk entries


def write_entry(path: Path, payload: bytes) -> None:
    """Write payload + footer atomically: a temporary file in the same directory, renamed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}{TMP_MARK}{os.getpid()}-{threading.get_ident()}")
    footer = FOOTER.pack(MAGIC, len(payload), hashlib.sha256(payload).digest())
    try:
        with open(tmp, "wb") as f:
            view = memoryview(payload)
            for start in range(0, len(view), 1 << 20):  # chunks: a kill leaves a short tmp
                f.write(view[start:start + (1 << 20)])
            f.write(footer)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def read_entry(path: Path) -> bytes | None:
    """The payload of a valid entry; None when missing, truncated or corrupt."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if len(data) < FOOTER.size:
        return None
    magic, length, digest = FOOTER.unpack_from(data, len(data) - FOOTER.size)
    payload = data[: len(data) - FOOTER.size]
    if magic != MAGIC or length != len(payload) or hashlib.sha256(payload).digest() != digest:
        return None
    return payload


@dataclass(frozen=True)
class CacheEntry:
    """A verified entry on disk: load `path` directly (dlopen) or use `payload`."""

    key: str
    path: Path
    payload: bytes


class CompileCache:
    """One backend's cache: `get_or_build(key, build, load)` is all a backend calls."""

    def __init__(self, backend: str, suffix: str = ".bin") -> None:
        self.backend = backend
        self.suffix = suffix
        self._memory: dict[str, Any] = {}
        self._lock = threading.Lock()

    @property
    def directory(self) -> Path:
        return cache_root() / self.backend

    def path(self, key: str) -> Path:
        return self.directory / f"{key}{self.suffix}"

    def lookup(self, key: str) -> CacheEntry | None:
        """A valid disk entry, or None (a corrupt one is removed so it gets rebuilt)."""
        path = self.path(key)
        payload = read_entry(path)
        if payload is None:
            if path.exists():
                logger.warning("%s: discarding a corrupt cache entry %s", self.backend, path)
                path.unlink(missing_ok=True)
            return None
        return CacheEntry(key, path, payload)

    def store(self, key: str, payload: bytes) -> CacheEntry:
        """Write an entry; falls back to no disk cache when the directory is unwritable."""
        path = self.path(key)
        try:
            write_entry(path, payload)
            _remove_stale_tmp(path.parent)
        except OSError as exc:
            logger.warning("%s: cannot write the compile cache at %s (%s)", self.backend,
                           path, exc)
            fallback = _private_dir() / self.backend / path.name
            write_entry(fallback, payload)
            path = fallback
        return CacheEntry(key, path, payload)

    def get_or_build(self, key: str, build: Callable[[], bytes],
                     load: Callable[[CacheEntry], T], label: str) -> T:
        """The loaded binary for `key`: from memory, else disk, else `build()` then stored.

        `build` returns the payload bytes; `load` turns an entry into what the backend
        needs (a ctypes library, a CUDA module, ...). `label` names the kernel in the log.
        """
        with self._lock:
            if key in self._memory:
                logger.info("%s %s: cached (memory)", self.backend, label)
                return self._memory[key]
        start = time.perf_counter()
        entry = self.lookup(key)
        how = "cached (disk, source key)"
        if entry is None:
            entry = self.store(key, build())
            how = "compiled"
        loaded = load(entry)
        elapsed = (time.perf_counter() - start) * 1e3
        logger.info("%s %s: %s in %.1f ms", self.backend, label, how, elapsed)
        with self._lock:
            self._memory.setdefault(key, loaded)
            return self._memory[key]

    def forget(self) -> None:
        """Drop the in-memory cache (the disk stays)."""
        with self._lock:
            self._memory.clear()


def _private_dir() -> Path:
    path = Path(tempfile.gettempdir()) / f"kiln-cache-{os.getuid() if hasattr(os, 'getuid') else 0}"
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def _remove_stale_tmp(directory: Path) -> None:
    """Temporary files left by killed writers, once they are clearly abandoned."""
    now = time.time()
    for p in directory.glob(f"*{TMP_MARK}*"):
        with contextlib.suppress(OSError):
            if now - p.stat().st_mtime > STALE_TMP_SECONDS:
                p.unlink()


# ---------------------------------------------------------------- `kiln cache`


def info() -> dict[str, Any]:
    """What `kiln cache info` shows: the directory, entries and bytes per backend."""
    root = cache_root()
    out: dict[str, Any] = {"directory": str(root)}
    total_entries = total_bytes = temporary = 0
    if root.is_dir():
        for backend_dir in sorted(p for p in root.iterdir() if p.is_dir()):
            files = [p for p in backend_dir.iterdir() if p.is_file()]
            entries = [p for p in files if TMP_MARK not in p.name]
            temporary += len(files) - len(entries)
            size = sum(p.stat().st_size for p in entries)
            out[f"{backend_dir.name} entries"] = len(entries)
            out[f"{backend_dir.name} bytes"] = size
            total_entries += len(entries)
            total_bytes += size
    out["total entries"] = total_entries
    out["total bytes"] = total_bytes
    out["temporary files"] = temporary
    return out


def clear(backend: str | None = None) -> int:
    """Remove every cache file (of one backend, when given); return how many were removed."""
    root = cache_root()
    dirs = [root / backend] if backend else ([p for p in root.iterdir() if p.is_dir()]
                                             if root.is_dir() else [])
    removed = 0
    for d in dirs:
        if not d.is_dir():
            continue
        for p in d.iterdir():
            if p.is_file():
                p.unlink(missing_ok=True)
                removed += 1
        with contextlib.suppress(OSError):
            d.rmdir()
    return removed
