"""Device arrays and their constructors."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..ir.types import SCALAR_BY_DTYPE, ScalarType, VectorType
from ..lang.records import kiln_type_of
from .selection import device as resolve_device

if TYPE_CHECKING:
    from .device import Device, Stream


class DeviceArray:
    """A C-contiguous n-d array in one device's memory."""

    def __init__(self, device: Device, shape: tuple[int, ...], dtype: np.dtype, buffer: Any,
                 host: np.ndarray | None = None) -> None:
        self.device = device
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self.buffer = buffer
        self._host = host  # the NumPy array this one shares memory with, if zero-copy

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        return f"<kiln.DeviceArray shape={self.shape} dtype={self.dtype} on {self.device.name}>"

    # Interop: exported when the array's backend implements the optional methods
    # `cuda_array_interface(array)`, `dlpack(array, stream)` and `dlpack_device(array)`.
    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        export = getattr(self.device.backend, "cuda_array_interface", None)
        if export is None:
            raise AttributeError(f"arrays of {self.device.name} are not in CUDA memory")
        return export(self)

    def __dlpack__(self, *, stream: Any = None, max_version: Any = None, dl_device: Any = None,
                    copy: bool | None = None) -> Any:
        export = getattr(self.device.backend, "dlpack", None)
        if export is None or copy:
            raise BufferError(f"arrays of {self.device.name} do not export DLPack"
                              + (" copies" if export else ""))
        return export(self, stream)

    def __dlpack_device__(self) -> tuple[int, int]:
        export = getattr(self.device.backend, "dlpack_device", None)
        if export is None:
            raise BufferError(f"arrays of {self.device.name} do not export DLPack")
        return export(self)

    def copy_to_host(self, out: np.ndarray | None = None, stream: Stream | None = None
                     ) -> np.ndarray:
        """Copy to a NumPy array, waiting for the copy (and the work queued before it)."""
        stream = stream or self.device.default_stream
        if out is None:
            out = np.empty(self.shape, self.dtype)
        target = out if out.flags.c_contiguous else np.empty(self.shape, self.dtype)
        self.device.backend.copy_device_to_host(target, self.buffer, stream.handle)
        stream.synchronize()
        if target is not out:
            out[...] = target
        return out

    def numpy(self) -> np.ndarray:
        """A NumPy copy of the contents, after all queued work on the default stream."""
        return self.copy_to_host()

    def copy_from_host(self, src: np.ndarray, stream: Stream | None = None) -> None:
        stream = stream or self.device.default_stream
        src = np.ascontiguousarray(src, dtype=self.dtype)
        if src.shape != self.shape:
            raise ValueError(f"shape {src.shape} does not match the device array's {self.shape}")
        self.device.backend.copy_host_to_device(self.buffer, src, stream.handle)


def _dtype_of(dtype: Any) -> np.dtype:
    """Element dtypes: kiln scalar types, NumPy numbers, and records or variants (a struct
    class, a `kiln.variant` or a NumPy structured dtype)."""
    if isinstance(dtype, ScalarType):
        return dtype.dtype
    record = kiln_type_of(dtype)
    if record is not None:
        return record.dtype
    dt = np.dtype(dtype)
    if dt not in SCALAR_BY_DTYPE and dt.names is None:
        raise TypeError(f"kiln arrays hold numbers and bools (and records), not {dt}")
    return dt


def _layout(shape: int | tuple[int, ...], dtype: Any) -> tuple[tuple[int, ...], np.dtype]:
    """Host shape and dtype of an array of `shape` elements (a vector type such as f32x4
    adds a last dimension of its length)."""
    dims = (int(shape),) if np.isscalar(shape) else tuple(int(s) for s in shape)  # type: ignore
    if isinstance(dtype, VectorType):
        return (*dims, dtype.n), dtype.elem.dtype
    return dims, _dtype_of(dtype)


def empty(shape: int | tuple[int, ...], dtype: Any = np.float32,
          device: Device | str | None = None) -> DeviceArray:
    dev = resolve_device(device)
    dims, dt = _layout(shape, dtype)
    nbytes = int(np.prod(dims, dtype=np.int64)) * dt.itemsize
    return DeviceArray(dev, dims, dt, dev.backend.allocate(dev, nbytes))


def to_device(array: Any, device: Device | str | None = None,
              stream: Stream | None = None) -> DeviceArray:
    """Copy a NumPy array to a device (sharing its memory where the device is the host)."""
    dev = resolve_device(device)
    host = np.asarray(array)
    _dtype_of(host.dtype)
    if host.flags.c_contiguous:
        shared = dev.backend.wrap_host(dev, host)
        if shared is not None:
            return DeviceArray(dev, host.shape, host.dtype, shared, host)
    out = empty(host.shape, host.dtype, dev)
    out.copy_from_host(np.ascontiguousarray(host), stream)
    return out


def full(shape: int | tuple[int, ...], value: Any, dtype: Any = np.float32,
         device: Device | str | None = None) -> DeviceArray:
    dims, dt = _layout(shape, dtype)
    return to_device(np.full(dims, value, dt), device)


def zeros(shape: int | tuple[int, ...], dtype: Any = np.float32,
          device: Device | str | None = None) -> DeviceArray:
    return full(shape, 0, dtype, device)


def empty_like(array: DeviceArray | np.ndarray, device: Device | str | None = None
               ) -> DeviceArray:
    if device is None and isinstance(array, DeviceArray):
        device = array.device
    return empty(array.shape, array.dtype, device)
