"""The one intrinsic registry.

Each standard intrinsic is registered once with its typing rule, its variance (how its
value varies across threads), whether it is convergent (must be reached by a whole block)
and whether it has side effects. The frontend types calls through this registry.

Implementations are class data: an emitter class (`kiln.codegen.CEmitter` and its
dialects) declares its spellings (a format template over the argument sources, or a
callable), a direct backend class its callables, in `spellings`; `implementation_of`
merges them along the class's MRO, so C-family dialects share `CEmitter`'s and override
only what differs. The registry itself holds only what extensions add
(`IntrinsicRegistry.implement`, under a namespace): it is found for every class whose
namespace chain names that namespace.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from .enums import MemorySpace
from .types import (
    ArrayType,
    FragmentType,
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
Spelling = Any
"""An implementation of an intrinsic: for a C-family emitter a format string over the
argument sources or a callable `(emitter, call, args) -> str`; for a direct backend a
callable (the interp's calling conventions: `kiln.builtin_backends.interp.intrinsics`)."""
Lookup = Callable[[str], Spelling]
"""An intrinsic's name -> its implementation on one emitter or backend, None where it has
none (`CEmitter.implementation`, `Backend.intrinsic_implementation`)."""
Lowering = Callable[[list[Any], Type], Any]
"""An IR operation's lowering: (argument expressions, result type) -> an `ir.Expr` built from
existing nodes (`kiln.ir.passes.operations`)."""


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
    lowering: Lowering | None = None
    """For an IR operation (`kiln.backend.register_operation`): its expansion into existing IR, used
    by backends without an implementation of it."""


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

    def implement(self, namespace: str, impls: Mapping[str, Spelling]) -> None:
        """Add implementations of intrinsics under a namespace: the extension point, for
        intrinsics and backends kiln does not know (kiln's own are class data)."""
        for name, impl in impls.items():
            if name not in self._specs:
                raise KeyError(f"unknown intrinsic {name!r}")
            self._impls[(namespace, name)] = impl
        self.revision += 1

    def registered(self, name: str, namespaces: Iterable[str]) -> Spelling:
        """The first implementation `implement` added along the namespace chain, or None."""
        for ns in namespaces:
            impl = self._impls.get((ns, name))
            if impl is not None:
                return impl
        return None

    def missing(self, implementation: Lookup) -> list[str]:
        """Standard intrinsics `implementation` has nothing for (vector and matrix
        intrinsics are lowered before any backend sees them; the native matrix forms exist
        only on backends with matrix units; those plugins register, categories "plugin" and
        "operation", are not standard)."""
        return [n for n, s in self._specs.items()
                if s.category not in (*LOWERED_CATEGORIES, "plugin", "operation")
                and implementation(n) is None]


LOWERED_CATEGORIES = ("vector", "matrix", "matrix_native")
intrinsics = IntrinsicRegistry()


def check_spellings(owner: type) -> None:
    """Refuse a class whose own `spellings` name an intrinsic the registry does not know (a
    misspelt name would never be looked up), as `implement` does."""
    unknown = [name for name in vars(owner).get("spellings", {}) if name not in intrinsics]
    if unknown:
        raise KeyError(f"{owner.__qualname__}.spellings: unknown intrinsic(s) "
                       f"{', '.join(map(repr, unknown))}")


def implementation_of(owner: type, name: str, chain: str) -> Spelling:
    """The implementation of intrinsic `name` for class `owner`, whose attribute `chain`
    names its namespaces, most specific first (an emitter's `namespaces`, a backend's
    `intrinsic_namespaces`). Its own: the `spellings` of the first class along its MRO that
    has one for `name`, which belong to that class's first namespace. The chain is walked
    in order; at each namespace, an implementation registered there (`implement`) comes
    before the class spellings belonging to it: an extension overrides kiln's spelling at
    its namespace and the less specific ones, not a more specific dialect's own."""
    own, at = None, None
    for klass in owner.__mro__:
        table = vars(klass).get("spellings")
        if table is not None and name in table:
            declared = getattr(klass, chain, ())
            own, at = table[name], declared[0] if declared else None
            break
    for ns in getattr(owner, chain):
        impl = intrinsics.registered(name, (ns,))
        if impl is not None:
            return impl
        if ns == at:
            break
    return own

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
        assert isinstance(t, ScalarType) and isinstance(a, ScalarType)
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


# ---------------------------------------------------------------- matrix units
# Warp-level matrix multiply-accumulate and asynchronous copies (docs/language-advanced.md,
# "Matrix multiply-accumulate"). Typed here; `lower_matrix_ops` (kiln.ir.passes) rewrites
# them before any backend sees them: into the "matrix_native" intrinsics below where the
# device has matrix units (CUDA sm_80+), into plain scalar code everywhere else.

MMA_ELEMENTS = (f16, bf16, f32)


def _int_args(name: str, args: Sequence[Type], what: str) -> None:
    for t in args:
        if not (isinstance(t, ScalarType) and (t.is_int or t.is_bool)):
            raise IntrinsicTypeError(f"the {what} of {name} must be integers, got {t}")


def _matrix_array(name: str, t: Type, elems: Sequence[ScalarType]) -> ArrayType:
    if not (isinstance(t, ArrayType) and t.ndim == 2 and t.elem in elems
            and t.space is not MemorySpace.LOCAL):
        allowed = ", ".join(e.name for e in elems)
        raise IntrinsicTypeError(f"{name} takes a 2-d global or shared array of {allowed}, "
                                 f"got {t}")
    return t


def _mma_load(use: str) -> Typing:
    name = f"mma_load_{use}"

    def rule(args: Sequence[Type]) -> tuple[list[Type], Type]:
        arr = _matrix_array(name, args[0], MMA_ELEMENTS)
        _int_args(name, args[1:], "row and column")
        return [arr, i32, i32], FragmentType(use, arr.elem)  # type: ignore[arg-type]

    return rule


def _accumulator(name: str, t: Type) -> None:
    if not (isinstance(t, ArrayType) and t.space is MemorySpace.LOCAL and t.elem == f32
            and t.ndim == 1 and t.size % 4 == 0):
        raise IntrinsicTypeError(f"the accumulator of {name} is a kiln.local(f32, 4 * tiles) "
                                 f"array, got {t}")


def _mma(args: Sequence[Type]) -> tuple[list[Type], Type]:
    """(acc, tile, a, b): acc[4 tile : 4 tile + 4] += a @ b, this thread's elements."""
    acc, tile, a, b = args
    _accumulator("mma", acc)
    _int_args("mma", [tile], "accumulator tile")
    if not (isinstance(a, FragmentType) and a.use == "a"):
        raise IntrinsicTypeError(f"the third argument of mma is an A fragment "
                                 f"(kiln.mma_load_a), got {a}")
    if not (isinstance(b, FragmentType) and b.use == "b"):
        raise IntrinsicTypeError(f"the fourth argument of mma is a B fragment "
                                 f"(kiln.mma_load_b), got {b}")
    if a.elem != b.elem:
        raise IntrinsicTypeError(f"mma of {a.elem} and {b.elem} fragments: both operands "
                                 "must have one element type")
    return [acc, i32, a, b], void


def _mma_store(args: Sequence[Type]) -> tuple[list[Type], Type]:
    """(array, row, col, acc, tile): the thread's elements of one accumulator tile."""
    arr = _matrix_array("mma_store", args[0], (f16, bf16, f32, f64))
    _int_args("mma_store", [*args[1:3], args[4]], "row, column and tile")
    _accumulator("mma_store", args[3])
    return [arr, i32, i32, args[3], i32], void


def _copy_async(args: Sequence[Type]) -> tuple[list[Type], Type]:
    """(dst, dst index..., src, src index..., count): `count` elements along the last axis."""
    dst = args[0]
    if not (isinstance(dst, ArrayType) and dst.space is MemorySpace.SHARED
            and isinstance(dst.elem, ScalarType)):
        raise IntrinsicTypeError(f"copy_async copies into a kiln.shared array, got {dst}")
    src_at = 1 + dst.ndim
    if len(args) <= src_at or not isinstance(args[src_at], ArrayType):
        raise IntrinsicTypeError(f"copy_async: {dst.ndim} index(es) into the shared array, "
                                 "then the global source array")
    src = args[src_at]
    assert isinstance(src, ArrayType)
    if src.space is not MemorySpace.GLOBAL or src.elem != dst.elem:
        raise IntrinsicTypeError(f"copy_async copies from a global {dst.elem} array, got {src}")
    if len(args) != src_at + src.ndim + 2:
        raise IntrinsicTypeError(f"copy_async takes (dst, {dst.ndim} index(es), src, "
                                 f"{src.ndim} index(es), count), got {len(args)} arguments")
    _int_args("copy_async", [*args[1:src_at], *args[src_at + 1:]], "indices and count")
    return [dst, *[i32] * dst.ndim, src, *[i32] * (src.ndim + 1)], void


def _wait_count(args: Sequence[Type]) -> tuple[list[Type], Type]:
    _int_args("copy_async_wait", args, "count")
    return [i32], void


MATRIX_OPS = ("mma_load_a", "mma_load_b", "mma", "mma_store", "copy_async",
              "copy_async_commit", "copy_async_wait", "tf32")
intrinsics.register(Intrinsic("tf32", "matrix", (1, 1), _fixed(f32, f32), None))
for _use in "ab":
    intrinsics.register(Intrinsic(f"mma_load_{_use}", "matrix", (3, 3), _mma_load(_use),
                                  Variance.THREAD, warp_convergent=True))
intrinsics.register(Intrinsic("mma", "matrix", (4, 4), _mma, Variance.THREAD,
                              side_effects=True, warp_convergent=True))
intrinsics.register(Intrinsic("mma_store", "matrix", (5, 5), _mma_store, Variance.THREAD,
                              side_effects=True))
intrinsics.register(Intrinsic("copy_async", "matrix", (5, 9), _copy_async, Variance.THREAD,
                              side_effects=True))
intrinsics.register(Intrinsic("copy_async_commit", "matrix", (0, 0), _fixed(void),
                              Variance.UNIFORM, side_effects=True))
intrinsics.register(Intrinsic("copy_async_wait", "matrix", (1, 1), _wait_count,
                              Variance.UNIFORM, side_effects=True))


# Warpgroup matrix multiply-accumulate (Hopper's `wgmma`): four consecutive warps multiply a
# 64 x 16 tile of A by a 16 x N tile of B, both in shared memory in the core-matrix layout
# (element [r, k] of a tile at `s[k // 8, r, k % 8]`), into an f32 accumulator of N / 2
# elements per thread (PTX's m64nNk16 layout).

WGMMA_ELEMENTS = (f16, bf16)
WGMMA_ROWS = 64  # M of every warpgroup product
WGMMA_DEPTH = 16  # K of every warpgroup product
WGMMA_CORE = 8  # elements in a core-matrix row: 16 bytes of f16 or bf16


def _wgmma_tile(name: str, t: Type, which: str, rows: int) -> ArrayType:
    """A shared core-matrix tile holding at least one operand of `rows` rows."""
    if not (isinstance(t, ArrayType) and t.space is MemorySpace.SHARED and t.ndim == 3
            and t.elem in WGMMA_ELEMENTS and t.shape is not None
            and t.shape[2] == WGMMA_CORE):
        raise IntrinsicTypeError(f"the {which} operand of {name} is a kiln.shared array of "
                                 f"f16 or bf16 of shape (k // 8, rows, 8), got {t}")
    if t.shape[0] < WGMMA_DEPTH // WGMMA_CORE or t.shape[1] < rows:
        raise IntrinsicTypeError(f"the {which} operand of {name} needs a shape of at least "
                                 f"(2, {rows}, 8), got {t}")
    return t


def wgmma_width(acc: Type) -> int:
    """N of a warpgroup product accumulating into `acc` (N / 2 elements per thread)."""
    if not (isinstance(acc, ArrayType) and acc.space is MemorySpace.LOCAL and acc.elem == f32
            and acc.ndim == 1 and acc.shape is not None and acc.size % 4 == 0
            and 4 <= acc.size <= 128):
        raise IntrinsicTypeError(f"the accumulator of wgmma is a kiln.local(f32, N // 2) array "
                                 f"for N in 8, 16, ..., 256, got {acc}")
    return 2 * acc.size


def _wgmma(args: Sequence[Type]) -> tuple[list[Type], Type]:
    """(acc, sa, a_row, a_col, sb, b_row, b_col): acc += A[a_row:+64, a_col:+16] @
    B[b_row:+16, b_col:+N], this thread's N / 2 elements."""
    acc, sa, a_row, a_col, sb, b_row, b_col = args
    width = wgmma_width(acc)
    a = _wgmma_tile("wgmma", sa, "A", WGMMA_ROWS)
    b = _wgmma_tile("wgmma", sb, "B", width)
    if a.elem != b.elem:
        raise IntrinsicTypeError(f"wgmma of {a.elem} and {b.elem} tiles: both operands must "
                                 "have one element type")
    _int_args("wgmma", [a_row, a_col, b_row, b_col], "rows and columns")
    return [acc, a, i32, i32, b, i32, i32], void


def _wgmma_store(args: Sequence[Type]) -> tuple[list[Type], Type]:
    """(array, row, col, acc): the thread's elements of a 64 x N accumulator."""
    arr = _matrix_array("wgmma_store", args[0], (f16, bf16, f32, f64))
    _int_args("wgmma_store", args[1:3], "row and column")
    wgmma_width(args[3])
    return [arr, i32, i32, args[3]], void


def _wgmma_wait(args: Sequence[Type]) -> tuple[list[Type], Type]:
    _int_args("wgmma_wait", args, "count")
    return [i32], void


intrinsics.register(Intrinsic("wgmma", "matrix", (7, 7), _wgmma, Variance.THREAD,
                              side_effects=True, warp_convergent=True))
intrinsics.register(Intrinsic("wgmma_store", "matrix", (4, 4), _wgmma_store, Variance.THREAD,
                              side_effects=True))
for _name, _arity, _rule in (("wgmma_fence", 0, _fixed(void)), ("wgmma_commit", 0, _fixed(void)),
                             ("wgmma_wait", 1, _wgmma_wait)):
    intrinsics.register(Intrinsic(_name, "matrix", (_arity, _arity), _rule, Variance.UNIFORM,
                                  side_effects=True, warp_convergent=True))


def _native(result: Type = void) -> Typing:
    def rule(args: Sequence[Type]) -> tuple[list[Type], Type]:
        return list(args), result

    return rule


# What `lower_matrix_ops` leaves for devices with matrix units (CUDA spells them): fragments
# are then local u32 arrays holding the lane's part of the tile (PTX's layouts).
MATRIX_NATIVE = {
    # (fragments, offset, array, row, col, leading dimension)
    "native_load_a": True, "native_load_b": True,
    # (acc, offset, fragments a, offset, fragments b, offset, kind 0 f16, 1 bf16, 2 tf32)
    "native_mma": True,
    # (acc, a tile, a offset, a leading byte offset, b tile, b offset, b leading byte
    # offset, kind 0 f16 or 1 bf16): offsets in elements, of core matrices' first rows
    "native_wgmma": True,
    "native_wgmma_fence": True, "native_wgmma_commit": True,
    "native_wgmma_wait": True,  # (pending groups, accumulators the products may write...)
    # (dst, dst flat index, src, src flat index, bytes)
    "native_copy_async": False, "native_copy_async_commit": False,
    "native_copy_async_wait": False,
    "native_tf32": False,  # (value): the value rounded to tf32, as f32
}
for _name, _warp in MATRIX_NATIVE.items():
    _pure = _name == "native_tf32"
    intrinsics.register(Intrinsic(_name, "matrix_native", (0, 64), _native(f32 if _pure else void),
                                  None if _pure else Variance.THREAD, side_effects=not _pure,
                                  warp_convergent=_warp))


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
