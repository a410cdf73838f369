"""Entry points of a built library: C names and typed C parameters for each kernel
specialisation, from the kernel ABI every C-like backend shares (`kiln.ir.abi`)."""

from __future__ import annotations

import keyword
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from ..errors import RecursionDepthError
from ..framework.backend import Dim3
from ..ir.abi import AbiParam, kernel_abi
from ..ir.analysis import written_params
from ..ir.nodes import RuntimeCheck
from ..ir.ranges import MAX_BLOCK_THREADS
from ..ir.types import (
    ArrayType,
    ConstexprType,
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
from .actions import ActionError, SpecialisedKernel

HEADER_TYPES: dict[ScalarType, str] = {
    bool_: "bool", i8: "int8_t", i16: "int16_t", i32: "int32_t", i64: "int64_t",
    u8: "uint8_t", u16: "uint16_t", u32: "uint32_t", u64: "uint64_t",
    f16: "uint16_t", bf16: "uint16_t", f32: "float", f64: "double",
}
"""C types in the header: f16 and bf16 travel as their 16 bits (C has no portable half)."""

C_RESERVED = frozenset((
    "auto", "break", "case", "char", "const", "continue", "default", "do", "double", "else",
    "enum", "extern", "float", "for", "goto", "if", "inline", "int", "long", "register",
    "restrict", "return", "short", "signed", "sizeof", "static", "struct", "switch", "typedef",
    "union", "unsigned", "void", "volatile", "while", "bool", "true", "false", "ctx", "grid",
    "block",
))
"""C keywords, and the launch functions' own parameter names."""

Role = Literal["pointer", "extent", "scalar", "status", "status_extent"]
"""`status` and `status_extent`: the status array of a kernel with run-time checks (debug
bounds checks, recursion depth), which the library passes itself."""


@dataclass(frozen=True)
class CParam:
    """One parameter of a launch function, after the context, grid and block."""

    name: str
    ctype: str
    role: Role
    abi: AbiParam

    @property
    def declaration(self) -> str:
        star = " *" if self.role in ("pointer", "status") else " "
        return f"{self.ctype}{star}{self.name}"


@dataclass(frozen=True)
class EntryCheck:
    """A run-time check of an entry: the message it reports (`check_message`) and the
    status code (its name in `NAME.h`) the launch returns when it fails."""

    message: str
    status: str


@dataclass(frozen=True)
class EntryPoint:
    """One launch function: `c_name(ctx, grid, block, params...)`. `arguments` are what
    the kernel takes (the params, then its status array when it has `checks`, the
    messages of its run-time checks); `blocks` the block shapes it accepts (any when
    empty)."""

    index: int
    c_name: str
    kernel: SpecialisedKernel
    arguments: tuple[CParam, ...]
    written: frozenset[str]
    blocks: tuple[Dim3, ...] = ()
    checks: tuple[EntryCheck, ...] = ()

    @property
    def params(self) -> tuple[CParam, ...]:
        """The launch function's parameters after ctx, grid and block."""
        return tuple(p for p in self.arguments if p.role in ("pointer", "extent", "scalar"))

    @property
    def block_names(self) -> str:
        return ", ".join("x".join(map(str, b)) for b in self.blocks) or "any"

    def prototype(self, lib: str) -> str:
        args = [f"{lib}_context *ctx", f"{lib}_dim3 grid", f"{lib}_dim3 block",
                *(p.declaration for p in self.params)]
        return f"int {self.c_name}({', '.join(args)})"


def c_identifier(name: str) -> str:
    return f"{name}_" if name in C_RESERVED or keyword.iskeyword(name) else name


def signature_suffix(types: Sequence[Type]) -> str:
    """`f32[:], f32[:, :], i32, constexpr(4)` -> `f32_1d_f32_2d_i32_4`."""
    parts = []
    for t in types:
        if isinstance(t, ArrayType):
            parts.append(f"{t.elem.name}_{t.ndim}d")
        elif isinstance(t, ConstexprType):
            parts.append(re.sub(r"\W+", "_", str(t.value)).strip("_") or "c")
        else:
            parts.append(str(t))
    return "_".join(parts)


def entry_points(lib: str, kernels: Sequence[SpecialisedKernel],
                 blocks: Sequence[tuple[str | None, Dim3]] = ()) -> list[EntryPoint]:
    """C names (`LIB_KERNEL`, with the signature appended for a kernel built more than
    once), parameters and block shapes (`(kernel or None for all, shape)`) for each
    specialisation."""
    names = {k.kernel for k in kernels}
    for kernel, block in blocks:
        if kernel is not None and kernel not in names:
            raise ActionError(f"--block {kernel}=...: no kernel {kernel!r} is built "
                              f"(kernels: {', '.join(sorted(names))})")
        if block[0] * block[1] * block[2] > MAX_BLOCK_THREADS:
            raise ActionError(f"--block {'x'.join(map(str, block))}: more than kiln's "
                              f"{MAX_BLOCK_THREADS} threads per block")
    counts = Counter(k.kernel for k in kernels)
    out: list[EntryPoint] = []
    seen: set[str] = set()
    for index, k in enumerate(kernels):
        symbol = k.kernel if counts[k.kernel] == 1 else f"{k.kernel}_{signature_suffix(k.types)}"
        c_name = f"{lib}_{symbol}"
        if c_name in seen:
            raise ActionError(f"{k.kernel} is asked for twice with the same types")
        seen.add(c_name)
        shapes = tuple(dict.fromkeys(b for name, b in blocks if name in (None, k.kernel)))
        out.append(EntryPoint(index, c_name, k, c_params(k), frozenset(written_params(k.program)),
                              shapes, tuple(EntryCheck(check_message(c), check_status(c))
                                            for c in k.program.checks)))
    return out


def check_status(check: RuntimeCheck) -> str:
    """The status a failed check returns: its own for recursion past max_depth, the
    kernel check's for the others (an index out of bounds)."""
    return "ERROR_RECURSION_DEPTH" if issubclass(check.error, RecursionDepthError) \
        else "ERROR_KERNEL"


def check_message(check: RuntimeCheck) -> str:
    """The message a failed check reports, as the in-process error renders it: its place,
    its kind, then the text (`{index}` and the like filled in by the library)."""
    text = check.message if check.details else check.message.replace("{", "{{").replace(
        "}", "}}")
    if check.loc is None:
        return text
    kind = getattr(check.error, "kind", check.error.__name__)
    place = str(check.loc).replace("{", "{{").replace("}", "}}")
    return f"{place}: {kind}: {text}"


def c_params(k: SpecialisedKernel) -> tuple[CParam, ...]:
    params = []
    status = k.program.kernel.params[-1].name if k.program.checks else None
    for a in kernel_abi(k.program):
        base = c_identifier(a.param)
        if a.param == status:
            role: Role = "status" if a.kind == "pointer" else "status_extent"
            params.append(CParam(base if a.kind == "pointer" else f"{base}_shape0",
                                 "int32_t" if a.kind == "dim" else HEADER_TYPES[a.type], role, a))
        elif a.kind == "pointer":
            params.append(CParam(base, HEADER_TYPES[a.type], "pointer", a))
        elif a.kind == "dim":
            params.append(CParam(f"{base}_shape{a.axis}", "int32_t", "extent", a))
        else:
            params.append(CParam(base, HEADER_TYPES[a.type], "scalar", a))
    return tuple(params)
