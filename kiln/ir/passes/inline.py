"""Inlining of every device function call, for backends that cannot call functions.

A call is replaced by the callee's body:
- scalar arguments are bound to fresh locals (in argument order), array parameters are
  replaced by the caller's array variables, and the callee's locals get fresh names;
- calls nested in expressions are hoisted into statements before their statement, keeping
  Python's evaluation order (operands evaluated before a call that may read memory are
  bound to temporaries first), short-circuits of `and`/`or`, conditional expressions, and
  `while` conditions (which become `while True: ...; if not cond: break`);
- returns are lowered to assignments of the result: by nesting the rest of a block into the
  `else` of an `if` that always returns when that suffices, otherwise by running the body in
  a `while True: ...; break` that a return leaves with `break` (a flag carries the return
  out of loops of the callee).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...errors import UnsupportedError
from .. import nodes as ir
from ..enums import MemorySpace
from ..types import ArrayType, Type, bool_, is_aggregate
from ..visit import Transformer, Visitor, child_blocks, child_exprs, map_exprs, walk
from .common import clone, clone_program, has_side_effects


def inline_functions(program: ir.Program) -> ir.Program:
    """A new program in which the kernel calls no device function (the input is not changed).

    Recursive functions cannot be inlined: UnsupportedError at the recursive call.
    """
    return _inline(program, lambda _: True, "this backend inlines every device function")


def inline_aggregate_returns(program: ir.Program) -> ir.Program:
    """A new program in which no function returning a vector, record, variant or tuple is
    called: their calls are inlined, so `lower_aggregates` sees their results as values
    assigned to locals (every backend; such a function cannot recurse)."""
    if not any(is_aggregate(f.return_type) for f in program.functions):
        return program
    return _inline(program, lambda f: is_aggregate(f.return_type),
                   "device functions returning vectors, records or tuples are inlined")


def _inline(program: ir.Program, wanted: Callable[[ir.Function], bool], why: str
            ) -> ir.Program:
    program = clone_program(program)
    names = {f.name for f in program.functions if wanted(f)}
    inlined: dict[str, ir.Function] = {}
    kept = []
    for func in program.functions:
        _Inliner(func, inlined, names, why).run()
        if func.name in names:
            inlined[func.name] = func
        else:
            kept.append(func)
    _Inliner(program.kernel, inlined, names, why).run()
    return ir.Program(program.kernel, kept, program.checks, program.tables)


def _stable(e: ir.Expr) -> bool:
    """Whether `e` has the same value before and after a call (it reads no memory)."""
    return not any(isinstance(n, ir.Load) for n in walk(e)) and not has_side_effects(e)


def _has_return(node: ir.Stmt | list[ir.Stmt]) -> bool:
    return any(isinstance(n, ir.Return) for n in walk(node))


class _Inliner(Visitor[Any]):
    """Inlines the calls of `names` in one function: `visit_<Stmt>` gives a statement's
    replacement, `visit_<Expr>` an expression's, with what must run before it appended to
    `self.pre`."""

    def __init__(self, func: ir.Function, inlined: dict[str, ir.Function], names: set[str],
                 why: str) -> None:
        self.func = func
        self.inlined = inlined
        self.names = names  # the functions whose calls are inlined
        self.why = why
        self.used = {p.name for p in func.params} | set(func.locals)
        self.pre: list[ir.Stmt] = []

    def has_call(self, node: ir.Expr | ir.Stmt | list[ir.Stmt] | list[ir.Expr]) -> bool:
        """Whether `node` calls a function that is inlined."""
        return any(isinstance(n, ir.Call) and n.func in self.names for n in walk(node))

    def run(self) -> None:
        self.func.body = self.block(self.func.body)

    def fresh(self, base: str, t: Type) -> str:
        name, n = base, 0
        while name in self.used:
            n += 1
            name = f"{base}_{n}"
        self.used.add(name)
        self.func.locals[name] = t
        return name

    def temp(self, e: ir.Expr, pre: list[ir.Stmt], base: str = "tmp") -> ir.Var:
        """Bind `e` to a fresh local (appending the assignment to `pre`)."""
        name = self.fresh(base, e.type)
        pre.append(ir.Assign(name, e, loc=e.loc))
        return ir.Var(e.type, name, loc=e.loc)

    # ------------------------------------------------------------ statements

    def block(self, body: list[ir.Stmt]) -> list[ir.Stmt]:
        return [out for s in body for out in self.stmt(s)]

    def stmt(self, s: ir.Stmt) -> list[ir.Stmt]:
        """`s` without calls of inlined functions (its `visit_<Stmt>`, which appends what
        must run first to `self.pre`)."""
        if not self.has_call(s):
            return [s]
        self.pre = []
        lowered: list[ir.Stmt] = self.visit(s)
        return lowered

    def visit_Assign(self, s: ir.Assign) -> list[ir.Stmt]:
        return self.call_statement(s, s.value, s.target)

    def visit_ExprStmt(self, s: ir.ExprStmt) -> list[ir.Stmt]:
        return self.call_statement(s, s.expr, None)

    def call_statement(self, s: ir.Stmt, call: ir.Expr, target: str | None) -> list[ir.Stmt]:
        """A statement whose whole value is a call to an inlined function: the callee's body
        in its place (its result into `target`); any other statement as usual."""
        if not (isinstance(call, ir.Call) and call.func in self.names):
            return self.generic_visit(s)
        pre = self.pre
        args = self.operands(call.args, pre)
        return [*pre, *self.expand(call, args, target)]

    def visit_Store(self, s: ir.Store) -> list[ir.Stmt]:
        pre = self.pre
        s.value, *s.indices = self.operands([s.value, *s.indices], pre)
        return [*pre, s]

    def visit_SetField(self, s: ir.SetField) -> list[ir.Stmt]:
        """`place.name = value`: the value, then the indices of an array element it writes
        (as a store); the place stays a place, never a temporary copy of it."""
        pre = self.pre
        place = s.target
        while isinstance(place, ir.Field):
            place = place.value
        if isinstance(place, ir.Load):
            s.value, *place.indices = self.operands([s.value, *place.indices], pre)
        else:
            s.value = self.lower(s.value, pre)
        return [*pre, s]

    def visit_While(self, s: ir.While) -> list[ir.Stmt]:
        cond = s.cond
        if not self.has_call(cond):
            return self.generic_visit(s)
        pre = self.pre
        test = self.lower(cond, pre)
        leave = ir.If(ir.UnaryOp(bool_, "not", test, loc=cond.loc), [ir.Break(loc=s.loc)])
        s.cond = ir.Const(bool_, True, loc=cond.loc)
        s.body = [*pre, leave, *self.block(s.body)]
        return [s]

    def generic_visit(self, node: ir.Expr | ir.Stmt) -> Any:
        """Conditions, loop bounds, returned values, operands: evaluated once, in order,
        before the statement's bodies (which are lowered in place)."""
        pre = self.pre
        operands = iter(self.operands(child_exprs(node), pre))
        map_exprs(node, lambda _: next(operands))
        if isinstance(node, ir.Expr):
            return node
        for body in child_blocks(node):
            body[:] = self.block(body)
        return [*pre, node]

    # ------------------------------------------------------------ expressions

    def operands(self, exprs: list[ir.Expr], pre: list[ir.Stmt]) -> list[ir.Expr]:
        """Lower operands evaluated left to right; those before the last one with a call
        are bound to temporaries unless a call cannot change them."""
        last = max((i for i, e in enumerate(exprs) if self.has_call(e)), default=-1)
        out = []
        for i, e in enumerate(exprs):
            if i <= last:
                e = self.lower(e, pre)
                if i < last and not _stable(e):
                    e = self.temp(e, pre)
            out.append(e)
        return out

    def lower(self, e: ir.Expr, pre: list[ir.Stmt]) -> ir.Expr:
        """`e` without calls; what the calls need is appended to `pre` (its
        `visit_<Expr>`, which reads `pre` from `self.pre`)."""
        if not self.has_call(e):
            return e
        self.pre = pre
        lowered: ir.Expr = self.visit(e)
        return lowered

    def visit_Call(self, e: ir.Call) -> ir.Expr:
        if e.func not in self.names:
            return self.generic_visit(e)
        pre = self.pre
        args = self.operands(e.args, pre)
        result = self.fresh(f"{e.func}_result", e.type)
        pre += self.expand(e, args, result)
        return ir.Var(e.type, result, loc=e.loc)

    def visit_BoolOp(self, e: ir.BoolOp) -> ir.Expr:
        first, *rest = e.values
        if not self.has_call(rest):
            return self.generic_visit(e)
        pre = self.pre
        acc = self.temp(self.lower(first, pre), pre, "cond")
        for value in rest:
            branch: list[ir.Stmt] = []
            branch.append(ir.Assign(acc.name, self.lower(value, branch), loc=value.loc))
            go_on = acc if e.op == "and" else ir.UnaryOp(bool_, "not", acc)
            pre.append(ir.If(go_on, branch, loc=value.loc))
        return acc

    def visit_Select(self, e: ir.Select) -> ir.Expr:
        if not (self.has_call(e.if_true) or self.has_call(e.if_false)):
            return self.generic_visit(e)
        pre = self.pre
        test = self.lower(e.cond, pre)
        result = self.fresh("select", e.type)
        branches: list[list[ir.Stmt]] = [[], []]
        for branch, value in zip(branches, (e.if_true, e.if_false)):
            branch.append(ir.Assign(result, self.lower(value, branch), loc=value.loc))
        pre.append(ir.If(test, *branches, loc=e.loc))
        return ir.Var(e.type, result, loc=e.loc)

    # ------------------------------------------------------------ the callee's body

    def expand(self, call: ir.Call, args: list[ir.Expr], target: str | None) -> list[ir.Stmt]:
        """Statements that run the callee with `args` and assign its result to `target`."""
        callee = self.inlined.get(call.func)
        if callee is None:
            raise UnsupportedError(f"`{call.func}` is recursive, and {self.why}", call.loc)
        renames: dict[str, ir.Var] = {}
        stmts: list[ir.Stmt] = []
        for param, arg in zip(callee.params, args):
            if isinstance(param.type, ArrayType):
                assert isinstance(arg, ir.Var)
                renames[param.name] = arg
            else:
                renames[param.name] = self.temp(arg, stmts, f"{callee.name}_{param.name}")
        for name, t in callee.locals.items():
            if isinstance(t, ArrayType) and t.space is MemorySpace.CONSTANT:
                self.func.locals[name] = t  # a program-scope table keeps its name
                renames[name] = ir.Var(t, name)
                continue
            renames[name] = ir.Var(t, self.fresh(f"{callee.name}_{name}", t))
        body = _Rename(renames).transform_body(clone(callee.body))
        return stmts + _Returns(self, target, call.loc).lower(body)


class _Rename(Transformer):
    def __init__(self, renames: dict[str, ir.Var]) -> None:
        self.renames = renames

    def visit_Var(self, e: ir.Var) -> ir.Var:
        new = self.renames.get(e.name)
        return e if new is None else ir.Var(new.type, new.name, loc=e.loc)

    def visit_Assign(self, s: ir.Assign) -> ir.Assign:
        s.target = self.renames[s.target].name
        return s

    def visit_For(self, s: ir.For) -> ir.For:
        s.var = self.renames[s.var].name
        return s


class _Returns:
    """Lowers the returns of an inlined body to assignments of `target`."""

    def __init__(self, inliner: _Inliner, target: str | None, loc: ir.Loc | None) -> None:
        self.inliner = inliner
        self.target = target
        self.loc = loc
        self.flag: ir.Var | None = None

    def lower(self, body: list[ir.Stmt]) -> list[ir.Stmt]:
        body = _nest(body)
        if _returns_only_at_tail(body):
            return self.exits(body, depth=None)
        loop_body = self.exits(body, depth=0)
        if not (loop_body and isinstance(loop_body[-1], ir.Break)):
            loop_body.append(ir.Break(loc=self.loc))
        once = ir.While(ir.Const(bool_, True, loc=self.loc), loop_body, loc=self.loc)
        if self.flag is None:
            return [once]
        return [ir.Assign(self.flag.name, ir.Const(bool_, False), loc=self.loc), once]

    def exits(self, body: list[ir.Stmt], depth: int | None) -> list[ir.Stmt]:
        """Rewrite returns: at the tail (`depth` None) they fall through; otherwise they
        `break` out of the enclosing `while True` (through `depth` callee loops)."""
        out: list[ir.Stmt] = []
        for s in body:
            if isinstance(s, ir.Return):
                out += self.result(s)
                if depth is not None:
                    out += self.leave(depth, s.loc)
                continue
            is_loop = depth is not None and isinstance(s, (ir.While, ir.For))
            returns_in_loop = is_loop and _has_return(s)
            for block in child_blocks(s):
                block[:] = self.exits(block, depth + 1 if is_loop and depth is not None else depth)
            out.append(s)
            if returns_in_loop:
                assert self.flag is not None
                out.append(ir.If(self.flag, [ir.Break(loc=s.loc)], loc=s.loc))
        return out

    def result(self, s: ir.Return) -> list[ir.Stmt]:
        if s.value is None:
            return []
        if self.target is not None:
            return [ir.Assign(self.target, s.value, loc=s.loc)]
        return [ir.ExprStmt(s.value, loc=s.loc)] if has_side_effects(s.value) else []

    def leave(self, depth: int, loc: ir.Loc | None) -> list[ir.Stmt]:
        if depth == 0:
            return [ir.Break(loc=loc)]
        if self.flag is None:
            self.flag = ir.Var(bool_, self.inliner.fresh("returned", bool_))
        return [ir.Assign(self.flag.name, ir.Const(bool_, True), loc=loc), ir.Break(loc=loc)]


def _always_returns(body: list[ir.Stmt]) -> bool:
    if not body:
        return False
    last = body[-1]
    if isinstance(last, ir.If):
        return _always_returns(last.then) and _always_returns(last.orelse)
    return isinstance(last, ir.Return)


def _nest(body: list[ir.Stmt]) -> list[ir.Stmt]:
    """Move what follows an `if` whose one branch always returns into its other branch
    (outside loops), so that more returns end up at the tail."""
    out: list[ir.Stmt] = []
    for i, s in enumerate(body):
        out.append(s)
        if isinstance(s, ir.Return):
            break
        if not isinstance(s, ir.If):
            continue
        s.then, s.orelse = _nest(s.then), _nest(s.orelse)
        rest = body[i + 1:]
        if rest and _always_returns(s.then):
            s.orelse = _nest(s.orelse + rest)
            break
        if rest and _always_returns(s.orelse):
            s.then = _nest(s.then + rest)
            break
    return out


def _returns_only_at_tail(body: list[ir.Stmt]) -> bool:
    if any(_has_return(s) for s in body[:-1]):
        return False
    if not body or isinstance(body[-1], ir.Return):
        return True
    last = body[-1]
    if isinstance(last, ir.If):
        return _returns_only_at_tail(last.then) and _returns_only_at_tail(last.orelse)
    return not _has_return(last)
