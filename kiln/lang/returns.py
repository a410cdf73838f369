"""`return`: the return type device functions infer (widened like a local), tuples
returned as anonymous records, and self tail calls turned into loops.
"""

from __future__ import annotations

import ast

from ..errors import KernelTypeError
from ..ir import nodes as ir
from ..ir.types import ArrayType, ScalarType, StructType, void
from .conversions import cast, convert, is_value_type
from .part import Part
from .scope import Retry
from .typing_rules import unify


class Returns(Part):
    """Builds `return` statements and infers the function's return type."""

    def return_stmt(self, node: ast.Return) -> list[ir.Stmt]:
        scope = self.scope
        loc = self.loc(node)
        if node.value is None:
            if not scope.is_kernel and scope.return_type not in (None, void):
                raise KernelTypeError(f"{scope.name} returns {scope.return_type} elsewhere; "
                                      "every return needs a value", loc)
            scope.return_type = void if scope.return_type is None else scope.return_type
            return [ir.Return(None, loc=loc)]
        if scope.is_kernel:
            raise KernelTypeError("kernels cannot return a value; write results to an array",
                                  self.loc(node.value))
        if isinstance(node.value, ast.Call) and self.is_tail_call(node.value):
            return self.tail_call(node.value)
        value = (self.tuple_value(node.value) if isinstance(node.value, ast.Tuple)
                 else self.fb.exprs.expr(node.value))
        if not is_value_type(value.type):
            raise KernelTypeError(f"{scope.name} returns a {value.type}: device functions "
                                  "return scalars, vectors, records, variants and tuples of "
                                  "them (write arrays in place)", self.loc(node.value))
        if scope.return_fixed and scope.return_type is not None:
            return [ir.Return(convert(value, scope.return_type, loc,
                                            what=f"the return value of {scope.name}"), loc=loc)]
        if not isinstance(value.type, ScalarType):
            return [self.aggregate_return(value, node.value, loc)]
        return [ir.Return(cast(value, self.inferred_return(value.type, node, node.value)),
                          loc=loc)]

    def inferred_return(self, t: ScalarType, node: ast.Return, value: ast.expr) -> ScalarType:
        """The return type with a return of a `t` (`Retry` when it widened)."""
        scope = self.scope
        current = scope.return_type
        if current is None:
            scope.return_type = t
            return t
        if current == void:
            raise KernelTypeError(f"{scope.name} returns no value elsewhere", self.loc(node))
        if not isinstance(current, ScalarType):  # a vector, record or tuple elsewhere
            raise self.mismatch(t, current, self.loc(value))
        wider = unify(current, t)
        if wider != current:
            scope.return_type = wider
            raise Retry
        return current

    def aggregate_return(self, value: ir.Expr, node: ast.expr, loc: ir.Loc) -> ir.Stmt:
        """`return v` of a vector, record, variant or tuple: one type on every path."""
        scope = self.scope
        if scope.return_type is None:
            scope.return_type = value.type
        elif scope.return_type != value.type:
            raise self.mismatch(value.type, scope.return_type, self.loc(node))
        return ir.Return(value, loc=loc)

    def mismatch(self, t: object, elsewhere: object, loc: ir.Loc) -> KernelTypeError:
        return KernelTypeError(f"{self.scope.name} returns a {t} here but "
                               f"{elsewhere or 'no value'} elsewhere", loc)

    def tuple_value(self, node: ast.Tuple) -> ir.Expr:
        """`(a, b)` returned by a device function: an anonymous record with fields _0, _1,
        ..., which the caller unpacks (`x, y = f()`)."""
        values = [self.fb.exprs.expr(v) for v in node.elts]
        for v, elt in zip(values, node.elts):
            if not is_value_type(v.type) or isinstance(v.type, StructType) \
                    and v.type.name.startswith("tuple["):
                raise KernelTypeError(f"a returned tuple holds scalars, vectors, records and "
                                      f"variants, not a {v.type}", self.loc(elt))
        t = StructType(f"tuple[{', '.join(str(v.type) for v in values)}]",
                       tuple((f"_{i}", v.type) for i, v in enumerate(values)))
        return ir.Construct(t, values, loc=self.loc(node))

    # ------------------------------------------------------------ tail calls

    def is_self_call(self, node: ast.Call) -> bool:
        if self.scope.is_local(node.func):
            return False
        return getattr(self.resolver.try_resolve(node.func), "pyfunc", None) is self.fb.pyfunc

    def is_tail_call(self, node: ast.Call) -> bool:
        """`return f(args)` inside `f`, outside loops, with positional arguments, the same
        constexpr values and the array parameters passed unchanged. Any other call of `f`
        by itself is recursion (see `ProgramContext.specialize`)."""
        scope = self.scope
        params = scope.parsed.tree.args.args
        if not self.is_self_call(node) or scope.loop_depth:
            return False
        if node.keywords or len(node.args) != len(params):
            return False
        for a_node, a in zip(node.args, params):
            if a.arg in scope.constants \
                    and self.fb.exprs.constant(a_node) != scope.constants[a.arg]:
                return False
            if isinstance(scope.param_names.get(a.arg), ArrayType) and not (
                    isinstance(a_node, ast.Name) and a_node.id == a.arg):
                return False
        return True

    def tail_call(self, call: ast.Call) -> list[ir.Stmt]:
        """`return f(args)` inside `f`: rebind the parameters and jump back to the top
        (the body is wrapped in a loop by `FunctionBuilder.build`)."""
        scope = self.scope
        loc = self.loc(call)
        out: list[ir.Stmt] = []
        rebinds: list[ir.Stmt] = []
        for a_node, a in zip(call.args, scope.parsed.tree.args.args):
            ptype = scope.param_names.get(a.arg)
            if ptype is None or isinstance(ptype, ArrayType):
                continue  # constexpr values and arrays are passed unchanged
            value = convert(self.fb.exprs.expr(a_node), ptype, self.loc(a_node),
                                  what=f"parameter '{a.arg}' of {scope.name}")
            tmp = scope.temp(ptype)
            out.append(ir.Assign(tmp, value, loc=loc))
            rebinds.append(ir.Assign(a.arg, ir.Var(ptype, tmp, loc=loc), loc=loc))
        scope.has_tail_call = True
        return out + rebinds + [ir.Continue(loc=loc)]
