"""Statements: blocks, assignments, `if`, and the table that sends each statement to its
builder (loops to `Loops`, `return` to `Returns`, `match` to `Aggregates`).

An `if` on a compile-time condition builds only the branch taken; what follows a
`return`, `break` or `continue` in a block is unreachable and not built.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import ArityError, KernelTypeError, UnsupportedError
from ..ir import nodes as ir
from ..ir.enums import MemorySpace
from ..ir.passes.fold import fold_expression
from ..ir.types import ArrayType, StructType
from . import builtins as kb
from .conversions import convert, element_type, is_value_type
from .native import build_native
from .part import Part
from .printing import build_print
from .resolve import annotation_type

if TYPE_CHECKING:
    from .frontend import FunctionBuilder

UNSUPPORTED_STATEMENTS = {
    ast.Try: "`try` statements", ast.With: "`with` statements", ast.Raise: "`raise`",
    ast.FunctionDef: "nested functions (closures)", ast.ClassDef: "class definitions",
    ast.AsyncFunctionDef: "async functions", ast.Import: "imports", ast.ImportFrom: "imports",
    ast.Global: "`global`", ast.Nonlocal: "`nonlocal`", ast.Delete: "`del`",
    ast.Assert: "`assert`", ast.AsyncFor: "`async for`",
    ast.AsyncWith: "`async with`",
}


class Statements(Part):
    """Builds blocks of statements; assignments and `if` are its own."""

    def __init__(self, builder: FunctionBuilder) -> None:
        super().__init__(builder)
        loops, returns = builder.loops, builder.returns
        self.handlers: dict[type[ast.stmt], Callable[[Any], list[ir.Stmt]]] = {
            ast.Pass: self.pass_stmt, ast.Expr: self.expr_stmt, ast.Assign: self.assign_stmt,
            ast.AnnAssign: self.annotated_assign, ast.AugAssign: self.update,
            ast.If: self.if_stmt, ast.While: loops.while_loop, ast.For: loops.for_loop,
            ast.Break: loops.break_stmt, ast.Continue: loops.continue_stmt,
            ast.Return: returns.return_stmt, ast.Match: builder.aggregates.match,
        }

    def block(self, stmts: list[ast.stmt]) -> list[ir.Stmt]:
        out: list[ir.Stmt] = []
        for s in stmts:
            out.extend(self.stmt(s))
            if out and isinstance(out[-1], (ir.Return, ir.Break, ir.Continue)):
                break  # what follows is unreachable (also after an `if` on constants)
        return out

    def stmt(self, node: ast.stmt) -> list[ir.Stmt]:
        handler = self.handlers.get(type(node))
        if handler is None:
            raise self.unsupported(node, UNSUPPORTED_STATEMENTS, "statements")
        return handler(node)

    def pass_stmt(self, node: ast.Pass) -> list[ir.Stmt]:
        return []

    def expr_stmt(self, node: ast.Expr) -> list[ir.Stmt]:
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return []  # a string used as a comment
        if isinstance(node.value, ast.Call):
            func = node.value.func
            called = None if self.scope.is_local(func) or not isinstance(
                func, (ast.Name, ast.Attribute)) else self.resolver.try_resolve(func)
            if called is kb.native:
                return [build_native(self.scope, node.value)]
            if called is print:
                return build_print(self.fb, node.value)
            if called is kb.store:
                return [self.fb.aggregates.wide_store(node.value)]
            expr = self.fb.calls.call(node.value, statement=True)
            return [ir.ExprStmt(expr, loc=self.loc(node))] if expr is not None else []
        self.fb.exprs.expr(node.value)  # checked, then dropped: it has no effect
        return []

    def if_stmt(self, node: ast.If) -> list[ir.Stmt]:
        cond = self.scope.truth(self.fb.exprs.expr(node.test), node.test)
        static = fold_expression(cond)
        if isinstance(static, ir.Const):  # a compile-time condition: build the branch taken
            return self.block(node.body if static.value else node.orelse)
        return [ir.If(cond, self.block(node.body), self.block(node.orelse), loc=self.loc(node))]

    # ------------------------------------------------------------ assignments

    def assign_stmt(self, node: ast.Assign) -> list[ir.Stmt]:
        out: list[ir.Stmt] = []
        for target in node.targets:
            out.extend(self.assign(target, node.value, node))
        return out

    def annotated_assign(self, node: ast.AnnAssign) -> list[ir.Stmt]:
        scope = self.scope
        if not isinstance(node.target, ast.Name):
            raise UnsupportedError("only simple names can be annotated", self.loc(node.target))
        name = node.target.id
        t = annotation_type(self.resolver, node.annotation, self.loc(node.annotation))
        if not is_value_type(t):
            raise UnsupportedError("annotated locals must be scalars, vectors, records or "
                                   "variants; make arrays with kiln.shared or kiln.local",
                                   self.loc(node.annotation))
        if name in scope.param_names:
            raise KernelTypeError(f"'{name}' is a parameter and cannot be re-declared",
                                  self.loc(node.target))
        if name in scope.fixed and scope.local_types[name] != t:
            raise KernelTypeError(f"'{name}' was declared {scope.local_types[name]}, cannot "
                                  f"re-declare it as {t}", self.loc(node.target))
        scope.local_types[name] = t
        scope.fixed.add(name)
        if node.value is None:
            scope.defined.add(name)
            return []
        return self.assign(node.target, node.value, node)

    def assign(self, target: ast.expr, value_node: ast.expr, stmt: ast.stmt) -> list[ir.Stmt]:
        expr = self.fb.exprs.expr
        if isinstance(target, ast.Tuple):
            return self.assign_tuple(target, value_node, stmt)
        if isinstance(target, ast.Subscript):
            component = self.fb.exprs.vector_component(target)
            if component is not None:  # v[1] = e is v.y = e
                return [self.fb.aggregates.assign_field(component, expr(value_node), stmt)]
            return [self.store(target, expr(value_node), stmt)]
        if isinstance(target, ast.Attribute):
            return [self.fb.aggregates.assign_field(target, expr(value_node), stmt)]
        if isinstance(value_node, ast.Subscript) and self.fb.views.is_view_key(value_node):
            if not isinstance(target, ast.Name):
                raise UnsupportedError("a view is bound to a name (row = m[i])",
                                       self.loc(target))
            return self.fb.views.bind_view(target.id, value_node, stmt)
        if not isinstance(target, ast.Name):
            raise UnsupportedError("can only assign to names, array elements and fields",
                                   self.loc(target))
        if isinstance(value_node, ast.Call) and self.is_array_constructor(value_node):
            self.declare_array(target.id, value_node)
            return []
        value = expr(value_node)
        return [self.scope.assign_name(target.id, value, self.loc(target), compound=False)]

    def assign_tuple(self, target: ast.Tuple, value_node: ast.expr,
                     stmt: ast.stmt) -> list[ir.Stmt]:
        out: list[ir.Stmt] = []
        if isinstance(value_node, ast.Tuple) and len(value_node.elts) == len(target.elts):
            values = [self.fb.exprs.expr(v) for v in value_node.elts]
        else:
            values = self.unpacked(value_node, len(target.elts), out)
        temps = []
        for v in values:  # evaluate every right-hand side before assigning (a, b = b, a)
            name = self.scope.temp(v.type)
            out.append(ir.Assign(name, v, loc=self.loc(stmt)))
            temps.append(ir.Var(v.type, name, loc=v.loc))
        for t_node, tmp in zip(target.elts, temps):
            if isinstance(t_node, ast.Subscript):
                out.append(self.store(t_node, tmp, stmt))
            elif isinstance(t_node, ast.Attribute):
                out.append(self.fb.aggregates.assign_field(t_node, tmp, stmt))
            elif isinstance(t_node, ast.Name):
                out.append(self.scope.assign_name(t_node.id, tmp, self.loc(t_node),
                                                  compound=False))
            else:
                raise UnsupportedError("can only assign to names and array elements",
                                       self.loc(t_node))
        return out

    def unpacked(self, node: ast.expr, count: int, out: list[ir.Stmt]) -> list[ir.Expr]:
        """The items of a tuple a device function returned (`x, y = f(a)`), read from a
        temporary that `out` gets."""
        value = None if isinstance(node, ast.Tuple) else self.fb.exprs.expr(node)
        t = value.type if value is not None else None
        if value is None or not (isinstance(t, StructType) and t.name.startswith("tuple[")):
            raise UnsupportedError("tuple assignment needs a tuple of the same length on the "
                                   "right, or a call of a device function returning one",
                                   self.loc(node))
        if len(t.fields) != count:
            raise KernelTypeError(f"cannot unpack a {t} into {count} names", self.loc(node))
        name = self.scope.temp(t)
        out.append(ir.Assign(name, value, loc=self.loc(node)))
        return [ir.Field(ft, ir.Var(t, name, loc=self.loc(node)), fname, loc=self.loc(node))
                for fname, ft in t.fields]

    def is_array_constructor(self, node: ast.Call) -> bool:
        """Whether `node` is `kiln.shared(...)` or `kiln.local(...)`."""
        if self.scope.is_local(node.func):
            return False
        return self.resolver.try_resolve(node.func) in (kb.shared, kb.local)

    def declare_array(self, name: str, call: ast.Call) -> None:
        scope = self.scope
        loc = self.loc(call)
        fn = self.resolver.resolve(call.func, self.loc(call.func))
        space = MemorySpace.SHARED if fn is kb.shared else MemorySpace.LOCAL
        if space is MemorySpace.SHARED and not scope.is_kernel:
            raise UnsupportedError("kiln.shared arrays can only be declared in kernels",
                                   loc)
        if len(call.args) != 2 or call.keywords:
            raise ArityError(f"kiln.{fn.name}(dtype, shape) takes 2 arguments", loc)
        elem = annotation_type(self.resolver, call.args[0], self.loc(call.args[0]))
        if not is_value_type(elem):
            raise KernelTypeError("the element type must be a scalar, vector, record or "
                                  "variant type such as f32", self.loc(call.args[0]))
        shape = self.fb.exprs.constant_shape(call.args[1], fn.name)
        # `Element` leaves out matrix fragments, which local arrays hold too
        # (kiln.local(kiln.fragment_a(bf16), 1))
        t = ArrayType(elem, len(shape), space, shape)  # type: ignore[arg-type]
        if name in scope.param_names or (name in scope.local_types
                                         and scope.local_types[name] != t):
            raise KernelTypeError(f"'{name}' is already a variable of another type", loc)
        scope.local_types[name] = t
        scope.defined.add(name)

    def store(self, target: ast.Subscript, value: ir.Expr, stmt: ast.stmt) -> ir.Stmt:
        array, indices = self.fb.exprs.subscript(target, "wrote")
        self.fb.exprs.writable(array, target)
        converted = convert(value, element_type(array), self.loc(target),
                                       compound=True, what=f"an element of '{array.name}'")
        return ir.Store(array, indices, converted, loc=self.loc(stmt))

    def update(self, node: ast.AugAssign) -> list[ir.Stmt]:
        """`x += e`, `a[i] += e`, `p.x += e` (the target's indices evaluated once)."""
        exprs = self.fb.exprs
        op = exprs.operator(node.op, node)
        if isinstance(node.target, ast.Name):
            current = exprs.read_name(node.target)
            result = exprs.binop(op, current, exprs.expr(node.value), node)
            return [self.scope.assign_name(node.target.id, result, self.loc(node.target),
                                           compound=True)]
        component = (exprs.vector_component(node.target)
                     if isinstance(node.target, ast.Subscript) else None)
        if component is not None:  # v[1] += e is v.y += e
            return [self.fb.aggregates.update_field(component, op, node.value, node)]
        if isinstance(node.target, ast.Subscript):
            return self.update_element(node.target, op, node)
        if isinstance(node.target, ast.Attribute):
            return [self.fb.aggregates.update_field(node.target, op, node.value, node)]
        raise UnsupportedError("can only update names, array elements and fields",
                               self.loc(node))

    def update_element(self, target: ast.Subscript, op: str,
                       node: ast.AugAssign) -> list[ir.Stmt]:
        exprs = self.fb.exprs
        out: list[ir.Stmt] = []
        array, indices = exprs.subscript(target, "read")  # as an array's, read first
        exprs.writable(array, target)
        bound: list[ir.Expr] = []
        for idx in indices:  # evaluate index expressions once
            if isinstance(idx, (ir.Const, ir.Var)):
                bound.append(idx)
            else:
                name = self.scope.temp(idx.type)
                out.append(ir.Assign(name, idx, loc=idx.loc))
                bound.append(ir.Var(idx.type, name, loc=idx.loc))
        elem = element_type(array)
        current = ir.Load(elem, array, bound, loc=self.loc(target))
        result = exprs.binop(op, current, exprs.expr(node.value), node)
        converted = convert(result, elem, self.loc(node), compound=True,
                                       what=f"an element of '{array.name}'")
        out.append(ir.Store(array, list(bound), converted, loc=self.loc(node)))
        return out
