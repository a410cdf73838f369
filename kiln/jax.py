"""kiln kernels inside JAX programs (`pip install 'kiln[jax]'`; docs/jax.md).

`kiln.jax.op` turns a wrapper (a function of NumPy arrays that allocates its outputs and
launches kiln kernels through `kiln.jax.launch`) into a JAX function that `jax.jit`,
`jax.vmap` and, given a backward, `jax.grad` accept. It runs through `jax.pure_callback`:
XLA hands the host the arguments as NumPy arrays and takes the wrapper's results back. The
results' shapes come from the wrapper itself, run once per argument shapes with launches
skipped (as `kiln.torch`'s fake implementation), so they are never declared twice.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

try:
    import jax
except ImportError as exc:  # the module is the kiln[jax] extra
    raise ImportError("kiln.jax needs JAX: pip install 'kiln[jax]'") from exc

from .errors import LaunchError
from .execution.executor import bind_arguments
from .execution.kernel import Kernel
from .execution.kernel import launch as kiln_launch
from .runtime.device import Device

__all__ = ["JaxOp", "launch", "op"]

_SHAPES_ONLY = contextvars.ContextVar("kiln_jax_shapes_only", default=False)
"""True while a wrapper runs to find its results' shapes: launches are skipped."""

Wrapper = Callable[..., Any]


def launch(kernel: Any, grid: Any = None, block: Any = None, args: Sequence[Any] = (), *,
           dim: Any = None, device: Device | str = "cpu") -> None:
    """`kiln.launch` for wrappers, on `device` (default the cpu backend's). NumPy arrays
    the kernel writes are complete when it returns. While the wrapper runs for its
    results' shapes, it checks the arguments against the kernel's parameters and
    launches nothing."""
    if _SHAPES_ONLY.get():  # check the arguments' types, at trace time, without launching
        if isinstance(kernel, Kernel) and isinstance(args, (tuple, list)):
            bind_arguments(kernel.launch_state, args)
        return
    kiln_launch(kernel, grid, block, args, device, dim=dim)


def op(wrapper: Wrapper | None = None, *, backward: Wrapper | None = None,
       vmap_method: str = "sequential") -> Any:
    """`@kiln.jax.op` or `@kiln.jax.op(backward=..., vmap_method=...)`: the wrapper as a
    JAX function of arrays. `backward(*inputs, cotangent)` (another op) returns one
    gradient per input; `vmap_method` is `jax.pure_callback`'s."""
    if wrapper is None:
        return lambda w: JaxOp(w, backward, vmap_method)
    return JaxOp(wrapper, backward, vmap_method)


class JaxOp:
    """A wrapper callable from JAX; `op.shapes(*args)` is what it returns, as
    `jax.ShapeDtypeStruct`s."""

    def __init__(self, wrapper: Wrapper, backward: Wrapper | None, vmap_method: str) -> None:
        self.wrapper = wrapper
        self.backward = backward
        self.vmap_method = vmap_method
        self.name = getattr(wrapper, "__name__", repr(wrapper))
        self._shapes: dict[tuple[tuple[tuple[int, ...], str], ...], Any] = {}
        self._lock = threading.Lock()
        call = jax.custom_vjp(self._forward)
        call.defvjp(self._forward_saving, self._backward)
        self._call = call

    def __call__(self, *args: Any) -> Any:
        for position, a in enumerate(args):
            if not hasattr(a, "shape") or not hasattr(a, "dtype"):
                raise LaunchError(f"kiln.jax op {self.name}: argument #{position + 1} is "
                                  f"{type(a).__name__} {a!r}, not an array; pass numbers "
                                  "to the wrapper with functools.partial")
        return self._call(*args)

    def __repr__(self) -> str:
        return f"<kiln.jax.op {self.name}>"

    def shapes(self, *args: Any) -> Any:
        """The wrapper's results for arguments of these shapes and dtypes, found by running
        it on uninitialised NumPy arrays with launches skipped (once per shapes)."""
        key = tuple((tuple(np.shape(a)), str(_dtype(a))) for a in args)
        with self._lock:
            if key not in self._shapes:
                stand_ins = [np.empty(shape, dtype) for shape, dtype in key]
                token = _SHAPES_ONLY.set(True)
                try:
                    results = self.wrapper(*stand_ins)
                finally:
                    _SHAPES_ONLY.reset(token)
                self._shapes[key] = jax.tree_util.tree_map(
                    lambda r: jax.ShapeDtypeStruct(np.shape(r), _dtype(r)), results)
            return self._shapes[key]

    def _forward(self, *args: Any) -> Any:
        return jax.pure_callback(self._host, self.shapes(*args), *args,
                                 vmap_method=self.vmap_method)

    def _host(self, *arrays: Any) -> Any:
        """What XLA calls: the wrapper on the arguments' memory, as read-only NumPy arrays
        (JAX arrays are immutable, whichever JAX version hands them over)."""
        return self.wrapper(*(_read_only(a) for a in arrays))

    def _forward_saving(self, *args: Any) -> tuple[Any, tuple[Any, ...]]:
        return self._forward(*args), args

    def _backward(self, inputs: tuple[Any, ...], cotangent: Any) -> tuple[Any, ...]:
        if self.backward is None:
            raise LaunchError(f"kiln.jax op {self.name} has no backward: give one with "
                              "kiln.jax.op(backward=...), or wrap the inputs in "
                              "jax.lax.stop_gradient")
        grads = self.backward(*inputs, cotangent)
        grads = tuple(grads) if isinstance(grads, (tuple, list)) else (grads,)
        if len(grads) != len(inputs):
            raise LaunchError(f"the backward of kiln.jax op {self.name} returned "
                              f"{len(grads)} gradients for {len(inputs)} inputs")
        return grads


def _read_only(a: Any) -> np.ndarray:
    view = np.asarray(a).view()
    view.flags.writeable = False
    return view


def _dtype(a: Any) -> np.dtype:
    return np.dtype(a.dtype)
