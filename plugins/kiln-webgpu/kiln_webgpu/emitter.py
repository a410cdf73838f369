"""WGSL from kiln's lowered IR: a dialect of kiln's shared C-family emitter.

WGSL's statements are C's (`if`, `while`, `for`, `break`, `continue`, `return`,
assignments), so the shared walker emits them; what differs is data and a few hooks:

- declarations are `var x: f32;`, casts `f32(x)`, the conditional `select(f, t, c)`;
  literals carry WGSL suffixes (`1i`, `2u`, `0.5f`, `1.5h`), NaN and infinities are bitcasts;
- kernel parameters are module-scope bindings: arrays are storage buffers (binding 1...),
  scalars and array dimensions live in one uniform block `kiln_p` (binding 0, `layout.py`);
- shared arrays are module-scope `var<workgroup>`; the block shape is three pipeline
  overrides, so one module serves every block shape;
- the grid is folded into at most 65,535 workgroups per dimension: the kernel computes its
  block index from the linear workgroup number and returns past the last block;
- arrays that atomics touch are `array<atomic<i32|u32>>` (f32: its bits as `atomic<u32>`);
  their plain loads and stores become `atomicLoad`/`atomicStore`;
- device functions are inlined by the shared pipeline (WGSL cannot pass a storage pointer
  to a function, nor recurse), so the module has one function besides helpers.
"""

from __future__ import annotations

from typing import Any, ClassVar

from kiln import ArrayType, ScalarType, bool_, f16, f32, i32, u32
from kiln.backend import MemorySpace
from kiln.codegen import CEmitter, CExpr, NameTable
from kiln.ir import nodes as ir
from kiln.ir.types import Type, VoidType

from .atomics import ATOMIC_SPELLINGS, AtomicArrays, atomic_arrays
from .layout import WGSL_WORDS, ParamLayout
from .specialise import GLOBAL_PREFIX, global_name
from .spellings import HELPER_DEPENDENCIES, HELPERS, NAMESPACE, SPELLINGS, WGSL_HELPERS

PRIMARY, UNARY = 16, 15


FLOAT_BITS = {f32: ("u32", "0x7fc00000u", "0x7f800000u", "0xff800000u"),
              f16: ("u16", "0x7e00u", "0x7c00u", "0xfc00u")}
INDEX_VECTORS = ("thread_idx", "block_idx", "block_dim", "grid_dim")


def module_arrays(kernel: ir.Function) -> list[str]:
    """The kernel's arrays that live at module scope: parameters and shared arrays."""
    return [p.name for p in kernel.params if isinstance(p.type, ArrayType)] + [
        name for name, t in kernel.locals.items()
        if isinstance(t, ArrayType) and t.space is MemorySpace.SHARED]


class _WrapsAlready:
    """The shared emitter writes signed `+ - * <<` that may overflow in the unsigned type
    (C may assume they never do); WGSL's integer arithmetic wraps by definition, so every
    operation already "fits" and is written as it is."""

    def fits(self, expr: ir.Expr) -> bool:
        return True


WRAPS_ALREADY = _WrapsAlready()


class WGSLEmitter(AtomicArrays, CEmitter):
    """IR -> one WGSL module with one compute entry point."""

    spellings = {**SPELLINGS, **ATOMIC_SPELLINGS}
    namespaces = (NAMESPACE,)
    native_language = "wgsl"
    unroll_pragma = "// unroll {n}"
    type_names: ClassVar[dict[ScalarType, str]] = {
        bool_: "bool", i32: "i32", u32: "u32", f32: "f32", f16: "f16",
    }
    literal_suffixes: ClassVar[dict[ScalarType, str]] = {i32: "i", u32: "u"}
    reserved = CEmitter.reserved | WGSL_WORDS
    helpers: ClassVar[dict[str, Any]] = WGSL_HELPERS
    helper_qualifier = ""

    def __init__(self, exact: bool = True) -> None:
        """`exact`: `*` and `/` of f32 and f16 rounded as written (the kernel allows neither
        contraction nor fast math); see `exact_op`."""
        self.exact = exact

    def emit(self, program: ir.Program) -> str:
        self.program = program
        self.layout = ParamLayout.of(program)
        self._out: list[str] = []
        self._depth = 0
        self._pos: tuple[str, int] | None = None
        self._helpers_used: dict[str, str] = {}
        self._index_uses = {}
        self._atomic_helpers: dict[str, str] = {}
        self.atomic_arrays = atomic_arrays(program)
        kernel = program.kernel
        self.module_names = NameTable(self.reserved)
        self.globals = {name: self.module_names.add(name)
                        for name in [*module_arrays(kernel), *program.tables]}
        self.fnames = self.module_names
        for f in program.functions:
            self.module_names.add(f.name)
        self.entry = self.module_names.add(kernel.name)
        self.dims = {}
        for p in kernel.params:
            if isinstance(p.type, ArrayType):
                for axis in range(p.type.ndim):
                    field = f"kiln_p.{self.layout.field(p.name, axis)}"
                    self.dims[(p.name, axis)] = self.dims[(global_name(p.name), axis)] = field
        for f in program.functions:
            self.emit_function(f)
            self.line("")
        self.emit_kernel(kernel)
        body = self._out
        self._out = []
        self.emit_module_scope(program, body)
        return "\n".join([*self._out, *body]) + "\n"

    def begin_function(self, func: ir.Function) -> None:
        """Names of one function, which module-scope names are reserved against."""
        self.func = func
        self.pointers = {p.name for p in func.params if _by_pointer(p.type)}
        self.ranges = WRAPS_ALREADY
        self.names = NameTable(self.reserved | self.module_names.taken)
        for p in func.params:
            self.names.add(p.name)
        for name in func.locals:
            self.names.add(name)

    def index_vector(self, kind: str) -> str:
        """`thread_idx`, ... as the kernel's `let` (uniform where WGSL can see it) or, in
        a device function, the module-scope copy the kernel sets."""
        return f"kiln_{kind}" if self.func.is_kernel else f"kiln_{kind}_f"

    def var(self, name: str) -> str:
        if name.startswith(GLOBAL_PREFIX):
            return self.globals[name[len(GLOBAL_PREFIX):]]
        if name in self.program.tables or (self.func.is_kernel and name in self.globals):
            return self.globals[name]
        return f"(*{self.names[name]})" if name in self.pointers else self.names[name]

    def emit_function(self, func: ir.Function) -> None:
        """`fn f(n_in: i32) -> f32`: parameters are copied into variables, since Python
        may assign them and WGSL's parameters are values."""
        self.begin_function(func)
        params, pointers = [], []
        for p in func.params:
            if _by_pointer(p.type):  # a caller's local array
                assert isinstance(p.type, ArrayType)
                element = self.element_type(p.name, p.type.scalar_elem)
                pointers.append(f"{self.names[p.name]}: ptr<function, array<{element}, "
                                f"{p.type.size}>>")
            elif not isinstance(p.type, ArrayType):  # else a module-scope array
                params.append((p, self.names.fresh(f"{self.names[p.name]}_in")))
        signature = ", ".join([*pointers, *(f"{inner}: {self.ctype(p.type)}"  # type: ignore[arg-type]
                                            for p, inner in params)])
        result = ("" if not isinstance(func.return_type, ScalarType)
                  else f" -> {self.ctype(func.return_type)}")
        with self.indented(f"fn {self.fnames[func.name]}({signature}){result} {{",
                           loc=func.loc):
            for p, inner in params:
                self.line(f"var {self.names[p.name]}: {self.ctype(p.type)} = {inner};"  # type: ignore[arg-type]
                          )
            self.declare_locals(func.locals)
            self.block(func.body)
            if isinstance(func.return_type, ScalarType) and not (
                    func.body and isinstance(func.body[-1], ir.Return)):
                # WGSL wants a return at the end of a function with a result, even where
                # every path has returned before (kiln's checks guarantee that)
                self.line(f"return {self.literal(0, func.return_type).text};")

    def expr_Call(self, e: ir.Call) -> CExpr:
        """Local arrays by pointer (first, as declared), then the scalars."""
        callee = self.program.function(e.func)
        pairs = list(zip(e.args, callee.params))
        pointers = [self.pointer_to(a) for a, p in pairs if _by_pointer(p.type)]
        values = [self.converted(a, p.type) for a, p in pairs
                  if not isinstance(p.type, ArrayType)]
        return CExpr(f"{self.fnames[e.func]}({', '.join([*pointers, *values])})")

    def pointer_to(self, array: ir.Expr) -> str:
        """A local array of this function (`&a`), or one it was given (already a pointer)."""
        assert isinstance(array, ir.Var)
        name = self.names[array.name]
        return name if array.name in self.pointers else f"&{name}"

    def stmt_Return(self, s: ir.Return) -> None:
        value = "" if s.value is None else " " + self.converted(s.value, self.func.return_type)
        self.line(f"return{value};", s.loc)

    # ------------------------------------------------------------ module scope

    def emit_module_scope(self, program: ir.Program, body: list[str]) -> None:
        kernel = program.kernel
        if "f16" in "\n".join(body) or f16 in self.layout.scalar_types:
            self._out.append("enable f16;")
        self._out += [f"override kiln_block_{a}: u32 = 1u;" for a in "xyz"]
        if program.functions:  # index vectors for device functions, set by the kernel
            self._out += [f"var<private> kiln_{v}_f: vec3<i32>;" for v in INDEX_VECTORS]
        self._out.append("")
        self._out.append("struct KilnParams {")
        self._out += [f"    {name}: {wgsl}," for name, wgsl in self.layout.uniform_fields()]
        self._out += ["}", "@group(0) @binding(0) var<uniform> kiln_p: KilnParams;"]
        for binding, p in self.layout.bindings():
            elem = self.element_type(p.name, p.type.elem)  # type: ignore[union-attr]
            self._out.append(f"@group(0) @binding({binding}) "
                             f"var<storage, read_write> {self.globals[p.name]}: array<{elem}>;")
        for name, t in kernel.locals.items():
            if isinstance(t, ArrayType) and t.space is MemorySpace.SHARED:
                elem = self.element_type(name, t.elem)
                self._out.append(f"var<workgroup> {self.globals[name]}: array<{elem}, {t.size}>;")
        for name, data in program.tables.items():
            self._out.append(self.table_declaration(name, data))
        self._out.append("")
        generated = [*self._helpers_used.values(), *self._atomic_helpers.values()]
        for name in _helpers_needed("\n".join([*body, *generated])):
            self._out += [HELPERS[name], ""]
        for text in generated:
            self._out += [text, ""]

    def table_declaration(self, name: str, data: Any) -> str:
        """A constant table as a module-scope private array with its values (WGSL indexes
        a `const` array only with constant indices)."""
        elem = next(t.elem for f in [self.program.kernel, *self.program.functions]
                    for n, t in f.locals.items() if n == name and isinstance(t, ArrayType))
        values = ", ".join(self.literal(v.item(), elem).text for v in data.reshape(-1))
        t = f"array<{self.ctype(elem)}, {data.size}>"
        return f"var<private> {self.globals[name]}: {t} = {t}({values});"

    # ------------------------------------------------------------ the kernel

    def emit_kernel(self, kernel: ir.Function) -> None:
        self.begin_function(kernel)
        builtins = ("@builtin(local_invocation_id) kiln_lid: vec3<u32>, "
                    "@builtin(workgroup_id) kiln_wid: vec3<u32>, "
                    "@builtin(num_workgroups) kiln_nwg: vec3<u32>")
        self._out.append("@compute @workgroup_size(kiln_block_x, kiln_block_y, kiln_block_z)")
        with self.indented(f"fn {self.entry}({builtins}) {{"):
            self.line("let kiln_block = kiln_wid.x + kiln_nwg.x * (kiln_wid.y + kiln_nwg.y "
                      "* kiln_wid.z);")
            self.line("if (kiln_block >= kiln_p.kiln_blocks) { return; }")
            self.line("let kiln_grid_dim = vec3<i32>(kiln_p.kiln_grid_x, kiln_p.kiln_grid_y, "
                      "kiln_p.kiln_grid_z);")
            self.line("let kiln_gx = u32(kiln_grid_dim.x);")
            self.line("let kiln_gxy = kiln_gx * u32(kiln_grid_dim.y);")
            self.line("let kiln_block_idx = vec3<i32>(i32(kiln_block % kiln_gx), "
                      "i32((kiln_block % kiln_gxy) / kiln_gx), i32(kiln_block / kiln_gxy));")
            self.line("let kiln_block_dim = vec3<i32>(kiln_p.kiln_block_dim_x, "
                      "kiln_p.kiln_block_dim_y, kiln_p.kiln_block_dim_z);")
            self.line("let kiln_thread_idx = vec3<i32>(kiln_lid);")
            if self.program.functions:
                for v in INDEX_VECTORS:  # the module-scope copies device functions read
                    self.line(f"kiln_{v}_f = kiln_{v};")
            for p in kernel.params:
                if isinstance(p.type, ScalarType):
                    field = f"kiln_p.{self.layout.field(p.name)}"
                    self.line(f"var {self.names[p.name]}: {self.ctype(p.type)} = "
                              f"{self.from_uniform(field, p.type)};")
            self.declare_locals(kernel.locals)
            self.block(kernel.body)
        self._body_text = list(self._out)

    @staticmethod
    def from_uniform(field: str, t: ScalarType) -> str:
        """A scalar parameter from its 4-byte uniform field (bool as u32, f16 as f32)."""
        if t is bool_:
            return f"{field} != 0u"
        if t is f16:
            return f"f16({field})"
        return field

    def declare_locals(self, locals_: dict[str, Type]) -> None:
        for name, t in locals_.items():
            if isinstance(t, ArrayType) and t.space in (MemorySpace.SHARED,
                                                        MemorySpace.CONSTANT):
                continue  # module scope
            self.line(self.declaration(name, t))

    def declaration(self, name: str, t: Type, cname: str | None = None) -> str:
        cname = cname or self.names[name]
        if isinstance(t, ArrayType):
            return f"var {cname}: array<{self.element_type(name, t.elem)}, {t.size}>;"
        return f"var {cname}: {self.ctype(t)};"  # type: ignore[arg-type]

    # ------------------------------------------------------------ output without #line

    def line(self, text: str, loc: ir.Loc | None = None) -> None:
        """WGSL has no `#line`: a comment `// at FILE:LINE` marks where the user's line
        changes, and compile errors are mapped through it (`backend.compile_error`)."""
        indent = self.indent_unit * self._depth
        if loc is not None and self._pos != (loc.file, loc.line):
            self._out.append(f"{indent}// at {loc.file}:{loc.line}")
            self._pos = (loc.file, loc.line)
        self._out.append(indent + text if text else "")

    def unmapped(self) -> None:
        pass

    def float_suffix(self, t: Type) -> str:
        return ""

    # ------------------------------------------------------------ statements

    def stmt_ExprStmt(self, s: ir.ExprStmt) -> None:
        """WGSL allows only calls as statements; a value is discarded with `_ =`."""
        text = self.expr(s.expr).text
        self.line(f"{text};" if isinstance(s.expr.type, VoidType) else f"_ = {text};", s.loc)

    def converted(self, e: ir.Expr, t: Type) -> str:
        """`e` as type `t`: WGSL converts nothing implicitly (C converts on assignment)."""
        if e.type == t or not isinstance(t, ScalarType):
            return self.expr(e).text
        return self.expr_Cast(ir.Cast(t, e)).text

    def stmt_Assign(self, s: ir.Assign) -> None:
        t = self.func.locals.get(s.target) or self.param_type(s.target)
        self.line(f"{self.var(s.target)} = {self.converted(s.value, t)};", s.loc)

    def param_type(self, name: str) -> Type:
        return next(p.type for p in self.func.params if p.name == name)

    def for_header(self, s: ir.For, var: str) -> str:
        if isinstance(s.step, ir.Const):
            return super().for_header(s, var)
        start, stop = self.expr(s.start).text, self.expr(s.stop).wrap(13)
        st = self.expr(s.step).wrap(13)
        test = f"({st} > 0 && {var} < {stop}) || ({st} < 0 && {var} > {stop})"
        return f"for ({var} = {start}; {test}; {var} += {st})"

    # ------------------------------------------------------------ expressions

    def literal(self, value: int | float | bool, t: ScalarType) -> CExpr:
        if t.is_bool:
            return CExpr("true" if value else "false")
        if t.is_float:
            v = float(value)
            bits, nan, inf, ninf = FLOAT_BITS[t]
            if v != v or v in (float("inf"), float("-inf")):
                pattern = nan if v != v else inf if v > 0 else ninf
                if t is f16:
                    return CExpr(f"bitcast<vec2<f16>>({pattern} | 0u).x")
                return CExpr(f"bitcast<f32>({pattern})")
            text = repr(v) + ("h" if t is f16 else "f")
            return CExpr(text, UNARY if text.startswith("-") else PRIMARY)
        v = int(value)
        suffix = self.literal_suffixes[t]
        if t is i32 and v == -(2**31):
            return CExpr("(-2147483647i - 1i)")
        return CExpr(f"{v}{suffix}", UNARY if v < 0 else PRIMARY)

    def cast(self, text: CExpr, t: ScalarType) -> CExpr:
        return CExpr(f"{self.ctype(t)}({text.text})")

    def expr_Cast(self, e: ir.Cast) -> CExpr:
        inner, src = self.expr(e.value), e.value.type
        if src == e.type:
            return inner
        if e.type is bool_:
            zero = self.literal(0, src)  # type: ignore[arg-type]
            return CExpr(f"{inner.wrap(UNARY)} != {zero.text}", 9)
        return self.cast(inner, e.type)  # type: ignore[arg-type]

    def expr_Select(self, e: ir.Select) -> CExpr:
        c, a, b = self.expr(e.cond), self.expr(e.if_true), self.expr(e.if_false)
        return CExpr(f"select({b.text}, {a.text}, {c.text})")

    def expr_BoolOp(self, e: ir.BoolOp) -> CExpr:
        """WGSL does not mix `&&` and `||` without parentheses."""
        op = "&&" if e.op == "and" else "||"
        return CExpr(f" {op} ".join(self.expr(v).wrap(PRIMARY) for v in e.values), 4)

    def expr_BinOp(self, e: ir.BinOp) -> CExpr:
        if e.op in ("<<", ">>"):
            left, right = self.expr(e.left), self.expr(e.right)
            amount = right if e.right.type is u32 else CExpr(f"u32({right.text})")
            return self.binary(e.op, left, amount)
        if e.op == "**" and e.type is f32:
            left, right = self.expr(e.left), self.expr(e.right)
            return CExpr(f"kiln_pow({left.text}, {right.text})")
        if self.exact and e.op in ("*", "/") and e.type in (f32, f16):
            return self.exact_op(e.op, self.expr(e.left), self.expr(e.right), e.type)
        if e.op in ("&", "|", "^") and e.type is bool_:
            # WGSL's non-short-circuit logical operators on bool are `&`, `|`; `^` is `!=`
            left, right = self.expr(e.left), self.expr(e.right)
            if e.op == "^":
                return CExpr(f"{left.wrap(PRIMARY)} != {right.wrap(PRIMARY)}", 9)
        return super().expr_BinOp(e)

    def exact_op(self, op: str, left: CExpr, right: CExpr, t: ScalarType) -> CExpr:
        """`left op right` rounded once, as IEEE 754 says. WGSL lets a driver fuse a product
        into the sum it feeds and divide within 2.5 ulp, and NVIDIA's Vulkan driver does
        both: a product goes through `kiln_rounded` (an OR with a uniform zero, which no
        compiler can see through), a quotient through `kiln_div` (one correction step from
        the remainder `fma(-q, b, a)`). An f16 operation is computed in f32 (exact for a
        product, correctly rounded for a quotient) and rounded to f16."""
        if t is f16:
            left, right = CExpr(f"f32({left.text})"), CExpr(f"f32({right.text})")
        if op == "*":
            text = f"kiln_rounded({left.wrap(13)} * {right.wrap(14)})"
        else:
            text = f"kiln_div({left.text}, {right.text})"
        return CExpr(f"f16({text})" if t is f16 else text)

    def floor_op(self, op: str, left: CExpr, right: CExpr, divisor: ir.Expr,
                 t: ScalarType) -> CExpr:
        """As C's, with WGSL's u32 shift amount for a division by a power of two, and an
        f32 `//` from a correctly rounded quotient (`exact_op`)."""
        if op == "//" and t is f32:
            return CExpr(f"floor(kiln_div({left.text}, {right.text}))")
        if (op == "//" and t.is_signed and isinstance(divisor, ir.Const)
                and int(divisor.value) > 0 and int(divisor.value) & (int(divisor.value) - 1) == 0):
            return self.binary(">>", left, CExpr(f"{int(divisor.value).bit_length() - 1}u"))
        return super().floor_op(op, left, right, divisor, t)

    def binary(self, op: str, left: CExpr, right: CExpr) -> CExpr:
        """As C, but an operand of a bitwise operator, a shift or a comparison that is not
        itself primary is parenthesised (WGSL requires it)."""
        if op in ("<<", ">>", "&", "|", "^", "<", "<=", ">", ">=", "==", "!="):
            return CExpr(f"{left.wrap(UNARY)} {op} {right.wrap(UNARY)}", 9 if op in (
                "<", "<=", ">", ">=", "==", "!=") else 11)
        return super().binary(op, left, right)

    def expr_UnaryOp(self, e: ir.UnaryOp) -> CExpr:
        if e.op == "-" and e.type is u32:
            return CExpr(f"(0u - {self.expr(e.operand).wrap(UNARY)})")
        if e.op == "+":
            return self.expr(e.operand)
        return super().expr_UnaryOp(e)

    def linear_index(self, array: ir.Var, indices: list[ir.Expr]) -> str:
        """Row-major offset in i32 (WebGPU buffers hold fewer than 2**31 elements)."""
        t = array.type
        assert isinstance(t, ArrayType)
        acc = self.expr(indices[0])
        for axis in range(1, len(indices)):
            dim = (CExpr(f"{t.shape[axis]}i") if t.shape is not None
                   else CExpr(self.dims[(array.name, axis)]))
            acc = super().binary("+", super().binary("*", acc, dim), self.expr(indices[axis]))
        return acc.text

    def expr_ArrayDim(self, e: ir.ArrayDim) -> CExpr:
        t = e.array.type
        assert isinstance(t, ArrayType)
        if t.shape is not None:
            return CExpr(f"{t.shape[e.axis]}i")
        return CExpr(self.dims[(e.array.name, e.axis)])


def _by_pointer(t: Type) -> bool:
    """A parameter that receives a caller's local array (`ptr<function, ...>`)."""
    return isinstance(t, ArrayType) and t.space is MemorySpace.LOCAL


def _helpers_needed(text: str) -> list[str]:
    needed = [name for name in HELPERS if f"{name}(" in text]
    for name in list(needed):
        needed += [d for d in HELPER_DEPENDENCIES.get(name, ()) if d not in needed]
    return [name for name in HELPERS if name in needed]
