"""What a target device can do: its kind and its `Capabilities`.

Part of the IR layer because the passes check programs against it (the device feature
check, single-lane warps); backends fill it in, the runtime shows it (`kiln info`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from .enums import ExtensibleEnum, MemorySpace

Dim3 = tuple[int, int, int]


class DeviceKind(ExtensibleEnum):
    CPU: ClassVar[DeviceKind]
    GPU: ClassVar[DeviceKind]
    ACCELERATOR: ClassVar[DeviceKind]


for _n in ("CPU", "GPU", "ACCELERATOR"):
    DeviceKind.register(_n)


@dataclass(frozen=True)
class Capabilities:
    """What a device can do (docs/backends.md). `arch` identifies the binary target for cache keys.

    `atomics` holds one "op:type" entry per supported atomic and element type
    ("atomic_add:f32"); `kiln.ir.intrinsics.atomic_capabilities()` builds the full set.
    """

    backend: str
    name: str
    kind: DeviceKind
    max_threads_per_block: int
    max_block_dims: Dim3
    max_grid_dims: Dim3
    shared_memory_per_block: int
    compute_units: int
    global_memory: int
    warp_size: int
    fp64: bool
    fp16: bool
    atomics: frozenset[str] = field(default_factory=frozenset)
    unified_memory: bool = False
    arch: str = ""
    bf16: bool = True
    """bfloat16 storage and arithmetic (every backend converts it through f32 itself)."""
    memory_spaces: frozenset[MemorySpace] = frozenset(
        (MemorySpace.GLOBAL, MemorySpace.SHARED, MemorySpace.LOCAL, MemorySpace.CONSTANT))
    """Where kernels may place arrays; a plugin adds the spaces it registers (and drops
    CONSTANT, module-level tables, if it cannot declare them: `Program.tables`)."""
    scalar_types: frozenset[str] | None = None
    """Names of the scalar types kernels may compute with (`"i64"`, ...); None: every type.
    A target without 64-bit or 8/16-bit integers (WebGPU) lists what it has."""
    storage_types: frozenset[str] | None = None
    """Element types an array in device memory may have; None: every type of
    `scalar_types` (WebGPU stores no bool or 8/16-bit integer arrays)."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "name": self.name,
            "kind": self.kind.name,
            "max threads per block": self.max_threads_per_block,
            "max block dims": self.max_block_dims,
            "shared memory per block": self.shared_memory_per_block,
            "compute units": self.compute_units,
            "global memory": self.global_memory,
            "warp size": self.warp_size,
            "fp64": self.fp64,
            "fp16": self.fp16,
            "bf16": self.bf16,
            "atomics": ", ".join(sorted(self.atomics)),
            "unified memory": self.unified_memory,
            "memory spaces": ", ".join(sorted(repr(s).split(".", 1)[1].lower()
                                              for s in self.memory_spaces)),
            **({} if self.scalar_types is None
               else {"scalar types": ", ".join(sorted(self.scalar_types))}),
            **({} if self.storage_types is None
               else {"array element types": ", ".join(sorted(self.storage_types))}),
        }
