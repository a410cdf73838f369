"""The kernel key: the disk cache's second level, computed before the frontend runs.

The compile cache's key (`cache.cache_key`, the *source key*) covers the generated source,
so finding a binary by it needs the frontend, the IR passes and code generation first
(milliseconds of Python). The *kernel key* covers what those steps read instead: kiln's own
code, the kernel's source and everything it can see (`kiln.execution.fingerprint`), the
argument types (constexpr values included), the device's capabilities, its backend's build
identity and intrinsic implementations, and the kernel's options. Under it, every JIT
backend keeps the lowered program, the parameters the kernel writes and its
`CompiledKernel` (plain data), pickled, in one compile-cache entry (`<backend>/<key>.kernel`,
with the cache's integrity footer). A launch in a later process (or by a fresh kernel
object) that finds it loads the compiled kernel without running the frontend.

A kernel that reads a name of a kind the fingerprint does not know has no kernel key and
takes the usual path; so does a program that cannot be pickled. `KILN_LOG=info` says which
key hit: `cached (disk, kernel key)` here, `cached (disk, source key)` in the compile cache.
Entries are pickles, as trusted as the binaries beside them: the compile cache reads only
folders and files of this user's that no one else can write (`kiln.framework.cache`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import logging
import os
import pickle
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..framework.backend import Capabilities, CompiledKernel, JITBackend
from ..framework.cache import CompileCache
from ..ir.intrinsics import Lookup, intrinsics
from ..ir.nodes import Program
from ..ir.types import SCALAR_BY_NAME, ScalarType, StructType, Type
from ..version import __version__
from .fingerprint import NotFingerprintable, fingerprint, type_fingerprint
from .state import LaunchState

if TYPE_CHECKING:
    from ..runtime.device import Device

SUFFIX = ".kernel"
PROTOCOL = pickle.HIGHEST_PROTOCOL
logger = logging.getLogger("kiln.cache")


@dataclass(frozen=True)
class CachedKernel:
    """What a kernel key finds: the program as the backend received it (after its passes),
    the names of the array parameters the kernel may write, and the compiled kernel."""

    program: Program
    written: frozenset[str]
    compiled: CompiledKernel


class KernelKey:
    """One kernel's key for one signature on one device: `load()`, or `store()` once built."""

    def __init__(self, key: str, backend: JITBackend, label: str) -> None:
        self.key, self.backend, self.label = key, backend, label
        self.cache = _cache(backend.name)

    def load(self) -> CachedKernel | None:
        """The cached kernel, or None (a miss, or an unreadable entry, which `store` replaces
        once the kernel is built: removing it here could remove a valid entry that another
        thread or process has just written in its place)."""
        start = time.perf_counter()
        entry = self.cache.lookup(self.key)
        if entry is None:
            logger.info("%s: not in the kernel cache (kernel key %.12s)", self.label, self.key)
            return None
        try:
            found = pickle.loads(entry.payload)
            if not isinstance(found, CachedKernel):
                raise TypeError(f"a {type(found).__name__}, not a cached kernel")
        except Exception as exc:  # written by another kiln, or damaged in a valid footer
            logger.warning("%s: ignoring an unreadable kernel cache entry %s (%s); "
                           "compiling it again", self.label, entry.path, exc)
            return None
        logger.info("%s: cached (disk, kernel key) in %.1f ms", self.label,
                    (time.perf_counter() - start) * 1e3)
        return found

    def store(self, program: Program, written: frozenset[str], compiled: CompiledKernel) -> None:
        """Keep a freshly built kernel under this key (never fails the launch)."""
        try:
            payload = _dumps(CachedKernel(program, written, compiled))
        except (pickle.PicklingError, TypeError, AttributeError) as exc:
            logger.info("%s: not stored under a kernel key (%s)", self.label, exc)
            return
        try:
            self.cache.store(self.key, payload)
        except OSError as exc:
            logger.warning("%s: cannot write the kernel cache (%s)", self.label, exc)


def kernel_key(kernel: LaunchState, arg_types: Sequence[Type], device: Device) -> KernelKey | None:
    """The kernel key for one launch signature, or None when the device's backend is no JIT
    backend, the kernel reads something `kiln.execution.fingerprint` cannot fingerprint, or
    the signature's program was built already (for another device): the fingerprint reads
    the globals now, which may differ from those the program was built with (a module-level
    constant changed since), and storing that build under it would poison the cache."""
    backend = device.backend
    if not isinstance(backend, JITBackend):
        return None
    label = f"{backend.name} {kernel.name}"
    if kernel.built(tuple(arg_types)):  # maybe with other globals than the key would read
        logger.info("%s: no kernel key (its program was built already, with the values "
                    "its globals had then)", label)
        return None
    try:
        parts = {
            "kiln": kiln_identity(),
            "backend": backend_identity(backend),
            "build": backend.build_identity(device),
            "device": capabilities_identity(device.capabilities),
            "intrinsics": intrinsics_identity(backend.intrinsic_implementation),
            "types": [type_fingerprint(t) for t in arg_types],
            "kernel": fingerprint(kernel.function),
        }
    except NotFingerprintable as exc:
        logger.info("%s: no kernel key (%s)", label, exc)
        return None
    except Exception as exc:  # an object that misbehaves when looked at: never fail a launch
        logger.info("%s: no kernel key (%s: %s)", label, type(exc).__name__, exc)
        return None
    key = hashlib.sha256(json.dumps(parts).encode()).hexdigest()
    return KernelKey(key, backend, label)


# ---------------------------------------------------------------- identities


@cache
def kiln_identity() -> str:
    """kiln's version with Python's and NumPy's; for a source checkout (kiln not installed
    under site-packages), which changes without a new version, also the path, size and
    modification time of every module file."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256(f"{__version__} {sys.version} numpy {np.__version__} "
                       f"pickle {PROTOCOL}".encode())
    if not {"site-packages", "dist-packages"} & set(root.parts):
        h.update("".join(sorted(_module_files(str(root), len(str(root))))).encode())
    return h.hexdigest()


def _module_files(directory: str, prefix: int) -> list[str]:
    """`path size mtime` of every module file under `directory` (paths from kiln's root)."""
    out = []
    with os.scandir(directory) as entries:
        for e in entries:
            if e.name.endswith(".py"):
                st = e.stat()
                out.append(f"{e.path[prefix:]} {st.st_size} {st.st_mtime_ns}\n")
            elif e.name != "__pycache__" and e.is_dir():
                out += _module_files(e.path, prefix)
    return out


def backend_identity(backend: JITBackend) -> str:
    """The backend's class, and for a plugin the size and time of its module's file."""
    cls = type(backend)
    name = f"{backend.name} {cls.__module__}.{cls.__qualname__}"
    if cls.__module__.split(".")[0] == "kiln":
        return name
    file = getattr(sys.modules.get(cls.__module__), "__file__", None)
    if file:
        st = os.stat(file)
        name += f" {st.st_size} {st.st_mtime_ns}"
    return name


def capabilities_identity(caps: Capabilities) -> str:
    return repr([(f.name, sorted(map(repr, v)) if isinstance(v, frozenset) else v)
                 for f in dataclasses.fields(caps) for v in [getattr(caps, f.name)]])


_INTRINSIC_IDS: dict[tuple[Lookup, int], str] = {}


def intrinsics_identity(implementation: Lookup) -> str:
    """Every intrinsic's specification and its `implementation` (a backend's
    `intrinsic_implementation`: plugins and users may register and implement intrinsics);
    cached per backend and registry revision."""
    cache_key = (implementation, intrinsics.revision)
    found = _INTRINSIC_IDS.get(cache_key)
    if found is None:
        lines = []
        for name in intrinsics.names():
            spec = intrinsics[name]
            fields = " ".join(f"{k}={_identity(v)}" for k, v in vars(spec).items())
            lines.append(f"{fields} = {_identity(implementation(name))}")
        found = _INTRINSIC_IDS[cache_key] = hashlib.sha256("\n".join(lines).encode()).hexdigest()
    return found


def _identity(value: Any) -> str:
    """A registry entry: text by value; a function by name (and, outside kiln, its code)."""
    code = getattr(value, "__code__", None)
    if not callable(value) or isinstance(value, type):
        return repr(value)
    name = f"{getattr(value, '__module__', '')}.{getattr(value, '__qualname__', '')}"
    if code is not None and not name.startswith("kiln."):
        name += f" {hashlib.sha256(code.co_code + repr(code.co_consts).encode()).hexdigest()}"
    return name


# ---------------------------------------------------------------- entries


@cache
def _cache(backend: str) -> CompileCache:
    return CompileCache(backend, SUFFIX)


class _Pickler(pickle.Pickler):
    """Scalar types unpickle as kiln's singletons (code compares them by identity); records
    leave their Python class behind (a local class cannot be pickled, and nothing after the
    frontend needs it)."""

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, ScalarType):
            return (scalar_type, (obj.name,))
        if isinstance(obj, StructType) and obj.pyclass is not None:
            return (StructType, (obj.name, obj.fields))
        return NotImplemented


def scalar_type(name: str) -> ScalarType:
    return SCALAR_BY_NAME[name]


def _dumps(value: Any) -> bytes:
    out = io.BytesIO()
    _Pickler(out, PROTOCOL).dump(value)
    return out.getvalue()
