"""Whole random kernels from `generate`'s expressions: source text, inputs, reference.

A kernel gets inputs of every scalar type, a 2-D array, a record array, two scalar
parameters, and outputs (one 2-D array per type it stores). Its body is a sequence of
pieces, each chosen at random: a local assigned an expression; an `if/elif/else` that
assigns one local on every path; a `range` loop accumulating into a local; a `while` loop
with `break`; a call of a generated device function; a value exchanged through a shared
array between two barriers; an integer `atomic_add`. Every local is stored to its type's
output. Pieces with a Python reference (all but loops, calls and vectors) record the
expected values; the others are compared across backends only.
"""

from __future__ import annotations

import importlib.util
import random
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ...ir.types import ScalarType, f32, i32, i64, literal_type
from .generate import INTS, NUMBERS, THREADS, Expr, Generator, _as, _wrap

RECORD = "Pair"
ATOMIC_SLOTS = 4


@dataclass
class Output:
    """One stored value: the output array and column, and its reference (None: none)."""

    type: ScalarType
    column: int
    reference: Callable[[int], Any] | None
    exact: bool


@dataclass
class FuzzKernel:
    seed: int
    source: str
    inputs: dict[str, np.ndarray]
    scalars: dict[str, Any]
    outputs: dict[str, list[Output]] = field(default_factory=dict)
    atomic_reference: np.ndarray | None = None

    def arguments(self) -> tuple[list[Any], dict[str, np.ndarray]]:
        """Fresh launch arguments in parameter order, and the output arrays by name."""
        outs = {f"out_{t}": np.zeros((THREADS, len(cols)), ScalarType_by_name(t).dtype)
                for t, cols in self.outputs.items()}
        outs["acc"] = np.zeros(ATOMIC_SLOTS, np.int64)
        args = [*(a.copy() for a in self.inputs.values()), *self.scalars.values(),
                *outs.values()]
        return args, outs

    def load(self, directory: Path) -> Any:
        """The kernel object, imported from a file (kiln reads kernels' source files)."""
        path = directory / f"fuzz_{self.seed}.py"
        path.write_text(self.source)
        spec = importlib.util.spec_from_file_location(f"kiln_fuzz_{self.seed}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        return module.fuzz


def ScalarType_by_name(name: str) -> ScalarType:
    return next(t for t in (*NUMBERS,) if t.name == name)


def _column(grid: np.ndarray, col: int) -> Callable[[int], int]:
    return lambda i: int(grid[i, col])


def build(seed: int) -> FuzzKernel:
    rng = random.Random(seed)
    np_rng = np.random.default_rng(seed)
    inputs: dict[str, np.ndarray] = {}
    gen = Generator(rng)
    for t in NUMBERS:
        name = f"x_{t.name}"
        inputs[name] = _random_values(np_rng, t, THREADS)
        gen.leaves.append(_element(name, t, inputs[name]))
    grid = _random_values(np_rng, i32, THREADS * 3).reshape(THREADS, 3)
    inputs["grid"] = grid
    for col in range(3):
        gen.leaves.append(Expr(f"grid[i, {col}]", i32, _column(grid, col)))
    pairs = np.zeros(THREADS, [("a", np.int32), ("b", np.float32)])
    pairs["a"], pairs["b"] = _random_values(np_rng, i32, THREADS), \
        _random_values(np_rng, f32, THREADS)
    inputs["pairs"] = pairs
    gen.leaves += [Expr("pairs[i].a", i32, lambda i: int(pairs["a"][i])),
                   Expr("pairs[i].b", f32, lambda i: pairs["b"][i])]
    scalars = {"s_i32": int(np_rng.integers(-1000, 1000)), "s_f32": np.float32(1.5)}
    gen.leaves += [Expr("s_i32", i32, lambda i: scalars["s_i32"]),
                   Expr("s_f32", f32, lambda i: scalars["s_f32"])]
    gen.leaves.append(Expr("i", i32, lambda i: i))
    body = _Body(gen, rng)
    for _ in range(rng.randint(4, 9)):
        rng.choice(body.pieces)()
    kernel = FuzzKernel(seed, "", inputs, scalars)
    columns: dict[str, list[Output]] = {}
    stores = []
    for name, e, reference in body.stored:
        cols = columns.setdefault(e.type.name, [])
        stores.append(f"    out_{e.type.name}[i, {len(cols)}] = {name}")
        cols.append(Output(e.type, len(cols), reference, e.exact))
    kernel.outputs = dict(sorted(columns.items()))
    kernel.atomic_reference = body.atomic_reference()
    params = [f"{n}: kiln.{_array_annotation(n, a)}" for n, a in inputs.items()]
    params[-1] = f"pairs: {RECORD}[:]"
    params += ["s_i32: kiln.i32", "s_f32: kiln.f32"]
    params += [f"out_{t}: kiln.{t}[:, :]" for t in kernel.outputs] + ["acc: kiln.i64[:]"]
    lines = ["import kiln", "", "", "@kiln.struct", f"class {RECORD}:", "    a: kiln.i32",
             "    b: kiln.f32", "", "", *body.functions,
             "@kiln.kernel", f"def fuzz({', '.join(params)}):", "    i = kiln.global_id(0)",
             *body.lines, *stores, ""]
    kernel.source = "\n".join(lines)
    return kernel


def _array_annotation(name: str, a: np.ndarray) -> str:
    t = next(t for t in NUMBERS if t.dtype == a.dtype) if a.dtype.names is None else None
    dims = ", ".join(":" for _ in a.shape)
    return f"{t.name}[{dims}]" if t else name


def _element(name: str, t: ScalarType, values: np.ndarray) -> Expr:
    if t.is_float:
        return Expr(f"{name}[i]", t, lambda i: values[i])
    return Expr(f"{name}[i]", t, lambda i: int(values[i]))


def _random_values(rng: np.random.Generator, t: ScalarType, n: int) -> np.ndarray:
    if t.is_float:
        values = rng.choice([rng.normal(0, 10), rng.normal(0, 1e6)], size=n) * \
            rng.normal(1, 0.5, size=n)
        values[rng.random(n) < 0.1] = 0.0
        return values.astype(t.dtype)
    lo, hi = t.range()
    edge = np.array([lo, hi, 0, 1, -1 if t.is_signed else 2, lo + 1, hi - 1], dtype=object)
    values = rng.integers(int(lo), int(hi), size=n, endpoint=True, dtype=t.dtype)
    pick = rng.random(n) < 0.3
    values[pick] = rng.choice(edge, size=int(pick.sum())).astype(t.dtype)
    return values


class _Body:
    """The kernel's statements, the device functions they call and what gets stored."""

    def __init__(self, gen: Generator, rng: random.Random) -> None:
        self.gen, self.rng = gen, rng
        self.lines: list[str] = []
        self.functions: list[str] = []
        self.stored: list[tuple[str, Expr, Callable[[int], Any] | None]] = []
        self.atomics: list[Expr] = []
        self.count = 0
        self.pieces = [self.assign, self.assign, self.branch, self.loop, self.search,
                       self.call, self.shared, self.atomic, self.vector]

    def fresh(self) -> str:
        self.count += 1
        return f"v{self.count}"

    def local(self, name: str, e: Expr, reference: bool = True) -> Expr:
        """A local holding `e` becomes a leaf for later expressions."""
        t = literal_type(e.literal) if e.literal is not None else e.type
        leaf = Expr(name, t, (lambda i: _as(e.value(i), t)) if reference else _unknown,
                    exact=e.exact)
        self.stored.append((name, leaf, leaf.value if reference else None))
        if reference and leaf.exact:
            self.gen.leaves.append(leaf)
        return leaf

    def assign(self) -> None:
        name, e = self.fresh(), self.gen.expr()
        self.lines.append(f"    {name} = {e.text}")
        self.local(name, e)

    def branch(self) -> None:
        name = self.fresh()
        c1, c2 = self.gen.compare(1), self.gen.compare(1)
        a, b, c = (self.gen.expr(1) for _ in range(3))
        t = a.type
        for other in (b, c):
            t = _unify(t, other)
        self.lines += [f"    {name}: kiln.{t.name} = 0", f"    if {c1.text}:",
                       f"        {name} = {_convert(a, t)}", f"    elif {c2.text}:",
                       f"        {name} = {_convert(b, t)}", "    else:",
                       f"        {name} = {_convert(c, t)}"]

        def value(i: int) -> Any:
            return _as((a if c1.value(i) else b if c2.value(i) else c).value(i), t)

        exact = all(x.exact for x in (a, b, c, c1, c2))
        self.local(name, Expr(name, t, value, exact=exact))

    def loop(self) -> None:
        name, j = self.fresh(), f"j{self.count}"
        e = self.gen.expr(1, want_int=True)
        t = e.type if e.literal is None else i32
        self.lines += [f"    {name}: kiln.{t.name} = 0",
                       f"    for {j} in range({self.rng.randint(0, 5)}):",
                       f"        {name} = kiln.{t.name}({name} + kiln.{t.name}({j}) * {e.text})"]
        self.local(name, Expr(name, t, _unknown), reference=False)

    def search(self) -> None:
        name = self.fresh()
        c = self.gen.compare(1)
        self.lines += [f"    {name} = 0", f"    while {name} < 6:",
                       f"        if {c.text} and {name} > 2:", "            break",
                       f"        {name} += 1"]
        self.local(name, Expr(name, i32, _unknown), reference=False)

    def call(self) -> None:
        name, fn = self.fresh(), f"helper{self.count}"
        a, b = self.gen.expr(1), self.gen.expr(1)
        ta = a.type if a.literal is None else literal_type(a.literal)
        tb = b.type if b.literal is None else literal_type(b.literal)
        inner = Generator(self.rng, [Expr("p", ta, _unknown), Expr("q", tb, _unknown)],
                          max_depth=2)
        body = inner.expr(1)
        rt = body.type if body.literal is None else literal_type(body.literal)
        self.functions += ["@kiln.func", f"def {fn}(p: kiln.{ta.name}, q: kiln.{tb.name})"
                           f" -> kiln.{rt.name}:", f"    return {body.text}", "", ""]
        self.lines.append(f"    {name} = {fn}({a.text}, {b.text})")
        self.local(name, Expr(name, rt, _unknown), reference=False)

    def shared(self) -> None:
        name, buf = self.fresh(), f"sh{self.count}"
        e = self.gen.expr(1)
        t = e.type if e.literal is None else literal_type(e.literal)
        k = self.rng.randint(1, THREADS - 1)
        self.lines += [f"    {buf} = kiln.shared(kiln.{t.name}, {THREADS})",
                       f"    {buf}[i] = {e.text}", "    kiln.barrier()",
                       f"    {name} = {buf}[(i + {k}) % {THREADS}]", "    kiln.barrier()"]
        self.local(name, Expr(name, t, lambda i: _as(e.value((i + k) % THREADS), t),
                              exact=e.exact))

    def atomic(self) -> None:
        e = self.gen.expr(1, want_int=True)
        self.lines.append(f"    kiln.atomic_add(acc, i % {ATOMIC_SLOTS}, kiln.i64({e.text}))")
        self.atomics.append(e)

    def vector(self) -> None:
        name = self.fresh()
        a, b = self.gen.expr(2), self.gen.expr(2)
        self.lines += [f"    {name}q = kiln.f32x4(kiln.f32({a.text}), 1.0, kiln.f32({b.text}), "
                       "-2.0)", f"    {name}q = {name}q * 2.0 + {name}q",
                       f"    {name} = {name}q.x - {name}q.z + {name}q.w"]
        self.local(name, Expr(name, f32, _unknown), reference=False)

    def atomic_reference(self) -> np.ndarray:
        sums = [0] * ATOMIC_SLOTS
        for e in self.atomics:
            for i in range(THREADS):
                sums[i % ATOMIC_SLOTS] += _as(e.value(i), i64)
        return np.array([_wrap(s, i64) for s in sums], np.int64)


def _unknown(i: int) -> Any:
    raise AssertionError("no reference for this value")


def _unify(a: Expr | ScalarType, b: Expr) -> ScalarType:
    """The type a local declared for values of both gets: the wider (ints that do not fit
    each other become i64, anything with a float f64)."""
    ta = a if isinstance(a, ScalarType) else a.type
    tb = b.type if b.literal is None else literal_type(b.literal)
    if ta.is_float or tb.is_float:
        return max((t for t in (ta, tb) if t.is_float), key=lambda t: t.bits) \
            if ta.is_float and tb.is_float else (ta if ta.is_float else tb)
    if ta == tb:
        return ta
    return i64 if ta in INTS and tb in INTS else ta


def _convert(e: Expr, t: ScalarType) -> str:
    """`e` as an explicit cast to `t` (a clamp first for floats into integers)."""
    return f"kiln.{t.name}({e.text})"


def scratch_directory() -> Path:
    return Path(tempfile.mkdtemp(prefix="kiln-fuzz-"))
