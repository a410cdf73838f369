"""Sharded arrays and launches (SPOC's partition and gather): one array split over several
devices along its first axis, one launch per device at once, gathered back.

A shard holds its rows plus `halo` ghost rows on each side (zeros past the array's ends);
`refresh_halo()` copies each shard's edge rows into its neighbours' ghost rows. A sharded
launch passes each device its shard and, for the `kiln.shard_start` / `kiln.shard_rows`
placeholders, where that shard starts in the whole array and how many rows it owns.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import LaunchError
from ..runtime.array import (
    DeviceArray,
    DeviceArrayView,
    _layout,
    check_out,
    copy_array,
    empty,
    full,
    zeros,
)
from ..runtime.device import Device, recorder
from ..runtime.device import device as resolve_device
from .kernel import launch

if TYPE_CHECKING:
    from .kernel import Kernel

Devices = Sequence[Device | str] | Device | str
"""Devices to spread over: a list of devices or specs, or one alone."""


class Placeholder:
    """A launch argument standing for a number of each shard (or Dask chunk): computed
    from the first own row's index in the whole array and the number of own rows."""

    def __init__(self, name: str, value: Callable[[int, int], int]) -> None:
        self.name, self.value = name, value

    def __repr__(self) -> str:
        return f"kiln.{self.name}"


@dataclass(frozen=True)
class Shard:
    """One device's part: rows `start:stop` of the whole array, in `array` after `halo`
    ghost rows (and followed by as many)."""

    device: Device
    array: DeviceArray
    start: int
    stop: int
    halo: int

    @property
    def rows(self) -> int:
        return self.stop - self.start

    @property
    def owned(self) -> DeviceArray:
        """The shard's own rows, without ghost rows."""
        return self.array[self.halo:self.halo + self.rows] if self.halo else self.array


shard_start = Placeholder("shard_start", lambda start, rows: start)
"""Launch argument: the index, in the whole array, of the shard's first own row."""
shard_rows = Placeholder("shard_rows", lambda start, rows: rows)
"""Launch argument: how many rows the shard owns (its `dim` in a sharded launch)."""


def split_rows(n: int, parts: int) -> list[tuple[int, int]]:
    """`parts` contiguous (start, stop) ranges covering `range(n)`, sizes differing by one
    at most (the first ones larger), as `numpy.array_split`."""
    bounds = [k * (n // parts) + min(k, n % parts) for k in range(parts + 1)]
    return list(zip(bounds[:-1], bounds[1:]))


class ShardedArray:
    """An array split over devices along its first axis (see the module docstring)."""

    def __init__(self, shards: Sequence[Shard], shape: tuple[int, ...], dtype: np.dtype
                 ) -> None:
        self.shards = list(shards)
        self.shape = shape
        self.dtype = dtype

    @property
    def devices(self) -> list[Device]:
        return [s.device for s in self.shards]

    @property
    def halo(self) -> int:
        return self.shards[0].halo

    def __repr__(self) -> str:
        where = ", ".join(f"{s.device.name}[{s.start}:{s.stop}]" for s in self.shards)
        return f"<kiln.ShardedArray shape={self.shape} dtype={self.dtype} halo={self.halo}: " \
               f"{where}>"

    def refresh_halo(self) -> None:
        """Copy each shard's first and last `halo` own rows into its neighbours' ghost rows,
        queued on the neighbours' default streams after the work queued before. A copy
        through the host waits for its shards, and may raise their failures: every copy is
        still made, and the failures raised together (`ShardError`)."""
        failures: list[tuple[Shard, Exception, str]] = []
        for dst, src, copy in self._halo_copies:
            try:
                copy()
            except Exception as error:  # the source's or the destination's failure
                failures.append((dst, error, f"shard rows {dst.start}:{dst.stop} (from "
                                             f"rows {src.start}:{src.stop} on {src.device.name})"))
        if failures:
            _raise_together(failures, "refreshing the ghost rows of")

    @cached_property
    def _halo_copies(self) -> list[tuple[Shard, Shard, Callable[[], None]]]:
        """The copies `refresh_halo` makes (the shard each writes, the shard it reads),
        their views made once (a view costs more than queuing its copy: 18 us against
        5-10)."""
        h = self.halo  # no more than any shard's rows (`shard_empty` checks)
        copies = []
        for left, right in zip(self.shards, self.shards[1:]) if h else ():
            copies.append((right, left, _row_copy(right.array, 0, left.array, left.rows, h)))
            copies.append((left, right, _row_copy(left.array, h + left.rows, right.array, h, h)))
        return copies

    def gather(self, out: np.ndarray | None = None) -> np.ndarray:
        """The whole array on the host (in `out`, of the array's shape and dtype, when
        given), once every shard's queued work is done. Every shard is waited for even when
        one fails, and their failures are raised together, once (`ShardError`)."""
        out = np.empty(self.shape, self.dtype) if out is None else check_out(self, out)
        _on_every_shard(self.shards, "gathering",
                        lambda shard: shard.owned.copy_to_host(out[shard.start:shard.stop]))
        return out


class ShardError(LaunchError):
    """Work on shards failed: the message says which rows on which device, for each
    failing shard. `shard` is the first of `shards`, and `__cause__` its error; `errors`
    are every failing shard's, in the order of `shards`."""

    def __init__(self, message: str, shard: Shard, shards: Sequence[Shard] = (),
                 errors: Sequence[BaseException] = ()) -> None:
        super().__init__(message)
        self.shard = shard
        self.shards = list(shards) or [shard]
        self.errors = list(errors)


ShardError.__module__ = "kiln"  # printed as users import it: kiln.ShardError


@contextmanager
def _naming(shard: Shard, doing: str, what: str = "") -> Iterator[None]:
    """Errors while `doing` something with `shard` (`what`: by default its rows) say which
    shard (and device) failed."""
    try:
        yield
    except Exception as error:
        raise _named(shard, error, doing, what) from error


def _named(shard: Shard, error: Exception, doing: str, what: str = "") -> ShardError:
    """A ShardError for `error` while `doing` something with `shard` (`what`: by default
    its rows)."""
    what = what or f"shard rows {shard.start}:{shard.stop}"
    where = f"{doing} {what} on {shard.device.name}"
    return ShardError(f"{where}: {type(error).__name__}: {error}", shard, [shard], [error])


def _on_every_shard(shards: Sequence[Shard], doing: str, work: Callable[[Shard], Any],
                    what: str = "") -> None:
    """`work` on each shard, every one even when some fail (so no failure stays queued to
    surface in a later, unrelated call); then one ShardError naming each failing shard."""
    failures: list[tuple[Shard, Exception, str]] = []
    for shard in shards:
        try:
            work(shard)
        except Exception as error:
            failures.append((shard, error, what))
    if failures:
        _raise_together(failures, doing)


def _raise_together(failures: Sequence[tuple[Shard, Exception, str]], doing: str) -> None:
    """One ShardError for the failures of `doing` something with shards (each failure:
    the shard, its error, what to call it or "" for its rows): the failure itself for one
    shard, and one naming each shard (a line each) for several."""
    named = [_named(shard, error, doing, what) for shard, error, what in failures]
    if len(named) == 1:
        raise named[0] from failures[0][1]
    lines = "\n".join(f"  {failure}" for failure in named)
    causes = [error for _, error, _ in failures]
    shards = len({id(shard) for shard, _, _ in failures})
    raise ShardError(f"{len(named)} failures on {shards} shards:\n{lines}", named[0].shard,
                     [shard for shard, _, _ in failures], causes) from causes[0]


def _row_copy(dst: DeviceArray, at: int, src: DeviceArray, start: int, rows: int
              ) -> Callable[[], None]:
    """A copy of src[start:start+rows] into dst[at:at+rows], on dst's default stream. A
    device that cannot point at those rows (OpenCL sub-buffers start only at aligned
    addresses) has its whole array rewritten through the host instead."""
    target, source = dst[at:at + rows], src[start:start + rows]
    if isinstance(target, DeviceArrayView):
        def through_the_host() -> None:
            whole = dst.numpy()
            whole[at:at + rows] = source.numpy()
            dst.copy_from_host(whole)

        return through_the_host
    if isinstance(source, DeviceArrayView):
        return lambda: copy_array(target, source.copy())
    return lambda: copy_array(target, source)


def _devices(devices: Devices) -> list[Device]:
    """The devices to spread over: a list (or tuple) of devices or specs; one device or
    spec alone is a list of one."""
    if isinstance(devices, (Device, str)):
        devices = [devices]
    if not isinstance(devices, (list, tuple)):
        raise TypeError(f"devices is a list of kiln.Device or specs such as 'cpu', got "
                        f"{type(devices).__name__} {devices!r}")
    found = [resolve_device(d) for d in devices]
    if not found:
        raise ValueError("a sharded array needs at least one device")
    if len({d.name for d in found}) != len(found):
        raise ValueError(f"devices repeat: {[d.name for d in found]}")
    return found


def shard_empty(shape: int | tuple[int, ...], dtype: Any, devices: Devices,
                halo: int = 0) -> ShardedArray:
    """A new array of `shape` split over `devices` along its first axis (ghost rows are
    zeros, own rows uninitialised)."""
    dims, dt = _layout(shape, dtype)
    devs = _devices(devices)
    if isinstance(halo, (bool, np.bool_)) or not isinstance(halo, (int, np.integer)):
        raise TypeError(f"halo is a number of rows (an int), got {halo!r}")
    if halo < 0:
        raise ValueError(f"halo must be 0 or more rows, got {halo}")
    if not dims:
        raise ValueError("only arrays of one or more dimensions can be sharded")
    ranges = split_rows(dims[0], len(devs))
    fewest = min(stop - start for start, stop in ranges)
    if len(devs) > 1 and halo > fewest:
        raise ValueError(f"a halo of {halo} rows needs shards of {halo} rows or more; "
                         f"{dims[0]} rows over {len(devs)} devices leave {fewest} in one")
    shards = []
    for dev, (start, stop) in zip(devs, ranges):
        local = (stop - start + 2 * halo, *dims[1:])
        array = zeros(local, dt, dev) if halo else empty(local, dt, dev)
        shards.append(Shard(dev, array, start, stop, halo))
    return ShardedArray(shards, dims, dt)


def shard(array: np.ndarray | DeviceArray, devices: Devices, halo: int = 0
          ) -> ShardedArray:
    """`array` split over `devices` along its first axis, with `halo` ghost rows on each
    side of every shard already filled from the neighbours."""
    host = array.numpy() if isinstance(array, DeviceArray) else np.asarray(array)
    if host.ndim == 0:
        raise ValueError("only arrays of one or more dimensions can be sharded")
    out = shard_empty(host.shape, host.dtype, devices, halo)
    for s in out.shards:
        lo, hi = max(s.start - halo, 0), min(s.stop + halo, host.shape[0])
        local = np.zeros(s.array.shape, host.dtype)
        first = halo - (s.start - lo)
        local[first:first + hi - lo] = host[lo:hi]
        s.array.copy_from_host(local)
    return out


def launch_sharded(kernel: Kernel, args: Sequence[Any], dim: Any = None) -> None:
    """Launch `kernel` once per device, each on its device's default stream (so the
    devices run at once): a `ShardedArray` argument becomes that device's shard (ghost rows
    included), a `Partials` argument that device's array, `kiln.shard_start` and
    `kiln.shard_rows` the shard's start and own rows. `dim` is a problem size per shard
    (default: the shard's own rows times the first sharded argument's other axes), or a
    function of the `Shard` giving one, called for every shard before any launches."""
    capture = recorder()
    if capture is not None:  # one launch per device: a capture records one stream
        capture.refuse(f"launch_sharded({kernel.name}), which launches on every shard's "
                       "device (capture each device's launches in a thread of its own)")
    sharded = [a for a in args if isinstance(a, ShardedArray)]
    if not sharded:
        raise LaunchError(f"launch_sharded({kernel.name}): no argument is a ShardedArray")
    layout = [(s.device, s.start, s.stop, s.halo) for s in sharded[0].shards]
    for other in sharded[1:]:
        if [(s.device, s.start, s.stop, s.halo) for s in other.shards] != layout:
            raise LaunchError(f"launch_sharded({kernel.name}): sharded arguments must be split "
                              f"over the same devices at the same rows, with the same halo; "
                              f"{sharded[0]!r} and {other!r} are not")
    # Every shard's size and arguments before any launch: a failure launches nothing.
    launches = [_shard_launch(kernel, args, sharded[0], k, dim)
                for k in range(len(sharded[0].shards))]
    for shard, size, local in launches:
        with _naming(shard, f"launching {kernel.name} on"):
            launch(kernel, dim=size, args=local, device=shard.device)


def _shard_launch(kernel: Kernel, args: Sequence[Any], first: ShardedArray, k: int, dim: Any
                  ) -> tuple[Shard, Any, list[Any]]:
    """The `k`th shard of `first`, its launch size and arguments (see `launch_sharded`);
    a failure, `dim`'s own included, is a ShardError naming the shard."""
    shard = first.shards[k]
    with _naming(shard, f"preparing {kernel.name} for"):
        local = [a.shards[k].array if isinstance(a, ShardedArray)
                 else a.on(shard.device) if isinstance(a, Partials)
                 else a.value(shard.start, shard.rows) if isinstance(a, Placeholder) else a
                 for a in args]
        size = (dim(shard) if callable(dim) else dim if dim is not None
                else (shard.rows, *first.shape[1:]))
    return shard, size, local


@dataclass
class Partials:
    """One array per device, for results each device accumulates on its own (a reduction's
    partial sums); `combine` folds them on the host."""

    arrays: list[DeviceArray]

    def combine(self, ufunc: np.ufunc = np.add) -> np.ndarray:
        """The partial results folded with `ufunc`, once every device's work is done."""
        if not isinstance(ufunc, np.ufunc):
            raise TypeError(f"Partials.combine takes a NumPy ufunc (np.add, np.maximum, ...), "
                            f"not {ufunc!r}")
        results: list[np.ndarray] = []
        _on_every_shard([Shard(a.device, a, 0, 0, 0) for a in self.arrays], "combining",
                        lambda part: results.append(part.array.numpy()), "the partial result")
        return ufunc.reduce(np.stack(results), axis=0)

    def on(self, device: Device) -> DeviceArray:
        for array in self.arrays:
            if array.device is device:
                return array
        raise LookupError(f"no partial result on {device.name}")


def partials(shape: int | tuple[int, ...], dtype: Any, devices: Devices,
             fill: Any = 0) -> Partials:
    """A `shape` array filled with `fill` on each of `devices` (see `Partials`): the
    identity of the combining operation (0 for a sum, -inf or the type's lowest value for a
    maximum)."""
    return Partials([full(shape, fill, dtype, d) for d in _devices(devices)])
