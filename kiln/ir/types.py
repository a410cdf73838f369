"""The kiln type system: scalars, arrays and the promotion rules every backend agrees on.

Promotion (documented in docs/language.md):
- integers narrower than 32 bits (and bool) are widened to i32 before arithmetic (as in C);
- int with float gives the float; two floats give the wider (f16 with bf16 gives f32);
- two integers of one signedness give the wider; mixed signedness gives the unsigned type
  when it is at least as wide as the signed one, else the signed type (C's rule).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import ml_dtypes
import numpy as np

from .enums import MemorySpace


class Type:
    """Base of all kiln types."""

    def __copy__(self) -> Type:
        return self

    def __deepcopy__(self, memo: dict[int, object]) -> Type:
        """Types are immutable values that code compares by identity (`t is f32`): a copy
        of an IR tree (`copy.deepcopy`, as a plugin's pass may make) shares them."""
        return self


@dataclass(frozen=True)
class VoidType(Type):
    def __repr__(self) -> str:
        return "void"


void = VoidType()


@dataclass(frozen=True)
class ScalarType(Type):
    """A scalar: kind is 'b' (bool), 'i' (signed), 'u' (unsigned) or 'f' (float)."""

    name: str
    kind: str
    bits: int

    def __repr__(self) -> str:
        return self.name

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(_NUMPY_NAMES[self.name])

    @property
    def is_float(self) -> bool:
        return self.kind == "f"

    @property
    def is_int(self) -> bool:
        return self.kind in "iu"

    @property
    def is_signed(self) -> bool:
        return self.kind == "i"

    @property
    def is_bool(self) -> bool:
        return self.kind == "b"

    @property
    def itemsize(self) -> int:
        return max(1, self.bits // 8)

    def __getitem__(self, dims: object) -> ArrayType:
        """`f32[:]`, `f32[:, :]` build array annotations."""
        return _array_of(self, dims)

    def __call__(self, value: object = 0) -> object:
        """On the host, `f32(1.5)` makes a NumPy scalar (in kernels it is a cast)."""
        return self.dtype.type(value)

    def range(self) -> tuple[float, float]:
        if self.is_float:
            floats = ml_dtypes.finfo(self.dtype)
            return (float(floats.min), float(floats.max))
        if self.is_bool:
            return (0, 1)
        ints = np.iinfo(self.dtype)
        return (int(ints.min), int(ints.max))


_NUMPY_NAMES = {
    "bool_": "bool", "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64",
    "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64",
    "f16": "float16", "bf16": ml_dtypes.bfloat16, "f32": "float32", "f64": "float64",
}

bool_ = ScalarType("bool_", "b", 8)
i8 = ScalarType("i8", "i", 8)
i16 = ScalarType("i16", "i", 16)
i32 = ScalarType("i32", "i", 32)
i64 = ScalarType("i64", "i", 64)
u8 = ScalarType("u8", "u", 8)
u16 = ScalarType("u16", "u", 16)
u32 = ScalarType("u32", "u", 32)
u64 = ScalarType("u64", "u", 64)
f16 = ScalarType("f16", "f", 16)
bf16 = ScalarType("bf16", "f", 16)
"""bfloat16: f32's exponent with 8 significant bits (NumPy dtype `ml_dtypes.bfloat16`)."""
f32 = ScalarType("f32", "f", 32)
f64 = ScalarType("f64", "f", 64)

SCALARS: tuple[ScalarType, ...] = (bool_, i8, i16, i32, i64, u8, u16, u32, u64, f16, bf16, f32,
                                f64)
SCALAR_BY_NAME = {t.name: t for t in SCALARS}
SCALAR_BY_DTYPE = {t.dtype: t for t in SCALARS}


@dataclass(frozen=True)
class VectorType(Type):
    """`f32x4`: `n` (2 to 4) components `.x .y .z .w` of one scalar type, element-wise
    arithmetic. In memory, and on the host, a C array `elem[n]` (an `f32x4[:]` of length m is
    an (m, 4) NumPy array)."""

    elem: ScalarType
    n: int

    def __repr__(self) -> str:
        return self.name

    @property
    def name(self) -> str:
        return f"{self.elem.name}x{self.n}"

    @property
    def dtype(self) -> np.dtype:
        return np.dtype((self.elem.dtype, (self.n,)))

    @property
    def itemsize(self) -> int:
        return self.elem.itemsize * self.n

    def __getitem__(self, dims: object) -> ArrayType:
        return _array_of(self, dims)

    def __call__(self, *values: object) -> np.ndarray:
        """On the host, `f32x3(1, 2, 3)` makes a NumPy array (in kernels, a vector value)."""
        out = np.empty(self.n, self.elem.dtype)
        out[...] = values[0] if len(values) == 1 else values
        return out


@dataclass(frozen=True)
class FragmentType(Type):
    """A warp's matrix-multiply operand tile (`kiln.mma_load_a` / `kiln.mma_load_b`): the
    A tile is 16 x K, the B tile K x 8, with K = 16 for f16 and bf16 and K = 8 for f32
    (multiplied as tf32). Opaque: made by a load, used by `kiln.mma`; the pass
    `lower_matrix_ops` gives it each backend's representation."""

    use: str  # "a" or "b"
    elem: ScalarType

    @staticmethod
    def of(use: str, elem: object) -> FragmentType:
        """The fragment type, or a TypeError naming the element types matrix units take."""
        if elem not in (f16, bf16, f32):
            raise TypeError(f"matrix fragments hold f16, bf16 or f32 (as tf32), not {elem}")
        return FragmentType(use, elem)  # type: ignore[arg-type]

    def __repr__(self) -> str:
        return f"fragment_{self.use}({self.elem.name})"

    @property
    def k(self) -> int:
        """The reduction depth of one `mma` with this element type."""
        return 8 if self.elem.bits == 32 else 16

    @property
    def shape(self) -> tuple[int, int]:
        """The tile's rows and columns."""
        return (16, self.k) if self.use == "a" else (self.k, 8)


@dataclass(frozen=True)
class StructType(Type):
    """A record (`@kiln.struct`): named fields of scalar, vector and record types.

    Layout (one rule for every backend): NumPy's `align=True` struct layout, which is C's:
    each field at the next offset that is a multiple of its alignment (a scalar's size; a
    vector's element size; a record's largest alignment), the size rounded up to a multiple
    of the record's alignment.
    """

    name: str
    fields: tuple[tuple[str, Type], ...]
    pyclass: type | None = field(default=None, compare=False)

    def __repr__(self) -> str:
        return self.name

    def field_type(self, name: str) -> Type | None:
        return dict(self.fields).get(name)

    @property
    def dtype(self) -> np.dtype:
        return np.dtype({"names": [n for n, _ in self.fields],
                         "formats": [t.dtype for _, t in self.fields]}, align=True)  # type: ignore[attr-defined, call-overload]

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    def __getitem__(self, dims: object) -> ArrayType:
        return _array_of(self, dims)


@dataclass(frozen=True)
class VariantType(Type):
    """A tagged union of records (`kiln.variant`): an i32 `tag` (the case's position) at
    offset 0, then the cases' fields overlapping at the first offset aligned for every case.
    Its NumPy dtype names the tag `tag` and each case's record by the case's name."""

    name: str
    cases: tuple[StructType, ...]

    def __repr__(self) -> str:
        return self.name

    def case_index(self, case: Type) -> int | None:
        return self.cases.index(case) if case in self.cases else None

    def field_type(self, name: str) -> Type | None:
        if name == "tag":
            return i32
        return next((c for c in self.cases if c.name == name), None)

    @property
    def dtype(self) -> np.dtype:
        dtypes = [c.dtype for c in self.cases]
        align = max([4, *(d.alignment for d in dtypes)])
        payload = -(-4 // align) * align
        size = payload + max([0, *(d.itemsize for d in dtypes)])
        return np.dtype({"names": ["tag", *(c.name for c in self.cases)],
                         "formats": [np.dtype(np.int32), *dtypes],
                         "offsets": [0, *(payload for _ in dtypes)],
                         "itemsize": -(-size // align) * align}, align=True)

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    def __getitem__(self, dims: object) -> ArrayType:
        return _array_of(self, dims)


Element = ScalarType | VectorType | StructType | VariantType
"""What arrays hold."""


def _array_of(elem: Element, dims: object) -> ArrayType:
    items = dims if isinstance(dims, tuple) else (dims,)
    if not all(isinstance(d, slice) and d == slice(None) for d in items):
        raise TypeError(f"array annotations are written {elem}[:], {elem}[:, :], ...")
    return ArrayType(elem, len(items))


def is_aggregate(t: Type) -> bool:
    """Records, variants and vectors: values the lowering pass splits into scalars."""
    return isinstance(t, (VectorType, StructType, VariantType))


@dataclass(frozen=True)
class ArrayType(Type):
    """An n-d C-contiguous array; shared and local arrays carry their constant shape."""

    elem: Element
    ndim: int
    space: MemorySpace = MemorySpace.GLOBAL
    shape: tuple[int, ...] | None = None

    def __repr__(self) -> str:
        dims = ", ".join(":" for _ in range(self.ndim))
        if self.space is MemorySpace.GLOBAL:
            return f"{self.elem}[{dims}]"
        return f"{self.space.name.lower()} {self.elem}{list(self.shape or ())}"

    @property
    def size(self) -> int:
        """Element count of a fixed-shape (shared or local) array."""
        assert self.shape is not None
        return int(np.prod(self.shape))

    @property
    def scalar_elem(self) -> ScalarType:
        """The element of an array after `lower_aggregates`, which leaves only arrays of
        scalars: what code generators and the ABI read."""
        assert isinstance(self.elem, ScalarType), f"{self} reached code generation unlowered"
        return self.elem


@dataclass(frozen=True)
class ConstexprType(Type):
    """`kiln.constexpr`: a parameter whose value specialises the kernel at compile time.

    The annotation is `kiln.constexpr`; a launch passes the value, which becomes a constant
    of the compiled kernel (one specialisation per value) and is not passed at run time.
    `kiln.constexpr(16)` names a specialisation when giving types by hand.
    """

    value: object = None

    def __call__(self, value: object) -> ConstexprType:
        return ConstexprType(value)

    def __repr__(self) -> str:
        return "constexpr" if self.value is None else f"constexpr({self.value!r})"


constexpr = ConstexprType()


class _ArrayAlias:
    """`kiln.Array[f32, 2]` (also `kiln.Array(f32, 2)`) is `f32[:, :]`."""

    def __getitem__(self, key: tuple[ScalarType, int]) -> ArrayType:
        elem, ndim = key
        return ArrayType(elem, ndim)

    def __call__(self, elem: ScalarType, ndim: int) -> ArrayType:
        return ArrayType(elem, ndim)


Array = ArrayAlias = _ArrayAlias()

f32x2, f32x3, f32x4 = (VectorType(f32, n) for n in (2, 3, 4))
f64x2, f64x3, f64x4 = (VectorType(f64, n) for n in (2, 3, 4))
i32x2, i32x3, i32x4 = (VectorType(i32, n) for n in (2, 3, 4))
u32x2, u32x3, u32x4 = (VectorType(u32, n) for n in (2, 3, 4))
VECTORS: tuple[VectorType, ...] = (f32x2, f32x3, f32x4, f64x2, f64x3, f64x4, i32x2, i32x3,
                                   i32x4, u32x2, u32x3, u32x4)
COMPONENTS = ("x", "y", "z", "w")


def widen_for_arithmetic(t: ScalarType) -> ScalarType:
    """C's integer promotion: bool and integers narrower than 32 bits become i32."""
    if t.is_bool or (t.is_int and t.bits < 32):
        return i32
    return t


def promote(a: ScalarType, b: ScalarType) -> ScalarType:
    """The type of `a op b` for arithmetic operators."""
    a, b = widen_for_arithmetic(a), widen_for_arithmetic(b)
    if a == b:
        return a
    if a.is_float or b.is_float:
        if {a, b} == {f16, bf16}:
            return f32
        floats = [t for t in (a, b) if t.is_float]
        return max(floats, key=lambda t: t.bits)
    if a.kind == b.kind:
        return a if a.bits >= b.bits else b
    unsigned, signed = (a, b) if a.kind == "u" else (b, a)
    return unsigned if unsigned.bits >= signed.bits else signed


def can_convert_implicitly(src: ScalarType, dst: ScalarType) -> bool:
    """Whether a value of `src` may be stored in a `dst` variable without a cast.

    Allowed: the same type, bool to anything, widening within a kind, unsigned to a wider
    signed integer, any integer to a float, and a narrower float to a wider one.
    """
    if src == dst or src.is_bool:
        return True
    if dst.is_float:
        if {src, dst} == {f16, bf16}:
            return False
        return src.is_int or (src.is_float and src.bits <= dst.bits)
    if dst.is_int and src.is_int:
        if src.kind == dst.kind:
            return src.bits <= dst.bits
        return src.kind == "u" and dst.kind == "i" and src.bits < dst.bits
    return False


def literal_type(value: object) -> ScalarType:
    """The default type of a Python literal when its context does not decide."""
    if isinstance(value, (bool, np.bool_)):
        return bool_
    if isinstance(value, np.generic):
        return SCALAR_BY_DTYPE[value.dtype]
    if isinstance(value, int):
        return i32 if -(2**31) <= value < 2**31 else i64 if -(2**63) <= value < 2**63 else u64
    if isinstance(value, float):
        return f32
    raise TypeError(f"no kiln type for literal {value!r}")


def wrap_int(value: int, t: ScalarType) -> int:
    """`value` converted to the integer type `t` as a cast does: modulo 2**bits (two's
    complement), so `u8(300)` is 44 and `i32(3000000000)` is -1294967296."""
    mask = (1 << t.bits) - 1
    value &= mask
    return value - (1 << t.bits) if t.is_signed and value >> (t.bits - 1) else value


def fits(value: int | float | bool, t: ScalarType) -> bool:
    """Whether a Python number is representable in `t` (floats fit any float type)."""
    if t.is_float:
        return True
    if isinstance(value, float):
        return False
    lo, hi = t.range()
    return lo <= int(value) <= hi
