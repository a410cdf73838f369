"""The OpenCL C dialect of the shared C emitter, and its intrinsic spellings.

OpenCL C differs from C in data only: type names, address-space qualifiers, overloaded
math without `f` suffixes, work-item functions, and atomics. Float atomics (add on f32 and
f64, min and max on f32) are compare-and-swap loops on the value's bits, since OpenCL 1.2
has no float read-modify-write atomics; 64-bit integer atomics are the `atom_*` functions of
cl_khr_int64_{base,extended}_atomics. The extension pragmas a kernel needs (fp64, fp16,
64-bit atomics) are enabled in its prologue.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from ...codegen.emitter import CEmitter
from ...codegen.helpers import C_HELPERS, HelperTemplate
from ...codegen.vectors import NativeVectors
from ...ir import nodes as ir
from ...ir.barriers import barrier_functions, global_barriers, is_barrier
from ...ir.enums import MemorySpace
from ...ir.intrinsics import ATOMIC_TYPES, Spelling, intrinsics
from ...ir.types import (
    ArrayType,
    ScalarType,
    Type,
    bf16,
    bool_,
    f16,
    f32,
    f64,
    i8,
    i16,
    i32,
    i64,
    u8,
    u16,
    u32,
    u64,
)
from ...ir.visit import walk
from .warps import SUBGROUP_EXTENSIONS, WARP_SPELLINGS

NAMESPACE = "opencl"

OPENCL_WORDS = frozenset([
    "half", "double", "char", "uchar", "short", "ushort", "uint", "ulong", "size_t",
    "image2d_t", "sampler_t", "event_t", "get_global_id", "get_local_id", "get_group_id",
    "get_local_size", "get_num_groups", "get_global_size", "mem_fence", "read_mem_fence",
    "write_mem_fence", "atomic_add", "atomic_sub", "atomic_xchg", "atomic_cmpxchg", "atom_add",
    "atom_cmpxchg", "as_uint", "as_float", "as_ulong", "as_double", "rint", "fmin", "fmax",
    "fabs", "clamp", "mix", "dot", "cross", "length", "normalize", "select", "vload", "vstore",
])

INDEX_FUNCTIONS = {"thread_idx": "get_local_id", "block_idx": "get_group_id",
                   "block_dim": "get_local_size", "grid_dim": "get_num_groups"}
LOCAL_FENCE = "CLK_LOCAL_MEM_FENCE"
BOTH_FENCES = "CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE"
"""`barrier()` orders shared memory, and global memory too wherever the block may have
written global memory before it (as CUDA's __syncthreads does); see `global_barriers`."""

LOOP_BARRIER = f"barrier({LOCAL_FENCE});"
"""The first statement of every loop that reaches a barrier (unless it is one already).
PoCL (3.0 and 3.1 at least) forms its parallel regions between barriers, and aborts the
whole process (`ParallelRegion.cc: Assertion 'exit != NULL' failed`) on a loop with
barriers whose first region, from the loop's head to its first barrier, holds a loop of its
own that LLVM keeps (a constant-trip loop such as the one of `x ** 3`, a compare-and-swap
atomic). A barrier at the head makes that region empty. It changes nothing else: a barrier
loop runs the same iterations in every thread of the block (the convergence check), and
the loop's own barriers keep their fences; an extra barrier per iteration costs little."""

NATIVE_ATOMICS = {"atomic_add": "add", "atomic_sub": "sub", "atomic_min": "min",
                  "atomic_max": "max", "atomic_and": "and", "atomic_or": "or",
                  "atomic_xor": "xor", "atomic_exch": "xchg", "atomic_cas": "cmpxchg"}
CAS_OPS = {"atomic_add": "{a} + {b}", "atomic_min": "fmin({a}, {b})",
           "atomic_max": "fmax({a}, {b})"}
"""Float read-modify-writes built on compare-and-swap: the new value from old `a` and `b`."""

POINTER_QUALIFIERS = {MemorySpace.GLOBAL: "__global", MemorySpace.SHARED: "__local",
                      MemorySpace.LOCAL: "__private"}
BITS_OF = {f32: ("uint", "as_uint", "as_float", "atomic_cmpxchg"),
           f64: ("ulong", "as_ulong", "as_double", "atom_cmpxchg")}



def _cas_helper(op: str, space: MemorySpace) -> HelperTemplate:
    """`kiln_<op>_<space>_<t>(p, v)`: a float atomic as a compare-and-swap loop."""
    qualifier = POINTER_QUALIFIERS[space]
    update = CAS_OPS[op]

    def template(t: ScalarType) -> str:
        bits, to_bits, from_bits, cmpxchg = BITS_OF[t]
        new = update.format(a=f"{from_bits}(seen)", b="v")
        pointer = f"volatile {qualifier} {{T}} *p"
        return f"""{{Q}} {{T}} kiln_{op}_{space.value}_{{t}}({pointer}, {{T}} v) {{
    volatile {qualifier} {bits} *q = (volatile {qualifier} {bits} *)p;
    {bits} seen, old = *q;
    do {{
        seen = old;
        old = {cmpxchg}(q, seen, {to_bits}({new}));
    }} while (old != seen);
    return {from_bits}(old);
}}"""

    return template


def _atomic(name: str) -> Callable[[CEmitter, ir.IntrinsicCall, list[str]], str]:
    """The spelling of atomic `name`: a built-in for integers (and f32 exchange), else CAS."""

    def spell(emitter: CEmitter, call: ir.IntrinsicCall, args: list[str]) -> str:
        array = call.args[0].type
        assert isinstance(array, ArrayType)
        t = array.scalar_elem
        if t.is_float and name in CAS_OPS:
            helper = emitter.use_helper(f"{name}_{array.space.value}", t)
            return f"{helper}({', '.join(args)})"
        prefix = "atom_" if t.bits == 64 else "atomic_"
        return f"{prefix}{NATIVE_ATOMICS[name]}({', '.join(args)})"

    return spell


SPELLINGS: dict[str, Spelling] = {
    f"{base}_{axis}": f"(int){function}({n})"
    for base, function in INDEX_FUNCTIONS.items() for n, axis in enumerate("xyz")
}


def _barrier(emitter: CEmitter, call: ir.IntrinsicCall, args: list[str]) -> str:
    """A local fence where no global memory needs ordering at this barrier (the program's
    `global_barriers`); both fences from a dialect that did not work that out."""
    fenced = emitter.global_barriers if isinstance(emitter, OpenCLEmitter) else None
    global_fence = fenced is None or id(call) in fenced
    return f"barrier({BOTH_FENCES if global_fence else LOCAL_FENCE})"


SPELLINGS.update({
    "barrier": _barrier,
    "mem_fence": f"mem_fence({BOTH_FENCES})",
    "rsqrt": "rsqrt({0})",
    **{name: _atomic(name) for name in ATOMIC_TYPES},
    **WARP_SPELLINGS,
})


CONTRACT_MACRO = "KILN_FP_CONTRACT"


class OpenCLEmitter(NativeVectors, CEmitter):
    """OpenCL C 1.2; whole vectors in memory move as `float4`, `double2`, ...
    (`kiln.codegen.vectors`)."""

    spellings = SPELLINGS
    namespaces = (NAMESPACE, "c")
    native_language = "opencl"
    unroll_pragma = "#pragma unroll {n}"
    type_names: ClassVar[dict[ScalarType, str]] = {
        bool_: "bool", i8: "char", i16: "short", i32: "int", i64: "long",
        u8: "uchar", u16: "ushort", u32: "uint", u64: "ulong",
        f16: "half", bf16: "ushort", f32: "float", f64: "double",
    }
    storage_names: ClassVar[dict[ScalarType, str]] = {bool_: "uchar"}
    vector_types: ClassVar[dict[ScalarType, str]] = {
        f32: "float", f64: "double", i32: "int", u32: "uint", i64: "long", u64: "ulong",
    }
    address_integer = "uintptr_t"
    literal_suffixes: ClassVar[dict[ScalarType, str]] = {u32: "u", i64: "L", u64: "UL"}
    kernel_qualifier = "__kernel"
    space_qualifiers: ClassVar[dict[MemorySpace, str]] = {MemorySpace.SHARED: "__local"}
    table_qualifier: ClassVar[str] = "__constant"
    pointer_qualifiers: ClassVar[dict[MemorySpace, str]] = POINTER_QUALIFIERS
    prologue = f"#ifndef {CONTRACT_MACRO}\n#pragma OPENCL FP_CONTRACT OFF\n#endif\n"
    """No fused multiply-adds the program did not ask for (`kiln.fma`): results match C and
    NumPy. A kernel's `contract=True` or `fastmath=True` option defines the macro at build
    time, leaving OpenCL's default (contraction allowed)."""
    reserved = CEmitter.reserved | OPENCL_WORDS
    helpers: ClassVar[dict[str, HelperTemplate]] = {
        **C_HELPERS,
        **{f"{op}_{space.value}": _cas_helper(op, space)
           for op in CAS_OPS for space in (MemorySpace.GLOBAL, MemorySpace.SHARED)},
    }

    def emit(self, program: ir.Program) -> str:
        self.global_barriers = global_barriers(program)
        self.barrier_functions = barrier_functions(program)
        return super().emit(program)

    def loop_body(self, s: ir.While | ir.For) -> None:
        """A loop that reaches a barrier begins each iteration with one (`LOOP_BARRIER`)."""
        first = s.body[0] if s.body else None
        starts_with_barrier = isinstance(first, ir.ExprStmt) and is_barrier(first.expr)
        if not starts_with_barrier and self.reaches_barrier(s.body):
            self.line(LOOP_BARRIER)
        super().loop_body(s)

    def reaches_barrier(self, body: list[ir.Stmt]) -> bool:
        return any(is_barrier(n) or (isinstance(n, ir.Call) and n.func in self.barrier_functions)
                   for n in walk(body))

    def float_suffix(self, t: Type) -> str:
        return ""  # OpenCL's math built-ins are overloaded on the argument type

    def emit_prologue(self) -> None:
        self._out += [f"#pragma OPENCL EXTENSION {ext} : enable"
                      for ext in extensions_used(self.program)]
        super().emit_prologue()


def extensions_used(program: ir.Program) -> list[str]:
    """The OpenCL extensions a program needs, in a stable order."""
    needed: set[str] = set()
    for func in [*program.functions, program.kernel]:
        types: list[Type] = [p.type for p in func.params] + list(func.locals.values())
        for node in walk(func.body):
            if isinstance(node, ir.Expr):
                types.append(node.type)
            if (isinstance(node, ir.IntrinsicCall) and intrinsics[node.name].category == "atomic"
                    and _elem(node.args[0].type).bits == 64):
                needed |= {"cl_khr_int64_base_atomics", "cl_khr_int64_extended_atomics"}
            if isinstance(node, ir.IntrinsicCall) and intrinsics[node.name].category == "warp":
                needed |= set(SUBGROUP_EXTENSIONS)
        for t in types:
            elem = _elem(t)
            if elem == f64:
                needed.add("cl_khr_fp64")
            elif elem == f16:
                needed.add("cl_khr_fp16")
    order = ("cl_khr_fp64", "cl_khr_fp16", "cl_khr_int64_base_atomics",
             "cl_khr_int64_extended_atomics", *SUBGROUP_EXTENSIONS)
    return [ext for ext in order if ext in needed]


def _elem(t: Type) -> ScalarType:
    if isinstance(t, ArrayType):
        return t.scalar_elem
    return t if isinstance(t, ScalarType) else i32
