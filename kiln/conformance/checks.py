"""What cases share: launching on the device under test and comparing with NumPy."""

from __future__ import annotations

import contextlib
import io
import os
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np

from ..execution.kernel import launch
from ..stdio import flush

if TYPE_CHECKING:
    from ..execution.kernel import Kernel
    from ..runtime.device import Device

Dims = int | tuple[int, ...]


def run(device: Device, kernel: Kernel, grid: Dims, block: Dims, *args: Any) -> None:
    """Launch on `device` and wait; NumPy arguments the kernel writes come back filled."""
    launch(kernel, grid, block, args, device=device)
    device.synchronize()


def blocks(n: int, block: int) -> int:
    """Blocks of `block` threads needed to cover `n` items."""
    return -(-n // block)


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def _location(index: tuple[int, ...]) -> str:
    return str(index[0]) if len(index) == 1 else str(tuple(int(i) for i in index))


def assert_close(actual: np.ndarray, expected: Any, what: str, *, rtol: float = 1e-5,
                 atol: float = 0.0) -> None:
    """Element-wise `|actual - expected| <= atol + rtol * |expected|`, NaNs matching NaNs."""
    actual = np.asarray(actual)
    expected = np.broadcast_to(np.asarray(expected), actual.shape)
    ok = np.isclose(actual, expected, rtol=rtol, atol=atol, equal_nan=True)
    if ok.all():
        return
    bad = np.argwhere(~ok)
    first = tuple(bad[0])
    with np.errstate(divide="ignore", invalid="ignore"):
        a64, e64 = actual.astype(np.float64), expected.astype(np.float64)
        rel = np.abs(a64 - e64) / np.abs(e64)
    worst = float(np.nanmax(np.where(ok, 0.0, rel)))
    raise AssertionError(
        f"{what}: {len(bad)} of {actual.size} element(s) differ beyond rtol={rtol:g} "
        f"atol={atol:g} (max relative error {worst:.3g}); first at {_location(first)}: "
        f"got {actual[first]}, expected {expected[first]}"
    )


def assert_equal(actual: np.ndarray, expected: Any, what: str) -> None:
    """Exact element-wise equality (shapes must match; NaNs compare equal)."""
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    if actual.shape != expected.shape:
        raise AssertionError(f"{what}: shape {actual.shape}, expected {expected.shape}")
    same = actual == expected
    if actual.dtype.kind == "f":
        same |= np.isnan(actual) & np.isnan(expected)
    if same.all():
        return
    bad = np.argwhere(~same)
    first = tuple(bad[0]) if actual.ndim else ()
    got = actual[first] if actual.ndim else actual
    want = expected[first] if expected.ndim else expected
    where = f" at {_location(first)}" if actual.ndim else ""
    raise AssertionError(f"{what}: {len(bad)} of {actual.size} element(s) differ; "
                         f"first{where}: got {got}, expected {want}")


def assert_permutation(actual: Sequence[Any] | np.ndarray, expected: Sequence[Any] | np.ndarray,
                       what: str) -> None:
    """`actual` holds exactly the values of `expected`, in any order."""
    a, e = np.sort(np.asarray(actual), axis=None), np.sort(np.asarray(expected), axis=None)
    if a.shape != e.shape or not (a == e).all():
        missing = np.setdiff1d(e, a)[:5]
        extra = np.setdiff1d(a, e)[:5]
        raise AssertionError(f"{what}: not a permutation of the expected {e.size} value(s); "
                             f"missing e.g. {missing.tolist()}, unexpected e.g. {extra.tolist()}")


@contextmanager
def captured_stdout() -> Iterator[list[str]]:
    """What is written to stdout inside the block, as lines once it ends: to Python's
    `sys.stdout` and to file descriptor 1 (C's printf, a driver's device printf)."""
    lines: list[str] = []
    sys.stdout.flush()
    saved = os.dup(1)
    with tempfile.TemporaryFile(mode="w+b") as sink, \
            contextlib.redirect_stdout(io.StringIO()) as python_out:
        os.dup2(sink.fileno(), 1)
        try:
            yield lines
        finally:
            flush()
            os.dup2(saved, 1)
            os.close(saved)
            sink.seek(0)
            lines += sink.read().decode(errors="replace").splitlines()
            lines += python_out.getvalue().splitlines()
