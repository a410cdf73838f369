/* Every entry point of a library built from checked_kernels.py with `--name chk --block
 * staged=64`, called with bad arguments: each call must return an error code and leave a
 * message, never crash or write out of bounds (the test also builds this program with
 * AddressSanitizer and runs it under valgrind where present). It prints one line per call,
 * `LABEL STATUS MESSAGE`, then checks that the context still works, and prints `ok`.
 */
#include "chk.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N = 1000 };

static void report(const char *label, int status) {
    printf("%s %d %s\n", label, status, status ? chk_error_string() : "");
}

static void report_pointer(const char *label, const void *p) {
    report(label, p ? CHK_SUCCESS : (int)strlen(chk_error_string()) > 0 ? -1 : -2);
}

static int expect(int status, const char *what) {
    if (status != CHK_SUCCESS) {
        fprintf(stderr, "%s failed (%d): %s\n", what, status, chk_error_string());
        exit(1);
    }
    return status;
}

int main(void) {
    chk_context *ctx = NULL, *gone = NULL;
    int fake_context = 0;
    chk_context *fake = (chk_context *)&fake_context;

    /* contexts and devices */
    report("create_null", chk_context_create(NULL, 0));
    report("create_negative_device", chk_context_create(&gone, -1));
    report("create_missing_device", chk_context_create(&gone, 1000));
    report("create_left_null", gone != NULL);
    expect(chk_context_create(&ctx, 0), "chk_context_create");
    report("synchronize_null", chk_synchronize(NULL));
    report("synchronize_unknown", chk_synchronize(fake));
    chk_context_destroy(NULL);
    chk_context_destroy(fake);

    /* memory */
    float host[N], small[10];
    for (int i = 0; i < N; i++) host[i] = (float)i;
    report_pointer("alloc_null_context", chk_alloc(NULL, 16));
    report_pointer("alloc_unknown_context", chk_alloc(fake, 16));
    report_pointer("alloc_huge", chk_alloc(ctx, SIZE_MAX));
    float *x = chk_alloc(ctx, sizeof host), *y = chk_alloc(ctx, sizeof host);
    float *few = chk_alloc(ctx, sizeof small), *freed = chk_alloc(ctx, 64);
    if (!x || !y || !few || !freed) return expect(CHK_ERROR_OUT_OF_MEMORY, "chk_alloc");
    expect(chk_free(ctx, freed), "chk_free");
    report("free_twice", chk_free(ctx, freed));
    report("free_unknown", chk_free(ctx, host));
    report("free_null_context", chk_free(NULL, x));
    report("free_unknown_context", chk_free(fake, x));
    report("free_null_pointer", chk_free(ctx, NULL));

    report("to_device_null_context", chk_copy_to_device(NULL, x, host, sizeof host));
    report("to_device_unknown_dst", chk_copy_to_device(ctx, host, host, sizeof host));
    report("to_device_freed_dst", chk_copy_to_device(ctx, freed, host, 16));
    report("to_device_too_many", chk_copy_to_device(ctx, few, host, sizeof host));
    report("to_device_null_src", chk_copy_to_device(ctx, x, NULL, sizeof host));
    report("to_device_null_dst", chk_copy_to_device(ctx, NULL, host, sizeof host));
    expect(chk_copy_to_device(ctx, x, host, sizeof host), "chk_copy_to_device");

    report("to_host_small_buffer", chk_copy_to_host(ctx, small, sizeof small, x, sizeof host));
    report("to_host_too_many", chk_copy_to_host(ctx, host, sizeof host, few, sizeof host));
    report("to_host_unknown_src", chk_copy_to_host(ctx, host, sizeof host, small, 16));
    report("to_host_null_dst", chk_copy_to_host(ctx, NULL, sizeof host, x, sizeof host));
    report("to_host_null_context", chk_copy_to_host(NULL, host, sizeof host, x, sizeof host));
    report("within_too_many", chk_copy_device_to_device(ctx, few, x, sizeof host));
    report("within_unknown", chk_copy_device_to_device(ctx, y, small, 16));
    report("within_freed", chk_copy_device_to_device(ctx, freed, x, 16));
    report("within_itself", chk_copy_device_to_device(ctx, x, x, sizeof host));
    report("within_overlap", chk_copy_device_to_device(ctx, x + 1, x, 16));

    /* launches */
    chk_dim3 grid = {(N + 63) / 64, 1, 1}, block = {64, 1, 1};
    chk_dim3 zero = {0, 1, 1}, wide = {1u << 26, 1, 1}, tall = {1, 1u << 31, 1};
    chk_dim3 too_big = {1u << 20, 1, 1}, wrong = {32, 1, 1}, y_huge = {1, 70000, 1};
    report("launch_null_context", chk_fill(NULL, grid, block, x, N, 2.0f));
    report("launch_unknown_context", chk_fill(fake, grid, block, x, N, 2.0f));
    report("launch_zero_grid", chk_fill(ctx, zero, block, x, N, 2.0f));
    report("launch_grid_times_block", chk_fill(ctx, wide, block, x, N, 2.0f));
    report("launch_tall_grid", chk_fill(ctx, tall, block, x, N, 2.0f));
    report("launch_block_over_device", chk_fill(ctx, grid, too_big, x, N, 2.0f));
    report("launch_block_y_over", chk_fill(ctx, grid, y_huge, x, N, 2.0f));
    chk_dim3 grid_y = {1, 70000, 1}, deep = {1, 1, 128};  /* over cpu's and CUDA's limits */
    report("launch_grid_y_over_limit", chk_fill(ctx, grid_y, block, x, N, 2.0f));
    report("launch_block_z_over_limit", chk_fill(ctx, grid, deep, x, N, 2.0f));
    report("launch_negative_extent", chk_fill(ctx, grid, block, x, -1, 2.0f));
    report("launch_extent_over_memory", chk_fill(ctx, grid, block, few, N, 2.0f));
    report("launch_null_array", chk_fill(ctx, grid, block, NULL, N, 2.0f));
    chk_dim3 one = {1, 1, 1}, column = {1, 1, 64};  /* 2^21 * 2^21 * 2^22 wraps to 0 */
    report("launch_extents_wrap", chk_fill3(ctx, one, column, few, 1 << 21, 1 << 21, 1 << 22));
    report("launch_unknown_array", chk_fill(ctx, grid, block, small, 10, 2.0f));
    report("launch_freed_array", chk_fill(ctx, grid, block, freed, 4, 2.0f));
    report("launch_wrong_block_shape", chk_staged(ctx, grid, wrong, x, N, y, N));
    report("launch_debug_out_of_bounds", chk_off_by_one(ctx, grid, block, x, N, N));

    /* the context still works: a debug launch in bounds, the fixed block shape, a fill */
    expect(chk_off_by_one(ctx, grid, block, x, N, N - 1), "chk_off_by_one in bounds");
    expect(chk_copy_to_device(ctx, x, host, sizeof host), "chk_copy_to_device");
    chk_dim3 tiles = {N / 64, 1, 1};
    expect(chk_staged(ctx, tiles, block, x, N, y, N), "chk_staged");
    expect(chk_copy_to_host(ctx, host, sizeof host, y, sizeof host), "chk_copy_to_host");
    for (int i = 0; i < N / 64 * 64; i++) {
        float want = (float)(i / 64 * 64 + 63 - i % 64);
        if (host[i] != want) { fprintf(stderr, "staged[%d] = %g, not %g\n", i, host[i], want); return 1; }
    }
    expect(chk_fill(ctx, grid, block, few, 10, 3.0f), "chk_fill");
    expect(chk_copy_to_host(ctx, small, sizeof small, few, sizeof small), "chk_copy_to_host");
    for (int i = 0; i < 10; i++) if (small[i] != 3.0f) { fprintf(stderr, "fill\n"); return 1; }
    expect(chk_synchronize(ctx), "chk_synchronize");

    expect(chk_free(ctx, x), "chk_free");
    expect(chk_free(ctx, y), "chk_free");
    expect(chk_free(ctx, few), "chk_free");
    chk_context_destroy(ctx);
    chk_context_destroy(ctx); /* a second destroy is ignored */
    report("synchronize_destroyed", chk_synchronize(ctx));
    report("launch_destroyed", chk_fill(ctx, grid, block, x, N, 2.0f));
    puts("ok");
    return 0;
}
