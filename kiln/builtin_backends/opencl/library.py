"""The opencl target of the `library` action: the OpenCL C embedded in `libNAME.so`,
built for the chosen device when a context is created.

The library loads the OpenCL ICD loader (`libOpenCL.so.1`) with dlopen, declaring the
few entry points it calls itself, so building it needs no OpenCL headers and linking it
no OpenCL library; a machine without a loader gets a clear error from
`NAME_context_create`. Devices are numbered as kiln numbers them: every device of every
platform, in platform order.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ...aot.actions import ActionError
from ...aot.entries import EntryPoint
from ...aot.glue import (
    api_macro,
    c_string,
    common_source,
    launch_functions,
    registration_functions,
)
from ...aot.host import compile_object, link_library
from ...aot.library import LibraryTarget
from ...ir.passes.status import STATUS_WORDS
from .build import CORRECT_DIVISION, FAST_MATH, STANDARD
from .dialect import OpenCLEmitter

ICD = """\
#include <dlfcn.h>
#include <pthread.h>

/* The OpenCL 1.2 API this library calls, declared here (no OpenCL headers needed). */
typedef int32_t cl_int;
typedef uint32_t cl_uint;
typedef uint64_t cl_bitfield;
typedef struct _cl_platform_id *cl_platform_id;
typedef struct _cl_device_id *cl_device_id;
typedef struct _cl_context *cl_context;
typedef struct _cl_command_queue *cl_command_queue;
typedef struct _cl_mem *cl_mem;
typedef struct _cl_program *cl_program;
typedef struct _cl_kernel *cl_kernel;
typedef struct _cl_event *cl_event;
#define CL_SUCCESS 0
#define CL_TRUE 1
#define CL_DEVICE_TYPE_ALL 0xFFFFFFFFu
#define CL_MEM_READ_WRITE 1u
#define CL_MEM_COPY_HOST_PTR 32u
#define CL_DEVICE_MAX_WORK_GROUP_SIZE 0x1004u
#define CL_DEVICE_MAX_WORK_ITEM_SIZES 0x1005u
#define CL_DEVICE_NAME 0x102Bu
#define CL_DEVICE_SINGLE_FP_CONFIG 0x101Bu
#define CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT (1u << 7)
#define CL_PROGRAM_BUILD_LOG 0x1183u
#define KILN_MAX_DEVICES 64

static struct {{
    cl_int (*GetPlatformIDs)(cl_uint, cl_platform_id *, cl_uint *);
    cl_int (*GetDeviceIDs)(cl_platform_id, cl_bitfield, cl_uint, cl_device_id *, cl_uint *);
    cl_int (*GetDeviceInfo)(cl_device_id, cl_uint, size_t, void *, size_t *);
    cl_context (*CreateContext)(const intptr_t *, cl_uint, const cl_device_id *, void *,
                                void *, cl_int *);
    cl_command_queue (*CreateCommandQueue)(cl_context, cl_device_id, cl_bitfield, cl_int *);
    cl_program (*CreateProgramWithSource)(cl_context, cl_uint, const char **, const size_t *,
                                          cl_int *);
    cl_int (*BuildProgram)(cl_program, cl_uint, const cl_device_id *, const char *, void *,
                           void *);
    cl_int (*GetProgramBuildInfo)(cl_program, cl_device_id, cl_uint, size_t, void *,
                                  size_t *);
    cl_kernel (*CreateKernel)(cl_program, const char *, cl_int *);
    cl_int (*SetKernelArg)(cl_kernel, cl_uint, size_t, const void *);
    cl_int (*EnqueueNDRangeKernel)(cl_command_queue, cl_kernel, cl_uint, const size_t *,
                                   const size_t *, const size_t *, cl_uint, const cl_event *,
                                   cl_event *);
    cl_int (*Finish)(cl_command_queue);
    cl_mem (*CreateBuffer)(cl_context, cl_bitfield, size_t, void *, cl_int *);
    cl_int (*EnqueueWriteBuffer)(cl_command_queue, cl_mem, cl_uint, size_t, size_t,
                                 const void *, cl_uint, const cl_event *, cl_event *);
    cl_int (*EnqueueReadBuffer)(cl_command_queue, cl_mem, cl_uint, size_t, size_t, void *,
                                cl_uint, const cl_event *, cl_event *);
    cl_int (*EnqueueCopyBuffer)(cl_command_queue, cl_mem, cl_mem, size_t, size_t, size_t,
                                cl_uint, const cl_event *, cl_event *);
    cl_int (*ReleaseMemObject)(cl_mem);
    cl_int (*ReleaseKernel)(cl_kernel);
    cl_int (*ReleaseProgram)(cl_program);
    cl_int (*ReleaseCommandQueue)(cl_command_queue);
    cl_int (*ReleaseContext)(cl_context);
}} cl;

static const char *const kiln_cl_names[] = {{
    "clGetPlatformIDs", "clGetDeviceIDs", "clGetDeviceInfo", "clCreateContext",
    "clCreateCommandQueue", "clCreateProgramWithSource", "clBuildProgram",
    "clGetProgramBuildInfo", "clCreateKernel", "clSetKernelArg", "clEnqueueNDRangeKernel",
    "clFinish", "clCreateBuffer", "clEnqueueWriteBuffer", "clEnqueueReadBuffer",
    "clEnqueueCopyBuffer", "clReleaseMemObject", "clReleaseKernel", "clReleaseProgram",
    "clReleaseCommandQueue", "clReleaseContext",
}};

static pthread_once_t kiln_cl_once = PTHREAD_ONCE_INIT;
static char kiln_cl_problem[512];

/* The ICD loader: KILN_OPENCL_LOADER (a path) when set, else the system's. */
static void kiln_cl_load(void) {{
    const char *chosen = getenv("KILN_OPENCL_LOADER");
    void *icd = NULL;
    if (chosen && *chosen) {{
        icd = dlopen(chosen, RTLD_NOW | RTLD_LOCAL);
        if (!icd) {{
            snprintf(kiln_cl_problem, sizeof kiln_cl_problem,
                     "KILN_OPENCL_LOADER=%s cannot be loaded: %s", chosen, dlerror());
            return;
        }}
    }}
    if (!icd) icd = dlopen("libOpenCL.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!icd) icd = dlopen("libOpenCL.so", RTLD_NOW | RTLD_LOCAL);
    if (!icd) {{
        snprintf(kiln_cl_problem, sizeof kiln_cl_problem,
                 "no OpenCL ICD loader (libOpenCL.so.1; or set KILN_OPENCL_LOADER to one's "
                 "path): %s", dlerror());
        return;
    }}
    void **slots = (void **)&cl;
    for (size_t k = 0; k < sizeof kiln_cl_names / sizeof *kiln_cl_names; k++) {{
        slots[k] = dlsym(icd, kiln_cl_names[k]);
        if (!slots[k]) {{
            snprintf(kiln_cl_problem, sizeof kiln_cl_problem,
                     "the OpenCL loader lacks %s", kiln_cl_names[k]);
            return;
        }}
    }}
}}

/* Every device of every platform, in platform order; returns how many (0 with a message
   when there is no loader or platform). */
static int kiln_cl_devices(cl_device_id *devices) {{
    pthread_once(&kiln_cl_once, kiln_cl_load);
    if (kiln_cl_problem[0]) return kiln_fail({LIB}_ERROR_UNAVAILABLE, "%s", kiln_cl_problem), 0;
    cl_platform_id platforms[16];
    cl_uint nplatforms = 0;
    if (cl.GetPlatformIDs(16, platforms, &nplatforms) != CL_SUCCESS || nplatforms == 0)
        return kiln_fail({LIB}_ERROR_UNAVAILABLE, "no OpenCL platform"), 0;
    int count = 0;
    for (cl_uint p = 0; p < nplatforms && p < 16; p++) {{
        cl_uint n = 0;
        if (cl.GetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, KILN_MAX_DEVICES - count,
                            devices + count, &n) == CL_SUCCESS)
            count += (int)n;
    }}
    return count;
}}
"""

RUNTIME = """\
struct {lib}_context {{
    cl_context context;
    cl_command_queue queue;
    cl_device_id device;
    kiln_limits limits;
    kiln_ranges memory;
    cl_program programs[{count}];
    cl_kernel kernels[{count}];
    cl_mem status[{count}];
}};

{sources}

/* What an OpenCL error code means, for the ones a library call can meet. */
static const char *kiln_cl_error(cl_int e) {{
    switch (e) {{
    case -4: return "CL_MEM_OBJECT_ALLOCATION_FAILURE: the device's memory is full";
    case -5: return "CL_OUT_OF_RESOURCES";
    case -6: return "CL_OUT_OF_HOST_MEMORY";
    case -30: return "CL_INVALID_VALUE";
    case -38: return "CL_INVALID_MEM_OBJECT";
    case -52: return "CL_INVALID_KERNEL_ARGS";
    case -54: return "CL_INVALID_WORK_GROUP_SIZE";
    case -61: return "CL_INVALID_BUFFER_SIZE: more bytes than the device's largest buffer "
                     "(CL_DEVICE_MAX_MEM_ALLOC_SIZE)";
    case -63: return "CL_INVALID_GLOBAL_WORK_SIZE";
    default: return "see the OpenCL headers";
    }}
}}

static int kiln_cl_check(cl_int e, const char *what) {{
    return e == CL_SUCCESS ? {LIB}_SUCCESS
                           : kiln_fail({LIB}_ERROR_DEVICE, "%s: OpenCL error %d (%s)", what, e,
                                       kiln_cl_error(e));
}}

/* Everything a context holds (not its memory, which the program frees). */
static void kiln_cl_release({lib}_context *ctx) {{
    if (ctx->queue) cl.Finish(ctx->queue);
    for (int k = 0; k < {count}; k++) {{
        if (ctx->kernels[k]) cl.ReleaseKernel(ctx->kernels[k]);
        if (ctx->programs[k]) cl.ReleaseProgram(ctx->programs[k]);
        if (ctx->status[k]) cl.ReleaseMemObject(ctx->status[k]);
    }}
    if (ctx->queue) cl.ReleaseCommandQueue(ctx->queue);
    if (ctx->context) cl.ReleaseContext(ctx->context);
    free(ctx->memory.items);
    free(ctx);
}}

{api} int {lib}_device_count(void) {{
    cl_device_id devices[KILN_MAX_DEVICES];
    return kiln_cl_devices(devices);
}}

/* Build entry `k` (its program and kernel) for the context's device. */
static int kiln_cl_build({lib}_context *c, int k, int correct_division) {{
    cl_int e;
    const char *text = kiln_sources[k];
    c->programs[k] = cl.CreateProgramWithSource(c->context, 1, &text, NULL, &e);
    if (e != CL_SUCCESS)
        return kiln_fail({LIB}_ERROR_DEVICE, "%s: clCreateProgramWithSource: error %d",
                         kiln_labels[k], e);
    char options[256];
    snprintf(options, sizeof options, "%s %s", "{standard}",
             kiln_fastmath[k] ? "{fast_math}" : correct_division ? "{correct_division}" : "");
    e = cl.BuildProgram(c->programs[k], 1, &c->device, options, NULL, NULL);
    if (e != CL_SUCCESS) {{
        char log[1536] = "";
        cl.GetProgramBuildInfo(c->programs[k], c->device, CL_PROGRAM_BUILD_LOG,
                               sizeof log - 1, log, NULL);
        return kiln_fail({LIB}_ERROR_DEVICE, "building %s for the device failed (%d): %s",
                         kiln_labels[k], e, log);
    }}
    c->kernels[k] = cl.CreateKernel(c->programs[k], kiln_kernels[k], &e);
    if (e != CL_SUCCESS)
        return kiln_fail({LIB}_ERROR_DEVICE, "%s: clCreateKernel: error %d", kiln_labels[k], e);
    return {LIB}_SUCCESS;
}}

{api} int {lib}_context_create({lib}_context **ctx, int device) {{
    if (!ctx) return kiln_fail({LIB}_ERROR_INVALID_ARGUMENT, "context_create: ctx is NULL");
    *ctx = NULL;
    cl_device_id devices[KILN_MAX_DEVICES];
    kiln_message[0] = 0;  /* set again only when OpenCL is missing */
    int count = kiln_cl_devices(devices);
    if (count == 0 && kiln_message[0]) return {LIB}_ERROR_UNAVAILABLE;
    if (device < 0 || device >= count)
        return kiln_fail({LIB}_ERROR_INVALID_ARGUMENT,
                         "context_create: device %d does not exist (%d OpenCL devices)",
                         device, count);
    {lib}_context *c = calloc(1, sizeof *c);
    if (!c) return kiln_fail({LIB}_ERROR_OUT_OF_MEMORY, "context_create: out of memory");
    c->device = devices[device];
    size_t group = 0, items[3] = {{0, 0, 0}};
    cl_bitfield fp = 0;
    cl.GetDeviceInfo(c->device, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof group, &group, NULL);
    cl.GetDeviceInfo(c->device, CL_DEVICE_MAX_WORK_ITEM_SIZES, sizeof items, items, NULL);
    cl.GetDeviceInfo(c->device, CL_DEVICE_SINGLE_FP_CONFIG, sizeof fp, &fp, NULL);
    c->limits.threads = group > INT32_MAX ? INT32_MAX : (int)group;
    for (int k = 0; k < 3; k++) {{
        c->limits.grid[k] = INT32_MAX;
        c->limits.block[k] = items[k] > INT32_MAX ? INT32_MAX : (uint32_t)items[k];
    }}
    cl_int e;
    c->context = cl.CreateContext(NULL, 1, &c->device, NULL, NULL, &e);
    if (e == CL_SUCCESS) c->queue = cl.CreateCommandQueue(c->context, c->device, 0, &e);
    int status = e == CL_SUCCESS ? {LIB}_SUCCESS
        : kiln_fail({LIB}_ERROR_DEVICE, "context_create: OpenCL error %d", e);
    for (int k = 0; k < {count} && status == {LIB}_SUCCESS; k++)
        status = kiln_cl_build(c, k, (fp & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT) != 0);
    for (int k = 0; k < {count} && status == {LIB}_SUCCESS; k++) {{
        int32_t zeros[{status_words}] = {{0}};
        if (!kiln_checked[k]) continue;
        c->status[k] = cl.CreateBuffer(c->context, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                                       sizeof zeros, zeros, &e);
        status = kiln_cl_check(e, "context_create: a status buffer");
    }}
    if (status == {LIB}_SUCCESS && !kiln_context_known(c, 1, 0))
        status = kiln_fail({LIB}_ERROR_OUT_OF_MEMORY, "context_create: out of memory");
    if (status != {LIB}_SUCCESS) {{
        kiln_cl_release(c);
        return status;
    }}
    *ctx = c;
    return {LIB}_SUCCESS;
}}

{api} void {lib}_context_destroy({lib}_context *ctx) {{
    if (ctx && kiln_context_known(ctx, 0, 1)) kiln_cl_release(ctx);
}}

{api} int {lib}_synchronize({lib}_context *ctx) {{
    int status = kiln_check_context(ctx, "synchronize");
    return status ? status : kiln_cl_check(cl.Finish(ctx->queue), "synchronize");
}}

/* Device pointers are cl_mem handles: pass them whole (no pointer arithmetic). */
{api} void *{lib}_alloc({lib}_context *ctx, size_t nbytes) {{
    if (kiln_check_context(ctx, "alloc")) return NULL;
    cl_int e;
    cl_mem m = cl.CreateBuffer(ctx->context, CL_MEM_READ_WRITE, nbytes ? nbytes : 1, NULL, &e);
    if (e != CL_SUCCESS) {{
        kiln_fail({LIB}_ERROR_OUT_OF_MEMORY, "alloc: %zu bytes: OpenCL error %d (%s)", nbytes,
                  e, kiln_cl_error(e));
        return NULL;
    }}
    if (!kiln_ranges_add(&ctx->memory, m, nbytes, 0)) {{
        cl.ReleaseMemObject(m);
        kiln_fail({LIB}_ERROR_OUT_OF_MEMORY, "alloc: out of memory");
        return NULL;
    }}
    return (void *)m;
}}

{api} int {lib}_free({lib}_context *ctx, void *device_ptr) {{
    int status = kiln_check_context(ctx, "free");
    if (status || !device_ptr) return status;
    status = kiln_forget_allocation(&ctx->memory, device_ptr);
    return status ? status : kiln_cl_check(cl.ReleaseMemObject((cl_mem)device_ptr), "free");
}}

/* A cl_mem belongs to the OpenCL context that made it, and the only cl_mem of this
   context's own are its allocations; a handle cannot be checked before it is used. */
static int kiln_foreign_check({lib}_context *ctx, const void *ptr, size_t nbytes) {{
    (void)ctx, (void)nbytes;
    return kiln_fail({LIB}_ERROR_INVALID_ARGUMENT,
                     "register: %p: the opencl target uses only memory from {lib}_alloc (a "
                     "cl_mem works only in the OpenCL context that made it, and each {lib} "
                     "context has its own): copy the data in with {lib}_copy_to_device", ptr);
}}

{api} int {lib}_copy_to_device({lib}_context *ctx, void *device_dst, const void *host_src,
                          size_t nbytes) {{
    int status = kiln_check_context(ctx, "copy_to_device");
    if (!status) status = kiln_check_copy_in(&ctx->memory, device_dst, host_src, nbytes);
    if (status || !nbytes) return status;
    return kiln_cl_check(cl.EnqueueWriteBuffer(ctx->queue, (cl_mem)device_dst, CL_TRUE, 0,
                                               nbytes, host_src, 0, NULL, NULL),
                         "copy_to_device");
}}

{api} int {lib}_copy_to_host({lib}_context *ctx, void *host_dst, size_t host_bytes,
                          const void *device_src, size_t nbytes) {{
    int status = kiln_check_context(ctx, "copy_to_host");
    if (!status)
        status = kiln_check_copy_out(&ctx->memory, host_dst, host_bytes, device_src, nbytes);
    if (status || !nbytes) return status;
    return kiln_cl_check(cl.EnqueueReadBuffer(ctx->queue, (cl_mem)device_src, CL_TRUE, 0,
                                              nbytes, host_dst, 0, NULL, NULL),
                         "copy_to_host");
}}

{api} int {lib}_copy_device_to_device({lib}_context *ctx, void *device_dst,
                                  const void *device_src, size_t nbytes) {{
    int status = kiln_check_context(ctx, "copy_device_to_device");
    if (!status) status = kiln_check_copy_within(&ctx->memory, device_dst, device_src, nbytes);
    if (status || !nbytes || device_dst == device_src) return status;
    return kiln_cl_check(cl.EnqueueCopyBuffer(ctx->queue, (cl_mem)device_src,
                                              (cl_mem)device_dst, 0, 0, nbytes, 0, NULL, NULL),
                         "copy_device_to_device");
}}

/* Entry k's status once its launches have finished, zeroed for the next. */
static int kiln_status_read({lib}_context *ctx, int k, int32_t *words) {{
    const int32_t zeros[{status_words}] = {{0}};
    int status = kiln_cl_check(cl.EnqueueReadBuffer(ctx->queue, ctx->status[k], CL_TRUE, 0,
                                                    sizeof zeros, words, 0, NULL, NULL),
                               "reading the kernel's status");
    if (status || !words[0]) return status;
    return kiln_cl_check(cl.EnqueueWriteBuffer(ctx->queue, ctx->status[k], CL_TRUE, 0,
                                               sizeof zeros, zeros, 0, NULL, NULL),
                         "zeroing the kernel's status");
}}
"""


class OpenCLLibrary(LibraryTarget):
    name = "opencl"
    notes = (
        "opencl target: devices are numbered as kiln numbers them (every device of every",
        "platform, in platform order); the kernels are built for the device when the",
        "context is created. Device pointers are cl_mem handles: pass them as {lib}_alloc",
        "returned them, never offset. {lib}_register refuses every pointer: a cl_mem",
        "works only in the OpenCL context that made it, and each context has its own.",
        "The ICD loader is loaded at run time: the file KILN_OPENCL_LOADER names when set,",
        "else the system's libOpenCL.so.1.",
    )
    interior_pointers = False

    def architectures(self, requested: Sequence[str]) -> tuple[str, ...]:
        if requested:
            raise ActionError("the opencl target builds OpenCL C for any device (--arch does "
                              "not apply)")
        return ("OpenCL C 1.2",)

    def build(self, lib: str, entries: Sequence[EntryPoint], architectures: tuple[str, ...],
              settings: dict[str, Any], work: Path, out: Path) -> dict[str, Any]:
        source = "\n".join([common_source(lib, "opencl", self.interior_pointers),
                            ICD.format(LIB=lib.upper()), self._runtime(lib, entries),
                            registration_functions(lib),
                            launch_functions(lib, entries, "&ctx->limits", _launch_body,
                                             lambda k: f"ctx->status[{k}]")])
        link_library(lib, [compile_object(source, work / lib, out)], out, ["-ldl", "-lpthread"])
        return {}

    def _runtime(self, lib: str, entries: Sequence[EntryPoint]) -> str:
        emitters = [OpenCLEmitter() for _ in entries]
        texts = [m.emit(e.kernel.program) for m, e in zip(emitters, entries)]
        sources = "static const char *const kiln_sources[] = {\n    " + ",\n    ".join(
            c_string(t) for t in texts) + "\n};\n"
        sources += "static const char *const kiln_kernels[] = {" + ", ".join(
            f'"{m.entry_name}"' for m in emitters) + "};\n"
        sources += "static const char *const kiln_labels[] = {" + ", ".join(
            f'"{e.kernel.kernel}"' for e in entries) + "};\n"
        sources += "static const int kiln_fastmath[] = {" + ", ".join(
            str(int(e.kernel.options.fastmath)) for e in entries) + "};\n"
        sources += "static const int kiln_checked[] = {" + ", ".join(
            str(int(bool(e.checks))) for e in entries) + "};"
        return RUNTIME.format(lib=lib, LIB=lib.upper(), api=api_macro(lib), count=len(entries),
                              sources=sources, standard=STANDARD, fast_math=FAST_MATH,
                              status_words=STATUS_WORDS,
                              correct_division=CORRECT_DIVISION)


def _launch_body(e: EntryPoint) -> str:
    """Set the arguments (a pointer as its cl_mem), then enqueue the NDRange."""
    lines = [f"    cl_kernel kiln_kernel = ctx->kernels[{e.index}];", "    cl_int e;"]
    for slot, p in enumerate(e.arguments):
        handle = p.role in ("pointer", "status")
        value = f"&(cl_mem){{(cl_mem){p.name}}}" if handle else f"&{p.name}"
        size = "sizeof(cl_mem)" if handle else f"sizeof {p.name}"
        lines.append(f"    e = cl.SetKernelArg(kiln_kernel, {slot}, {size}, {value});")
        lines.append(f"    if (e != CL_SUCCESS) return kiln_cl_check(e, \"{e.kernel.kernel}: "
                     f"argument {p.name}\");")
    lines += [
        "    const size_t local[3] = {block.x, block.y, block.z};",
        "    const size_t global[3] = {(size_t)grid.x * block.x, (size_t)grid.y * block.y, "
        "(size_t)grid.z * block.z};",
        "    return kiln_cl_check(cl.EnqueueNDRangeKernel(ctx->queue, kiln_kernel, 3, NULL, "
        f"global, local, 0, NULL, NULL), \"{e.kernel.kernel}\");",
    ]
    return "\n".join(lines) + "\n"
