"""The cuda target of the `library` action: cubins for the chosen architectures embedded
in `libNAME.so`, launched through the CUDA driver API.

NVRTC compiles each kernel to a cubin per `--arch` (default: this machine's GPU, else
sm_90) at build time, so the build needs no GPU. The library loads the driver
(`libcuda.so.1`) with dlopen and declares the few driver entry points it calls, so it
builds without CUDA headers and links against nothing of CUDA's; a machine without the
driver gets a clear error from `NAME_context_create`. At context creation it picks the
cubin of the device's architecture, or the newest of the same major version older than
it (cubins run on later minor versions).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ...aot.actions import ActionError
from ...aot.entries import EntryPoint
from ...aot.glue import (
    api_macro,
    c_bytes,
    common_source,
    launch_functions,
    registration_functions,
)
from ...aot.host import compile_object, link_library
from ...aot.library import LibraryTarget
from ...ir.passes.status import STATUS_WORDS
from . import nvrtc
from .backend import capabilities_of, compile_cached
from .dialect import CudaEmitter
from .driver import probe

DEFAULT_ARCH = "sm_90"
ARCH = re.compile(r"^sm_(\d+)(\d)([af]?)$")

DRIVER = """\
#include <dlfcn.h>
#include <pthread.h>

/* The CUDA driver API this library calls, declared here (no CUDA headers needed). */
typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef unsigned long long CUdeviceptr;
#define CU_ATTRIBUTE_MAX_THREADS_PER_BLOCK 1
#define CU_ATTRIBUTE_MAX_BLOCK_DIM_X 2
#define CU_ATTRIBUTE_MAX_GRID_DIM_X 5
#define CU_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR 75
#define CU_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR 76
#define CU_POINTER_ATTRIBUTE_MEMORY_TYPE 2
#define CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL 9
#define CU_POINTER_ATTRIBUTE_RANGE_START_ADDR 11
#define CU_POINTER_ATTRIBUTE_RANGE_SIZE 12
#define CU_MEMORYTYPE_DEVICE 2

static struct {{
    CUresult (*Init)(unsigned);
    CUresult (*DeviceGetCount)(int *);
    CUresult (*DeviceGet)(CUdevice *, int);
    CUresult (*DeviceGetAttribute)(int *, int, CUdevice);
    CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*DevicePrimaryCtxRelease)(CUdevice);
    CUresult (*CtxSetCurrent)(CUcontext);
    CUresult (*ModuleLoadData)(CUmodule *, const void *);
    CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
    CUresult (*ModuleUnload)(CUmodule);
    CUresult (*StreamCreate)(CUstream *, unsigned);
    CUresult (*StreamDestroy)(CUstream);
    CUresult (*StreamSynchronize)(CUstream);
    CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, unsigned, CUstream, void **, void **);
    CUresult (*MemAlloc)(CUdeviceptr *, size_t);
    CUresult (*MemFree)(CUdeviceptr);
    CUresult (*MemcpyHtoD)(CUdeviceptr, const void *, size_t);
    CUresult (*MemcpyDtoH)(void *, CUdeviceptr, size_t);
    CUresult (*MemcpyDtoD)(CUdeviceptr, CUdeviceptr, size_t);
    CUresult (*GetErrorName)(CUresult, const char **);
    CUresult (*PointerGetAttribute)(void *, int, CUdeviceptr);
}} cu;

static const char *const kiln_cu_names[] = {{
    "cuInit", "cuDeviceGetCount", "cuDeviceGet", "cuDeviceGetAttribute",
    "cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRelease_v2", "cuCtxSetCurrent",
    "cuModuleLoadData", "cuModuleGetFunction", "cuModuleUnload", "cuStreamCreate",
    "cuStreamDestroy_v2", "cuStreamSynchronize", "cuLaunchKernel", "cuMemAlloc_v2",
    "cuMemFree_v2", "cuMemcpyHtoD_v2", "cuMemcpyDtoH_v2", "cuMemcpyDtoD_v2", "cuGetErrorName",
    "cuPointerGetAttribute",
}};

static pthread_once_t kiln_cu_once = PTHREAD_ONCE_INIT;
static char kiln_cu_problem[512];

static void kiln_cu_load(void) {{
    void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!driver) {{
        snprintf(kiln_cu_problem, sizeof kiln_cu_problem,
                 "no NVIDIA driver (libcuda.so.1): %s", dlerror());
        return;
    }}
    void **slots = (void **)&cu;
    for (size_t k = 0; k < sizeof kiln_cu_names / sizeof *kiln_cu_names; k++) {{
        slots[k] = dlsym(driver, kiln_cu_names[k]);
        if (!slots[k]) {{
            snprintf(kiln_cu_problem, sizeof kiln_cu_problem,
                     "the NVIDIA driver lacks %s (too old?)", kiln_cu_names[k]);
            return;
        }}
    }}
    CUresult r = cu.Init(0);
    if (r != 0) snprintf(kiln_cu_problem, sizeof kiln_cu_problem, "cuInit failed: error %d", r);
}}

static int kiln_cu_check(CUresult r, const char *what) {{
    if (r == 0) return {LIB}_SUCCESS;
    const char *name = "unknown";
    cu.GetErrorName(r, &name);
    return kiln_fail({LIB}_ERROR_DEVICE, "%s: %s (%d)", what, name ? name : "?", r);
}}
"""

RUNTIME = """\
struct {lib}_context {{
    int ordinal;
    CUdevice device;
    CUcontext context;
    CUstream stream;
    kiln_limits limits;
    kiln_ranges memory;
    CUmodule modules[{count}];
    CUfunction functions[{count}];
    CUdeviceptr status[{count}];
}};

{images}

{api} int {lib}_device_count(void) {{
    pthread_once(&kiln_cu_once, kiln_cu_load);
    int count = 0;
    if (kiln_cu_problem[0]) return kiln_fail({LIB}_ERROR_UNAVAILABLE, "%s", kiln_cu_problem), 0;
    return cu.DeviceGetCount(&count) == 0 ? count : 0;
}}

/* Everything a context holds (not its memory, which the program frees). */
static void kiln_cu_release({lib}_context *ctx) {{
    cu.CtxSetCurrent(ctx->context);
    if (ctx->stream) {{ cu.StreamSynchronize(ctx->stream); cu.StreamDestroy(ctx->stream); }}
    for (int k = 0; k < {count}; k++) {{
        if (ctx->modules[k]) cu.ModuleUnload(ctx->modules[k]);
        if (ctx->status[k]) cu.MemFree(ctx->status[k]);
    }}
    if (ctx->context) cu.DevicePrimaryCtxRelease(ctx->device);
    free(ctx->memory.items);
    free(ctx);
}}

/* The cubin for compute capability `cc` (major * 10 + minor), or -1. */
static int kiln_cu_pick(int cc) {{
    int best = -1;
    for (int k = 0; k < {archs}; k++) {{
        int same = kiln_arch_cc[k] == cc;
        int older = !kiln_arch_exact[k] && kiln_arch_cc[k] / 10 == cc / 10 && kiln_arch_cc[k] < cc;
        if ((same || older) && (best < 0 || kiln_arch_cc[k] > kiln_arch_cc[best])) best = k;
    }}
    return best;
}}

{api} int {lib}_context_create({lib}_context **ctx, int device) {{
    if (!ctx) return kiln_fail({LIB}_ERROR_INVALID_ARGUMENT, "context_create: ctx is NULL");
    *ctx = NULL;
    int count = {lib}_device_count();
    if (kiln_cu_problem[0]) return {LIB}_ERROR_UNAVAILABLE;
    if (device < 0 || device >= count)
        return kiln_fail({LIB}_ERROR_INVALID_ARGUMENT,
                         "context_create: device %d does not exist (%d CUDA devices)",
                         device, count);
    {lib}_context *c = calloc(1, sizeof *c);
    if (!c) return kiln_fail({LIB}_ERROR_OUT_OF_MEMORY, "context_create: out of memory");
    c->ordinal = device;
    int major = 0, minor = 0, status = kiln_cu_check(cu.DeviceGet(&c->device, device),
                                                     "cuDeviceGet");
    if (status == {LIB}_SUCCESS) {{
        cu.DeviceGetAttribute(&major, CU_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, c->device);
        cu.DeviceGetAttribute(&minor, CU_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, c->device);
        cu.DeviceGetAttribute(&c->limits.threads, CU_ATTRIBUTE_MAX_THREADS_PER_BLOCK, c->device);
        for (int k = 0; k < 3; k++) {{
            int grid = 0, block = 0;
            cu.DeviceGetAttribute(&block, CU_ATTRIBUTE_MAX_BLOCK_DIM_X + k, c->device);
            cu.DeviceGetAttribute(&grid, CU_ATTRIBUTE_MAX_GRID_DIM_X + k, c->device);
            c->limits.block[k] = (uint32_t)block;
            c->limits.grid[k] = (uint32_t)grid;
        }}
        status = kiln_cu_check(cu.DevicePrimaryCtxRetain(&c->context, c->device),
                               "cuDevicePrimaryCtxRetain");
    }}
    if (status != {LIB}_SUCCESS) {{ free(c); return status; }}
    int arch = kiln_cu_pick(major * 10 + minor);
    if (arch < 0) {{
        kiln_cu_release(c);
        return kiln_fail({LIB}_ERROR_UNAVAILABLE,
                         "context_create: device %d is sm_%d%d; the library has cubins for %s "
                         "(kiln build --arch)", device, major, minor, kiln_arch_names);
    }}
    status = kiln_cu_check(cu.CtxSetCurrent(c->context), "cuCtxSetCurrent");
    if (status == {LIB}_SUCCESS)
        status = kiln_cu_check(cu.StreamCreate(&c->stream, 0), "cuStreamCreate");
    for (int k = 0; k < {count} && status == {LIB}_SUCCESS; k++) {{
        status = kiln_cu_check(cu.ModuleLoadData(&c->modules[k], kiln_images[k][arch]),
                               "cuModuleLoadData");
        if (status == {LIB}_SUCCESS)
            status = kiln_cu_check(cu.ModuleGetFunction(&c->functions[k], c->modules[k],
                                                        kiln_functions[k]),
                                   "cuModuleGetFunction");
    }}
    for (int k = 0; k < {count} && status == {LIB}_SUCCESS; k++) {{
        const int32_t zeros[{status_words}] = {{0}};
        if (!kiln_checked[k]) continue;
        status = kiln_cu_check(cu.MemAlloc(&c->status[k], sizeof zeros), "context_create");
        if (status == {LIB}_SUCCESS)
            status = kiln_cu_check(cu.MemcpyHtoD(c->status[k], zeros, sizeof zeros),
                                   "context_create");
    }}
    if (status == {LIB}_SUCCESS && !kiln_context_known(c, 1, 0))
        status = kiln_fail({LIB}_ERROR_OUT_OF_MEMORY, "context_create: out of memory");
    if (status != {LIB}_SUCCESS) {{ kiln_cu_release(c); return status; }}
    *ctx = c;
    return {LIB}_SUCCESS;
}}

{api} void {lib}_context_destroy({lib}_context *ctx) {{
    if (ctx && kiln_context_known(ctx, 0, 1)) kiln_cu_release(ctx);
}}

/* Make the context current in the calling thread (the driver's state is per thread). */
static int kiln_cu_enter({lib}_context *ctx, const char *what) {{
    int status = kiln_check_context(ctx, what);
    return status ? status : kiln_cu_check(cu.CtxSetCurrent(ctx->context), what);
}}

{api} int {lib}_synchronize({lib}_context *ctx) {{
    int status = kiln_cu_enter(ctx, "synchronize");
    return status ? status : kiln_cu_check(cu.StreamSynchronize(ctx->stream), "synchronize");
}}

{api} void *{lib}_alloc({lib}_context *ctx, size_t nbytes) {{
    CUdeviceptr p = 0;
    if (kiln_cu_enter(ctx, "alloc")) return NULL;
    CUresult r = cu.MemAlloc(&p, nbytes ? nbytes : 1);
    if (r != 0) {{
        const char *name = NULL;
        cu.GetErrorName(r, &name);
        kiln_fail({LIB}_ERROR_OUT_OF_MEMORY, "alloc: %zu bytes: %s (%d)", nbytes,
                  name ? name : "?", r);
        return NULL;
    }}
    if (!kiln_ranges_add(&ctx->memory, (void *)(uintptr_t)p, nbytes, 0)) {{
        cu.MemFree(p);
        kiln_fail({LIB}_ERROR_OUT_OF_MEMORY, "alloc: out of memory");
        return NULL;
    }}
    return (void *)(uintptr_t)p;
}}

{api} int {lib}_free({lib}_context *ctx, void *device_ptr) {{
    int status = kiln_cu_enter(ctx, "free");
    if (status || !device_ptr) return status;
    status = kiln_forget_allocation(&ctx->memory, device_ptr);
    return status ? status : kiln_cu_check(cu.MemFree((CUdeviceptr)(uintptr_t)device_ptr),
                                           "free");
}}

/* `nbytes` at `ptr` lie in one allocation of device memory (cudaMalloc, cuMemAlloc,
   managed memory) on the context's device, as the driver records it. */
static int kiln_foreign_check({lib}_context *ctx, const void *ptr, size_t nbytes) {{
    int status = kiln_cu_enter(ctx, "register");
    if (status) return status;
    CUdeviceptr p = (CUdeviceptr)(uintptr_t)ptr, start = 0;
    unsigned type = 0;
    int ordinal = -1;
    size_t size = 0;
    CUresult r = cu.PointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p);
    if (r == 0) r = cu.PointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p);
    if (r == 0) r = cu.PointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, p);
    if (r == 0) r = cu.PointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, p);
    if (r != 0) {{
        const char *name = NULL;
        cu.GetErrorName(r, &name);
        return kiln_fail({LIB}_ERROR_INVALID_ARGUMENT,
                         "register: %p is not device memory the CUDA driver knows (a host "
                         "pointer?): cuPointerGetAttribute: %s (%d)", ptr, name ? name : "?", r);
    }}
    if (type != CU_MEMORYTYPE_DEVICE)
        return kiln_fail({LIB}_ERROR_INVALID_ARGUMENT,
                         "register: %p is not device memory (CUDA memory type %u, not %d)",
                         ptr, type, CU_MEMORYTYPE_DEVICE);
    if (ordinal != ctx->ordinal)
        return kiln_fail({LIB}_ERROR_INVALID_ARGUMENT,
                         "register: %p is memory of CUDA device %d; the context is on device %d",
                         ptr, ordinal, ctx->ordinal);
    if (p < start || p - start > size || nbytes > size - (p - start))
        return kiln_fail({LIB}_ERROR_INVALID_ARGUMENT,
                         "register: %zu bytes at %p, whose allocation has %llu bytes from there",
                         nbytes, ptr, p < start || p - start > size ? 0ULL
                         : (unsigned long long)(size - (p - start)));
    return {LIB}_SUCCESS;
}}

/* The copies run on the legacy default stream, which waits for the context's stream. */
{api} int {lib}_copy_to_device({lib}_context *ctx, void *device_dst, const void *host_src,
                          size_t nbytes) {{
    int status = kiln_cu_enter(ctx, "copy_to_device");
    if (!status) status = kiln_check_copy_in(&ctx->memory, device_dst, host_src, nbytes);
    if (status || !nbytes) return status;
    return kiln_cu_check(cu.MemcpyHtoD((CUdeviceptr)(uintptr_t)device_dst, host_src, nbytes),
                         "copy_to_device");
}}

{api} int {lib}_copy_to_host({lib}_context *ctx, void *host_dst, size_t host_bytes,
                          const void *device_src, size_t nbytes) {{
    int status = kiln_cu_enter(ctx, "copy_to_host");
    if (!status)
        status = kiln_check_copy_out(&ctx->memory, host_dst, host_bytes, device_src, nbytes);
    if (status || !nbytes) return status;
    return kiln_cu_check(cu.MemcpyDtoH(host_dst, (CUdeviceptr)(uintptr_t)device_src, nbytes),
                         "copy_to_host");
}}

{api} int {lib}_copy_device_to_device({lib}_context *ctx, void *device_dst,
                                  const void *device_src, size_t nbytes) {{
    int status = kiln_cu_enter(ctx, "copy_device_to_device");
    if (!status) status = kiln_check_copy_within(&ctx->memory, device_dst, device_src, nbytes);
    if (status || !nbytes || device_dst == device_src) return status;
    return kiln_cu_check(cu.MemcpyDtoD((CUdeviceptr)(uintptr_t)device_dst,
                                       (CUdeviceptr)(uintptr_t)device_src, nbytes),
                         "copy_device_to_device");
}}

/* Entry k's status once its launches have finished, zeroed for the next. */
static int kiln_status_read({lib}_context *ctx, int k, int32_t *words) {{
    const int32_t zeros[{status_words}] = {{0}};
    int status = kiln_cu_check(cu.StreamSynchronize(ctx->stream), "{lib}: a debug launch");
    if (!status)
        status = kiln_cu_check(cu.MemcpyDtoH(words, ctx->status[k], sizeof zeros),
                               "reading the kernel's status");
    if (status || !words[0]) return status;
    return kiln_cu_check(cu.MemcpyHtoD(ctx->status[k], zeros, sizeof zeros),
                         "zeroing the kernel's status");
}}
"""


class CudaLibrary(LibraryTarget):
    name = "cuda"
    notes = (
        "cuda target: devices are CUDA device ordinals; each context uses the device's",
        "primary context (shared with the CUDA runtime) and a stream of its own. Device",
        "pointers are CUdeviceptr values from {lib}_alloc; offsets into them are fine.",
        "{lib}_register takes device memory of the context's device from elsewhere",
        "(cudaMalloc, cuMemAlloc, another library's), checked with cuPointerGetAttribute.",
        "The driver (libcuda.so.1) is loaded at run time.",
    )
    interior_pointers = True

    def architectures(self, requested: Sequence[str]) -> tuple[str, ...]:
        archs = tuple(requested) or (self._default_arch(),)
        try:
            supported = nvrtc.supported_architectures()
        except ImportError:
            raise ActionError("the cuda target compiles with NVRTC, from cuda-bindings: "
                              "pip install 'kiln[cuda]'") from None
        for arch in archs:
            match = ARCH.match(arch)
            if match is None or int(match[1] + match[2]) not in supported:
                known = ", ".join(f"sm_{a}" for a in supported)
                raise ActionError(f"unknown CUDA architecture {arch!r} (this NVRTC knows "
                                  f"{known}; an 'a' or 'f' suffix is allowed)")
        return archs

    @staticmethod
    def _default_arch() -> str:
        return capabilities_of(0).arch if probe().available else DEFAULT_ARCH

    def build(self, lib: str, entries: Sequence[EntryPoint], architectures: tuple[str, ...],
              settings: dict[str, Any], work: Path, out: Path) -> dict[str, Any]:
        source = "\n".join([common_source(lib, "cuda", self.interior_pointers),
                            DRIVER.format(LIB=lib.upper()),
                            self._runtime(lib, entries, architectures),
                            registration_functions(lib),
                            launch_functions(lib, entries, "&ctx->limits", _launch_body,
                                             lambda k: f"(uintptr_t)ctx->status[{k}]")])
        link_library(lib, [compile_object(source, work / lib, out)], out, ["-ldl", "-lpthread"])
        return {}

    def _runtime(self, lib: str, entries: Sequence[EntryPoint], archs: tuple[str, ...]) -> str:
        images, names, rows = [], [], []
        for e in entries:
            emitter = CudaEmitter()
            text = emitter.emit(e.kernel.program)
            entry = emitter.entry_name
            names.append(f'"{entry}"')
            row = []
            for a, arch in enumerate(archs):
                code = compile_cached(text, entry, arch, fastmath=e.kernel.options.fastmath,
                                      contract=e.kernel.options.contract)
                images.append(c_bytes(code.image, f"kiln_cubin_{e.index}_{a}"))
                row.append(f"kiln_cubin_{e.index}_{a}")
            rows.append("{" + ", ".join(row) + "}")
        ccs = [ARCH.match(a) for a in archs]
        table = [
            *images,
            f"static const unsigned char *const kiln_images[][{len(archs)}] = "
            f"{{{', '.join(rows)}}};",
            f"static const char *const kiln_functions[] = {{{', '.join(names)}}};",
            "static const int kiln_arch_cc[] = {"
            + ", ".join(str(int(m[1] + m[2])) for m in ccs if m) + "};",
            "static const int kiln_arch_exact[] = {"
            + ", ".join("1" if m and m[3] else "0" for m in ccs) + "};",
            f'static const char kiln_arch_names[] = "{", ".join(archs)}";',
            "static const int kiln_checked[] = {"
            + ", ".join(str(int(bool(e.checks))) for e in entries) + "};",
        ]
        return RUNTIME.format(lib=lib, LIB=lib.upper(), api=api_macro(lib), count=len(entries),
                              archs=len(archs), images="\n".join(table),
                              status_words=STATUS_WORDS)


def _launch_body(e: EntryPoint) -> str:
    """Pointers become CUdeviceptr values; the driver takes each argument's address."""
    lines = [f"    int kiln_entered = kiln_cu_enter(ctx, \"{e.kernel.kernel}\");",
             "    if (kiln_entered) return kiln_entered;"]
    args = []
    for p in e.arguments:
        if p.role in ("pointer", "status"):
            lines.append(f"    CUdeviceptr kiln_{p.name} = (CUdeviceptr)(uintptr_t){p.name};")
            args.append(f"&kiln_{p.name}")
        else:
            args.append(f"&{p.name}")
    lines += [
        f"    void *kiln_args[] = {{{', '.join(args) or 'NULL'}}};",
        f"    return kiln_cu_check(cu.LaunchKernel(ctx->functions[{e.index}], grid.x, grid.y, "
        "grid.z, block.x, block.y, block.z, 0, ctx->stream, kiln_args, NULL), "
        f"\"{e.kernel.kernel}\");",
    ]
    return "\n".join(lines) + "\n"
