"""`NAME.h`: the documented C interface of a library built by the `library` action.

The interface is the same on every target, so a C program written against one target's
header builds against another's; only the notes on where memory lives differ.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..ir.types import ConstexprType
from .entries import EntryPoint

STATUS_CODES = (
    ("SUCCESS", 0, "the call did what it says"),
    ("ERROR_INVALID_ARGUMENT", 1, "a NULL context, a bad device index, grid, block or extent"),
    ("ERROR_UNAVAILABLE", 2, "the driver (CUDA, the OpenCL ICD) or the device is missing"),
    ("ERROR_OUT_OF_MEMORY", 3, "an allocation failed"),
    ("ERROR_DEVICE", 4, "the driver failed a build, launch or copy"),
    ("ERROR_KERNEL", 5, "a run-time check of the kernel failed (debug=True: an index out of "
     "bounds)"),
    ("ERROR_RECURSION_DEPTH", 6, "a recursive function went deeper than its max_depth "
     "(where recursion is inlined: opencl)"),
)


def header_text(lib: str, target: str, entries: Sequence[EntryPoint], notes: Sequence[str],
                version: str, interior_pointers: bool) -> str:
    """The header: types, status codes, context, memory, launches, each with a comment."""
    guard = f"{lib.upper()}_H"
    api = f"{lib.upper()}_API"
    statuses = "\n".join(f"    {lib.upper()}_{name} = {value}, /* {what} */"
                         for name, value, what in STATUS_CODES)
    target_notes = "\n".join(f" * {line}".replace("{lib}", lib).rstrip() for line in notes)
    launches = "\n\n".join(_launch_doc(lib, api, e) for e in entries)
    interior = " (or point inside it)" if interior_pointers else " (whole handles)"
    return f"""\
/* {lib}.h: kernels built by kiln {version} (`kiln build --target {target}`).
 *
 * Every function returns a status ({lib.upper()}_SUCCESS or an error code; see
 * {lib}_error_string for the message) unless it says otherwise. Bad arguments (a NULL or
 * destroyed context, a pointer this context did not allocate or register, too few
 * bytes, a grid or block kiln.launch would refuse, a block shape the kernel was not
 * built for) are refused with {lib.upper()}_ERROR_INVALID_ARGUMENT before anything runs.
 *
 * Launches run in the order they are made, after the copies before them;
 * {lib}_copy_to_host waits for the launches before it; {lib}_synchronize waits for all.
 * Arrays are passed as a device pointer ({lib}_alloc, {lib}_register) followed by their
 * extents, one int32_t per dimension, row-major (C order), as the kernel's `a.shape[k]`
 * reads them.
 * f16 and bf16 values travel as their 16 bits (uint16_t).
 * A context is used by one thread at a time.
 *
{target_notes}
 */
#ifndef {guard}
#define {guard}

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {{
#endif

#if defined(__GNUC__)
#define {api} __attribute__((visibility("default")))
#else
#define {api}
#endif

enum {{
{statuses}
}};

/* A grid of blocks, or a block of threads: x varies fastest. */
typedef struct {{ uint32_t x, y, z; }} {lib}_dim3;

/* One device's state: its queue and the kernels loaded on it. */
typedef struct {lib}_context {lib}_context;

/* This thread's last error message ("" when none): what failed and why. */
{api} const char *{lib}_error_string(void);

/* How many devices the target has here (0 when its driver is missing). */
{api} int {lib}_device_count(void);

/* Create a context on device `device` (0 to {lib}_device_count() - 1), loading every
   kernel; on success *ctx is set, else it is NULL. */
{api} int {lib}_context_create({lib}_context **ctx, int device);

/* Release the context, its queue and its kernels (not memory still allocated). */
{api} void {lib}_context_destroy({lib}_context *ctx);

/* Wait until every launch and copy made on the context has finished. */
{api} int {lib}_synchronize({lib}_context *ctx);

/* Device memory of `nbytes` bytes, or NULL (see {lib}_error_string). */
{api} void *{lib}_alloc({lib}_context *ctx, size_t nbytes);

/* Release memory from {lib}_alloc on this context (NULL is allowed; any other pointer,
   registered memory, or one released already, is refused with
   {lib.upper()}_ERROR_INVALID_ARGUMENT). */
{api} int {lib}_free({lib}_context *ctx, void *device_ptr);

/* Let the context use `nbytes` of the program's own memory at `ptr` (as cudaHostRegister
   does): the copies and launches then take pointers into it, with the same checks as
   {lib}_alloc's memory, until {lib}_unregister. The program still owns it ({lib}_free
   refuses it) and keeps it valid until then. What it may be depends on the target (see
   above); memory the context has already is refused. */
{api} int {lib}_register({lib}_context *ctx, void *ptr, size_t nbytes);

/* Forget memory registered at `ptr` (the pointer given to {lib}_register), after waiting
   for the context's launches and copies: the program may then release it. */
{api} int {lib}_unregister({lib}_context *ctx, void *ptr);

/* Copies of `nbytes` bytes; they return once the source may be reused. Device pointers
   are {lib}_alloc's or registered memory{interior}; the bytes must lie inside it.
   {lib}_copy_to_host also takes the size of `host_dst` in bytes and refuses to write
   more. {lib}_copy_device_to_device onto itself does nothing; partly overlapping ranges
   are refused. A refused copy copies nothing. */
{api} int {lib}_copy_to_device({lib}_context *ctx, void *device_dst, const void *host_src,
                          size_t nbytes);
{api} int {lib}_copy_to_host({lib}_context *ctx, void *host_dst, size_t host_bytes,
                          const void *device_src, size_t nbytes);
{api} int {lib}_copy_device_to_device({lib}_context *ctx, void *device_dst,
                                  const void *device_src, size_t nbytes);

/* ---------------------------------------------------------------- kernels
 * Each launches `grid` blocks of `block` threads (no more than the device allows per
 * block, grid * block at most 2^31-1 along each axis; `block:` below gives the shapes a
 * kernel was built for) and returns without waiting for the kernel to finish. An array's
 * extents must fit inside its device memory. */

{launches}

#ifdef __cplusplus
}}
#endif

#endif /* {guard} */
"""


def _launch_doc(lib: str, api: str, e: EntryPoint) -> str:
    k = e.kernel
    given = ", ".join(f"{n}: {t}" for n, t in zip(k.parameters, k.types))
    lines = [f"/* {k.kernel}({given})"]
    for p in e.params:
        if p.role == "pointer":
            ndim = sum(1 for q in e.params if q.role == "extent" and q.abi.index == p.abi.index)
            access = "written" if p.abi.param in e.written else "read"
            lines.append(f" *   {p.name}: device array of {p.ctype} ({ndim}-d, {access})")
        elif p.role == "scalar":
            lines.append(f" *   {p.name}: {p.abi.type} value")
    for name, t in zip(k.parameters, k.types):
        if isinstance(t, ConstexprType):
            lines.append(f" *   {name}: built in as {t.value!r}")
    lines.append(f" *   block: {e.block_names}" + ("" if e.blocks else " shape"))
    statuses = {c.status for c in e.checks}
    if "ERROR_KERNEL" in statuses:
        lines += [" *   debug: indices are checked; the launch waits for the kernel and",
                  f" *   returns {lib.upper()}_ERROR_KERNEL naming the array and line"]
    if "ERROR_RECURSION_DEPTH" in statuses:
        lines += [" *   recursion is inlined to max_depth; the launch waits for the kernel and",
                  f" *   returns {lib.upper()}_ERROR_RECURSION_DEPTH when a call goes deeper"]
    lines[-1] += " */"
    return "\n".join(lines) + f"\n{api} {e.prototype(lib)};"
