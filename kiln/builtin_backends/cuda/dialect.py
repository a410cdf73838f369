"""CUDA C++ as a dialect of the shared C emitter, and CUDA's intrinsic spellings.

NVRTC has no C library headers, so the prologue defines the fixed-width integer types and
`INFINITY`/`NAN` itself, and f16 is a two-byte `kiln_half` that converts to and from float
with PTX `cvt` (arithmetic happens in f32 and rounds once on assignment).
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

from ...codegen.emitter import CEmitter
from ...codegen.helpers import C_HELPERS, HelperTemplate
from ...codegen.vectors import NativeVectors
from ...ir import nodes as ir
from ...ir.enums import MemorySpace
from ...ir.intrinsics import INDEX_BASES, Spelling, intrinsics
from ...ir.types import ArrayType, ScalarType, Type, f16, f32, f64, i32, i64, u32, u64
from ...ir.visit import walk
from .matrix import MATRIX_SPELLINGS, uses_matrix_units
from .matrix import PRELUDE as MATRIX_PRELUDE
from .warps import WARP_SPELLINGS
from .wgmma import WGMMA_SPELLINGS
from .wgmma import prelude as warpgroup_prelude

STATIC_SHARED_LIMIT = 48 * 1024
DYNAMIC_SHARED = re.compile(r"// kiln dynamic shared: (\d+) bytes")

PROLOGUE = """\
typedef signed char int8_t;
typedef short int16_t;
typedef int int32_t;
typedef long long int64_t;
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
#define INFINITY __int_as_float(0x7f800000)
#define NAN __int_as_float(0x7fffffff)
"""

HALF = """\
struct kiln_half {
    unsigned short bits;
    kiln_half() = default;
    __device__ kiln_half(float f) { asm("cvt.rn.f16.f32 %0, %1;" : "=h"(bits) : "f"(f)); }
    __device__ operator float() const {
        float f;
        asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(bits));
        return f;
    }
};
"""

_CAS_FLOAT = """{Q} {T} kiln_atomic_%(op)s_{t}({T} *a, {T} v) {
    unsigned int *p = (unsigned int *)a;
    unsigned int old = *p, assumed;
    do {
        assumed = old;
        {T} next = f%(op)sf(__uint_as_float(assumed), v);
        if (__float_as_uint(next) == assumed) break;
        old = atomicCAS(p, assumed, __float_as_uint(next));
    } while (old != assumed);
    return __uint_as_float(old);
}"""


def _cas_float(op: str) -> HelperTemplate:
    return lambda t: _CAS_FLOAT % {"op": op}


# ---------------------------------------------------------------- intrinsic spellings

_CUDA_INDEX = {"thread_idx": "threadIdx", "block_idx": "blockIdx", "block_dim": "blockDim",
               "grid_dim": "gridDim"}
_WIDE = {i64: "unsigned long long", u64: "unsigned long long"}
_NATIVE = {"atomic_add": "atomicAdd", "atomic_sub": "atomicSub", "atomic_min": "atomicMin",
           "atomic_max": "atomicMax", "atomic_and": "atomicAnd", "atomic_or": "atomicOr",
           "atomic_xor": "atomicXor", "atomic_exch": "atomicExch", "atomic_cas": "atomicCAS"}


def _atomic(name: str) -> Any:
    """An atomic's spelling; 64-bit integers go through CUDA's unsigned long long overloads
    (two's complement makes add, sub, bitwise, exch and cas agree)."""

    def spell(emitter: CEmitter, call: ir.IntrinsicCall, args: list[str]) -> str:
        elem = call.type
        assert isinstance(elem, ScalarType)
        ctype = emitter.ctype(elem)
        if elem.is_float and name in ("atomic_min", "atomic_max"):
            return f"{emitter.use_helper(name, elem)}({', '.join(args)})"
        fn, values = _NATIVE[name], args[1:]
        if name == "atomic_sub" and elem.bits == 64:
            fn, values = "atomicAdd", [f"0 - ({v})" for v in values]
        if elem in _WIDE and name not in ("atomic_min", "atomic_max"):
            wide = _WIDE[elem]
            cast = ", ".join(f"({wide})({v})" for v in values)
            return f"({ctype}){fn}(({wide} *){args[0]}, {cast})"
        return f"{fn}({args[0]}, {', '.join(values)})"

    return spell


CUDA_IMPLS: dict[str, Spelling] = {
    f"{base}_{axis}": f"(int32_t){_CUDA_INDEX[base]}.{axis}"
    for base in INDEX_BASES for axis in "xyz"
}
CUDA_IMPLS.update({
    "barrier": "__syncthreads()",
    "mem_fence": "__threadfence()",
    "rsqrt": "rsqrt{f}({0})",
})
CUDA_IMPLS.update({name: _atomic(name) for name in intrinsics.names("atomic")})


class CudaEmitter(NativeVectors, CEmitter):
    """CUDA C++ for NVRTC: `extern "C" __global__` kernels, `__shared__`, `__syncthreads`,
    whole vectors in memory moved as `float4`, `double2`, ... (`kiln.codegen.vectors`)."""

    spellings = {**CUDA_IMPLS, **WARP_SPELLINGS, **MATRIX_SPELLINGS, **WGMMA_SPELLINGS}
    namespaces = ("cuda", "c")
    native_language = "cuda"
    unroll_pragma = "#pragma unroll {n}"
    type_names: ClassVar[dict[ScalarType, str]] = {**CEmitter.type_names, f16: "kiln_half"}
    kernel_qualifier = 'extern "C" __global__'
    function_qualifier = "static __device__"
    helper_qualifier = "static __device__ __forceinline__"
    space_qualifiers = {MemorySpace.SHARED: "__shared__"}
    table_qualifier = "__constant__"
    vector_types: ClassVar[dict[ScalarType, str]] = {
        f32: "float", f64: "double", i32: "int", u32: "uint", i64: "longlong", u64: "ulonglong",
    }
    prologue = PROLOGUE
    helpers: ClassVar[dict[str, HelperTemplate]] = {
        **C_HELPERS, "atomic_min": _cas_float("min"), "atomic_max": _cas_float("max"),
    }

    def declare_locals(self, locals_: dict[str, Type]) -> None:
        """Shared arrays over 48 KiB in all become pointers into dynamic shared memory
        (the launch passes its size; `Routine` raises the kernel's limit)."""
        shared = {n: t for n, t in locals_.items()
                  if isinstance(t, ArrayType) and t.space is MemorySpace.SHARED}
        sizes = {n: t.size * t.scalar_elem.itemsize for n, t in shared.items()}
        if sum(sizes.values()) <= STATIC_SHARED_LIMIT:
            super().declare_locals(locals_)
            return
        offsets, total = {}, 0
        for name, nbytes in sizes.items():
            offsets[name] = total
            total += (nbytes + 15) // 16 * 16
        self.line(f"extern __shared__ __align__(16) unsigned char kiln_shared[];  "
                  f"// kiln dynamic shared: {total} bytes")
        for name, t in locals_.items():
            if name in offsets:
                elem = self.storage_type(t.elem)  # type: ignore[attr-defined]
                self.line(f"{elem} *{self.names[name]} = ({elem} *)(kiln_shared + "
                          f"{offsets[name]});")
            else:
                self.line(self.declaration(name, t))

    def emit_prologue(self) -> None:
        self.prologue = PROLOGUE + HALF if _uses_half(self.program) else PROLOGUE
        if uses_matrix_units(self.program):
            self.prologue += MATRIX_PRELUDE + warpgroup_prelude(self.program)
        super().emit_prologue()


def _uses_half(program: ir.Program) -> bool:
    def has(t: Any) -> bool:
        return t is f16 or (isinstance(t, ArrayType) and t.elem is f16)

    for func in [*program.functions, program.kernel]:
        if any(has(p.type) for p in func.params) or any(has(t) for t in func.locals.values()):
            return True
        if any(isinstance(n, ir.Expr) and has(n.type) for n in walk(func.body)):
            return True
    return False
