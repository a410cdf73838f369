"""The cpu target of the `library` action: the generated C and OpenMP in `libNAME.so`.

The cpu backend compiles the block shape in as a constant (`emitter.py`). A kernel built
for given block shapes (`--block`) gets one variant per shape; any other kernel gets one
for 256x1x1 and one that reads the shape at run time (C99 variable-length per-thread
arrays), so every launch works and the common shape runs at the JIT's speed.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ...aot.actions import ActionError
from ...aot.entries import EntryPoint
from ...aot.glue import (
    api_macro,
    c_limits,
    common_source,
    launch_functions,
    registration_functions,
)
from ...aot.host import compile_object, link_library
from ...aot.library import LibraryTarget
from ...backend import Dim3
from ...codegen.threadloops import BLOCK_DIMS, SLOT, SMALL_LAUNCH
from ...framework.buildenv import BuildEnv, ToolNotFoundError
from ...ir.passes.status import STATUS_WORDS
from .backend import MAX_BLOCK_DIMS, MAX_GRID_DIMS, MAX_THREADS_PER_BLOCK, CpuBackend, build_env
from .toolchain import toolchain

DEFAULT_BLOCKS: tuple[Dim3, ...] = ((256, 1, 1),)

RUNTIME = """\
#include <omp.h>
#include <pthread.h>

struct {lib}_context {{
    int num_threads;
    kiln_ranges memory;
    int32_t status[{count}][{status_words}];
}};

/* The block shape the run-time variants read (kiln_block_dim_x... in their source). */
int32_t kiln_lib_block[3];
static pthread_mutex_t kiln_lib_block_lock = PTHREAD_MUTEX_INITIALIZER;

typedef void (*kiln_entry_fn)(const unsigned char *);
typedef struct {{ uint32_t x, y, z; kiln_entry_fn entry; }} kiln_variant;

{api} int {lib}_device_count(void) {{ return 1; }}

{api} int {lib}_context_create({lib}_context **ctx, int device) {{
    if (!ctx) return kiln_fail({LIB}_ERROR_INVALID_ARGUMENT, "context_create: ctx is NULL");
    *ctx = NULL;
    if (device != 0)
        return kiln_fail({LIB}_ERROR_INVALID_ARGUMENT,
                         "context_create: the cpu target has one device, 0 (asked for %d)",
                         device);
    {lib}_context *c = calloc(1, sizeof *c);
    if (!c || !kiln_context_known(c, 1, 0)) {{
        free(c);
        return kiln_fail({LIB}_ERROR_OUT_OF_MEMORY, "context_create: out of memory");
    }}
    c->num_threads = omp_get_max_threads();
    *ctx = c;
    return {LIB}_SUCCESS;
}}

{api} void {lib}_context_destroy({lib}_context *ctx) {{
    if (!ctx || !kiln_context_known(ctx, 0, 1)) return;
    free(ctx->memory.items);
    free(ctx);
}}

/* Launches run to completion before they return. */
{api} int {lib}_synchronize({lib}_context *ctx) {{
    return kiln_check_context(ctx, "synchronize");
}}

{api} void *{lib}_alloc({lib}_context *ctx, size_t nbytes) {{
    if (kiln_check_context(ctx, "alloc")) return NULL;
    size_t rounded = nbytes > SIZE_MAX - 64 ? 0 : (nbytes + 63) / 64 * 64;
    void *p = nbytes > SIZE_MAX - 64 ? NULL : aligned_alloc(64, rounded ? rounded : 64);
    if (p && !kiln_ranges_add(&ctx->memory, p, nbytes, 0)) {{
        free(p);
        p = NULL;
    }}
    if (!p) kiln_fail({LIB}_ERROR_OUT_OF_MEMORY, "alloc: %zu bytes: out of memory", nbytes);
    return p;
}}

{api} int {lib}_free({lib}_context *ctx, void *device_ptr) {{
    int status = kiln_check_context(ctx, "free");
    if (status || !device_ptr) return status;
    status = kiln_forget_allocation(&ctx->memory, device_ptr);
    if (!status) free(device_ptr);
    return status;
}}

/* Any host memory will do: the library cannot check that `nbytes` are there. */
static int kiln_foreign_check({lib}_context *ctx, const void *ptr, size_t nbytes) {{
    (void)ctx, (void)ptr, (void)nbytes;
    return {LIB}_SUCCESS;
}}

{api} int {lib}_copy_to_device({lib}_context *ctx, void *device_dst, const void *host_src,
                          size_t nbytes) {{
    int status = kiln_check_context(ctx, "copy_to_device");
    if (!status) status = kiln_check_copy_in(&ctx->memory, device_dst, host_src, nbytes);
    if (!status && nbytes) memcpy(device_dst, host_src, nbytes);
    return status;
}}

{api} int {lib}_copy_to_host({lib}_context *ctx, void *host_dst, size_t host_bytes,
                          const void *device_src, size_t nbytes) {{
    int status = kiln_check_context(ctx, "copy_to_host");
    if (!status)
        status = kiln_check_copy_out(&ctx->memory, host_dst, host_bytes, device_src, nbytes);
    if (!status && nbytes) memmove(host_dst, device_src, nbytes);
    return status;
}}

{api} int {lib}_copy_device_to_device({lib}_context *ctx, void *device_dst,
                                  const void *device_src, size_t nbytes) {{
    int status = kiln_check_context(ctx, "copy_device_to_device");
    if (!status) status = kiln_check_copy_within(&ctx->memory, device_dst, device_src, nbytes);
    if (!status && nbytes && device_dst != device_src) memcpy(device_dst, device_src, nbytes);
    return status;
}}

/* Entry k's status after a launch (which has finished), zeroed for the next. */
static int kiln_status_read({lib}_context *ctx, int k, int32_t *words) {{
    memcpy(words, ctx->status[k], sizeof ctx->status[k]);
    memset(ctx->status[k], 0, sizeof ctx->status[k]);
    return {LIB}_SUCCESS;
}}

/* OpenMP threads for one launch: no more than blocks, one for a small launch. */
static int32_t kiln_team(const {lib}_context *ctx, {lib}_dim3 grid, {lib}_dim3 block) {{
    uint64_t blocks = (uint64_t)grid.x * grid.y * grid.z;
    if (blocks * block.x * block.y * block.z < {small_launch}) return 1;
    return blocks < (uint64_t)ctx->num_threads ? (int32_t)blocks : ctx->num_threads;
}}

/* The variant compiled for `block`, else the run-time one (when the entry has one) under
   the block-shape lock. */
static int kiln_run(const kiln_variant *variants, int count, kiln_entry_fn any,
                    {lib}_dim3 block, const unsigned char *slots) {{
    for (int k = 0; k < count; k++) {{
        if (variants[k].x == block.x && variants[k].y == block.y && variants[k].z == block.z) {{
            variants[k].entry(slots);
            return {LIB}_SUCCESS;
        }}
    }}
    if (!any) return kiln_fail({LIB}_ERROR_INVALID_ARGUMENT, "no variant for the block shape");
    pthread_mutex_lock(&kiln_lib_block_lock);
    kiln_lib_block[0] = (int32_t)block.x;
    kiln_lib_block[1] = (int32_t)block.y;
    kiln_lib_block[2] = (int32_t)block.z;
    any(slots);
    pthread_mutex_unlock(&kiln_lib_block_lock);
    return {LIB}_SUCCESS;
}}
"""


def block_label(block: Dim3) -> str:
    return "x".join(str(n) for n in block)


class CpuLibrary(LibraryTarget):
    name = "cpu"
    notes = (
        "cpu target: the device is this machine's cores (OpenMP; OMP_NUM_THREADS applies),",
        "its memory is host memory from {lib}_alloc (an aligned malloc; the copies are",
        "memcpy). Launches run to completion before they return. {lib}_register takes",
        "any host memory (malloc'd, a framework's array); the library cannot check that",
        "its bytes are there.",
    )
    interior_pointers = True

    def __init__(self, backend: CpuBackend) -> None:
        self.backend = backend

    def architectures(self, requested: Sequence[str]) -> tuple[str, ...]:
        """`-march` values (default `native`: the build machine's CPU)."""
        try:
            tc = toolchain()
        except ToolNotFoundError as exc:
            raise ActionError(f"the cpu target needs a C compiler with OpenMP: {exc}") from None
        archs = tuple(requested) or ("native",)
        if len(archs) != 1:
            raise ActionError("the cpu target builds for one --arch (a gcc -march value)")
        check = subprocess.run([*tc.env.compiler, f"-march={archs[0]}", "-x", "c", "-E", "-"],
                               input="", capture_output=True, text=True)
        if check.returncode != 0:
            raise ActionError(f"unknown cpu architecture {archs[0]!r} for "
                              f"{tc.env.compiler[0]} (a -march value, e.g. native, x86-64-v3)")
        return archs

    def build(self, lib: str, entries: Sequence[EntryPoint], architectures: tuple[str, ...],
              settings: dict[str, Any], work: Path, out: Path) -> dict[str, Any]:
        sources = [(build_env(), self._host_source(lib, entries))]
        for e in entries:
            kernel = self.backend.compiler.generate_source(e.kernel.program)
            env = build_env(e.kernel.options)
            sources += [(env, _variant(kernel, e.index, block)) for block in _variants(e)]
        objects = [self._compile_object(env, text, work / f"{lib}_{i}", architectures[0], out)
                   for i, (env, text) in enumerate(sources)]
        link_library(lib, objects, out, ["-fopenmp", *toolchain().libraries, "-lpthread"],
                     toolchain().env.compiler)
        return {"march": toolchain().arch if architectures[0] == "native" else architectures[0]}

    def _host_source(self, lib: str, entries: Sequence[EntryPoint]) -> str:
        fmt = {"lib": lib, "LIB": lib.upper(), "api": api_macro(lib),
               "small_launch": SMALL_LAUNCH, "count": len(entries),
               "status_words": STATUS_WORDS}
        parts = [common_source(lib, "cpu", self.interior_pointers), RUNTIME.format(**fmt),
                 registration_functions(lib)]
        for e in entries:
            variants = _variants(e)
            names = [_entry_symbol(e.index, b) for b in variants]
            parts.append("".join(f"void {n}(const unsigned char *);\n" for n in names))
            rows = ", ".join(f"{{{b[0]}, {b[1]}, {b[2]}, {n}}}"
                             for b, n in zip(variants, names) if b is not None)
            parts.append(f"static const kiln_variant kiln_variants_{e.index}[] = {{{rows}}};\n")
        limits = c_limits(MAX_THREADS_PER_BLOCK, MAX_GRID_DIMS, MAX_BLOCK_DIMS)
        parts.append(f"static const kiln_limits kiln_cpu_limits = {limits};\n")
        parts.append(launch_functions(lib, entries, "&kiln_cpu_limits", _launch_body,
                                      lambda k: f"ctx->status[{k}]"))
        return "\n".join(parts)

    @staticmethod
    def _compile_object(env: BuildEnv, text: str, stem: Path, arch: str, out: Path) -> str:
        """One translation unit (host code or a kernel variant) for `-march=arch`."""
        flags = [f if not f.startswith("-march=") else f"-march={arch}" for f in env.flags]
        return compile_object(text, stem, out, [*env.compiler, *flags, "-fvisibility=hidden"])


def _variants(e: EntryPoint) -> tuple[Dim3 | None, ...]:
    """The entry's block shapes compiled as constants: those it was built for, else the
    default ones and (None) one that reads the shape at run time."""
    fixed: tuple[Dim3 | None, ...] = e.blocks
    return fixed or (*DEFAULT_BLOCKS, None)


def _entry_symbol(index: int, block: Dim3 | None) -> str:
    return f"kiln_entry_{index}_" + (block_label(block) if block else "any")


def _variant(kernel_source: str, index: int, block: Dim3 | None) -> str:
    """One kernel's translation unit, for one block shape or (None) any."""
    lines = ["#include <stdint.h>"]
    if block is None:
        lines.append("extern int32_t kiln_lib_block[3];")
        lines += [f"#define {name} (kiln_lib_block[{k}])" for k, name in enumerate(BLOCK_DIMS)]
    else:
        lines += [f"#define {name} {n}" for name, n in zip(BLOCK_DIMS, block)]
    lines.append(f"#define kiln_entry {_entry_symbol(index, block)}")
    return "\n".join(lines) + "\n" + kernel_source


def _launch_body(e: EntryPoint) -> str:
    """Pack the launch slots (`threadloops.launch_format`) and run the matching variant."""
    count = len(e.arguments)
    variants = _variants(e)
    lines = [f"    unsigned char kiln_slots[{(count + 4) * SLOT}] = {{0}};"]
    for slot, p in enumerate(e.arguments):
        lines.append(f"    memcpy(kiln_slots + {slot * SLOT}, &{p.name}, sizeof {p.name});")
    lines.append("    const int32_t kiln_launch[4] = {(int32_t)grid.x, (int32_t)grid.y, "
                 "(int32_t)grid.z, kiln_team(ctx, grid, block)};")
    lines.append("    for (int k = 0; k < 4; k++)")
    lines.append(f"        memcpy(kiln_slots + {count * SLOT} + {SLOT} * k, &kiln_launch[k], "
                 "sizeof kiln_launch[k]);")
    fixed = sum(1 for b in variants if b is not None)
    any_variant = _entry_symbol(e.index, None) if None in variants else "NULL"
    lines.append(f"    return kiln_run(kiln_variants_{e.index}, {fixed}, {any_variant}, block, "
                 "kiln_slots);")
    return "\n".join(lines) + "\n"
