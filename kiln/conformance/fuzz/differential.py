"""Run one random kernel on several backends and compare: with the Python reference where
the generator has one, and every backend with the first."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

import kiln

from .kernels import FuzzKernel, build


@dataclass
class Mismatch:
    seed: int
    what: str

    def __str__(self) -> str:
        return f"seed {self.seed}: {self.what}"


def _same(a: np.ndarray, b: np.ndarray, exact: bool) -> np.ndarray:
    """Element-wise agreement (NaN agrees with NaN; inexact floats within a tolerance)."""
    if a.dtype.kind != "f":
        return a == b
    both_nan = np.isnan(a) & np.isnan(b)
    if exact:
        return (a == b) | both_nan
    with np.errstate(all="ignore"):
        return np.isclose(a, b, rtol=1e-4, atol=1e-6) | both_nan


def run(kernel: FuzzKernel, backends: list[str], directory: Path) -> list[Mismatch]:
    """Every disagreement of `kernel` between backends and with its reference."""
    fn = kernel.load(directory)
    results: dict[str, dict[str, np.ndarray]] = {}
    for backend in backends:
        args, outs = kernel.arguments()
        kiln.launch(fn, 1, len(next(iter(kernel.inputs.values()))), args, device=backend)
        kiln.device(backend).synchronize()
        results[backend] = outs
    found: list[Mismatch] = []
    first = backends[0]
    for type_name, columns in kernel.outputs.items():
        for out in columns:
            key = f"out_{type_name}"
            got = {b: r[key][:, out.column] for b, r in results.items()}
            for b in backends[1:]:
                same = _same(got[first], got[b], out.exact)
                if not same.all():
                    i = int(np.argmin(same))
                    found.append(Mismatch(kernel.seed, f"{key}[:, {out.column}] thread {i}: "
                                          f"{first} {got[first][i]!r}, {b} {got[b][i]!r}"))
            if out.reference is not None:
                expected = np.array([out.reference(i) for i in range(len(got[first]))],
                                    dtype=got[first].dtype)
                same = _same(expected, got[first], out.exact)
                if not same.all():
                    i = int(np.argmin(same))
                    found.append(Mismatch(kernel.seed, f"{key}[:, {out.column}] thread {i}: "
                                          f"reference {expected[i]!r}, {first} "
                                          f"{got[first][i]!r}"))
    for b, r in results.items():
        if kernel.atomic_reference is not None and \
                not np.array_equal(r["acc"], kernel.atomic_reference):
            found.append(Mismatch(kernel.seed, f"atomics on {b}: {r['acc']} expected "
                                  f"{kernel.atomic_reference}"))
    return found


def check_seed(seed: int, backends: list[str], directory: Path) -> list[Mismatch]:
    return run(build(seed), backends, directory)
