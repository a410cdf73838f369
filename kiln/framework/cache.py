"""The compile cache every JIT backend uses: in memory, and on disk under `KILN_CACHE_DIR`.

Keys (`cache_key`) hash everything that changes a binary: kiln's version, the backend, the
generated source, the build environment's identity (compiler, version, flags), the target
architecture and the backend options. An entry on disk is one file,
`<root>/<backend>/<key><suffix>`: the payload (a shared library, a cubin, ...) followed by
a footer (magic, payload length, SHA-256). Payloads stay directly loadable (ELF loaders
ignore trailing bytes); a text entry (Python source, say) ends with the footer as a last
comment line instead, so it stays importable. Writes go to a private temporary file
renamed into place, so a reader sees a whole entry or none; a truncated or corrupt entry
fails its footer check and is rebuilt, replaced by the same atomic rename (never deleted:
a concurrent writer may have just put a valid one there); threads and processes sharing
the directory at most compile the same kernel twice.

Entries are native code kiln loads into the process, so the cache trusts only what this
user alone can write: the root and backend folders (made with mode 0o700) and each entry
(opened without following symbolic links, checked on the open file) must be owned by the
user, writable by neither group nor others, and no symbolic link. A folder that fails, or
cannot be written, sends entries to `<tmp>/kiln-cache-<uid>` (made without `exist_ok`, or
else checked strictly: the user's, mode 0o700), else to a fresh `tempfile.mkdtemp` folder
(a folder that only cannot be written is still read first); an entry that fails is
compiled again and replaced. Each case is logged once as a warning naming the path and
the reason.

`KILN_LOG=info` logs one line per kernel: compiled or cached, and how long it took.
A second level keyed before the frontend runs, the kernel key, is `kiln.execution.kernelcache`.
The `kiln cache` command uses `info()` and `clear()`.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import hashlib
import json
import logging
import os
import shutil
import stat
import struct
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from .. import settings
from ..options import KernelOptions
from ..version import __version__
from .buildenv import BuildEnv

T = TypeVar("T")

MAGIC = b"KILNC001"
FOOTER = struct.Struct("<8sQ32s")
TMP_MARK = ".tmp-"
STALE_TMP_SECONDS = 600.0
_UID = os.geteuid() if hasattr(os, "geteuid") else None
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_LOCK = threading.Lock()
_OWN_FALLBACK: list[Path] = []  # this process's private fallback folder, once made
_WARNED: set[str] = set()
_FOLDERS: dict[tuple[str, str], Path] = {}  # (KILN_CACHE_DIR, backend): the folder in use

logger = logging.getLogger("kiln.cache")


def _configure_logging() -> None:
    """Honour KILN_LOG (e.g. `info`, `debug`) when the application configured nothing."""
    level = settings.log_level()
    root = logging.getLogger("kiln")
    if not level or root.handlers:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("kiln: %(message)s"))
    root.addHandler(handler)
    root.setLevel(level)


_configure_logging()


def cache_root() -> Path:
    """`KILN_CACHE_DIR`, else the platform's user cache directory for kiln."""
    chosen = settings.cache_dir()
    if chosen is not None:
        return chosen
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


class UnusableEntry(Exception):
    """A cache file kiln will not load: corrupt, or not to be trusted (the message says why)."""


def footer(payload: bytes, comment: str | None = None) -> bytes:
    """The footer of an entry: binary, or (for a text entry, `comment` its language's line
    comment) one last comment line, so that the entry stays valid source (importable)."""
    digest = hashlib.sha256(payload).digest()
    if comment is None:
        return FOOTER.pack(MAGIC, len(payload), digest)
    return f"\n{comment} {MAGIC.decode()} {len(payload)} {digest.hex()}\n".encode()


def split_entry(data: bytes, comment: str | None = None) -> bytes:
    """The payload of an entry's bytes; raises UnusableEntry where the footer is missing or
    does not match."""
    if comment is None:
        if len(data) < FOOTER.size:
            raise UnusableEntry("it is truncated")
        magic, length, digest = FOOTER.unpack_from(data, len(data) - FOOTER.size)
        payload = data[: len(data) - FOOTER.size]
        ok = magic == MAGIC and length == len(payload)
    else:
        payload, _, last = data[:-1].rpartition(b"\n")
        ok = data.endswith(b"\n") and footer(payload, comment) == b"\n" + last + b"\n"
    if not ok or footer(payload, comment) != data[len(payload):]:
        raise UnusableEntry("it is corrupt (its footer does not match its contents)")
    return payload


def write_entry(path: Path, payload: bytes, comment: str | None = None) -> None:
    """Write payload + footer atomically: a private temporary file (mode 0o600) in the same
    folder, renamed over `path` (which replaces a symbolic link, never writes through it).
    `comment`: a text entry's line comment (`footer`)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f"{path.name}{TMP_MARK}", dir=path.parent)
    end = footer(payload, comment)
    try:
        with open(fd, "wb") as f:
            view = memoryview(payload)
            for start in range(0, len(view), 1 << 20):  # chunks: a kill leaves a short tmp
                f.write(view[start:start + (1 << 20)])
            f.write(end)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def read_entry(path: Path, comment: str | None = None) -> bytes | None:
    """The payload of a valid entry, or None when there is none; raises UnusableEntry for a
    corrupt one or one kiln must not trust (see `untrusted`). Opened without following a
    symbolic link and checked on the open file, so what is checked is what is read.
    `comment`: a text entry's line comment (`footer`)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | _NOFOLLOW | _CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        symlink = exc.errno == errno.ELOOP
        raise UnusableEntry("it is a symbolic link" if symlink else
                            f"it cannot be opened ({exc.strerror or exc})") from None
    try:
        reason = untrusted(os.fstat(fd), folder=False)
        if reason:
            raise UnusableEntry(reason)
        with open(fd, "rb", closefd=False) as f:
            data = f.read()
    except OSError as exc:
        raise UnusableEntry(f"it cannot be read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
    return split_entry(data, comment)


def untrusted(st: os.stat_result, folder: bool) -> str | None:
    """Why a cache folder or entry with this `lstat`/`fstat` must not be trusted, or None.

    kiln loads native code from the cache into the process: whoever can write there could
    plant a library. So a folder or entry must be this user's, writable by no one else, and
    no symbolic link (which another user may point anywhere). Where there are no POSIX
    owners (Windows), modes say nothing either: only the kind is checked."""
    if stat.S_ISLNK(st.st_mode):
        return "it is a symbolic link"
    if not (stat.S_ISDIR(st.st_mode) if folder else stat.S_ISREG(st.st_mode)):
        return "it is not a folder" if folder else "it is not a regular file"
    if _UID is None:
        return None
    if st.st_uid != _UID:
        return f"it is owned by uid {st.st_uid}, not by this user (uid {_UID})"
    if st.st_mode & 0o022:
        return (f"it is writable by group or others (mode {st.st_mode & 0o777:#o}; "
                "`chmod go-w` it to use it)")
    return None


def checked_folder(path: Path) -> str | None:
    """Why `path` cannot hold cache entries (see `untrusted`), or None; made (mode 0o700,
    parents as `mkdir -p` makes them) when missing. A folder kiln cannot write is fine to
    read: writes then go to the fallback."""
    if not os.path.lexists(path):
        made = _made(path, parents=True)
        if isinstance(made, str):
            return made
    st = _lstat(path)
    return st if isinstance(st, str) else untrusted(st, folder=True)


def _made(path: Path, parents: bool) -> str | None:
    """Make the folder `path` (mode 0o700); why it could not be, or None. One made
    meanwhile by another thread or process is fine here: the caller checks it."""
    try:
        path.mkdir(mode=0o700, parents=parents)
    except FileExistsError:
        pass
    except OSError as exc:
        return f"it cannot be created ({exc.strerror or exc})"
    return None


def _lstat(path: Path) -> os.stat_result | str:
    """`path`'s own status (a link's, not its target's), or why it cannot be had."""
    try:
        return os.lstat(path)
    except OSError as exc:
        return f"it cannot be examined ({exc.strerror or exc})"


@dataclass(frozen=True)
class CacheEntry:
    """A verified entry on disk: load `path` directly (dlopen) or use `payload`."""

    key: str
    path: Path
    payload: bytes


class CompileCache:
    """One backend's cache: `get_or_build(key, build, load)` is all a backend calls."""

    def __init__(self, backend: str, suffix: str = ".bin", comment: str | None = None) -> None:
        """`comment` (a line comment, "#" for Python) makes entries text: the footer is a
        last comment line, so an entry is valid source a loader can import or read."""
        self.backend = backend
        self.suffix = suffix
        self.comment = comment
        self._memory: dict[str, Any] = {}
        self._lock = threading.Lock()

    @property
    def directory(self) -> Path:
        """`<KILN_CACHE_DIR>/<backend>` when it and the root pass `checked_folder`, else the
        fallback (with a warning, once). Decided once per process and setting: only this
        user (or root) can change a folder that passed."""
        setting = (str(settings.cache_dir() or ""), self.backend)
        found = _FOLDERS.get(setting)
        if found is None:
            found = _FOLDERS[setting] = self._choose_directory()
        return found

    def _choose_directory(self) -> Path:
        root = cache_root()
        for folder in (root, root / self.backend):
            reason = checked_folder(folder)
            if reason:
                fallback = fallback_folder(self.backend)
                _warn_once(f"not using the compile cache folder {folder}: {reason}; "
                           f"compiling into {fallback} instead")
                return fallback
        return root / self.backend

    def path(self, key: str) -> Path:
        return self.directory / f"{key}{self.suffix}"

    def lookup(self, key: str) -> CacheEntry | None:
        """A valid, trusted disk entry, or None. An unusable one is left in place (with a
        warning) for `store` to replace: deleting it could delete a valid entry another
        thread or process has just renamed over it. Where the folder misses, the fallback
        (where `store` writes what a read-only folder cannot take) is tried."""
        name = f"{key}{self.suffix}"
        folder = self.directory
        entry = self._read(key, folder / name)
        spare = None if entry else _existing_fallback(self.backend)
        if spare is not None and spare != folder:
            entry = self._read(key, spare / name)
        return entry

    def _read(self, key: str, path: Path) -> CacheEntry | None:
        try:
            payload = read_entry(path, self.comment)
        except UnusableEntry as exc:
            _warn_once(f"not loading the compile cache entry {path}: {exc}; compiling it again")
            return None
        return None if payload is None else CacheEntry(key, path, payload)

    def store(self, key: str, payload: bytes) -> CacheEntry:
        """Write an entry; where the folder cannot be written (read-only, a folder in the
        entry's place, a full disk), write it to the fallback instead (warned once)."""
        path = self.path(key)
        try:
            write_entry(path, payload, self.comment)
            _remove_stale_tmp(path.parent)
        except OSError as exc:
            fallback = fallback_folder(self.backend)
            _warn_once(f"cannot write to the compile cache folder {path.parent} "
                       f"({exc.strerror or exc}); compiling into {fallback} instead")
            path = fallback / path.name
            write_entry(path, payload, self.comment)
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


# ---------------------------------------------------------------- the fallback


def fallback_folder(backend: str) -> Path:
    """Where entries go when the cache folder cannot be used: `<tmp>/kiln-cache-<uid>`,
    shared by this user's processes, when `private_folder` accepts it; else a fresh
    folder of this process's own (`tempfile.mkdtemp`, removed at exit)."""
    shared = _shared_fallback()
    reason = private_folder(shared) or checked_folder(shared / backend)
    if reason is None:
        return shared / backend
    with _LOCK:
        if not _OWN_FALLBACK:
            _OWN_FALLBACK.append(Path(tempfile.mkdtemp(prefix="kiln-cache-")))
            atexit.register(shutil.rmtree, _OWN_FALLBACK[0], ignore_errors=True)
        own = _OWN_FALLBACK[0]
    _warn_once(f"not using the fallback compile cache folder {shared}: {reason}; "
               f"compiling into {own} instead")
    folder = own / backend
    folder.mkdir(mode=0o700, exist_ok=True)
    return folder


def private_folder(path: Path, make: bool = True) -> str | None:
    """Make `path` (mode 0o700, never `exist_ok`: in a shared folder such as /tmp another
    user may have made it first), or check the existing one strictly: a folder of this
    user's that no one else can even read. Why not, or None."""
    made = _made(path, parents=False) if make else None
    if made is not None:
        return made
    st = _lstat(path)
    if isinstance(st, str):
        return st
    reason = untrusted(st, folder=True)
    if reason is None and _UID is not None and st.st_mode & 0o077:
        reason = f"others can use it (mode {st.st_mode & 0o777:#o})"
    return reason


def _shared_fallback() -> Path:
    return Path(tempfile.gettempdir()) / f"kiln-cache-{_UID if _UID is not None else 0}"


def _existing_fallback(backend: str) -> Path | None:
    """The shared fallback's folder for `backend` where it exists and passes the checks."""
    shared = _shared_fallback()
    if private_folder(shared, make=False) is not None:
        return None
    folder = shared / backend
    with contextlib.suppress(OSError):
        if untrusted(os.lstat(folder), folder=True) is None:
            return folder
    return None


def _warn_once(message: str) -> None:
    """Log a cache warning once per process (each launch would repeat it)."""
    with _LOCK:
        if message in _WARNED:
            return
        _WARNED.add(message)
    logger.warning("%s", message)


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
                                             if root.is_dir() and not root.is_symlink() else [])
    removed = 0
    for d in dirs:
        if d.is_symlink() or not d.is_dir():  # never empty a folder a link points at
            continue
        for p in d.iterdir():
            if p.is_file():
                p.unlink(missing_ok=True)
                removed += 1
        with contextlib.suppress(OSError):
            d.rmdir()
    return removed
