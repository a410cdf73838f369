"""Where a kernel's parameters live on WebGPU, shared by the emitter and the launcher.

Binding 0 is one uniform block: the grid (three i32, the block count as u32, the block's
three i32), then each
array's dimensions and each scalar parameter in kiln's ABI order (`kiln.codegen.kernel_abi`),
every one a 4-byte field (bool as u32, f16 as f32). Each array is a storage buffer at
bindings 1, 2, ... in parameter order. The emitter reads this layout from the program
(`ParamLayout`); the launcher builds the block from the arguments (`uniform_bytes`), which
follow the same order.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kiln import ArrayType, DeviceArray, ScalarType, bool_, f16, f32, i32, u32
from kiln.codegen import AbiParam, kernel_abi
from kiln.ir import nodes as ir


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


WGSL_WORDS = _words("""
    _
    alias array atomic bitcast bool break case const const_assert continue continuing default
    diagnostic discard else enable f16 f32 false fn for i32 if let loop mat2x2 mat2x3 mat2x4
    mat3x2 mat3x3 mat3x4 mat4x2 mat4x3 mat4x4 override ptr requires return sampler struct
    switch true u32 var vec2 vec3 vec4 while texture_2d workgroup uniform storage function
    private read write read_write select arrayLength abs min max clamp sqrt inverseSqrt exp
    exp2 log log2 sin cos tan asin acos atan atan2 sinh cosh tanh floor ceil trunc round fma
    pow sign dot cross length normalize all any workgroupBarrier storageBarrier atomicLoad
    atomicStore atomicAdd atomicSub atomicMin atomicMax atomicAnd atomicOr atomicXor
    atomicExchange atomicCompareExchangeWeak
    NULL Self abstract active as async attribute auto await become binding_array cast catch
    class co_await co_return co_yield coherent column_major common compile compile_fragment
    concept const_cast consteval constexpr constinit crate debugger decltype delete demote
    demote_to_helper do dynamic_cast enum explicit export extends extern external fallthrough
    filter final finally friend from fxgroup get goto groupshared highp impl implements import
    inline instanceof interface layout lowp macro macro_rules match mediump meta mod module
    move mut mutable namespace new nil noexcept noinline nointerpolation noperspective null
    nullptr of operator package packoffset partition pass patch pixelfragment precise
    precision premerge priv protected pub public readonly ref regardless register
    reinterpret_cast require resource restrict self set shared sizeof smooth snorm static
    static_assert static_cast std subroutine super target template this thread_local throw
    trait try type typedef typeid typename typeof union unless unorm unsafe unsized use using
    varying virtual volatile wgsl where with writeonly yield
""")
"""Keywords, words WGSL reserves, and built-in functions a variable must not shadow."""

GRID_FIELDS = (("kiln_grid_x", i32), ("kiln_grid_y", i32), ("kiln_grid_z", i32),
               ("kiln_blocks", u32), ("kiln_block_dim_x", i32), ("kiln_block_dim_y", i32),
               ("kiln_block_dim_z", i32), ("kiln_zero", u32))
"""The launch's shape. The block shape is also the pipeline's `@workgroup_size` overrides;
kernels read it from here (naga 29 panics on some uses of override expressions).
`kiln_zero` is 0, a value no shader compiler knows (`kiln_rounded`)."""
UNIFORM_TYPES = {i32: "i32", u32: "u32", f32: "f32", f16: "f32", bool_: "u32"}
"""WGSL type of each scalar type's uniform field."""


def field_name(abi: AbiParam) -> str:
    base = abi.param if abi.param not in WGSL_WORDS and not abi.param.startswith("__") \
        else f"arg_{abi.param.strip('_')}"
    return f"{base}_shape{abi.axis}" if abi.kind == "dim" else base


@dataclass(frozen=True)
class ParamLayout:
    abi: tuple[AbiParam, ...]
    params: tuple[ir.Param, ...]

    @classmethod
    def of(cls, program: ir.Program) -> ParamLayout:
        return cls(tuple(kernel_abi(program)), tuple(program.kernel.params))

    @property
    def scalar_types(self) -> list[ScalarType]:
        return [a.type for a in self.abi if a.kind == "scalar"]

    def field(self, param: str, axis: int = -1) -> str:
        for a in self.abi:
            if a.param == param and a.kind != "pointer" and a.axis == axis:
                return field_name(a)
        raise KeyError(param)

    def uniform_fields(self) -> list[tuple[str, str]]:
        """(name, WGSL type) of each field of the uniform block, in order."""
        fields = [(name, UNIFORM_TYPES[t]) for name, t in GRID_FIELDS]
        return fields + [(field_name(a), UNIFORM_TYPES[a.type])
                         for a in self.abi if a.kind != "pointer"]

    def bindings(self) -> list[tuple[int, ir.Param]]:
        """(binding, parameter) of each array parameter."""
        arrays = [p for p in self.params if isinstance(p.type, ArrayType)]
        return [(n + 1, p) for n, p in enumerate(arrays)]



SCALAR_FORMATS = {np.dtype(np.int32): "i", np.dtype(np.uint32): "I", np.dtype(np.float32): "f",
                  np.dtype(np.float16): "f", np.dtype(np.bool_): "I"}


def uniform_bytes(grid: Sequence[int], block: Sequence[int], args: Sequence[Any]) -> bytes:
    """The uniform block of one launch from its arguments alone (arrays give their
    dimensions, scalars their values, in parameter order), padded to 16 bytes."""
    fmt = ["<iiiIiiiI"]
    values: list[Any] = [grid[0], grid[1], grid[2], grid[0] * grid[1] * grid[2], *block, 0]
    for a in args:
        if isinstance(a, DeviceArray):
            fmt.append("i" * len(a.shape))
            values += a.shape
        else:
            code = SCALAR_FORMATS[np.asarray(a).dtype]
            fmt.append(code)
            values.append(float(a) if code == "f" else int(a))
    data = struct.pack("".join(fmt), *values)
    return data + bytes(-len(data) % 16)
