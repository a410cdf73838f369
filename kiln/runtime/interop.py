"""Foreign device arrays (CuPy, PyTorch, JAX, ...) as launch arguments, without copies.

A backend registers an adopter: a function that takes any object and returns a
`DeviceArray` sharing its memory (through `__cuda_array_interface__`, DLPack, ...) or None
when the object is not one of its arrays. The executor asks the adopters about every
launch argument that is not already a kiln or NumPy array or a number.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .array import DeviceArray

Adopter = Callable[[Any], "DeviceArray | None"]

_ADOPTERS: list[Adopter] = []


def register_adopter(adopter: Adopter) -> None:
    """Let a backend turn foreign arrays into DeviceArrays (zero-copy)."""
    if adopter not in _ADOPTERS:
        _ADOPTERS.append(adopter)


def adopt(value: Any) -> DeviceArray | None:
    """A DeviceArray viewing `value`'s memory, or None when no backend knows the object."""
    for adopter in _ADOPTERS:
        array = adopter(value)
        if array is not None:
            return array
    return None
