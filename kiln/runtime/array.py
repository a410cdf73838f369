"""Device arrays and their constructors."""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import CopyError, OutOfMemoryError
from ..framework.backend import (
    CudaArrayInterop,
    DLPackInterop,
    PeerCopy,
    SubBuffers,
    ZeroCopy,
    supports,
)
from ..ir.hosttypes import kiln_type_of
from ..ir.types import SCALAR_BY_DTYPE, ScalarType, VectorType
from .device import DeviceNotFoundError, Event, not_recording, recorder, stream_on
from .device import device as resolve_device

if TYPE_CHECKING:
    from .device import Device, Stream


class DeviceArray:
    """A C-contiguous n-d array in one device's memory (or a contiguous view of one:
    `base` is then the array whose memory it shares)."""

    def __init__(self, device: Device, shape: tuple[int, ...], dtype: np.dtype, buffer: Any,
                 host: np.ndarray | None = None, base: DeviceArray | None = None,
                 offset: int = 0) -> None:
        self.device = device
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self.buffer = buffer
        self._host = host  # the NumPy array this one shares memory with, if zero-copy
        self.base = base
        self.offset = offset  # bytes from the start of `base` to this view's first element

    @property
    def strides(self) -> tuple[int, ...]:
        """Bytes between neighbours along each axis (C order)."""
        return _c_strides(self.shape, self.dtype.itemsize)

    def __getitem__(self, key: Any) -> DeviceArray:
        """Basic indexing (ints, slices with positive steps, `...`): a view sharing this
        array's memory, as NumPy's. Contiguous views are DeviceArrays that launches take;
        others are `DeviceArrayView`s, which copy to the host but not to kernels."""
        return view_of(self, key)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        """Refused, as CuPy refuses it: reading device memory waits for the device and
        copies, so it is asked for by name."""
        raise TypeError("a kiln.DeviceArray is not converted to a NumPy array implicitly: "
                        "call .numpy() (or .to(device) to copy it to another device)")

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d device array (NumPy's rule)")
        return self.shape[0]

    def __repr__(self) -> str:
        return f"<kiln.DeviceArray shape={self.shape} dtype={self.dtype} on {self.device.name}>"

    # Interop: exported when the array's backend implements the optional protocols
    # `CudaArrayInterop` and `DLPackInterop` (kiln.framework.backend).
    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        backend = self.device.backend
        if not supports(backend, CudaArrayInterop):
            raise AttributeError(f"arrays of {self.device.name} are not in CUDA memory")
        return backend.cuda_array_interface(self)

    def __dlpack__(self, *, stream: Any = None, max_version: Any = None, dl_device: Any = None,
                    copy: bool | None = None) -> Any:
        backend = self.device.backend
        if isinstance(self, DeviceArrayView):
            raise BufferError(f"this view does not export DLPack ({self.launch_problem}); "
                              "export view.copy()")
        if not supports(backend, DLPackInterop) or copy:
            raise BufferError(f"arrays of {self.device.name} do not export DLPack"
                              + (" copies" if supports(backend, DLPackInterop) else ""))
        return backend.dlpack(self, stream)

    def __dlpack_device__(self) -> tuple[int, int]:
        backend = self.device.backend
        if not supports(backend, DLPackInterop):
            raise BufferError(f"arrays of {self.device.name} do not export DLPack")
        return backend.dlpack_device(self)

    def copy_to_host(self, out: np.ndarray | None = None, stream: Stream | None = None
                     ) -> np.ndarray:
        """Copy to a NumPy array (`out`, of this array's shape and dtype, C-contiguous and
        writeable, or a new one), waiting for the copy (and the work queued before it)."""
        not_recording("reading a device array back (copy_to_host, numpy)")
        stream = stream_on(self.device, stream, "copy_to_host")
        out = np.empty(self.shape, self.dtype) if out is None else check_out(self, out)
        self.device.backend.allocator.copy_device_to_host(out, self.buffer, stream.handle)
        stream.synchronize()
        return out

    def numpy(self, stream: Stream | None = None) -> np.ndarray:
        """A NumPy copy of the contents, after the work queued on `stream` (a stream of
        this device; by default its default stream)."""
        return self.copy_to_host(stream=stream)

    def copy(self) -> DeviceArray:
        """A new C-contiguous device array with this one's contents."""
        not_recording("array.copy()")
        out = empty(self.shape, self.dtype, self.device)
        stream = self.device.default_stream
        self.device.backend.allocator.copy_device_to_device(out.buffer, self.buffer, self.nbytes,
                                                  stream.handle)
        return out

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled (to another process, e.g. a Dask worker) as its contents; unpickled onto
        the device of the same name there, or the default device where there is none."""
        return (_unpickle, (self.numpy(), self.device.name))

    def to(self, device: Device | str, stream: Stream | None = None) -> DeviceArray:
        """A copy of this array on `device`, of any backend, queued on `stream` (by default
        `device`'s default stream) after the work queued on this array's default stream.
        Between parts of one device, or devices of a backend that copies between its
        devices (`PeerCopy`), nothing waits; otherwise the data goes through the host,
        which waits for this array's device and then queues the upload. A copy to this
        array's own device on another stream first waits for its default stream on the host
        (kiln has no device-side wait between streams)."""
        not_recording("array.to()")
        out = empty(self.shape, self.dtype, resolve_device(device))
        copy_array(out, self, stream)
        return out

    def copy_from_host(self, src: np.ndarray, stream: Stream | None = None) -> None:
        """Queue a copy of `src` (of this array's shape; its values are converted to this
        array's dtype, as NumPy assignment does) on `stream`, a stream of this device."""
        found = recorder()
        if found is not None and stream is None and found.stream.device is self.device:
            stream = found.stream  # as a launch inside a capture: on the capture's stream
        stream = stream_on(self.device, stream, "copy_from_host")
        src = original = np.asarray(src)
        if src.shape != self.shape:
            raise CopyError(f"copy_from_host: a source of shape {src.shape} into a device "
                            f"array of shape {self.shape}: the shapes must match")
        try:
            src = np.require(src, self.dtype, "C")
        except (TypeError, ValueError) as exc:  # strings, objects: NumPy's raw message
            raise TypeError(f"cannot copy {src.dtype} values into a {self.dtype} device "
                            f"array ({exc})") from None
        if found is None:
            self.device.backend.allocator.copy_host_to_device(self.buffer, src, stream.handle)
            return
        if src is not original:  # a converted copy: replays would copy stale values
            found.refuse(f"copy_from_host of a {original.dtype} array that is not a "
                         f"C-contiguous {self.dtype} array of shape {self.shape} (a replay "
                         "reads the NumPy array itself: pass one the copy can read as is)")
        copy = self.device.backend.allocator.copy_host_to_device
        found.record_copy(stream, functools.partial(copy, self.buffer, src), "copy_from_host")


def check_out(array: DeviceArray | Any, out: Any) -> np.ndarray:
    """`out`, when a copy of `array` (anything with a shape and a dtype) can go there: a
    NumPy array of its shape and dtype, C-contiguous and writeable (as Numba's
    `copy_to_host(ary)` and CuPy's `get(out=)` ask); otherwise a CopyError naming what was
    expected and what was given."""
    if not isinstance(out, np.ndarray):
        raise CopyError(f"out= takes a NumPy array, got {type(out).__name__}")
    flags = out.flags
    if out.shape == array.shape and out.dtype == array.dtype and flags.c_contiguous \
            and flags.writeable:  # the common case, before any message is formatted
        return out
    shape, dtype = tuple(array.shape), np.dtype(array.dtype)
    expected = f"a C-contiguous, writeable {dtype} array of shape {shape}"
    problem = ("its shape is " + str(out.shape) if out.shape != shape
               else f"its dtype is {out.dtype}" if out.dtype != dtype
               else f"it is not C-contiguous (strides {out.strides})"
               if not out.flags.c_contiguous
               else "it is read-only" if not out.flags.writeable else "")
    if problem:
        raise CopyError(f"out= must be {expected}; {problem}")
    return out


def _unpickle(contents: np.ndarray, device_name: str) -> DeviceArray:
    try:
        dev = resolve_device(device_name)
    except DeviceNotFoundError:
        dev = resolve_device(None)
    return to_device(contents, dev)


def copy_array(dst: DeviceArray, src: DeviceArray, stream: Stream | None = None) -> None:
    """Copy `src` into `dst` (same shape and dtype; any two devices), queued on `stream`,
    by default `dst`'s device's default stream."""
    if src.shape != dst.shape or src.dtype != dst.dtype:
        raise CopyError(f"cannot copy a {src.dtype} array of shape {src.shape} into a "
                         f"{dst.dtype} array of shape {dst.shape}")
    for array in (src, dst):
        if isinstance(array, DeviceArrayView):
            raise ValueError(f"cannot copy between devices through this view "
                             f"({array.launch_problem}); copy() it first")
    stream = stream_on(dst.device, stream, f"copying into an array of {dst.device.name}")
    backend, allocator = dst.device.backend, dst.device.backend.allocator
    if src.device is dst.device:
        if stream is not src.device.default_stream:  # after the work queued on src there
            stream.wait_event(Event(src.device).record())
        allocator.copy_device_to_device(dst.buffer, src.buffer, src.nbytes, stream.handle)
    elif src.device.backend is backend and supports(allocator, PeerCopy):
        allocator.copy_peer(dst.buffer, src.buffer, src.nbytes,
                          src.device.default_stream.handle, stream.handle)
    else:
        dst.copy_from_host(src.copy_to_host(), stream)


def _dtype_of(dtype: Any) -> np.dtype:
    """Element dtypes: kiln scalar types, NumPy numbers, and records or variants (a struct
    class, a `kiln.variant` or a NumPy structured dtype)."""
    if isinstance(dtype, ScalarType):
        return dtype.dtype
    record = kiln_type_of(dtype)
    if record is not None:
        return record.dtype
    try:
        dt = np.dtype(dtype)
    except (TypeError, ValueError):
        raise TypeError(f"kiln arrays hold numbers and bools (and records), not {dtype!r}"
                        ) from None
    if dt not in SCALAR_BY_DTYPE and dt.names is None:
        raise TypeError(f"kiln arrays hold numbers and bools (and records), not {dt}")
    return dt


def _layout(shape: Any, dtype: Any) -> tuple[tuple[int, ...], np.dtype]:
    """Host shape and dtype of an array of `shape` elements (a vector type such as f32x4
    adds a last dimension of its length), refusing bad ones before anything is allocated."""
    dims = _dims(shape)
    if isinstance(dtype, VectorType):
        return (*dims, dtype.n), dtype.elem.dtype
    dt = _dtype_of(dtype)
    if math.prod(dims) * dt.itemsize >= 2**63:
        raise ValueError(f"an array of shape {dims} and dtype {dt} is too large: over 2**63 "
                         "bytes")
    return dims, dt


def _dims(shape: Any) -> tuple[int, ...]:
    """`shape` (an int, or a tuple, list or 1-d NumPy array of ints) as a tuple of
    non-negative ints."""
    sequence = isinstance(shape, (tuple, list)) or (isinstance(shape, np.ndarray)
                                                    and shape.ndim == 1)
    parts = tuple(shape) if sequence else (shape,)
    for n in parts:
        if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)):
            raise TypeError(f"array shapes are ints or tuples of ints, got {shape!r}")
        if n < 0:
            raise ValueError(f"array dimensions are 0 or more, got {n} in shape {shape!r}")
    return tuple(int(n) for n in parts)


def empty(shape: int | tuple[int, ...], dtype: Any = np.float32,
          device: Device | str | None = None) -> DeviceArray:
    dims, dt = _layout(shape, dtype)
    dev = resolve_device(device)
    nbytes = math.prod(dims) * dt.itemsize
    try:
        buffer = dev.backend.allocator.allocate(dev, nbytes)
    except MemoryError as exc:
        raise _out_of_memory(dev, dims, dt, exc) from None
    return DeviceArray(dev, dims, dt, buffer)


def _out_of_memory(dev: Device, dims: tuple[int, ...], dt: np.dtype,
                   exc: MemoryError) -> OutOfMemoryError:
    nbytes = math.prod(dims) * dt.itemsize
    return OutOfMemoryError(f"{dev.name} cannot allocate {nbytes} bytes for an array of "
                            f"shape {dims} {dt.name}: {exc or 'out of memory'}")


def to_device(array: Any, device: Device | str | None = None,
              stream: Stream | None = None) -> DeviceArray:
    """Copy a NumPy array (or anything NumPy takes, or a device array of any device) to a
    device: on every backend the result owns its memory, as Numba's `cuda.to_device` and
    CuPy's `asarray` do (`as_device_array` shares instead).
    Without a stream the copy has finished on return, so launches on any stream see it;
    with one it is queued there."""
    not_recording("kiln.to_device (allocate and fill arrays before the capture)")
    dev = resolve_device(device)
    queue = stream_on(dev, stream, "kiln.to_device")
    if isinstance(array, DeviceArrayView):  # not one block of memory: through the host
        array = array.numpy()
    if isinstance(array, DeviceArray):  # as CuPy's asarray of a device array: a copy
        out = array.to(dev, queue)
    else:
        host = np.asarray(array)
        if not host.dtype.isnative:  # big-endian data: kernels read the device's byte order
            host = host.astype(host.dtype.newbyteorder("="))
        out = empty(host.shape, host.dtype, dev)
        out.copy_from_host(host, queue)
    if stream is None:
        queue.synchronize()
    return out


def as_device_array(array: np.ndarray, device: Device | str | None = None) -> DeviceArray:
    """A device array sharing `array`'s memory, without a copy: kernels writing it change
    `array` (once the launch is synchronised). Only devices whose memory is the host's
    (cpu, interp, OpenCL CPU devices such as PoCL) can; others raise `ValueError`."""
    dev = resolve_device(device)
    if not isinstance(array, np.ndarray):
        raise TypeError(f"kiln.as_device_array shares a NumPy array's memory, got "
                        f"{type(array).__name__}")
    _dtype_of(array.dtype)
    why = ("it is not C-contiguous" if not array.flags.c_contiguous
           else "it is read-only" if not array.flags.writeable
           else "it is not aligned" if not array.flags.aligned else "")
    if not why and array.size == 0 and dev.capabilities.unified_memory:
        return empty(array.shape, array.dtype, dev)  # no memory to share (nor to map)
    shared = None if why else _share(dev, array)
    if shared is None:
        raise ValueError(
            f"kiln.as_device_array: {dev.name} cannot share this array's memory ("
            + (why or f"{dev.name}'s memory is not the host's") + "); copy it with kiln.to_device")
    return DeviceArray(dev, array.shape, array.dtype, shared, array)


def _share(device: Device, array: np.ndarray) -> Any | None:
    """A buffer sharing `array`'s memory where the device's allocator can (`ZeroCopy`);
    OutOfMemoryError where the device cannot map that much."""
    allocator = device.backend.allocator
    if not supports(allocator, ZeroCopy):
        return None
    try:
        return allocator.wrap_host(device, array)
    except MemoryError as exc:
        raise _out_of_memory(device, array.shape, array.dtype, exc) from None


def _alignment(device: Device) -> int:
    """The byte multiple at which the device's sub-buffers (and kernels' arrays) start."""
    allocator = device.backend.allocator
    return allocator.sub_buffer_alignment(device) if supports(allocator, SubBuffers) else 1


def stage_host(array: np.ndarray, device: Device, stream: Stream | None = None) -> DeviceArray:
    """A NumPy launch argument on the device: shared where the device can (the launch
    copies written arguments back either way, so sharing only saves the copies)."""
    if array.flags.c_contiguous:
        shared = _share(device, array)
        if shared is not None:
            return DeviceArray(device, array.shape, array.dtype, shared, array)
    return to_device(array, device, stream)


def full(shape: int | tuple[int, ...], value: Any, dtype: Any = np.float32,
         device: Device | str | None = None) -> DeviceArray:
    not_recording("kiln.full or kiln.zeros (allocate and fill arrays before the capture)")
    dims, dt = _layout(shape, dtype)
    _check_fill(value, dt)
    dev = resolve_device(device)
    # a fresh array: sharing it is safe; elsewhere the copy is queued on the default stream
    return stage_host(np.full(dims, value, dt), dev, dev.default_stream)


def _shown(value: Any) -> str:
    """`value` for a message: a huge int by its size, not its thousand digits."""
    text = repr(value)
    return text if len(text) <= 40 else f"an int of {int(value).bit_length()} bits"


def _check_fill(value: Any, dt: np.dtype) -> None:
    """Refuse a scalar fill value a number dtype cannot hold (NumPy would wrap it, raise
    a raw error, or turn NaN into an integer): not a number, NaN, an infinity or a fraction
    for an integer dtype, out of the dtype's range."""
    if dt.kind not in "biuf" or isinstance(value, (tuple, list, np.ndarray)):
        return  # records, vectors and arrays: NumPy's broadcasting rules
    if not isinstance(value, (bool, int, float, np.bool_, np.integer, np.floating)):
        raise TypeError(f"a {dt.name} array is filled with a number, got "
                        f"{type(value).__name__} {value!r}")
    if dt.kind == "b":
        return
    if dt.kind in "iu":
        if isinstance(value, (float, np.floating)) and not float(value).is_integer():
            raise ValueError(f"{dt.name} cannot hold {value!r}: fill an integer array with "
                             "an integer")
        info = np.iinfo(dt)
        if not info.min <= int(value) <= info.max:
            raise ValueError(f"{dt.name} cannot hold {_shown(value)} "
                             f"(range {info.min}..{info.max})")
        return
    if isinstance(value, (float, np.floating)) and not math.isfinite(value):
        return  # NaN and the infinities are values of every float dtype
    try:
        magnitude = abs(float(value))
    except OverflowError:  # an int too large for any float
        magnitude = math.inf
    if magnitude > float(np.finfo(dt).max):
        raise ValueError(f"{dt.name} cannot hold {_shown(value)} (its largest value is "
                         f"{np.finfo(dt).max})")


def zeros(shape: int | tuple[int, ...], dtype: Any = np.float32,
          device: Device | str | None = None) -> DeviceArray:
    return full(shape, 0, dtype, device)


def empty_like(array: DeviceArray | np.ndarray, device: Device | str | None = None
               ) -> DeviceArray:
    if device is None and isinstance(array, DeviceArray):
        device = array.device
    return empty(array.shape, array.dtype, device)


class DeviceArrayView(DeviceArray):
    """A view kernels cannot take as it is: not C-contiguous (`m[:, 1]`, `a[::2]`), or
    starting where the device cannot point a kernel (OpenCL starts sub-buffers only at
    aligned addresses). Its `buffer` starts `skip` bytes before its first element and
    ends with its last. It copies to the host (`numpy()`); `copy()` gives a contiguous
    array that kernels take."""

    def __init__(self, device: Device, shape: tuple[int, ...], dtype: np.dtype, buffer: Any,
                 strides: tuple[int, ...], skip: int, span: int, base: DeviceArray,
                 offset: int) -> None:
        super().__init__(device, shape, dtype, buffer, None, base, offset)
        self._strides = strides
        self.skip = skip
        self.span = span  # bytes of `buffer`: the skipped ones, then the view's extent

    @property
    def strides(self) -> tuple[int, ...]:
        return self._strides

    @property
    def c_contiguous(self) -> bool:
        return np.lib.stride_tricks.as_strided(np.zeros(1, self.dtype), self.shape,
                                               self.strides).flags.c_contiguous

    @property
    def launch_problem(self) -> str:
        """Why a launch cannot take this view."""
        if not self.c_contiguous:
            return f"it is not C-contiguous (strides {self.strides})"
        return (f"it starts at byte {self.offset} of its array, and "
                    f"{self.device.name} points kernels only at multiples of "
                    f"{_alignment(self.device)} bytes")

    def __repr__(self) -> str:
        return (f"<kiln.DeviceArrayView shape={self.shape} strides={self.strides} "
                f"dtype={self.dtype} on {self.device.name}>")

    def copy_to_host(self, out: np.ndarray | None = None, stream: Stream | None = None
                     ) -> np.ndarray:
        not_recording("reading a device array back (copy_to_host, numpy)")
        stream = stream_on(self.device, stream, "copy_to_host")
        if out is not None:
            check_out(self, out)
        raw = np.empty(self.span, np.uint8)
        self.device.backend.allocator.copy_device_to_host(raw, self.buffer, stream.handle)
        stream.synchronize()
        values = np.lib.stride_tricks.as_strided(raw[self.skip:].view(self.dtype), self.shape,
                                                 self.strides)
        if out is None:
            return np.array(values)
        out[...] = values
        return out

    def copy(self) -> DeviceArray:
        return to_device(self.numpy(), self.device)

    def to(self, device: Device | str, stream: Stream | None = None) -> DeviceArray:
        """As `kiln.to_device(view, device, stream)`: through the host (a view that is not
        one block of memory has no device-to-device copy)."""
        return to_device(self, device, stream)

    def copy_from_host(self, src: np.ndarray, stream: Stream | None = None) -> None:
        raise ValueError(f"this view cannot be written from the host ({self.launch_problem}); "
                         "write its base array")


def _c_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    strides, step = [], itemsize
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def _basic_key(key: Any) -> tuple[Any, ...]:
    parts = key if isinstance(key, tuple) else (key,)
    for part in parts:
        if isinstance(part, (bool, np.bool_)) or not (
                isinstance(part, (int, np.integer, slice)) or part is Ellipsis):
            raise TypeError(f"device arrays take basic indices (ints, slices, ...), not "
                            f"{part!r}: copy to the host with .numpy() for NumPy's indexing")
        if isinstance(part, slice) and part.step is not None and part.step <= 0:
            raise TypeError(f"device-array views need positive slice steps, got {part!r}")
    return parts


def view_of(array: DeviceArray, key: Any) -> DeviceArray:
    """The view `array[key]`: NumPy works out its offset, shape and strides on a stand-in
    array that has the same layout and no memory of its own."""
    parts = _basic_key(key)
    stand_in = np.lib.stride_tricks.as_strided(np.zeros(1, array.dtype), array.shape,
                                               array.strides)
    try:
        picked = stand_in[parts]
    except IndexError as exc:
        raise IndexError(f"{exc} (a device array of shape {array.shape})") from None
    if picked.ndim == 0:
        raise TypeError("indexing every axis of a device array gives one element: read it "
                        "with .numpy() (or keep a slice, a[i:i+1])")
    root = array.base if array.base is not None else array  # (an empty base is falsy)
    offset = array.offset + (picked.__array_interface__["data"][0]
                             - stand_in.__array_interface__["data"][0])
    shape, itemsize = picked.shape, array.dtype.itemsize
    extent = (itemsize + sum((n - 1) * s for n, s in zip(shape, picked.strides))
              if 0 not in shape else 0)
    dev = root.device
    if extent == 0:  # reads and writes nothing: no sub-buffer (OpenCL makes none past its end)
        return DeviceArray(dev, shape, array.dtype, root.buffer, None, root, offset)
    allocator, skip = dev.backend.allocator, offset % _alignment(dev)
    buffer = (root.buffer if offset - skip == 0 and skip + extent == root.nbytes
              else allocator.sub_buffer(dev, root.buffer, offset - skip, skip + extent)
              if supports(allocator, SubBuffers) else None)
    if buffer is None:
        raise ValueError(f"{dev.name} cannot view its arrays (the {dev.backend.name} backend has "
                         "no sub-buffers): copy to the host with .numpy()")
    if skip == 0 and picked.flags.c_contiguous:
        return DeviceArray(dev, shape, array.dtype, buffer, None, root, offset)
    return DeviceArrayView(dev, shape, array.dtype, buffer, picked.strides, skip,
                           skip + extent, root, offset)
