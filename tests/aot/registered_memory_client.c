/* The program's own memory through chk_register, against a library built from
 * checked_kernels.py with `--name chk --block staged=64`. `host` mode (cpu) registers
 * malloc'd arrays; `device` mode (cuda) registers device memory the library did not
 * allocate for this context (another context's cuMemAlloc, as cudaMalloc or another
 * library would give it) and checks a host pointer is refused. It launches on registered
 * memory and compares with the expected values, and prints `LABEL STATUS MESSAGE` for
 * each call that must be refused (out of range, unregistered, freed while registered),
 * then `ok`. A target that registers nothing (opencl) stops after the refusal.
 */
#include "chk.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N = 1024 };

static void report(const char *label, int status) {
    printf("%s %d %s\n", label, status, status ? chk_error_string() : "");
}

static void expect(int status, const char *what) {
    if (status != CHK_SUCCESS) {
        fprintf(stderr, "%s failed (%d): %s\n", what, status, chk_error_string());
        exit(1);
    }
}

/* Memory the library did not allocate for `ctx`: malloc'd, or device memory of `owner`. */
static float *foreign_memory(chk_context *owner, int device, size_t nbytes) {
    float *p = device ? chk_alloc(owner, nbytes) : malloc(nbytes);
    if (!p) {
        fprintf(stderr, "no memory for the test\n");
        exit(1);
    }
    return p;
}

static void release(chk_context *owner, int device, float *p) {
    if (device) expect(chk_free(owner, p), "chk_free (owner)");
    else free(p);
}

static int check_values(const float *got, const char *what, int n, float (*want)(int)) {
    for (int i = 0; i < n; i++) {
        if (got[i] != want(i)) {
            fprintf(stderr, "%s[%d] = %g, not %g\n", what, i, got[i], want(i));
            return 0;
        }
    }
    return 1;
}

static float ramp(int i) { return (float)i; }
static float reversed_tiles(int i) { return (float)(i / 64 * 64 + 63 - i % 64); }
static float filled(int i) { return i < 10 ? (float)(i / 64 * 64 + 63 - i % 64) : 5.0f; }

int main(int argc, char **argv) {
    int device = argc > 1 && strcmp(argv[1], "device") == 0;
    chk_context *ctx = NULL, *owner = NULL;
    expect(chk_context_create(&ctx, 0), "chk_context_create");
    expect(chk_context_create(&owner, 0), "chk_context_create (owner)");
    const size_t bytes = N * sizeof(float);
    float host[N], back[N];
    for (int i = 0; i < N; i++) host[i] = ramp(i);
    float *in = foreign_memory(owner, device, bytes), *out = foreign_memory(owner, device, bytes);
    float *mine = chk_alloc(ctx, bytes);
    if (!mine) expect(CHK_ERROR_OUT_OF_MEMORY, "chk_alloc");
    if (device) expect(chk_copy_to_device(owner, in, host, bytes), "chk_copy_to_device (owner)");
    else memcpy(in, host, bytes);

    /* bad registrations */
    report("register_null_context", chk_register(NULL, in, bytes));
    report("register_null", chk_register(ctx, NULL, bytes));
    report("register_zero_bytes", chk_register(ctx, in, 0));
    report("register_wraps", chk_register(ctx, (void *)(UINTPTR_MAX - 8), 64));
    report("register_allocation", chk_register(ctx, mine + 4, 16));
    report("register", chk_register(ctx, in, bytes));
    if (chk_unregister(ctx, in) != CHK_SUCCESS) {  /* the target takes no foreign memory */
        chk_free(ctx, mine);
        chk_context_destroy(ctx);
        release(owner, device, in);
        release(owner, device, out);
        chk_context_destroy(owner);
        puts("ok");
        return 0;
    }
    expect(chk_register(ctx, in, bytes), "chk_register");
    expect(chk_register(ctx, out, bytes), "chk_register");
    report("register_overlap", chk_register(ctx, in + 4, 16));
    report("register_twice", chk_register(ctx, out, bytes));
    if (device) {
        float *more = foreign_memory(owner, device, bytes);
        report("register_past_allocation", chk_register(ctx, more, 2 * bytes));
        report("register_host_pointer", chk_register(ctx, host, sizeof host));
        release(owner, device, more);
    }

    /* launches and copies on registered memory */
    chk_dim3 tiles = {N / 64, 1, 1}, block = {64, 1, 1};
    expect(chk_staged(ctx, tiles, block, in, N, out, N), "chk_staged on registered memory");
    expect(chk_copy_to_host(ctx, back, sizeof back, out, bytes), "chk_copy_to_host");
    if (!check_values(back, "staged", N, reversed_tiles)) return 1;
    expect(chk_fill(ctx, tiles, block, out + 10, N - 10, 5.0f), "chk_fill inside");
    expect(chk_copy_device_to_device(ctx, mine, out, bytes), "chk_copy_device_to_device");
    expect(chk_copy_to_host(ctx, back, sizeof back, mine, bytes), "chk_copy_to_host");
    if (!check_values(back, "filled", N, filled)) return 1;
    if (!device && !check_values(out, "out (host)", N, filled)) return 1;
    expect(chk_copy_to_device(ctx, out, host, bytes), "chk_copy_to_device");
    expect(chk_copy_to_host(ctx, back, sizeof back, out, bytes), "chk_copy_to_host");
    if (!check_values(back, "copied", N, ramp)) return 1;

    /* out of range, misaligned, freed while registered */
    report("launch_past_registered", chk_fill(ctx, tiles, block, out + 10, N, 1.0f));
    report("launch_misaligned", chk_fill(ctx, tiles, block, (float *)((char *)out + 2), 8, 1.0f));
    report("to_host_past_registered", chk_copy_to_host(ctx, back, sizeof back, out + 1, bytes));
    report("to_device_past_registered", chk_copy_to_device(ctx, out + 1, host, bytes));
    report("within_past_registered", chk_copy_device_to_device(ctx, in + 1, out, bytes));
    report("free_registered", chk_free(ctx, out));
    report("unregister_allocation", chk_unregister(ctx, mine));
    report("unregister_inside", chk_unregister(ctx, out + 1));
    report("unregister_null_context", chk_unregister(NULL, out));

    /* unregistered: the program's again, and refused */
    expect(chk_unregister(ctx, out), "chk_unregister");
    report("unregister_twice", chk_unregister(ctx, out));
    report("launch_unregistered", chk_fill(ctx, tiles, block, out, N, 1.0f));
    report("to_host_unregistered", chk_copy_to_host(ctx, back, sizeof back, out, bytes));
    expect(chk_staged(ctx, tiles, block, in, N, mine, N), "chk_staged after unregister");
    expect(chk_copy_to_host(ctx, back, sizeof back, mine, bytes), "chk_copy_to_host");
    if (!check_values(back, "staged again", N, reversed_tiles)) return 1;

    /* destroying a context forgets what is still registered; the program frees it */
    expect(chk_free(ctx, mine), "chk_free");
    chk_context_destroy(ctx);
    release(owner, device, in);
    release(owner, device, out);
    chk_context_destroy(owner);
    puts("ok");
    return 0;
}
