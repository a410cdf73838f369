"""`lower_aggregates`: records, variants and vectors become scalars, for every backend.

Every aggregate type has *leaves*: its scalar parts in a fixed order, each with a path, a
scalar type and a byte offset in the type's NumPy layout (`leaves`). A variant's leaves are
its tag, then every case's fields. The pass rewrites, in every function:

- an aggregate local or parameter into one scalar local or parameter per leaf;
- an array of aggregates into *views*: one array per scalar type among the leaves, with one
  more dimension, over the same memory (`p: Particle[:]` of n records of 16 bytes is
  `p_f32: f32[:, :]` of shape (n, 4)); a leaf of element `i` is `view[i, offset / size]`.
  An `f32x4[:]` array is its (n, 4) host array itself. Shared and local arrays of
  aggregates become one fixed-shape array per scalar type in the same way;
- vector arithmetic, comparisons and math into one operation per component; `dot`,
  `length`, `normalize`, `cross`, `all`, `any` into scalar arithmetic;
- a variant stored to or loaded from an array into its tag and only the active case's
  fields (an `if` on the tag), as the cases share memory;
- a wide access of a scalar array (`kiln.load(f32x4, a, i)`, a `Load` of a vector type, and
  `kiln.store(a, i, v)`, a `Store` of a vector value) into accesses of elements 4i .. 4i+3;
- a whole vector of 2 or 4 components of 4 or 8 bytes loaded from or stored to memory into
  `VectorAccess` hints around the scalar accesses of every 16 bytes (or 8, for 2 x 4
  bytes), which backends with vector types emit as one access (`native_width`).

Kernel parameters made from an aggregate parameter carry a `ParamSource` saying how the
launch computes them from the argument (the executor's `lowered_arguments`).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ...errors import UnsupportedError
from .. import nodes as ir
from ..types import (
    COMPONENTS,
    ArrayType,
    ScalarType,
    StructType,
    Type,
    VariantType,
    VectorType,
    bool_,
    i32,
    is_aggregate,
)
from ..visit import Visitor, map_exprs, walk
from .common import all_functions, clone_program, has_side_effects


@dataclass(frozen=True)
class Leaf:
    path: tuple[str, ...]
    type: ScalarType
    offset: int


@functools.cache
def leaves(t: Type) -> tuple[Leaf, ...]:
    """The scalar parts of a type in order (a scalar is its own single leaf)."""
    if isinstance(t, ScalarType):
        return (Leaf((), t, 0),)
    if isinstance(t, VectorType):
        size = t.elem.itemsize
        return tuple(Leaf((c,), t.elem, k * size) for k, c in enumerate(COMPONENTS[: t.n]))
    parts: list[tuple[str, Type]]
    if isinstance(t, StructType):
        parts, dtype = list(t.fields), t.dtype
    elif isinstance(t, VariantType):
        parts, dtype = [("tag", i32), *((c.name, c) for c in t.cases)], t.dtype
    else:
        raise TypeError(f"{t} has no leaves")
    fields = dtype.fields
    assert fields is not None
    return tuple(Leaf((name, *leaf.path), leaf.type, fields[name][1] + leaf.offset)
                 for name, ft in parts for leaf in leaves(ft))


@functools.cache
def field_range(t: Type, name: str) -> tuple[int, int]:
    """The leaves of part `name` of `t` (a field, component, `tag` or case): [start, end)."""
    indices = [k for k, leaf in enumerate(leaves(t)) if leaf.path[:1] == (name,)]
    if isinstance(t, VariantType) and not indices:  # a case without fields
        return (1, 1)
    return (indices[0], indices[-1] + 1)


def view_types(t: Type) -> list[ScalarType]:
    """The scalar types of an aggregate's leaves, in order of first appearance."""
    return list(dict.fromkeys(leaf.type for leaf in leaves(t)))


def view_width(elem: Type, st: ScalarType) -> int:
    """How many `st` values one element of `elem` spans (the view's last dimension)."""
    return elem.dtype.itemsize // st.itemsize  # type: ignore[attr-defined]


def native_width(t: Type) -> int | None:
    """Components of a vector `t` per native vector access (16 bytes at most: f32x4 is one
    access, f64x4 two), or None when `t` does not move as native vectors (3 components,
    bools, elements of other sizes)."""
    if not isinstance(t, VectorType) or t.n not in (2, 4) or t.elem.is_bool \
            or t.elem.itemsize not in (4, 8):
        return None
    return min(t.n, 16 // t.elem.itemsize)


def lower_aggregates(program: ir.Program) -> ir.Program:
    """A new program without records, variants and vectors (the input is unchanged); the
    program itself when it has none."""
    if not any(_uses_aggregates(f) for f in all_functions(program)):
        return program
    program = clone_program(program)
    signatures = {f.name: f.params for f in program.functions}
    arguments = len(program.arguments())
    for func in all_functions(program):
        _FunctionLowering(func, signatures).run(arguments if func.is_kernel else 0)
    return program


def _uses_aggregates(func: ir.Function) -> bool:
    def aggregate(t: Type) -> bool:
        return is_aggregate(t.elem if isinstance(t, ArrayType) else t)

    types = [p.type for p in func.params] + list(func.locals.values())
    return any(aggregate(t) for t in types) or any(
        isinstance(n, ir.Expr) and aggregate(n.type) for n in walk(func.body))


def _trivial(e: ir.Expr) -> bool:
    return isinstance(e, (ir.Const, ir.Var))


def _simple(e: ir.Expr) -> bool:
    """Cheap and pure enough to evaluate more than once."""
    if isinstance(e, ir.Load):
        return all(_trivial(i) for i in e.indices)
    if isinstance(e, ir.Cast):
        return _simple(e.value)
    return _trivial(e)


@dataclass
class Slot:
    """One scalar part of a place: how to read it and how to write it."""

    type: ScalarType
    read: Callable[[], ir.Expr]
    write: Callable[[ir.Expr], ir.Stmt]


class _FunctionLowering(Visitor[Any]):
    """Lowers one function: `visit_<Stmt>` gives a statement's lowered statements,
    `visit_<Expr>` a scalar expression lowered (`_ValueParts`: an aggregate value's leaves).
    """

    def __init__(self, func: ir.Function, signatures: dict[str, list[ir.Param]]) -> None:
        self.func = func
        self.signatures = signatures  # device functions' original parameters
        self.taken = {p.name for p in func.params} | set(func.locals)
        self.scalars: dict[str, list[str]] = {}  # aggregate variable -> leaf variables
        self.views: dict[str, dict[ScalarType, ir.Var]] = {}  # aggregate array -> views
        self.pre: list[ir.Stmt] = []
        self.loc: ir.Loc | None = func.loc
        self.value_parts = _ValueParts(self)

    def fresh(self, base: str) -> str:
        name, n = base, 1
        while name in self.taken:
            name, n = f"{base}_{n}", n + 1
        self.taken.add(name)
        return name

    def temp(self, value: ir.Expr) -> ir.Var:
        name = self.fresh("_agg")
        self.func.locals[name] = value.type
        self.pre.append(ir.Assign(name, value, loc=self.loc))
        return ir.Var(value.type, name, loc=value.loc)

    def local(self, t: ScalarType) -> str:
        name = self.fresh("_vec")
        self.func.locals[name] = t
        return name

    # ------------------------------------------------------------ declarations

    def run(self, arguments: int) -> None:
        """Lower the function; its first `arguments` parameters take a launch's arguments
        (a kernel's, but its status array) and get a `ParamSource`."""
        func = self.func
        params: list[ir.Param] = []
        lowered_params = False
        for index, p in enumerate(func.params):
            new = self.split(p.name, p.type)
            lowered_params |= new is not None
            for name, t, offset in new or [(p.name, p.type, 0)]:
                source = ir.ParamSource(index, offset) if index < arguments else None
                params.append(ir.Param(name, t, source))
        if not lowered_params:
            params = [dataclasses.replace(p, source=None) for p in params]
        local_types: dict[str, Type] = {}
        for name, t in func.locals.items():
            new = self.split(name, t)
            for leaf_name, leaf_type, _ in new or [(name, t, 0)]:
                local_types[leaf_name] = leaf_type
        func.params = params
        func.locals = local_types
        func.body = self.body(func.body)

    def split(self, name: str, t: Type) -> list[tuple[str, Type, int]] | None:
        """The scalar variables (name, type, byte offset) an aggregate variable becomes."""
        if isinstance(t, ArrayType) and is_aggregate(t.elem):
            out: list[tuple[str, Type, int]] = []
            views: dict[ScalarType, ir.Var] = {}
            for st in view_types(t.elem):
                width = view_width(t.elem, st)
                shape = None if t.shape is None else (*t.shape, width)
                vt = ArrayType(st, t.ndim + 1, t.space, shape)
                view = self.fresh(f"{name}_{st.name}")
                views[st] = ir.Var(vt, view)
                out.append((view, vt, 0))
                self.func.split_arrays = {**self.func.split_arrays, view: name}
            self.views[name] = views
            if not out:
                raise UnsupportedError(f"'{name}' is an array of records without fields",
                                       self.func.loc)
            return out
        if not is_aggregate(t):
            return None
        names = [self.fresh("_".join((name, *leaf.path))) for leaf in leaves(t)]
        self.scalars[name] = names
        return [(n, leaf.type, leaf.offset) for n, leaf in zip(names, leaves(t))]

    # ------------------------------------------------------------ statements

    def body(self, stmts: list[ir.Stmt]) -> list[ir.Stmt]:
        out: list[ir.Stmt] = []
        for s in stmts:
            saved, self.pre = self.pre, []
            self.loc = s.loc or self.loc
            lowered = self.stmt(s)
            out += self.pre + lowered
            self.pre = saved
        return out

    def stmt(self, s: ir.Stmt) -> list[ir.Stmt]:
        """`s` lowered to statements on scalars (its `visit_<Stmt>`)."""
        lowered: list[ir.Stmt] = self.visit(s)
        return lowered

    def visit_Assign(self, s: ir.Assign) -> list[ir.Stmt]:
        if s.target not in self.scalars:
            return self.operands(s)
        slots = self.var_slots(s.target, s.value.type)
        if isinstance(s.value, ir.Load) and native_width(s.value.type):
            return self.load_into(s.target, s.value, slots)
        return self.write(slots, s.value, {s.target})

    def visit_Store(self, s: ir.Store) -> list[ir.Stmt]:
        array, value = s.array, s.value
        if array.name in self.views:
            return self.store(array, [self.bound(i) for i in s.indices], value)
        if isinstance(value.type, VectorType):  # kiln.store(a, i, v)
            slots = self.wide_slots(array, s.indices, value.type.n)
            return self.vector_stores(self.write(slots, value, {array.name}), value.type)
        return self.operands(s)

    def visit_SetField(self, s: ir.SetField) -> list[ir.Stmt]:
        place = self.resolve(s.target)
        assert place is not None, "SetField of something other than a place"
        slots, roots = self.place_slots(s.target)
        lo, hi = field_range(s.target.type, s.name)
        return self.write(slots[place[1] + lo:place[1] + hi], s.value, roots)

    def visit_While(self, s: ir.While) -> list[ir.Stmt]:
        test = self.scalar(s.cond)
        if not self.pre:
            return [ir.While(test, self.body(s.body), loc=s.loc)]
        pre, self.pre = self.pre, []  # re-evaluated before every iteration
        stop = ir.If(ir.UnaryOp(bool_, "not", test), [ir.Break(loc=s.loc)], loc=s.loc)
        return [ir.While(ir.Const(bool_, True), [*pre, stop, *self.body(s.body)], loc=s.loc)]

    def visit_Return(self, s: ir.Return) -> list[ir.Stmt]:
        if s.value is not None and is_aggregate(s.value.type):
            raise UnsupportedError("a device function returning a vector, record or tuple is "
                                   "still called: run inline_aggregate_returns before "
                                   "lower_aggregates", s.loc)
        return self.operands(s)

    def generic_visit(self, node: ir.Expr | ir.Stmt) -> Any:
        return self.operands(node) if isinstance(node, ir.Stmt) else self.scalar_operands(node)

    def operands(self, s: ir.Stmt) -> list[ir.Stmt]:
        """`s` itself, its expressions made scalar and its bodies lowered."""
        for f in dataclasses.fields(s):
            value = getattr(s, f.name)
            if isinstance(value, ir.Expr):
                setattr(s, f.name, self.scalar(value))
            elif isinstance(value, list) and value and isinstance(value[0], ir.Expr):
                setattr(s, f.name, [self.scalar(v) for v in value])
            elif isinstance(value, list) and value and isinstance(value[0], ir.Stmt):
                setattr(s, f.name, self.body(value))
        return [s]

    def write(self, slots: list[Slot], value: ir.Expr, roots: set[str]) -> list[ir.Stmt]:
        """Assign a value's leaves to slots; leaves reading the written variables or arrays
        are computed first (`p = Particle(p.y, p.x)`)."""
        values = self.parts(value)
        reads = {n.name for v in values for n in walk(v) if isinstance(n, ir.Var)}
        if len(values) > 1 and reads & (roots | {n for r in roots for n in self.scalars.get(r, [])}
                    | {v.name for r in roots for v in self.views.get(r, {}).values()}):
            values = [v if isinstance(v, ir.Const) else self.temp(v) for v in values]
        return [slot.write(v) for slot, v in zip(slots, values)
                if not (isinstance(v, ir.Var) and v.name == getattr(slot.read(), "name", None))]

    def store(self, array: ir.Var, index: list[ir.Expr], value: ir.Expr) -> list[ir.Stmt]:
        """`array[index] = value` for an aggregate element; variants write their tag and the
        active case's fields only."""
        slots = self.element_slots(array, index)
        t = value.type
        if isinstance(t, VectorType):
            return self.vector_stores(self.write(slots, value, {array.name}), t)
        if not isinstance(t, VariantType):
            return self.write(slots, value, {array.name})
        known = t.case_index(value.value.type) if isinstance(value, ir.Cast) else None
        if isinstance(value, ir.Cast) and known is not None:
            start, end = field_range(t, t.cases[known].name)
            out = [slots[0].write(ir.Const(i32, known))]
            return out + self.write(slots[start:end], value.value, {array.name})
        values = [v if _trivial(v) else self.temp(v) for v in self.parts(value)]
        out = [slots[0].write(values[0])]
        for k, case in enumerate(t.cases):
            start, end = field_range(t, case.name)
            if start == end:
                continue
            active = ir.Compare(bool_, "==", values[0], ir.Const(i32, k), loc=self.loc)
            out.append(ir.If(active, [slot.write(v) for slot, v in zip(slots[start:end],
                                                                        values[start:end])],
                             loc=self.loc))
        return out

    # ------------------------------------------------------------ whole vectors in memory

    def memory_slots(self, load: ir.Load) -> list[Slot]:
        """The element slots of a vector read from memory: an element of a vector array, or
        a wide load of a scalar array."""
        if load.array.name in self.views:
            return self.element_slots(load.array, [self.bound(i) for i in load.indices])
        assert isinstance(load.type, VectorType)
        return self.wide_slots(load.array, load.indices, load.type.n)

    def wide_slots(self, array: ir.Var, indices: list[ir.Expr], n: int) -> list[Slot]:
        """Elements n*j .. n*j + n-1 of the last axis of a scalar array (`kiln.load(t, a,
        ..., j)` and `kiln.store`)."""
        *lead, last = [self.bound(i) for i in indices]
        first = self.bound(_times(last, n))
        elem = array.type.elem  # type: ignore[attr-defined]

        def slot(k: int) -> Slot:
            def at() -> list[ir.Expr]:
                return [*lead, _plus(first, k)]

            return Slot(elem, lambda: ir.Load(elem, array, at(), loc=self.loc),
                        lambda v: ir.Store(array, at(), v, loc=self.loc))

        return [slot(k) for k in range(n)]

    def load_vector(self, slots: list[Slot], t: VectorType,
                    targets: list[str] | None = None) -> list[ir.Var]:
        """Load a vector's slots into `targets` (default: new locals) through `VectorAccess`
        hints, before the statement; the variables holding its components."""
        width = native_width(t)
        assert width is not None
        names = targets or [self.local(slot.type) for slot in slots]
        loads: list[ir.Stmt] = [ir.Assign(n, slot.read(), loc=self.loc)
                                for n, slot in zip(names, slots)]
        self.pre += _groups(loads, width, self.loc)
        return [ir.Var(slot.type, n, loc=self.loc) for n, slot in zip(names, slots)]

    def load_into(self, target: str, load: ir.Load, slots: list[Slot]) -> list[ir.Stmt]:
        """`v = a[i]` of a native vector: loaded straight into `v`'s leaves, unless the
        index reads them (`v = a[v.x]`), then through new locals."""
        memory = self.memory_slots(load)
        own = self.scalars[target]
        reads = {n.name for slot in memory for n in walk(slot.read()) if isinstance(n, ir.Var)}
        values = self.load_vector(memory, load.type,  # type: ignore[arg-type]
                                  None if reads & set(own) else own)
        return [slot.write(v) for slot, v in zip(slots, values) if v.name not in own]

    def vector_stores(self, stores: list[ir.Stmt], t: VectorType) -> list[ir.Stmt]:
        """The stores of a whole vector, in `VectorAccess` hints where it moves as native
        vectors (and its components are computed without side effects)."""
        width = native_width(t)
        if width is None or len(stores) != t.n or any(
                has_side_effects(s.value) for s in stores):  # type: ignore[attr-defined]
            return stores
        return _groups(stores, width, self.loc)

    # ------------------------------------------------------------ places

    def var_slots(self, name: str, t: Type) -> list[Slot]:
        def slot(leaf_name: str, st: ScalarType) -> Slot:
            return Slot(st, lambda: ir.Var(st, leaf_name, loc=self.loc),
                        lambda v: ir.Assign(leaf_name, v, loc=self.loc))

        return [slot(n, leaf.type) for n, leaf in zip(self.scalars[name], leaves(t))]

    def element_slots(self, array: ir.Var, index: list[ir.Expr]) -> list[Slot]:
        t = array.type
        assert isinstance(t, ArrayType)
        views = self.views[array.name]

        def slot(leaf: Leaf) -> Slot:
            view = views[leaf.type]
            at = [*index, ir.Const(i32, leaf.offset // leaf.type.itemsize)]
            return Slot(leaf.type, lambda: ir.Load(leaf.type, view, list(at), loc=self.loc),
                        lambda v: ir.Store(view, list(at), v, loc=self.loc))

        return [slot(leaf) for leaf in leaves(t.elem)]

    def bound(self, index: ir.Expr) -> ir.Expr:
        """An index used by several leaves, evaluated once."""
        index = self.scalar(index)
        return index if _trivial(index) else self.temp(index)

    def resolve(self, e: ir.Expr) -> tuple[ir.Expr, int, int] | None:
        """A place as (its root, a Var or Load, and the range of the root's leaves it is)."""
        if isinstance(e, ir.Field):
            inner = self.resolve(e.value)
            if inner is None:
                return None
            root, start, _ = inner
            lo, hi = field_range(e.value.type, e.name)
            return root, start + lo, start + hi
        if isinstance(e, ir.Var) and e.name in self.scalars:
            return e, 0, len(leaves(e.type))
        if isinstance(e, ir.Load) and e.array.name in self.views:
            return e, 0, len(leaves(e.type))
        return None

    def place_slots(self, e: ir.Expr) -> tuple[list[Slot], set[str]]:
        """The slots of a place expression's root (callers take their range) and its root
        variable's name."""
        place = self.resolve(e)
        assert place is not None, "not a place"
        root = place[0]
        if isinstance(root, ir.Var):
            return self.var_slots(root.name, root.type), {root.name}
        assert isinstance(root, ir.Load)
        index = [self.bound(i) for i in root.indices]
        return self.element_slots(root.array, index), {root.array.name}

    # ------------------------------------------------------------ values

    def parts(self, e: ir.Expr) -> list[ir.Expr]:
        """The leaves of a value, lowered (a scalar value is its own single leaf)."""
        if not (is_aggregate(e.type) or isinstance(e, ir.Field)):
            return [self.scalar(e)]
        t = e.type
        if isinstance(e, ir.Load) and isinstance(t, VectorType):
            slots = self.memory_slots(e)
            if native_width(t):
                return list(self.load_vector(slots, t))
            return [slot.read() for slot in slots]
        place = self.resolve(e)
        if place is not None:
            root, start, end = place
            if isinstance(root, ir.Load) and isinstance(root.type, VariantType):
                return self.load_variant(root)[start:end]
            if isinstance(root, ir.Load) and end - start == 1:  # one leaf: no index temps
                index = [self.scalar(i) for i in root.indices]
                return [self.element_slots(root.array, index)[start].read()]
            slots = self.place_slots(root)[0] if isinstance(root, ir.Load) else \
                self.var_slots(root.name, root.type)  # type: ignore[attr-defined]
            return [slot.read() for slot in slots[start:end]]
        return self.value_parts.visit(e)

    def load_variant(self, load: ir.Load) -> list[ir.Expr]:
        """A variant read from an array: the tag, then only the active case's fields."""
        t = load.type
        assert isinstance(t, VariantType)
        index = [self.bound(i) for i in load.indices]
        slots = self.element_slots(load.array, index)
        tag = self.temp(slots[0].read())
        values: list[ir.Expr] = [tag]
        for k, case in enumerate(t.cases):
            start, end = field_range(t, case.name)
            temps = [self.temp(_zero(slot.type)) for slot in slots[start:end]]
            values += temps
            if temps:
                active = ir.Compare(bool_, "==", tag, ir.Const(i32, k), loc=self.loc)
                reads: list[ir.Stmt] = [ir.Assign(v.name, slot.read(), loc=self.loc)
                                        for v, slot in zip(temps, slots[start:end])]
                self.pre.append(ir.If(active, reads, loc=self.loc))
        return values

    def shared(self, e: ir.Expr) -> ir.Expr:
        """A value used several times: itself when cheap and pure, else a temporary."""
        return e if _simple(e) else self.temp(e)

    def cast(self, e: ir.Expr, t: ScalarType) -> ir.Expr:
        return e if e.type == t else ir.Cast(t, e, loc=e.loc)

    def intrinsic(self, name: str, args: list[ir.Expr]) -> ir.Expr:
        return ir.IntrinsicCall(args[0].type, name, args, loc=self.loc)

    # ------------------------------------------------------------ scalar expressions

    def scalar(self, e: ir.Expr) -> ir.Expr:
        """A scalar expression with its aggregate sub-expressions lowered (its
        `visit_<Expr>`)."""
        lowered: ir.Expr = self.visit(e)
        return lowered

    def visit_Field(self, e: ir.Field) -> ir.Expr:
        (value,) = self.parts(e)
        return value

    def visit_IntrinsicCall(self, e: ir.IntrinsicCall) -> ir.Expr:
        if e.name == "dot" and len(e.args) == 2:
            a, b = e.args
            return _sum([ir.BinOp(e.type, "*", x, y, loc=e.loc)
                         for x, y in zip(self.parts(a), self.parts(b))])
        if e.name == "length" and len(e.args) == 1:
            comps = [self.shared(c) for c in self.parts(e.args[0])]
            return self.intrinsic("sqrt", [_sum_of_squares(comps)])
        if e.name in ("all", "any") and len(e.args) == 1:
            return ir.BoolOp(bool_, "and" if e.name == "all" else "or", self.parts(e.args[0]),
                             loc=e.loc)
        return self.scalar_operands(e)

    def visit_ArrayDim(self, e: ir.ArrayDim) -> ir.Expr:
        if e.array.name not in self.views:
            return self.scalar_operands(e)
        first = next(iter(self.views[e.array.name].values()))
        return ir.ArrayDim(i32, first, e.axis, loc=e.loc)

    def visit_Call(self, e: ir.Call) -> ir.Expr:
        return ir.Call(e.type, e.func, self.call_args(e.func, e.args), loc=e.loc)

    def visit_BoolOp(self, e: ir.BoolOp) -> ir.Expr:
        first, *rest = e.values
        return self.bool_op(e, e.op, first, rest)

    def visit_Select(self, e: ir.Select) -> ir.Expr:
        return self.select(e, e.cond, e.if_true, e.if_false)

    def scalar_operands(self, e: ir.Expr) -> ir.Expr:
        """`e` itself, its operands lowered."""
        map_exprs(e, self.scalar)
        return e

    def call_args(self, func: str, args: list[ir.Expr]) -> list[ir.Expr]:
        out: list[ir.Expr] = []
        for a, p in zip(args, self.signatures[func]):
            if isinstance(p.type, ArrayType) and is_aggregate(p.type.elem):
                assert isinstance(a, ir.Var)
                out += list(self.views[a.name].values())
            else:
                out += self.parts(a)
        return out

    def conditional(self, e: ir.Expr) -> tuple[ir.Expr, list[ir.Stmt]]:
        """A lowered operand evaluated only sometimes, and the statements it needs first."""
        saved, self.pre = self.pre, []
        value = self.scalar(e)
        pre, self.pre = self.pre, saved
        return value, pre

    def bool_op(self, e: ir.BoolOp, op: str, first: ir.Expr, rest: list[ir.Expr]) -> ir.Expr:
        """`a and b`; when `b` needs statements first, `t = a; if t: ...; t = b`."""
        head = self.scalar(first)
        lowered = [self.conditional(v) for v in rest]
        if not any(pre for _, pre in lowered):
            return ir.BoolOp(bool_, op, [head, *(v for v, _ in lowered)], loc=e.loc)
        result = self.temp(head)
        for value, pre in lowered:
            test: ir.Expr = result if op == "and" else ir.UnaryOp(bool_, "not", result)
            self.pre.append(ir.If(test, [*pre, ir.Assign(result.name, value, loc=self.loc)],
                                  loc=self.loc))
        return result

    def select(self, e: ir.Select, cond: ir.Expr, if_true: ir.Expr,
               if_false: ir.Expr) -> ir.Expr:
        test = self.scalar(cond)
        (a, pre_a), (b, pre_b) = self.conditional(if_true), self.conditional(if_false)
        if not pre_a and not pre_b:
            return ir.Select(e.type, test, a, b, loc=e.loc)
        result = self.temp(_zero(e.type))  # type: ignore[arg-type]
        self.pre.append(ir.If(test, [*pre_a, ir.Assign(result.name, a, loc=self.loc)],
                              [*pre_b, ir.Assign(result.name, b, loc=self.loc)], loc=self.loc))
        return result



class _ValueParts(Visitor[list[ir.Expr]]):
    """The lowered leaves of an aggregate value computed by an operation (`parts` handles
    values read from variables and memory)."""

    def __init__(self, lowering: _FunctionLowering) -> None:
        self.lowering = lowering
        self.parts = lowering.parts

    def visit_Field(self, e: ir.Field) -> list[ir.Expr]:
        start, end = field_range(e.value.type, e.name)
        return self.parts(e.value)[start:end]

    def visit_Construct(self, e: ir.Construct) -> list[ir.Expr]:
        t = e.type
        if isinstance(t, VectorType) and len(e.values) == 1:
            return [self.lowering.shared(self.lowering.scalar(e.values[0]))] * t.n
        return [p for v in e.values for p in self.parts(v)]

    def visit_Cast(self, e: ir.Cast) -> list[ir.Expr]:
        t, value = e.type, e.value
        if isinstance(t, VariantType):
            k = t.case_index(value.type)
            assert k is not None
            out: list[ir.Expr] = [ir.Const(i32, k)]
            for case in t.cases:
                out += self.parts(value) if case == value.type else [
                    _zero(leaf.type) for leaf in leaves(case)]
            return out
        assert isinstance(t, VectorType)
        return [self.lowering.cast(p, t.elem) for p in self.parts(value)]

    def visit_BinOp(self, e: ir.BinOp) -> list[ir.Expr]:
        return [ir.BinOp(_elem(e.type), e.op, a, b, loc=e.loc)
                for a, b in zip(self.parts(e.left), self.parts(e.right))]

    def visit_Compare(self, e: ir.Compare) -> list[ir.Expr]:
        return [ir.Compare(bool_, e.op, a, b, loc=e.loc)
                for a, b in zip(self.parts(e.left), self.parts(e.right))]

    def visit_UnaryOp(self, e: ir.UnaryOp) -> list[ir.Expr]:
        return [ir.UnaryOp(_elem(e.type), e.op, a, loc=e.loc) for a in self.parts(e.operand)]

    def visit_IntrinsicCall(self, e: ir.IntrinsicCall) -> list[ir.Expr]:
        shared = self.lowering.shared
        if e.name == "normalize" and len(e.args) == 1:
            comps = [shared(c) for c in self.parts(e.args[0])]
            norm = shared(self.lowering.intrinsic("sqrt", [_sum_of_squares(comps)]))
            return [ir.BinOp(c.type, "/", c, norm, loc=e.loc) for c in comps]
        if e.name == "cross" and len(e.args) == 2:
            (ax, ay, az), (bx, by, bz) = ([shared(c) for c in self.parts(v)] for v in e.args)
            return [_minus(ay, bz, az, by), _minus(az, bx, ax, bz), _minus(ax, by, ay, bx)]
        columns = zip(*(self.parts(a) for a in e.args))  # element-wise math
        return [ir.IntrinsicCall(_elem(e.type), e.name, list(col), loc=e.loc) for col in columns]

    def generic_visit(self, e: ir.Expr | ir.Stmt) -> list[ir.Expr]:
        t = e.type if isinstance(e, ir.Expr) else None
        raise UnsupportedError(f"{type(e).__name__} of type {t} is not supported here", e.loc)


def _groups(stmts: list[ir.Stmt], width: int, loc: ir.Loc | None) -> list[ir.Stmt]:
    return [ir.VectorAccess(stmts[k:k + width], loc=loc) for k in range(0, len(stmts), width)]


def _times(index: ir.Expr, n: int) -> ir.Expr:
    if isinstance(index, ir.Const):
        return ir.Const(index.type, int(index.value) * n, loc=index.loc)
    return ir.BinOp(index.type, "*", index, ir.Const(index.type, n), loc=index.loc)


def _plus(index: ir.Expr, k: int) -> ir.Expr:
    if k == 0:
        return index
    if isinstance(index, ir.Const):
        return ir.Const(index.type, int(index.value) + k, loc=index.loc)
    return ir.BinOp(index.type, "+", index, ir.Const(index.type, k), loc=index.loc)


def _zero(t: ScalarType) -> ir.Const:
    return ir.Const(t, False if t.is_bool else 0.0 if t.is_float else 0)


def _elem(t: Type) -> ScalarType:
    assert isinstance(t, VectorType)
    return t.elem


def _sum(values: Sequence[ir.Expr]) -> ir.Expr:
    total = values[0]
    for v in values[1:]:
        total = ir.BinOp(total.type, "+", total, v, loc=v.loc)
    return total


def _sum_of_squares(comps: list[ir.Expr]) -> ir.Expr:
    return _sum([ir.BinOp(c.type, "*", c, c, loc=c.loc) for c in comps])


def _minus(a: ir.Expr, b: ir.Expr, c: ir.Expr, d: ir.Expr) -> ir.Expr:
    """a * b - c * d"""
    return ir.BinOp(a.type, "-", ir.BinOp(a.type, "*", a, b), ir.BinOp(a.type, "*", c, d))

