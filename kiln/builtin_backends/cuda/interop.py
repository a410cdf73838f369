"""Zero-copy interop: foreign CUDA arrays in, `__cuda_array_interface__` and DLPack out.

Foreign arrays (CuPy, PyTorch, JAX, ...) are read through cuda-core's `StridedMemoryView`,
which speaks both DLPack and the CUDA array interface (v3) and orders the producer's stream
before kiln's. Exports describe a kiln array in place; its memory stays alive as long as
the consumer holds it.
"""

from __future__ import annotations

import ctypes
from functools import cache
from typing import TYPE_CHECKING, Any

import numpy as np

from ...errors import LaunchError
from ...ir.types import SCALAR_BY_DTYPE
from ...runtime.array import DeviceArray, DeviceArrayView
from ...runtime.device import device
from .driver import api, check, probe
from .memory import Buffer

if TYPE_CHECKING:
    from ...runtime.device import Device

KDL_CUDA = 2
KDL_CUDA_HOST, KDL_CUDA_MANAGED = 3, 13


@cache
def _view_class() -> Any:
    try:
        from cuda.core.utils import StridedMemoryView
    except ImportError:  # cuda-core before 0.4
        from cuda.core.experimental.utils import StridedMemoryView
    return StridedMemoryView


def _view(value: Any, stream: int) -> Any:
    """cuda-core's view of a DLPack or CUDA-array-interface object, ordered after the
    producer's work for `stream`."""
    cls = _view_class()
    if hasattr(cls, "from_any_interface"):  # cuda-core >= 0.5
        return cls.from_any_interface(value, stream_ptr=stream)
    return cls(value, stream_ptr=stream)


def _is_cuda_array(value: Any) -> bool:
    if hasattr(value, "__cuda_array_interface__"):
        return True
    device = getattr(value, "__dlpack_device__", None)
    if device is None:
        return False
    try:
        return device()[0] == KDL_CUDA
    except Exception:
        return False


def _cuda_device(ordinal: int) -> Device:
    return device(f"cuda:{ordinal}")


def adopt(value: Any) -> DeviceArray | None:
    """A DeviceArray sharing a foreign CUDA array's memory, or None for other objects."""
    if isinstance(value, DeviceArray) or not _is_cuda_array(value) or not probe().available:
        return None
    dev = _cuda_device(_device_ordinal(value))
    view = _view(value, int(dev.default_stream.handle.stream))
    dtype = np.dtype(view.dtype)
    shape = tuple(int(s) for s in view.shape)
    if dtype not in SCALAR_BY_DTYPE:
        raise LaunchError(f"a {type(value).__name__} of {dtype} elements has no kiln type")
    if view.strides is not None and tuple(view.strides) != _c_strides(shape):
        raise LaunchError(f"a {type(value).__name__} with strides {tuple(view.strides)} is not "
                          "C-contiguous; pass a contiguous copy")
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    buffer = Buffer(int(view.ptr), nbytes, dev.handle, owner=value)
    return DeviceArray(dev, shape, dtype, buffer)


def _device_ordinal(value: Any) -> int:
    """The GPU a foreign array lives on (DLPack's device, else the pointer's)."""
    if hasattr(value, "__dlpack_device__"):
        return int(value.__dlpack_device__()[1])
    drv = api()
    ptr = value.__cuda_array_interface__["data"][0]
    attr = drv.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
    return int(check(drv.cuPointerGetAttribute(attr, ptr), "cuPointerGetAttribute")) if ptr else 0


def _c_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))


# ---------------------------------------------------------------- exports


def cuda_array_interface(array: DeviceArray) -> dict[str, Any]:
    """CUDA array interface v3; `stream` is the stream kiln's work on the array is queued on."""
    return {
        "shape": array.shape, "typestr": array.dtype.str, "descr": [("", array.dtype.str)],
        "data": (array.buffer.ptr, False), "version": 3,
        "strides": array.strides if isinstance(array, DeviceArrayView) else None,
        "stream": int(array.device.default_stream.handle.stream),
    }


def dlpack_device(array: DeviceArray) -> tuple[int, int]:
    return KDL_CUDA, array.device.handle.ordinal


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    pass


_Deleter = ctypes.CFUNCTYPE(None, ctypes.POINTER(_DLManagedTensor))
_DLManagedTensor._fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                             ("deleter", _Deleter)]

_DL_CODES = {"i": 0, "u": 1, "f": 2, "b": 6}
_LIVE: dict[int, tuple[Any, ...]] = {}
"""Exported tensors by address, holding the kiln array alive until the consumer's deleter."""


@_Deleter
def _delete(managed: Any) -> None:
    _LIVE.pop(ctypes.addressof(managed.contents), None)


def dlpack(array: DeviceArray, stream: Any) -> Any:
    """A DLPack capsule ("dltensor") viewing the array; `stream` is the consumer's stream,
    made to wait for kiln's work on the array (None: the legacy default stream, -1: none)."""
    _order_before(array, stream)
    shape = (ctypes.c_int64 * max(array.ndim, 1))(*array.shape)
    managed = _DLManagedTensor()
    t = managed.dl_tensor
    t.data = array.buffer.ptr or None
    t.device = _DLDevice(KDL_CUDA, array.device.handle.ordinal)
    t.ndim = array.ndim
    t.dtype = _DLDataType(_DL_CODES[array.dtype.kind], array.dtype.itemsize * 8, 1)
    t.shape = shape
    t.strides = None
    t.byte_offset = 0
    managed.deleter = _delete
    address = ctypes.addressof(managed)
    _LIVE[address] = (managed, shape, array)
    new_capsule = ctypes.pythonapi.PyCapsule_New
    new_capsule.restype = ctypes.py_object
    new_capsule.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    return new_capsule(address, b"dltensor", None)


def _order_before(array: DeviceArray, stream: Any) -> None:
    """Make the consumer's stream wait for the work queued on the array's default stream."""
    if stream == -1:
        return
    drv = api()
    ours = array.device.default_stream.handle
    consumer = 0 if stream is None or stream == 1 else int(stream)
    if consumer == int(ours.stream):
        return
    ours.context.activate()
    event = check(drv.cuEventCreate(drv.CUevent_flags.CU_EVENT_DISABLE_TIMING), "cuEventCreate")
    check(drv.cuEventRecord(event, ours.stream), "cuEventRecord")
    check(drv.cuStreamWaitEvent(consumer, event, 0), "cuStreamWaitEvent")
    check(drv.cuEventDestroy(event), "cuEventDestroy")
