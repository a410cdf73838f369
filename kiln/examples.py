"""The classic kernels of the SPEC and the demo, defined once for the demo, the benchmarks,
the tests and the conformance suite.

- `vector_add` and `block_sum`: SPEC §1 exactly (`block_sum` needs blocks of at most
  `BLOCK` threads, a power of two).
- `matmul_naive` and `matmul_tiled`: c = a @ b for any shapes, one thread per element of c
  (a 2-D grid, x along columns); the tiled one stages 16x16 tiles of a and b in shared
  memory (blocks of `TILE` x `TILE` threads).
- `matmul_tiled_square`: the tiled product of n x n matrices with n a multiple of `TILE`,
  without bounds checks (what the benchmarks time).
- `mandelbrot`: escape-time counts over [-2, 1] x [-1.5, 1.5], one thread per pixel.
- `spmv_csr`: y = A @ x for a CSR matrix (`indptr`, `indices`, `data`), one thread per row:
  a loop whose trip count differs from thread to thread.
- `julia`: escape-time counts of z -> z^2 + c over [-1.6, 1.6] x [-1.2, 1.2], one thread
  per pixel, a `while` loop that ends at a different iteration in each thread.
- `softmax_rows`: y = exp(x - max) / sum per row of a 2-d array, one block of `BLOCK`
  threads per row (each thread strides over the row; shared-memory trees for the maximum
  and the sum). NaNs in a row are not propagated by its maximum.
"""

from __future__ import annotations

import kiln
from kiln import f32, i32

BLOCK = 256
TILE = 16
JULIA_C = (-0.8, 0.156)
"""The Julia set's constant c (real, imaginary) in the tests and benchmarks."""


@kiln.kernel
def vector_add(a: f32[:], b: f32[:], c: f32[:], n: i32):
    i = kiln.global_id(0)
    if i < n:
        c[i] = a[i] + b[i]


@kiln.kernel
def block_sum(x: f32[:], out: f32[:], n: i32):
    s = kiln.shared(f32, 256)
    t = kiln.thread_idx.x
    acc = f32(0)
    i = kiln.global_id(0)
    while i < n:  # grid-stride loop
        acc += x[i]
        i += kiln.global_size(0)
    s[t] = acc
    kiln.barrier()
    k = kiln.block_dim.x // 2
    while k > 0:
        if t < k:
            s[t] += s[t + k]
        kiln.barrier()
        k //= 2
    if t == 0:
        kiln.atomic_add(out, 0, s[0])


@kiln.kernel
def matmul_naive(a: f32[:, :], b: f32[:, :], c: f32[:, :]):
    row = kiln.global_id(1)
    col = kiln.global_id(0)
    if row < c.shape[0] and col < c.shape[1]:
        acc = f32(0)
        for k in range(a.shape[1]):
            acc += a[row, k] * b[k, col]
        c[row, col] = acc


@kiln.kernel
def matmul_tiled(a: f32[:, :], b: f32[:, :], c: f32[:, :]):
    ta = kiln.shared(f32, (TILE, TILE))
    tb = kiln.shared(f32, (TILE, TILE))
    tx, ty = kiln.thread_idx.x, kiln.thread_idx.y
    row = kiln.block_idx.y * TILE + ty
    col = kiln.block_idx.x * TILE + tx
    m, inner, p = a.shape[0], a.shape[1], b.shape[1]
    acc = f32(0)
    for t in range(0, inner, TILE):
        ta[ty, tx] = a[row, t + tx] if row < m and t + tx < inner else 0.0
        tb[ty, tx] = b[t + ty, col] if t + ty < inner and col < p else 0.0
        kiln.barrier()
        for k in range(TILE):
            acc += ta[ty, k] * tb[k, tx]
        kiln.barrier()
    if row < m and col < p:
        c[row, col] = acc


@kiln.kernel
def matmul_tiled_square(a: f32[:, :], b: f32[:, :], c: f32[:, :], n: i32):
    ta = kiln.shared(f32, (TILE, TILE))
    tb = kiln.shared(f32, (TILE, TILE))
    tx, ty = kiln.thread_idx.x, kiln.thread_idx.y
    row = kiln.block_idx.y * TILE + ty
    col = kiln.block_idx.x * TILE + tx
    acc = f32(0)
    for t in range(0, n, TILE):
        ta[ty, tx] = a[row, t + tx]
        tb[ty, tx] = b[t + ty, col]
        kiln.barrier()
        for k in range(TILE):
            acc += ta[ty, k] * tb[k, tx]
        kiln.barrier()
    c[row, col] = acc


@kiln.kernel
def mandelbrot(out: i32[:, :], max_iter: i32):
    x = kiln.global_id(0)
    y = kiln.global_id(1)
    h, w = out.shape[0], out.shape[1]
    if x < w and y < h:
        cr = -2.0 + 3.0 * f32(x) / f32(w)
        ci = -1.5 + 3.0 * f32(y) / f32(h)
        zr = f32(0)
        zi = f32(0)
        it = 0
        for k in range(max_iter):
            if zr * zr + zi * zi > 4.0:
                break
            zr, zi = zr * zr - zi * zi + cr, 2.0 * zr * zi + ci
            it = k + 1
        out[y, x] = it


@kiln.kernel
def spmv_csr(indptr: i32[:], indices: i32[:], data: f32[:], x: f32[:], y: f32[:]):
    row = kiln.global_id(0)
    if row < y.shape[0]:
        acc = f32(0)
        for k in range(indptr[row], indptr[row + 1]):
            acc += data[k] * x[indices[k]]
        y[row] = acc


@kiln.kernel
def julia(out: i32[:, :], cr: f32, ci: f32, max_iter: i32):
    x = kiln.global_id(0)
    y = kiln.global_id(1)
    h, w = out.shape[0], out.shape[1]
    if x < w and y < h:
        zr = -1.6 + 3.2 * f32(x) / f32(w)
        zi = -1.2 + 2.4 * f32(y) / f32(h)
        it = 0
        while it < max_iter and zr * zr + zi * zi <= 4.0:
            zr, zi = zr * zr - zi * zi + cr, 2.0 * zr * zi + ci
            it += 1
        out[y, x] = it



@kiln.kernel
def softmax_rows(x: f32[:, :], y: f32[:, :]):
    s = kiln.shared(f32, 256)
    row = kiln.block_idx.x
    t = kiln.thread_idx.x
    n = x.shape[1]
    top = x[row, 0]
    j = t
    while j < n:  # this thread's part of the row's maximum
        v = x[row, j]
        top = v if v > top else top
        j += kiln.block_dim.x
    s[t] = top
    kiln.barrier()
    k = kiln.block_dim.x // 2
    while k > 0:
        if t < k and s[t + k] > s[t]:
            s[t] = s[t + k]
        kiln.barrier()
        k //= 2
    top = s[0]
    kiln.barrier()
    total = f32(0)
    j = t
    while j < n:
        e = kiln.exp(x[row, j] - top)
        y[row, j] = e
        total += e
        j += kiln.block_dim.x
    s[t] = total
    kiln.barrier()
    k = kiln.block_dim.x // 2
    while k > 0:
        if t < k:
            s[t] += s[t + k]
        kiln.barrier()
        k //= 2
    total = s[0]
    j = t
    while j < n:
        y[row, j] = y[row, j] / total
        j += kiln.block_dim.x
