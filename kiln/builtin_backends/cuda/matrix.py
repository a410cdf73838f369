"""CUDA's matrix units: the "matrix_native" intrinsics as `ldmatrix`, `mma.sync` and
`cp.async` (sm_80+), in PTX inline assembly (no CUDA headers: NVRTC's wheel ships none).

Fragments are the lane's registers in PTX's layouts for `mma.m16n8k16` (f16, bf16: A in four
u32 of two halves each, B in two) and `mma.m16n8k8` (tf32: A in four u32, B in two).
Fragment loads from shared memory of 16-bit elements use `ldmatrix` (`.trans` for B, which
kiln stores row-major as K x N): every row of the tile must start 16-byte aligned. Loads
from global memory, and of f32 (rounded to tf32 as the scalar form does, see
`kiln.ir.passes.matrix`), read the lane's elements one by one. `cp.async` copies 4, 8 or 16
bytes, aligned to their size on both sides.
"""

from __future__ import annotations

from typing import Any

from ...ir import nodes as ir
from ...ir.enums import MemorySpace
from ...ir.intrinsics import Spelling
from ...ir.types import ArrayType
from ...ir.visit import walk

PRELUDE = """\
static __device__ __forceinline__ unsigned kiln_lane() {
    unsigned l;
    asm("mov.u32 %0, %%laneid;" : "=r"(l));  // not volatile: one read serves the kernel
    return l;
}
static __device__ __forceinline__ unsigned kiln_smem(const void *p) {
    return (unsigned)__cvta_generic_to_shared(p);  // folds to a constant for kiln's arrays
}
static __device__ __forceinline__ uint32_t kiln_pack16(const unsigned short *p, long long next) {
    return (uint32_t)p[0] | ((uint32_t)p[next] << 16);
}
static __device__ __forceinline__ uint32_t kiln_tf32(float x) {
    float c = __fmul_rn(x, 8193.0f);
    float h = __fsub_rn(c, __fsub_rn(c, x));
    return __float_as_uint(fabsf(x) < 0x1p100f ? h : x);
}
static __device__ __forceinline__ void kiln_ldsm_a16(uint32_t *f, const void *base, int row,
                                                     int col, int ld) {
    unsigned l = kiln_lane();  // 32-bit shared addresses: constant offsets fold away
    unsigned at = kiln_smem(base) + (unsigned)(((row + (int)(l & 15)) * ld + col
                                                + (int)(l >> 4) * 8) * 2);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(f[0]), "=r"(f[1]), "=r"(f[2]), "=r"(f[3]) : "r"(at));
}
static __device__ __forceinline__ void kiln_ldsm_b16(uint32_t *f, const void *base, int row,
                                                     int col, int ld) {
    unsigned l = kiln_lane();
    unsigned at = kiln_smem(base) + (unsigned)(((row + (int)(l & 15)) * ld + col) * 2);
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];"
                 : "=r"(f[0]), "=r"(f[1]) : "r"(at));
}
static __device__ __forceinline__ void kiln_ld_a16(uint32_t *f, const void *base, long long row,
                                                   long long col, long long ld) {
    unsigned l = kiln_lane();
    const unsigned short *p = (const unsigned short *)base + (row + (l >> 2)) * ld + col
                              + (l & 3) * 2;
    f[0] = kiln_pack16(p, 1);
    f[1] = kiln_pack16(p + 8 * ld, 1);
    f[2] = kiln_pack16(p + 8, 1);
    f[3] = kiln_pack16(p + 8 * ld + 8, 1);
}
static __device__ __forceinline__ void kiln_ld_b16(uint32_t *f, const void *base, long long row,
                                                   long long col, long long ld) {
    unsigned l = kiln_lane();
    const unsigned short *p = (const unsigned short *)base + (row + (l & 3) * 2) * ld + col
                              + (l >> 2);
    f[0] = kiln_pack16(p, ld);
    f[1] = kiln_pack16(p + 8 * ld, ld);
}
static __device__ __forceinline__ void kiln_ld_a32(uint32_t *f, const float *base, long long row,
                                                   long long col, long long ld) {
    unsigned l = kiln_lane();
    const float *p = base + (row + (l >> 2)) * ld + col + (l & 3);
    f[0] = kiln_tf32(p[0]);
    f[1] = kiln_tf32(p[8 * ld]);
    f[2] = kiln_tf32(p[4]);
    f[3] = kiln_tf32(p[8 * ld + 4]);
}
static __device__ __forceinline__ void kiln_ld_b32(uint32_t *f, const float *base, long long row,
                                                   long long col, long long ld) {
    unsigned l = kiln_lane();
    const float *p = base + (row + (l & 3)) * ld + col + (l >> 2);
    f[0] = kiln_tf32(p[0]);
    f[1] = kiln_tf32(p[4 * ld]);
}
#define KILN_MMA(name, shape, types)                                                          \\
static __device__ __forceinline__ void name(float *c, const uint32_t *a, const uint32_t *b) { \\
    asm("mma.sync.aligned." shape ".row.col.f32." types ".f32 "                               \\
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"                     \\
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])                                      \\
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));                  \\
}
KILN_MMA(kiln_mma_f16, "m16n8k16", "f16.f16")
KILN_MMA(kiln_mma_bf16, "m16n8k16", "bf16.bf16")
KILN_MMA(kiln_mma_tf32, "m16n8k8", "tf32.tf32")
#define KILN_CP_ASYNC(bytes, cache)                                                           \
static __device__ __forceinline__ void kiln_cp_async##bytes(void *dst, const void *src) {     \
    asm volatile("cp.async." cache ".shared.global [%0], [%1], " #bytes ";"                    \
                 :: "r"(kiln_smem(dst)), "l"(src) : "memory");                                \
}
KILN_CP_ASYNC(4, "ca")
KILN_CP_ASYNC(8, "ca")
KILN_CP_ASYNC(16, "cg")
static __device__ __forceinline__ void kiln_cp_async_commit() {
    asm volatile("cp.async.commit_group;" ::: "memory");
}
template <int N> static __device__ __forceinline__ void kiln_cp_async_wait() {
    asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory");
}
"""

_MMA = ("kiln_mma_f16", "kiln_mma_bf16", "kiln_mma_tf32")


def uses_matrix_units(program: ir.Program) -> bool:
    return any(isinstance(n, ir.IntrinsicCall) and n.name.startswith("native_")
               for func in [*program.functions, program.kernel] for n in walk(func.body))


def _load(use: str) -> Any:
    def spell(emitter: Any, call: ir.IntrinsicCall, args: list[str]) -> str:
        array = call.args[2]
        assert isinstance(array.type, ArrayType)
        frag, at, base, row, col, ld = args
        if array.type.scalar_elem.bits == 32:
            helper = f"kiln_ld_{use}32"
        elif array.type.space is MemorySpace.SHARED:
            helper = f"kiln_ldsm_{use}16"
        else:
            helper = f"kiln_ld_{use}16"
        return f"{helper}(&{frag}[{at}], {base}, {row}, {col}, {ld})"

    return spell


def _mma(emitter: Any, call: ir.IntrinsicCall, args: list[str]) -> str:
    kind = call.args[6]
    assert isinstance(kind, ir.Const)
    acc, at, a, a_at, b, b_at, _ = args
    return f"{_MMA[int(kind.value)]}(&{acc}[{at}], &{a}[{a_at}], &{b}[{b_at}])"


def _copy_async(emitter: Any, call: ir.IntrinsicCall, args: list[str]) -> str:
    dst, dst_at, src, src_at, _ = args
    nbytes = call.args[4]
    assert isinstance(nbytes, ir.Const)  # .cg (L2 only) for 16 bytes, .ca for 4 and 8
    return f"kiln_cp_async{int(nbytes.value)}(&{dst}[{dst_at}], &{src}[{src_at}])"


def _wait(emitter: Any, call: ir.IntrinsicCall, args: list[str]) -> str:
    pending = call.args[0]
    assert isinstance(pending, ir.Const)
    return f"kiln_cp_async_wait<{int(pending.value)}>()"


MATRIX_SPELLINGS: dict[str, Spelling] = {
    "native_load_a": _load("a"),
    "native_load_b": _load("b"),
    "native_mma": _mma,
    "native_copy_async": _copy_async,
    "native_copy_async_commit": "kiln_cp_async_commit()",
    "native_copy_async_wait": _wait,
    "native_tf32": "__uint_as_float(kiln_tf32({0}))",
}
