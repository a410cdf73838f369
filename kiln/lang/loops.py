"""Loops: `while`, `for i in range(...)`, and the loops kiln unrolls.

`for` takes `range(...)` only; its bounds and step are evaluated once before the loop (as
Python does), and its variable is a local of the bounds' common type, widened like any
other local. `kiln.static_range(...)` and `kiln.unroll(range(...))` with constant bounds
build the body once per iteration with the variable a constant; `kiln.unroll(range(...),
factor=k)` keeps the loop and asks the backend's compiler to unroll it.
"""

from __future__ import annotations

import ast

import numpy as np

from ..errors import ArityError, ConstantError, KernelError, KernelTypeError, UnsupportedError
from ..ir import nodes as ir
from ..ir.types import ScalarType, i32
from . import builtins as kb
from .conversions import cast, common_type, literal_value
from .part import Part

_UNSET = object()


class Loops(Part):
    """Builds loops and the statements that leave them."""

    def while_loop(self, node: ast.While) -> list[ir.Stmt]:
        if node.orelse:
            raise UnsupportedError("`while ... else` is not supported in kernels",
                                   self.loc(node))
        cond = self.scope.truth(self.fb.exprs.expr(node.test), node.test)
        return [ir.While(cond, self.loop_body(node.body), loc=self.loc(node))]

    def loop_body(self, body: list[ast.stmt]) -> list[ir.Stmt]:
        self.scope.loop_depth += 1
        built = self.fb.stmts.block(body)
        self.scope.loop_depth -= 1
        return built

    def break_stmt(self, node: ast.Break) -> list[ir.Stmt]:
        if not self.scope.loop_depth:
            raise KernelError("`break` outside a loop", self.loc(node))
        return [ir.Break(loc=self.loc(node))]

    def continue_stmt(self, node: ast.Continue) -> list[ir.Stmt]:
        if not self.scope.loop_depth:
            raise KernelError("`continue` outside a loop", self.loc(node))
        return [ir.Continue(loc=self.loc(node))]

    # ------------------------------------------------------------ for

    def for_loop(self, node: ast.For) -> list[ir.Stmt]:
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
                return self.unroll_hinted_for(node, it)
            return self.unrolled_for(node, node.target, it)
        if not (isinstance(it, ast.Call) and self.resolver.try_resolve(it.func) is range):
            raise UnsupportedError("kernels loop with `for i in range(...)` only",
                                   self.loc(it))
        return self.range_loop(node, node.target, it)

    def range_loop(self, node: ast.For, target: ast.Name, it: ast.Call) -> list[ir.Stmt]:
        """`for var in range(start, stop, step)`: stop and step bound once, unless they are
        constants or variables the body does not assign."""
        loc = self.loc(node)
        args = self.range_arguments(it, loc)
        var = target.id
        assigned = {n.id for s in node.body for n in ast.walk(s)
                    if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        if var in assigned:
            raise UnsupportedError(f"the loop variable '{var}' cannot be assigned inside "
                                   "the loop", loc)
        loop_type = common_type(args)
        if literal_value(args[2]) == 0:
            raise KernelError("range() step must not be zero", self.loc(it.args[2]))
        out: list[ir.Stmt] = []
        bounds: list[ir.Expr] = []
        for a in args[1:]:
            a = cast(a, loop_type)
            if isinstance(a, ir.Const) or (isinstance(a, ir.Var) and a.name not in assigned):
                bounds.append(a)
            else:
                name = self.scope.temp(loop_type)
                out.append(ir.Assign(name, a, loc=a.loc))
                bounds.append(ir.Var(loop_type, name, loc=a.loc))
        start = cast(args[0], loop_type)
        var_type = self.loop_variable(var, loop_type, target)
        if var_type != loop_type:
            start = cast(start, var_type)
            bounds = [cast(b, var_type) for b in bounds]
        self.scope.defined.add(var)
        out.append(ir.For(var, start, bounds[0], bounds[1], self.loop_body(node.body), loc=loc))
        return out

    def range_arguments(self, it: ast.Call, loc: ir.Loc) -> list[ir.Expr]:
        """start, stop and step of `range(...)`, integers (start 0 and step 1 by default)."""
        if not 1 <= len(it.args) <= 3 or it.keywords:
            raise ArityError(f"range takes 1 to 3 arguments, got {len(it.args)}", self.loc(it))
        args = [self.fb.exprs.expr(a) for a in it.args]
        for a, a_node in zip(args, it.args):
            if not (isinstance(a.type, ScalarType) and (a.type.is_int or a.type.is_bool)):
                raise KernelTypeError(f"range arguments must be integers, got {a.type}",
                                      self.loc(a_node))
        if len(args) == 1:
            args = [ir.Const(i32, 0, loc=args[0].loc), args[0]]
        if len(args) == 2:
            args.append(ir.Const(i32, 1, loc=loc))
        return args

    def loop_variable(self, var: str, loop_type: ScalarType, target: ast.Name) -> ScalarType:
        """The type of loop variable `var` over `loop_type` values: that type for a new
        name, else the name's type widened to take them."""
        scope = self.scope
        current = scope.type_of(var)
        if var in scope.param_names or (var in scope.fixed and current != loop_type) \
                or (current is not None and not isinstance(current, ScalarType)):
            raise KernelTypeError(f"'{var}' is a {current} variable, cannot loop over "
                                  f"{loop_type} values with it", self.loc(target))
        if current is None:
            scope.local_types[var] = loop_type
            return loop_type
        return scope.widen(var, current, loop_type) if current != loop_type else loop_type

    # ------------------------------------------------------------ unrolling

    def unroll_hinted_for(self, node: ast.For, call: ast.Call) -> list[ir.Stmt]:
        """`for i in kiln.unroll(range(...), factor=k)`: a loop (bounds may vary at run time)
        that the backend's compiler is asked to unroll k times (`#pragma unroll k`)."""
        factor_node = next(kw.value for kw in call.keywords if kw.arg == "factor")
        factor = self.fb.exprs.constant(factor_node)
        if not isinstance(factor, (int, np.integer)) or isinstance(factor, bool) or factor < 1:
            raise ConstantError("factor= needs a positive int constant", self.loc(factor_node))
        inner = call.args[0] if len(call.args) == 1 and len(call.keywords) == 1 else None
        if self.resolver.try_resolve(call.func) is not kb.unroll or not (
                isinstance(inner, ast.Call) and self.resolver.try_resolve(inner.func) is range):
            raise UnsupportedError("write kiln.unroll(range(...), factor=k)", self.loc(call))
        loop_node = ast.copy_location(ast.For(target=node.target, iter=inner, body=node.body,
                                              orelse=[]), node)
        out = self.for_loop(loop_node)
        loop = out[-1]
        assert isinstance(loop, ir.For)
        loop.unroll = int(factor)
        return out

    def unrolled_for(self, node: ast.For, target: ast.Name, call: ast.Call) -> list[ir.Stmt]:
        """`for i in kiln.static_range(...)` / `kiln.unroll(range(...))`: one copy of the
        body per iteration, with `i` a compile-time constant in each."""
        scope = self.scope
        bounds = self.constant_bounds(call)
        for inner_node in (n for s in node.body for n in ast.walk(s)):
            if isinstance(inner_node, (ast.Break, ast.Continue)) and not _inside_loop(
                    node, inner_node):
                raise UnsupportedError("break and continue are not allowed in an unrolled "
                                       "loop", self.loc(inner_node))
        var = target.id
        if var in scope.param_names or var in scope.local_types:
            raise KernelTypeError(f"the unrolled loop variable '{var}' must be a new name",
                                  self.loc(target))
        out: list[ir.Stmt] = []
        saved = scope.constants.get(var, _UNSET)
        try:
            for value in range(*bounds):
                scope.constants[var] = value
                out.extend(self.fb.stmts.block(node.body))
        finally:
            if saved is _UNSET:
                scope.constants.pop(var, None)
            else:
                scope.constants[var] = saved
        return out

    def constant_bounds(self, call: ast.Call) -> list[int]:
        """The arguments of the `range` a `static_range` or `unroll` call takes, constants."""
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
            value = self.fb.exprs.constant(a)
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
                raise ConstantError("an unrolled loop needs constant integer bounds (for bounds "
                                    "known at run time, kiln.unroll(range(...), factor=k) "
                                    "asks the backend's compiler to unroll)", self.loc(a))
            bounds.append(int(value))
        return bounds


def _inside_loop(outer: ast.For, target: ast.AST) -> bool:
    """Whether `target` sits in a loop nested inside `outer` (so it does not leave `outer`)."""
    for stmt in outer.body:
        for node in ast.walk(stmt):
            if isinstance(node, (ast.For, ast.While)) and any(
                    n is target for n in ast.walk(node)):
                return True
    return False
