"""The shared C-family emitter: one walker over lowered IR, specialised by dialect data.

A dialect (cpu, cuda, opencl, ...) subclasses `CEmitter` and mostly sets class attributes:
type names, qualifiers, literal suffixes, the prologue, its intrinsic spellings (merged
along the MRO with its bases'; extensions add theirs under its namespaces), helper
templates. Where data is not enough it overrides a hook (`emit_kernel`, `var`,
`element`), a node's handler (`stmt_<Node>`, `expr_<Node>`: the emitter is a
`kiln.ir.visit.Visitor`) or registers a handler with a predicate (`@handles(IntrinsicCall,
when=...)`, DaCe's dispatcher).

Intrinsic implementations for emitters are either a format string over the argument
sources (`"atomicAdd({0}, {1})"`; keywords `{T}` result C type, `{f}` libm suffix) or a
callable `(emitter, call, args) -> str`. Atomics receive the element's address as `{0}`.

Every statement with a source location gets a `#line` directive when its line differs
from the one the C compiler would assume, so compiler errors name the user's file:line.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..errors import UnsupportedError
from ..ir import nodes as ir
from ..ir.abi import function_abi
from ..ir.enums import MemorySpace
from ..ir.intrinsics import Spelling, check_spellings, implementation_of, intrinsics
from ..ir.ranges import Ranges
from ..ir.types import (
    SCALAR_BY_DTYPE,
    ArrayType,
    ScalarType,
    Type,
    VoidType,
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
from ..ir.visit import Visitor, walk
from ..lang.native import PLACEHOLDER, native_code
from .c_intrinsics import C_MATH
from .helpers import C_HELPERS, HelperTemplate
from .names import RESERVED, NameTable

GENERATED_FILE = "<kiln>"
"""The file name `#line` gives kiln's own lines (prologue, helpers, launch glue)."""

PRIMARY, UNARY = 16, 15
BINARY_PREC = {
    "*": 13, "/": 13, "%": 13, "+": 12, "-": 12, "<<": 11, ">>": 11, "<": 10, "<=": 10,
    ">": 10, ">=": 10, "==": 9, "!=": 9, "&": 8, "^": 7, "|": 6, "&&": 5, "||": 4,
}
TERNARY = 3
BITWISE = {"<<", ">>", "&", "^", "|"}
UNSIGNED_OF = {i8: u8, i16: u16, i32: u32, i64: u64}
WRAPPING = {"+", "-", "*", "<<"}
"""Signed operations C leaves undefined on overflow; kiln's integers wrap around."""


@dataclass(frozen=True)
class CExpr:
    """Emitted expression text and its C precedence (higher binds tighter)."""

    text: str
    prec: int = PRIMARY
    unsigned: CExpr | None = None
    """For a wrapping signed operation (`CEmitter.wrapping`): the same value before its
    conversion back, so enclosing wrapping operations continue in the unsigned type."""

    def wrap(self, min_prec: int) -> str:
        return self.text if self.prec >= min_prec else f"({self.text})"


def _is_call_text(text: str) -> bool:
    """Whether `text` is one identifier or one call `name(...)`, so it needs no parentheses."""
    head = text.split("(", 1)[0]
    if not head.replace("_", "a").replace(".", "a").isalnum() or head[:1].isdigit():
        return False
    if "(" not in text:
        return True
    depth = 0
    for i, ch in enumerate(text[len(head):], len(head)):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0:
            return i == len(text) - 1
    return False


def non_finite(v: float, suffix: str) -> str:
    """An infinity or a NaN as a constant expression every C-family compiler folds, also in
    initialisers of constant memory: `1.0f / 0.0f`. INFINITY and NAN are not that everywhere:
    PoCL rejects its NAN in a `__constant` initialiser, and CUDA has neither macro in
    device code (kiln's are `__int_as_float`, which no `__constant__` initialiser takes). A
    NaN's sign and payload are the compiler's (gcc and clang fold to 0x7fc00000, NVRTC to
    0xffc00000)."""
    one, zero = f"1.0{suffix}", f"0.0{suffix}"
    if v != v:
        return f"({zero} / {zero})"
    return f"({'-' if v < 0 else ''}{one} / {zero})"


class CEmitter(Visitor[Any]):
    """IR -> C-family source. Subclass and set the data below for a dialect.

    A `Visitor` whose handlers are `stmt_<Node>` (emit lines) and `expr_<Node>` (return a
    `CExpr`), and `@handles` methods where a predicate decides."""

    visit_prefixes = ("stmt_", "expr_")

    spellings: ClassVar[Mapping[str, Spelling]] = C_MATH
    """This class's own intrinsic spellings; a subclass's override its bases' (see
    `implementation`). C's are the math intrinsics only: a dialect spells the index
    intrinsics, `barrier`, `mem_fence`, the atomics and the warp operations."""
    namespaces: ClassVar[tuple[str, ...]] = ("c",)
    """Where implementations extensions register (`kiln.backend.intrinsics.implement`) are
    found, most specific first; a class's own `spellings` belong to its first namespace."""
    type_names: ClassVar[dict[ScalarType, str]] = {
        bool_: "bool", i8: "int8_t", i16: "int16_t", i32: "int32_t", i64: "int64_t",
        u8: "uint8_t", u16: "uint16_t", u32: "uint32_t", u64: "uint64_t",
        f16: "_Float16", bf16: "uint16_t", f32: "float", f64: "double",
    }
    """bf16 is its bits (helpers `kiln_to_f32_bf16`/`kiln_from_f32_bf16` convert it)."""
    storage_names: ClassVar[dict[ScalarType, str]] = {}
    """Element types in memory where they differ from value types (OpenCL: bool -> uchar)."""
    literal_suffixes: ClassVar[dict[ScalarType, str]] = {u32: "u", i64: "LL", u64: "ULL"}
    kernel_qualifier: ClassVar[str] = ""
    function_qualifier: ClassVar[str] = "static inline"
    helper_qualifier: ClassVar[str] = "static inline"
    space_qualifiers: ClassVar[dict[MemorySpace, str]] = {}
    """Qualifier on declarations of shared/local arrays (CUDA `__shared__`)."""
    pointer_qualifiers: ClassVar[dict[MemorySpace, str]] = {}
    """Qualifier on pointer parameters per memory space (OpenCL `__global`)."""
    table_qualifier: ClassVar[str] = "static const"
    """Declares a constant table at program scope (CUDA `__constant__`)."""
    prologue: str = ("#include <stdint.h>\n#include <stdbool.h>\n#include <stdio.h>\n"
                     "#include <math.h>\n")
    """Starts the translation unit; a dialect may extend it per program (CUDA's half type)."""
    reserved: ClassVar[frozenset[str]] = RESERVED
    half_math_via_float: ClassVar[bool] = True
    """Compute f16 math, `//`, `%` and `**` in f32 (cast in and out)."""
    helpers: ClassVar[dict[str, HelperTemplate]] = C_HELPERS
    indent_unit: ClassVar[str] = "    "
    native_language: ClassVar[str] = "c"
    unroll_pragma: ClassVar[str] = "#pragma GCC unroll {n}"
    """The line before a `for` that asks the compiler to unroll it `{n}` times."""
    """The `kiln.native(...)` keyword whose code this dialect inserts (cuda, opencl, c)."""
    # ------------------------------------------------------------ program

    def emit(self, program: ir.Program) -> str:
        """The whole translation unit: prologue, helpers, device functions, kernel."""
        self.program = program
        self._out: list[str] = []
        self._depth = 0
        self._pos: tuple[str, int] | None = None
        self._helpers_used: dict[str, str] = {}
        self.fnames = NameTable(self.reserved)
        for f in [*program.functions, program.kernel]:
            self.fnames.add(f.name)
        recursive = self._needs_prototypes(program)
        if recursive:
            for f in program.functions:
                self.begin_function(f)
                self.line(self.function_signature(f) + ";")
            self.line("")
        for f in program.functions:
            self.emit_function(f)
            self.line("")
        self.emit_kernel(program.kernel)
        body, self._out = self._out, []
        self.emit_prologue()
        header = self._out
        return self._finish([*header, *body])

    def emit_prologue(self) -> None:
        """The dialect's prologue, the helpers this program uses, then its constant tables."""
        self._out += self.prologue.rstrip("\n").split("\n")
        for text in self._helpers_used.values():
            self._out += ["", *text.split("\n")]
        self._out.append("")
        for name, data in self.program.tables.items():
            self._out.append(self.table_declaration(name, data))
        if self.program.tables:
            self._out.append("")

    def table_declaration(self, name: str, data: np.ndarray) -> str:
        """A module-level NumPy array as a read-only array at program scope, in constant
        memory where the dialect has it (`table_qualifier`)."""
        elem = SCALAR_BY_DTYPE[data.dtype]
        values = ", ".join(self.literal(v, elem).text for v in data.reshape(-1).tolist())
        return (f"{self.table_qualifier} {self.storage_type(elem)} {name}[{data.size}] = "
                f"{{{values}}};")

    def _finish(self, lines: list[str]) -> str:
        """Resolve `#line` resets to kiln's own line numbers."""
        out = []
        for n, text in enumerate(lines, 1):
            out.append(f'#line {n + 1} "{GENERATED_FILE}"' if text is _RESET else text)
        return "\n".join(out) + "\n"

    @staticmethod
    def _needs_prototypes(program: ir.Program) -> bool:
        seen: set[str] = set()
        for f in program.functions:
            seen.add(f.name)
            if any(isinstance(n, ir.Call) and n.func not in seen for n in walk(f.body)):
                return True
        return False

    # ------------------------------------------------------------ output

    def line(self, text: str, loc: ir.Loc | None = None) -> None:
        """One line of output at the current indentation, mapped to `loc` when given."""
        if loc is not None and self._pos != (loc.file, loc.line):
            self._out.append(f'#line {loc.line} "{_escape(loc.file)}"')
            self._pos = (loc.file, loc.line)
        self._out.append(self.indent_unit * self._depth + text if text else "")
        if self._pos is not None:
            self._pos = (self._pos[0], self._pos[1] + 1)

    def unmapped(self) -> None:
        """Attribute the following lines to kiln's generated file again."""
        if self._pos is not None:
            self._out.append(_RESET)
            self._pos = None

    @contextlib.contextmanager
    def indented(self, opener: str | None = None, closer: str = "}",
                 loc: ir.Loc | None = None) -> Iterator[None]:
        if opener is not None:
            self.line(opener, loc)
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
            if closer:
                self.line(closer)

    # ------------------------------------------------------------ functions

    def begin_function(self, func: ir.Function) -> None:
        """Fresh names for one function: parameters and locals, then array dimensions."""
        self.func = func
        self.ranges = Ranges(func)
        self.names = NameTable(self.reserved)
        for p in func.params:
            self.names.add(p.name)
        for name in func.locals:
            self.names.add(name)
        self.dims: dict[tuple[str, int], str] = {}
        for p in func.params:
            if isinstance(p.type, ArrayType):
                for axis in range(p.type.ndim):
                    self.dims[(p.name, axis)] = self.names.fresh(
                        f"{self.names[p.name]}_shape{axis}")

    def param_decls(self, func: ir.Function) -> list[str]:
        """C parameter declarations in ABI order (see `kiln.ir.abi`)."""
        out = []
        for a in function_abi(func):
            if a.kind == "pointer":
                array = func.params[a.index].type
                assert isinstance(array, ArrayType)
                space = array.space
                qual = self.pointer_qualifiers.get(space, "")
                out.append(f"{qual + ' ' if qual else ''}{self.storage_type(a.type)} "
                           f"*{self.names[a.param]}")
            elif a.kind == "dim":
                out.append(f"{self.ctype(i32)} {self.dims[(a.param, a.axis)]}")
            else:
                # kernel scalars arrive as stored in memory (OpenCL has no bool argument)
                ctype = self.storage_type(a.type) if func.is_kernel else self.ctype(a.type)
                out.append(f"{ctype} {self.names[a.param]}")
        return out

    def function_signature(self, func: ir.Function) -> str:
        ret = self.return_type(func.return_type)
        params = ", ".join(self.param_decls(func)) or "void"
        return f"{self.function_qualifier} {ret} {self.fnames[func.name]}({params})"

    def return_type(self, t: Type) -> str:
        return "void" if isinstance(t, VoidType) else self.ctype(t)  # type: ignore[arg-type]

    def emit_function(self, func: ir.Function) -> None:
        self.begin_function(func)
        with self.indented(self.function_signature(func) + " {", loc=func.loc):
            self.declare_locals(func.locals)
            self.block(func.body)
        self.unmapped()

    @property
    def entry_name(self) -> str:
        """The name of the entry point `emit` gave the kernel."""
        return self.fnames[self.program.kernel.name]

    def emit_kernel(self, kernel: ir.Function) -> None:
        """A GPU-style kernel function; the cpu dialect overrides this."""
        self.begin_function(kernel)
        params = ", ".join(self.param_decls(kernel)) or "void"
        qual = f"{self.kernel_qualifier} " if self.kernel_qualifier else ""
        with self.indented(f"{qual}void {self.fnames[kernel.name]}({params}) {{", loc=kernel.loc):
            self.declare_locals(kernel.locals)
            self.block(kernel.body)
        self.unmapped()

    def declare_locals(self, locals_: dict[str, Type]) -> None:
        for name, t in locals_.items():
            if not (isinstance(t, ArrayType) and t.space is MemorySpace.CONSTANT):
                self.line(self.declaration(name, t))  # tables are at program scope

    def declaration(self, name: str, t: Type, cname: str | None = None) -> str:
        cname = cname or self.names[name]
        if isinstance(t, ArrayType):
            qual = self.space_qualifiers.get(t.space, "")
            assert isinstance(t.elem, ScalarType)
            return f"{qual + ' ' if qual else ''}{self.storage_type(t.elem)} {cname}[{t.size}];"
        assert isinstance(t, ScalarType)
        return f"{self.ctype(t)} {cname};"

    # ------------------------------------------------------------ types and names

    def ctype(self, t: ScalarType) -> str:
        return self.type_names[t]

    def storage_type(self, t: ScalarType) -> str:
        return self.storage_names.get(t, self.type_names[t])

    def var(self, name: str) -> str:
        """How a variable is referenced (the cpu dialect redirects per-thread values)."""
        return self.names[name]

    def use_helper(self, kind: str, t: ScalarType) -> str:
        """Name of helper `kind` for type `t`, adding its definition to the prologue."""
        name = f"kiln_{kind}_{t.name}"
        if name not in self._helpers_used:
            text = self.helpers[kind](t)
            unsigned = UNSIGNED_OF.get(t, t)
            for key, value in (("{Q}", self.helper_qualifier), ("{T}", self.ctype(t)),
                               ("{U}", self.ctype(unsigned)), ("{t}", t.name),
                               ("{F}", self.float_suffix(t))):
                text = text.replace(key, value)
            self._helpers_used[name] = text
        return name

    def float_suffix(self, t: Type) -> str:
        """The libm suffix for a type: `f` for f32 (and f16 computed in f32)."""
        return "f" if t in (f32, f16) else ""

    # ------------------------------------------------------------ statements

    def block(self, body: list[ir.Stmt]) -> None:
        for s in body:
            self.stmt(s)

    def generic_visit(self, node: ir.Expr | ir.Stmt) -> Any:
        raise UnsupportedError(f"{type(self).__name__} cannot emit {type(node).__name__}",
                               node.loc)

    def stmt(self, s: ir.Stmt) -> None:
        self.visit(s)

    def stmt_Assign(self, s: ir.Assign) -> None:
        self.line(f"{self.var(s.target)} = {self.expr(s.value).text};", s.loc)

    def stmt_Store(self, s: ir.Store) -> None:
        self.line(f"{self.element(s.array, s.indices)} = {self.expr(s.value).text};", s.loc)

    def stmt_ExprStmt(self, s: ir.ExprStmt) -> None:
        text = self.expr(s.expr).text
        if not isinstance(s.expr, (ir.Call, ir.IntrinsicCall)):  # a value kept for its calls
            text = f"(void)({text})"  # (debug=True's unread checked view bounds): no warning
        self.line(f"{text};", s.loc)

    def stmt_If(self, s: ir.If) -> None:
        with self.indented(f"if ({self.expr(s.cond).text}) {{", closer="", loc=s.loc):
            self.block(s.then)
        rest = s.orelse
        while len(rest) == 1 and isinstance(rest[0], ir.If):  # else if chains
            elif_ = rest[0]
            with self.indented(f"}} else if ({self.expr(elif_.cond).text}) {{", closer="",
                               loc=elif_.loc):
                self.block(elif_.then)
            rest = elif_.orelse
        if rest:
            with self.indented("} else {", closer=""):
                self.block(rest)
        self.line("}")

    def stmt_While(self, s: ir.While) -> None:
        with self.indented(f"while ({self.expr(s.cond).text}) {{", loc=s.loc):
            self.loop_body(s)

    def for_header(self, s: ir.For, var: str) -> str:
        """`for (...)` with Python's range semantics (the step's sign decides the test)."""
        start, stop = self.expr(s.start).text, self.expr(s.stop).wrap(BINARY_PREC["<"] + 1)
        step = s.step
        if isinstance(step, ir.Const):
            test = f"{var} < {stop}" if step.value > 0 else f"{var} > {stop}"
            inc = (f"{var}++" if step.value == 1 else f"{var}--" if step.value == -1
                   else f"{var} += {self.expr(step).text}")
        else:
            st = self.expr(step).text
            test = f"({st} > 0 ? {var} < {stop} : {st} < 0 && {var} > {stop})"
            inc = f"{var} += {st}"
        return f"for ({var} = {start}; {test}; {inc})"

    def stmt_For(self, s: ir.For) -> None:
        loc = s.loc
        if s.unroll is not None:  # the pragma goes right before the loop, no #line between
            self.line(self.unroll_pragma.format(n=s.unroll), loc)
            loc = None
        with self.indented(self.for_header(s, self.var(s.var)) + " {", loc=loc):
            self.loop_body(s)

    def loop_body(self, s: ir.While | ir.For) -> None:
        """A loop's body; a dialect may begin it with more (OpenCL's barrier loops)."""
        self.block(s.body)

    def stmt_Break(self, s: ir.Break) -> None:
        self.line("break;", s.loc)

    def stmt_Continue(self, s: ir.Continue) -> None:
        self.line("continue;", s.loc)

    def stmt_Native(self, s: ir.Native) -> None:
        """Hand-written code, `{name}` replaced by the variable's C name, line by line."""
        code = native_code(s, self.native_language, f"the {self.namespaces[0]} backend")
        assert isinstance(code, str)
        variables = dict(zip(s.names, s.vars))

        def name(match: re.Match[str]) -> str:
            var = variables.get(match.group(1))
            return match.group(0) if var is None else self.var(var.name)

        for i, text in enumerate(PLACEHOLDER.sub(name, code).strip("\n").split("\n")):
            self.line(text, s.loc if i == 0 else None)

    def stmt_VectorAccess(self, s: ir.VectorAccess) -> None:
        """A hint; dialects with vector types handle it (`kiln.codegen.vectors`)."""
        self.block(s.body)

    def stmt_Return(self, s: ir.Return) -> None:
        value = "" if s.value is None else " " + self.expr(s.value).text
        self.line(f"return{value};", s.loc)

    # ------------------------------------------------------------ expressions

    def expr(self, e: ir.Expr) -> CExpr:
        result: CExpr = self.visit(e)
        return result

    def literal(self, value: int | float | bool, t: ScalarType) -> CExpr:
        if t is bf16:
            bits = t.dtype.type(value).view(np.uint16)
            return CExpr(f"({self.ctype(t)}){hex(int(bits))}", UNARY)
        if t.is_bool:
            return CExpr("true" if value else "false")
        if t.is_float:
            v = float(value)
            f = "f" if t in (f32, f16) else ""
            text = repr(v) + f if math.isfinite(v) else non_finite(v, f)
            if t is f16:
                text = f"({self.ctype(t)}){text}"
                return CExpr(text, UNARY)
            return CExpr(text, UNARY if text.startswith("-") else PRIMARY)
        v = int(value)
        if t.bits < 32:
            return CExpr(f"({self.ctype(t)}){v}", UNARY)
        suffix = self.literal_suffixes.get(t, "")
        lo, _ = t.range()
        if v == lo and t.is_signed:
            return CExpr(f"(-{-v - 1}{suffix} - 1)", PRIMARY)
        return CExpr(f"{v}{suffix}", UNARY if v < 0 else PRIMARY)

    def expr_Const(self, e: ir.Const) -> CExpr:
        return self.literal(e.value, e.type)  # type: ignore[arg-type]

    def expr_Var(self, e: ir.Var) -> CExpr:
        return CExpr(self.var(e.name))

    def cast(self, text: CExpr, t: ScalarType) -> CExpr:
        return CExpr(f"({self.ctype(t)}){text.wrap(UNARY)}", UNARY)

    def expr_Cast(self, e: ir.Cast) -> CExpr:
        inner, src = self.expr(e.value), e.value.type
        if src == e.type:
            return inner
        if src is bf16:
            inner, src = CExpr(f"{self.use_helper('to_f32', bf16)}({inner.text})"), f32
            if e.type is f32:
                return inner
        if e.type is bf16:
            value = inner if src is f32 else self.cast(inner, f32)
            return CExpr(f"{self.use_helper('from_f32', bf16)}({value.text})")
        if e.type is bool_:
            return CExpr(f"{inner.wrap(BINARY_PREC['!='] + 1)} != 0", BINARY_PREC["!="])
        return self.cast(inner, e.type)  # type: ignore[arg-type]

    def binary(self, op: str, left: CExpr, right: CExpr) -> CExpr:
        """`left op right`, parenthesised by C precedence and, for readers, around operands
        of comparisons and bitwise operators that are not arithmetic or primary."""
        prec = BINARY_PREC[op]
        if op in BITWISE:
            lp = prec if left.prec == prec and op in ("&", "^", "|") else UNARY
            rp = UNARY
        elif prec <= BINARY_PREC["<"]:
            lp = rp = BINARY_PREC["+"]
        else:
            lp, rp = prec, prec + 1
        return CExpr(f"{left.wrap(lp)} {op} {right.wrap(rp)}", prec)

    def expr_BinOp(self, e: ir.BinOp) -> CExpr:
        t = e.type
        assert isinstance(t, ScalarType)
        if t is f16 and self.half_math_via_float and e.op in ("//", "%", "**"):
            inner = ir.BinOp(f32, e.op, ir.Cast(f32, e.left), ir.Cast(f32, e.right))
            return self.cast(self.expr(inner), f16)
        left, right = self.expr(e.left), self.expr(e.right)
        if t is f16 and e.op in ("+", "-", "*", "/"):
            # every f16 operation rounds to f16 (IEEE half arithmetic, as NumPy computes it),
            # also where the C compiler would keep the value in float (excess precision)
            return self.cast(self.binary(e.op, left, right), f16)
        if e.op in ("//", "%"):
            return self.floor_op(e.op, left, right, e.right, t)
        if e.op == "**":
            if t.is_float:
                return CExpr(f"pow{self.float_suffix(t)}({left.text}, {right.text})")
            return CExpr(f"{self.use_helper('ipow', t)}({left.text}, {right.text})")
        if e.op in WRAPPING and t in UNSIGNED_OF and not self.ranges.fits(e):
            return self.wrapping(e.op, left, right, t)
        return self.binary(e.op, left, right)

    def wrapping(self, op: str, left: CExpr, right: CExpr, t: ScalarType) -> CExpr:
        """A signed `+ - * <<` that wraps around: computed in the unsigned type of the same
        width (C may assume signed arithmetic never overflows) and converted back."""
        u = UNSIGNED_OF[t]

        def unsigned(side: CExpr) -> CExpr:
            return side.unsigned or self.cast(side, u)

        inner = self.binary(op, unsigned(left), right if op == "<<" else unsigned(right))
        return CExpr(self.cast(inner, t).text, UNARY, inner)

    def floor_op(self, op: str, left: CExpr, right: CExpr, divisor: ir.Expr,
                 t: ScalarType) -> CExpr:
        """Python's `//` and `%`: floor toward minus infinity, 0 for a zero divisor."""
        if t.is_float:
            if op == "//":
                return CExpr(f"floor{self.float_suffix(t)}({left.wrap(13)} / {right.wrap(14)})")
            return CExpr(f"{self.use_helper('floormod', t)}({left.text}, {right.text})")
        if isinstance(divisor, ir.Const) and int(divisor.value) > 0:
            d = int(divisor.value)
            if not t.is_signed:
                return self.binary("/" if op == "//" else "%", left, right)
            if d & (d - 1) == 0:  # a power of two: arithmetic shift and mask floor
                if op == "//":
                    return self.binary(">>", left, self.literal(d.bit_length() - 1, i32))
                return self.binary("&", left, self.literal(d - 1, t))
        kind = "floordiv" if op == "//" else "floormod"
        return CExpr(f"{self.use_helper(kind, t)}({left.text}, {right.text})")

    def expr_UnaryOp(self, e: ir.UnaryOp) -> CExpr:
        op = {"not": "!"}.get(e.op, e.op)
        inner = self.expr(e.operand)
        text = inner.wrap(UNARY)
        if op in "-+" and text.startswith(op):
            text = f"({text})"
        if e.type is f16:  # stays f16 where the dialect's half converts to float (CUDA)
            return self.cast(CExpr(f"{op}{text}", UNARY), f16)
        if op == "-" and e.type in UNSIGNED_OF and not self.ranges.fits(e):
            return self.wrapping("-", CExpr("0"), inner, e.type)  # type: ignore[arg-type]
        return CExpr(f"{op}{text}", UNARY)

    def expr_Compare(self, e: ir.Compare) -> CExpr:
        return self.binary(e.op, self.expr(e.left), self.expr(e.right))

    def expr_BoolOp(self, e: ir.BoolOp) -> CExpr:
        op = "&&" if e.op == "and" else "||"
        prec = BINARY_PREC[op]
        parts = [self.expr(v).wrap(prec + 1) for v in e.values]
        return CExpr(f" {op} ".join(parts), prec)

    def expr_Select(self, e: ir.Select) -> CExpr:
        c, a, b = self.expr(e.cond), self.expr(e.if_true), self.expr(e.if_false)
        return CExpr(f"{c.wrap(TERNARY + 1)} ? {a.wrap(TERNARY + 1)} : {b.wrap(TERNARY)}",
                     TERNARY)

    def linear_index(self, array: ir.Var, indices: list[ir.Expr]) -> str:
        """Row-major offset; 64-bit arithmetic for arrays whose size is not fixed."""
        t = array.type
        assert isinstance(t, ArrayType)
        idx = [self.expr(i) for i in indices]
        if len(idx) == 1:
            return idx[0].text
        if t.shape is not None:
            acc = idx[0]
            for axis in range(1, len(idx)):
                acc = self.binary("+", self.binary("*", acc, CExpr(str(t.shape[axis]))),
                                  idx[axis])
            return acc.text
        acc = self.cast(idx[0], i64)
        for axis in range(1, len(idx)):
            dim = CExpr(self.dims[(array.name, axis)])
            acc = self.binary("+", self.binary("*", acc, dim), idx[axis])
        return acc.text

    def element(self, array: ir.Var, indices: list[ir.Expr]) -> str:
        """The lvalue of one array element."""
        return f"{self.var(array.name)}[{self.linear_index(array, indices)}]"

    def expr_Load(self, e: ir.Load) -> CExpr:
        return CExpr(self.element(e.array, e.indices))

    def expr_ArrayDim(self, e: ir.ArrayDim) -> CExpr:
        t = e.array.type
        assert isinstance(t, ArrayType)
        if t.shape is not None:
            return CExpr(str(t.shape[e.axis]))
        return CExpr(self.dims[(e.array.name, e.axis)])

    def call_args(self, args: list[ir.Expr]) -> list[str]:
        """Arguments in the callee's ABI order (arrays: pointer, then dimensions)."""
        out = []
        for a in args:
            if isinstance(a.type, ArrayType):
                assert isinstance(a, ir.Var)
                out.append(self.var(a.name))
                out += [self.expr(ir.ArrayDim(i32, a, axis)).text for axis in range(a.type.ndim)]
            else:
                out.append(self.expr(a).text)
        return out

    def expr_Call(self, e: ir.Call) -> CExpr:
        return CExpr(f"{self.fnames[e.func]}({', '.join(self.call_args(e.args))})")

    def expr_IntrinsicCall(self, e: ir.IntrinsicCall) -> CExpr:
        spec = intrinsics[e.name]
        if spec.category == "atomic":
            array = e.args[0]
            assert isinstance(array, ir.Var) and isinstance(array.type, ArrayType)
            nidx = array.type.ndim
            address = f"&{self.element(array, e.args[1:1 + nidx])}"
            args = [address, *(self.expr(a).text for a in e.args[1 + nidx:])]
            return self._spelled(e, args, e.type)
        arg_types = [a.type for a in e.args]
        if self.half_math_via_float and spec.category == "math" and f16 in (e.type, *arg_types):
            args = [self.cast(self.expr(a), f32).text if a.type is f16 else self.expr(a).text
                    for a in e.args]
            result = self._spelled(e, args, f32)
            return self.cast(result, f16) if e.type is f16 else result
        return self._spelled(e, [self.expr(a).text for a in e.args],
                             arg_types[0] if arg_types else e.type)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        check_spellings(cls)

    @classmethod
    def implementation(cls, name: str) -> Spelling:
        """The spelling of intrinsic `name`, None without one: the class spellings merged
        along the MRO, and along `namespaces` what extensions registered
        (`kiln.ir.intrinsics.implementation_of` gives the order)."""
        return implementation_of(cls, name, "namespaces")

    def spell_intrinsic(self, name: str, args: list[str], t: Type,
                        call: ir.IntrinsicCall | None = None) -> CExpr:
        impl = self.implementation(name)
        if impl is None:
            raise UnsupportedError(f"intrinsic {name} has no implementation for "
                                   f"{type(self).__name__} (namespaces {self.namespaces})",
                                   call.loc if call else None)
        if callable(impl):
            text = impl(self, call, args)
        else:
            ctype = self.ctype(t) if isinstance(t, ScalarType) else "void"
            text = impl.format(*args, T=ctype, f=self.float_suffix(t))
        return CExpr(text) if _is_call_text(text) else CExpr(f"({text})")

    def _spelled(self, e: ir.IntrinsicCall, args: list[str], t: Type) -> CExpr:
        return self.spell_intrinsic(e.name, args, t, e)


class _Reset(str):
    """Marker line: a `#line` back to kiln's generated file, numbered at the end."""


_RESET = _Reset("")


def _escape(path: str) -> str:
    return path.replace("\\", "\\\\").replace('"', '\\"')
