"""kiln: write SIMT compute kernels once in Python, run them on every backend a machine has."""

from __future__ import annotations

from types import ModuleType as _ModuleType

from . import backend  # the backend contract: kiln.backend.JITBackend, ...
from .aot.loader import load_library
from .errors import (
    ArityError,
    BackendCompileError,
    CaptureError,
    ConstantError,
    ConvergenceError,
    CopyError,
    DeviceFeatureError,
    DeviceMismatchError,
    IndexOutOfBoundsError,
    KernelError,
    KernelTypeError,
    LaunchError,
    OptionError,
    OutOfMemoryError,
    RecursionDepthError,
    SettingError,
    UnknownNameError,
    UnsupportedError,
)
from .execution.autotune import Autotuned, AutotuneError, Config, autotune
from .execution.capture import CapturedLaunch, Graph, Param, capture
from .execution.kernel import Kernel, func, kernel, launch
from .execution.raw import RawKernel
from .execution.sharding import (
    Partials,
    Shard,
    ShardedArray,
    ShardError,
    launch_sharded,
    partials,
    shard,
    shard_empty,
    shard_rows,
    shard_start,
)
from .framework.sizing import Dim, dim
from .ir.types import (
    Array,
    ArrayType,
    ConstexprType,
    FragmentType,
    ScalarType,
    StructType,
    VariantType,
    VectorType,
    bf16,
    bool_,
    constexpr,
    f16,
    f32,
    f32x2,
    f32x3,
    f32x4,
    f64,
    f64x2,
    f64x3,
    f64x4,
    i8,
    i16,
    i32,
    i32x2,
    i32x3,
    i32x4,
    i64,
    u8,
    u16,
    u32,
    u32x2,
    u32x3,
    u32x4,
    u64,
)
from .lang import builtins as _b
from .lang.functions import DeviceFunction
from .lang.records import Variant, struct, variant
from .options import KernelOptions
from .runtime.array import (
    DeviceArray,
    DeviceArrayView,
    as_device_array,
    empty,
    empty_like,
    full,
    to_device,
    zeros,
)
from .runtime.device import Device, DeviceNotFoundError, Event, Stream, backends, device, devices
from .version import __version__

graph = capture  # the name kiln.graph had before captures replayed on every backend

# long names of the scalar types
bool8 = bool_
int8, int16, int32, int64 = i8, i16, i32, i64
uint8, uint16, uint32, uint64 = u8, u16, u32, u64
float16, float32, float64 = f16, f32, f64
bfloat16 = bf16

# kernel builtins
thread_idx, block_idx, block_dim, grid_dim = _b.thread_idx, _b.block_idx, _b.block_dim, _b.grid_dim
global_id, global_size, shared, local = _b.global_id, _b.global_size, _b.shared, _b.local
static_range, unroll = _b.static_range, _b.unroll
native = _b.native
load, store = _b.load, _b.store
barrier, mem_fence = _b.barrier, _b.mem_fence
atomic_add = _b.intrinsic_object("atomic_add")
atomic_sub = _b.intrinsic_object("atomic_sub")
atomic_min = _b.intrinsic_object("atomic_min")
atomic_max = _b.intrinsic_object("atomic_max")
atomic_and = _b.intrinsic_object("atomic_and")
atomic_or = _b.intrinsic_object("atomic_or")
atomic_xor = _b.intrinsic_object("atomic_xor")
atomic_exch = _b.intrinsic_object("atomic_exch")
atomic_cas = _b.intrinsic_object("atomic_cas")
sqrt = _b.intrinsic_object("sqrt")
rsqrt = _b.intrinsic_object("rsqrt")
exp = _b.intrinsic_object("exp")
exp2 = _b.intrinsic_object("exp2")
log = _b.intrinsic_object("log")
log2 = _b.intrinsic_object("log2")
log10 = _b.intrinsic_object("log10")
sin = _b.intrinsic_object("sin")
cos = _b.intrinsic_object("cos")
tan = _b.intrinsic_object("tan")
asin = _b.intrinsic_object("asin")
acos = _b.intrinsic_object("acos")
atan = _b.intrinsic_object("atan")
atan2 = _b.intrinsic_object("atan2")
sinh = _b.intrinsic_object("sinh")
cosh = _b.intrinsic_object("cosh")
tanh = _b.intrinsic_object("tanh")
# pow, abs, round, min and max shadow the Python builtins here on purpose: kernels spell
# them kiln.pow(...) as NumPy users expect.
pow = _b.intrinsic_object("pow")
abs = _b.intrinsic_object("abs")
floor = _b.intrinsic_object("floor")
ceil = _b.intrinsic_object("ceil")
trunc = _b.intrinsic_object("trunc")
round = _b.intrinsic_object("round")
min = _b.intrinsic_object("min")
max = _b.intrinsic_object("max")
fma = _b.intrinsic_object("fma")
erf = _b.intrinsic_object("erf")
isnan = _b.intrinsic_object("isnan")
isinf = _b.intrinsic_object("isinf")
copysign = _b.intrinsic_object("copysign")
warp_size = _b.intrinsic_object("warp_size")
lane_id = _b.intrinsic_object("lane_id")
shuffle = _b.intrinsic_object("shuffle")
shuffle_down = _b.intrinsic_object("shuffle_down")
shuffle_xor = _b.intrinsic_object("shuffle_xor")
vote_all = _b.intrinsic_object("vote_all")
vote_any = _b.intrinsic_object("vote_any")
ballot = _b.intrinsic_object("ballot")
dot = _b.intrinsic_object("dot")
length = _b.intrinsic_object("length")
normalize = _b.intrinsic_object("normalize")
cross = _b.intrinsic_object("cross")
def fragment_a(dtype: ScalarType) -> FragmentType:
    """The type of an A operand fragment of `kiln.mma` (16 x 16 for f16 and bf16, 16 x 8 for
    f32); in kernels, `kiln.local(kiln.fragment_a(bf16), n)` holds n of them."""
    return FragmentType.of("a", dtype)


def fragment_b(dtype: ScalarType) -> FragmentType:
    """The type of a B operand fragment of `kiln.mma` (16 x 8 for f16 and bf16, 8 x 8 for
    f32)."""
    return FragmentType.of("b", dtype)


mma_load_a = _b.intrinsic_object("mma_load_a")
mma_load_b = _b.intrinsic_object("mma_load_b")
mma = _b.intrinsic_object("mma")
mma_store = _b.intrinsic_object("mma_store")
copy_async = _b.intrinsic_object("copy_async")
copy_async_commit = _b.intrinsic_object("copy_async_commit")
copy_async_wait = _b.intrinsic_object("copy_async_wait")
tf32 = _b.intrinsic_object("tf32")
wgmma = _b.intrinsic_object("wgmma")
wgmma_store = _b.intrinsic_object("wgmma_store")
wgmma_fence = _b.intrinsic_object("wgmma_fence")
wgmma_commit = _b.intrinsic_object("wgmma_commit")
wgmma_wait = _b.intrinsic_object("wgmma_wait")

__all__ = [name for name, value in globals().items()
           if not name.startswith("_") and name != "annotations"
           and not isinstance(value, _ModuleType)]
"""The kernel author's API; the backend contract is `kiln.backend`."""
