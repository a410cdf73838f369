"""IR nodes: plain dataclasses for expressions, statements, functions and kernels.

Every node carries an optional source location. Expressions carry their type. Local
variables are declared once per function in `Function.locals`; assignments name them.
Index intrinsics are normalised by the frontend to the twelve base names
(`thread_idx_x` ... `grid_dim_z`); `global_id(d)`/`global_size(d)` are expanded into them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import Loc
from .types import ArrayType, ScalarType, Type

# ---------------------------------------------------------------- expressions


@dataclass(eq=False)
class Expr:
    type: Type
    loc: Loc | None = field(default=None, kw_only=True)


@dataclass(eq=False)
class Const(Expr):
    value: int | float | bool


@dataclass(eq=False)
class Var(Expr):
    """A local variable or parameter (scalar or array)."""

    name: str


@dataclass(eq=False)
class BinOp(Expr):
    """Arithmetic or bitwise: + - * / // % ** << >> & | ^ (operands already promoted).

    `/` on floats only (the frontend casts integer operands); `//` and `%` floor toward
    minus infinity, as in Python.
    """

    op: str
    left: Expr
    right: Expr


@dataclass(eq=False)
class UnaryOp(Expr):
    """- + ~ not"""

    op: str
    operand: Expr


@dataclass(eq=False)
class Compare(Expr):
    """One comparison (< <= > >= == !=) of operands of one type; result bool."""

    op: str
    left: Expr
    right: Expr


@dataclass(eq=False)
class BoolOp(Expr):
    """Short-circuit `and` / `or` over bool operands."""

    op: str
    values: list[Expr]


@dataclass(eq=False)
class Select(Expr):
    """`a if cond else b`: evaluates only the chosen branch."""

    cond: Expr
    if_true: Expr
    if_false: Expr


@dataclass(eq=False)
class Cast(Expr):
    value: Expr


@dataclass(eq=False)
class Load(Expr):
    """`array[i, j, ...]` with as many indices as the array has dimensions."""

    array: Var
    indices: list[Expr]


@dataclass(eq=False)
class ArrayDim(Expr):
    """`array.shape[axis]` (or `len(array)` for axis 0); type i32."""

    array: Var
    axis: int


@dataclass(eq=False)
class Call(Expr):
    """A call of a device function (`@kiln.func`), by its specialised name."""

    func: str
    args: list[Expr]


@dataclass(eq=False)
class IntrinsicCall(Expr):
    """A standard intrinsic from the registry. Atomics take (array, index..., value...)."""

    name: str
    args: list[Expr]


@dataclass(eq=False)
class Construct(Expr):
    """A record or vector value from its fields (components) in order; a vector from a
    single scalar repeats it in every component."""

    values: list[Expr]


@dataclass(eq=False)
class Field(Expr):
    """A part of a record, vector or variant value: a record's field, a vector's component
    (`x` `y` `z` `w`), a variant's `tag` (i32) or its payload read as case `name` (a record).

    Passes and backends never see these after `lower_aggregates` (kiln.ir.passes)."""

    value: Expr
    name: str


@dataclass(eq=False)
class CheckedIndex(Expr):
    """`value`, an index of a view or a bound of a slice, checked where it is evaluated
    against the extent of the axis it indexes: `0 <= value < extent`, or for a slice's
    bound (`bound`) `0 <= value <= extent`. An extent below 0 (a slice `a[lo:hi]` with
    `lo > hi`) is an empty axis.

    Only in programs the frontend builds with checks (`@kiln.kernel(debug=True)`), and
    only until `check_bounds` (`kiln.ir.passes.bounds`) turns each into a call that
    reports a value outside as an `IndexOutOfBoundsError` and then gives 0. `message`
    says what failed, after the thread: "read `seg[{index}]`, outside its {extent}
    elements", where `{index}` and `{extent}` stand for the values."""

    value: Expr
    extent: Expr
    message: str
    bound: bool = False


# ---------------------------------------------------------------- statements


@dataclass(eq=False)
class Stmt:
    loc: Loc | None = field(default=None, kw_only=True)


@dataclass(eq=False)
class Assign(Stmt):
    """`target = value`; the value already has the target's type."""

    target: str
    value: Expr


@dataclass(eq=False)
class Store(Stmt):
    """`array[indices] = value`."""

    array: Var
    indices: list[Expr]
    value: Expr


@dataclass(eq=False)
class SetField(Stmt):
    """`target.name = value`: writes one part (see `Field`) of a place, which is a local
    (`Var`), an array element (`Load`) or a `Field` of a place."""

    target: Expr
    name: str
    value: Expr


@dataclass(eq=False)
class ExprStmt(Stmt):
    expr: Expr


@dataclass(eq=False)
class If(Stmt):
    cond: Expr
    then: list[Stmt]
    orelse: list[Stmt] = field(default_factory=list)


@dataclass(eq=False)
class While(Stmt):
    cond: Expr
    body: list[Stmt]


@dataclass(eq=False)
class For(Stmt):
    """`for var in range(start, stop, step)`, Python semantics.

    `stop` and `step` are evaluated once before the loop (the frontend binds anything but a
    constant or a variable the body does not assign to a temporary). `step` is never zero
    when constant. When `step` is not constant its sign decides the comparison at run time.
    The body does not assign `var`. `unroll` is a hint for the backend's compiler
    (`kiln.unroll(range(...), factor=4)`): unroll that many iterations.
    """

    var: str
    start: Expr
    stop: Expr
    step: Expr
    body: list[Stmt]
    unroll: int | None = None


@dataclass(eq=False)
class Break(Stmt):
    pass


@dataclass(eq=False)
class Continue(Stmt):
    pass


@dataclass(eq=False)
class Return(Stmt):
    value: Expr | None = None


@dataclass(eq=False)
class Native(Stmt):
    """`kiln.native(cuda="...", c="...", python=fn)`: hand-written code, per language.

    `code` maps a language ("c", "cuda", "opencl", "python", or a plugin's) to source text,
    in which `{name}` stands for `vars[names.index(name)]`, or (for "python") to a callable
    whose parameters are names. `vars` are every variable the code mentions; passes treat
    each as read and written by the statement (renaming a Var keeps its `names` entry).
    """

    code: dict[str, object]
    names: list[str]
    vars: list[Var]


@dataclass(eq=False)
class VectorAccess(Stmt):
    """A hint that `body` moves one vector between memory and scalars (`lower_aggregates`
    makes it): 2 or 4 loads `Assign(t, Load(a, [..., j + k]))`, or stores
    `Store(a, [..., j + k], v)`, of consecutive elements of one array, in order. Running
    `body` is always correct; a backend with vector types may make it one wide access
    where the body still has this form and the address is aligned (`kiln.codegen.vectors`).
    """

    body: list[Stmt]


# ---------------------------------------------------------------- explicit block and thread loops


@dataclass(eq=False)
class BlockLoop(Stmt):
    """A kernel's whole body once `lower_thread_loops` made its SIMT execution explicit,
    for targets that run a block's threads as loops (the cpu backend's C, any non-SIMT
    target): `body` runs once per block, blocks in any order or in parallel.

    Statements of `body` outside a `ThreadLoop`/`LockstepLoop` are *block-level*: they run
    once for the block (their conditions are block-uniform), mention no `thread_idx_*`, and
    read a thread variable as the block's first thread's value. There are no barriers:
    the thread loops run one after another. `thread_vars` (locals and written parameters)
    have one value per thread kept across thread loops (a parameter's starts as the
    argument); `block_vars` one value per block (block-level loop variables and values
    every thread computes alike). `exits`: a thread may `return` while later thread loops
    still run, and those skip it.
    """

    body: list[Stmt]
    thread_vars: list[str] = field(default_factory=list)
    block_vars: list[str] = field(default_factory=list)
    exits: bool = False


@dataclass(eq=False)
class ThreadLoop(Stmt):
    """`body` once for each thread of the block, in any order (x fastest; threads may run
    as SIMD lanes). `private` locals are fresh for each thread (a block variable listed
    there is shadowed). Each thread starts with its own copy of the `loads` (thread or
    block variables) and writes the `stores` back at its end, also when it returns: a
    thread variable into its own value, a block variable into the block's (the last
    thread's value is kept; every thread computes the same). Other variables (block
    variables, parameters) are read as they are. `return` ends the thread; a
    `break`/`continue` never leaves the loop. A short constant `For` inside has its
    `unroll` set to its trip count, so the compiler keeps its values in registers."""

    body: list[Stmt]
    private: list[str] = field(default_factory=list)
    loads: list[str] = field(default_factory=list)
    stores: list[str] = field(default_factory=list)


@dataclass(eq=False)
class Induction(Stmt):
    """In a `LockstepLoop`: at iteration `k` (from 0), `var = init + k * step` (an integer
    the body steps by `step` once per iteration, dead after the loop)."""

    var: str
    init: Expr
    step: Expr


@dataclass(eq=False)
class LockstepLoop(Stmt):
    """A thread loop around one barrier-free `while cond: body` whose threads run their
    iterations in lockstep (each iteration: test every running thread, then run the body
    for those whose test held), which vectorises across threads. Its meaning is
    `ThreadLoop([*setup, *(var = init for each induction), While(cond, body)],
    private + induction variables, loads, stores)`; `setup` (assignments of `private`
    locals) runs at the start of each thread's part of every pass. `counted`: `cond` is
    `inductions[0].var < bound` (or `bound > var`) with `bound` and the step
    block-uniform and loop-invariant, so every thread runs at least the trip count of the
    thread that starts highest, and those iterations need no test."""

    cond: Expr
    body: list[Stmt]
    setup: list[Stmt] = field(default_factory=list)
    inductions: list[Induction] = field(default_factory=list)
    counted: bool = False
    private: list[str] = field(default_factory=list)
    loads: list[str] = field(default_factory=list)
    stores: list[str] = field(default_factory=list)


# ---------------------------------------------------------------- functions


@dataclass(frozen=True)
class ParamSource:
    """Where a parameter made by `lower_aggregates` gets its value from the launch:
    from the kernel argument at `index` (of the frontend's parameters), a scalar read at
    byte `offset` of its packed value, or (an array parameter) a view of its memory as an
    array of this parameter's element type with one more dimension."""

    index: int
    offset: int = 0


@dataclass(eq=False)
class Param:
    name: str
    type: Type
    source: ParamSource | None = None


@dataclass(eq=False)
class Function:
    """A kernel (`is_kernel`, returns void) or a device function.

    `locals` maps every local variable (not parameters) to its type; shared and local
    arrays appear there with their `ArrayType` (space and shape set). `max_depth` is the
    recursion depth the user allows (`@kiln.func(max_depth=N)`), for backends that cannot
    recurse and inline recursive functions that many levels deep.
    """

    name: str
    params: list[Param]
    return_type: Type
    body: list[Stmt]
    locals: dict[str, Type]
    is_kernel: bool = False
    loc: Loc | None = None
    max_depth: int | None = None
    split_arrays: dict[str, str] = field(default_factory=dict)
    """Arrays `lower_aggregates` made of an array of records, variants or vectors (each
    with one more axis, the words of an element), by the name of that array: run-time
    errors name the array as written."""

    def var_type(self, name: str) -> Type:
        for p in self.params:
            if p.name == name:
                return p.type
        return self.locals[name]


STATUS_WORDS_NAMES = ("code", "index_low", "index_high", "extent", "thread_x", "thread_y",
                      "thread_z", "block_x", "block_y", "block_z")
"""The words of a program's status array (`Program`): the failed check's code, then its
details (`RuntimeCheck.details`)."""


@dataclass(frozen=True)
class RuntimeCheck:
    """An error a kernel may detect while it runs (e.g. recursion past `max_depth`): it is
    raised as `error(message, loc)` at the launch's next synchronisation point. With
    `details`, the kernel also reports the failing index, the extent it is checked against
    and the thread, which fill the message's `{index}`, `{extent}`, `{thread}` and `{block}`
    (`kiln.ir.passes.status`)."""

    error: type[Exception]
    message: str
    loc: Loc | None = None
    details: bool = False


@dataclass(eq=False)
class Program:
    """What a backend receives: the kernel and the device functions it calls (callees first).

    A program with `checks` has one more kernel parameter, last: an `i32[:]` status array
    (`kiln.ir.passes.status`), zero at the launch, to which the kernel writes `k + 1` when
    `checks[k]` fails (the executor passes it and reads it at the next synchronisation).

    `tables` are read-only arrays every function may read by name (module-level NumPy
    arrays a kernel uses): each function that reads one lists it in its `locals` as an
    `ArrayType` in `MemorySpace.CONSTANT` with its shape; backends declare it once, at
    program scope, in constant memory where they have it."""

    kernel: Function
    functions: list[Function] = field(default_factory=list)
    checks: list[RuntimeCheck] = field(default_factory=list)
    tables: dict[str, Any] = field(default_factory=dict)

    def arguments(self) -> list[Param]:
        """The kernel's parameters that take the launch's arguments: all but the status
        array, which the executor adds (last, where the program has `checks`)."""
        params = self.kernel.params
        return params[:-1] if self.checks else params

    def function(self, name: str) -> Function:
        for f in self.functions:
            if f.name == name:
                return f
        raise KeyError(name)


def is_array(t: Type) -> bool:
    return isinstance(t, ArrayType)


def is_scalar(t: Type) -> bool:
    return isinstance(t, ScalarType)

