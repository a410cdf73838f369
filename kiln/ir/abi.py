"""The kernel ABI every JIT backend shares: how a kernel's parameters are flattened.

A kernel `k(a: f32[:, :], n: i32)` receives, in parameter order, for each array a
pointer to its first element followed by its dimensions as `i32` values, and each scalar
by value: `(a, a_shape0, a_shape1, n)`. Emitters declare the parameters in this order and
launchers pack the arguments with `abi_values`, so both sides agree by construction.
Device functions receive array arguments the same way (pointer, then dimensions).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from .nodes import Function, Program
from .types import ArrayType, ScalarType, bf16, i32

AbiKind = Literal["pointer", "dim", "scalar"]


@dataclass(frozen=True)
class AbiParam:
    """One flattened parameter: `index` is the kiln parameter it comes from."""

    index: int
    param: str
    kind: AbiKind
    type: ScalarType  # element type (pointer), i32 (dim) or the scalar's type
    axis: int = -1

    @property
    def label(self) -> str:
        return f"{self.param}.shape[{self.axis}]" if self.kind == "dim" else self.param


def function_abi(func: Function) -> list[AbiParam]:
    """The flattened parameters of a kernel or device function."""
    out: list[AbiParam] = []
    for index, p in enumerate(func.params):
        if isinstance(p.type, ArrayType):
            elem = p.type.elem
            assert isinstance(elem, ScalarType), "records and vectors are lowered before"
            out.append(AbiParam(index, p.name, "pointer", elem))
            out += [AbiParam(index, p.name, "dim", i32, axis) for axis in range(p.type.ndim)]
        else:
            assert isinstance(p.type, ScalarType), f"parameter {p.name} has type {p.type}"
            out.append(AbiParam(index, p.name, "scalar", p.type))
    return out


def kernel_abi(program: Program) -> list[AbiParam]:
    """The flattened parameters of a program's kernel, in the order its entry point takes them."""
    return function_abi(program.kernel)


def abi_values(abi: Sequence[AbiParam], args: Sequence[Any],
               pointer: Callable[[Any, AbiParam], Any]) -> list[Any]:
    """Launch values in ABI order: `pointer(array, param)` for pointers, shapes, scalars
    (bf16 as its bits).

    `args` are the executor's launch arguments (DeviceArrays and NumPy scalars, in
    parameter order); `pointer` turns a DeviceArray into the backend's pointer value. It
    receives the `AbiParam` too (its element type, C name and index): a target that passes
    typed views rather than addresses needs it.
    """
    out: list[Any] = []
    for p in abi:
        value = args[p.index]
        if p.kind == "pointer":
            out.append(pointer(value, p))
        elif p.kind == "dim":
            out.append(value.shape[p.axis])
        else:
            out.append(device_scalar(value))
    return out


def device_scalar(value: Any) -> Any:
    """A scalar launch value as C-like kernels receive it: a bf16 as its bits (`np.uint16`,
    the type they store it in), any other unchanged."""
    if getattr(value, "dtype", None) == bf16.dtype:
        return value.view(np.uint16)
    return value
