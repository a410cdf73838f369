"""Every `KILN_*` environment variable kiln reads, declared once (docs/configuration.md).

`SETTINGS` names each variable with its type, default and meaning; the accessors below
read the environment each time they are called, so a change made at run time (a test's
`monkeypatch.setenv`) is seen by the next read. When a variable is read (at import, once
per process, per call) is decided by the caller, and the table in docs/configuration.md
says it. A value that does not parse is a `SettingError` naming the variable, the value
and what it should be; an empty value means unset.
"""

from __future__ import annotations

import logging
import os
import shlex
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .errors import SettingError


@dataclass(frozen=True)
class Setting:
    """One variable: its name, type, default (as the docs write it) and meaning."""

    name: str
    type: str
    default: str
    meaning: str


SETTINGS: tuple[Setting, ...] = (
    Setting("KILN_BACKEND", "device spec", "unset: the best device",
            "the device `kiln.device()` returns when given no spec (`cpu`, `cuda:1`)"),
    Setting("KILN_DISABLE_<NAME>", "flag", "0",
            "1 makes backend NAME unavailable, e.g. `KILN_DISABLE_CUDA=1`"),
    Setting("KILN_DEBUG", "flag", "0",
            "1 makes `debug=True` the default of every kernel (bounds checks)"),
    Setting("KILN_LOG", "log level", "unset: no handler",
            "a level (`info`, `debug`) for kiln's loggers, when the application set none"),
    Setting("KILN_CACHE_DIR", "path", "the user cache directory",
            "the compile cache's folder on disk"),
    Setting("KILN_NUM_THREADS", "positive integer", "every core the process may use",
            "OpenMP threads of a cpu launch (and the cpu device's compute units)"),
    Setting("KILN_CC", "command", "cc", "the C compiler of the cpu backend and of `kiln build`"),
    Setting("KILN_CFLAGS", "shell words", "none", "flags added to every cpu compile"),
    Setting("KILN_CUDA_SHIM", "flag", "1",
            "0 launches CUDA kernels through cuda-bindings instead of kiln's C launch shim"),
    Setting("KILN_OPENCL_LOADER", "path", "the system's libOpenCL.so.1",
            "the OpenCL ICD loader a built opencl library loads"),
    Setting("KILN_DASK_DEVICE", "device spec", "unset: spread over the best backend",
            "the device a Dask worker launches its chunks on"),
    Setting("KILN_AUTOTUNE", "flag", "1",
            "0 makes an autotuned kernel launch its first candidate, untimed"),
)
"""Every variable kiln reads, in the order of docs/configuration.md's table."""

NAMES: frozenset[str] = frozenset(s.name for s in SETTINGS)

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def _raw(name: str) -> str:
    """The variable's value, "" when unset."""
    return os.environ.get(name, "")


def _flag(name: str, default: bool) -> bool:
    text = _raw(name).strip().lower()
    if not text:
        return default
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise _bad(name, "1 or 0 (or true/false, yes/no, on/off)")


def _bad(name: str, expected: str) -> SettingError:
    return SettingError(f"environment variable {name}={_raw(name)!r}: expected {expected}")


def backend() -> str | None:
    """`KILN_BACKEND`: the spec of the default device, None when unset."""
    return _raw("KILN_BACKEND") or None


def backend_disabled(name: str) -> bool:
    """`KILN_DISABLE_<NAME>`: whether the user hid backend `name`."""
    return _flag(f"KILN_DISABLE_{name.upper()}", False)


def autotune() -> bool:
    """`KILN_AUTOTUNE`: whether autotuned kernels time their candidates."""
    return _flag("KILN_AUTOTUNE", True)


def debug() -> bool:
    """`KILN_DEBUG`: the default of the `debug` kernel option."""
    return _flag("KILN_DEBUG", False)


def log_level() -> str | None:
    """`KILN_LOG`: a `logging` level name (upper case), None when unset."""
    level = _raw("KILN_LOG").strip().upper()
    if level and not isinstance(logging.getLevelName(level), int):
        raise _bad("KILN_LOG", "a logging level: debug, info, warning, error or critical")
    return level or None


def cache_dir() -> Path | None:
    """`KILN_CACHE_DIR` (with `~` expanded), None when unset."""
    text = _raw("KILN_CACHE_DIR")
    return Path(text).expanduser() if text else None


def num_threads() -> int | None:
    """`KILN_NUM_THREADS`, None when unset."""
    text = _raw("KILN_NUM_THREADS").strip()
    if not text:
        return None
    if not text.isdigit() or int(text) == 0:
        raise _bad("KILN_NUM_THREADS", "a positive integer (threads per cpu launch)")
    return int(text)


def c_compiler() -> str:
    """`KILN_CC`: the C compiler command, `cc` when unset."""
    return _raw("KILN_CC") or "cc"


def c_flags() -> tuple[str, ...]:
    """`KILN_CFLAGS` split as a shell would."""
    try:
        return tuple(shlex.split(_raw("KILN_CFLAGS")))
    except ValueError as exc:  # an unclosed quote
        raise _bad("KILN_CFLAGS", f"compiler flags as a shell writes them ({exc})") from None


def cuda_shim() -> bool:
    """`KILN_CUDA_SHIM`: whether CUDA launches may use kiln's C launch shim."""
    return _flag("KILN_CUDA_SHIM", True)


def opencl_loader() -> str | None:
    """`KILN_OPENCL_LOADER`: the ICD loader built opencl libraries load, None when unset."""
    return _raw("KILN_OPENCL_LOADER") or None


def dask_device() -> str | None:
    """`KILN_DASK_DEVICE`: the spec of a Dask worker's device, None when unset."""
    return _raw("KILN_DASK_DEVICE") or None


@contextmanager
def exported(values: Mapping[str, str]) -> Iterator[None]:
    """The process environment with `values` set for the `with` block only, for a native
    library that reads variables (with C's `getenv`) while it loads or starts up; each one
    is restored (or removed) afterwards, so the user's environment and child processes
    are as they were. Not thread-safe against other writers of `os.environ`."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, old in saved.items():
            if old is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = old
