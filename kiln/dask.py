"""kiln kernels over the chunks of `dask.array`s (`pip install 'kiln[dask]'`).

Each chunk is one launch, one thread per element of the chunk: array parameters take the
chunks (a NumPy array of another shape than the dask arrays' goes whole to every chunk),
output parameters (named in `out=`) get new chunks of the first input's chunk shape
with the element type of their annotation, and `kiln.shard_start` / `kiln.shard_rows` give
the chunk's first row in the whole array and its rows, as in a sharded launch.

On a `distributed` cluster each worker process builds a kernel once and keeps it, with its
compiled code (the disk cache is shared by the workers of one machine), and launches on its
own device: `device=` where given, else `KILN_DASK_DEVICE`, else, where the best backend
has several devices, the worker's number modulo their count (one worker per GPU), else
the best device. With `on_device=True` result chunks stay in device memory, so chained
kiln calls on one worker do not copy them back to the host in between; `to_host` brings
them back (chunks that move between workers go through the host), and computing them
without it is an error that says so.

Kernels reach workers by module and name where the workers can import them, else by value
with their source text (docs/scale-out.md, "Dask").
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import io
import pickle
import sys
import threading
from collections.abc import Sequence
from typing import Any

import cloudpickle
import dask
import dask.array as da
import numpy as np
from dask.array.dispatch import concatenate_lookup
from dask.array.overlap import overlap

from . import settings
from .errors import LaunchError
from .execution.executor import check_argument
from .execution.kernel import Kernel, launch
from .execution.sharding import Placeholder
from .ir.types import ArrayType
from .lang.functions import Compilable
from .lang.source import adopt_source, parse_function, read_source
from .runtime.array import DeviceArray, empty, to_device
from .runtime.device import Device
from .runtime.device import device as resolve_device
from .runtime.device import devices as all_devices

OUTPUT = "output"
CHUNK = "chunk"  # a chunk of a dask array, or a NumPy array passed whole to every chunk


class KernelRef:
    """A kernel as tasks carry it to workers (see `_ShippingPickler`); each worker process
    unpickles it once and reuses the kernel, with its compiled code. The calling process
    keeps the kernel object it was given (a module reloaded since is then no stale hit)."""

    _built: dict[str, Kernel] = {}

    def __init__(self, kernel: Kernel) -> None:
        buffer = io.BytesIO()
        try:
            _ShippingPickler(buffer).dump(kernel)
        except (pickle.PicklingError, TypeError, AttributeError) as exc:
            raise LaunchError(f"kiln.dask cannot send {kernel.name} to the workers: a value "
                              f"it reads cannot be pickled ({exc})") from None
        self.blob = buffer.getvalue()
        self.digest = hashlib.sha256(self.blob).hexdigest()
        self.kernel: Kernel | None = kernel

    def __getstate__(self) -> dict[str, Any]:
        return {"blob": self.blob, "digest": self.digest, "kernel": None}

    def get(self) -> Kernel:
        if self.kernel is not None:
            return self.kernel
        found = self._built.get(self.digest)
        if found is None:
            found = self._built[self.digest] = pickle.loads(self.blob)
        return found


class _ShippingPickler(cloudpickle.Pickler):
    """cloudpickle, which sends functions of `__main__` and functions made inside others by
    value, with kernels and device functions sent as workers can compile them: by module
    and name where the workers can import them; else by value, with their source text (the
    frontend reads it, and pickled code carries none), their options and the globals their
    annotations name, which pickling leaves out."""

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, Compilable):
            return _reduce_compilable(obj)
        return super().reducer_override(obj)


def _reduce_compilable(fn: Compilable) -> tuple[Any, ...]:
    where = _import_path(fn)
    if where is not None:
        return _import, where
    pyfunc = fn.pyfunc
    source = None if _import_path(pyfunc) else read_source(pyfunc)
    state = (pyfunc, fn.options, _annotation_names(pyfunc), source)
    # The state goes after the shell, so a recursive device function can name itself.
    return _shell, (type(fn),), state, None, None, _fill


def _import_path(obj: Any) -> tuple[str, str] | None:
    """The module and qualified name workers import `obj` from, if any. Never `__main__`:
    a notebook's cannot be imported, and a script's is imported by process workers
    without what its `if __name__ == "__main__":` block defines."""
    module = sys.modules.get(obj.__module__) if obj.__module__ != "__main__" else None
    found = module
    for part in obj.__qualname__.split("."):
        found = getattr(found, part, None)
    return (obj.__module__, obj.__qualname__) if module and found is obj else None


def _import(module: str, qualname: str) -> Any:
    try:
        found = importlib.import_module(module)
        for part in qualname.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError) as exc:
        raise LaunchError(f"kiln.dask: this worker cannot import {qualname} from {module} "
                          f"({exc}); workers import the modules that kernels are defined "
                          "in, so make it importable there (installed, or on sys.path)"
                          ) from None
    return found


def _shell(kind: type[Compilable]) -> Compilable:
    return kind.__new__(kind)


def _fill(fn: Compilable, state: tuple[Any, ...]) -> None:
    pyfunc, options, names, source = state
    for name, value in names.items():
        pyfunc.__globals__.setdefault(name, value)
    if source is not None:
        adopt_source(pyfunc, source)
    type(fn).__init__(fn, pyfunc, options)


def _annotation_names(pyfunc: Any) -> dict[str, Any]:
    """The globals that the function's annotations name (`f32` in `f32[:]`): the frontend
    reads annotations from the source, and pickling by value keeps only the globals the
    code reads."""
    tree = parse_function(pyfunc).tree
    names: set[str] = set()
    for annotation in [a.annotation for a in tree.args.args] + [tree.returns]:
        node: ast.AST | None = annotation
        if isinstance(node, ast.Constant) and isinstance(node.value, str):  # "f32[:]"
            node = ast.parse(node.value, mode="eval")
        names |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} if node else set()
    return {n: pyfunc.__globals__[n] for n in names if n in pyfunc.__globals__}


def worker_device(spec: str | None = None) -> Device:
    """The device this process launches chunks on (see the module docstring)."""
    spec = spec or settings.dask_device()
    if spec is not None:
        return resolve_device(spec)
    best = resolve_device(None)
    peers = [d for d in all_devices() if d.backend is best.backend]
    number = _worker_number()
    return peers[number % len(peers)] if number is not None and len(peers) > 1 else best


def _worker_number() -> int | None:
    try:
        from distributed import get_worker

        name = get_worker().name
    except (ImportError, ValueError):
        return None
    return name if isinstance(name, int) else None


LAUNCHING = threading.Lock()
"""One chunk at a time per process (Dask's threaded scheduler, a worker with several
threads): each launch already uses the whole device, so chunks launched at once would only
contend for it."""


class ChunkLaunch:
    """The task run on each chunk: it goes to the workers, so it holds only picklable
    things (the kernel as a `KernelRef`, what each parameter takes, where chunks start)."""

    def __init__(self, kernel: Kernel, args: Sequence[Any], out: str | Sequence[str],
                 device: str | None, halo: int = 0, on_device: bool = False) -> None:
        if not isinstance(kernel, Kernel):
            raise LaunchError(f"kiln.dask launches a @kiln.kernel over chunks, got "
                              f"{_describe(kernel)}")
        self.name, self.out = kernel.name, _output_names(kernel, out)
        self.__name__ = kernel.name  # what Dask names the tasks after (dashboards, keys)
        params = dict(kernel.signature)
        self.annotations = [_output_type(kernel, name, params.get(name, False))
                            for name in self.out]
        self.dtypes = [a.elem.dtype for a in self.annotations]
        self.kinds, self.inputs, self.arrays = _bind(kernel, args, self.out)
        self.first = next(k for k, a in enumerate(self.inputs) if a is self.arrays[0])
        rows = self.arrays[0].chunks[0]
        self.starts = [int(s) for s in np.cumsum((0, *rows[:-1]))]
        self.ref, self.device, self.halo, self.on_device = KernelRef(kernel), device, halo, \
            on_device

    def __getstate__(self) -> dict[str, Any]:
        """What the workers need: not the dask arrays, whose graphs can hold all the data
        (`da.from_array`), which every task would then carry."""
        return {name: value for name, value in vars(self).items()
                if name not in ("arrays", "inputs")}

    def start_of(self, block_info: dict[Any, Any] | None) -> int:
        """The first row, in the whole array, of the chunk that `block_info` describes."""
        return self.starts[block_info[None]["chunk-location"][0] if block_info else 0]

    def __call__(self, *chunks: Any, block_info: dict[Any, Any] | None = None) -> Any:
        with LAUNCHING:
            return self.launch_chunk(chunks, block_info)

    def launch_chunk(self, chunks: Sequence[Any], block_info: dict[Any, Any] | None) -> Any:
        first, h = chunks[self.first], self.halo
        rows = first.shape[0] - 2 * h
        dev = worker_device(self.device)
        outputs = [empty(first.shape, dtype, dev) for dtype in self.dtypes]
        self.run(dev, chunks, outputs, self.start_of(block_info), rows,
                 (rows, *first.shape[1:]))
        if h:  # the own rows, without the ghost rows
            outputs = [o[h:h + rows].copy() for o in outputs]
        results = [o if self.on_device else o.numpy() for o in outputs]
        return results[0] if len(results) == 1 else tuple(results)

    def run(self, dev: Device, chunks: Sequence[Any], outputs: Sequence[DeviceArray],
            start: int, rows: int, dim: tuple[int, ...]) -> None:
        given, made = iter(chunks), iter(outputs)
        call = [next(made) if kind == OUTPUT else _on(next(given), dev) if kind == CHUNK
                else kind.value(start, rows) if isinstance(kind, Placeholder) else kind
                for kind in self.kinds]
        launch(self.ref.get(), dim=dim, args=call, device=dev)


def _describe(value: Any) -> str:
    """What a user passed, by type and name where it has one (a function's)."""
    name = getattr(getattr(value, "pyfunc", value), "__qualname__", None)
    return f"{type(value).__name__} {name}" if isinstance(name, str) else repr(value)


def _output_names(kernel: Kernel, out: str | Sequence[str]) -> list[str]:
    names = [out] if isinstance(out, str) else list(out)
    if not names:
        raise LaunchError(f"kiln.dask needs out= naming the output parameter(s) of "
                          f"{kernel.name}")
    if len(set(names)) != len(names):
        raise LaunchError(f"kiln.dask: out= names a parameter of {kernel.name} twice: {names}")
    return names


def _output_type(kernel: Kernel, name: str, annotation: Any) -> ArrayType:
    if annotation is False:
        raise LaunchError(f"{kernel.name} has no parameter {name!r} to write (out=); its "
                          f"parameters: {', '.join(n for n, _ in kernel.signature)}")
    if not isinstance(annotation, ArrayType):
        raise LaunchError(f"output {name!r} of {kernel.name} must be annotated as an array "
                          "(e.g. f32[:]) for kiln.dask to allocate its chunks")
    return annotation


def _bind(kernel: Kernel, args: Sequence[Any], out: list[str]
          ) -> tuple[list[Any], list[Any], list[da.Array]]:
    """What each parameter takes (an output, a chunk, a placeholder or a value), what the
    tasks take chunks from (dask arrays, and NumPy arrays passed whole as one graph value
    each) and the dask arrays among them, checked now as each launch would check them: a
    mistake is an error where the graph is built, not one per chunk on the workers. A NumPy
    array of the first dask array's shape is split as it is (the first NumPy array is
    the one to split where no dask array is given); one of another shape goes whole to
    every chunk."""
    names = [name for name, _ in kernel.signature if name not in out]
    if len(args) != len(names):
        raise LaunchError(f"{kernel.name} takes {len(names)} argument(s) besides its "
                          f"outputs ({', '.join(names)}), got {len(args)}")
    template = next((a for a in args if isinstance(a, da.Array)), None)
    first = next((a for a in args if isinstance(a, np.ndarray)), None)
    shape = template.shape if template is not None else first.shape if first is not None \
        else None
    values = iter(args)
    kinds: list[Any] = []
    inputs: list[Any] = []
    arrays: list[da.Array] = []
    for position, (name, expected) in enumerate(kernel.signature):
        if name in out:
            kinds.append(OUTPUT)
            continue
        value = next(values)
        sample = 0 if isinstance(value, Placeholder) else value
        if isinstance(value, np.ndarray) and value.shape != shape:
            inputs.append(dask.delayed(value, pure=True))  # in the graph once
            value = CHUNK
        elif isinstance(value, (da.Array, np.ndarray)):
            value = _as_dask(value, template)
            _check_chunks(kernel, name, value)
            arrays.append(value)
            inputs.append(value)
            sample = np.broadcast_to(np.zeros((), value.dtype),  # a first chunk's shape
                                     tuple(c[0] for c in value.chunks))
            value = CHUNK
        check_argument(kernel.name, name, position, expected, sample)
        kinds.append(value)
    if not arrays:
        raise LaunchError(f"kiln.dask: no argument of {kernel.name} is an array to take "
                          "chunks from")
    for other in arrays[1:]:
        if other.chunks != arrays[0].chunks:
            raise LaunchError(f"kiln.dask: the array arguments of {kernel.name} must have "
                              f"the same shape and chunks; {arrays[0].chunks} and "
                              f"{other.chunks} differ (use x.rechunk(y.chunks))")
    return kinds, inputs, arrays


def _check_chunks(kernel: Kernel, name: str, array: da.Array) -> None:
    where = f"kiln.dask: argument {name!r} of {kernel.name}"
    if not 1 <= array.ndim <= 3:
        raise LaunchError(f"{where} is a {array.ndim}-d array; each chunk is one launch of "
                          "one thread per element, so arrays have 1 to 3 axes (pass a "
                          "number for a 0-d one)")
    if any(np.isnan(size) for sizes in array.chunks for size in sizes):
        raise LaunchError(f"{where} has chunks of unknown size (after boolean indexing, "
                          "say): x.compute_chunk_sizes() first")
    if isinstance(array._meta, np.ma.MaskedArray):
        raise LaunchError(_MASKED.format(where=where))


_MASKED = ("{where} is a masked array: kernels take no masks (a kernel would read the "
           "masked elements' data); pass dask.array.ma.filled(x, value) or "
           "dask.array.ma.getdata(x)")


def _as_dask(value: da.Array | np.ndarray, template: da.Array | None) -> da.Array:
    if isinstance(value, np.ndarray) and template is not None:
        return da.from_array(value, chunks=template.chunks)
    return da.asarray(value)


def _on(chunk: Any, dev: Device) -> DeviceArray:
    if isinstance(chunk, np.ma.MaskedArray):  # a chunk its array's meta did not announce
        raise LaunchError(_MASKED.format(where="kiln.dask: a chunk"))
    if isinstance(chunk, DeviceArray):
        return chunk if chunk.device is dev else chunk.to(dev)
    return to_device(np.ascontiguousarray(chunk), dev)


def _mapped(task: ChunkLaunch, inputs: Sequence[Any], **extra: Any) -> Any:
    """`task` over the chunks of `inputs` (`task.inputs`, or those with ghost rows)."""
    ndim = task.arrays[0].ndim
    for name, annotation in zip(task.out, task.annotations):
        if annotation.ndim != ndim:
            raise LaunchError(f"output {name!r} of {task.name} is {annotation}, and "
                              f"its chunks take the shape of the {ndim}-d array arguments'")
    if len(task.out) == 1:
        dtype = task.dtypes[0]
        return _kept(task, da.map_blocks(task, *inputs, dtype=dtype,
                                         meta=np.empty((0,) * ndim, dtype), **extra))
    both = da.map_blocks(task, *inputs, dtype=object, meta=np.empty((0,) * ndim, object),
                         **extra)
    return tuple(_kept(task, both.map_blocks(_pick, k, dtype=dt, meta=np.empty((0,) * ndim, dt)))
                 for k, dt in enumerate(task.dtypes))


def _pick(results: tuple[Any, ...], k: int) -> Any:
    return results[k]


def map_blocks(kernel: Kernel, *args: Any, out: str | Sequence[str], device: str | None = None,
               on_device: bool = False) -> Any:
    """`kernel` launched on each chunk of its array arguments (aligned as
    `dask.array.map_blocks` aligns them): the dask array of the `out` parameter (a tuple
    of them for several)."""
    task = ChunkLaunch(kernel, args, out, device, on_device=on_device)
    return _mapped(task, task.inputs)


def map_overlap(kernel: Kernel, *args: Any, out: str, depth: int, device: str | None = None,
                on_device: bool = False) -> da.Array:
    """As `map_blocks`, each chunk with `depth` ghost rows from its neighbours on both
    sides of the first axis (zeros past the array's ends), laid out as a sharded array's
    halo (`kiln.shard_rows` counts the chunk's own rows); the outputs' ghost rows are
    dropped. Chunks kept on devices come to the host first: Dask copies the ghost rows
    (`on_device=True` keeps the output's chunks on the devices, as for `map_blocks`)."""
    if not isinstance(out, str):
        raise LaunchError("kiln.dask.map_overlap writes one output: out='name'")
    if not isinstance(depth, (int, np.integer)) or isinstance(depth, bool) or depth < 0:
        raise LaunchError(f"kiln.dask.map_overlap: depth is a number of rows (an int, 0 or "
                          f"more), got {depth!r}")
    args = tuple(to_host(a) if isinstance(a, da.Array) else a for a in args)
    task = ChunkLaunch(kernel, args, out, device, halo=int(depth), on_device=on_device)
    chunks = task.arrays[0].chunks
    across = [axis for axis in range(1, len(chunks)) if len(chunks[axis]) > 1]
    if across:
        whole = ", ".join(f"{axis}: -1" for axis in across)
        raise LaunchError(f"kiln.dask.map_overlap adds ghost rows along the first axis only "
                          f"(a sharded array's halo), and the arrays are chunked along axis "
                          f"{', '.join(map(str, across))} too; make each chunk whole rows "
                          f"first: x.rechunk({{{whole}}})")
    smallest = min(chunks[0])
    if depth > smallest:
        raise LaunchError(f"kiln.dask.map_overlap: depth {depth} is more than the smallest "
                          f"chunk's {smallest} rows; rechunk (x.rechunk({depth})) or lower it")
    ghosts = {0: int(depth), **{a: 0 for a in range(1, len(chunks))}}
    zeros = {axis: 0 for axis in ghosts}
    inputs = [overlap(a, ghosts, zeros) if isinstance(a, da.Array) else a for a in task.inputs]
    return _mapped(task, inputs, chunks=chunks)  # the task drops the ghost rows


def reduction(kernel: Kernel, array: Any, *args: Any, out: str, combine: np.ufunc = np.add,
              initial: Any = None, device: str | None = None) -> da.Array:
    """A reduction of `array` to one value: `kernel` accumulates each chunk into its
    one-element `out` array, first filled with `combine`'s identity, then Dask's reduction
    tree folds the partial results with `combine`; a 0-d dask array. `initial` enters once,
    as in `ufunc.reduce`; a ufunc without an identity (np.maximum) needs it, and starts
    each chunk from it (e.g. -np.inf)."""
    task = ChunkLaunch(kernel, (array, *args), out, device)
    if len(task.arrays) != 1 or len(task.out) != 1:
        raise LaunchError("kiln.dask.reduction reduces one array into one output")
    if task.annotations[0].ndim != 1:
        raise LaunchError(f"kiln.dask.reduction: output {out!r} of {kernel.name} is "
                          f"{task.annotations[0]}; it holds one value, as a 1-d array")
    partial = PartialSum(task, combine, initial)
    x, dtype = task.arrays[0], task.dtypes[0]
    partials = da.map_blocks(partial, *task.inputs,
                             chunks=tuple((1,) * len(c) for c in x.chunks), dtype=dtype,
                             meta=np.empty((0,) * x.ndim, dtype))
    return da.reduction(partials, partial.fold, partial.finish, combine=partial.fold,
                        dtype=dtype, concatenate=True)


class PartialSum:
    """The chunk and fold functions of `reduction` (picklable, for the workers): each
    chunk's partial result is one element of an array of them, one per chunk, which
    Dask's reduction tree folds."""

    def __init__(self, task: ChunkLaunch, combine: np.ufunc, initial: Any) -> None:
        if not isinstance(combine, np.ufunc):
            raise LaunchError(f"kiln.dask.reduction combines with a NumPy ufunc (np.add, "
                              f"np.maximum, ...), not {combine!r}")
        if initial is None and combine.identity is None:
            raise LaunchError(f"kiln.dask.reduction: {combine.__name__} has no identity; give "
                              "initial= (e.g. -np.inf for a maximum)")
        dtype = task.dtypes[0]
        self.task, self.combine = task, combine
        self.__name__ = f"{task.name}-partial"
        self.initial = None if initial is None else _initial(task, initial)
        self.start = self.initial if combine.identity is None else \
            np.asarray(combine.identity).astype(dtype).reshape(1)

    def __call__(self, *chunks: Any, block_info: dict[Any, Any] | None = None) -> np.ndarray:
        with LAUNCHING:
            dev = worker_device(self.task.device)
            acc = to_device(self.start, dev)
            shape = tuple(chunks[self.task.first].shape)
            self.task.run(dev, chunks, [acc], self.task.start_of(block_info), shape[0],
                          shape)
            return acc.numpy().reshape((1,) * len(shape))

    def fold(self, partials: np.ndarray, axis: Any, keepdims: bool) -> np.ndarray:
        return self.combine.reduce(partials, axis=axis, keepdims=keepdims)

    def finish(self, partials: np.ndarray, axis: Any, keepdims: bool) -> np.ndarray:
        """The last fold, with `initial` (once)."""
        total = self.fold(partials, axis, keepdims)
        return total if self.initial is None else self.combine(self.initial[0], total)


def _initial(task: ChunkLaunch, initial: Any) -> np.ndarray:
    """`initial` as a one-element array of the output's type, refused as a launch refuses
    an argument (no float for an integer, a number that fits) or where it overflows."""
    dtype = task.dtypes[0]
    try:
        check_argument(task.name, task.out[0], 0, task.annotations[0].elem, initial)
        with np.errstate(invalid="raise", over="raise"):
            return np.full(1, initial, dtype)
    except (LaunchError, ValueError, TypeError, OverflowError, FloatingPointError):
        raise LaunchError(f"kiln.dask.reduction: initial={initial!r} is not a {dtype.name} "
                          f"value, the type of {task.out[0]!r}") from None


ON_DEVICE = ("its chunks are kept in device memory (on_device=True): bring them to the host "
             "with kiln.dask.to_host(array) first")


class DeviceChunks(da.Array):
    """The dask array of `on_device=True`, whose chunks are `kiln.DeviceArray`s: kiln.dask
    calls take it, and `to_host` brings it back; computing it is an error that says so
    (Dask would join device arrays as NumPy arrays, or return the one chunk as it is),
    and persisting keeps it one."""

    def __dask_postcompute__(self) -> Any:
        return _refuse_compute, ()

    def __dask_postpersist__(self) -> Any:
        rebuild, args = super().__dask_postpersist__()
        return _kept_again, (rebuild, *args)


def _refuse_compute(chunks: Any) -> Any:
    """The last step of computing a `DeviceChunks` (Dask asks for it when persisting too,
    so refusing must wait until then)."""
    raise LaunchError(f"cannot compute this dask array: {ON_DEVICE}")


def _kept(task: ChunkLaunch, array: da.Array) -> da.Array:
    return _device_chunks(array) if task.on_device else array


def _kept_again(dsk: Any, rebuild: Any, *args: Any, rename: Any = None) -> DeviceChunks:
    return _device_chunks(rebuild(dsk, *args, rename=rename))


def _device_chunks(array: da.Array) -> DeviceChunks:
    return DeviceChunks(array.dask, array.name, array.chunks, array.dtype,
                        np.empty((0,) * array.ndim, array.dtype))


@concatenate_lookup.register(DeviceArray)
def _no_joining(arrays: Sequence[Any], axis: int = 0) -> Any:
    """Dask joins chunks (computing, rechunking, slicing across chunks) with the
    concatenation registered for their type: for device chunks, an error saying what to do."""
    raise LaunchError(f"Dask cannot join the chunks of this array: {ON_DEVICE}")


def to_host(array: Any) -> da.Array:
    """Chunks kept on devices (`on_device=True`) back in host memory (any other array as it
    is, as a dask array)."""
    array = da.asarray(array)
    return array.map_blocks(_host_chunk, dtype=array.dtype,
                            meta=np.empty((0,) * array.ndim, array.dtype))


def _host_chunk(chunk: Any) -> np.ndarray:
    return chunk.numpy() if isinstance(chunk, DeviceArray) else chunk
