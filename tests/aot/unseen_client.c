/* Written from kernels.h and kernels.json alone: saxpy (f32), a 5x5 box blur (f64, 2-D)
 * and a histogram (u8 -> i32 with atomics). Inputs come from a fixed generator; inputs
 * and outputs are written to DIR as raw arrays for a NumPy check.  Usage: client DIR */
#include "kernels.h"

#include <stdio.h>
#include <stdlib.h>

#define CHECK(call)                                                                      \
    do {                                                                                 \
        if ((call) != KERNELS_SUCCESS) {                                                 \
            fprintf(stderr, "%s: %s\n", #call, kernels_error_string());                  \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

static uint32_t state = 12345u;
static uint32_t next(void) { state = state * 1664525u + 1013904223u; return state >> 8; }

static void dump(const char *dir, const char *name, const void *data, size_t nbytes) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, nbytes, f) != nbytes) { perror(path); exit(1); }
    fclose(f);
}

static void *device_copy(kernels_context *ctx, const void *host, size_t nbytes) {
    void *d = kernels_alloc(ctx, nbytes);
    if (!d) { fprintf(stderr, "alloc: %s\n", kernels_error_string()); exit(1); }
    CHECK(kernels_copy_to_device(ctx, d, host, nbytes));
    return d;
}

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    const char *dir = argv[1];
    kernels_context *ctx;
    CHECK(kernels_context_create(&ctx, 0));

    enum { N = 100003, H = 123, W = 77, BYTES = 50000, BINS = 17 };
    float alpha = 1.5f, *x = malloc(N * 4), *y = malloc(N * 4), *out = malloc(N * 4);
    double *src = malloc(H * W * 8), *dst = malloc(H * W * 8);
    uint8_t *data = malloc(BYTES);
    int32_t bins[BINS] = {0};
    for (int i = 0; i < N; i++) { x[i] = (float)(next() % 2000) / 100.0f - 10.0f;
                                  y[i] = (float)(next() % 1000) / 10.0f; }
    for (int i = 0; i < H * W; i++) src[i] = (double)(next() % 100000) / 1000.0;
    for (int i = 0; i < BYTES; i++) data[i] = (uint8_t)next();

    float *dx = device_copy(ctx, x, N * 4), *dy = device_copy(ctx, y, N * 4);
    float *dout = device_copy(ctx, out, N * 4);
    double *dsrc = device_copy(ctx, src, H * W * 8), *ddst = device_copy(ctx, dst, H * W * 8);
    uint8_t *ddata = device_copy(ctx, data, BYTES);
    int32_t *dbins = device_copy(ctx, bins, sizeof bins);

    kernels_dim3 block = {128, 1, 1}, grid = {(N + 127) / 128, 1, 1};
    CHECK(kernels_saxpy(ctx, grid, block, alpha, dx, N, dy, N, dout, N, N));
    kernels_dim3 tile = {8, 8, 1}, tiles = {(W + 7) / 8, (H + 7) / 8, 1};
    CHECK(kernels_box_blur(ctx, tiles, tile, dsrc, H, W, ddst, H, W));
    kernels_dim3 hist_grid = {16, 1, 1}, hist_block = {64, 1, 1};
    CHECK(kernels_histogram(ctx, hist_grid, hist_block, ddata, BYTES, dbins, BINS, BYTES));
    CHECK(kernels_synchronize(ctx));

    CHECK(kernels_copy_to_host(ctx, out, N * 4, dout, N * 4));
    CHECK(kernels_copy_to_host(ctx, dst, H * W * 8, ddst, H * W * 8));
    CHECK(kernels_copy_to_host(ctx, bins, sizeof bins, dbins, sizeof bins));
    dump(dir, "x.f32", x, N * 4);
    dump(dir, "y.f32", y, N * 4);
    dump(dir, "out.f32", out, N * 4);
    dump(dir, "src.f64", src, H * W * 8);
    dump(dir, "dst.f64", dst, H * W * 8);
    dump(dir, "data.u8", data, BYTES);
    dump(dir, "bins.i32", bins, sizeof bins);

    void *all[] = {dx, dy, dout, dsrc, ddst, ddata, dbins};
    for (int i = 0; i < 7; i++) CHECK(kernels_free(ctx, all[i]));
    kernels_context_destroy(ctx);
    free(x); free(y); free(out); free(src); free(dst); free(data);
    puts("ok");
    return 0;
}
