"""Launch values for kernels whose aggregate parameters the passes split into scalars."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..ir.types import ArrayType, ScalarType, Type
from ..lang.records import pack
from ..runtime.array import DeviceArray


def lowered_arguments(original: list[Type], params: list[Any], values: list[Any]) -> list[Any]:
    """Launch values for a kernel whose parameters `lower_aggregates` split (`params`, each
    with a `ParamSource`), from the values of its original parameters (types `original`):
    a record, variant or vector argument gives scalars read from its packed bytes, an array
    of them gives views of its memory."""
    packed: dict[int, bytes] = {}
    out: list[Any] = []
    for p in params:
        index, t = p.source.index, original[p.source.index]
        value = values[index]
        if isinstance(p.type, ArrayType) and isinstance(t, ArrayType) and t.elem != p.type.elem:
            shape = (*value.shape[: t.ndim], t.elem.dtype.itemsize // p.type.elem.itemsize)
            out.append(DeviceArray(value.device, shape, p.type.elem.dtype, value.buffer,
                                   value._host))
        elif isinstance(p.type, ScalarType) and not isinstance(t, ScalarType):
            if index not in packed:
                packed[index] = pack(value, t).tobytes()
            out.append(np.frombuffer(packed[index], p.type.dtype, 1, p.source.offset)[0])
        else:
            out.append(value)
    return out
