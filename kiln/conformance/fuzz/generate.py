"""Random well-formed kernels, with a Python reference for their arithmetic.

`generate(seed)` writes the source of one kernel: every thread reads elements of input
arrays of every scalar type (1-D and 2-D), scalar parameters and a record array, computes
random expressions over them (all operators with Python's semantics, mixed conversions,
literals, math functions, `a if c else b`) into locals, runs some control flow (if/elif,
range loops, while loops with break, a device function, a shared array with barriers,
atomics) and stores every value it computed into an output array of its type. The same
expressions are evaluated by `Expr.value` in Python with kiln's documented semantics
(wrapping integers, floor division, literals typed by `kiln.lang.typing_rules`), so a run can
be compared with the reference as well as across backends.

Everything generated stays inside the language's defined behaviour: shift counts are masked,
float-to-integer casts are clamped first, indices are in range.
"""

from __future__ import annotations

import math
import operator
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...ir.types import (
    ScalarType,
    bool_,
    f32,
    f64,
    i8,
    i16,
    i32,
    i64,
    literal_type,
    promote,
    u8,
    u16,
    u32,
    u64,
    wrap_int,
)
from ...lang.typing_rules import comparison_type, operand_type

INTS = (i8, i16, i32, i64, u8, u16, u32, u64)
FLOATS = (f32, f64)
NUMBERS = INTS + FLOATS
THREADS = 64
"""Threads per launch (one block): the arrays have this many rows."""


def _wrap(value: int, t: ScalarType) -> int:
    return wrap_int(value, t)


@dataclass
class Expr:
    """A generated expression: its source text, kiln type and per-thread value."""

    text: str
    type: ScalarType
    value: Callable[[int], Any]
    """The value for thread `i`: a Python int (integers), a NumPy scalar (floats) or bool."""
    literal: Any = None
    """The Python value of a bare literal (which adapts to its context), else None."""
    exact: bool = True
    """Whether the reference value is exact (False after math functions: compare with a
    tolerance)."""


def _as(value: Any, t: ScalarType) -> Any:
    """A value converted to `t` as a kiln cast does (float to int: truncation)."""
    if t.is_bool:
        return bool(value)
    if t.is_float:
        if isinstance(value, (bool, int)):  # one rounding, as C converts integers
            source = np.int64 if value < 0 else np.uint64
            return np.array([value], source).astype(t.dtype)[0]
        return t.dtype.type(value)
    if isinstance(value, (float, np.floating)):
        return _wrap(math.trunc(float(value)), t)
    return _wrap(int(value), t)


def _floordiv(a: int, b: int, t: ScalarType) -> int:
    return 0 if b == 0 else _wrap(a // b, t)


def _floormod(a: int, b: int, t: ScalarType) -> int:
    return 0 if b == 0 else _wrap(a % b, t)


def _int_binary(op: str, a: int, b: int, t: ScalarType) -> int:
    if op == "+":
        return _wrap(a + b, t)
    if op == "-":
        return _wrap(a - b, t)
    if op == "*":
        return _wrap(a * b, t)
    if op == "//":
        return _floordiv(a, b, t)
    if op == "%":
        return _floormod(a, b, t)
    if op == "<<":
        return _wrap(a << b, t)
    if op == ">>":
        return _wrap(a >> b, t)
    if op == "&":
        return _wrap(a & b, t)
    if op == "|":
        return _wrap(a | b, t)
    if op == "^":
        return _wrap(a ^ b, t)
    if op == "**":
        if b < 0:
            return 1 if a == 1 else (-1 if b % 2 else 1) if a == -1 else 0
        return _wrap(pow(a, b, 1 << t.bits), t)
    raise ValueError(op)


def _float_binary(op: str, a: Any, b: Any, t: ScalarType) -> Any:
    with np.errstate(all="ignore"):
        if op == "+":
            return a + b
        if op == "-":
            return a - b
        if op == "*":
            return a * b
        if op == "/":
            return a / b
        if op == "//":
            return t.dtype.type(np.floor(a / b))
        if op == "%":
            return t.dtype.type(a - np.floor(a / b) * b)
    raise ValueError(op)


@dataclass
class Generator:
    """Random expressions and statements over the names a kernel has in scope."""

    rng: random.Random
    leaves: list[Expr] = field(default_factory=list)
    max_depth: int = 3

    # ------------------------------------------------------------ expressions

    def literal(self, want: ScalarType | None = None) -> Expr:
        rng = self.rng
        if want is not None and want.is_float or want is None and rng.random() < 0.3:
            v = rng.choice([0.5, -1.25, 3.0, 1e-3, 100.0, -7.5, 2.0**-10])
            return Expr(repr(v), f32, lambda i: v, literal=v)
        v = rng.choice([0, 1, -1, 2, 3, 7, -9, 31, 100, 255, 300, 65535, 2**31 - 1, -(2**31),
                        3000000000, 2**40, -(2**40)])
        t = i32 if -(2**31) <= v < 2**31 else i64
        text = f"({v})" if v < 0 else str(v)
        return Expr(text, t, lambda i: v, literal=v)

    def expr(self, depth: int = 0, want_int: bool = False) -> Expr:
        rng = self.rng
        if depth >= self.max_depth or rng.random() < 0.25:
            pool = [e for e in self.leaves if e.type.is_int] if want_int else self.leaves
            if pool and rng.random() < 0.8:
                return rng.choice(pool)
            lit = self.literal()
            return lit if not want_int or lit.type.is_int else self.literal(i32)
        kind = rng.random()
        if kind < 0.45:
            return self.binary(depth, want_int)
        if kind < 0.55:
            return self.unary(depth, want_int)
        if kind < 0.7:
            return self.cast(depth, want_int)
        if kind < 0.8 or depth > 0:  # math results are stored as they are (inexact)
            return self.select(depth, want_int)
        return self.math(depth, want_int)

    def binary(self, depth: int, want_int: bool) -> Expr:
        rng = self.rng
        a, b = self.expr(depth + 1, want_int), self.expr(depth + 1, want_int)
        if a.literal is not None and b.literal is not None:
            b = rng.choice([e for e in self.leaves if not want_int or e.type.is_int])
        ints = a.type.is_int and b.type.is_int
        ops = ["+", "-", "*", "//", "%"] + (["<<", ">>", "&", "|", "^", "**"] if ints else
                                           ["/"] if not want_int else [])
        op = rng.choice(ops)
        if op in ("<<", ">>", "**"):
            right = self._masked(b, 31 if op != "**" else 7)
            t = operand_type(a.type, right.type, a.literal, right.literal)
            if op != "**" and a.literal is None:
                t = operand_type(a.type, a.type, None, None)
            return self._binop(op, a, right, t)
        t = operand_type(a.type, b.type, a.literal, b.literal)
        if op == "/" and not t.is_float:
            t = f32
        return self._binop(op, a, b, t)

    def _masked(self, b: Expr, mask: int) -> Expr:
        """`(b & mask)`: a shift count or exponent in range (folded when b is a literal)."""
        if b.literal is not None:
            return Expr(f"({b.text} & {mask})", i32, lambda i: b.literal & mask,
                        literal=b.literal & mask)
        t = operand_type(b.type, i32, None, mask)
        return Expr(f"({b.text} & {mask})", t,
                    lambda i: _int_binary("&", _as(b.value(i), t), mask, t), exact=b.exact)

    def _binop(self, op: str, a: Expr, b: Expr, t: ScalarType) -> Expr:
        text = f"({a.text} {op} {b.text})"
        exact = a.exact and b.exact
        if t.is_float:
            return Expr(text, t, lambda i: _float_binary(op, _as(a.value(i), t),
                                                         _as(b.value(i), t), t), exact=exact)
        return Expr(text, t, lambda i: _int_binary(op, _as(a.value(i), t),
                                                   _as(b.value(i), t), t), exact=exact)

    def unary(self, depth: int, want_int: bool) -> Expr:
        a = self.expr(depth + 1, want_int)
        op = self.rng.choice(["-", "~"] if a.type.is_int else ["-"])
        t = i32 if a.type.bits < 32 and a.type.is_int else a.type
        if a.literal is not None:  # folded at compile time with Python's arithmetic
            value = -a.literal if op == "-" else ~a.literal
            return Expr(f"({op}{a.text})", literal_type(value), lambda i: value,
                        literal=value)
        if t.is_float:
            return Expr(f"(-{a.text})", t, lambda i: -_as(a.value(i), t), exact=a.exact)
        f = (lambda v: -v) if op == "-" else (lambda v: ~v)
        return Expr(f"({op}{a.text})", t, lambda i: _wrap(f(_as(a.value(i), t)), t),
                    exact=a.exact)

    def cast(self, depth: int, want_int: bool) -> Expr:
        source = self.expr(depth + 1)
        t = self.rng.choice(INTS if want_int else NUMBERS)
        a = source
        if source.type.is_float and t.is_int:  # clamped: out-of-range casts are unspecified
            lo, hi = (0.0, 200.0) if t.kind == "u" else (-100.0, 100.0)
            a = Expr(f"min(max({source.text}, {lo}), {hi})", source.type,
                     lambda i: _clamp(source.value(i), lo, hi, source.type),
                     exact=source.exact)
        return Expr(f"kiln.{t.name}({a.text})", t, lambda i: _as(a.value(i), t),
                    exact=a.exact)

    def select(self, depth: int, want_int: bool) -> Expr:
        c = self.compare(depth + 1)
        a, b = self.expr(depth + 1, want_int), self.expr(depth + 1, want_int)
        t = operand_type(a.type, b.type, a.literal, b.literal)

        def value(i: int) -> Any:
            return _as(a.value(i), t) if c.value(i) else _as(b.value(i), t)

        return Expr(f"({a.text} if {c.text} else {b.text})", t, value,
                    exact=a.exact and b.exact and c.exact)

    def compare(self, depth: int) -> Expr:
        a, b = self.expr(depth + 1), self.expr(depth + 1)
        if a.literal is not None and b.literal is not None:
            b = self.rng.choice(self.leaves)
        op = self.rng.choice(["<", "<=", ">", ">=", "==", "!="])
        t = comparison_type(a.type, b.type, a.literal, b.literal)
        fn = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
              "==": operator.eq, "!=": operator.ne}[op]
        return Expr(f"({a.text} {op} {b.text})", bool_,
                    lambda i: bool(fn(_as(a.value(i), t), _as(b.value(i), t))),
                    exact=a.exact and b.exact)

    def math(self, depth: int, want_int: bool) -> Expr:
        rng = self.rng
        a = self.expr(depth + 1, want_int)
        if want_int or (a.type.is_int and rng.random() < 0.5):
            b = self.expr(depth + 1, want_int=a.type.is_int)
            name = rng.choice(["min", "max"])
            t = operand_type(a.type, b.type, a.literal, b.literal)
            if a.literal is not None and b.literal is not None:
                return a
            if t.is_float:
                f = np.fmin if name == "min" else np.fmax
                return Expr(f"{name}({a.text}, {b.text})", t,
                            lambda i: f(_as(a.value(i), t), _as(b.value(i), t)),
                            exact=a.exact and b.exact)
            g = min if name == "min" else max
            return Expr(f"{name}({a.text}, {b.text})", t,
                        lambda i: g(_as(a.value(i), t), _as(b.value(i), t)),
                        exact=a.exact and b.exact)
        if a.type.is_int and a.literal is None:  # abs stays an integer (and wraps)
            whole = operand_type(a.type, a.type, None, None)
            def root(i: int) -> Any:
                with np.errstate(invalid="ignore"):  # abs(INT_MIN) wraps: NaN, as in C
                    return np.sqrt(_as(_wrap(abs(_as(a.value(i), whole)), whole), f32))

            return Expr(f"kiln.sqrt(abs({a.text}))", f32, root, exact=False)
        name = rng.choice(["sqrt(abs", "floor", "sin", "exp2(min", "abs"])
        t = a.type if a.type.is_float else f32
        if a.literal is not None:
            t = f32
        fns: dict[str, tuple[Callable[[Any], Any], str]] = {
            "sqrt(abs": (lambda v: np.sqrt(np.abs(v)), "kiln.sqrt(abs({}))"),
            "floor": (np.floor, "kiln.floor({})"), "sin": (np.sin, "kiln.sin({})"),
            "exp2(min": (lambda v: np.exp2(np.fmin(v, t.dtype.type(20))),
                         "kiln.exp2(min({}, 20.0))"),
            "abs": (np.abs, "abs({})")}
        unary, template = fns[name]
        exact = a.exact and name in ("floor", "abs")

        def value(i: int) -> Any:
            with np.errstate(all="ignore"):
                return t.dtype.type(unary(_as(a.value(i), t)))

        return Expr(template.format(a.text), t, value, exact=exact)


def _clamp(v: Any, lo: float, hi: float, t: ScalarType) -> Any:
    v = _as(v, t)
    return t.dtype.type(np.fmin(np.fmax(v, t.dtype.type(lo)), t.dtype.type(hi)))


def promote_all(types: list[ScalarType]) -> ScalarType:
    out = types[0]
    for t in types[1:]:
        out = promote(out, t)
    return out
