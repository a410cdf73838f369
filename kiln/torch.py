"""kiln kernels as PyTorch operators (`pip install 'kiln[torch]'`; docs/pytorch.md).

`kiln.torch.op(name)` registers a wrapper (a function that allocates its outputs with
PyTorch and launches kiln kernels through `kiln.torch.launch`) as a `torch.library` custom
operator. The same wrapper is the operator's fake implementation: on FakeTensors (what
`torch.compile` traces with) and meta tensors it allocates outputs of the right shapes and
`launch` queues nothing, so shapes propagate without running a kernel. On real tensors
`launch` hands kiln the tensors' memory without copies (CPU tensors as NumPy views, CUDA
tensors by address) and queues the kernel on PyTorch's current CUDA stream, without
synchronising.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

try:
    import torch
    from torch._subclasses.fake_tensor import FakeTensor
except ImportError as exc:  # the module is the kiln[torch] extra
    raise ImportError("kiln.torch needs PyTorch: pip install 'kiln[torch]'") from exc

from .builtin_backends.cuda.driver import api as cuda_api
from .builtin_backends.cuda.memory import Buffer
from .errors import DeviceMismatchError, LaunchError
from .execution.executor import bind_arguments
from .execution.kernel import Kernel
from .execution.kernel import launch as kiln_launch
from .ir.types import SCALAR_BY_DTYPE, bf16
from .runtime.array import DeviceArray
from .runtime.device import Device, Stream
from .runtime.device import device as resolve_device

__all__ = ["KilnOp", "launch", "op"]

_DTYPES: dict[torch.dtype, np.dtype] = {
    torch.bool: np.dtype(np.bool_), torch.int8: np.dtype(np.int8),
    torch.int16: np.dtype(np.int16), torch.int32: np.dtype(np.int32),
    torch.int64: np.dtype(np.int64), torch.uint8: np.dtype(np.uint8),
    torch.uint16: np.dtype(np.uint16), torch.uint32: np.dtype(np.uint32),
    torch.uint64: np.dtype(np.uint64),
    torch.float16: np.dtype(np.float16), torch.float32: np.dtype(np.float32),
    torch.float64: np.dtype(np.float64), torch.bfloat16: bf16.dtype,
}
"""PyTorch's element types that are kiln's, as NumPy dtypes."""


# ---------------------------------------------------------------- operators


def op(name: str, *, mutates_args: Iterable[str] = (),
       device_types: str | Sequence[str] | None = None) -> Callable[[Callable[..., Any]], KilnOp]:
    """Register the decorated wrapper as the PyTorch operator `name` ("namespace::op"),
    its real and its fake implementation (see the module's docstring). The wrapper's
    parameters and result are annotated as `torch.library.custom_op` asks (`Tensor`,
    `int`, `float`, `list[Tensor]`, ...); it must not read tensors' values on the host."""

    def register(wrapper: Callable[..., Any]) -> KilnOp:
        custom = torch.library.custom_op(name, wrapper, mutates_args=tuple(mutates_args),
                                         device_types=device_types)
        custom.register_fake(wrapper)
        return KilnOp(name, custom)

    return register


class KilnOp:
    """A registered kiln operator: call it as a function (what `torch.compile` traces as
    one node); `register_autograd` gives it a backward."""

    def __init__(self, name: str, custom: Any) -> None:
        self.name = name
        self.custom = custom  # the torch.library.CustomOpDef
        self.differentiable = False

    @property
    def default(self) -> Any:
        """The OpOverload (`torch.ops.<namespace>.<op>.default`), for `torch.library.opcheck`."""
        return self.custom._opoverload

    def register_autograd(self, backward: Callable[..., Any], *,
                          setup_context: Callable[..., Any] | None = None) -> None:
        """`backward(ctx, *grads)` returns one gradient (or None) per input and should call
        kiln operators (a backward kernel's wrapper, itself an `op`); `setup_context(ctx,
        inputs, output)` saves what it needs, as `torch.library.register_autograd`."""
        self.custom.register_autograd(backward, setup_context=setup_context)
        self.differentiable = True

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not self.differentiable and torch.is_grad_enabled():
            _refuse_grad(self.name, (*args, *kwargs.values()))
        return self.custom(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<kiln.torch.op {self.name}>"


def _refuse_grad(name: str, args: Iterable[Any]) -> None:
    """Without a backward, an input that requires grad would give a result whose gradient
    PyTorch cannot compute: say so at the call, not at `backward()`."""
    for a in args:
        if isinstance(a, torch.Tensor) and a.requires_grad:
            raise LaunchError(
                f"kiln operator {name} has no backward, and an input requires grad: register "
                "one with op.register_autograd(backward, setup_context=...), or call it on "
                "x.detach() or under torch.no_grad()")


# ---------------------------------------------------------------- launches


def launch(kernel: Any, grid: Any = None, block: Any = None, args: Sequence[Any] = (), *,
           dim: Any = None, backend: str | None = None) -> None:
    """`kiln.launch` for wrappers: tensors among `args` become kiln arrays sharing their
    memory, on the device the tensors are on (`cuda:N` for CUDA tensors; for CPU tensors,
    `backend`'s device, default "cpu"), queued on PyTorch's current stream. On FakeTensors
    and meta tensors it checks the tensors and queues nothing."""
    name = getattr(kernel, "name", repr(kernel))
    if not isinstance(args, (tuple, list)):
        raise LaunchError(f"kiln.torch.launch({name}): args= takes a tuple or list of the "
                          f"arguments, got {type(args).__name__} (for one: args=(x,))")
    tensors = [(i, a) for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
    for i, t in tensors:
        _check_tensor(name, i, t)
    place = _placement(name, tensors)
    _check_backend(name, place, backend)
    if any(isinstance(t, FakeTensor) or t.is_meta for _, t in tensors):
        _check_types(kernel, args)  # the fake implementation: checks, shapes, no launch
        return
    dev = _kiln_device(name, place, backend)
    stream = _current_stream(dev, place) if place.type == "cuda" else None
    converted = [_as_kiln(a, dev) if isinstance(a, torch.Tensor) else a for a in args]
    # CPU tensors go as NumPy views: the launch returns once it has written them, as
    # PyTorch's CPU operators do
    kiln_launch(kernel, grid, block, converted, dev, stream, dim=dim)


def _check_tensor(name: str, position: int, t: torch.Tensor) -> None:
    """Refuse what kiln cannot view in place: element types kiln lacks, strided layouts."""
    where = f"argument #{position + 1} of {name}"
    if t.dtype not in _DTYPES or _DTYPES[t.dtype] not in SCALAR_BY_DTYPE:
        raise LaunchError(f"{where}: a tensor of {t.dtype} has no kiln element type")
    if t.layout != torch.strided:
        raise LaunchError(f"{where}: a {t.layout} tensor is not a dense array; pass "
                          "t.to_dense()")
    if not t.is_contiguous():
        raise LaunchError(f"{where}: a tensor with strides {tuple(t.stride())} (shape "
                          f"{tuple(t.shape)}) is not contiguous; kernels index C-contiguous "
                          "memory, pass t.contiguous()")


def _check_types(kernel: Any, args: Sequence[Any]) -> None:
    """Check the arguments against the kernel's parameters without launching, so that
    `torch.compile` reports a wrong element type while it traces: tensors stand in as empty
    NumPy arrays of their rank and dtype, symbolic numbers as 0."""
    if not isinstance(kernel, Kernel):
        return  # an autotuned kernel's checks are its candidates'
    stand_ins = [np.empty((0,) * a.ndim, _DTYPES[a.dtype]) if isinstance(a, torch.Tensor)
                 else 0 if isinstance(a, (torch.SymInt, torch.SymFloat, torch.SymBool))
                 else a for a in args]
    bind_arguments(kernel.launch_state, stand_ins)


def _placement(name: str, tensors: list[tuple[int, torch.Tensor]]) -> torch.device:
    """The one PyTorch device all tensor arguments are on (CPU when there are none)."""
    places = {t.device for _, t in tensors if not t.is_meta}
    if len(places) > 1:
        shown = ", ".join(f"#{i + 1} on {t.device}" for i, t in tensors)
        raise DeviceMismatchError(f"{name}: tensor arguments on different devices ({shown}); "
                                  "one launch runs on one device")
    return places.pop() if places else torch.device("cpu")


def _check_backend(name: str, place: torch.device, backend: str | None) -> None:
    """Refuse a device no kiln backend sees, and CUDA tensors for another backend."""
    if place.type == "cuda" and backend not in (None, "cuda"):
        raise DeviceMismatchError(
            f"{name}: the tensors are on {place}, which the {backend} backend cannot see; "
            "launch with backend='cuda' (or move them with .cpu())")
    if place.type not in ("cuda", "cpu"):
        raise DeviceMismatchError(f"{name}: kiln cannot see tensors on {place}; kiln.torch "
                                  "launches on CPU and CUDA tensors")


def _kiln_device(name: str, place: torch.device, backend: str | None) -> Device:
    """The kiln device that sees `place`'s memory: the cuda backend's GPU of a CUDA tensor,
    else a device of `backend` whose memory is the host's."""
    if place.type == "cuda":
        return resolve_device(f"cuda:{place.index or 0}")
    dev = resolve_device(backend or "cpu")
    if not dev.capabilities.unified_memory:
        raise DeviceMismatchError(
            f"{name}: the tensors are in host memory, which {dev.name} cannot read in place; "
            "move them to the GPU (.cuda()) or launch with a host backend ('cpu')")
    return dev


def _as_kiln(t: torch.Tensor, dev: Device) -> Any:
    """The tensor's memory as a kiln argument, without a copy."""
    dtype = _DTYPES[t.dtype]
    if t.device.type == "cpu":
        t = t.detach()
        if t.dtype == torch.bfloat16:  # NumPy has no bfloat16: view its bits
            return t.view(torch.int16).numpy().view(dtype)
        return t.numpy()
    buffer = Buffer(t.data_ptr(), t.numel() * dtype.itemsize, dev.handle, owner=t)
    return DeviceArray(dev, tuple(t.shape), dtype, buffer)


class _BorrowedStream:
    """PyTorch's CUDA stream as the cuda backend's stream handle: kiln queues work on it
    and never destroys it."""

    __slots__ = ("stream", "context")

    def __init__(self, context: Any, stream: int) -> None:
        self.context = context
        self.stream = cuda_api().CUstream(stream)


class _TorchStream(Stream):
    """A kiln Stream over a borrowed handle (`Stream()` would create a stream of its own)."""

    def __init__(self, device: Device, handle: _BorrowedStream) -> None:
        self.device = device
        self.handle = handle
        self.pending = {}
        device.streams.add(self)


_STREAMS: dict[tuple[str, int], Stream] = {}
_STREAMS_LOCK = threading.Lock()


def _current_stream(dev: Device, place: torch.device) -> Stream:
    """PyTorch's current stream on `place`, as a kiln Stream (one per stream, kept)."""
    raw = torch._C._cuda_getCurrentRawStream(place.index or 0)  # what inductor's code calls
    key = (dev.name, raw)
    with _STREAMS_LOCK:
        stream = _STREAMS.get(key)
        if stream is None:
            stream = _STREAMS[key] = _TorchStream(dev, _BorrowedStream(dev.handle, raw))
    return stream
