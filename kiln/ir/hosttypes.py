"""The kiln types that host objects stand for: struct classes and variants (which carry
their type), and annotation objects (`f32[:]`, `int`, `np.float32`, a struct class).

Below the runtime and the frontend: arrays take record dtypes, launches type their
arguments and the frontend resolves annotations through the same mapping, without the
runtime or the launch engine knowing the kernel language (`kiln.lang.records` makes the
classes that carry their types).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .types import (
    SCALAR_BY_DTYPE,
    ArrayType,
    ConstexprType,
    FragmentType,
    ScalarType,
    StructType,
    Type,
    VariantType,
    VectorType,
    bool_,
    f32,
    i32,
)

KILN_TYPE = "__kiln_type__"
"""The attribute under which a struct class or variant carries its kiln type."""


def kiln_type_of(obj: Any) -> StructType | VariantType | None:
    """The record or variant type a struct class or `Variant` stands for, else None."""
    t = getattr(obj, KILN_TYPE, None)
    return t if isinstance(t, (StructType, VariantType)) else None


def type_from_object(obj: Any) -> Type | None:
    """A kiln type from an annotation object (`f32`, `f32[:]`, `f32x4`, a struct class, a
    variant, `int`, `np.float32`...)."""
    if isinstance(obj, (ScalarType, VectorType, ArrayType, ConstexprType, FragmentType)):
        return obj
    record = kiln_type_of(obj)
    if record is not None:
        return record
    if obj is int:
        return i32
    if obj is float:
        return f32
    if obj is bool:
        return bool_
    if isinstance(obj, type) and issubclass(obj, np.generic):
        return SCALAR_BY_DTYPE.get(np.dtype(obj))
    return None
