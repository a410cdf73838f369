"""The frontend's records, variants and vectors.

Records and vectors are built with `Construct`, read with `Field` and written with
`SetField` (docs/ir-conventions.md); a case value converts to its variant with a `Cast`;
`match` on a variant becomes an `if` chain on its tag that binds the case's fields. Vector
arithmetic is element-wise: a scalar operand is repeated (a one-value `Construct`).
"""

from __future__ import annotations

import ast

from ..errors import ArityError, KernelError, KernelTypeError, UnknownNameError, UnsupportedError
from ..ir import nodes as ir
from ..ir.hosttypes import kiln_type_of, type_from_object
from ..ir.types import (
    COMPONENTS,
    ArrayType,
    ScalarType,
    StructType,
    VariantType,
    VectorType,
    bool_,
    f32,
    i32,
)
from .conversions import cast, convert, element_type, literal_value
from .part import Part
from .records import Variant, field_defaults
from .typing_rules import comparison_type, operand_type

BITWISE = ("<<", ">>", "&", "|", "^")


class Aggregates(Part):
    """Builds records, variants and vectors: construction, fields, wide loads and stores,
    element-wise vector arithmetic and `match`."""

    # ------------------------------------------------------------ construction

    def construct(self, t: StructType, node: ast.Call) -> ir.Expr:
        """`Particle(x, y, vx=0.0)`: fields in order, by keyword, or from their defaults."""
        loc = self.loc(node)
        names = [n for n, _ in t.fields]
        if len(node.args) > len(names):
            raise ArityError(f"{t} has {len(names)} field(s) ({', '.join(names)}), got "
                             f"{len(node.args)} positional argument(s)", loc)
        given: dict[str, ast.expr] = dict(zip(names, node.args))
        for kw in node.keywords:
            if kw.arg is None or kw.arg not in names:
                raise ArityError(f"{t} has no field '{kw.arg}' (fields: {', '.join(names)})",
                                 self.loc(kw.value))
            if kw.arg in given:
                raise ArityError(f"field '{kw.arg}' of {t} is given twice", self.loc(kw.value))
            given[kw.arg] = kw.value
        defaults = field_defaults(t)
        values: list[ir.Expr] = []
        for name, ft in t.fields:
            what = f"field '{name}' of {t}"
            if name in given:
                value = self.fb.exprs.expr(given[name])
                values.append(convert(value, ft, self.loc(given[name]), what=what))
            elif name in defaults and isinstance(ft, ScalarType) \
                    and isinstance(defaults[name], (bool, int, float)):
                values.append(cast(ir.Const(ft, defaults[name], loc=loc), ft))
            else:
                raise ArityError(f"{t}(...) is missing {what}", loc)
        return ir.Construct(t, values, loc=loc)

    def vector_call(self, t: VectorType, node: ast.Call) -> ir.Expr:
        """`f32x3(x, y, z)`, `f32x3(s)` (every component s) or `f32x3(v)` (a conversion)."""
        loc = self.loc(node)
        if node.keywords:
            raise UnsupportedError(f"{t}(...) takes no keyword arguments", loc)
        if len(node.args) not in (1, t.n):
            raise ArityError(f"{t} takes {t.n} components or 1 value, got {len(node.args)}",
                             loc)
        args = [self.fb.exprs.expr(a) for a in node.args]
        for a, a_node in zip(args, node.args):
            if isinstance(a.type, VectorType) and len(args) == 1:
                if a.type.n != t.n:
                    raise KernelTypeError(f"cannot convert a {a.type} to {t}", loc)
                return a if a.type == t else ir.Cast(t, a, loc=loc)
            if not isinstance(a.type, ScalarType):
                raise KernelTypeError(f"the components of a {t} are numbers, got {a.type}",
                                      self.loc(a_node))
        return ir.Construct(t, [cast(a, t.elem) for a in args], loc=loc)

    def variant_call(self, t: VariantType, node: ast.Call) -> ir.Expr:
        """`Shape(Circle(1.0))`: a case value as the variant."""
        loc = self.loc(node)
        if len(node.args) != 1 or node.keywords:
            raise ArityError(f"{t}(...) takes one value of a case of {t}", loc)
        return convert(self.fb.exprs.expr(node.args[0]), t, loc, what=f"a {t}")

    # ------------------------------------------------------------ fields

    def field(self, base: ir.Expr, name: str, node: ast.AST) -> ir.Expr:
        loc = self.loc(node)
        t = base.type
        if isinstance(t, VectorType):
            if name not in COMPONENTS[: t.n]:
                raise UnknownNameError(f"a {t} has components "
                                       f"{', '.join('.' + c for c in COMPONENTS[:t.n])}, "
                                       f"not .{name}", loc)
            return ir.Field(t.elem, base, name, loc=loc)
        if isinstance(t, StructType):
            ft = t.field_type(name)
            if ft is None:
                raise UnknownNameError(f"{t} has no field '{name}' (fields: "
                                       f"{', '.join(n for n, _ in t.fields)})", loc)
            return ir.Field(ft, base, name, loc=loc)
        assert isinstance(t, VariantType)
        if name == "tag":  # which case it holds: its position among the cases
            return ir.Field(i32, base, "tag", loc=loc)
        raise KernelTypeError(f"a {t} is taken apart with match: `match value: case "
                              f"{t.cases[0].name}(...):` (its .tag says which case it holds)",
                              loc)

    def variant_tag_call(self, variant: Variant, node: ast.Call) -> ir.Expr:
        """`Shape.tag(Rect)` in a kernel: the constant tag of a case, as on the host."""
        loc = self.loc(node)
        if len(node.args) != 1 or node.keywords:
            raise ArityError(f"{variant.name}.tag(case) takes one case class", loc)
        case = self.resolver.try_resolve(node.args[0])
        case_type = kiln_type_of(case)
        if case_type is None or variant.type.case_index(case_type) is None:
            raise KernelTypeError(f"{variant.name}.tag(...) takes a case of {variant.name} ("
                                  f"{', '.join(c.name for c in variant.type.cases)})",
                                  self.loc(node.args[0]))
        return ir.Const(i32, variant.tag(case), loc=loc)

    def isinstance_call(self, node: ast.Call) -> ir.Expr:
        """`isinstance(s, Rect)` of a variant value: whether it holds that case."""
        loc = self.loc(node)
        if len(node.args) != 2 or node.keywords:
            raise ArityError("isinstance(value, case) takes two arguments", loc)
        value = self.fb.exprs.expr(node.args[0])
        if not isinstance(value.type, VariantType):
            raise UnsupportedError("isinstance() in kernels tests which case a variant value "
                                   f"holds; this value is a {value.type}", loc)
        case = kiln_type_of(self.resolver.try_resolve(node.args[1]))
        index = value.type.case_index(case) if case is not None else None
        if index is None:
            raise KernelTypeError(f"isinstance(..., case) takes a case of {value.type} ("
                                  f"{', '.join(c.name for c in value.type.cases)})",
                                  self.loc(node.args[1]))
        tag = ir.Field(i32, value, "tag", loc=loc)
        return ir.Compare(bool_, "==", tag, ir.Const(i32, index, loc=loc), loc=loc)

    def place(self, node: ast.expr) -> ir.Expr:
        """An assignable record or vector: a local, an array element, or a field of one."""
        base = self.fb.exprs.expr(node)
        p = base
        while isinstance(p, ir.Field):
            p = p.value
        if not (isinstance(p, ir.Load) and p.type == element_type(p.array)
                or (isinstance(p, ir.Var) and not isinstance(p.type, ArrayType))):
            raise UnsupportedError("can only assign fields of variables and array elements",
                                   self.loc(node))
        if not isinstance(base.type, (StructType, VectorType)):
            raise KernelTypeError(f"a {base.type} has no fields to assign", self.loc(node))
        return base

    def assign_field(self, target: ast.Attribute, value: ir.Expr, stmt: ast.AST,
                     compound: bool = False) -> ir.Stmt:
        """`p.x = value` (also `ps[i].pos.y = value`)."""
        base = self.place(target.value)
        ft = self.field(base, target.attr, target).type
        converted = convert(value, ft, self.loc(target), compound=True,
                                 what=f"field '{target.attr}' of {base.type}")
        return ir.SetField(base, target.attr, converted, loc=self.loc(stmt))

    def update_field(self, target: ast.Attribute, op: str, value_node: ast.expr,
                     stmt: ast.AST) -> ir.Stmt:
        """`p.x += value`."""
        current = self.field(self.place(target.value), target.attr, target)
        result = self.fb.exprs.binop(op, current, self.fb.exprs.expr(value_node), stmt)
        return self.assign_field(target, result, stmt, compound=True)

    # ------------------------------------------------------------ wide loads and stores

    def wide_load(self, node: ast.Call) -> ir.Expr:
        """`kiln.load(f32x4, a, i)`: elements 4i .. 4i+3 of a scalar array as one vector (the
        last index counts vectors: `kiln.load(f32x4, m, r, j)` reads m[r, 4j .. 4j+3])."""
        loc = self.loc(node)
        if node.keywords or len(node.args) < 3:
            raise ArityError("kiln.load(vector type, array, index...) takes a vector type, an "
                             f"array and its indices, got {len(node.args)} argument(s)", loc)
        t = type_from_object(self.resolver.try_resolve(node.args[0]))
        if not isinstance(t, VectorType):
            raise KernelTypeError("the first argument of kiln.load is a vector type such as "
                                  f"f32x4, got '{ast.unparse(node.args[0])}'",
                                  self.loc(node.args[0]))
        array, elem, indices = self.wide_element("kiln.load", node.args[1], node.args[2:])
        if t.elem != elem:
            raise KernelTypeError(f"kiln.load({t}, ...) reads {t.n} {t.elem} elements, but "
                                  f"'{array.name}' holds {elem} (load a {VectorType(elem, t.n)})",
                                  self.loc(node.args[0]))
        return ir.Load(t, array, indices, loc=loc)

    def wide_store(self, node: ast.Call) -> ir.Stmt:
        """`kiln.store(a, i, v)`: vector `v` into elements 4i .. 4i+3 of a scalar array (the
        value converts like an element store)."""
        loc = self.loc(node)
        if node.keywords or len(node.args) < 3:
            raise ArityError("kiln.store(array, index..., vector) takes an array, its indices "
                             f"and a vector, got {len(node.args)} argument(s)", loc)
        array, elem, indices = self.wide_element("kiln.store", node.args[0], node.args[1:-1])
        value = self.fb.exprs.expr(node.args[-1])
        vt = value.type
        if not isinstance(vt, VectorType):
            raise KernelTypeError(f"kiln.store writes a vector (f32x4, ...), got a {vt}; store "
                                  f"one element with {array.name}[i] = value",
                                  self.loc(node.args[-1]))
        t = VectorType(elem, vt.n)
        converted = convert(value, t, self.loc(node.args[-1]), compound=True,
                                       what=f"{vt.n} elements of '{array.name}'")
        return ir.Store(array, indices, converted, loc=loc)

    def wide_element(self, what: str, array_node: ast.expr,
                     index_nodes: list[ast.expr]
                     ) -> tuple[ir.Var, ScalarType, list[ir.Expr]]:
        """The scalar array, its element type and the indices of a wide load or store."""
        array = self.fb.exprs.expr(array_node)
        t = array.type
        if not isinstance(array, ir.Var) or not isinstance(t, ArrayType):
            raise KernelTypeError(f"{what} needs an array, got {t}", self.loc(array_node))
        if not isinstance(t.elem, ScalarType):
            raise KernelTypeError(f"{what} moves vectors in arrays of scalars; '{array.name}' "
                                  f"holds {t.elem} (use {array.name}[i])", self.loc(array_node))
        if len(index_nodes) != t.ndim:
            raise KernelTypeError(f"'{array.name}' has {t.ndim} dimension(s) but {what} got "
                                  f"{len(index_nodes)} index(es)", self.loc(array_node))
        return array, t.elem, [self.fb.exprs.index(i) for i in index_nodes]

    # ------------------------------------------------------------ vector arithmetic

    def splat(self, value: ir.Expr, t: VectorType) -> ir.Expr:
        """A scalar or vector operand as a `t` (a scalar repeats in every component)."""
        if isinstance(value.type, VectorType):
            return value if value.type == t else ir.Cast(t, value, loc=value.loc)
        return ir.Construct(t, [cast(value, t.elem)], loc=value.loc)

    def vector_operands(self, op: str, left: ir.Expr, right: ir.Expr, loc: ir.Loc,
                        compare: bool = False) -> tuple[VectorType, ir.Expr, ir.Expr]:
        """The common vector type of two operands (at least one a vector) and both as it."""
        sides = []
        n = None
        for side in (left, right):
            t = side.type
            if isinstance(t, VectorType):
                if n is not None and t.n != n:
                    raise KernelTypeError(f"operator {op} of vectors of different lengths "
                                          f"({left.type} and {right.type})", loc)
                n = t.n
                sides.append(t.elem)
            elif isinstance(t, ScalarType):
                sides.append(t)
            else:
                raise KernelTypeError(f"operator {op} needs numbers or vectors, got {t}",
                                      side.loc or loc)
        assert n is not None
        lv, rv = literal_value(left), literal_value(right)
        if sides[0].is_bool and sides[1].is_bool:
            elem = bool_
        elif compare:
            elem = comparison_type(sides[0], sides[1], lv, rv)
        else:
            elem = operand_type(sides[0], sides[1], lv, rv)
        if op in BITWISE and elem.is_float:
            raise KernelTypeError(f"operator {op} needs integers, got {left.type} and "
                                  f"{right.type}", loc)
        if op == "/" and not elem.is_float:
            elem = f32
        vt = VectorType(elem, n)
        return vt, self.splat(left, vt), self.splat(right, vt)

    def vector_binop(self, op: str, left: ir.Expr, right: ir.Expr, loc: ir.Loc) -> ir.Expr:
        vt, a, b = self.vector_operands(op, left, right, loc)
        return ir.BinOp(vt, op, a, b, loc=loc)

    def vector_compare(self, op: str, left: ir.Expr, right: ir.Expr, loc: ir.Loc) -> ir.Expr:
        """Element-wise: a vector of bools (for `all(...)`, `any(...)` and components)."""
        vt, a, b = self.vector_operands(op, left, right, loc, compare=True)
        return ir.Compare(VectorType(bool_, vt.n), op, a, b, loc=loc)

    def vector_unary(self, op: str, operand: ir.Expr, loc: ir.Loc) -> ir.Expr:
        t = operand.type
        assert isinstance(t, VectorType)
        if op == "~" and t.elem.is_float:
            raise KernelTypeError(f"operator ~ needs integers, got {t}", loc)
        if t.elem.is_bool and op in "-+":
            raise KernelTypeError(f"operator {op} needs numbers, got {t}", loc)
        return ir.UnaryOp(t, "not" if op == "~" and t.elem.is_bool else op, operand, loc=loc)

    # ------------------------------------------------------------ match

    def match(self, node: ast.Match) -> list[ir.Stmt]:
        """`match shape: case Circle(r=r): ... case _: ...` on a variant."""
        subject = self.fb.exprs.expr(node.subject)
        t = subject.type
        if not isinstance(t, VariantType):
            raise KernelTypeError(f"match takes a variant (kiln.variant) value, got {t}",
                                  self.loc(node.subject))
        out: list[ir.Stmt] = []
        if not isinstance(subject, ir.Var):
            name = self.scope.temp(t)
            out.append(ir.Assign(name, subject, loc=self.loc(node)))
            subject = ir.Var(t, name, loc=subject.loc)
        arms: list[tuple[int, list[ir.Stmt]]] = []
        fallback: list[ir.Stmt] | None = None
        for case in node.cases:  # Python itself rejects cases after `case _`
            if case.guard is not None:
                raise UnsupportedError("case guards (`case ... if ...`) are not supported",
                                       self.loc(case.guard))
            pattern = case.pattern
            if isinstance(pattern, ast.MatchAs) and pattern.pattern is None \
                    and pattern.name is None:
                fallback = self.fb.stmts.block(case.body)
                continue
            index, bindings = self.case_pattern(t, subject, pattern)
            if index in (i for i, _ in arms):
                raise KernelError(f"case {t.cases[index].name} is matched twice",
                                  self.loc(pattern))
            arms.append((index, bindings + self.fb.stmts.block(case.body)))
        missing = [c.name for i, c in enumerate(t.cases) if i not in {i for i, _ in arms}]
        if missing and fallback is None:
            raise KernelTypeError(f"match on {t} misses case(s) {', '.join(missing)}: add "
                                  "them or a `case _:`", self.loc(node))
        chain = fallback or []
        loc = self.loc(node)
        for index, body in reversed(arms):
            tag = ir.Field(i32, subject, "tag", loc=loc)
            cond = ir.Compare(bool_, "==", tag, ir.Const(i32, index, loc=loc), loc=loc)
            chain = [ir.If(cond, body, chain, loc=loc)]
        return out + chain

    def case_pattern(self, t: VariantType, subject: ir.Expr,
                     pattern: ast.pattern) -> tuple[int, list[ir.Stmt]]:
        """The case a class pattern names, and assignments of the names it binds."""
        if not isinstance(pattern, ast.MatchClass):
            raise UnsupportedError("match cases are variant cases (`case Circle(r=r):`) or "
                                   "`case _:`", self.loc(pattern))
        case = kiln_type_of(self.resolver.resolve(pattern.cls, self.loc(pattern.cls)))
        index = t.case_index(case) if case is not None else None
        if index is None:
            raise KernelTypeError(f"{ast.unparse(pattern.cls)} is not a case of {t} (cases: "
                                  f"{', '.join(c.name for c in t.cases)})",
                                  self.loc(pattern.cls))
        record = t.cases[index]
        names = [n for n, _ in record.fields]
        if len(pattern.patterns) > len(names):
            raise ArityError(f"{record} has {len(names)} field(s), the pattern gives "
                             f"{len(pattern.patterns)}", self.loc(pattern))
        fields = list(zip(names, pattern.patterns)) + list(zip(pattern.kwd_attrs,
                                                               pattern.kwd_patterns))
        payload = ir.Field(record, subject, record.name, loc=self.loc(pattern))
        out: list[ir.Stmt] = []
        for field_name, sub in fields:
            if field_name not in names:
                raise UnknownNameError(f"{record} has no field '{field_name}' (fields: "
                                       f"{', '.join(names)})", self.loc(sub))
            if not (isinstance(sub, ast.MatchAs) and sub.pattern is None):
                raise UnsupportedError("the fields of a case pattern bind names "
                                       "(`case Circle(r=radius):`)", self.loc(sub))
            if sub.name is None:
                continue
            field_type = record.field_type(field_name)
            assert field_type is not None  # a field of the record: checked above
            value = ir.Field(field_type, payload, field_name, loc=self.loc(sub))
            out.append(self.scope.assign_name(sub.name, value, self.loc(sub), compound=False))
        return index, out

