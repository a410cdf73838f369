"""Native vector loads and stores for C-family dialects that have vector types.

`lower_aggregates` wraps the scalar accesses of one whole vector in memory (an element of
an `f32x4[:]` array, `kiln.load(f32x4, a, i)`, `kiln.store(a, i, v)`) in `VectorAccess`
hints. A dialect that mixes in `NativeVectors` and names its vector types emits every hint
whose body still has that form, on global or shared memory, as one wide access (CUDA's
`ld.global.v4.f32`). The address is tested for the vector's alignment first, since foreign
arrays, rows of odd lengths and shared arrays need not have it; the other branch makes the
scalar accesses, from the last component down:

    {
        const float *kiln_p = &a[_agg];
        if (((uint64_t)kiln_p & 15) == 0) {
            float4 kiln_v = *(const float4 *)kiln_p;
            x = kiln_v.x; y = kiln_v.y; z = kiln_v.z; w = kiln_v.w;
        } else {
            w = kiln_p[3]; z = kiln_p[2]; y = kiln_p[1]; x = kiln_p[0];
        }
    }

The backward order matters: NVVM splits a `float4` copy into four scalar accesses and joins
them again later, and in between it would move an access the two branches share at their
end (or start) out of the branch, leaving a `v2` and two scalars; going backwards, the
branches share none. tests/codegen/test_vectors.py checks the PTX for it.

A store computes its components into a vector first, in order, then stores it (the body's
values never read the array stored to). Private arrays keep their scalar accesses, so that
the compiler can still hold them in registers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ..ir import nodes as ir
from ..ir.enums import MemorySpace
from ..ir.types import ArrayType, ScalarType, Type
from ..ir.visit import handles, walk

COMPONENTS = "xyzw"
SPACES = (MemorySpace.GLOBAL, MemorySpace.SHARED)


@dataclass
class WideAccess:
    """What a `VectorAccess` hint does: `targets` (loads) or `values` (stores), in order, of
    consecutive elements of `array` from the element at indices `first`."""

    array: ir.Var
    first: list[ir.Expr]
    targets: list[str]
    values: list[ir.Expr]

    @property
    def elem(self) -> ScalarType:
        return self.array.type.elem  # type: ignore[attr-defined]

    @property
    def width(self) -> int:
        return len(self.targets or self.values)


def wide_access(s: ir.VectorAccess) -> WideAccess | None:
    """The access a hint makes, when its body (which passes may have changed) still is 2 or
    4 loads or stores of consecutive elements of one scalar array, in order."""
    body = s.body
    if len(body) not in (2, 4):
        return None
    places: list[tuple[ir.Var, list[ir.Expr]]] = []
    targets: list[str] = []
    values: list[ir.Expr] = []
    for stmt in body:
        if isinstance(stmt, ir.Assign) and isinstance(stmt.value, ir.Load) and not values:
            places.append((stmt.value.array, stmt.value.indices))
            targets.append(stmt.target)
        elif isinstance(stmt, ir.Store) and not targets:
            places.append((stmt.array, stmt.indices))
            values.append(stmt.value)
        else:
            return None
    array, indices = places[0]
    if not isinstance(array.type, ArrayType) or not isinstance(array.type.elem, ScalarType):
        return None
    *lead, last = indices
    base, offset = _split(last)
    if offset is None:
        return None
    for k, (other, at) in enumerate(places):
        other_base, other_offset = _split(at[-1])
        if other.name != array.name or other_offset != offset + k \
                or not _same(other_base, base) or not all(map(_same, at[:-1], lead)):
            return None
    read = {n.name for _, at in places for i in at for n in walk(i) if isinstance(n, ir.Var)}
    if len(set(targets)) != len(targets) or read & set(targets):
        return None  # a later load's index would read an earlier load's result
    if any(isinstance(n, ir.Var) and n.name == array.name for v in values for n in walk(v)):
        return None
    first = last if offset == 0 and base is not None else _offset(base, offset, last.type)
    return WideAccess(array, [*lead, first], targets, values)


def _split(index: ir.Expr) -> tuple[ir.Expr | None, int | None]:
    """An index as (base, constant offset): `j + 2` -> (j, 2), `6` -> (None, 6), `j` -> (j, 0);
    (None, None) for other forms."""
    match index:
        case ir.Const(value=value):
            return None, int(value)
        case ir.Var():
            return index, 0
        case ir.BinOp(op="+", left=ir.Var() as base, right=ir.Const(value=value)):
            return base, int(value)
    return None, None


def _same(a: ir.Expr | None, b: ir.Expr | None) -> bool:
    """Structural equality of trivial expressions (variables and constants)."""
    match a, b:
        case None, None:
            return True
        case ir.Var(name=x), ir.Var(name=y):
            return x == y
        case ir.Const(value=x, type=s), ir.Const(value=y, type=t):
            return bool(x == y and s == t)
    return False


def _offset(base: ir.Expr | None, offset: int, t: Type) -> ir.Expr:
    if base is None:
        return ir.Const(t, offset)
    return ir.BinOp(t, "+", base, ir.Const(t, offset))


class NativeVectors:
    """Mixin for a `CEmitter` dialect: `VectorAccess` hints as wide loads and stores."""

    vector_types: ClassVar[dict[ScalarType, str]] = {}
    """Element type -> the stem of its vector type names (f32 -> `float`: float2, float4)."""
    address_integer: ClassVar[str] = "uint64_t"
    """An unsigned integer type a pointer converts to, for the alignment test."""

    # what the CEmitter provides
    names: Any
    func: ir.Function
    pointer_qualifiers: ClassVar[dict[MemorySpace, str]]
    line: Any
    indented: Any
    element: Any
    expr: Any
    var: Any
    storage_type: Any

    def wide(self, s: ir.VectorAccess) -> WideAccess | None:
        access = wide_access(s)
        if access is None or access.elem not in self.vector_types \
                or access.array.type.space not in SPACES:  # type: ignore[attr-defined]
            return None
        return access

    @handles(ir.VectorAccess, when=lambda emitter, s: emitter.wide(s) is not None)
    def emit_wide_access(self, s: ir.VectorAccess) -> None:
        access = self.wide(s)
        assert access is not None
        space = access.array.type.space  # type: ignore[attr-defined]
        qual = self.pointer_qualifiers.get(space, "")
        qual += " " if qual else ""
        vector = f"{self.vector_types[access.elem]}{access.width}"
        p, v = self.names.fresh("kiln_p"), self.names.fresh("kiln_v")
        mask = access.elem.itemsize * access.width - 1
        aligned = f"if ((({self.address_integer}){p} & {mask}) == 0) {{"
        lanes = list(zip(range(access.width), COMPONENTS))
        const = "const " if access.targets else ""
        with self.indented("{", loc=s.loc):
            self.line(f"{qual}{const}{self.storage_type(access.elem)} *{p} = "
                      f"&{self.element(access.array, access.first)};")
            if access.targets:  # the scalar path runs backwards (see the module's doc)
                with self.indented(aligned, closer=""):
                    self.line(f"{vector} {v} = *({qual}const {vector} *){p};")
                    self.line(" ".join(f"{self.var(t)} = {v}.{c};"
                                       for t, (_, c) in zip(access.targets, lanes)))
                with self.indented("} else {"):
                    self.line(" ".join(f"{self.var(t)} = {p}[{k}];"
                                       for t, (k, _) in reversed(list(zip(access.targets,
                                                                          lanes)))))
                return
            self.line(f"{vector} {v};")
            for value, (_, c) in zip(access.values, lanes):
                self.line(f"{v}.{c} = {self.expr(value).text};")
            with self.indented(aligned, closer=""):
                self.line(f"*({qual}{vector} *){p} = {v};")
            with self.indented("} else {"):
                self.line(" ".join(f"{p}[{k}] = {v}.{c};" for k, c in reversed(lanes)))

    def vector_arrays(self) -> set[str]:
        """Arrays of the current function accessed with wide accesses."""
        return {a.array.name for n in walk(self.func.body) if isinstance(n, ir.VectorAccess)
                and (a := self.wide(n)) is not None}

    def matrix_arrays(self) -> set[str]:
        """Arrays of the current function that native matrix operations read or write."""
        return {a.name for n in walk(self.func.body) if isinstance(n, ir.IntrinsicCall)
                and n.name.startswith("native_") for a in n.args if isinstance(a, ir.Var)}

    def declaration(self, name: str, t: Type, cname: str | None = None) -> str:
        """Shared arrays accessed with vectors, or by matrix operations (16-byte `ldmatrix`
        rows and `cp.async` copies), are aligned for them (16 bytes)."""
        text: str = super().declaration(name, t, cname)  # type: ignore[misc]
        if isinstance(t, ArrayType) and t.space is MemorySpace.SHARED \
                and (name in self.vector_arrays() or name in self.matrix_arrays()):
            return text[:-1] + " __attribute__((aligned(16)));"
        return text
