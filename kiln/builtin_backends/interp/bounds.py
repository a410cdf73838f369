"""The interp checks every array index, always (docs/language.md, arrays).

Loads are evaluated for every lane of a chunk, active or not, so only the active lanes'
indices count (a guarded `if i < n: a[i]` is fine). An index known to be affine in the
thread and block indices is checked from its bounds without being materialised; the rest
costs two comparisons per lane. The first failing lane is reported as an
`IndexOutOfBoundsError` naming the kernel, the array, the index, the thread and the line.
"""

from __future__ import annotations

import numpy as np

from ...errors import IndexOutOfBoundsError
from ...ir import nodes as ir
from ...ir.passes.bounds import outside
from .geometry import BX, BY, BZ, TX, TY, TZ, Chunk
from .values import Affine, Mask, Value, materialise


def check_indices(kernel: str, array: str, shape: tuple[int, ...], indices: list[Value],
                  chunk: Chunk, m: Mask, verb: str, loc: ir.Loc | None) -> None:
    """Raise at the first active lane whose index along some axis is outside `shape`."""
    if m is False:
        return
    for axis, (index, extent) in enumerate(zip(indices, shape)):
        if isinstance(index, Affine):
            lo, hi = index.bounds()
            if lo >= 0 and hi < extent:
                continue
        values = materialise(index)
        if not isinstance(values, np.ndarray):  # uniform: every active lane has it
            if 0 <= int(values) < extent:
                continue
            lane = 0 if m is None else int(np.argmax(m))
            _fail(kernel, array, shape, axis, int(values), chunk, lane, verb, loc)
        bad = (values < 0) | (values >= extent)
        if m is not None:
            bad &= m
        if bad.any():
            lane = int(np.argmax(bad))
            _fail(kernel, array, shape, axis, int(values[lane]), chunk, lane, verb, loc)


def _fail(kernel: str, array: str, shape: tuple[int, ...], axis: int, index: int,
          chunk: Chunk, lane: int, verb: str, loc: ir.Loc | None) -> None:
    thread = tuple(int(chunk.vector(k)[lane]) for k in (TX, TY, TZ))
    block = tuple(int(chunk.vector(k)[lane]) for k in (BX, BY, BZ))
    place = ", ".join(str(index) if k == axis else ":" for k in range(len(shape)))
    end = outside(axis, len(shape), shape[axis])
    raise IndexOutOfBoundsError(f"kernel `{kernel}`: thread {thread} of block {block} {verb} "
                                f"`{array}[{place}]`, {end}", loc)

