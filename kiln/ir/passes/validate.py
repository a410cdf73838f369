"""The structural type check: does a Program keep the promises of docs/ir-conventions.md?

The frontend builds well-typed IR, so a violation here is a bug in kiln (the frontend or a
pass), reported as an `InternalError` at the offending node. The one user-facing rule is
that shared arrays are declared only in kernels.
"""

from __future__ import annotations

from typing import NoReturn

import numpy as np

from ...errors import KernelError, UnsupportedError
from .. import nodes as ir
from ..enums import MemorySpace
from ..intrinsics import IntrinsicTypeError, intrinsics, typing_of
from ..types import (
    COMPONENTS,
    ArrayType,
    ScalarType,
    StructType,
    Type,
    VariantType,
    VectorType,
    VoidType,
    bool_,
    i32,
    i64,
)
from ..visit import Visitor, child_blocks, child_exprs, walk


class InternalError(KernelError):
    kind = "internal compiler error"


INDEX_TYPES = (i32, i64)
SHIFTS = ("<<", ">>")
BINOPS = ("+", "-", "*", "/", "//", "%", "**", "<<", ">>", "&", "|", "^")
COMPARES = ("<", "<=", ">", ">=", "==", "!=")
UNARY = ("-", "+", "~", "not")


def validate(program: ir.Program) -> None:
    """Raise InternalError at the first node that breaks the IR conventions."""
    seen: set[str] = set()
    for func in [*program.functions, program.kernel]:
        _Validator(program, func, seen).run()
        seen.add(func.name)


def _calling(program: ir.Program, name: str) -> set[str]:
    """Functions of the program from which a chain of calls reaches `name`."""
    callers = {f.name: {n.func for n in walk(f.body) if isinstance(n, ir.Call)}
               for f in program.functions}
    found: set[str] = set()
    changed = True
    while changed:
        changed = False
        for caller, callees in callers.items():
            if caller not in found and (name in callees or callees & found):
                found.add(caller)
                changed = True
    return found


class _Validator(Visitor[None]):
    """Checks one function: `visit_<Node>` holds each node kind's rules."""

    def __init__(self, program: ir.Program, func: ir.Function, earlier: set[str]) -> None:
        self.program = program
        self.func = func
        # callees first, except along recursion (functions that call back into this one)
        self.callable = earlier | {func.name} | _calling(program, func.name)
        self.vars: dict[str, Type] = {p.name: p.type for p in func.params}
        self.loc: ir.Loc | None = func.loc
        self.blocks: ir.BlockLoop | None = None  # inside the kernel's block loop
        self.in_threads = False  # inside one of its thread loops
        self.depth = 0  # loops around the statement being checked

    def fail(self, message: str, node: ir.Expr | ir.Stmt | None = None) -> NoReturn:
        loc = (node.loc if node is not None else None) or self.loc
        raise InternalError(
            f"invalid IR in `{self.func.name}`: {message} (this is a bug in kiln; please "
            "report it)", loc)

    def require(self, ok: bool, message: str, node: ir.Expr | ir.Stmt | None = None) -> None:
        if not ok:
            self.fail(message, node)

    def run(self) -> None:
        func = self.func
        clash = [p.name for p in func.params if p.name in func.locals]
        self.require(not clash, f"parameters {clash} are also declared as locals")
        self.require(func.is_kernel <= isinstance(func.return_type, VoidType),
                     "a kernel must return void")
        self.vars.update(func.locals)
        for name, t in func.locals.items():
            if isinstance(t, ArrayType):
                self.check_fixed_array(name, t)
        self.block(func.body, loop_depth=0)

    def check_fixed_array(self, name: str, t: ArrayType) -> None:
        if t.space is MemorySpace.SHARED and not self.func.is_kernel:
            raise UnsupportedError(
                f"shared array `{name}` in device function `{self.func.name}`: shared arrays "
                "can only be declared in a kernel (pass one to the function instead)",
                self.func.loc)
        self.require(t.space is not MemorySpace.GLOBAL,
                     f"local `{name}` is a global array; only parameters may be")
        shape = t.shape or ()
        self.require(len(shape) == t.ndim and all(isinstance(n, int) and n > 0 for n in shape),
                     f"array `{name}` has shape {t.shape} for {t.ndim} dimension(s)")

    # ------------------------------------------------------------ statements

    def block(self, body: list[ir.Stmt], loop_depth: int) -> None:
        for stmt in body:
            self.loc = stmt.loc or self.loc
            self.stmt(stmt, loop_depth)

    def stmt(self, s: ir.Stmt, depth: int) -> None:
        """Check `s` at a loop nesting `depth` (its `visit_<Stmt>` reads `self.depth`)."""
        outer, self.depth = self.depth, depth
        self.visit(s)
        self.depth = outer

    def visit_Assign(self, s: ir.Assign) -> None:
        t = self.vars.get(s.target)
        self.require(t is not None, f"assignment to undeclared `{s.target}`", s)
        self.require(not isinstance(t, ArrayType), f"assignment to array `{s.target}`", s)
        self.same(self.expr(s.value), t, f"value assigned to `{s.target}`", s)

    def visit_Store(self, s: ir.Store) -> None:
        elem = self.indexed(s.array, s.indices, s)
        t = self.expr(s.value)
        self.same(t, _accessed(t, elem), f"value stored to `{s.array.name}`", s)

    def visit_SetField(self, s: ir.SetField) -> None:
        self.place(s.target, s)
        self.same(self.expr(s.value), self.field_type(self.expr(s.target), s.name, s),
                  f"value of field `{s.name}`", s)

    def visit_If(self, s: ir.If) -> None:
        self.condition(s.cond, s)
        self.block(s.then, self.depth)
        self.block(s.orelse, self.depth)

    def visit_While(self, s: ir.While) -> None:
        self.condition(s.cond, s)
        self.block(s.body, self.depth + 1)

    def visit_Break(self, s: ir.Break | ir.Continue) -> None:
        self.require(self.depth > 0, f"`{type(s).__name__.lower()}` outside a loop", s)

    visit_Continue = visit_Break

    def visit_Return(self, s: ir.Return) -> None:
        rt = self.func.return_type
        if s.value is None:
            self.require(isinstance(rt, VoidType), "`return` without a value", s)
        else:
            self.require(not isinstance(rt, VoidType), "`return` with a value in a void function",
                         s)
            self.same(self.expr(s.value), rt, "returned value", s)

    def visit_VectorAccess(self, s: ir.VectorAccess) -> None:
        self.require(len(s.body) in (2, 4) and all(
            isinstance(b, ir.Store) or isinstance(b, ir.Assign) and isinstance(b.value, ir.Load)
            for b in s.body), "a vector access that is not 2 or 4 loads or stores", s)
        self.block(s.body, self.depth)

    def generic_visit(self, node: ir.Expr | ir.Stmt) -> None:
        """Expressions and statements without rules of their own: their parts are checked
        (ExprStmt; kinds a later lowering adds)."""
        for e in child_exprs(node):
            self.expr(e)
        if isinstance(node, ir.Stmt):
            for body in child_blocks(node):
                self.block(body, self.depth)

    # ------------------------------------------------------------ explicit block and thread loops

    def visit_BlockLoop(self, s: ir.BlockLoop) -> None:
        """The nodes of `lower_thread_loops` (docs/ir-conventions.md)."""
        self.require(self.func.is_kernel and self.func.body == [s],
                     "a block loop that is not its kernel's whole body", s)
        self.declared([*s.thread_vars, *s.block_vars], s)
        self.blocks = s
        self.block(s.body, self.depth)

    def visit_Induction(self, s: ir.Induction) -> None:
        t = self.func.locals.get(s.var)
        self.require(isinstance(t, ScalarType) and t.is_int,
                     f"induction variable `{s.var}` is not an integer local", s)
        self.same(self.expr(s.init), t, "induction start", s)
        self.same(self.expr(s.step), t, "induction step", s)

    def visit_ThreadLoop(self, s: ir.ThreadLoop | ir.LockstepLoop) -> None:
        self.require(self.blocks is not None and not self.in_threads,
                     "a thread loop outside a block loop, or inside another", s)
        assert self.blocks is not None
        self.declared(s.private, s)
        outer = {*self.blocks.thread_vars, *self.blocks.block_vars}
        self.require(set(s.loads) <= outer and set(s.stores) <= set(s.loads),
                     "a thread loop loads or stores what is not thread or block storage", s)
        self.require(not any(isinstance(n, ir.IntrinsicCall) and intrinsics[n.name].convergent
                             for n in walk(s)), "a barrier inside a thread loop", s)
        self.in_threads = True
        depth = self.depth
        if isinstance(s, ir.LockstepLoop):
            self.block(s.setup, depth)
            for induction in s.inductions:
                self.stmt(induction, depth)
            self.condition(s.cond, s)
            depth += 1
        self.block(s.body, depth)
        self.in_threads = False

    visit_LockstepLoop = visit_ThreadLoop

    def declared(self, names: list[str], s: ir.Stmt) -> None:
        unknown = [n for n in names if n not in self.vars]
        self.require(not unknown, f"undeclared variables {unknown}", s)

    def condition(self, cond: ir.Expr, s: ir.Stmt) -> None:
        self.same(self.expr(cond), bool_, "condition", s)

    def visit_For(self, s: ir.For) -> None:
        t = self.func.locals.get(s.var)
        self.require(isinstance(t, ScalarType) and t.is_int,
                     f"loop variable `{s.var}` is not an integer local", s)
        for part, e in (("start", s.start), ("stop", s.stop), ("step", s.step)):
            self.same(self.expr(e), t, f"loop {part}", s)
        self.require(isinstance(s.stop, (ir.Const, ir.Var)) and isinstance(s.step, (ir.Const,
                                                                                 ir.Var)),
                     "loop stop and step must be constants or variables", s)
        self.require(not (isinstance(s.step, ir.Const) and s.step.value == 0),
                     "constant loop step 0", s)
        fixed = {s.var} | {e.name for e in (s.stop, s.step) if isinstance(e, ir.Var)}
        for node in walk(s.body):
            if isinstance(node, ir.Assign):
                self.require(node.target not in fixed,
                             f"loop body assigns `{node.target}`, which the loop fixes", node)
        self.block(s.body, self.depth + 1)

    # ------------------------------------------------------------ expressions

    def same(self, actual: Type, expected: Type | None, what: str,
             node: ir.Expr | ir.Stmt) -> None:
        self.require(actual == expected, f"{what} has type {actual}, expected {expected}", node)

    def scalar(self, t: Type, what: str, node: ir.Expr) -> ScalarType:
        self.require(isinstance(t, ScalarType), f"{what} has non-scalar type {t}", node)
        assert isinstance(t, ScalarType)
        return t

    def expr(self, e: ir.Expr) -> Type:
        """Check `e` (its `visit_<Expr>`) and return its type."""
        self.visit(e)
        return e.type

    def visit_Const(self, e: ir.Const) -> None:
        value = e.value
        t = self.scalar(e.type, "constant", e)
        self.require(isinstance(value, (bool, int, float)) or hasattr(value, "item"),
                     f"constant {value!r} is not a number", e)
        self.require(not t.is_int or not isinstance(value, (float, np.floating)),
                     f"{t} constant {value!r} is not an integer", e)

    def visit_Var(self, e: ir.Var) -> None:
        declared = self.vars.get(e.name)
        self.require(declared is not None, f"unknown variable `{e.name}`", e)
        self.same(e.type, declared, f"variable `{e.name}`", e)

    def visit_BinOp(self, e: ir.BinOp) -> None:
        op = e.op
        left_type, rt = self.expr(e.left), self.expr(e.right)
        lt = self.scalar(_element(left_type), "operand", e)
        self.require(op in BINOPS, f"unknown operator {op!r}", e)
        if op in SHIFTS and isinstance(left_type, ScalarType):
            rs = self.scalar(rt, "shift count", e)
            self.require(lt.is_int and rs.is_int, f"shift of {lt} by {rs}", e)
        else:
            self.same(rt, left_type, f"right operand of {op!r}", e)
        self.require(op != "/" or lt.is_float, f"'/' on {lt}", e)
        self.same(e.type, left_type, f"result of {op!r}", e)

    def visit_Compare(self, e: ir.Compare) -> None:
        self.require(e.op in COMPARES, f"unknown comparison {e.op!r}", e)
        lt = self.expr(e.left)
        self.same(self.expr(e.right), lt, f"right operand of {e.op!r}", e)
        expected = VectorType(bool_, lt.n) if isinstance(lt, VectorType) else bool_
        self.same(e.type, expected, "comparison", e)

    def visit_UnaryOp(self, e: ir.UnaryOp) -> None:
        self.require(e.op in UNARY, f"unknown unary operator {e.op!r}", e)
        t = self.expr(e.operand)
        if e.op == "not":
            self.same(_element(t), bool_, "operand of `not`", e)
        self.same(e.type, t, f"result of {e.op!r}", e)

    def visit_BoolOp(self, e: ir.BoolOp) -> None:
        self.require(len(e.values) >= 2, f"`{e.op}` of {len(e.values)} value(s)", e)
        for v in e.values:
            self.same(self.expr(v), bool_, f"operand of `{e.op}`", e)
        self.same(e.type, bool_, f"result of `{e.op}`", e)

    def visit_Select(self, e: ir.Select) -> None:
        self.same(self.expr(e.cond), bool_, "condition", e)
        self.same(self.expr(e.if_true), e.type, "first branch", e)
        self.same(self.expr(e.if_false), e.type, "second branch", e)

    def visit_Field(self, e: ir.Field) -> None:
        self.same(e.type, self.field_type(self.expr(e.value), e.name, e), f"field `{e.name}`", e)

    def visit_Load(self, e: ir.Load) -> None:
        elem = self.indexed(e.array, e.indices, e)
        self.same(e.type, _accessed(e.type, elem), f"load from `{e.array.name}`", e)

    def visit_ArrayDim(self, e: ir.ArrayDim) -> None:
        t = self.expr(e.array)
        self.require(isinstance(t, ArrayType) and 0 <= e.axis < t.ndim,
                     f"shape[{e.axis}] of `{e.array.name}` ({t})", e)
        self.same(e.type, i32, "array dimension", e)

    def indexed(self, array: ir.Var, indices: list[ir.Expr], node: ir.Expr | ir.Stmt) -> Type:
        t = self.expr(array)
        self.require(isinstance(t, ArrayType), f"`{array.name}` ({t}) is not an array", node)
        assert isinstance(t, ArrayType)
        self.require(len(indices) == t.ndim,
                     f"{len(indices)} index(es) into {t.ndim}-d `{array.name}`", node)
        for index in indices:
            it = self.expr(index)
            self.require(it in INDEX_TYPES, f"index of `{array.name}` has type {it}", node)
        return t.elem

    def visit_CheckedIndex(self, e: ir.CheckedIndex) -> None:
        self.same(e.type, self.expr(e.value), "checked index", e)
        self.require(e.type in INDEX_TYPES, f"checked index has type {e.type}", e)
        extent = self.expr(e.extent)
        self.require(extent in INDEX_TYPES, f"extent of a checked index has type {extent}", e)

    def visit_Call(self, e: ir.Call) -> None:
        self.require(e.func in self.callable, f"call of `{e.func}`, not defined before", e)
        callee = self.func if e.func == self.func.name else self.program.function(e.func)
        self.require(len(e.args) == len(callee.params),
                     f"`{e.func}` takes {len(callee.params)} argument(s), got {len(e.args)}", e)
        for arg, param in zip(e.args, callee.params):
            self.same(self.expr(arg), param.type, f"argument `{param.name}` of `{e.func}`", e)
            self.require(not isinstance(param.type, ArrayType) or isinstance(arg, ir.Var),
                         f"array argument `{param.name}` of `{e.func}` is not a variable", e)
        self.same(e.type, callee.return_type, f"result of `{e.func}`", e)

    def visit_IntrinsicCall(self, e: ir.IntrinsicCall) -> None:
        self.require(e.name in intrinsics, f"unknown intrinsic `{e.name}`", e)
        self.require(self.blocks is None or self.in_threads or not e.name.startswith("thread_"),
                     f"{e.name} at block level", e)
        arg_types = [self.expr(a) for a in e.args]
        spec = intrinsics[e.name]
        try:
            params, result = typing_of(spec, arg_types)
        except IntrinsicTypeError as exc:
            self.fail(f"{e.name}: {exc}", e)
        self.require(list(params) == arg_types,
                     f"{e.name} takes {params}, got {arg_types}", e)
        self.same(e.type, result, f"result of {e.name}", e)
        if spec.category == "atomic":
            self.require(isinstance(e.args[0], ir.Var), f"{e.name} of a non-variable array", e)

    # ------------------------------------------------------------ records and vectors

    def field_type(self, t: Type, name: str, node: ir.Expr | ir.Stmt) -> Type:
        if isinstance(t, VectorType):
            self.require(name in COMPONENTS[: t.n], f"{t} has no component `{name}`", node)
            return t.elem
        self.require(isinstance(t, (StructType, VariantType)), f"field `{name}` of a {t}", node)
        assert isinstance(t, (StructType, VariantType))
        ft = t.field_type(name)
        self.require(ft is not None, f"{t} has no field `{name}`", node)
        assert ft is not None
        return ft

    def place(self, target: ir.Expr, node: ir.Stmt) -> None:
        root = target
        while isinstance(root, ir.Field):
            root = root.value
        self.require(isinstance(root, ir.Load) or (isinstance(root, ir.Var) and not isinstance(
            root.type, ArrayType)), "field assignment to something other than a variable or "
            "an array element", node)

    def visit_Cast(self, e: ir.Cast) -> None:
        src, t = self.expr(e.value), e.type
        if isinstance(t, VectorType):
            self.require(isinstance(src, VectorType) and src.n == t.n,
                         f"cast of {src} to {t}", e)
        elif isinstance(t, VariantType):
            self.require(t.case_index(src) is not None, f"{src} is not a case of {t}", e)
        else:
            self.scalar(src, "cast operand", e)
            self.scalar(t, "cast", e)

    def visit_Construct(self, e: ir.Construct) -> None:
        t, values = e.type, [self.expr(v) for v in e.values]
        if isinstance(t, VectorType):
            self.require(len(values) in (1, t.n), f"{t} from {len(values)} value(s)", e)
            for v in values:
                self.same(v, t.elem, f"component of {t}", e)
            return
        self.require(isinstance(t, StructType), f"construction of a {t}", e)
        assert isinstance(t, StructType)
        self.require(len(values) == len(t.fields), f"{t} from {len(values)} value(s)", e)
        for v, (name, ft) in zip(values, t.fields):
            self.same(v, ft, f"field `{name}` of {t}", e)


def _element(t: Type) -> Type:
    """A vector's element type; any other type itself."""
    return t.elem if isinstance(t, VectorType) else t


def _accessed(t: Type, elem: Type) -> Type:
    """The type a load or store of a `t` from an array of `elem` must have: the element, or
    a vector of it (`kiln.load(f32x4, a, i)` of a scalar array, before `lower_aggregates`)."""
    if isinstance(t, VectorType) and isinstance(elem, ScalarType) and t.elem == elem:
        return t
    return elem
