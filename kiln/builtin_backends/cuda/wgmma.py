"""Hopper's warpgroup matrix units: the "matrix_native" wgmma intrinsics as
`wgmma.mma_async` with shared-memory matrix descriptors, `wgmma.fence`,
`wgmma.commit_group` and `wgmma.wait_group`, in PTX inline assembly for sm_90a.

Operands sit in shared memory in the core-matrix layout without swizzling (see
`kiln.ir.passes.matrix`): element [r, k] of a tile at `s[k // 8, r, k % 8]`, so each core
matrix (8 rows of 16 bytes) is 128 contiguous bytes, the next one along the rows 128 bytes
on (the descriptor's stride byte offset) and the next one along k one k block of the array
on (its leading byte offset). Both operands are K-major: no transposition.
"""

from __future__ import annotations

import re
from typing import Any

from ...ir import nodes as ir
from ...ir.intrinsics import Spelling, wgmma_width
from ...ir.visit import walk

ARCH_SUFFIX = "a"
"""sm_90's architecture-specific target (`sm_90a`): wgmma exists nowhere else."""

PRELUDE = """\
static __device__ __forceinline__ uint64_t kiln_wgmma_desc(const void *base, unsigned at,
                                                          unsigned lead) {
    unsigned addr = kiln_smem(base) + at * 2u;  // 16-byte aligned: at is a multiple of 8
    return (uint64_t)((addr & 0x3FFFFu) >> 4) | ((uint64_t)((lead >> 4) & 0x3FFFu) << 16)
           | ((uint64_t)(128u >> 4) << 32);      // no swizzle, base offset 0
}
static __device__ __forceinline__ void kiln_wgmma_fence() {
    // shared stores of this thread become visible to the async proxy, then the register
    // and shared accesses before this point are ordered before the next wgmma
    asm volatile("fence.proxy.async.shared::cta;\\n\\twgmma.fence.sync.aligned;" ::: "memory");
}
static __device__ __forceinline__ void kiln_wgmma_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
template <int N> static __device__ __forceinline__ void kiln_wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(N) : "memory");
}
template <int C> static __device__ __forceinline__ void kiln_wgmma_pin(float *d) {
    // after a wait: each accumulator register seen as rewritten here, so that no read of
    // it moves above the wait (the compiler does not know that products run on)
#pragma unroll
    for (int i = 0; i < C; ++i) {
        asm volatile("" : "+f"(d[i]) :: "memory");
    }
}
"""

WGMMA_INSTRUCTION = re.compile(r"\bwgmma\.(mma_async|fence|commit_group|wait_group)\b")
"""A wgmma instruction in generated or native code (not a file name in a #line)."""

KINDS = ("f16", "bf16")  # by the kind argument of native_wgmma


def helper_name(width: int, kind: str) -> str:
    return f"kiln_wgmma_m64n{width}_{kind}"


def product_helper(width: int, kind: str) -> str:
    """One `wgmma.mma_async` of m64n`width`k16: width / 2 accumulator registers."""
    count = width // 2
    regs = ", ".join(f"%{i}" for i in range(count))
    outputs = ", ".join(f'"+f"(d[{i}])' for i in range(count))
    return (
        f"static __device__ __forceinline__ void {helper_name(width, kind)}(float *d, "
        "uint64_t a, uint64_t b) {\n"
        f'    asm volatile("{{\\n\\t.reg .pred p;\\n\\tsetp.ne.b32 p, %{count + 2}, 0;\\n\\t"\n'
        f'                 "wgmma.mma_async.sync.aligned.m64n{width}k16.f32.{kind}.{kind} "\n'
        f'                 "{{{regs}}}, %{count}, %{count + 1}, p, 1, 1, 0, 0;\\n\\t}}"\n'
        f'                 : {outputs}\n'
        '                 : "l"(a), "l"(b), "r"(1) : "memory");\n'
        "}\n")


def _products(program: ir.Program) -> list[tuple[int, str]]:
    """The (N, element kind) of each warpgroup product the program makes."""
    found = set()
    for func in [*program.functions, program.kernel]:
        for n in walk(func.body):
            if isinstance(n, ir.IntrinsicCall) and n.name == "native_wgmma":
                kind = n.args[7]
                assert isinstance(kind, ir.Const)
                found.add((wgmma_width(n.args[0].type), KINDS[int(kind.value)]))
    return sorted(found)


def uses_warpgroup_units(program: ir.Program) -> bool:
    return any(isinstance(n, ir.IntrinsicCall) and n.name.startswith("native_wgmma")
               for func in [*program.functions, program.kernel] for n in walk(func.body))


def prelude(program: ir.Program) -> str:
    """The helpers the program's warpgroup operations call (none when it has none)."""
    if not uses_warpgroup_units(program):
        return ""
    return PRELUDE + "".join(product_helper(w, k) for w, k in _products(program))


def arch_for(source: str, arch: str) -> str:
    """`sm_90a` for sm_90 code using wgmma (kiln's or a kiln.native call's), else `arch`."""
    if arch == "sm_90" and WGMMA_INSTRUCTION.search(source):
        return arch + ARCH_SUFFIX
    return arch


def _product(emitter: Any, call: ir.IntrinsicCall, args: list[str]) -> str:
    acc, sa, a_at, a_lead, sb, b_at, b_lead, _ = args
    kind = call.args[7]
    assert isinstance(kind, ir.Const)
    helper = helper_name(wgmma_width(call.args[0].type), KINDS[int(kind.value)])
    return (f"{helper}({acc}, kiln_wgmma_desc({sa}, {a_at}, {a_lead}), "
            f"kiln_wgmma_desc({sb}, {b_at}, {b_lead}))")


def _wait(emitter: Any, call: ir.IntrinsicCall, args: list[str]) -> str:
    pending = call.args[0]
    assert isinstance(pending, ir.Const)
    pins = "".join(f", kiln_wgmma_pin<{wgmma_width(acc.type) // 2}>({name})"
                   for acc, name in zip(call.args[1:], args[1:]))
    return f"(kiln_wgmma_wait<{int(pending.value)}>(){pins})"


WGMMA_SPELLINGS: dict[str, Spelling] = {
    "native_wgmma": _product,
    "native_wgmma_fence": "kiln_wgmma_fence()",
    "native_wgmma_commit": "kiln_wgmma_commit()",
    "native_wgmma_wait": _wait,
}
