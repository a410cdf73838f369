"""`kiln.ir.hosttypes`: the kiln types host objects stand for, as arrays, launches and the
frontend read them."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import f32, f32x4, i32
from kiln.ir.hosttypes import kiln_type_of, type_from_object
from kiln.ir.types import StructType, VariantType, bool_, f64, u8


@kiln.struct
class Point:
    x: f32
    y: f32


@kiln.struct
class Box:
    lo: Point
    hi: Point


Shape = kiln.variant("Shape", Point, Box)


def test_struct_classes_and_variants_carry_their_types() -> None:
    point, shape = kiln_type_of(Point), kiln_type_of(Shape)
    assert isinstance(point, StructType) and point.fields == (("x", f32), ("y", f32))
    assert isinstance(shape, VariantType) and shape.cases == (point, kiln_type_of(Box))
    assert kiln_type_of(Point(1.0, 2.0)) is point  # an instance reads its class's


@pytest.mark.parametrize("obj", [1, "x", None, np.float32, f32, object(), type])
def test_other_objects_stand_for_no_record(obj: object) -> None:
    assert kiln_type_of(obj) is None


@pytest.mark.parametrize(("obj", "expected"), [
    (int, i32), (float, f32), (bool, bool_), (np.float64, f64), (np.uint8, u8), (f32, f32),
    (f32[:], f32[:]), (f32x4, f32x4), (kiln.constexpr, kiln.constexpr),
])
def test_annotations_map_to_kiln_types(obj: object, expected: object) -> None:
    assert type_from_object(obj) == expected


@pytest.mark.parametrize("obj", [str, complex, np.str_, 3, "f32", list])
def test_annotations_without_a_kiln_type_map_to_none(obj: object) -> None:
    assert type_from_object(obj) is None


def test_arrays_take_records_by_their_class(interp: kiln.Device) -> None:
    boxes = kiln.zeros(3, Box, interp)
    assert boxes.dtype == kiln_type_of(Box).dtype and boxes.shape == (3,)
