"""The frontend: a Python function's AST -> typed IR, for one argument-type signature.

Locals are typed by inference: the body is built repeatedly, widening each unannotated
local to the unified type of everything assigned to it, until the types stop changing
(types only widen, so this ends). Annotated locals and parameters keep their types, and an
incompatible assignment to them is an error. Every error points at the user's source.
"""

from __future__ import annotations

import ast
import math
import operator
import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import (
    ArityError,
    ConstantError,
    KernelError,
    KernelTypeError,
    UnknownNameError,
    UnsupportedError,
)
from ..ir import nodes as ir
from ..ir.enums import MemorySpace
from ..ir.intrinsics import IntrinsicTypeError, intrinsics, typing_of
from ..ir.passes.fold import fold_expression
from ..ir.types import (
    COMPONENTS,
    SCALAR_BY_DTYPE,
    ArrayType,
    ConstexprType,
    ScalarType,
    StructType,
    Type,
    VariantType,
    VectorType,
    bool_,
    can_convert_implicitly,
    f32,
    fits,
    i32,
    i64,
    is_aggregate,
    literal_type,
    void,
    wrap_int,
)
from . import builtins as kb
from .aggregates import AggregateBuilder, is_value_type
from .functions import Compilable, DeviceFunction
from .native import build_native
from .printing import build_print
from .records import Variant, kiln_type_of
from .resolve import StaticResolver, annotation_type
from .source import ParsedFunction, parse_function
from .tables import table_expr
from .typing_rules import can_store, comparison_type, operand_type, unify
from .views import View, ViewBuilder, ViewParam, view_params

BINOPS = {
    ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//",
    ast.Mod: "%", ast.Pow: "**", ast.LShift: "<<", ast.RShift: ">>", ast.BitAnd: "&",
    ast.BitOr: "|", ast.BitXor: "^",
}
CMPOPS = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}
MAX_NESTED_SPECIALIZATIONS = 64
UNSUPPORTED_STATEMENTS = {
    ast.Try: "`try` statements", ast.With: "`with` statements", ast.Raise: "`raise`",
    ast.FunctionDef: "nested functions (closures)", ast.ClassDef: "class definitions",
    ast.AsyncFunctionDef: "async functions", ast.Import: "imports", ast.ImportFrom: "imports",
    ast.Global: "`global`", ast.Nonlocal: "`nonlocal`", ast.Delete: "`del`",
    ast.Assert: "`assert`", ast.AsyncFor: "`async for`",
    ast.AsyncWith: "`async with`",
}
UNSUPPORTED_EXPRESSIONS = {
    ast.List: "lists", ast.Dict: "dicts", ast.Set: "sets", ast.ListComp: "list comprehensions",
    ast.DictComp: "dict comprehensions", ast.SetComp: "set comprehensions",
    ast.GeneratorExp: "generators", ast.Lambda: "lambdas (closures)", ast.Yield: "generators",
    ast.YieldFrom: "generators", ast.Await: "`await`", ast.JoinedStr: "strings",
    ast.Starred: "starred arguments", ast.NamedExpr: "`:=`", ast.Slice: "slices",
}


_LITERAL_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
    "//": operator.floordiv, "%": operator.mod, "**": operator.pow, "<<": operator.lshift,
    ">>": operator.rshift, "&": operator.and_, "|": operator.or_, "^": operator.xor,
}
"""Python's arithmetic on two literals (folded before typing, as Python would)."""


class _Retry(Exception):
    """A local's type widened: build the body again."""


class ProgramContext:
    """Collects the device functions one kernel calls, specialised by argument types."""

    def __init__(self) -> None:
        self.functions: dict[tuple[Any, tuple[Type, ...]], ir.Function] = {}
        self.order: list[ir.Function] = []
        self.building: dict[tuple[Any, tuple[Type, ...]], FunctionBuilder] = {}
        self.names: set[str] = set()
        self.tables: dict[str, np.ndarray] = {}  # module-level arrays read (kiln.lang.tables)

    def unique_name(self, base: str, types: tuple[Type, ...]) -> str:
        name = base
        if name in self.names:
            name = base + "_" + "_".join(_type_tag(t) for t in types)
        n = 1
        while name in self.names:
            name, n = f"{base}_{n}", n + 1
        self.names.add(name)
        return name


def _type_tag(t: Type) -> str:
    if isinstance(t, ArrayType):
        return f"{t.elem.name}a{t.ndim}"
    return re.sub(r"\W+", "_", repr(t)).strip("_")  # constexpr(2) -> constexpr_2


def build_program(pyfunc: Callable[..., Any], arg_types: tuple[Type, ...],
                  kernel: bool = True) -> ir.Program:
    """Typed IR for `pyfunc` specialised to `arg_types`, with the functions it calls."""
    ctx = ProgramContext()
    main = FunctionBuilder(pyfunc, arg_types, ctx, is_kernel=kernel).build()
    return ir.Program(main, list(ctx.order), tables=ctx.tables)


class FunctionBuilder(AggregateBuilder, ViewBuilder):
    """Builds one function's IR; see the module docstring for the type inference loop."""

    def __init__(self, pyfunc: Callable[..., Any], arg_types: Sequence[Type],
                 ctx: ProgramContext, is_kernel: bool, name: str | None = None) -> None:
        self.pyfunc = pyfunc
        self.parsed: ParsedFunction = parse_function(pyfunc)
        self.resolver = StaticResolver(pyfunc)
        self.ctx = ctx
        self.is_kernel = is_kernel
        self.name = name or pyfunc.__name__
        self.constants: dict[str, Any] = {}  # constexpr parameters and static loop variables
        self.params: list[ir.Param] = []
        self.param_views: dict[str, View] = {}  # parameters that receive views
        for a, t in zip(self.parsed.tree.args.args, arg_types):
            if isinstance(t, ConstexprType):
                self.constants[a.arg] = t.value
            elif isinstance(t, ViewParam):
                params, self.param_views[a.arg] = view_params(a.arg, t, self.loc(a))
                self.params += params
            else:
                self.params.append(ir.Param(a.arg, t))
        self.param_names = {p.name: p.type for p in self.params}
        self.local_types: dict[str, Type] = {}
        self.fixed: set[str] = set()  # annotated locals: their type never widens
        self.return_type: Type | None = None if not is_kernel else void
        returns = self.parsed.tree.returns
        self.return_fixed = returns is not None and not is_kernel
        if self.return_fixed:
            self.return_type = annotation_type(self.resolver, returns, self.loc(returns))
            if isinstance(self.return_type, ArrayType):
                raise UnsupportedError("device functions return scalars, records or vectors, "
                                       "not arrays: write into an array argument instead",
                                       self.loc(returns))
        self.user_names = {n.id for n in ast.walk(self.parsed.tree) if isinstance(n, ast.Name)}

    # ------------------------------------------------------------ driver

    def build(self) -> ir.Function:
        tree = self.parsed.tree
        for _ in range(64):
            self.defined: set[str] = set(self.param_names)
            self.views: dict[str, View] = dict(self.param_views)
            self.loop_depth = 0
            self.temp_counter = 0
            self.has_tail_call = False
            try:
                body = self.block(_strip_docstring(tree.body))
            except _Retry:
                continue
            break
        else:  # pragma: no cover - types only widen
            raise KernelError("type inference did not converge", self.loc(tree))
        return_type = self.return_type if self.return_type is not None else void
        if self.has_tail_call:
            body = [ir.While(ir.Const(bool_, True, loc=self.loc(tree)), body,
                             loc=self.loc(tree))]
        if not self.is_kernel and return_type != void and not _always_returns(body):
            raise KernelTypeError(
                f"{self.name} returns {return_type} on some paths but can reach its end "
                "without returning a value", self.loc(tree.body[-1]))
        return ir.Function(self.name, self.params, return_type, body, dict(self.local_types),
                           is_kernel=self.is_kernel, loc=self.loc(tree))

    def loc(self, node: ast.AST) -> ir.Loc:
        return self.parsed.loc(node)

    def temp(self, t: Type) -> str:
        while True:
            name = f"_k{self.temp_counter}"
            self.temp_counter += 1
            if name not in self.user_names and name not in self.param_names:
                break
        self.local_types[name] = t
        return name

    # ------------------------------------------------------------ statements

    def block(self, stmts: list[ast.stmt]) -> list[ir.Stmt]:
        out: list[ir.Stmt] = []
        for s in stmts:
            out.extend(self.stmt(s))
            if out and isinstance(out[-1], (ir.Return, ir.Break, ir.Continue)):
                break  # what follows is unreachable (also after an `if` on constants)
        return out

    def stmt(self, node: ast.stmt) -> list[ir.Stmt]:
        for kind, what in UNSUPPORTED_STATEMENTS.items():
            if isinstance(node, kind):
                raise UnsupportedError(f"kernels do not support {what}", self.loc(node))
        method = getattr(self, f"stmt_{type(node).__name__}", None)
        if method is None:
            raise UnsupportedError(f"{type(node).__name__} statements are not supported in "
                                   "kernels", self.loc(node))
        return method(node)

    def stmt_Pass(self, node: ast.Pass) -> list[ir.Stmt]:
        return []

    def stmt_Expr(self, node: ast.Expr) -> list[ir.Stmt]:
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return []  # a string used as a comment
        if isinstance(node.value, ast.Call):
            func = node.value.func
            called = None if self.is_local(func) or not isinstance(
                func, (ast.Name, ast.Attribute)) else self.resolver.try_resolve(func)
            if called is kb.native:
                return [build_native(self, node.value)]
            if called is print:
                return build_print(self, node.value)
            if called is kb.store:
                return [self.wide_store(node.value)]
            expr = self.call(node.value, statement=True)
            return [ir.ExprStmt(expr, loc=self.loc(node))] if expr is not None else []
        self.expr(node.value)  # checked, then dropped: it has no effect
        return []

    def stmt_Assign(self, node: ast.Assign) -> list[ir.Stmt]:
        out: list[ir.Stmt] = []
        for target in node.targets:
            out.extend(self.assign(target, node.value, node))
        return out

    def stmt_AnnAssign(self, node: ast.AnnAssign) -> list[ir.Stmt]:
        if not isinstance(node.target, ast.Name):
            raise UnsupportedError("only simple names can be annotated", self.loc(node.target))
        name = node.target.id
        t = annotation_type(self.resolver, node.annotation, self.loc(node.annotation))
        if not is_value_type(t):
            raise UnsupportedError("annotated locals must be scalars, vectors, records or "
                                   "variants; make arrays with kiln.shared or kiln.local",
                                   self.loc(node.annotation))
        if name in self.param_names:
            raise KernelTypeError(f"'{name}' is a parameter and cannot be re-declared",
                                  self.loc(node.target))
        if name in self.fixed and self.local_types[name] != t:
            raise KernelTypeError(f"'{name}' was declared {self.local_types[name]}, cannot "
                                  f"re-declare it as {t}", self.loc(node.target))
        self.local_types[name] = t
        self.fixed.add(name)
        if node.value is None:
            self.defined.add(name)
            return []
        return self.assign(node.target, node.value, node)

    def assign(self, target: ast.expr, value_node: ast.expr, stmt: ast.stmt) -> list[ir.Stmt]:
        if isinstance(target, ast.Tuple):
            return self.assign_tuple(target, value_node, stmt)
        if isinstance(target, ast.Subscript):
            component = self.vector_component(target)
            if component is not None:  # v[1] = e is v.y = e
                return [self.assign_field(component, self.expr(value_node), stmt)]
            return [self.store(target, self.expr(value_node), stmt)]
        if isinstance(target, ast.Attribute):
            return [self.assign_field(target, self.expr(value_node), stmt)]
        if isinstance(value_node, ast.Subscript) and self.is_view_key(value_node):
            if not isinstance(target, ast.Name):
                raise UnsupportedError("a view is bound to a name (row = m[i])",
                                       self.loc(target))
            return self.bind_view(target.id, value_node, stmt)
        if not isinstance(target, ast.Name):
            raise UnsupportedError("can only assign to names, array elements and fields",
                                   self.loc(target))
        if _is_array_constructor(self, value_node):
            self.declare_array(target.id, value_node)
            return []
        value = self.expr(value_node)
        return [self.assign_name(target.id, value, target, compound=False)]

    def assign_tuple(self, target: ast.Tuple, value_node: ast.expr,
                     stmt: ast.stmt) -> list[ir.Stmt]:
        out: list[ir.Stmt] = []
        if isinstance(value_node, ast.Tuple) and len(value_node.elts) == len(target.elts):
            values = [self.expr(v) for v in value_node.elts]
        else:
            values = self.unpacked(value_node, len(target.elts), out)
        temps = []
        for v in values:  # evaluate every right-hand side before assigning (a, b = b, a)
            name = self.temp(v.type)
            out.append(ir.Assign(name, v, loc=self.loc(stmt)))
            temps.append(ir.Var(v.type, name, loc=v.loc))
        for t_node, tmp in zip(target.elts, temps):
            if isinstance(t_node, ast.Subscript):
                out.append(self.store(t_node, tmp, stmt))
            elif isinstance(t_node, ast.Attribute):
                out.append(self.assign_field(t_node, tmp, stmt))
            elif isinstance(t_node, ast.Name):
                out.append(self.assign_name(t_node.id, tmp, t_node, compound=False))
            else:
                raise UnsupportedError("can only assign to names and array elements",
                                       self.loc(t_node))
        return out

    def unpacked(self, node: ast.expr, count: int, out: list[ir.Stmt]) -> list[ir.Expr]:
        """The items of a tuple a device function returned (`x, y = f(a)`), read from a
        temporary that `out` gets."""
        value = None if isinstance(node, ast.Tuple) else self.expr(node)
        t = value.type if value is not None else None
        if not (isinstance(t, StructType) and t.name.startswith("tuple[")):
            raise UnsupportedError("tuple assignment needs a tuple of the same length on the "
                                   "right, or a call of a device function returning one",
                                   self.loc(node))
        if len(t.fields) != count:
            raise KernelTypeError(f"cannot unpack a {t} into {count} names", self.loc(node))
        name = self.temp(t)
        out.append(ir.Assign(name, value, loc=self.loc(node)))
        return [ir.Field(ft, ir.Var(t, name, loc=self.loc(node)), fname, loc=self.loc(node))
                for fname, ft in t.fields]

    def assign_name(self, name: str, value: ir.Expr, target: ast.AST,
                    compound: bool) -> ir.Stmt:
        loc = self.loc(target)
        if name in self.constants:
            raise KernelTypeError(f"'{name}' is a compile-time constant and cannot be "
                                  "assigned", loc)
        if not is_value_type(value.type):
            raise UnsupportedError(f"cannot assign {value.type} to a variable: arrays cannot "
                                   "be aliased", loc)
        current = self.param_names.get(name) or self.local_types.get(name)
        if isinstance(current, ArrayType):
            raise KernelTypeError(f"'{name}' is an array and cannot be reassigned", loc)
        fixed = name in self.param_names or name in self.fixed
        if current is None and is_aggregate(value.type):
            self.local_types[name] = current = value.type
        elif current is not None and (is_aggregate(current) or is_aggregate(value.type)):
            fixed = True  # records, variants and vectors keep their first type
        if current is None or (not fixed and current != value.type):
            new = value.type if current is None else unify(current, value.type)  # type: ignore
            if current is not None and new != current:
                self.local_types[name] = new
                raise _Retry
            self.local_types[name] = new
            current = new
        converted = self.convert(value, current, loc, compound=compound, name=name)
        self.defined.add(name)
        return ir.Assign(name, converted, loc=loc)

    def convert(self, value: ir.Expr, t: Type, loc: ir.Loc, compound: bool = False,
                name: str | None = None, what: str | None = None) -> ir.Expr:
        """Convert `value` for storage in a `t` variable, or raise a clear type error."""
        src = value.type
        if src == t:
            return value
        if is_aggregate(t) or is_aggregate(src):
            target = what or (f"variable '{name}'" if name else "the target")
            return self.convert_aggregate(value, t, loc, target)
        target = what or (f"variable '{name}'" if name else "the target")
        if not isinstance(src, ScalarType):
            raise KernelTypeError(f"cannot assign a {src} value to {target} of type {t}",
                                  value.loc or loc)
        literal = self.literal_value(value)
        if literal is not None:
            ok = isinstance(literal, bool) or t.is_float or (
                not isinstance(literal, float) and fits(literal, t))
        else:
            ok = can_convert_implicitly(src, t) or (compound and can_store(src, t))
        if not ok:
            hint = f"; convert explicitly with {t.name}(...)"
            raise KernelTypeError(f"cannot assign a {src} value to {target} of type {t}{hint}",
                                  value.loc or loc)
        return self.cast(value, t)

    def declare_array(self, name: str, call: ast.Call) -> None:
        loc = self.loc(call)
        fn = self.resolver.resolve(call.func, self.loc(call.func))
        space = MemorySpace.SHARED if fn is kb.shared else MemorySpace.LOCAL
        if space is MemorySpace.SHARED and not self.is_kernel:
            raise UnsupportedError("kiln.shared arrays can only be declared in kernels",
                                   loc)
        if len(call.args) != 2 or call.keywords:
            raise ArityError(f"kiln.{fn.name}(dtype, shape) takes 2 arguments", loc)
        elem = annotation_type(self.resolver, call.args[0], self.loc(call.args[0]))
        if not is_value_type(elem):
            raise KernelTypeError("the element type must be a scalar, vector, record or "
                                  "variant type such as f32", self.loc(call.args[0]))
        shape = self.constant_shape(call.args[1], fn.name)
        t = ArrayType(elem, len(shape), space, shape)
        if name in self.param_names or (name in self.local_types
                                        and self.local_types[name] != t):
            raise KernelTypeError(f"'{name}' is already a variable of another type", loc)
        self.local_types[name] = t
        self.defined.add(name)

    def constant_shape(self, node: ast.expr, what: str) -> tuple[int, ...]:
        items = node.elts if isinstance(node, ast.Tuple) else [node]
        dims: list[int] = []
        for item in items:
            value = self.constant(item)
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
                raise ConstantError(f"kiln.{what} arrays need a size fixed at compile time "
                                    "(an int literal or module-level constant)",
                                    self.loc(item))
            if value <= 0:
                raise ConstantError(f"array dimensions must be positive, got {value}",
                                    self.loc(item))
            dims.append(int(value))
        return tuple(dims)

    def constant(self, node: ast.expr) -> Any:
        """The compile-time value of an expression, or None."""
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name) and node.id in self.constants:
            return self.constants[node.id]
        if isinstance(node, (ast.Name, ast.Attribute)) and not self.is_local(node):
            value = self.resolver.try_resolve(node)
            return value if isinstance(value, (int, float, bool, np.number)) else None
        if isinstance(node, (ast.BinOp, ast.UnaryOp)):
            try:
                expr = self.expr(node)
            except KernelError:
                return None
            return self.literal_value(expr)
        return None

    def is_local(self, node: ast.expr) -> bool:
        root = node
        while isinstance(root, (ast.Attribute, ast.Subscript)):  # `ps[i].vel` too
            root = root.value
        return isinstance(root, ast.Name) and (root.id in self.param_names
                                               or root.id in self.local_types
                                               or root.id in self.views)

    def store(self, target: ast.Subscript, value: ir.Expr, stmt: ast.stmt) -> ir.Stmt:
        array, indices = self.subscript(target)
        self.writable(array, target)
        elem = array.type.elem  # type: ignore[union-attr]
        converted = self.convert(value, elem, self.loc(target), compound=True,
                                 what=f"an element of '{array.name}'")
        return ir.Store(array, indices, converted, loc=self.loc(stmt))

    def stmt_AugAssign(self, node: ast.AugAssign) -> list[ir.Stmt]:
        op = self.operator(node.op, node)
        if isinstance(node.target, ast.Name):
            name = node.target.id
            current = self.read_name(node.target)
            result = self.binop(op, current, self.expr(node.value), node)
            return [self.assign_name(name, result, node.target, compound=True)]
        component = (self.vector_component(node.target)
                     if isinstance(node.target, ast.Subscript) else None)
        if component is not None:  # v[1] += e is v.y += e
            return [self.update_field(component, op, node.value, node)]
        if isinstance(node.target, ast.Subscript):
            out: list[ir.Stmt] = []
            array, indices = self.subscript(node.target)
            self.writable(array, node.target)
            bound = []
            for idx in indices:  # evaluate index expressions once
                if isinstance(idx, (ir.Const, ir.Var)):
                    bound.append(idx)
                else:
                    name = self.temp(idx.type)
                    out.append(ir.Assign(name, idx, loc=idx.loc))
                    bound.append(ir.Var(idx.type, name, loc=idx.loc))
            current = ir.Load(array.type.elem, array, bound,  # type: ignore[union-attr]
                              loc=self.loc(node.target))
            result = self.binop(op, current, self.expr(node.value), node)
            elem = array.type.elem  # type: ignore[union-attr]
            converted = self.convert(result, elem, self.loc(node), compound=True,
                                     what=f"an element of '{array.name}'")
            out.append(ir.Store(array, list(bound), converted, loc=self.loc(node)))
            return out
        if isinstance(node.target, ast.Attribute):
            return [self.update_field(node.target, op, node.value, node)]
        raise UnsupportedError("can only update names, array elements and fields",
                               self.loc(node))

    def stmt_If(self, node: ast.If) -> list[ir.Stmt]:
        cond = self.truth(self.expr(node.test), node.test)
        static = fold_expression(cond)
        if isinstance(static, ir.Const):  # a compile-time condition: build the branch taken
            return self.block(node.body if static.value else node.orelse)
        return [ir.If(cond, self.block(node.body), self.block(node.orelse), loc=self.loc(node))]

    def stmt_While(self, node: ast.While) -> list[ir.Stmt]:
        if node.orelse:
            raise UnsupportedError("`while ... else` is not supported in kernels",
                                   self.loc(node))
        cond = self.truth(self.expr(node.test), node.test)
        self.loop_depth += 1
        body = self.block(node.body)
        self.loop_depth -= 1
        return [ir.While(cond, body, loc=self.loc(node))]

    def stmt_For(self, node: ast.For) -> list[ir.Stmt]:
        loc = self.loc(node)
        if node.orelse:
            raise UnsupportedError("`for ... else` is not supported in kernels",
                                   self.loc(node))
        if not isinstance(node.target, ast.Name):
            raise UnsupportedError("the loop variable must be a single name",
                                   self.loc(node.target))
        it = node.iter
        if isinstance(it, ast.Call) and self.resolver.try_resolve(it.func) in (kb.static_range,
                                                                               kb.unroll):
            if any(kw.arg == "factor" for kw in it.keywords):
                return self.unroll_hinted_for(node)
            return self.unrolled_for(node)
        if not (isinstance(it, ast.Call) and self.resolver.try_resolve(it.func) is range):
            raise UnsupportedError("kernels loop with `for i in range(...)` only",
                                   self.loc(it))
        if not 1 <= len(it.args) <= 3 or it.keywords:
            raise ArityError(f"range takes 1 to 3 arguments, got {len(it.args)}", self.loc(it))
        args = [self.expr(a) for a in it.args]
        for a, a_node in zip(args, it.args):
            if not (isinstance(a.type, ScalarType) and (a.type.is_int or a.type.is_bool)):
                raise KernelTypeError(f"range arguments must be integers, got {a.type}",
                                      self.loc(a_node))
        if len(args) == 1:
            args = [ir.Const(i32, 0, loc=args[0].loc), args[0]]
        if len(args) == 2:
            args.append(ir.Const(i32, 1, loc=loc))
        var = node.target.id
        assigned = {n.id for s in node.body for n in ast.walk(s)
                    if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        if var in assigned:
            raise UnsupportedError(f"the loop variable '{var}' cannot be assigned inside "
                                   "the loop", loc)
        loop_type = self.common_type(args)
        step_value = self.literal_value(args[2])
        if step_value == 0:
            raise KernelError("range() step must not be zero", self.loc(it.args[2]))
        out: list[ir.Stmt] = []
        bounds: list[ir.Expr] = []
        for a in args[1:]:
            a = self.cast(a, loop_type)
            if isinstance(a, ir.Const) or (isinstance(a, ir.Var) and a.name not in assigned):
                bounds.append(a)
            else:
                name = self.temp(loop_type)
                out.append(ir.Assign(name, a, loc=a.loc))
                bounds.append(ir.Var(loop_type, name, loc=a.loc))
        start = self.cast(args[0], loop_type)
        current = self.param_names.get(var) or self.local_types.get(var)
        if var in self.param_names or (var in self.fixed and current != loop_type):
            raise KernelTypeError(f"'{var}' is a {current} variable, cannot loop over "
                                  f"{loop_type} values with it", self.loc(node.target))
        if current is None:
            self.local_types[var] = loop_type
        elif current != loop_type:
            new = unify(current, loop_type)  # type: ignore[arg-type]
            if new != current:
                self.local_types[var] = new
                raise _Retry
            start = self.cast(start, new)
            bounds = [self.cast(b, new) for b in bounds]
        self.defined.add(var)
        self.loop_depth += 1
        body = self.block(node.body)
        self.loop_depth -= 1
        out.append(ir.For(var, start, bounds[0], bounds[1], body, loc=loc))
        return out

    def unroll_hinted_for(self, node: ast.For) -> list[ir.Stmt]:
        """`for i in kiln.unroll(range(...), factor=k)`: a loop (bounds may vary at run time)
        that the backend's compiler is asked to unroll k times (`#pragma unroll k`)."""
        call = node.iter
        assert isinstance(call, ast.Call)
        factor_node = next(kw.value for kw in call.keywords if kw.arg == "factor")
        factor = self.constant(factor_node)
        if not isinstance(factor, (int, np.integer)) or isinstance(factor, bool) or factor < 1:
            raise ConstantError("factor= needs a positive int constant", self.loc(factor_node))
        inner = call.args[0] if len(call.args) == 1 and len(call.keywords) == 1 else None
        if self.resolver.try_resolve(call.func) is not kb.unroll or not (
                isinstance(inner, ast.Call) and self.resolver.try_resolve(inner.func) is range):
            raise UnsupportedError("write kiln.unroll(range(...), factor=k)", self.loc(call))
        out = self.stmt_For(ast.For(target=node.target, iter=inner, body=node.body, orelse=[],
                                    lineno=node.lineno, col_offset=node.col_offset,
                                    end_lineno=node.end_lineno,
                                    end_col_offset=node.end_col_offset))
        loop = out[-1]
        assert isinstance(loop, ir.For)
        loop.unroll = int(factor)
        return out

    def unrolled_for(self, node: ast.For) -> list[ir.Stmt]:
        """`for i in kiln.static_range(...)` / `kiln.unroll(range(...))`: one copy of the
        body per iteration, with `i` a compile-time constant in each."""
        call = node.iter
        assert isinstance(call, ast.Call) and isinstance(node.target, ast.Name)
        fn = self.resolver.resolve(call.func, self.loc(call.func))
        range_call = call
        if fn is kb.unroll:
            inner = call.args[0] if len(call.args) == 1 and not call.keywords else None
            if not (isinstance(inner, ast.Call) and self.resolver.try_resolve(inner.func)
                    is range):
                raise UnsupportedError("write kiln.unroll(range(...))", self.loc(call))
            range_call = inner
        if not 1 <= len(range_call.args) <= 3 or range_call.keywords:
            raise ArityError(f"range takes 1 to 3 arguments, got {len(range_call.args)}",
                             self.loc(range_call))
        bounds = []
        for a in range_call.args:
            value = self.constant(a)
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
                raise ConstantError("an unrolled loop needs constant integer bounds (for bounds "
                                    "known at run time, kiln.unroll(range(...), factor=k) "
                                    "asks the backend's compiler to unroll)", self.loc(a))
            bounds.append(int(value))
        for inner_node in (n for s in node.body for n in ast.walk(s)):
            if isinstance(inner_node, (ast.Break, ast.Continue)) and not _inside_loop(
                    node, inner_node):
                raise UnsupportedError("break and continue are not allowed in an unrolled "
                                       "loop", self.loc(inner_node))
        var = node.target.id
        if var in self.param_names or var in self.local_types:
            raise KernelTypeError(f"the unrolled loop variable '{var}' must be a new name",
                                  self.loc(node.target))
        out: list[ir.Stmt] = []
        saved = self.constants.get(var, _UNSET)
        try:
            for value in range(*bounds):
                self.constants[var] = value
                out.extend(self.block(node.body))
        finally:
            if saved is _UNSET:
                self.constants.pop(var, None)
            else:
                self.constants[var] = saved
        return out

    def stmt_Break(self, node: ast.Break) -> list[ir.Stmt]:
        if not self.loop_depth:
            raise KernelError("`break` outside a loop", self.loc(node))
        return [ir.Break(loc=self.loc(node))]

    def stmt_Continue(self, node: ast.Continue) -> list[ir.Stmt]:
        if not self.loop_depth:
            raise KernelError("`continue` outside a loop", self.loc(node))
        return [ir.Continue(loc=self.loc(node))]

    def stmt_Return(self, node: ast.Return) -> list[ir.Stmt]:
        loc = self.loc(node)
        if node.value is None:
            if not self.is_kernel and self.return_type not in (None, void):
                raise KernelTypeError(f"{self.name} returns {self.return_type} elsewhere; "
                                      "every return needs a value", loc)
            self.return_type = void if self.return_type is None else self.return_type
            return [ir.Return(None, loc=loc)]
        if self.is_kernel:
            raise KernelTypeError("kernels cannot return a value; write results to an array",
                                  self.loc(node.value))
        if self.is_tail_call(node.value):
            return self.tail_call(node.value)
        value = (self.tuple_value(node.value) if isinstance(node.value, ast.Tuple)
                 else self.expr(node.value))
        if not is_value_type(value.type):
            raise KernelTypeError(f"{self.name} returns a {value.type}: device functions "
                                  "return scalars, vectors, records, variants and tuples of "
                                  "them (write arrays in place)", self.loc(node.value))
        if not isinstance(value.type, ScalarType):
            return [self.aggregate_return(value, node)]
        if self.return_fixed:
            return [ir.Return(self.convert(value, self.return_type, loc,  # type: ignore
                                           what=f"the return value of {self.name}"), loc=loc)]
        if self.return_type is None:
            self.return_type = value.type
        elif self.return_type == void:
            raise KernelTypeError(f"{self.name} returns no value elsewhere", loc)
        elif self.return_type != value.type:
            new = unify(self.return_type, value.type)  # type: ignore[arg-type]
            if new != self.return_type:
                self.return_type = new
                raise _Retry
        return [ir.Return(self.cast(value, self.return_type), loc=loc)]  # type: ignore

    def aggregate_return(self, value: ir.Expr, node: ast.Return) -> ir.Stmt:
        """`return v` of a vector, record, variant or tuple: one type on every path."""
        loc = self.loc(node)
        if self.return_fixed:
            return ir.Return(self.convert(value, self.return_type, loc,  # type: ignore
                                          what=f"the return value of {self.name}"), loc=loc)
        if self.return_type is None:
            self.return_type = value.type
        elif self.return_type != value.type:
            raise KernelTypeError(f"{self.name} returns a {value.type} here but "
                                  f"{self.return_type or 'no value'} elsewhere",
                                  self.loc(node.value))
        return ir.Return(value, loc=loc)

    def tuple_value(self, node: ast.Tuple) -> ir.Expr:
        """`(a, b)` returned by a device function: an anonymous record with fields _0, _1,
        ..., which the caller unpacks (`x, y = f()`)."""
        values = [self.expr(v) for v in node.elts]
        for v, elt in zip(values, node.elts):
            if not is_value_type(v.type) or isinstance(v.type, StructType) \
                    and v.type.name.startswith("tuple["):
                raise KernelTypeError(f"a returned tuple holds scalars, vectors, records and "
                                      f"variants, not a {v.type}", self.loc(elt))
        t = StructType(f"tuple[{', '.join(str(v.type) for v in values)}]",
                       tuple((f"_{i}", v.type) for i, v in enumerate(values)))
        return ir.Construct(t, values, loc=self.loc(node))

    def is_self_call(self, node: ast.expr) -> bool:
        if not isinstance(node, ast.Call) or self.is_local(node.func):
            return False
        return getattr(self.resolver.try_resolve(node.func), "pyfunc", None) is self.pyfunc

    def is_tail_call(self, node: ast.expr) -> bool:
        """`return f(args)` inside `f`, outside loops, with positional arguments, the same
        constexpr values and the array parameters passed unchanged. Any other call of `f`
        by itself is recursion (see `specialize_function`)."""
        params = self.parsed.tree.args.args
        if not self.is_self_call(node) or self.loop_depth:
            return False
        assert isinstance(node, ast.Call)
        if node.keywords or len(node.args) != len(params):
            return False
        for a_node, a in zip(node.args, params):
            if a.arg in self.constants and self.constant(a_node) != self.constants[a.arg]:
                return False
            if isinstance(self.param_names.get(a.arg), ArrayType) and not (
                    isinstance(a_node, ast.Name) and a_node.id == a.arg):
                return False
        return True

    def tail_call(self, call: ast.Call) -> list[ir.Stmt]:
        """`return f(args)` inside `f`: rebind the parameters and jump back to the top
        (the body is wrapped in a loop by `build`)."""
        loc = self.loc(call)
        out: list[ir.Stmt] = []
        rebinds: list[ir.Stmt] = []
        for a_node, a in zip(call.args, self.parsed.tree.args.args):
            ptype = self.param_names.get(a.arg)
            if ptype is None or isinstance(ptype, ArrayType):
                continue  # constexpr values and arrays are passed unchanged
            value = self.expr(a_node)
            value = self.convert(value, ptype, self.loc(a_node),  # type: ignore[arg-type]
                                 what=f"parameter '{a.arg}' of {self.name}")
            tmp = self.temp(ptype)
            out.append(ir.Assign(tmp, value, loc=loc))
            rebinds.append(ir.Assign(a.arg, ir.Var(ptype, tmp, loc=loc), loc=loc))
        self.has_tail_call = True
        return out + rebinds + [ir.Continue(loc=loc)]

    # ------------------------------------------------------------ expressions

    def expr(self, node: ast.expr) -> ir.Expr:
        for kind, what in UNSUPPORTED_EXPRESSIONS.items():
            if isinstance(node, kind):
                raise UnsupportedError(f"kernels do not support {what}", self.loc(node))
        method = getattr(self, f"expr_{type(node).__name__}", None)
        if method is None:
            raise UnsupportedError(f"{type(node).__name__} expressions are not supported in "
                                   "kernels", self.loc(node))
        return method(node)

    def literal(self, value: Any, node: ast.AST) -> ir.Expr:
        loc = self.loc(node)
        if isinstance(value, str):
            raise UnsupportedError("strings are not supported in kernels", loc)
        if isinstance(value, np.generic):
            t = SCALAR_BY_DTYPE.get(value.dtype)
            if t is None:
                raise KernelTypeError(f"no kiln type for {value!r}", loc)
            return ir.Const(t, value.item(), loc=loc)
        if not isinstance(value, (bool, int, float)):
            raise UnsupportedError(f"{type(value).__name__} values cannot be used in kernels",
                                   loc)
        if isinstance(value, int) and not -(2**63) <= value < 2**64:
            raise ConstantError(f"the constant {value} does not fit in 64 bits (kernels have "
                                "no big integers)", loc)
        const = ir.Const(literal_type(value), value, loc=loc)
        const.weak = True  # type: ignore[attr-defined]
        return const

    @staticmethod
    def literal_value(expr: ir.Expr) -> Any:
        """The Python value of a literal that still adapts to its context, else None."""
        if isinstance(expr, ir.Const) and getattr(expr, "weak", False):
            return expr.value
        return None

    def expr_Constant(self, node: ast.Constant) -> ir.Expr:
        if node.value is None or node.value is Ellipsis:
            raise UnsupportedError(f"{node.value!r} is not a value in kernels", self.loc(node))
        return self.literal(node.value, node)

    def expr_Name(self, node: ast.Name) -> ir.Expr:
        if node.id in self.constants:
            return self.literal(self.constants[node.id], node)
        if node.id in self.views:
            view = self.views[node.id]
            raise KernelTypeError(f"'{node.id}' is a view of '{view.array.name}': index it "
                                  f"({node.id}[j]), take len({node.id}) or pass it to a device "
                                  "function; a view is not a value",
                                  self.loc(node))
        if node.id in self.param_names or node.id in self.local_types:
            return self.read_name(node)
        value = self.resolver.lookup(node.id, self.loc(node))
        return self.value_expr(value, node)

    def read_name(self, node: ast.Name) -> ir.Expr:
        name = node.id
        t = self.param_names.get(name) or self.local_types.get(name)
        if t is None:
            value = self.resolver.lookup(name, self.loc(node))
            return self.value_expr(value, node)
        if name not in self.defined:
            raise UnknownNameError(f"'{name}' is used before it is assigned", self.loc(node))
        return ir.Var(t, name, loc=self.loc(node))

    def value_expr(self, value: Any, node: ast.AST) -> ir.Expr:
        if isinstance(value, (bool, int, float, np.generic)):
            return self.literal(value, node)
        if isinstance(value, np.ndarray):
            return table_expr(self, value, node, ast.unparse(node))
        if isinstance(value, kb.KernelOnly) and value.intrinsic in kb.VALUE_INTRINSICS:
            return self.intrinsic_from_exprs(value.intrinsic, [], node)
        raise UnsupportedError(f"{_describe(value)} cannot be used as a value in kernels",
                               self.loc(node))

    def expr_Attribute(self, node: ast.Attribute) -> ir.Expr:
        loc = self.loc(node)
        if self.is_local(node.value) or not isinstance(node.value, (ast.Name, ast.Attribute)):
            base = self.expr(node.value)
            if is_aggregate(base.type):
                return self.field(base, node.attr, node)
            if isinstance(base.type, ArrayType) and isinstance(base, ir.Var):
                if node.attr == "ndim":
                    return self.literal(base.type.ndim, node)
                if node.attr == "size":
                    size: ir.Expr = ir.ArrayDim(i32, base, 0, loc=loc)
                    for axis in range(1, base.type.ndim):
                        size = ir.BinOp(i32, "*", size, ir.ArrayDim(i32, base, axis, loc=loc),
                                        loc=loc)
                    return size
                if node.attr == "shape":
                    raise UnsupportedError("use a.shape[k] with a constant k", loc)
            raise UnsupportedError(f"attribute '{node.attr}' of {base.type} is not supported",
                                   loc)
        owner = self.resolver.resolve(node.value, self.loc(node.value))
        if isinstance(owner, kb.IndexObject):
            if node.attr not in ("x", "y", "z"):
                raise UnknownNameError(f"kiln.{owner.name} has .x, .y and .z, not "
                                       f".{node.attr}", loc)
            return ir.IntrinsicCall(i32, f"{owner.name}_{node.attr}", [], loc=loc)
        value = self.resolver.resolve(node, self.loc(node))
        return self.value_expr(value, node)

    def expr_Subscript(self, node: ast.Subscript) -> ir.Expr:
        if isinstance(node.value, ast.Attribute) and node.value.attr == "shape" \
                and self.names_view(node.value.value):
            axis = self.constant(node.slice)
            if not isinstance(axis, int):
                raise ConstantError("shape index must be a constant", self.loc(node.slice))
            return self.view_length(node.value.value, axis, node.slice)
        if isinstance(node.value, ast.Attribute) and node.value.attr == "shape" \
                and (self.is_local(node.value.value) or isinstance(
                    self.resolver.try_resolve(node.value.value), np.ndarray)):  # a table
            array = self.expr(node.value.value)
            if not isinstance(array, ir.Var) or not isinstance(array.type, ArrayType):
                raise KernelTypeError("only arrays have a shape", self.loc(node.value))
            axis = self.constant(node.slice)
            if not isinstance(axis, int) or not -array.type.ndim <= axis < array.type.ndim:
                raise ConstantError(f"shape index must be a constant in "
                                    f"0..{array.type.ndim - 1}", self.loc(node.slice))
            return ir.ArrayDim(i32, array, axis % array.type.ndim, loc=self.loc(node))
        component = self.vector_component(node)
        if component is not None:  # v[1] is v.y
            return self.expr(component)
        array, indices = self.subscript(node)
        return ir.Load(array.type.elem, array, indices, loc=self.loc(node))  # type: ignore

    def writable(self, array: ir.Var, target: ast.Subscript) -> None:
        if isinstance(array.type, ArrayType) and array.type.space is MemorySpace.CONSTANT:
            raise KernelTypeError(f"'{ast.unparse(target.value)}' is a module-level NumPy "
                                  "array, which kernels read as a constant table: pass an "
                                  "array argument to write one", self.loc(target))

    def vector_component(self, node: ast.Subscript) -> ast.Attribute | None:
        """`v[k]` of a vector `v` as the component access `v.x` / `.y` / `.z` / `.w` it
        means (None when `v` is not a vector); `k` is a constant, negative from the end."""
        if self.names_view(node.value):
            return None
        base_type = self.expr(node.value).type
        if not isinstance(base_type, VectorType):
            return None
        n = base_type.n
        if isinstance(node.slice, (ast.Tuple, ast.Slice)):
            raise UnsupportedError(f"a {base_type} is indexed with one constant, not a slice "
                                   "or a tuple (build a smaller vector from its components)",
                                   self.loc(node.slice))
        k = self.constant(node.slice)
        if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or not -n <= k < n:
            raise ConstantError(f"a {base_type} is indexed with a constant in {-n}..{n - 1} "
                                f"(or .{', .'.join(COMPONENTS[:n])})", self.loc(node.slice))
        component = ast.Attribute(value=node.value, attr=COMPONENTS[int(k) % n], ctx=node.ctx)
        return ast.copy_location(component, node)

    def subscript(self, node: ast.Subscript) -> tuple[ir.Var, list[ir.Expr]]:
        if self.names_view(node.value):
            return self.view_element(node)
        base = self.expr(node.value)
        if not isinstance(base.type, ArrayType) or not isinstance(base, ir.Var):
            raise KernelTypeError(f"cannot index a {base.type} value", self.loc(node.value))
        items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if len(items) < base.type.ndim or any(isinstance(i, ast.Slice) for i in items):
            raise KernelTypeError(f"{ast.unparse(node)} is a view of '{base.name}', not a "
                                  f"value: bind it to a name (row = {ast.unparse(node)}) or "
                                  f"index it further ({ast.unparse(node)}[j])", self.loc(node))
        if len(items) != base.type.ndim:
            raise KernelTypeError(f"'{base.name}' has {base.type.ndim} dimension(s) but is "
                                  f"indexed with {len(items)}", self.loc(node.slice))
        return base, [self.index(item) for item in items]

    def index(self, node: ast.expr) -> ir.Expr:
        idx = self.expr(node)
        t = idx.type
        if not (isinstance(t, ScalarType) and (t.is_int or t.is_bool)):
            raise KernelTypeError(f"array indices must be integers, got {t}", self.loc(node))
        value = self.literal_value(idx)
        if value is not None and value < 0:
            raise KernelError("negative indices do not wrap around in kernels",
                              self.loc(node))
        if t.bits < 32 or t.is_bool or t.kind == "u":
            return self.cast(idx, i64 if t.bits >= 32 else i32)
        return idx

    def operator(self, op: ast.operator, node: ast.AST) -> str:
        symbol = BINOPS.get(type(op))
        if symbol is None:  # `@`, the one Python operator kernels lack
            raise UnsupportedError("kernels do not support the `@` operator", self.loc(node))
        return symbol

    def expr_BinOp(self, node: ast.BinOp) -> ir.Expr:
        op = self.operator(node.op, node)
        return self.binop(op, self.expr(node.left), self.expr(node.right), node)

    def binop(self, op: str, left: ir.Expr, right: ir.Expr, node: ast.AST) -> ir.Expr:
        loc = self.loc(node)
        if isinstance(left.type, VectorType) or isinstance(right.type, VectorType):
            return self.vector_binop(op, left, right, loc)
        for side in (left, right):
            if not isinstance(side.type, ScalarType):
                raise KernelTypeError(f"operator {op} needs numbers, got {side.type}",
                                      side.loc or loc)
        lv, rv = self.literal_value(left), self.literal_value(right)
        if lv is not None and rv is not None:
            return self.fold_literals(op, lv, rv, node)
        lt, rt = left.type, right.type
        assert isinstance(lt, ScalarType) and isinstance(rt, ScalarType)
        if op in ("&", "|", "^") and lt.is_bool and rt.is_bool:
            return ir.BinOp(bool_, op, left, right, loc=loc)
        t = operand_type(lt, rt, lv, rv)
        if op in ("<<", ">>", "&", "|", "^", "~") and t.is_float:
            raise KernelTypeError(f"operator {op} needs integers, got {lt} and {rt}", loc)
        if op in ("<<", ">>"):
            t = operand_type(lt, lt, None, None) if lv is None else t
        if op == "/" and not t.is_float:
            t = f32
        return ir.BinOp(t, op, self.cast(left, t), self.cast(right, t), loc=loc)

    def fold_literals(self, op: str, a: Any, b: Any, node: ast.AST) -> ir.Expr:
        huge = (op == "**" and isinstance(a, int) and isinstance(b, int) and abs(a) > 1
                and b > 128) or (op == "<<" and isinstance(b, int) and b > 128 and a != 0)
        if huge:  # the value would not fit in 64 bits; Python would build it (slowly)
            raise ConstantError(f"the constant {a} {op} {b} does not fit in 64 bits",
                                self.loc(node))
        try:
            return self.literal(_LITERAL_OPS[op](a, b), node)
        except ZeroDivisionError:
            raise KernelError("division by zero in a constant expression",
                              self.loc(node)) from None
        except TypeError as exc:
            raise KernelTypeError(str(exc), self.loc(node)) from None

    def expr_UnaryOp(self, node: ast.UnaryOp) -> ir.Expr:
        operand = self.expr(node.operand)
        loc = self.loc(node)
        if isinstance(node.op, ast.Not):
            return ir.UnaryOp(bool_, "not", self.truth(operand, node.operand), loc=loc)
        if isinstance(operand.type, VectorType):
            op = {ast.USub: "-", ast.UAdd: "+", ast.Invert: "~"}[type(node.op)]
            return self.vector_unary(op, operand, loc)
        if not isinstance(operand.type, ScalarType):
            raise KernelTypeError(f"cannot negate a {operand.type}", loc)
        value = self.literal_value(operand)
        op = {ast.USub: "-", ast.UAdd: "+", ast.Invert: "~"}[type(node.op)]
        if value is not None:
            return self.literal({"-": -value, "+": +value, "~": ~value if
                                 not isinstance(value, float) else None}[op], node)
        t = operand.type
        if op == "~" and t.is_float:
            raise KernelTypeError(f"operator ~ needs an integer, got {t}", loc)
        if op == "~" and t.is_bool:
            return ir.UnaryOp(bool_, "not", operand, loc=loc)
        if t.is_bool or (t.is_int and t.bits < 32):
            operand, t = self.cast(operand, i32), i32
        return ir.UnaryOp(t, op, operand, loc=loc)

    def expr_BoolOp(self, node: ast.BoolOp) -> ir.Expr:
        op = "and" if isinstance(node.op, ast.And) else "or"
        values = [self.truth(self.expr(v), v) for v in node.values]
        return ir.BoolOp(bool_, op, values, loc=self.loc(node))

    def expr_Compare(self, node: ast.Compare) -> ir.Expr:
        parts: list[ir.Expr] = []
        left = self.expr(node.left)
        for op_node, right_node in zip(node.ops, node.comparators):
            if type(op_node) not in CMPOPS:
                raise UnsupportedError("kernels do not support `is`, `is not`, `in` and "
                                       "`not in`", self.loc(node))
            right = self.expr(right_node)
            parts.append(self.compare(CMPOPS[type(op_node)], left, right, node))
            left = right
        if len(parts) == 1:
            return parts[0]
        return ir.BoolOp(bool_, "and", parts, loc=self.loc(node))

    def compare(self, op: str, left: ir.Expr, right: ir.Expr, node: ast.AST) -> ir.Expr:
        loc = self.loc(node)
        if isinstance(left.type, VectorType) or isinstance(right.type, VectorType):
            return self.vector_compare(op, left, right, loc)
        for side in (left, right):
            if not isinstance(side.type, ScalarType):
                raise KernelTypeError(f"cannot compare a {side.type}", side.loc or loc)
        lv, rv = self.literal_value(left), self.literal_value(right)
        t = comparison_type(left.type, right.type, lv, rv)  # type: ignore[arg-type]
        return ir.Compare(bool_, op, self.cast(left, t), self.cast(right, t), loc=loc)

    def expr_IfExp(self, node: ast.IfExp) -> ir.Expr:
        cond = self.truth(self.expr(node.test), node.test)
        a, b = self.expr(node.body), self.expr(node.orelse)
        for side in (a, b):
            if not isinstance(side.type, ScalarType):
                raise KernelTypeError("conditional expressions choose between numbers",
                                      side.loc)
        t = operand_type(a.type, b.type, self.literal_value(a),  # type: ignore[arg-type]
                         self.literal_value(b))
        if a.type == bool_ and b.type == bool_:
            t = bool_
        return ir.Select(t, cond, self.cast(a, t), self.cast(b, t), loc=self.loc(node))

    def expr_Tuple(self, node: ast.Tuple) -> ir.Expr:
        raise UnsupportedError("tuples are only allowed in tuple assignment and indexing",
                               self.loc(node))

    def expr_Call(self, node: ast.Call) -> ir.Expr:
        result = self.call(node, statement=False)
        assert result is not None
        return result

    # ------------------------------------------------------------ calls

    def call(self, node: ast.Call, statement: bool) -> ir.Expr | None:
        loc = self.loc(node)
        if self.is_local(node.func):
            raise UnsupportedError("variables cannot be called", loc)
        if not isinstance(node.func, (ast.Name, ast.Attribute)):
            self.expr(node.func)  # rejects lambdas and other unsupported expressions
            raise UnsupportedError("only named functions can be called in kernels", loc)
        if any(isinstance(a, ast.Starred) for a in node.args) \
                or any(kw.arg is None for kw in node.keywords):
            raise UnsupportedError("kernels do not support *args or **kwargs in calls", loc)
        fn = self.resolver.resolve(node.func, self.loc(node.func))
        if fn is print:
            raise UnsupportedError("print(...) is a statement of its own; it has no value",
                                   loc)
        if isinstance(fn, type) and issubclass(fn, np.generic):
            fn = SCALAR_BY_DTYPE.get(np.dtype(fn), fn)
        if fn in (int, float, bool):
            fn = {int: i32, float: f32, bool: bool_}[fn]
        if isinstance(fn, ScalarType):
            return self.cast_call(fn, node)
        if fn is len and len(node.args) == 1 and self.names_view(node.args[0]):
            return self.view_length(node.args[0], 0, node)
        if fn is len:
            args = self.positional(node, 1, "len")
            if not isinstance(args[0].type, ArrayType) or not isinstance(args[0], ir.Var):
                raise KernelTypeError(f"len() needs an array, got {args[0].type}", loc)
            return ir.ArrayDim(i32, args[0], 0, loc=loc)
        if fn is range:
            raise UnsupportedError("range() can only be used in a for loop", loc)
        if fn in (kb.global_id, kb.global_size):
            return self.global_index(fn, node)
        if fn is kb.native:
            raise UnsupportedError("kiln.native(...) is a statement of its own; it has no "
                                   "value (let the code assign a variable: {y} = ...)", loc)
        if fn is kb.load:
            return self.wide_load(node)
        if fn is kb.store:
            raise UnsupportedError("kiln.store(...) is a statement of its own; it has no value",
                                   loc)
        if fn in (kb.shared, kb.local):
            raise UnsupportedError(f"kiln.{fn.name}(...) must be assigned to a name: "
                                   f"s = kiln.{fn.name}(f32, 256)", loc)
        if fn is isinstance:
            return self.isinstance_call(node)
        if isinstance(getattr(fn, "__self__", None), Variant) and fn.__name__ == "tag":
            return self.variant_tag_call(fn.__self__, node)
        record = kiln_type_of(fn)
        if isinstance(record, StructType):
            return self.construct(record, node)
        if isinstance(record, VariantType):
            return self.variant_call(record, node)
        if isinstance(fn, VectorType):
            return self.vector_call(fn, node)
        name = kb.intrinsic_for(fn)
        if isinstance(fn, np.ufunc) and name is not None \
                and (len(node.args) != fn.nin or node.keywords):
            raise ArityError(f"np.{fn.__name__} takes {fn.nin} argument(s) in kernels (no out= "
                             f"or other keywords), got {len(node.args) + len(node.keywords)}",
                             loc)
        if name is not None:
            return self.intrinsic_call(name, node, statement)
        if isinstance(fn, DeviceFunction):
            return self.device_call(fn, node, statement)
        if isinstance(fn, Compilable):  # a @kiln.kernel
            raise UnsupportedError(f"kernel {fn.name} cannot be called from a kernel; make "
                                   "it a @kiln.func", loc)
        raise UnsupportedError(f"calling {_describe(fn)} is not supported in kernels", loc)

    def positional(self, node: ast.Call, count: int | tuple[int, int],
                   what: str) -> list[ir.Expr]:
        lo, hi = (count, count) if isinstance(count, int) else count
        if node.keywords:
            raise UnsupportedError(f"{what} takes no keyword arguments", self.loc(node))
        if not lo <= len(node.args) <= hi:
            expected = str(lo) if lo == hi else f"{lo} to {hi}"
            raise ArityError(f"{what} takes {expected} argument(s), got {len(node.args)}",
                             self.loc(node))
        return [self.expr(a) for a in node.args]

    def cast_call(self, t: ScalarType, node: ast.Call) -> ir.Expr:
        (arg,) = self.positional(node, 1, t.name)
        if not isinstance(arg.type, ScalarType):
            raise KernelTypeError(f"cannot convert a {arg.type} to {t}", self.loc(node))
        if t == bool_:
            return self.truth(arg, node)
        value = self.literal_value(arg)
        if value is not None:
            if t.is_float:
                return ir.Const(t, float(value), loc=self.loc(node))
            if not math.isfinite(value):
                raise ConstantError(f"{value} has no {t} value", self.loc(node))
            return ir.Const(t, wrap_int(math.trunc(value), t), loc=self.loc(node))
        return self.cast(arg, t, loc=self.loc(node))

    def global_index(self, fn: kb.KernelOnly, node: ast.Call) -> ir.Expr:
        loc = self.loc(node)
        if len(node.args) != 1 or node.keywords:
            raise ArityError(f"kiln.{fn.name}(dim) takes 1 argument", loc)
        dim = self.constant(node.args[0])
        if dim not in (0, 1, 2) or isinstance(dim, bool):
            raise ConstantError(f"kiln.{fn.name} needs a constant dimension 0, 1 or 2",
                                self.loc(node.args[0]))
        axis = "xyz"[dim]

        def index(base: str) -> ir.Expr:
            return ir.IntrinsicCall(i32, f"{base}_{axis}", [], loc=loc)

        if fn is kb.global_id:
            product = ir.BinOp(i32, "*", index("block_idx"), index("block_dim"), loc=loc)
            return ir.BinOp(i32, "+", product, index("thread_idx"), loc=loc)
        return ir.BinOp(i32, "*", index("grid_dim"), index("block_dim"), loc=loc)

    def intrinsic_call(self, name: str, node: ast.Call, statement: bool) -> ir.Expr:
        spec = intrinsics[name]
        loc = self.loc(node)
        if node.keywords:
            raise UnsupportedError(f"{name} takes no keyword arguments", loc)
        arg_nodes = list(node.args)
        if spec.category == "atomic" and len(arg_nodes) >= 2 and isinstance(arg_nodes[1],
                                                                              ast.Tuple):
            arg_nodes = [arg_nodes[0], *arg_nodes[1].elts, *arg_nodes[2:]]
        if name in ("min", "max") and len(arg_nodes) > 2:
            folded = self.intrinsic_from_exprs(name, [self.expr(a) for a in arg_nodes[:2]],
                                               node)
            for extra in arg_nodes[2:]:
                folded = self.intrinsic_from_exprs(name, [folded, self.expr(extra)], node)
            return folded
        lo, hi = spec.arity
        args = (self.atomic_on_view(arg_nodes) if spec.category == "atomic" and arg_nodes
                and self.names_view(arg_nodes[0]) else [self.expr(a) for a in arg_nodes])
        if not lo <= len(args) <= hi:
            expected = str(lo) if lo == hi else f"{lo} to {hi}"
            raise ArityError(f"{name} takes {expected} argument(s), got {len(arg_nodes)}",
                             loc)
        if spec.category == "atomic" and not isinstance(args[0], ir.Var):
            raise KernelTypeError(f"the first argument of {name} must be an array",
                                  self.loc(arg_nodes[0]))
        result = self.intrinsic_from_exprs(name, args, node)
        if result.type == void and not statement:
            raise KernelTypeError(f"{name}() has no value", loc)
        return result

    def intrinsic_from_exprs(self, name: str, args: list[ir.Expr], node: ast.AST) -> ir.Expr:
        spec = intrinsics[name]
        if any(isinstance(a.type, ArrayType) and a.type.space is MemorySpace.CONSTANT
               for a in args):
            raise KernelTypeError(f"{name} cannot update a module-level constant table: pass "
                                  "an array argument", self.loc(node))
        types = [self._literal_aware_type(a, args) if spec.category == "math" else a.type
                 for a in args]
        try:
            param_types, result = typing_of(spec, types)
        except IntrinsicTypeError as exc:
            raise KernelTypeError(str(exc), self.loc(node)) from None
        converted = []
        for a, t in zip(args, param_types):
            if isinstance(t, VectorType):
                a = self.splat(a, t)
            elif isinstance(t, ScalarType):
                if not isinstance(a.type, ScalarType):
                    raise KernelTypeError(f"{name} expects a number, got {a.type}", a.loc)
                a = self.convert(a, t, self.loc(node), compound=True,
                                 what=f"a {t} argument of {name}") \
                    if spec.category == "atomic" else self.cast(a, t)
            converted.append(a)
        return ir.IntrinsicCall(result, name, converted, loc=self.loc(node))

    def _literal_aware_type(self, arg: ir.Expr, args: list[ir.Expr]) -> Type:
        """A literal argument takes the type of the other non-literal numeric arguments."""
        value = self.literal_value(arg)
        if value is None:
            return arg.type
        others = [a.type for a in args if self.literal_value(a) is None
                  and isinstance(a.type, ScalarType)]
        if not others:
            return arg.type
        t = others[0]
        assert isinstance(t, ScalarType)
        return operand_type(t, arg.type, None, value)  # type: ignore[arg-type]

    def device_call(self, fn: Any, node: ast.Call, statement: bool) -> ir.Expr | None:
        loc = self.loc(node)
        params = fn.signature
        args_nodes = list(node.args)
        if len(args_nodes) > len(params):
            raise ArityError(f"{fn.name} takes {len(params)} argument(s), got "
                             f"{len(args_nodes) + len(node.keywords)}", loc)
        by_name: dict[str, ast.expr] = {}
        for kw in node.keywords:
            if kw.arg is None or kw.arg not in [p for p, _ in params]:
                raise ArityError(f"{fn.name} has no parameter '{kw.arg}'", self.loc(kw.value))
            by_name[kw.arg] = kw.value
        ordered: list[ast.expr] = []
        for i, (pname, _) in enumerate(params):
            if i < len(args_nodes):
                if pname in by_name:
                    raise ArityError(f"{fn.name} got '{pname}' twice", loc)
                ordered.append(args_nodes[i])
            elif pname in by_name:
                ordered.append(by_name[pname])
            else:
                raise ArityError(f"{fn.name} takes {len(params)} argument(s) "
                                 f"({', '.join(p for p, _ in params)}); '{pname}' is missing",
                                 loc)
        args = [None if self.names_view(a) else self.expr(a) for a in ordered]
        types: list[Type] = []
        converted: list[ir.Expr] = []
        for (pname, ptype), a, a_node in zip(params, args, ordered):
            if a is None:  # a view: the array and its indices, bounds and lengths
                view_type, parts = self.view_argument(
                    a_node, ptype, f"argument '{pname}' of {fn.name}")
                types.append(view_type)
                converted += parts
                continue
            if isinstance(a.type, ArrayType):
                if not isinstance(a, ir.Var):
                    raise KernelTypeError("array arguments must be array variables",
                                          self.loc(a_node))
                if a.type.space is MemorySpace.CONSTANT:
                    raise KernelTypeError(f"'{ast.unparse(a_node)}' is a module-level "
                                          "constant table: device functions read it by name "
                                          "too, so it is not passed", self.loc(a_node))
                if ptype is not None and (not isinstance(ptype, ArrayType)
                                          or ptype.elem != a.type.elem
                                          or ptype.ndim != a.type.ndim):
                    raise KernelTypeError(f"argument '{pname}' of {fn.name} expects {ptype}, "
                                          f"got {a.type}", self.loc(a_node))
                types.append(a.type)
                converted.append(a)
                continue
            if isinstance(ptype, ArrayType):
                raise KernelTypeError(f"argument '{pname}' of {fn.name} expects {ptype}, "
                                      f"got {a.type}", self.loc(a_node))
            if isinstance(ptype, ConstexprType):
                value = self.literal_value(a)
                if value is None:
                    raise ConstantError(f"argument '{pname}' of {fn.name} is a constexpr and "
                                        "needs a compile-time constant", self.loc(a_node))
                types.append(ConstexprType(value))
                continue
            t = ptype or a.type
            converted.append(self.convert(a, t, self.loc(a_node),  # type: ignore[arg-type]
                                          what=f"parameter '{pname}' of {fn.name}"))
            types.append(t)
        name, return_type = self.specialize_function(fn, tuple(types), loc)
        if return_type == void and not statement:
            raise KernelTypeError(f"{fn.name} returns no value", loc)
        return ir.Call(return_type, name, converted, loc=loc)

    def specialize_function(self, fn: Any, types: tuple[Type, ...],
                            loc: ir.Loc) -> tuple[str, Type]:
        """The name and return type of `fn` specialised to `types`, built on first use.

        A call of a specialisation still being built is recursion: its return type is the
        annotated one, or (calling itself) the one its returns so far have; the body is
        built again should a later return widen it."""
        key = (fn, types)
        found = self.ctx.functions.get(key)
        if found is not None:
            return found.name, found.return_type
        building = self.ctx.building.get(key)
        if building is not None:
            if not any(isinstance(n, ast.Return) and n.value is not None
                       for n in ast.walk(building.parsed.tree)):
                return building.name, void
            if not building.return_fixed and (building is not self
                                              or building.return_type is None):
                raise KernelTypeError(f"{fn.name} is called recursively before its return type "
                                      f"is known: annotate it (def {fn.name}(...) -> i32:)",
                                      loc)
            return building.name, building.return_type  # type: ignore[return-value]
        if len(self.ctx.building) >= MAX_NESTED_SPECIALIZATIONS:
            raise KernelError(f"{fn.name}: device functions specialise more than "
                              f"{MAX_NESTED_SPECIALIZATIONS} levels deep (recursion over "
                              "constexpr values needs a base case in an `if` on constants)", loc)
        builder = FunctionBuilder(fn.pyfunc, types, self.ctx, is_kernel=False,
                                  name=self.ctx.unique_name(fn.name, types))
        self.ctx.building[key] = builder
        try:
            function = builder.build()
        finally:
            del self.ctx.building[key]
        function.max_depth = fn.options.max_depth  # validated by KernelOptions
        self.ctx.functions[key] = function
        self.ctx.order.append(function)
        return function.name, function.return_type

    # ------------------------------------------------------------ helpers

    def cast(self, expr: ir.Expr, t: Type, loc: ir.Loc | None = None) -> ir.Expr:
        if expr.type == t:
            return expr
        value = self.literal_value(expr)
        if value is not None and isinstance(t, ScalarType):
            if t.is_bool:
                return ir.Const(t, bool(value), loc=expr.loc)
            if t.is_float:
                return ir.Const(t, float(value), loc=expr.loc)
            if isinstance(value, float):
                return ir.Cast(t, ir.Const(literal_type(value), value, loc=expr.loc),
                               loc=expr.loc)
            return ir.Const(t, wrap_int(int(value), t), loc=expr.loc)
        return ir.Cast(t, expr, loc=loc or expr.loc)

    def truth(self, expr: ir.Expr, node: ast.AST) -> ir.Expr:
        """A condition as bool_: numbers compare against zero."""
        t = expr.type
        if t == bool_:
            return expr
        if isinstance(t, VectorType):
            raise KernelTypeError(f"a {t} has one value per component: test all(...) or "
                                  "any(...) of it", self.loc(node))
        if not isinstance(t, ScalarType):
            raise KernelTypeError(f"a {t} cannot be used as a condition", self.loc(node))
        value = self.literal_value(expr)
        if value is not None:
            return ir.Const(bool_, bool(value), loc=expr.loc)
        return ir.Compare(bool_, "!=", expr, ir.Const(t, 0, loc=expr.loc), loc=expr.loc)

    def common_type(self, exprs: list[ir.Expr]) -> ScalarType:
        typed = [e.type for e in exprs if self.literal_value(e) is None]
        if not typed:
            values = [self.literal_value(e) for e in exprs]
            return i64 if any(literal_type(v) == i64 for v in values) else i32
        t = typed[0]
        for other in typed[1:]:
            t = operand_type(t, other, None, None)  # type: ignore[arg-type]
        for e in exprs:
            v = self.literal_value(e)
            if v is not None:
                t = operand_type(t, e.type, None, v)  # type: ignore[arg-type]
        return t  # type: ignore[return-value]


_UNSET = object()


def _inside_loop(outer: ast.For, target: ast.AST) -> bool:
    """Whether `target` sits in a loop nested inside `outer` (so it does not leave `outer`)."""
    for stmt in outer.body:
        for node in ast.walk(stmt):
            if isinstance(node, (ast.For, ast.While)) and any(
                    n is target for n in ast.walk(node)):
                return True
    return False


def _is_array_constructor(builder: FunctionBuilder, node: ast.expr) -> bool:
    if not isinstance(node, ast.Call) or builder.is_local(node.func):
        return False
    return builder.resolver.try_resolve(node.func) in (kb.shared, kb.local)


def _strip_docstring(body: list[ast.stmt]) -> list[ast.stmt]:
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        return body[1:]
    return body


def _always_returns(body: list[ir.Stmt]) -> bool:
    if not body:
        return False
    last = body[-1]
    if isinstance(last, ir.Return):
        return True
    if isinstance(last, ir.If):
        return _always_returns(last.then) and _always_returns(last.orelse)
    if isinstance(last, ir.While) and isinstance(last.cond, ir.Const) and last.cond.value:
        return not any(isinstance(n, ir.Break) for n in _shallow_breaks(last.body))
    return False


def _shallow_breaks(body: list[ir.Stmt]) -> list[ir.Stmt]:
    """Breaks that leave this loop (not those of nested loops)."""
    found: list[ir.Stmt] = []
    for s in body:
        if isinstance(s, ir.Break):
            found.append(s)
        elif isinstance(s, ir.If):
            found += _shallow_breaks(s.then) + _shallow_breaks(s.orelse)
    return found



def _describe(value: Any) -> str:
    if isinstance(value, type(math)):
        return f"module {value.__name__}"
    name = getattr(value, "__name__", None)
    return f"{type(value).__name__} {name}" if name else repr(value)
