"""`@kiln.struct` records and `kiln.variant` tagged unions: their kiln types and host values.

A struct class stays a Python class (a dataclass: `Particle(1.0, 2.0, vx=0.0, vy=0.0)`
works on the host too) that carries its `StructType`, its NumPy structured `dtype`, and
makes array annotations (`Particle[:]`). `kiln.variant("Shape", Circle, Rect)` returns a
`Variant` whose cases are struct classes. Host values of these types (and of vectors) are
packed into their NumPy layout by `pack`, for kernel arguments and host arrays.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Iterable
from typing import Any

import numpy as np

from ..ir.hosttypes import KILN_TYPE, kiln_type_of, type_from_object
from ..ir.types import (
    ArrayType,
    ScalarType,
    StructType,
    Type,
    VariantType,
    VectorType,
)


def struct(cls: type) -> type:
    """Make `cls` a kiln record: its annotated fields (scalars, vectors, records) in order.

    Fields may have defaults (`vx: f32 = 0.0`), used where a construction leaves them out.
    """
    if not isinstance(cls, type):
        raise TypeError(f"@kiln.struct decorates a class, got {cls!r}")
    fields: list[tuple[str, Type]] = []
    for name, annotation in inspect.get_annotations(cls, eval_str=True).items():
        t = type_from_object(annotation)
        if not isinstance(t, (ScalarType, VectorType, StructType)):
            raise TypeError(f"field '{name}' of struct {cls.__name__} has type {annotation!r}; "
                            "fields are scalars (f32, i32, ...), vectors (f32x3, ...) or "
                            "@kiln.struct records")
        fields.append((name, t))
    cls = dataclasses.dataclass(cls)
    record = StructType(cls.__name__, tuple(fields), cls)
    setattr(cls, KILN_TYPE, record)
    cls.dtype = record.dtype  # type: ignore[attr-defined]
    cls.__class_getitem__ = classmethod(lambda c, dims: record[dims])  # type: ignore[attr-defined]
    return cls


def field_defaults(record: StructType) -> dict[str, Any]:
    """The fields of a record that have default values, with those values."""
    if record.pyclass is None:
        return {}
    return {f.name: f.default for f in dataclasses.fields(record.pyclass)
            if f.default is not dataclasses.MISSING}


CaseClass = type
"""A `@kiln.struct` class (named so inside `Variant`, whose `type` is its kiln type)."""


class Variant:
    """`kiln.variant(name, *cases)`: a tagged union of struct classes (the result of
    `kiln.variant`). The tag of a case is its position among the cases."""

    def __init__(self, name: str, *cases: type) -> None:
        types = []
        for case in cases:
            t = kiln_type_of(case)
            if not isinstance(t, StructType):
                raise TypeError(f"the cases of variant {name} must be @kiln.struct classes, "
                                f"got {case!r}")
            types.append(t)
        if not types:
            raise TypeError(f"variant {name} needs at least one case")
        names = [t.name for t in types]
        if len(set(names)) != len(names) or "tag" in names:
            raise TypeError(f"the cases of variant {name} need distinct names other than "
                            f"'tag', got {names}")
        self.name = name
        self.cases = tuple(cases)
        setattr(self, KILN_TYPE, VariantType(name, tuple(types)))

    @property
    def type(self) -> VariantType:
        return getattr(self, KILN_TYPE)

    @property
    def dtype(self) -> np.dtype:
        return self.type.dtype

    def __getitem__(self, dims: object) -> ArrayType:
        return self.type[dims]

    def __repr__(self) -> str:
        return f"<kiln.variant {self.name}: {' | '.join(c.__name__ for c in self.cases)}>"

    def tag(self, case: CaseClass) -> int:
        """The tag of a case class."""
        case_type = kiln_type_of(case)
        index = self.type.case_index(case_type) if case_type is not None else None
        if index is None:
            raise ValueError(f"{case!r} is not a case of variant {self.name}")
        return index

    def array(self, values: Iterable[Any]) -> np.ndarray:
        """A NumPy array of this variant's dtype holding case values (struct instances)."""
        items = list(values)
        out = np.zeros(len(items), self.dtype)
        for i, v in enumerate(items):
            out[i] = pack(v, self.type)
        return out


def variant(name: str, *cases: type) -> Variant:
    """A tagged union of `@kiln.struct` cases: `Shape = kiln.variant("Shape", Circle, Rect)`."""
    return Variant(name, *cases)


def pack(value: Any, t: Type) -> np.ndarray:
    """A host value of a record, variant or vector type as a 0-d array of `t.dtype`.

    Accepted: records as instances of their struct class, tuples of field values or NumPy
    structured scalars of an equal dtype; variants as instances of a case class (or NumPy
    scalars of the variant's dtype); vectors as sequences or NumPy arrays of n numbers.
    Raises TypeError or ValueError saying what does not fit.
    """
    if isinstance(t, VectorType):
        if isinstance(value, (str, bytes)) or np.ndim(value) != 1 or len(value) != t.n:
            raise TypeError(f"a {t} is a sequence of {t.n} numbers")
        out = np.empty((), t.dtype)
        out[...] = np.asarray(value)
        return out
    assert isinstance(t, (VariantType, StructType)), f"{t} has no host values to pack"
    out = np.zeros((), t.dtype)
    if isinstance(t, VariantType):
        if isinstance(value, np.void) and value.dtype == t.dtype:
            out[()] = value
            return out
        case = kiln_type_of(type(value))
        index = t.case_index(case) if case is not None else None
        if index is None:
            names = ", ".join(c.name for c in t.cases)
            raise TypeError(f"a {t} is an instance of one of its cases ({names})")
        record = out[()]  # the 0-d array's one element: a view whose fields take values
        record["tag"] = index
        record[t.cases[index].name] = _fields(value, t.cases[index])
        return out
    if isinstance(value, np.void):
        if value.dtype != t.dtype:
            raise TypeError(f"a NumPy record of dtype {value.dtype} is not a {t} "
                            f"(dtype {t.dtype})")
        out[()] = value
        return out
    out[()] = _fields(value, t)
    return out


def _fields(value: Any, t: StructType) -> tuple[Any, ...]:
    """A record value as a (nested) tuple of field values."""
    if t.pyclass is not None and isinstance(value, t.pyclass):
        items = [getattr(value, name) for name, _ in t.fields]
    elif isinstance(value, tuple) and len(value) == len(t.fields):
        items = list(value)
    else:
        raise TypeError(f"a {t} is a {t} instance or a tuple of its {len(t.fields)} field(s) "
                        f"({', '.join(n for n, _ in t.fields)})")
    return tuple(_fields(v, ft) if isinstance(ft, StructType) and not isinstance(v, np.void)
                 else v for v, (_, ft) in zip(items, t.fields))


def argument_error(expected: Type, value: Any) -> str | None:
    """Why a launch argument cannot be passed for a parameter of type `expected` (a record,
    variant or vector, or an array of them), or None when it can."""
    if isinstance(expected, ArrayType):
        elem = expected.elem
        dtype, shape = getattr(value, "dtype", None), getattr(value, "shape", None)
        if dtype is None or shape is None or not hasattr(value, "ndim"):
            return f"expected an array {expected}, got {type(value).__name__} {value!r}"
        if isinstance(elem, VectorType):
            ok = (np.dtype(dtype) == elem.elem.dtype and len(shape) == expected.ndim + 1
                  and shape[-1] == elem.n)
            want = f"a {elem.elem.dtype.name} array of shape ({'n, ' * expected.ndim}{elem.n})"
        else:
            ok = np.dtype(dtype) == elem.dtype and len(shape) == expected.ndim
            want = f"a {expected.ndim}-d array of dtype {elem}.dtype"
        if not ok:
            return (f"expected {expected} ({want}), got a {np.dtype(dtype)} array of shape "
                    f"{tuple(shape)}")
        return None
    try:
        pack(value, expected)
    except (TypeError, ValueError) as exc:
        return f"expected a {expected}: {exc}"
    return None
