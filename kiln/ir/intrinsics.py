"""The one intrinsic registry.

Each standard intrinsic is registered once with its typing rule, its variance (how its
value varies across threads), whether it is convergent (must be reached by a whole block)
and whether it has side effects. Backends add implementations under a namespace: a JIT
backend a spelling (a format template over the argument sources, or a callable), a DIRECT
backend a callable. Namespaces chain, so C-family backends share the `"c"` spellings and
override only what differs. The frontend types calls through this registry; emitters spell
them through it; the interpreter executes them through it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from .types import (
    ArrayType,
    ScalarType,
    Type,
    VectorType,
    bf16,
    bool_,
    f16,
    f32,
    f64,
    i32,
    i64,
    promote,
    u32,
    u64,
    void,
    widen_for_arithmetic,
)


class Variance(IntEnum):
    """The variance lattice: uniform < block-varying < thread-varying."""

    UNIFORM = 0
    BLOCK = 1
    THREAD = 2


class IntrinsicTypeError(Exception):
    """Raised by a typing rule; the frontend turns it into a KernelError at the call."""


Typing = Callable[[Sequence[Type]], tuple[list[Type], Type]]
"""Given argument types, return (types to convert the arguments to, result type)."""


@dataclass(frozen=True)
class Intrinsic:
    name: str
    category: str  # "index", "sync", "atomic", "math", "vector" (lowered), ...
    arity: tuple[int, int]  # min, max number of arguments as the frontend sees them
    typing: Typing
    variance: Variance | None  # None: the join of the arguments' variances
    convergent: bool = False
    side_effects: bool = False
    warp_convergent: bool = False
    """Reached by every thread of a warp together (warp operations exchange values between
    the warp's threads); the convergence check treats it like `convergent`, but it is no
    barrier: backends do not synchronise the block for it."""


class IntrinsicRegistry:
    def __init__(self) -> None:
        self._specs: dict[str, Intrinsic] = {}
        self._impls: dict[tuple[str, str], Any] = {}
        self.revision = 0
        """Counts changes (registrations and implementations), for caches of what is here."""

    def register(self, spec: Intrinsic) -> None:
        self._specs[spec.name] = spec
        self.revision += 1

    def __contains__(self, name: str) -> bool:
        return name in self._specs

    def __getitem__(self, name: str) -> Intrinsic:
        return self._specs[name]

    def names(self, category: str | None = None) -> list[str]:
        return [n for n, s in self._specs.items() if category in (None, s.category)]

    def implement(self, namespace: str, impls: dict[str, Any]) -> None:
        """Register implementations of intrinsics for a backend or backend family."""
        for name, impl in impls.items():
            if name not in self._specs:
                raise KeyError(f"unknown intrinsic {name!r}")
            self._impls[(namespace, name)] = impl
        self.revision += 1

    def implementation(self, name: str, namespaces: Iterable[str]) -> Any:
        """The first implementation found along the namespace chain, or None."""
        for ns in namespaces:
            impl = self._impls.get((ns, name))
            if impl is not None:
                return impl
        return None

    def missing(self, namespaces: Sequence[str]) -> list[str]:
        """Standard intrinsics with no implementation along the chain (vector intrinsics
        are lowered to scalar code before any backend sees them)."""
        return [n for n, s in self._specs.items()
                if s.category != "vector" and self.implementation(n, namespaces) is None]


intrinsics = IntrinsicRegistry()

# ---------------------------------------------------------------- typing rules


def _fixed(result: Type, *params: Type) -> Typing:
    def rule(args: Sequence[Type]) -> tuple[list[Type], Type]:
        return list(params), result

    return rule


def _float_of(t: Type) -> ScalarType:
    if not isinstance(t, ScalarType):
        raise IntrinsicTypeError(f"expected a number, got {t}")
    return t if t.is_float else f32


def _float_math(nargs: int) -> Typing:
    """Float functions: integer arguments become f32; several arguments are promoted."""

    def rule(args: Sequence[Type]) -> tuple[list[Type], Type]:
        t = _float_of(args[0])
        for a in args[1:]:
            t = promote(t, _float_of(a))
        return [t] * nargs, t

    return rule


def _same_numeric(args: Sequence[Type]) -> tuple[list[Type], Type]:
    """abs, min, max: promoted operand type, integers stay integers."""
    for a in args:
        if not isinstance(a, ScalarType) or a.is_bool:
            raise IntrinsicTypeError(f"expected a number, got {a}")
    t = args[0]
    for a in args[1:]:
        t = promote(t, a)
    assert isinstance(t, ScalarType)
    if len(args) == 1 and t.is_int and t.bits < 32:
        t = i32
    return [t] * len(args), t


def _predicate(args: Sequence[Type]) -> tuple[list[Type], Type]:
    return [_float_of(args[0])], bool_


ATOMIC_TYPES: dict[str, tuple[ScalarType, ...]] = {
    "atomic_add": (i32, u32, i64, u64, f32, f64),
    "atomic_sub": (i32, u32, i64, u64),
    "atomic_min": (i32, u32, i64, u64, f32),
    "atomic_max": (i32, u32, i64, u64, f32),
    "atomic_and": (i32, u32, i64, u64),
    "atomic_or": (i32, u32, i64, u64),
    "atomic_xor": (i32, u32, i64, u64),
    "atomic_exch": (i32, u32, i64, u64, f32),
    "atomic_cas": (i32, u32, i64, u64),
}


def atomic_capabilities(types: frozenset[ScalarType] | None = None) -> frozenset[str]:
    """`Capabilities.atomics` entries ("atomic_add:f32") for every atomic the registry allows,
    restricted to element `types` when given."""
    return frozenset(f"{op}:{t.name}" for op, allowed in ATOMIC_TYPES.items() for t in allowed
                     if types is None or t in types)


def _atomic(name: str, nvalues: int) -> Typing:
    """Atomics take (array, index..., value...); indices are i32, values the element type."""

    def rule(args: Sequence[Type]) -> tuple[list[Type], Type]:
        arr = args[0]
        if not isinstance(arr, ArrayType):
            raise IntrinsicTypeError(f"the first argument of {name} must be an array, got {arr}")
        if arr.elem not in ATOMIC_TYPES[name]:
            allowed = ", ".join(t.name for t in ATOMIC_TYPES[name])
            raise IntrinsicTypeError(
                f"{name} on {arr.elem} arrays is not supported (use {allowed})"
            )
        nidx = len(args) - 1 - nvalues
        if nidx != arr.ndim:
            raise IntrinsicTypeError(
                f"{name} on a {arr.ndim}-d array needs {arr.ndim} index(es), got {nidx}"
            )
        for t in args[1 : 1 + nidx]:
            if not (isinstance(t, ScalarType) and (t.is_int or t.is_bool)):
                raise IntrinsicTypeError(f"array indices must be integers, got {t}")
        return [arr, *[_index_type(t) for t in args[1 : 1 + nidx]], *[arr.elem] * nvalues], arr.elem

    return rule


def _index_type(t: Type) -> ScalarType:
    assert isinstance(t, ScalarType)
    return i64 if t.bits == 64 else i32


# ---------------------------------------------------------------- the standard set

for _axis in "xyz":
    for _base, _var in (
        ("thread_idx", Variance.THREAD),
        ("block_idx", Variance.BLOCK),
        ("block_dim", Variance.UNIFORM),
        ("grid_dim", Variance.UNIFORM),
    ):
        intrinsics.register(Intrinsic(f"{_base}_{_axis}", "index", (0, 0), _fixed(i32), _var))

intrinsics.register(
    Intrinsic("barrier", "sync", (0, 0), _fixed(void), Variance.UNIFORM, True, True)
)
intrinsics.register(
    Intrinsic("mem_fence", "sync", (0, 0), _fixed(void), Variance.UNIFORM, False, True)
)

for _name in ATOMIC_TYPES:
    _nvalues = 2 if _name == "atomic_cas" else 1
    intrinsics.register(
        Intrinsic(_name, "atomic", (2 + _nvalues, 5 + _nvalues), _atomic(_name, _nvalues),
                  Variance.THREAD, side_effects=True)
    )

UNARY_FLOAT_MATH = (
    "sqrt", "rsqrt", "exp", "exp2", "log", "log2", "log10", "sin", "cos", "tan", "asin",
    "acos", "atan", "sinh", "cosh", "tanh", "floor", "ceil", "trunc", "round", "erf",
)
BINARY_FLOAT_MATH = ("atan2", "pow", "copysign")

for _name in UNARY_FLOAT_MATH:
    intrinsics.register(Intrinsic(_name, "math", (1, 1), _float_math(1), None))
for _name in BINARY_FLOAT_MATH:
    intrinsics.register(Intrinsic(_name, "math", (2, 2), _float_math(2), None))
intrinsics.register(Intrinsic("fma", "math", (3, 3), _float_math(3), None))
intrinsics.register(Intrinsic("abs", "math", (1, 1), _same_numeric, None))
intrinsics.register(Intrinsic("min", "math", (2, 2), _same_numeric, None))
intrinsics.register(Intrinsic("max", "math", (2, 2), _same_numeric, None))
intrinsics.register(Intrinsic("isnan", "math", (1, 1), _predicate, None))
intrinsics.register(Intrinsic("isinf", "math", (1, 1), _predicate, None))


def _warp_value(args: Sequence[Type]) -> tuple[list[Type], Type]:
    """shuffle, shuffle_down, shuffle_xor: (value, lane or offset); narrow integers and bool
    travel as i32 and f16 and bf16 as f32 (what every backend can exchange)."""
    value, lane = args
    if not isinstance(value, ScalarType):
        raise IntrinsicTypeError(f"warp shuffles exchange numbers, got {value}")
    if not (isinstance(lane, ScalarType) and (lane.is_int or lane.is_bool)):
        raise IntrinsicTypeError(f"the lane or offset of a shuffle must be an integer, got {lane}")
    t = f32 if value in (f16, bf16) else widen_for_arithmetic(value)
    return [t, i32], t


WARP_SHUFFLES = ("shuffle", "shuffle_down", "shuffle_xor")
WARP_VOTES = ("vote_all", "vote_any", "ballot")
intrinsics.register(Intrinsic("warp_size", "warp", (0, 0), _fixed(i32), Variance.UNIFORM))
intrinsics.register(Intrinsic("lane_id", "warp", (0, 0), _fixed(i32), Variance.THREAD))
for _name in WARP_SHUFFLES:
    intrinsics.register(Intrinsic(_name, "warp", (2, 2), _warp_value, Variance.THREAD,
                                  warp_convergent=True))
for _name, _result in zip(WARP_VOTES, (bool_, bool_, u64)):
    intrinsics.register(Intrinsic(_name, "warp", (1, 1), _fixed(_result, bool_), Variance.THREAD,
                                  warp_convergent=True))

INDEX_BASES = ("thread_idx", "block_idx", "block_dim", "grid_dim")


# ---------------------------------------------------------------- vectors
# Typed by the frontend and expanded into scalar arithmetic by `lower_aggregates`
# (kiln.ir.passes): no backend implements them.


def _vectors(name: str, args: Sequence[Type], count: int) -> tuple[int, ScalarType]:
    """The common length and promoted element type of `count` vector arguments."""
    if len(args) != count or not all(isinstance(a, VectorType) for a in args):
        raise IntrinsicTypeError(f"{name} takes {count} vector(s), got "
                                 f"{', '.join(map(str, args))}")
    vectors = [a for a in args if isinstance(a, VectorType)]
    if len({v.n for v in vectors}) != 1:
        raise IntrinsicTypeError(f"{name} of vectors of different lengths: "
                                 f"{', '.join(map(str, vectors))}")
    t = vectors[0].elem
    for v in vectors[1:]:
        t = promote(t, v.elem)
    if t.is_bool:
        raise IntrinsicTypeError(f"{name} needs numeric vectors, got {vectors[0]}")
    return vectors[0].n, t


def _dot(args: Sequence[Type]) -> tuple[list[Type], Type]:
    n, t = _vectors("dot", args, 2)
    return [VectorType(t, n)] * 2, t


def _float_vector(name: str, to_scalar: bool) -> Typing:
    def rule(args: Sequence[Type]) -> tuple[list[Type], Type]:
        n, t = _vectors(name, args, 1)
        if not t.is_float:
            raise IntrinsicTypeError(f"{name} needs a float vector, got {args[0]} (convert it "
                                     f"with f32x{n}(...))")
        return [VectorType(t, n)], t if to_scalar else VectorType(t, n)

    return rule


def _cross(args: Sequence[Type]) -> tuple[list[Type], Type]:
    n, t = _vectors("cross", args, 2)
    if n != 3:
        raise IntrinsicTypeError(f"cross takes two 3-component vectors, got {args[0]}")
    return [VectorType(t, 3)] * 2, VectorType(t, 3)


def _reduce_bool(name: str) -> Typing:
    def rule(args: Sequence[Type]) -> tuple[list[Type], Type]:
        v = args[0]
        if not (isinstance(v, VectorType) and v.elem.is_bool):
            raise IntrinsicTypeError(f"{name}() takes a vector comparison such as "
                                     f"{name}(a < b), got {v}")
        return [v], bool_

    return rule


intrinsics.register(Intrinsic("dot", "vector", (2, 2), _dot, None))
intrinsics.register(Intrinsic("length", "vector", (1, 1), _float_vector("length", True), None))
intrinsics.register(Intrinsic("normalize", "vector", (1, 1), _float_vector("normalize", False),
                              None))
intrinsics.register(Intrinsic("cross", "vector", (2, 2), _cross, None))
intrinsics.register(Intrinsic("all", "vector", (1, 1), _reduce_bool("all"), None))
intrinsics.register(Intrinsic("any", "vector", (1, 1), _reduce_bool("any"), None))


def typing_of(spec: Intrinsic, args: Sequence[Type]) -> tuple[list[Type], Type]:
    """`spec.typing(args)`, applied per component when a math intrinsic gets vectors
    (`sqrt(v)`, `max(v, 0.0)`): scalar arguments then stand for vectors repeating them."""
    vectors = [a for a in args if isinstance(a, VectorType)]
    if spec.category != "math" or not vectors:
        return spec.typing(args)
    n = vectors[0].n
    if any(v.n != n for v in vectors):
        raise IntrinsicTypeError(f"{spec.name} of vectors of different lengths")
    params, result = spec.typing([a.elem if isinstance(a, VectorType) else a for a in args])
    assert isinstance(result, ScalarType)
    return [VectorType(p, n) for p in params], VectorType(result, n)  # type: ignore[arg-type]
