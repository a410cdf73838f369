/* A C program against a library built from kiln/examples.py with `--name ex`, on any
 * target: it reads its inputs from files the test wrote, launches through ex.h and writes
 * the results for the test to compare with NumPy.
 *
 *   examples_client DIR: reads DIR/a.f32 DIR/b.f32 (N floats), DIR/ma.f32 (M x K),
 *   DIR/mb.f32 (K x P); writes DIR/add.f32, DIR/sum.f32, DIR/mm.f32, DIR/mm_naive.f32,
 *   DIR/mandel.i32 and DIR/errors.txt.
 */
#include "ex.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N = 10007, M = 37, K = 53, P = 29, W = 64, H = 48, MAX_ITER = 50 };

static ex_context *ctx;

static void check(int status, const char *what) {
    if (status != EX_SUCCESS) {
        fprintf(stderr, "%s failed (%d): %s\n", what, status, ex_error_string());
        exit(1);
    }
}

static void *load(const char *dir, const char *name, size_t nbytes) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) { perror(path); exit(1); }
    void *host = malloc(nbytes);
    if (fread(host, 1, nbytes, f) != nbytes) { fprintf(stderr, "%s: short\n", path); exit(1); }
    fclose(f);
    void *device = ex_alloc(ctx, nbytes);
    if (!device) check(EX_ERROR_OUT_OF_MEMORY, "ex_alloc");
    check(ex_copy_to_device(ctx, device, host, nbytes), "ex_copy_to_device");
    free(host);
    return device;
}

static void save(const char *dir, const char *name, const void *device, size_t nbytes) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    void *host = malloc(nbytes);
    check(ex_copy_to_host(ctx, host, nbytes, device, nbytes), "ex_copy_to_host");
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(host, 1, nbytes, f) != nbytes) { perror(path); exit(1); }
    fclose(f);
    free(host);
}

static void *zeros(size_t nbytes) {
    void *host = calloc(1, nbytes), *device = ex_alloc(ctx, nbytes);
    if (!device) check(EX_ERROR_OUT_OF_MEMORY, "ex_alloc");
    check(ex_copy_to_device(ctx, device, host, nbytes), "ex_copy_to_device");
    free(host);
    return device;
}

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: %s DIR\n", argv[0]); return 2; }
    const char *dir = argv[1];
    if (ex_device_count() < 1) { fprintf(stderr, "no device: %s\n", ex_error_string()); return 1; }
    check(ex_context_create(&ctx, 0), "ex_context_create");

    float *a = load(dir, "a.f32", N * sizeof(float)), *b = load(dir, "b.f32", N * sizeof(float));
    float *c = zeros(N * sizeof(float)), *sum = zeros(sizeof(float));
    ex_dim3 block = {256, 1, 1}, grid = {(N + 255) / 256, 1, 1};
    check(ex_vector_add(ctx, grid, block, a, N, b, N, c, N, N), "ex_vector_add");
    ex_dim3 few = {8, 1, 1};
    check(ex_block_sum(ctx, few, block, a, N, sum, 1, N), "ex_block_sum");

    float *ma = load(dir, "ma.f32", M * K * sizeof(float));
    float *mb = load(dir, "mb.f32", K * P * sizeof(float));
    float *mc = zeros(M * P * sizeof(float)), *mn = zeros(M * P * sizeof(float));
    ex_dim3 tile = {16, 16, 1}, tiles = {(P + 15) / 16, (M + 15) / 16, 1};
    check(ex_matmul_tiled(ctx, tiles, tile, ma, M, K, mb, K, P, mc, M, P), "ex_matmul_tiled");
    ex_dim3 wide = {32, 4, 1}, wides = {(P + 31) / 32, (M + 3) / 4, 1};
    check(ex_matmul_naive(ctx, wides, wide, ma, M, K, mb, K, P, mn, M, P), "ex_matmul_naive");

    int32_t *mandel = zeros(W * H * sizeof(int32_t));
    ex_dim3 pixels = {W / 16, H / 16, 1};
    check(ex_mandelbrot(ctx, pixels, tile, mandel, H, W, MAX_ITER), "ex_mandelbrot");
    check(ex_synchronize(ctx), "ex_synchronize");

    save(dir, "add.f32", c, N * sizeof(float));
    save(dir, "sum.f32", sum, sizeof(float));
    save(dir, "mm.f32", mc, M * P * sizeof(float));
    save(dir, "mm_naive.f32", mn, M * P * sizeof(float));
    save(dir, "mandel.i32", mandel, W * H * sizeof(int32_t));

    /* errors: a block over the device's limit, a negative extent, a bad device index */
    char path[4096];
    snprintf(path, sizeof path, "%s/errors.txt", dir);
    FILE *errors = fopen(path, "w");
    ex_dim3 huge = {65536, 1, 1};
    fprintf(errors, "%d %s\n", ex_vector_add(ctx, grid, huge, a, N, b, N, c, N, N),
            ex_error_string());
    fprintf(errors, "%d %s\n", ex_vector_add(ctx, grid, block, a, -1, b, N, c, N, N),
            ex_error_string());
    ex_context *other = NULL;
    fprintf(errors, "%d %s\n", ex_context_create(&other, 1000), ex_error_string());
    fclose(errors);

    void *all[] = {a, b, c, sum, ma, mb, mc, mn, mandel};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) check(ex_free(ctx, all[i]), "ex_free");
    ex_context_destroy(ctx);
    puts("ok");
    return 0;
}
