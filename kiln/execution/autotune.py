"""Autotuning: `kiln.autotune(configs, key)` times a kernel's candidate configurations on the
launch's device and launches the fastest (docs/autotune.md).

A choice is kept per device, kernel fingerprint, candidate list and key values: in memory,
and on disk as one JSON entry of the compile cache's `autotune` folder (the same folder
checks and atomic writes as compiled binaries). A disk entry is re-validated before use:
anything that does not name this kernel, device, key and one of today's candidates is
ignored, timed again and replaced.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import settings
from ..errors import KernelError, LaunchError
from ..framework.cache import CompileCache
from ..ir.types import ConstexprType
from ..runtime.array import DeviceArray, DeviceArrayView, to_device
from ..runtime.device import Device, Stream, recorder
from .executor import launch_device
from .fingerprint import NotFingerprintable, fingerprint
from .kernel import Kernel, launch

logger = logging.getLogger("kiln.autotune")

FORMAT = 1
"""The version of the disk entries' JSON layout (an entry of another is timed again)."""
WARMUPS = 1
RUNS = 5
RUN_BUDGET_S = 0.5
"""Timed runs per candidate: `RUNS`, fewer once a candidate has taken this long."""
PROGRESS_AFTER_S = 1.0

_DISK = CompileCache("autotune", suffix=".json")


class AutotuneError(LaunchError, ValueError):
    """An autotuned kernel declared or launched wrongly, or no candidate could run."""


@dataclass(frozen=True)
class Config:
    """One candidate: values of constexpr parameters by name, and optionally the block.

    `kiln.Config({"ITEMS": 4}, block=256)` (Triton's `triton.Config`, with kiln's block in
    threads in place of `num_warps`)."""

    params: dict[str, Any] = field(default_factory=dict)
    block: Any = None

    def __post_init__(self) -> None:
        if not isinstance(self.params, dict) or not all(isinstance(k, str) for k in self.params):
            raise AutotuneError(f"kiln.Config takes a dict of constexpr values by parameter "
                                f"name, got {self.params!r}")

    def __getitem__(self, name: str) -> Any:
        """A constexpr value by name (`cfg["TILE"]` in a grid callable, as Triton's `meta`)."""
        try:
            return self.params[name]
        except KeyError:
            raise AutotuneError(f"this kiln.Config sets no {name!r} (it sets "
                                f"{', '.join(self.params) or 'nothing'})") from None

    def describe(self) -> dict[str, Any]:
        """The JSON form kept on disk (values by repr: compared, never evaluated)."""
        return {"params": {k: repr(v) for k, v in sorted(self.params.items())},
                "block": repr(self.block)}

    def __str__(self) -> str:
        parts = [f"{k}={v!r}" for k, v in self.params.items()]
        if self.block is not None:
            parts.append(f"block={self.block!r}")
        return ", ".join(parts) or "(no values)"


@dataclass(frozen=True)
class Choice:
    config: Config
    times_ms: tuple[float | None, ...]


class Autotuned:
    """A kernel with candidate configurations, launched as `k[grid](...)`,
    `k[grid, block](...)`, `k[grid, block, stream](...)` or `kiln.launch(k, grid=..., ...)`
    with the arguments of every parameter but those the configurations set; `grid` (and
    `block`) may be callables of the chosen `Config`."""

    def __init__(self, kernel: Kernel, configs: Sequence[Config], key: Sequence[str]) -> None:
        if not isinstance(kernel, Kernel):
            raise AutotuneError(f"kiln.autotune decorates a @kiln.kernel, got {kernel!r}")
        self.kernel = kernel
        self.name = kernel.name
        self.configs = _checked_configs(kernel, configs)
        names = [name for name, _ in kernel.signature]
        self.tuned = [n for n in names if n in self.configs[0].params]
        self.params = [n for n in names if n not in self.configs[0].params]
        self.key = _checked_key(kernel.name, key, self.params)
        self._choices: dict[tuple[str, str], Choice] = {}
        self._lock = threading.Lock()
        self.tunings = 0
        """How many times this process timed candidates (a test's proof of a cache hit)."""
        self.disk_hits = 0

    def __repr__(self) -> str:
        return f"<kiln.autotune {self.name}: {len(self.configs)} candidates, key={self.key}>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"launch an autotuned kernel with {self.name}[grid](...), "
                        f"{self.name}[grid, block](...) or kiln.launch(...)")

    def __getitem__(self, config: Any) -> Callable[..., None]:
        parts = config if isinstance(config, tuple) else (config,)
        if not 1 <= len(parts) <= 3:
            raise TypeError(f"write {self.name}[grid], {self.name}[grid, block] or "
                            f"{self.name}[grid, block, stream]")
        grid, block, stream = (*parts, None, None)[:3]
        return lambda *args: self.launch_autotuned(grid, block, args, None, stream)

    def launch_autotuned(self, grid: Any, block: Any, args: Sequence[Any],
                         device: Device | str | None = None, stream: Stream | None = None,
                         dim: Any = None) -> None:
        """Launch with the configuration chosen for these arguments' key on the device
        (what `k[grid](...)` and `kiln.launch(k, ...)` call)."""
        if dim is not None:
            raise AutotuneError(f"launching {self.name}: an autotuned kernel launches with "
                                "grid= (an int, a shape, or a callable of the chosen "
                                "kiln.Config), not dim=")
        if not isinstance(args, (tuple, list)):
            raise AutotuneError(f"launching {self.name}: args= takes a tuple or list of the "
                                f"arguments, got {type(args).__name__}")
        args = tuple(args)
        if len(args) != len(self.params):
            raise AutotuneError(f"{self.name} takes {len(self.params)} arguments "
                                f"({', '.join(self.params) or 'none'}; the candidates set "
                                f"{', '.join(self.tuned)}), got {len(args)}")
        dev = launch_device(self.name, args, device, stream)
        choice = self.choose(grid, block, args, dev, stream)
        self._run(choice.config, grid, block, args, dev if device is not None else None, stream)

    def choose(self, grid: Any, block: Any, args: tuple[Any, ...], dev: Device,
               stream: Stream | None) -> Choice:
        """The cached choice for the key of `args` on `dev`, else timed now (and stored)."""
        if not settings.autotune():
            return Choice(self.configs[0], ())
        key = self._key(args)
        where = (_device_identity(dev), key)
        with self._lock:
            found = self._choices.get(where)
            if found is None:
                entry = self._entry_key(*where)
                found = self._load(entry, *where) if entry else None
                if found is None:
                    found = self._tune(grid, block, args, dev, stream, key)
                    if entry:
                        self._store(entry, *where, found)
                else:
                    self.disk_hits += 1
                self._choices[where] = found
        return found

    # ------------------------------------------------------------- timing

    def _tune(self, grid: Any, block: Any, args: tuple[Any, ...], dev: Device,
              stream: Stream | None, key: str) -> Choice:
        capture = recorder()
        if capture is not None:  # timing candidates waits for them
            capture.refuse(f"autotuning {self.name} for {key} (launch it once before the "
                           "capture, which then records the chosen candidate)")
        self.tunings += 1
        start = time.perf_counter()
        times: list[float | None] = []
        skipped: list[str] = []
        for config in self.configs:
            try:
                times.append(self._time(config, grid, block, _scratch(args, dev), dev, stream))
            except (KernelError, LaunchError) as exc:
                times.append(None)
                skipped.append(f"{config} ({_first_line(exc)})")
        timed = [(t, i) for i, t in enumerate(times) if t is not None]
        if not timed:
            raise AutotuneError(f"autotuning {self.name} for {key} on {dev.name}: no candidate "
                                f"could run: {'; '.join(skipped)}")
        best_ms, best = min(timed)
        choice = Choice(self.configs[best], tuple(times))
        elapsed = time.perf_counter() - start
        line = (f"kiln: autotuned {self.name} for {key} on {dev.name} in {elapsed:.1f} s: "
                f"{choice.config} ({best_ms:.3g} ms of {len(self.configs)} candidates)")
        if skipped:
            line += f"; skipped {'; '.join(skipped)}"
        if elapsed > PROGRESS_AFTER_S or skipped:
            print(line, file=sys.stderr, flush=True)
        logger.info("%s", line.removeprefix("kiln: "))
        return choice

    def _time(self, config: Config, grid: Any, block: Any, args: tuple[Any, ...],
              dev: Device, stream: Stream | None) -> float:
        """The fastest of a few synchronised runs, in ms, after a warm-up (which compiles)."""
        for _ in range(WARMUPS):
            self._run(config, grid, block, args, dev, stream)
            dev.synchronize()
        best = float("inf")
        began = time.perf_counter()
        for _ in range(RUNS):
            t0 = time.perf_counter()
            self._run(config, grid, block, args, dev, stream)
            dev.synchronize()
            best = min(best, time.perf_counter() - t0)
            if time.perf_counter() - began > RUN_BUDGET_S:
                break
        return best * 1e3

    def _run(self, config: Config, grid: Any, block: Any, args: tuple[Any, ...],
             dev: Device | None, stream: Stream | None) -> None:
        grid = grid(config) if callable(grid) else grid
        block = block(config) if callable(block) else block
        if block is None:
            block = config.block
        if block is None or grid is None:
            raise AutotuneError(f"launching {self.name}: give the grid, and the block unless "
                                f"every candidate sets one (kiln.Config(..., block=256))")
        values = iter(args)
        full = [config.params[n] if n in config.params else next(values)
                for n, _ in self.kernel.signature]
        launch(self.kernel, grid, block, full, dev, stream)

    # ------------------------------------------------------------- keys and the disk

    def _key(self, args: tuple[Any, ...]) -> str:
        by_name = dict(zip(self.params, args))
        return ", ".join(f"{name}={_key_value(by_name[name])}" for name in self.key)

    def _entry_key(self, device: str, key: str) -> str | None:
        """The disk entry's name, or None where the kernel has no fingerprint (memory only)."""
        try:
            fp = fingerprint(self.kernel)
        except NotFingerprintable as exc:
            logger.info("autotune %s: choices kept in memory only (%s)", self.name, exc)
            return None
        parts = [FORMAT, fp, device, key, [c.describe() for c in self.configs]]
        return hashlib.sha256(json.dumps(parts).encode()).hexdigest()

    def _load(self, entry: str, device: str, key: str) -> Choice | None:
        found = _DISK.lookup(entry)
        if found is None:
            return None
        try:
            data = json.loads(found.payload)
            valid = (isinstance(data, dict) and data.get("format") == FORMAT
                     and data.get("kernel") == self.name and data.get("device") == device
                     and data.get("key") == key)
            index = data["choice"] if valid else None
            if (type(index) is int and 0 <= index < len(self.configs)
                    and data.get("config") == self.configs[index].describe()):
                logger.info("autotune %s: %s on %s from %s", self.name, key, device, found.path)
                return Choice(self.configs[index], ())
        except (ValueError, KeyError, TypeError):
            pass
        logger.warning("ignoring the autotune entry %s: it is not this kernel's choice; "
                       "timing again", found.path)
        return None

    def _store(self, entry: str, device: str, key: str, choice: Choice) -> None:
        index = self.configs.index(choice.config)
        data = {"format": FORMAT, "kernel": self.name, "device": device, "key": key,
                "choice": index, "config": choice.config.describe(),
                "times_ms": list(choice.times_ms)}
        try:
            _DISK.store(entry, json.dumps(data).encode())
        except OSError as exc:  # a choice not kept costs a timing next process, nothing more
            logger.warning("cannot store the autotune choice of %s: %s", self.name, exc)


def autotune(configs: Sequence[Config], key: Sequence[str] = ()) -> Callable[[Kernel], Autotuned]:
    """Decorate a `@kiln.kernel` with candidate `configs`, chosen per value of the `key`
    parameters (an array parameter keys by shape and dtype)."""
    return lambda kernel: Autotuned(kernel, configs, key)


def _checked_configs(kernel: Kernel, configs: Sequence[Config]) -> list[Config]:
    where = f"kiln.autotune of {kernel.name}"
    if isinstance(configs, (str, bytes)) or not isinstance(configs, Sequence):
        raise AutotuneError(f"{where}: configs= takes a list of kiln.Config, got {configs!r}")
    if not configs:
        raise AutotuneError(f"{where}: configs= is empty; give at least one kiln.Config")
    kinds = dict(kernel.signature)
    for config in configs:
        if not isinstance(config, Config):
            raise AutotuneError(f"{where}: {config!r} is not a kiln.Config")
        for name in config.params:
            if name not in kinds:
                raise AutotuneError(f"{where}: a candidate sets {name}, which {kernel.name} "
                                    f"has no parameter of (it has {', '.join(kinds)})")
            if not isinstance(kinds[name], ConstexprType):
                raise AutotuneError(f"{where}: a candidate sets {name}, which is not a "
                                    f"kiln.constexpr parameter (only those are tuned)")
        if set(config.params) != set(configs[0].params):
            raise AutotuneError(f"{where}: every candidate must set the same parameters; "
                                f"{config} and {configs[0]} differ")
    if len(set(map(json.dumps, (c.describe() for c in configs)))) != len(configs):
        raise AutotuneError(f"{where}: two candidates are the same")
    return list(configs)


def _checked_key(name: str, key: Sequence[str], params: list[str]) -> list[str]:
    if isinstance(key, str) or not all(isinstance(k, str) for k in key):
        raise AutotuneError(f"kiln.autotune of {name}: key= takes a list of parameter names, "
                            f"got {key!r}")
    unknown = [k for k in key if k not in params]
    if unknown:
        raise AutotuneError(f"kiln.autotune of {name}: key names {', '.join(unknown)}, not a "
                            f"parameter the launch passes ({', '.join(params) or 'none'})")
    return list(key)


def _key_value(value: Any) -> str:
    """A key's value: arrays by shape and dtype (as Triton keys by value, for arrays what
    changes the best configuration), other arguments by value."""
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if shape is not None and dtype is not None:
        if not isinstance(value, np.generic):
            return f"{np.dtype(dtype).name}{list(shape)}"
        value = value.item()  # a NumPy scalar keys as the Python number it equals
    return repr(value)


def _scratch(args: tuple[Any, ...], dev: Device) -> tuple[Any, ...]:
    """Copies of the array arguments: timing runs a kernel many times, which must not
    change what the user's launch then computes (an accumulating kernel would). NumPy
    arrays are copied to the device once, so that runs time the kernel, not the copies."""
    return tuple(_scratch_copy(a, dev) for a in args)


def _scratch_copy(arg: Any, dev: Device) -> Any:
    if isinstance(arg, np.ndarray) and type(arg) is np.ndarray:
        try:
            return to_device(arg, dev)
        except (ValueError, TypeError, LaunchError):  # one the launch refuses, saying why
            return arg.copy()
    if isinstance(arg, (DeviceArray, DeviceArrayView)):
        return arg.copy()
    return arg


def _device_identity(dev: Device) -> str:
    return f"{dev.name} {dev.backend.build_identity(dev)}"


def _first_line(exc: Exception) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
