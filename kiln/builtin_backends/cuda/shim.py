"""A one-argument C entry into the driver's `cuLaunchKernel`, for the launch fast path.

cuda-bindings' `cuLaunchKernel` converts eleven Python arguments and builds a `CUresult`
enum on every call; ctypes with eleven arguments is no cheaper. This shim takes one pointer
to a `kiln_launch` record (the driver's entry point, the function, grid, block, shared
bytes, stream and parameter pointers, filled once per launch target) and makes the call in
C, so a launch costs one ctypes call with one prebuilt argument; `kiln_launch_at` also
takes new dimensions (six more integers), for a launch whose grid or block changed.

It is built at first use with the system's C compiler (`cc`, or `$CC`) into kiln's cache
(a few milliseconds, once per machine); where none is found, or the build fails, launches
go through cuda-bindings as before. `KILN_CUDA_SHIM=0` turns it off.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

from ... import settings
from ...framework.cache import CompileCache

SOURCE = r"""
typedef int (*kiln_launch_fn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned,
                              unsigned, unsigned, void *, void **, void **);
struct kiln_launch {
    kiln_launch_fn launch;
    void *function;
    unsigned dims[6];
    unsigned shared;
    void *stream;
    void **params;
};
int kiln_launch(const struct kiln_launch *l) {
    return l->launch(l->function, l->dims[0], l->dims[1], l->dims[2], l->dims[3], l->dims[4],
                     l->dims[5], l->shared, l->stream, l->params, 0);
}
int kiln_launch_at(struct kiln_launch *l, unsigned gx, unsigned gy, unsigned gz,
                   unsigned bx, unsigned by, unsigned bz) {
    l->dims[0] = gx; l->dims[1] = gy; l->dims[2] = gz;
    l->dims[3] = bx; l->dims[4] = by; l->dims[5] = bz;
    return kiln_launch(l);
}
"""


class LaunchRecord(ctypes.Structure):
    _fields_ = [("launch", ctypes.c_void_p), ("function", ctypes.c_void_p),
                ("dims", ctypes.c_uint * 6), ("shared", ctypes.c_uint),
                ("stream", ctypes.c_void_p), ("params", ctypes.c_void_p)]


@cache
def shim() -> Any | None:
    """The compiled `kiln_launch` function (ctypes) with the driver's `cuLaunchKernel` as
    its `entry`, or None where either cannot be had."""
    if not settings.cuda_shim():
        return None
    try:
        entry = ctypes.cast(ctypes.CDLL("libcuda.so.1").cuLaunchKernel, ctypes.c_void_p).value
        fn = compiled()
    except (OSError, subprocess.SubprocessError, AttributeError):
        return None
    fn.entry = entry
    return fn


@cache
def compiled() -> Any:
    """`kiln_launch` built (or found in kiln's compile cache, whose checks it passes like
    any kernel library) and loaded, with `kiln_launch_at` (which stores new dimensions in
    the record first) as its `at`; raises OSError or SubprocessError where it fails."""
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise OSError("no C compiler")
    key = hashlib.sha256(f"{compiler}\0{SOURCE}".encode()).hexdigest()
    library = _CACHE.get_or_build(key, lambda: _build(compiler),
                                  lambda entry: ctypes.CDLL(str(entry.path)), "launch shim")
    # `argtypes` stays None: a prebuilt ctypes pointer and Python ints (at most 2^31 - 1,
    # checked by the plan) convert at ctypes' cheapest
    fn, at = library.kiln_launch, library.kiln_launch_at
    fn.restype = at.restype = ctypes.c_int
    fn.at = at  # type: ignore[attr-defined]
    return fn


def _build(compiler: str) -> bytes:
    with tempfile.TemporaryDirectory(prefix="kiln-shim-") as tmp:
        src = Path(tmp) / "kiln_launch.c"
        src.write_text(SOURCE)
        out = Path(tmp) / "kiln_launch.so"
        subprocess.run([compiler, "-O2", "-shared", "-fPIC", "-o", str(out), str(src)],
                       check=True, capture_output=True, timeout=60)
        return out.read_bytes()


_CACHE = CompileCache("cuda", ".so")


def record(function: Any, grid: tuple[int, int, int], block: tuple[int, int, int],
           shared: int, stream: Any, params: int, entry: int | None = None
           ) -> tuple[LaunchRecord, Any]:
    """A filled launch record (calling `entry`, by default the driver's) and the prebuilt
    pointer argument to pass to the shim."""
    if entry is None:
        fn = shim()
        assert fn is not None
        entry = fn.entry
    rec = LaunchRecord(entry, int(function), (ctypes.c_uint * 6)(*grid, *block), shared,
                       int(stream) if stream is not None else 0, params)
    return rec, ctypes.pointer(rec)
