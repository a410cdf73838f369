"""Views of arrays in kernels: `row = m[i]`, `s = a[lo:hi]`, `r = m[i, :]`, `c = m[:, j]`,
and chained indexing `m[i][j]`.

A view is resolved when the kernel is compiled, with no new IR: it remembers its array and,
per axis of the array, either a fixed index or a slice's start and length. Indexing the
view indexes the array (`row[j]` is `m[i, j]`, `s[k]` is `a[lo + k]`), so every backend
runs views as it runs arrays, and strided views (columns) cost nothing extra. A view bound
to a name evaluates its indices once, into temporaries; binding the name again (in a loop)
assigns those temporaries, so the name always means its latest binding. Views are read,
written, updated, used with atomics, `len()` and `.shape`, and passed to device functions
(`ViewParam`); they are not values of their own (no `b = row`).

A checked program (`debug=True`) marks each of a view's indices and each bound of a slice
as an `ir.CheckedIndex` against the extent of the axis it indexes (the view's own, not the
array's), which the bounds checks report where it is evaluated: where the view is bound,
passed or indexed in place.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

import numpy as np

from ..errors import ConstantError, KernelTypeError, UnsupportedError
from ..ir import nodes as ir
from ..ir.passes.bounds import index_message
from ..ir.types import ArrayType, ScalarType, Type, i32
from .conversions import cast, literal_value
from .part import Part


@dataclass
class Axis:
    """One axis of the viewed array: a fixed `index`, or a slice from `start` of `length`.

    In a checked program (debug=True) a slice also has its `extent`: the length as its
    indices are checked against, with the checks of the slice's bounds in it, so that
    they run where the view is bound or indexed while `length` stays what it is (a
    constant for `a[0:4]`)."""

    index: ir.Expr | None = None
    start: ir.Expr | None = None
    length: ir.Expr | None = None
    extent: ir.Expr | None = None

    @property
    def checked_extent(self) -> ir.Expr:
        extent = self.extent if self.extent is not None else self.length
        assert extent is not None
        return extent


@dataclass
class View:
    array: ir.Var
    axes: list[Axis]
    loc: ir.Loc

    @property
    def sliced(self) -> list[Axis]:
        """The axes the view keeps, in order (its own axes)."""
        return [a for a in self.axes if a.index is None]

    @property
    def shape_kind(self) -> tuple[bool, ...]:
        return tuple(a.index is None for a in self.axes)


@dataclass(frozen=True)
class ViewParam(Type):
    """A device function's parameter that receives a view: the array, then per axis of
    the array its fixed index (`kinds[k]` False) or its slice's start and length (True),
    as i32 parameters. The function specialises per view kind."""

    array: ArrayType
    kinds: tuple[bool, ...]

    def __repr__(self) -> str:
        axes = ", ".join(":" if kept else "i" for kept in self.kinds)
        return f"view {self.array.elem}[{axes}]"

    @property
    def ndim(self) -> int:
        return sum(self.kinds)


def view_params(name: str, t: ViewParam, loc: ir.Loc) -> tuple[list[ir.Param], View]:
    """The IR parameters of view parameter `name`, and the view they make."""
    array = ir.Param(f"_kv_{name}", t.array)
    params, axes = [array], []
    for k, kept in enumerate(t.kinds):
        names = ("start", "length") if kept else ("index",)
        made = {n: ir.Param(f"_kv_{name}_{n}{k}", i32) for n in names}
        params += made.values()
        axes.append(Axis(**{n: ir.Var(i32, p.name, loc=loc) for n, p in made.items()}))
    return params, View(ir.Var(t.array, array.name, loc=loc), axes, loc)


@dataclass(frozen=True)
class _Place:
    """An axis of a view or array as checked programs name it in their reports: `name`
    as written, its axis `axis` of `ndim`, and what the code does there (`verb`)."""

    name: str
    axis: int
    ndim: int
    verb: str

    def message(self, place: str = "{index}") -> str:
        """A failed check's report (`place`: `{index}:` / `:{index}` for a slice's bound)."""
        verb = "sliced" if place != "{index}" else self.verb
        return index_message(verb, self.name, self.axis, self.ndim, place)


class Views(Part):
    """Builds views: binds them to names, indexes them, passes them to device functions."""

    # ------------------------------------------------------------ making views

    def is_view_key(self, node: ast.Subscript) -> bool:
        """Whether `node` takes a view: fewer indices than the array has axes, or a slice."""
        base_ndim = self.viewed_ndim(node.value)
        if base_ndim is None:
            return False
        items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        return len(items) < base_ndim or any(isinstance(i, ast.Slice) for i in items)

    def viewed_ndim(self, node: ast.expr) -> int | None:
        """The number of axes of the array or view `node` names (None: not one)."""
        if isinstance(node, ast.Name) and node.id in self.scope.views:
            return len(self.scope.views[node.id].sliced)
        if isinstance(node, ast.Subscript) and self.is_view_key(node):
            return len(self.view_of(node).sliced)
        if isinstance(node, ast.Name):
            t = self.scope.param_names.get(node.id) or self.scope.local_types.get(node.id)
            if isinstance(t, ArrayType):
                return t.ndim
            if t is None:  # a module-level table?
                value = self.resolver.try_resolve(node)
                if isinstance(value, np.ndarray):
                    return value.ndim
        return None

    def base_view(self, node: ast.expr, verb: str = "viewed") -> View:
        """`node` (an array, a view name, or a view expression) as a view of all its axes;
        `verb` says what checked programs report of its indices."""
        if isinstance(node, ast.Name) and node.id in self.scope.views:
            return self.scope.views[node.id]
        if isinstance(node, ast.Subscript):
            return self.view_of(node, verb)
        array = self.fb.exprs.expr(node)
        if not isinstance(array, ir.Var) or not isinstance(array.type, ArrayType):
            raise KernelTypeError(f"cannot take a view of a {array.type}", self.loc(node))
        axes = [Axis(start=ir.Const(i32, 0, loc=array.loc),
                     length=ir.ArrayDim(i32, array, k, loc=array.loc))
                for k in range(array.type.ndim)]
        return View(array, axes, self.loc(node))

    def view_of(self, node: ast.Subscript, verb: str = "viewed") -> View:
        """The view `node` takes (indices evaluated where they stand); `verb` says what
        checked programs report of its indices."""
        outer = self.base_view(node.value, verb)
        items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        own = outer.sliced
        if len(items) > len(own):
            raise KernelTypeError(f"a view with {len(own)} axis(es) is indexed with "
                                  f"{len(items)}", self.loc(node.slice))
        new_axes: dict[int, Axis] = {}
        for k, (axis, item) in enumerate(zip(own, items)):
            place = _Place(ast.unparse(node.value), k, len(own), verb)
            new_axes[id(axis)] = self.narrow(axis, item, place)
        axes = [new_axes.get(id(a), a) for a in outer.axes]
        return View(outer.array, axes, self.loc(node))

    def narrow(self, axis: Axis, item: ast.expr, place: _Place) -> Axis:
        """One axis of a view indexed by an index or a slice."""
        assert axis.start is not None and axis.length is not None
        extent = axis.checked_extent
        if not isinstance(item, ast.Slice):
            index = self.checked(self.fb.exprs.index(item), extent, place.message())
            return Axis(index=self.offset(axis.start, index, item))
        if item.step is not None:
            raise UnsupportedError("views take slices without a step (a[lo:hi])",
                                   self.loc(item.step))
        lo = self.fb.exprs.index(item.lower) if item.lower is not None else None
        hi = self.fb.exprs.index(item.upper) if item.upper is not None else None
        if lo is None:
            start = axis.start
        else:
            checked_lo = self.checked(lo, extent, place.message("{index}:"), bound=True)
            start = self.offset(axis.start, checked_lo, item)
        length = self.span(axis.length, lo, hi, item)
        if not self.fb.ctx.checked:
            return Axis(start=start, length=length)
        if hi is not None:
            hi = self.checked(hi, extent, place.message(":{index}"), bound=True)
        return Axis(start=start, length=length, extent=self.span(extent, lo, hi, item))

    def span(self, length: ir.Expr, lo: ir.Expr | None, hi: ir.Expr | None,
             item: ast.Slice) -> ir.Expr:
        """The length of `[lo:hi]` of an axis of `length`."""
        if hi is None:
            return length if lo is None else self.fb.exprs.binop("-", length, lo, item)
        return hi if lo is None else self.fb.exprs.binop("-", hi, lo, item)

    def checked(self, value: ir.Expr, extent: ir.Expr, message: str,
                bound: bool = False) -> ir.Expr:
        """`value`, checked against `extent` where it is evaluated in a program built with
        checks (`ir.CheckedIndex`, debug=True); as it is elsewhere."""
        if not self.fb.ctx.checked:
            return value
        return ir.CheckedIndex(value.type, value, extent, message, bound, loc=value.loc)

    def offset(self, start: ir.Expr, index: ir.Expr, node: ast.AST) -> ir.Expr:
        value = literal_value(start)
        return index if value == 0 else self.fb.exprs.binop("+", start, index, node)

    # ------------------------------------------------------------ names

    def bind_view(self, name: str, node: ast.Subscript, stmt: ast.stmt) -> list[ir.Stmt]:
        """`name = m[i]`: the view's indices into temporaries (the same ones when `name`
        is bound again to a view of the same array and kind)."""
        view = self.view_of(node)
        old = self.scope.views.get(name)
        if old is not None and (old.array.name != view.array.name
                                or old.shape_kind != view.shape_kind):
            raise KernelTypeError(f"'{name}' is a view of '{old.array.name}' with "
                                  f"{len(old.sliced)} axis(es) (line {old.loc.line}); bind "
                                  "another kind of view to another name", self.loc(stmt))
        out: list[ir.Stmt] = []
        axes = []
        for k, axis in enumerate(view.axes):
            fields = {}
            for field in ("index", "start", "length", "extent"):
                value = getattr(axis, field)
                if field == "extent" and axis.index is None and self.fb.ctx.checked:
                    value = axis.checked_extent  # one to assign again in a checked program
                if value is None:
                    continue
                target = getattr(old.axes[k], field) if old is not None else None
                fields[field] = self.hold(value, target, out)
            axes.append(Axis(**fields))
        self.scope.views[name] = View(view.array, axes, self.loc(stmt))
        return out

    def hold(self, value: ir.Expr, target: ir.Expr | None, out: list[ir.Stmt]) -> ir.Expr:
        """`value` in a temporary (`target`, when the name is bound again)."""
        if target is None and isinstance(value, (ir.Const, ir.ArrayDim)):
            return value  # fixed for the array: nothing to hold
        if isinstance(target, ir.Var):
            out.append(ir.Assign(target.name, cast(value, target.type), loc=value.loc))
            return target
        if target is not None:  # held as a constant before: now it varies
            raise ConstantError("a view bound again must keep its constant bounds",
                                value.loc)
        assert isinstance(value.type, ScalarType)
        name = self.scope.temp(value.type)
        out.append(ir.Assign(name, value, loc=value.loc))
        return ir.Var(value.type, name, loc=value.loc)

    # ------------------------------------------------------------ using views

    def view_element(self, node: ast.Subscript, verb: str) -> tuple[ir.Var, list[ir.Expr]]:
        """`v[j, ...]` of a view: the array and its indices (`verb`: what the access does,
        for checked programs' reports)."""
        view = self.base_view(node.value, verb)
        items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        own = view.sliced
        if len(items) != len(own) or any(isinstance(i, ast.Slice) for i in items):
            raise KernelTypeError(f"a view with {len(own)} axis(es) is indexed with "
                                  f"{len(items)} index(es)", self.loc(node.slice))
        name = ast.unparse(node.value)
        given = {}
        for k, (a, item) in enumerate(zip(own, items)):
            message = _Place(name, k, len(own), verb).message()
            given[id(a)] = self.checked(self.fb.exprs.index(item), a.checked_extent, message)
        indices = []
        for a in view.axes:
            if a.index is not None:
                indices.append(a.index)
            else:
                assert a.start is not None
                indices.append(self.offset(a.start, given[id(a)], node))
        return view.array, indices

    def view_length(self, node: ast.expr, axis: int, where: ast.AST) -> ir.Expr:
        """`len(v)` / `v.shape[axis]`."""
        own = self.base_view(node).sliced
        if not -len(own) <= axis < len(own):
            raise ConstantError(f"shape index must be a constant in 0..{len(own) - 1}",
                                self.loc(where))
        length = own[axis % len(own)].length
        assert length is not None
        return length

    def is_view_name(self, node: ast.expr) -> bool:
        return isinstance(node, ast.Name) and node.id in self.scope.views

    def names_view(self, node: ast.expr) -> bool:
        """Whether `node` is a view: a view's name, or a subscript that takes one."""
        return self.is_view_name(node) or (isinstance(node, ast.Subscript)
                                           and self.is_view_key(node))

    def atomic_on_view(self, arg_nodes: list[ast.expr]) -> list[ir.Expr]:
        """`kiln.atomic_add(row, j, v)`: the array and its indices, then the values."""
        count = len(self.base_view(arg_nodes[0]).sliced)
        key = ast.Tuple(elts=arg_nodes[1:1 + count], ctx=ast.Load())
        element = ast.copy_location(ast.Subscript(value=arg_nodes[0], slice=key,
                                                  ctx=ast.Load()), arg_nodes[0])
        array, indices = self.view_element(element, "updated")
        return [array, *indices, *(self.fb.exprs.expr(a) for a in arg_nodes[1 + count:])]

    def view_argument(self, node: ast.expr, ptype: Type | None, what: str
                      ) -> tuple[ViewParam, list[ir.Expr]]:
        """A view passed to a device function: its parameter type and the arguments (the
        array, then each axis's index or start and length)."""
        view = self.base_view(node)
        assert isinstance(view.array.type, ArrayType)
        t = ViewParam(view.array.type, view.shape_kind)
        if ptype is not None and (not isinstance(ptype, ArrayType)
                                  or ptype.elem != t.array.elem or ptype.ndim != t.ndim):
            raise KernelTypeError(f"{what} expects {ptype}, got a view of {t.ndim} axis(es) "
                                  f"of {t.array.elem}", self.loc(node))
        args: list[ir.Expr] = [view.array]
        for axis in view.axes:  # a checked program's extent: the slice's checks run here
            parts = ((axis.index,) if axis.index is not None
                     else (axis.start, axis.checked_extent))
            args += [cast(p, i32) for p in parts if p is not None]
        return t, args
