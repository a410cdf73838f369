"""The device feature check: f64, f16, bf16, atomics and shared memory the device must support."""

from __future__ import annotations

from collections.abc import Callable
from typing import NoReturn

from ...errors import DeviceFeatureError
from .. import nodes as ir
from ..enums import MemorySpace
from ..intrinsics import intrinsics
from ..target import Capabilities
from ..types import ArrayType, ScalarType, Type, bf16, f16, f64
from ..visit import walk
from .common import all_functions


def device_feature_check(capabilities: Capabilities) -> Callable[[ir.Program], ir.Program]:
    """A pass that raises DeviceFeatureError at the first use of something the device lacks,
    and otherwise returns the program unchanged."""

    def check_device_features(program: ir.Program) -> ir.Program:
        _FeatureCheck(capabilities).run(program)
        return program

    return check_device_features


def _element(t: Type) -> ScalarType | None:
    elem = t.elem if isinstance(t, ArrayType) else t
    return elem if isinstance(elem, ScalarType) else None


def supports_atomic(atomics: frozenset[str], name: str, elem: str) -> bool:
    """Whether `capabilities.atomics` ("op:type" entries) allows atomic `name` on `elem`."""
    return f"{name}:{elem}" in atomics


class _FeatureCheck:
    def __init__(self, capabilities: Capabilities) -> None:
        self.caps = capabilities
        self.device = f"device '{capabilities.name}' ({capabilities.backend})"

    def fail(self, feature: str, loc: ir.Loc | None) -> NoReturn:
        raise DeviceFeatureError(f"{feature} is not supported by {self.device}", loc)

    def run(self, program: ir.Program) -> None:
        for func in all_functions(program):
            for node in walk(func.body):
                loc = node.loc or func.loc
                if isinstance(node, ir.Expr):
                    self.scalar(node.type, loc)
                if isinstance(node, ir.IntrinsicCall) and node.name in intrinsics:
                    self.atomic(node, loc)
            for t in [*(p.type for p in func.params), *func.locals.values()]:
                self.scalar(t, func.loc)
                self.space(t, func.loc)
            for p in func.params:
                self.storage(p.type, func.loc)
        self.shared_memory(program.kernel)

    def scalar(self, t: Type, loc: ir.Loc | None) -> None:
        elem = _element(t)
        if elem == f64 and not self.caps.fp64:
            self.fail("f64 (double precision)", loc)
        if elem == f16 and not self.caps.fp16:
            self.fail("f16 (half precision)", loc)
        if elem == bf16 and not self.caps.bf16:
            self.fail("bf16 (bfloat16)", loc)
        if elem is not None and self.caps.scalar_types is not None \
                and elem.name not in self.caps.scalar_types:
            self.fail(f"{elem} values", loc)

    def storage(self, t: Type, loc: ir.Loc | None) -> None:
        """Arrays in device memory of an element type the device cannot store."""
        stored = self.caps.storage_types
        if isinstance(t, ArrayType) and t.space is MemorySpace.GLOBAL and stored is not None \
                and t.elem.name not in stored:
            self.fail(f"arrays of {t.elem} in device memory", loc)

    def space(self, t: Type, loc: ir.Loc | None) -> None:
        if isinstance(t, ArrayType) and t.space not in self.caps.memory_spaces:
            self.fail(f"{t.space.name.lower()} memory", loc)

    def atomic(self, node: ir.IntrinsicCall, loc: ir.Loc | None) -> None:
        if intrinsics[node.name].category != "atomic":
            return
        elem = _element(node.args[0].type)
        if elem is not None and not supports_atomic(self.caps.atomics, node.name, elem.name):
            self.fail(f"{node.name} on {elem} elements", loc)

    def shared_memory(self, kernel: ir.Function) -> None:
        total = sum(t.size * t.elem.itemsize for t in kernel.locals.values()
                    if isinstance(t, ArrayType) and t.space is MemorySpace.SHARED)
        limit = self.caps.shared_memory_per_block
        if total > limit:
            raise DeviceFeatureError(
                f"the kernel's shared arrays need {total} bytes per block but {self.device} "
                f"has {limit}", kernel.loc)
