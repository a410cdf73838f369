"""The convergence check: every convergent intrinsic (`barrier()`) must be reached by the
whole block, and every warp operation (`shuffle`, `vote_any`, ...) by its whole warp.

Each expression and local gets a variance in the lattice UNIFORM < BLOCK < THREAD
(`kiln.ir.intrinsics.Variance`):
- constants, parameters of the kernel and array dimensions are UNIFORM;
- intrinsics take their registry variance (None: the join of their arguments);
- a load from a global or shared array is at least BLOCK (a shared array differs per block),
  joined with its indices; a load from a private array is THREAD;
- a device function call is the join of its arguments and of what its body adds (its
  result's variance with uniform parameters);
- a local is the join of every value assigned to it and of the control under which it is
  assigned (iterated to a fixpoint); a variable `kiln.native` code mentions is THREAD.

Control flow takes the variance of its condition; a `break`, `continue` or `return` taken
under some control makes the rest of its block (and, for `break` and `return`, the whole
loop) run under that control. A convergent intrinsic or a call of a function that reaches
one under THREAD-varying control is a `ConvergenceError`. Warp operations are checked the
same way: the lattice has no warp level, so block-uniform control is what proves that a
whole warp arrives together. Device functions are checked with the join of the variances
their call sites pass to each parameter.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...errors import ConvergenceError
from .. import nodes as ir
from ..enums import MemorySpace
from ..intrinsics import Variance, intrinsics
from ..types import ArrayType
from ..visit import Visitor, child_blocks, child_exprs
from .common import line_of

UNIFORM, BLOCK, THREAD = Variance.UNIFORM, Variance.BLOCK, Variance.THREAD


@dataclass(frozen=True)
class Control:
    """The variance of the control flow reaching a point, and what made it so."""

    variance: Variance = UNIFORM
    why: str = ""

    def join(self, variance: Variance, why: str) -> Control:
        return Control(variance, why) if variance > self.variance else self

    def join_control(self, other: Control) -> Control:
        return self.join(other.variance, other.why)


@dataclass(frozen=True)
class Exits:
    """The control under which a statement may leave its block early, by kind."""

    breaks: Control = Control()
    continues: Control = Control()
    returns: Control = Control()

    def join(self, other: Exits) -> Exits:
        return Exits(self.breaks.join_control(other.breaks),
                     self.continues.join_control(other.continues),
                     self.returns.join_control(other.returns))

    def leaving(self) -> Control:
        """Control of the threads that go on after this statement."""
        return self.breaks.join_control(self.continues).join_control(self.returns)


@dataclass(frozen=True)
class Site:
    """A convergent operation (barrier or call reaching one) and the control around it."""

    node: ir.Expr
    stmt_loc: ir.Loc | None
    what: str
    control: Control
    scope: str = "block"  # who must arrive together: "block" (barrier) or "warp"


@dataclass
class Summaries:
    """Per device function: the variance its body adds to its result, and convergence."""

    result: dict[str, Variance] = field(default_factory=dict)
    convergent: set[str] = field(default_factory=set)
    reaches: dict[str, Site] = field(default_factory=dict)  # per convergent function


class FunctionVariance(Visitor[Any]):
    """Variances of one function's locals and the convergent sites in it: `visit_<Stmt>`
    gives a statement's exits, `visit_<Expr>` an expression's variance, both under
    `self.control` (set by `stmt` and `expr`)."""

    def __init__(self, func: ir.Function, params: list[Variance], summaries: Summaries) -> None:
        self.func = func
        self.summaries = summaries
        self.var: dict[str, Variance] = {p.name: v for p, v in zip(func.params, params)}
        self.result = UNIFORM
        self.calls: list[tuple[str, list[Variance]]] = []
        self.sites: list[Site] = []
        self.stmt_loc: ir.Loc | None = func.loc
        self.control = Control()
        self.changed = True
        while self.changed:
            self.changed = False
            self.result, self.calls, self.sites = UNIFORM, [], []
            self.block(func.body, Control())

    def assign(self, name: str, variance: Variance) -> None:
        if variance > self.var.get(name, UNIFORM):
            self.var[name] = variance
            self.changed = True

    # ------------------------------------------------------------ statements

    def block(self, body: list[ir.Stmt], control: Control) -> Exits:
        exits = Exits()
        for stmt in body:
            stmt_exits = self.stmt(stmt, control)
            exits = exits.join(stmt_exits)
            control = control.join_control(stmt_exits.leaving())
        return exits

    def stmt(self, s: ir.Stmt, control: Control) -> Exits:
        """The exits of `s` reached under `control` (its `visit_<Stmt>`)."""
        outer = self.stmt_loc
        self.stmt_loc = s.loc or outer
        self.control = control
        try:
            exits: Exits = self.visit(s)
            return exits
        finally:
            self.stmt_loc = outer

    def visit_Assign(self, s: ir.Assign) -> Exits:
        control = self.control
        self.assign(s.target, max(self.expr(s.value, control), control.variance))
        return Exits()

    def visit_SetField(self, s: ir.SetField) -> Exits:
        control = self.control
        variance = max(self.expr(s.target, control), self.expr(s.value, control))
        root = s.target
        while isinstance(root, ir.Field):
            root = root.value
        if isinstance(root, ir.Var):  # a field of a local: the local varies with it
            self.assign(root.name, max(variance, control.variance))
        return Exits()

    def visit_If(self, s: ir.If) -> Exits:
        control = self.control
        inner = control.join(self.expr(s.cond, control), f"the `if`{line_of(s.loc)}")
        return self.block(s.then, inner).join(self.block(s.orelse, inner))

    def visit_While(self, s: ir.While) -> Exits:
        control = self.control
        return self.loop(s.body, control, self.expr(s.cond, control),
                         f"the `while` loop{line_of(s.loc)}", lambda c: self.expr(s.cond, c))

    def visit_For(self, s: ir.For) -> Exits:
        control = self.control
        bounds = max(self.expr(e, control) for e in (s.start, s.stop, s.step))
        return self.loop(s.body, control, bounds, f"the `for` loop{line_of(s.loc)}",
                         lambda c: self.assign(s.var, c.variance))

    def visit_Native(self, s: ir.Native) -> Exits:
        for v in s.vars:  # hand-written code may write anything it mentions
            self.assign(v.name, THREAD)
        return Exits()

    def visit_Break(self, s: ir.Break) -> Exits:
        return Exits(breaks=Control(self.control.variance, f"the `break`{line_of(s.loc)}"))

    def visit_Continue(self, s: ir.Continue) -> Exits:
        return Exits(continues=Control(self.control.variance,
                                       f"the `continue`{line_of(s.loc)}"))

    def visit_Return(self, s: ir.Return) -> Exits:
        control = self.control
        if s.value is not None:
            self.result = max(self.result, self.expr(s.value, control), control.variance)
        return Exits(returns=Control(control.variance, f"the early `return`{line_of(s.loc)}"))

    def generic_visit(self, node: ir.Expr | ir.Stmt) -> Exits | Variance:
        """ExprStmt, Store, and node kinds added later: a statement's control flow, if any,
        depends on every expression of the statement; an expression varies with its
        operands."""
        control = self.control
        variance = max((self.expr(e, control) for e in child_exprs(node)), default=UNIFORM)
        if isinstance(node, ir.Expr):
            return variance
        inner = control.join(variance, f"the `{type(node).__name__}`{line_of(node.loc)}")
        exits = Exits()
        for body in child_blocks(node):
            exits = exits.join(self.block(body, inner))
        return exits

    def loop(self, body: list[ir.Stmt], control: Control, variance: Variance, why: str,
             each_iteration: Callable[[Control], object]) -> Exits:
        """A loop's body runs under its header's variance, widened by breaks and returns."""
        inner = control.join(variance, why)
        while True:
            each_iteration(inner)
            exits = self.block(body, inner)
            widened = inner.join_control(exits.breaks).join_control(exits.returns)
            if widened.variance == inner.variance:
                return Exits(returns=exits.returns)
            inner = widened

    # ------------------------------------------------------------ expressions

    def expr(self, e: ir.Expr, control: Control) -> Variance:
        """The variance of `e` evaluated under `control` (its `visit_<Expr>`)."""
        self.control = control
        variance: Variance = self.visit(e)
        return variance

    def visit_Const(self, e: ir.Const | ir.ArrayDim) -> Variance:
        return UNIFORM

    visit_ArrayDim = visit_Const

    def visit_Var(self, e: ir.Var) -> Variance:
        return self.var.get(e.name, UNIFORM)

    def visit_Load(self, e: ir.Load) -> Variance:
        control = self.control
        index = max((self.expr(i, control) for i in e.indices), default=UNIFORM)
        space = e.array.type.space if isinstance(e.array.type, ArrayType) else None
        return THREAD if space is MemorySpace.LOCAL else max(BLOCK, index)

    def visit_BoolOp(self, e: ir.BoolOp) -> Variance:
        control = self.control
        first, *rest = e.values
        variance = self.expr(first, control)
        for value in rest:
            inner = control.join(variance, f"the `{e.op}`{line_of(e.loc or self.stmt_loc)}")
            variance = max(variance, self.expr(value, inner))
        return variance

    def visit_Select(self, e: ir.Select) -> Variance:
        control = self.control
        variance = self.expr(e.cond, control)
        inner = control.join(variance,
                             f"the conditional expression{line_of(e.loc or self.stmt_loc)}")
        return max(variance, self.expr(e.if_true, inner), self.expr(e.if_false, inner))

    def visit_IntrinsicCall(self, e: ir.IntrinsicCall) -> Variance:
        control = self.control
        joined = max((self.expr(a, control) for a in e.args), default=UNIFORM)
        if e.name not in intrinsics:
            return THREAD
        spec = intrinsics[e.name]
        if spec.convergent or spec.warp_convergent:
            scope = "block" if spec.convergent else "warp"
            self.sites.append(Site(e, self.stmt_loc, f"{e.name}()", control, scope))
        return joined if spec.variance is None else spec.variance

    def visit_Call(self, e: ir.Call) -> Variance:
        control, func = self.control, e.func
        variances = [self.expr(a, control) for a in e.args]
        self.calls.append((func, variances))
        if func in self.summaries.convergent:
            reached = self.summaries.reaches[func]
            what = f"the call of `{func}` (which reaches {reached.what.split(' (')[0]})"
            self.sites.append(Site(e, self.stmt_loc, what, control, reached.scope))
        return max([self.summaries.result.get(func, UNIFORM), *variances])


def summarize(program: ir.Program) -> Summaries:
    """Result variances (with uniform parameters) and convergence of the device functions."""
    summaries = Summaries()
    changed = True
    while changed:  # recursion needs a fixpoint; callees-first order makes it one pass
        changed = False
        for func in program.functions:
            analysis = FunctionVariance(func, [UNIFORM] * len(func.params), summaries)
            convergent = bool(analysis.sites)
            if (analysis.result != summaries.result.get(func.name)
                    or convergent != (func.name in summaries.convergent)):
                changed = True
                summaries.result[func.name] = analysis.result
                if convergent:
                    summaries.convergent.add(func.name)
                    summaries.reaches[func.name] = analysis.sites[0]
    return summaries


def analyze(program: ir.Program) -> list[FunctionVariance]:
    """Analyses of the kernel and every device function (callers first), each with the
    join over all call sites of the variance passed to each parameter."""
    summaries = summarize(program)
    order = [program.kernel, *reversed(program.functions)]
    params = {f.name: [UNIFORM] * len(f.params) for f in order}
    while True:
        changed = False
        analyses = []
        for func in order:
            analysis = FunctionVariance(func, params[func.name], summaries)
            analyses.append(analysis)
            for callee, variances in analysis.calls:
                joined = [max(a, b) for a, b in zip(params[callee], variances)]
                if joined != params[callee]:
                    params[callee] = joined
                    changed = True
        if not changed:
            return analyses


def check_convergence(program: ir.Program) -> None:
    """Raise ConvergenceError at the first convergent operation some threads may skip."""
    for analysis in analyze(program):
        for site in analysis.sites:
            if site.control.variance is THREAD:
                raise ConvergenceError(
                    f"{site.what} is inside control flow that depends on the thread index "
                    f"({site.control.why}): every thread of a {site.scope} must reach it",
                    site.node.loc or site.stmt_loc)
