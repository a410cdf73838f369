"""Run-time values and masks of the interpreter.

A value of a chunk's lanes is one of:
- a NumPy scalar: *uniform*, the same at every lane (parameters, constants, loop counters);
- an `Affine`: an integer `const + sum(coef[k] * basis_k)` over the chunk's index basis
  (thread_idx, block_idx, lane), kept symbolic so that `global_id(0)` indexes arrays by
  slices and compares against bounds without building a vector;
- a NumPy array with one element per lane.

A mask is `None` (every lane active), `False` (no lane active) or a bool array with some
lanes active. Value arrays are never changed in place once made.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .geometry import BX, LANE, NBASIS, Chunk

Value = Any  # np.generic | Affine | np.ndarray
Mask = Any  # None | False | np.ndarray

_INT_RANGE = {np.dtype(t): (int(np.iinfo(t).min), int(np.iinfo(t).max))
              for t in (np.int8, np.int16, np.int32, np.int64,
                        np.uint8, np.uint16, np.uint32, np.uint64)}


def wrap(value: int, dtype: np.dtype) -> int:
    """`value` reduced modulo 2**bits into `dtype`'s range."""
    lo, hi = _INT_RANGE[dtype]
    return (value - lo) % (hi - lo + 1) + lo


class Affine:
    """An integer value linear in the chunk's index basis (exact; wraps when materialised)."""

    __slots__ = ("chunk", "dtype", "const", "coef", "_bounds", "_linear", "_array")
    __array_ufunc__ = None  # NumPy operands defer to our reflected operators

    def __init__(self, chunk: Chunk, dtype: np.dtype, const: int, coef: tuple[int, ...]) -> None:
        self.chunk, self.dtype, self.const, self.coef = chunk, dtype, const, coef
        self._bounds: tuple[int, int] | None = None
        self._linear: tuple[int, int] | None | bool = False
        self._array: np.ndarray | None = None

    @staticmethod
    def make(chunk: Chunk, dtype: np.dtype, const: int, coef: tuple[int, ...]) -> Value:
        """An Affine, or a uniform scalar when no coefficient matters in this launch."""
        extent = chunk.launch.extent
        coef = tuple(c if extent[k] > 1 else 0 for k, c in enumerate(coef))
        if not any(coef):
            return dtype.type(wrap(const, dtype))
        return Affine(chunk, dtype, const, coef)

    @staticmethod
    def basis(chunk: Chunk, k: int) -> Value:
        coef = [0] * NBASIS
        coef[k] = 1
        return Affine.make(chunk, np.dtype(np.int32), 0, tuple(coef))

    # ---- what is known about the lanes' values
    def bounds(self) -> tuple[int, int]:
        """Smallest and largest exact (unwrapped) value over the chunk's lanes."""
        if self._bounds is None:
            lo = hi = self.const
            for c, a, b in zip(self.coef, self.chunk.lo, self.chunk.hi):
                lo += min(c * a, c * b)
                hi += max(c * a, c * b)
            self._bounds = (lo, hi)
        return self._bounds

    def fits(self) -> bool:
        """Whether no lane's value wraps around the dtype's range."""
        lo, hi = self.bounds()
        tlo, thi = _INT_RANGE[self.dtype]
        return tlo <= lo and hi <= thi

    def linear(self) -> tuple[int, int] | None:
        """(start, step) when lane `l` holds `start + step * l` without wrapping, else None."""
        if self._linear is False:
            self._linear = self._find_linear() if self.fits() else None
        return self._linear  # type: ignore[return-value]

    def _find_linear(self) -> tuple[int, int] | None:
        chunk = self.chunk
        if not chunk.regular and any(self.coef[k] and chunk.varying[k] for k in range(LANE)):
            return None
        strides = chunk.launch.strides
        slope: int | None = None
        for k in range(LANE):
            if not chunk.varying[k]:
                continue
            c = self.coef[k]
            if slope is None:
                if c % strides[k]:
                    return None
                slope = c // strides[k]
            elif c != slope * strides[k]:
                return None
        start = self.const + sum(c * v for c, v in zip(self.coef, chunk.first))
        return start, self.coef[LANE] + (slope or 0)

    # ---- materialisation
    def array(self) -> np.ndarray:
        """The per-lane values, in the dtype (never modify the result).

        The chunk remembers one array per combination of coefficients; values that differ
        only in the constant (a loop counter's address) cost one addition."""
        if self._array is None:
            key = (self.dtype.char, self.coef)
            known = self.chunk.cache.get(key)
            if known is None:
                self._array = self._materialise()
                self.chunk.remember(key, (self.const, self._array))
            else:
                const, values = known
                delta = wrap(self.const - const, self.dtype)
                self._array = values + self.dtype.type(delta) if delta else values
        return self._array

    def _materialise(self) -> np.ndarray:
        chunk = self.chunk
        lin = self.linear()
        if lin is not None:
            start, step = lin
            if step == 0:
                return np.full(chunk.n, start, self.dtype)
            if (start, step) == (0, 1) and self.dtype == np.int32:
                return chunk.vector(LANE)
            return np.arange(start, start + step * chunk.n, step, dtype=self.dtype)
        per_block = self.per_block()
        if per_block is not None:
            return np.repeat(per_block, chunk.launch.threads)
        return self._combination(chunk.n, chunk.vector)

    def per_block(self) -> np.ndarray | None:
        """One value per block of the chunk, when the value depends on block indices only."""
        chunk = self.chunk
        if not chunk.regular or any(c and chunk.varying[k] for k, c in enumerate(self.coef)
                                    if k < BX or k == LANE):
            return None
        return self._combination(chunk.nblocks, chunk.block_vector)

    def _combination(self, size: int, vector: Callable[[int], np.ndarray]) -> np.ndarray:
        """const + sum(coef * basis) over `vector(k)` of the varying variables, wrapping in
        the dtype (intermediate overflow cancels out)."""
        chunk, dtype = self.chunk, self.dtype
        base = self.const + sum(c * chunk.lo[k] for k, c in enumerate(self.coef)
                                if c and not chunk.varying[k])
        acc = np.full(size, wrap(base, dtype), dtype)
        for k, c in enumerate(self.coef):
            if c and chunk.varying[k]:
                vec = vector(k).astype(dtype, copy=False)
                acc += vec if c == 1 else vec * dtype.type(wrap(c, dtype))
        return acc

    # ---- arithmetic that stays affine
    def _combine(self, const: int, coef: tuple[int, ...]) -> Value:
        return Affine.make(self.chunk, self.dtype, const, coef)

    def __add__(self, other: Value) -> Value:
        if isinstance(other, Affine):
            return self._combine(self.const + other.const,
                                 tuple(a + b for a, b in zip(self.coef, other.coef)))
        if isinstance(other, (np.integer, int)):
            return self._combine(self.const + int(other), self.coef)
        return self.array() + other

    __radd__ = __add__

    def __neg__(self) -> Value:
        return self._combine(-self.const, tuple(-c for c in self.coef))

    def __sub__(self, other: Value) -> Value:
        if isinstance(other, (Affine, np.integer, int)):
            return self + (-other)
        return self.array() - other

    def __rsub__(self, other: Value) -> Value:
        if isinstance(other, (np.integer, int)):
            return (-self) + other
        return other - self.array()

    def __mul__(self, other: Value) -> Value:
        if isinstance(other, (np.integer, int)):
            k = int(other)
            return self._combine(self.const * k, tuple(c * k for c in self.coef))
        return self.array() * materialise(other)

    __rmul__ = __mul__

    def cast(self, dtype: np.dtype) -> Value:
        """Conversion to another integer type (stays affine when no value changes)."""
        if dtype.itemsize <= self.dtype.itemsize or self.fits():
            return Affine.make(self.chunk, dtype, self.const, self.coef)
        return self.array().astype(dtype)

    def compare(self, op: str, other: Value) -> Value | None:
        """`self op other` when the bounds decide it for every lane, else None."""
        if isinstance(other, Affine):
            if not other.fits():
                return None
            diff = Affine(self.chunk, self.dtype, self.const - other.const,
                          tuple(a - b for a, b in zip(self.coef, other.coef)))
            lo, hi = diff.bounds()
        elif isinstance(other, (np.integer, int)):
            lo, hi = self.bounds()
            lo, hi = lo - int(other), hi - int(other)
        else:
            return None
        if not self.fits():
            return None
        return _decide(op, lo, hi)


_DECIDERS = {
    "<": lambda lo, hi: True if hi < 0 else False if lo >= 0 else None,
    "<=": lambda lo, hi: True if hi <= 0 else False if lo > 0 else None,
    ">": lambda lo, hi: True if lo > 0 else False if hi <= 0 else None,
    ">=": lambda lo, hi: True if lo >= 0 else False if hi < 0 else None,
    "==": lambda lo, hi: False if lo > 0 or hi < 0 else True if lo == hi == 0 else None,
    "!=": lambda lo, hi: True if lo > 0 or hi < 0 else False if lo == hi == 0 else None,
}


def _decide(op: str, lo: int, hi: int) -> np.bool_ | None:
    """The sign test `diff op 0` for a diff within [lo, hi], if the bounds settle it."""
    result = _DECIDERS[op](lo, hi)
    return None if result is None else np.bool_(result)


def materialise(value: Value) -> Any:
    """Affine values become arrays; scalars and arrays stay as they are."""
    return value.array() if isinstance(value, Affine) else value


def owned(value: Value) -> Value:
    """A value safe to keep in a variable: views of user memory are copied."""
    if isinstance(value, np.ndarray) and not value.flags.owndata and value.base is not None:
        return value.copy()
    return value


def cast(value: Value, dtype: np.dtype) -> Value:
    """C conversion to `dtype` (float to int truncates toward zero)."""
    if isinstance(value, Affine):
        if dtype.kind in "iu":
            return value.cast(dtype)
        value = value.array()
    if isinstance(value, np.ndarray):
        return value.astype(dtype, copy=False)
    return np.asarray(value).astype(dtype)[()]


def merge(mask: np.ndarray, new: Value, old: Value, dtype: np.dtype) -> np.ndarray:
    """`new` at the mask's lanes, `old` elsewhere."""
    out = np.where(mask, materialise(new), materialise(old))
    return out if out.dtype == dtype else out.astype(dtype)


def is_uniform(value: Value) -> bool:
    return isinstance(value, (np.generic, bool))


# ---------------------------------------------------------------- masks


def _settle(m: np.ndarray) -> Mask:
    if not m.any():
        return False
    if m.all():
        return None
    return m


def mask_and(mask: Mask, cond: Any) -> Mask:
    """Lanes of `mask` where `cond` (a bool array) holds."""
    if mask is False:
        return False
    return _settle(owned(cond) if mask is None else mask & cond)


def mask_and_not(mask: Mask, cond: Any) -> Mask:
    """Lanes of `mask` where `cond` does not hold."""
    if mask is False:
        return False
    return _settle(~cond if mask is None else mask & ~cond)


def mask_or(a: Mask, b: Mask) -> Mask:
    if a is None or b is None:
        return None
    if a is False:
        return b
    if b is False:
        return a
    return _settle(a | b)
