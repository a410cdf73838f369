"""`kiln.load_library(DIR)`: Python callables that launch through a built library.

Only the manifest and `libNAME.so` are read: no frontend, no compiler, no backend. Array
arguments are `LibraryArray`s (memory of the library's context), NumPy arrays, which are
copied in, and back out when the kernel writes them, or, for a cuda library, CUDA arrays
of other libraries (`__cuda_array_interface__`: CuPy, PyTorch, kiln's own), registered
with the context (`NAME_register`) for the launch.
"""

from __future__ import annotations

import ctypes
import importlib.util
import json
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from .. import settings
from ..errors import IndexOutOfBoundsError, LaunchError, RecursionDepthError
from ..ir.types import SCALAR_BY_DTYPE, SCALAR_BY_NAME, ScalarType, fits
from .library import MANIFEST_FORMAT

CTYPES: dict[str, Any] = {
    "bool_": ctypes.c_bool, "i8": ctypes.c_int8, "i16": ctypes.c_int16, "i32": ctypes.c_int32,
    "i64": ctypes.c_int64, "u8": ctypes.c_uint8, "u16": ctypes.c_uint16,
    "u32": ctypes.c_uint32, "u64": ctypes.c_uint64, "f16": ctypes.c_uint16,
    "bf16": ctypes.c_uint16, "f32": ctypes.c_float, "f64": ctypes.c_double,
}
"""ctypes for scalars by element type; f16 and bf16 travel as their bits."""


OPENCL_LOADER = "KILN_OPENCL_LOADER"
"""The variable an opencl library reads for the ICD loader's path (else libOpenCL.so.1)."""


def opencl_loader() -> str | None:
    """The OpenCL ICD loader a C program can use here: the system's `libOpenCL.so.1`, else
    the one bundled in pyopencl's wheel (which also finds PoCL installed from PyPI's
    pocl-binary-distribution); None when there is neither."""
    try:
        ctypes.CDLL("libOpenCL.so.1")
        return "libOpenCL.so.1"
    except OSError:
        pass
    spec = importlib.util.find_spec("pyopencl")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        bundled = sorted(Path(folder, ".libs").glob("libOpenCL*.so*"))
        if bundled:
            return str(bundled[0])
    return None


def cuda_stream_synchronize(stream: int) -> None:
    """Wait for a CUDA stream of another library (its handle, as the CUDA array interface
    gives it), through the driver a cuda library loads too."""
    driver = ctypes.CDLL("libcuda.so.1")
    driver.cuStreamSynchronize.argtypes = [ctypes.c_void_p]
    status = driver.cuStreamSynchronize(stream)
    if status != 0:
        raise LibraryError(f"cuStreamSynchronize of the array's stream {stream:#x} failed: "
                           f"CUDA error {status}")


class LibraryError(RuntimeError):
    """A library call failed; the message is the library's own (`NAME_error_string`)."""


class LibraryLaunchError(LibraryError, LaunchError):
    """The library refused a call's arguments (`NAME_ERROR_INVALID_ARGUMENT`)."""


INVALID_ARGUMENT, OUT_OF_MEMORY, KERNEL_CHECK, RECURSION_DEPTH = 1, 3, 5, 6
"""The status codes (`NAME.h`) that raise their own errors."""


def check_destination(out: Any, shape: tuple[int, ...], dtype: np.dtype, what: str) -> None:
    """`out` can take a copy of `shape` `dtype` elements in place."""
    if not isinstance(out, np.ndarray):
        raise LaunchError(f"{what}: expected a NumPy array, got {type(out).__name__}")
    if out.shape != shape or out.dtype != dtype:
        raise LaunchError(f"{what}: expected shape {shape} and dtype {dtype.name}, got shape "
                          f"{out.shape} and dtype {out.dtype.name}")
    if not out.flags.c_contiguous:
        raise LaunchError(f"{what}: the array is not C-contiguous")
    if not out.flags.writeable:
        raise LaunchError(f"{what}: the array is read-only")


REGISTRATION = ("register", "unregister")
"""Functions of libraries built since they lend the program's memory (format 2 without
them loads, and refuses CUDA arrays)."""


MAX_DIM = 2**31 - 1
"""The largest grid or block dimension (also the library's own limit; uint32 would wrap)."""


class Dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint32), ("y", ctypes.c_uint32), ("z", ctypes.c_uint32)]


def dim3(value: int | Sequence[int], what: str) -> Dim3:
    dims = (value,) if isinstance(value, (int, np.integer)) else tuple(value)
    if not 1 <= len(dims) <= 3 or not all(isinstance(d, (int, np.integer)) and 1 <= d <= MAX_DIM
                                          for d in dims):
        raise LaunchError(f"{what} must be 1 to 3 integers from 1 to 2^31-1, got {value!r}")
    return Dim3(*(int(d) for d in (*dims, 1, 1)[:3]))


def library_dtype(dtype: Any) -> np.dtype:
    """The element dtype of a library array: a scalar type a kernel parameter can have (a
    kiln scalar type or its NumPy dtype), since the C API has no others."""
    if isinstance(dtype, ScalarType):
        return dtype.dtype
    try:
        dt = np.dtype(dtype)
    except (TypeError, ValueError):
        raise LaunchError(f"a library array holds bools or numbers of a kiln scalar type, not "
                          f"{dtype!r}") from None
    if dt not in SCALAR_BY_DTYPE:
        raise LaunchError(f"a library array holds bools or numbers of a kiln scalar type, not "
                          f"{dt}")
    return dt


class LibraryArray:
    """An array in a library context's device memory (freed with the object)."""

    def __init__(self, library: Library, shape: tuple[Any, ...], dtype: Any) -> None:
        self.library, self.dtype = library, library_dtype(dtype)
        if not all(isinstance(n, (int, np.integer)) and not isinstance(n, (bool, np.bool_))
                   and n >= 0 for n in shape):
            raise LaunchError(f"a library array's shape is non-negative ints, got {shape!r}")
        self.shape = tuple(int(n) for n in shape)
        self.nbytes = math.prod(self.shape) * self.dtype.itemsize
        if self.nbytes >= 2**63:
            raise LaunchError(f"a library array of shape {self.shape} and dtype {self.dtype} is "
                              "too large: over 2**63 bytes")
        self.ndim = len(shape)
        self.ptr: int = library._alloc(self.nbytes)

    def copy_to_host(self, out: np.ndarray | None = None) -> np.ndarray:
        """Wait for the launches before it and return the contents (in `out` when given:
        a writeable, C-contiguous array of the same shape and dtype)."""
        host = np.empty(self.shape, self.dtype) if out is None else out
        if out is not None:
            check_destination(out, self.shape, self.dtype, "copy_to_host: out")
        self.library._call("copy_to_host", host.ctypes.data, host.nbytes, self.ptr, self.nbytes)
        return host

    def __del__(self) -> None:
        if getattr(self, "ptr", None) and self.library._ctx:
            self.library._fn("free")(self.library._ctx, self.ptr)


class ForeignArray:
    """A CUDA array of another library, read through `__cuda_array_interface__` (v3):
    its device pointer, shape and bytes, checked against one array parameter."""

    def __init__(self, where: str, p: dict[str, Any], value: Any, elem: ScalarType) -> None:
        try:
            interface = value.__cuda_array_interface__
            self.shape = tuple(int(n) for n in interface["shape"])
            dtype = np.dtype(interface["typestr"])
            strides = interface.get("strides")
            self.ptr, readonly = int(interface["data"][0]), bool(interface["data"][1])
            stream = interface.get("stream")
            self.stream = None if stream is None else int(stream)
        except (AttributeError, KeyError, IndexError, TypeError, ValueError) as exc:
            raise LaunchError(f"{where}: the {type(value).__name__}'s "
                              f"__cuda_array_interface__ cannot be read: {exc!r}") from None
        if not all(0 <= n <= MAX_DIM for n in self.shape):
            raise LaunchError(f"{where}: the {type(value).__name__}'s shape {self.shape} is "
                              "not extents from 0 to 2^31-1 (the library's int32_t)")
        if not 0 <= self.ptr < 2**64 or not 0 <= (self.stream or 0) < 2**64:
            raise LaunchError(f"{where}: the {type(value).__name__}'s pointer {self.ptr:#x} "
                              f"or stream {self.stream} is not an address")
        if dtype != elem.dtype or len(self.shape) != p["ndim"]:
            raise _wrong_array(where, p["ndim"], elem.dtype, len(self.shape), dtype)
        if strides is not None and tuple(strides) != c_strides(self.shape, dtype.itemsize):
            raise LaunchError(f"{where}: the {type(value).__name__} is not C-contiguous "
                              f"(strides {tuple(strides)}); pass a contiguous copy")
        if readonly and p.get("written"):
            raise LaunchError(f"{where}: the kernel writes it, and the "
                              f"{type(value).__name__} is read-only")
        self.nbytes = math.prod(self.shape) * dtype.itemsize
        if self.nbytes >= 2**63:  # no memory holds it (and size_t would wrap it)
            raise LaunchError(f"{where}: the {type(value).__name__}'s shape {self.shape} is "
                              "over 2**63 bytes")


def c_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """The byte strides of a C-contiguous array of `shape`."""
    strides, step = [], itemsize
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))


class EntryPoint:
    """One launch function: `entry(grid, block, *args)` in the kernel's parameter order
    (constexpr parameters are built in and not passed)."""

    def __init__(self, library: Library, spec: dict[str, Any]) -> None:
        self.library, self.spec = library, spec
        self.name = spec["kernel"]
        self.params = [p for p in spec["parameters"] if p["kind"] != "constexpr"]
        self.function = getattr(library._lib, spec["c_name"])
        argtypes = [ctypes.c_void_p, Dim3, Dim3]
        for p in spec["c_parameters"]:
            argtypes.append(ctypes.c_void_p if p["role"] == "pointer" else
                            ctypes.c_int32 if p["role"] == "extent" else CTYPES[p["element_type"]])
        self.function.argtypes = argtypes
        self.function.restype = ctypes.c_int

    def __repr__(self) -> str:
        return f"<kiln library entry {self.spec['c_name']}{tuple(self.spec['specialisation'])}>"

    def __call__(self, grid: int | Sequence[int], block: int | Sequence[int], *args: Any) -> None:
        if len(args) != len(self.params):
            names = ", ".join(p["name"] for p in self.params)
            raise LaunchError(f"{self.name} takes {len(self.params)} argument(s) ({names}), "
                              f"got {len(args)}")
        values: list[Any] = []
        arrays: list[LibraryArray | ForeignArray] = []  # alive until the launch was made
        copy_back: list[tuple[np.ndarray, LibraryArray]] = []
        for position, (p, value) in enumerate(zip(self.params, args)):
            where = f"argument '{p['name']}' (#{position + 1}) of {self.name}"
            if p["kind"] == "array":
                array = self._array(where, p, value, copy_back)
                arrays.append(array)
                values += [array.ptr, *array.shape]
            else:
                values.append(_scalar(where, SCALAR_BY_NAME[p["element_type"]], value))
        launch = (self.library._ctx, dim3(grid, "grid"), dim3(block, "block"), *values)
        with self.library._registered([a for a in arrays if isinstance(a, ForeignArray)]):
            self.library._status(self.function(*launch))
        for host, device in copy_back:
            device.copy_to_host(host)

    def _array(self, where: str, p: dict[str, Any], value: Any,
               copy_back: list[tuple[np.ndarray, LibraryArray]]) -> LibraryArray | ForeignArray:
        elem = SCALAR_BY_NAME[p["element_type"]]
        if not isinstance(value, (LibraryArray, np.ndarray)) \
                and hasattr(value, "__cuda_array_interface__"):
            if self.library.target != "cuda":
                raise LaunchError(f"{where}: a {type(value).__name__} lives in CUDA memory, "
                                  f"which a {self.library.target} library cannot use; pass "
                                  "a NumPy array")
            if not hasattr(self.library._lib, f"{self.library.prefix}_register"):
                raise LaunchError(f"{where}: this library was built without "
                                  f"{self.library.prefix}_register, which CUDA arrays need: "
                                  "rebuild it with this kiln (kiln build)")
            return ForeignArray(where, p, value, elem)
        if not isinstance(value, (LibraryArray, np.ndarray)):
            raise LaunchError(f"{where}: expected a {p['ndim']}-d {elem.dtype.name} array "
                              f"(NumPy, library memory or, for cuda, a CUDA array), got "
                              f"{type(value).__name__}")
        if value.dtype != elem.dtype or value.ndim != p["ndim"]:
            raise _wrong_array(where, p["ndim"], elem.dtype, value.ndim, value.dtype)
        if isinstance(value, LibraryArray):
            if value.library is not self.library:
                raise LaunchError(f"{where}: the array belongs to another library context")
            return value
        if not value.flags.c_contiguous:
            raise LaunchError(f"{where}: the array is not C-contiguous (np.ascontiguousarray)")
        if p.get("written") and not value.flags.writeable:
            raise LaunchError(f"{where}: {self.name} writes it, and the array is read-only "
                              "(pass a writeable copy, e.g. np.array(a))")
        device = self.library.to_device(value)
        if p.get("written"):
            copy_back.append((value, device))
        return device


def _scalar(where: str, t: ScalarType, value: Any) -> Any:
    number = value.item() if isinstance(value, np.generic) else value
    if not isinstance(number, (bool, int, float)):
        raise LaunchError(f"{where}: expected a scalar {t}, got {type(value).__name__}")
    if t.is_int and isinstance(number, float):
        raise LaunchError(f"{where}: expected an integer {t}, got {value!r}")
    if not t.is_bool and not fits(number, t):
        lo, hi = t.range()
        raise LaunchError(f"{where}: {value!r} does not fit {t} (range {lo}..{hi})")
    converted = np.asarray(number, dtype=t.dtype)
    return int(converted.view(np.uint16)) if t.name in ("f16", "bf16") else converted.item()


class Library:
    """A built library loaded with one context on one device."""

    def __init__(self, folder: Path, manifest: dict[str, Any], device: int) -> None:
        self.folder, self.manifest = folder, manifest
        self.prefix: str = manifest["prefix"]
        self.target: str = manifest["target"]
        found = opencl_loader() if self.target == "opencl" and not settings.opencl_loader() \
            else None
        self._lib = ctypes.CDLL(str(folder / manifest["library"]))
        self._setup()
        ctx = ctypes.c_void_p()
        with settings.exported({OPENCL_LOADER: found} if found else {}):  # read as it starts
            self._status(self._fn("context_create")(ctypes.byref(ctx), device))
        self._ctx = ctx.value
        self.entry_points = {e["c_name"].removeprefix(f"{self.prefix}_"): EntryPoint(self, e)
                             for e in manifest["entry_points"]}

    def _setup(self) -> None:
        size, ptr, ctx = ctypes.c_size_t, ctypes.c_void_p, ctypes.c_void_p
        signatures: dict[str, tuple[Any, list[Any]]] = {
            "error_string": (ctypes.c_char_p, []),
            "context_create": (ctypes.c_int, [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int]),
            "context_destroy": (None, [ctx]),
            "synchronize": (ctypes.c_int, [ctx]),
            "alloc": (ptr, [ctx, size]),
            "free": (ctypes.c_int, [ctx, ptr]),
            "copy_to_device": (ctypes.c_int, [ctx, ptr, ptr, size]),
            "copy_to_host": (ctypes.c_int, [ctx, ptr, size, ptr, size]),
            "register": (ctypes.c_int, [ctx, ptr, size]),
            "unregister": (ctypes.c_int, [ctx, ptr]),
        }
        for name, (restype, argtypes) in signatures.items():
            if name in REGISTRATION and not hasattr(self._lib, f"{self.prefix}_{name}"):
                continue  # built before registration: CUDA arrays are refused
            fn = self._fn(name)
            fn.restype, fn.argtypes = restype, argtypes

    def __getattr__(self, name: str) -> EntryPoint:
        entries = self.__dict__.get("entry_points", {})
        if name in entries:
            return entries[name]
        raise AttributeError(f"library {self.__dict__.get('prefix')} has no entry point "
                             f"{name!r} (entry points: {', '.join(entries)})")

    def _fn(self, name: str) -> Any:
        """The library's function `PREFIX_name` (one ctypes object, with its argtypes)."""
        return getattr(self._lib, f"{self.prefix}_{name}")

    def _status(self, status: int) -> None:
        if status == 0:
            return
        message = self._fn("error_string")().decode(errors="replace") or f"status {status}"
        if status == INVALID_ARGUMENT:
            raise LibraryLaunchError(message)
        if status == KERNEL_CHECK:
            raise IndexOutOfBoundsError(message)
        if status == RECURSION_DEPTH:
            raise RecursionDepthError(message)
        raise LibraryError(message)

    def _call(self, name: str, *args: Any) -> None:
        self._status(self._fn(name)(self._ctx, *args))

    def _alloc(self, nbytes: int) -> int:
        ptr = self._fn("alloc")(self._ctx, nbytes)
        if not ptr:
            self._status(OUT_OF_MEMORY)
        return int(ptr)

    @contextmanager
    def _registered(self, arrays: Sequence[ForeignArray]) -> Iterator[None]:
        """Register the foreign arrays' memory (each span once: an argument may be passed
        twice) after their producers' streams, and unregister it after the launch (which
        `NAME_unregister` waits for)."""
        spans: dict[int, int] = {}
        for a in arrays:
            if a.nbytes:
                spans[a.ptr] = max(spans.get(a.ptr, 0), a.nbytes)
        for stream in {a.stream for a in arrays if a.stream is not None}:
            cuda_stream_synchronize(stream)  # the interface's rule: the producer's work first
        done: list[int] = []
        try:
            for ptr, nbytes in spans.items():
                self._call("register", ptr, nbytes)
                done.append(ptr)
            yield
        finally:
            for ptr in done:
                self._call("unregister", ptr)

    def empty(self, shape: int | Sequence[int], dtype: Any) -> LibraryArray:
        dims: tuple[Any, ...] = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
        return LibraryArray(self, dims, dtype)

    def to_device(self, array: np.ndarray) -> LibraryArray:
        try:  # a 0-d array keeps shape (), as in kiln.to_device
            host = np.asarray(array, order="C")
        except (TypeError, ValueError) as e:
            raise LaunchError(f"to_device takes an array or what NumPy makes one of: {e}"
                              ) from None
        if not host.dtype.isnative:  # big-endian data: kernels read the device's byte order
            host = host.astype(host.dtype.newbyteorder("="))
        device = LibraryArray(self, host.shape, host.dtype)
        self._call("copy_to_device", device.ptr, host.ctypes.data, host.nbytes)
        return device

    def synchronize(self) -> None:
        self._call("synchronize")

    def close(self) -> None:
        """Release the context (arrays still alive must not be used afterwards)."""
        if self._ctx:
            self._fn("context_destroy")(self._ctx)
            self._ctx = None

    def __del__(self) -> None:
        if getattr(self, "_ctx", None):
            self.close()


def load_library(folder: str | Path, device: int = 0, name: str | None = None) -> Library:
    """Load `folder/NAME.json` and `libNAME.so` (NAME: the only manifest there, or `name`)
    with a context on device number `device`."""
    path = Path(folder)
    manifests = [path / f"{name}.json"] if name else sorted(path.glob("*.json"))
    if len(manifests) != 1 or not manifests[0].is_file():
        found = ", ".join(m.name for m in manifests) or "none"
        raise FileNotFoundError(f"{path}: expected one kiln manifest NAME.json (found: {found}); "
                                "pass name= to choose")
    try:
        manifest = json.loads(manifests[0].read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{manifests[0]} is not the manifest of a kiln library: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("action") != "library":
        raise ValueError(f"{manifests[0]} is not the manifest of a kiln library")
    if manifest.get("format") != MANIFEST_FORMAT:
        raise ValueError(f"{manifests[0]} has manifest format {manifest.get('format')!r}; this "
                         f"kiln loads format {MANIFEST_FORMAT}: rebuild the library with it "
                         "(kiln build)")
    return Library(path, manifest, device)


def _wrong_array(where: str, ndim: int, expected: np.dtype, got_ndim: int,
                 got: np.dtype) -> LaunchError:
    """What an array of the wrong rank or dtype is told; data of the right type in the
    other byte order is named so (the library reads the machine's)."""
    if ndim == got_ndim and not got.isnative and got.newbyteorder("=") == expected:
        return LaunchError(f"{where}: expected a {ndim}-d {expected.name} array in this "
                           f"machine's byte order, got a big-endian one ({got.str}): pass "
                           "x.astype(x.dtype.newbyteorder('='))")
    return LaunchError(f"{where}: expected a {ndim}-d {expected.name} array, got a "
                       f"{got_ndim}-d {got.name} one")
