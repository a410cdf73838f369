"""C identifiers for user names: rename what clashes with keywords, builtins or kiln's own."""

from __future__ import annotations


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


C_KEYWORDS = _words("""
auto break case char const continue default do double else enum extern float for goto if
inline int long register restrict return short signed sizeof static struct switch typedef
union unsigned void volatile while _Alignas _Alignof _Atomic _Bool _Complex _Generic
_Imaginary _Noreturn _Static_assert _Thread_local _Float16 alignas alignof bool true false
nullptr static_assert thread_local typeof constexpr asm main NULL
""")

C_LIBRARY = _words("""
int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t size_t ptrdiff_t
intptr_t uintptr_t INFINITY NAN HUGE_VAL abs labs llabs fabs fabsf sqrt sqrtf exp expf exp2
exp2f log logf log2 log2f log10 log10f sin sinf cos cosf tan tanf asin asinf acos acosf atan
atanf atan2 atan2f sinh sinhf cosh coshf tanh tanhf pow powf floor floorf ceil ceilf trunc
truncf round roundf rint rintf fmin fminf fmax fmaxf fma fmaf erf erff copysign copysignf
isnan isinf isfinite signbit fmod fmodf min max memcpy memset malloc free printf errno
""")

GPU_WORDS = _words("""
kernel global local constant private half uchar ushort uint ulong read_only write_only
threadIdx blockIdx blockDim gridDim warpSize dim3 float2 float3 float4 double2 double3 double4
int2 int3 int4 uint2 uint3 uint4 rsqrt rsqrtf atomicAdd barrier get_global_id get_local_id
get_group_id get_local_size get_num_groups
""")

RESERVED = C_KEYWORDS | C_LIBRARY | GPU_WORDS
KILN_PREFIX = "kiln_"
"""Names kiln generates start with this prefix; user names that do are renamed."""


class NameTable:
    """Unique C names for one function: user names first, then generated ones."""

    def __init__(self, reserved: frozenset[str] = RESERVED) -> None:
        self.reserved = reserved
        self.names: dict[str, str] = {}
        self.taken: set[str] = set()

    def _unique(self, base: str) -> str:
        name, n = base, 1
        while name in self.taken or name in self.reserved:
            name, n = f"{base}_{n}", n + 1
        self.taken.add(name)
        return name

    def add(self, py_name: str) -> str:
        """The C name for a user identifier (stable within the table)."""
        if py_name not in self.names:
            base = py_name
            if base in self.reserved or base.startswith(("__", KILN_PREFIX)):
                base = base.strip("_") + "_" if base.strip("_") else "v_"
            self.names[py_name] = self._unique(base)
        return self.names[py_name]

    def fresh(self, base: str) -> str:
        """A new generated name (never a user name)."""
        return self._unique(base)

    def __getitem__(self, py_name: str) -> str:
        return self.names[py_name]
