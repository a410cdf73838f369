"""The classic kernels of the docs and the demo, defined once for the demo, the benchmarks,
the tests and the conformance suite.

- `vector_add` and `block_sum`: as docs/language.md writes them (`block_sum` needs blocks of at most
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
- `block_sum_tuned` and `matmul_tiled_tuned`: `block_sum` and `matmul_tiled` autotuned
  (docs/autotune.md): the block (and the shared arrays it sizes) is a constexpr chosen per
  problem size; launch them with a grid computed from the chosen `kiln.Config`.
- `make_matmul_f32`: the fp32 GEMM without matrix units (register-blocked:
  128 x 128 block tiles, 8 x 8 outputs per thread read from shared memory 16 bytes at a
  time, the next k-slice prefetched into registers while this one is multiplied).
- `make_matmul_tf32x3`: the fp32 GEMM on the matrix units with fp32
  accuracy: each operand split into tf32 high and low parts (`kiln.tf32`), three tf32
  products per tile (hi*hi + hi*lo + lo*hi; the dropped lo*lo is 2^-22 relative).
- `make_matmul_mma`: c = a @ b on the matrix
  units, for bf16, f16 or f32 (multiplied as tf32) inputs: block tiles staged through shared
  memory by `kiln.copy_async` in a `STAGES`-deep pipeline, each warp accumulating a
  `WM` x `WN` tile with `kiln.mma`. Shapes must be multiples of the block tile
  (`matmul_mma_launch` checks them and launches any of these GEMMs).

The GEMMs are factories (one kernel per element type and tiling), not module-level kernels:
their unrolled bodies are large, and tools that build every kernel of a module (`kiln
build`) should not pay for them.
"""

from __future__ import annotations

from typing import Any

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


@kiln.kernel
def smooth_shard(x: f32[:], y: f32[:], start: i32, rows: i32, n: i32):
    """One step of a 3-point average over one shard (or Dask chunk) of an n-element array,
    stored after one ghost row: row `start + i` of the whole array is `x[i + 1]`; the
    array's two end points are kept."""
    i = kiln.global_id(0)
    if i < rows:
        g = start + i
        j = i + 1
        if g == 0 or g == n - 1:
            y[j] = x[j]
        else:
            y[j] = (x[j - 1] + x[j] + x[j + 1]) / 3.0


@kiln.autotune(configs=[kiln.Config({"THREADS": t}, block=t) for t in (64, 128, 256)],
               key=["n"])
@kiln.kernel
def block_sum_tuned(x: f32[:], out: f32[:], n: i32, THREADS: kiln.constexpr):
    s = kiln.shared(f32, THREADS)
    t = kiln.thread_idx.x
    acc = f32(0)
    i = kiln.global_id(0)
    while i < n:
        acc += x[i]
        i += kiln.global_size(0)
    s[t] = acc
    kiln.barrier()
    k = THREADS // 2
    while k > 0:
        if t < k:
            s[t] += s[t + k]
        kiln.barrier()
        k //= 2
    if t == 0:
        kiln.atomic_add(out, 0, s[0])


@kiln.autotune(configs=[kiln.Config({"T": t}, block=(t, t)) for t in (8, 16)],
               key=["a", "b"])
@kiln.kernel
def matmul_tiled_tuned(a: f32[:, :], b: f32[:, :], c: f32[:, :], T: kiln.constexpr):
    ta = kiln.shared(f32, (T, T))
    tb = kiln.shared(f32, (T, T))
    tx, ty = kiln.thread_idx.x, kiln.thread_idx.y
    row = kiln.block_idx.y * T + ty
    col = kiln.block_idx.x * T + tx
    m, inner, p = a.shape[0], a.shape[1], b.shape[1]
    acc = f32(0)
    for t in range(0, inner, T):
        ta[ty, tx] = a[row, t + tx] if row < m and t + tx < inner else 0.0
        tb[ty, tx] = b[t + ty, col] if t + ty < inner and col < p else 0.0
        kiln.barrier()
        for k in kiln.static_range(T):
            acc += ta[ty, k] * tb[k, tx]
        kiln.barrier()
    if row < m and col < p:
        c[row, col] = acc


# ---------------------------------------------------------------- matrix units


# a kernel factory: the kernel body's shape is the algorithm, tuned on the H100 (C901)
def make_matmul_mma(elem: kiln.ScalarType, bm: int = 128, bn: int = 128, bk: int = 32,  # noqa: C901
                    wm: int = 64, wn: int = 64, stages: int = 3, group_m: int = 8,
                    prefetch: bool = True) -> kiln.Kernel:
    """A tensor-core GEMM kernel for one element type and tiling: blocks of `bm` x `bn`
    outputs, (bm / wm) x (bn / wn) warps of `wm` x `wn` outputs, k in steps of `bk`; c is
    generic (f16, bf16, f32 or f64: the f32 sums rounded once). Blocks take their tiles
    in groups of `group_m` block rows sweeping the columns together (the group's rows of a
    and the columns of b it sweeps stay in L2); with `prefetch`, each warp loads the next
    k step's fragments before multiplying this step's. The defaults were the fastest bf16
    tiling on an H100 (benchmarks/RESULTS.md, tensor cores)."""
    warps_n = bn // wn
    threads = (bm // wm) * warps_n * 32
    mt, nt = wm // 16, wn // 8
    ks = 8 if elem == f32 else 16  # k of one mma
    vec = 16 // elem.itemsize  # elements per 16-byte copy
    a_vecs, b_vecs = bk // vec, bn // vec  # 16-byte copies per row of a tile
    a_total, b_total = bm * a_vecs, bk * b_vecs  # 16-byte pieces of each tile
    a_copies, b_copies = -(-a_total // threads), -(-b_total // threads)  # per thread
    assert stages >= 2 and bk % ks == 0 and wm % 16 == 0 and wn % 8 == 0
    fragment_a, fragment_b = kiln.fragment_a(elem), kiln.fragment_b(elem)

    # the kernel body's shape is the algorithm, tuned on the H100 (C901)
    @kiln.kernel
    def matmul_mma(a: elem[:, :], b: elem[:, :], c):  # noqa: C901
        sa = kiln.shared(elem, (stages * bm, bk + vec))  # rows padded by 16 bytes (banks)
        sb = kiln.shared(elem, (stages * bk, bn + vec))
        fa = kiln.local(fragment_a, 2 * mt)  # two sets: this k step's and the next's
        fb = kiln.local(fragment_b, 2 * nt)
        acc = kiln.local(f32, mt * nt * 4)
        tid = kiln.thread_idx.x
        warp = tid // 32
        wrow = (warp // warps_n) * wm
        wcol = (warp % warps_n) * wn
        block = kiln.block_idx.y * kiln.grid_dim.x + kiln.block_idx.x
        group = group_m * kiln.grid_dim.x  # blocks per group of block rows
        first = (block // group) * group_m
        rows = min(kiln.grid_dim.y - first, group_m)
        row0 = (first + (block % group) % rows) * bm
        col0 = ((block % group) // rows) * bn
        for i in kiln.static_range(mt * nt * 4):
            acc[i] = 0.0
        ktiles = a.shape[1] // bk
        for t in range(stages - 1 + ktiles):
            kt = t - (stages - 1)  # the tile computed in this step, once the pipeline is full
            if kt >= 0:
                kiln.copy_async_wait(stages - 2)  # tile kt has landed (for this thread) ...
                kiln.barrier()  # ... for every thread, and stage (kt - 1) was read by all
            if t < ktiles:  # tile t into stage t % stages, overwriting tile kt - 1
                stage = t % stages
                for j in kiln.static_range(a_copies):
                    v = tid + j * threads
                    r = v // a_vecs
                    k = (v % a_vecs) * vec
                    if a_copies * threads == a_total or v < a_total:
                        kiln.copy_async(sa, stage * bm + r, k, a, row0 + r, t * bk + k, vec)
                for j in kiln.static_range(b_copies):
                    v = tid + j * threads
                    r = v // b_vecs
                    n = (v % b_vecs) * vec
                    if b_copies * threads == b_total or v < b_total:
                        kiln.copy_async(sb, stage * bk + r, n, b, t * bk + r, col0 + n, vec)
            kiln.copy_async_commit()
            if kt >= 0:
                base_a = (kt % stages) * bm
                base_b = (kt % stages) * bk
                for kk in kiln.static_range(bk // ks + 1):
                    load = kk if prefetch else kk - 1  # the k step whose fragments load now
                    if 0 <= load < bk // ks:
                        for i in kiln.static_range(mt):
                            fa[(load % 2) * mt + i] = kiln.mma_load_a(
                                sa, base_a + wrow + i * 16, load * ks)
                        for j in kiln.static_range(nt):
                            fb[(load % 2) * nt + j] = kiln.mma_load_b(
                                sb, base_b + load * ks, wcol + j * 8)
                    step = kk - 1  # the k step multiplied now
                    if step >= 0:
                        for i in kiln.static_range(mt):
                            for j in kiln.static_range(nt):
                                kiln.mma(acc, i * nt + j, fa[(step % 2) * mt + i],
                                         fb[(step % 2) * nt + j])
        for i in kiln.static_range(mt):
            for j in kiln.static_range(nt):
                kiln.mma_store(c, row0 + wrow + i * 16, col0 + wcol + j * 8, acc, i * nt + j)

    matmul_mma.tile = (bm, bn, bk)
    matmul_mma.threads = threads
    return matmul_mma



def matmul_mma_launch(kernel: kiln.Kernel, a: Any, b: Any, c: Any, **launch: Any) -> None:
    """Launch a `make_matmul_mma` kernel on (m, k) @ (k, n) -> (m, n), after checking that
    the shapes fit its block tile (the kernel has no bounds checks); `launch` takes
    `device=` and `stream=` as `kiln.launch` does."""
    bm, bn, bk = kernel.tile
    (m, k), (k2, n), (m2, n2) = (tuple(x.shape) for x in (a, b, c))
    if k != k2 or (m, n) != (m2, n2):
        raise ValueError(f"matmul of {(m, k)} and {(k2, n)} into {(m2, n2)}")
    if m % bm or n % bn or k % bk:
        raise ValueError(f"{kernel.name} needs m, n, k multiples of {bm}, {bn}, {bk}; "
                         f"got {m}, {n}, {k}")
    kiln.launch(kernel, (n // bn, m // bm), kernel.threads, (a, b, c),
                **launch)


def make_matmul_wgmma(elem: kiln.ScalarType = kiln.bf16, bm: int = 128, bn: int = 128,
                      bk: int = 64, stages: int = 3, group_m: int = 8) -> kiln.Kernel:
    """A warpgroup GEMM kernel (`kiln.wgmma`, Hopper's wgmma on sm_90): c = a @ bt.T for a
    of m x k and bt of n x k (B transposed: both operands k-contiguous, as the core-matrix
    layout wants them), f16 or bf16, c generic. Blocks of `bm` x `bn` outputs, one
    warpgroup (128 threads) per 64 rows, k in steps of `bk` staged `stages` deep through
    shared memory by 16-byte `copy_async` copies; block tiles in groups of `group_m` block
    rows, as `make_matmul_mma`."""
    groups = bm // 64
    threads = groups * 128
    kb = bk // 8  # core-matrix k blocks per stage
    a_total, b_total = bm * kb, bn * kb  # 16-byte pieces of each tile
    a_copies, b_copies = -(-a_total // threads), -(-b_total // threads)  # per thread
    assert bm % 64 == 0 and bn % 8 == 0 and 8 <= bn <= 256 and bk % 16 == 0 and stages >= 2

    @kiln.kernel
    def matmul_wgmma(a: elem[:, :], bt: elem[:, :], c):
        # a[r, k] of stage s at sa[s kb + k // 8, r, k % 8], bt[n, k] likewise in sb
        sa = kiln.shared(elem, (stages * kb, bm, 8))
        sb = kiln.shared(elem, (stages * kb, bn, 8))
        acc = kiln.local(f32, bn // 2)
        tid = kiln.thread_idx.x
        wrow = (tid // 128) * 64  # this warpgroup's rows of the block tile
        block = kiln.block_idx.y * kiln.grid_dim.x + kiln.block_idx.x
        group = group_m * kiln.grid_dim.x
        first = (block // group) * group_m
        rows = min(kiln.grid_dim.y - first, group_m)
        row0 = (first + (block % group) % rows) * bm
        col0 = ((block % group) // rows) * bn
        for i in kiln.static_range(bn // 2):
            acc[i] = 0.0
        ktiles = a.shape[1] // bk
        for t in range(stages - 1 + ktiles):
            kt = t - (stages - 1)  # the tile multiplied in this step, once the pipeline is full
            if kt >= 0:
                kiln.copy_async_wait(stages - 2)  # tile kt has landed (for this thread) ...
                kiln.wgmma_fence()  # ... for the tensor cores ...
                kiln.barrier()  # ... for every thread; stage (kt - 1) was read by all
            if t < ktiles:  # tile t into stage t % stages, overwriting tile kt - 1
                stage = (t % stages) * kb
                for j in kiln.static_range(a_copies):
                    v = tid + j * threads
                    if a_copies * threads == a_total or v < a_total:
                        kiln.copy_async(sa, stage + v % kb, v // kb, 0,
                                        a, row0 + v // kb, t * bk + (v % kb) * 8, 8)
                for j in kiln.static_range(b_copies):
                    v = tid + j * threads
                    if b_copies * threads == b_total or v < b_total:
                        kiln.copy_async(sb, stage + v % kb, v // kb, 0,
                                        bt, col0 + v // kb, t * bk + (v % kb) * 8, 8)
            kiln.copy_async_commit()
            if kt >= 0:
                k0 = (kt % stages) * bk
                for kk in kiln.static_range(0, bk, 16):
                    kiln.wgmma(acc, sa, wrow, k0 + kk, sb, k0 + kk, 0)
                kiln.wgmma_commit()
                kiln.wgmma_wait(0)  # done reading stage kt before it is overwritten
        kiln.wgmma_store(c, row0 + wrow, col0, acc)

    matmul_wgmma.tile = (bm, bn, bk)
    matmul_wgmma.threads = threads
    return matmul_wgmma


def matmul_wgmma_launch(kernel: kiln.Kernel, a: Any, bt: Any, c: Any, **launch: Any) -> None:
    """Launch a `make_matmul_wgmma` kernel on (m, k) @ (n, k).T -> (m, n), after checking
    that the shapes fit its block tile (the kernel has no bounds checks)."""
    bm, bn, bk = kernel.tile
    (m, k), (n, k2), (m2, n2) = (tuple(x.shape) for x in (a, bt, c))
    if k != k2 or (m, n) != (m2, n2):
        raise ValueError(f"matmul of {(m, k)} and {(n, k2)}.T into {(m2, n2)}")
    if m % bm or n % bn or k % bk:
        raise ValueError(f"{kernel.name} needs m, n, k multiples of {bm}, {bn}, {bk}; "
                         f"got {m}, {n}, {k}")
    kiln.launch(kernel, (n // bn, m // bm), kernel.threads, (a, bt, c), **launch)


def make_matmul_f32(bk: int = 8) -> kiln.Kernel:
    """An fp32 GEMM on the FP32 units, `bk` deep (4 or 8): 128 x 128 block tiles, 256
    threads each owning two 4 x 4 halves 64 apart in each direction (so its shared reads
    are 16-byte vectors every warp reads conflict-free); A's tile is stored transposed (rows
    padded by 4 floats); the next tile is loaded into registers during the multiply and
    stored into the other of two shared buffers. m, n multiples of 128, k of `bk`."""
    tile, half = 128, 64
    assert bk in (4, 8), "256 threads load the 128 x bk tiles as 16-byte pieces"

    @kiln.kernel
    def matmul_f32(a: f32[:, :], b: f32[:, :], c: f32[:, :]):
        sa = kiln.shared(f32, (2 * bk, tile + 4))  # sa[stage * bk + k, m]
        sb = kiln.shared(f32, (2 * bk, tile))
        acc = kiln.local(f32, 64)
        ra = kiln.local(f32, 8)
        rb = kiln.local(f32, 8)
        tid = kiln.thread_idx.x
        tr, tc = tid // 16, tid % 16
        row0, col0 = kiln.block_idx.y * tile, kiln.block_idx.x * tile
        ar, ak = tid // (bk // 4), (tid % (bk // 4)) * 4  # one A row's 4 k values
        bkr, bc = tid // 32, (tid % 32) * 4  # 4 columns of one B row (rows < bk)
        for i in kiln.static_range(64):
            acc[i] = 0.0
        va = kiln.load(kiln.f32x4, a, row0 + ar % tile, ak // 4)
        vb = kiln.load(kiln.f32x4, b, bkr % bk, (col0 + bc) // 4)
        if ar < tile:
            sa[ak, ar] = va.x
            sa[ak + 1, ar] = va.y
            sa[ak + 2, ar] = va.z
            sa[ak + 3, ar] = va.w
        if bkr < bk:
            kiln.store(sb, bkr, bc // 4, vb)
        kiln.barrier()
        ktiles = a.shape[1] // bk
        for t in range(ktiles):
            cur = (t % 2) * bk
            if t + 1 < ktiles:  # the next slice into registers while this one multiplies
                k0 = (t + 1) * bk
                va = kiln.load(kiln.f32x4, a, row0 + ar % tile, (k0 + ak) // 4)
                vb = kiln.load(kiln.f32x4, b, k0 + bkr % bk, (col0 + bc) // 4)
            for k in kiln.static_range(bk):
                x0 = kiln.load(kiln.f32x4, sa, cur + k, tr)
                x1 = kiln.load(kiln.f32x4, sa, cur + k, 16 + tr)
                y0 = kiln.load(kiln.f32x4, sb, cur + k, tc)
                y1 = kiln.load(kiln.f32x4, sb, cur + k, 16 + tc)
                ra[0], ra[1], ra[2], ra[3] = x0.x, x0.y, x0.z, x0.w
                ra[4], ra[5], ra[6], ra[7] = x1.x, x1.y, x1.z, x1.w
                rb[0], rb[1], rb[2], rb[3] = y0.x, y0.y, y0.z, y0.w
                rb[4], rb[5], rb[6], rb[7] = y1.x, y1.y, y1.z, y1.w
                for m in kiln.static_range(8):
                    for q in kiln.static_range(8):
                        acc[m * 8 + q] += ra[m] * rb[q]
            if t + 1 < ktiles:
                nxt = bk - cur
                if ar < tile:
                    sa[nxt + ak, ar] = va.x
                    sa[nxt + ak + 1, ar] = va.y
                    sa[nxt + ak + 2, ar] = va.z
                    sa[nxt + ak + 3, ar] = va.w
                if bkr < bk:
                    kiln.store(sb, nxt + bkr, bc // 4, vb)
            kiln.barrier()
        for m in kiln.static_range(8):
            row = row0 + (m // 4) * half + tr * 4 + m % 4
            for h in kiln.static_range(2):
                base = m * 8 + h * 4
                kiln.store(c, row, (col0 + h * half) // 4 + tc,
                           kiln.f32x4(acc[base], acc[base + 1], acc[base + 2], acc[base + 3]))

    matmul_f32.tile = (tile, tile, bk)
    matmul_f32.threads = 256
    return matmul_f32



# a kernel factory: the kernel body's shape is the algorithm, tuned on the H100 (C901)
def make_matmul_tf32x3(bm: int = 128, bn: int = 128, bk: int = 16, wm: int = 64,  # noqa: C901
                       wn: int = 32, promote: bool = True) -> kiln.Kernel:
    """An fp32 GEMM with fp32 accuracy on the tensor cores ("3xTF32"): tiles are split as
    they are staged (x = hi + lo, hi = kiln.tf32(x), lo = x - hi exactly) into two shared
    buffers, loaded from global memory into registers during the multiply of the previous
    tile; each warp accumulates hi*hi + hi*lo + lo*hi. m, n, k multiples of the tile."""
    warps_n = bn // wn
    threads = (bm // wm) * warps_n * 32
    mt, nt = wm // 16, wn // 8
    a_vecs, b_vecs = bk // 4, bn // 4
    a_loads, b_loads = bm * a_vecs // threads, bk * b_vecs // threads
    assert a_loads * threads == bm * a_vecs and b_loads * threads == bk * b_vecs
    assert bk % 8 == 0 and wm % 16 == 0 and wn % 8 == 0
    frag_a, frag_b = kiln.fragment_a(f32), kiln.fragment_b(f32)

    # the kernel body's shape is the algorithm, tuned on the H100 (C901)
    @kiln.kernel
    def matmul_tf32x3(a: f32[:, :], b: f32[:, :], c: f32[:, :]):  # noqa: C901
        a_hi = kiln.shared(f32, (2 * bm, bk + 4))  # padding: conflict-free fragment reads
        a_lo = kiln.shared(f32, (2 * bm, bk + 4))
        b_hi = kiln.shared(f32, (2 * bk, bn + 8))
        b_lo = kiln.shared(f32, (2 * bk, bn + 8))
        fah = kiln.local(frag_a, mt)
        fal = kiln.local(frag_a, mt)
        fbh = kiln.local(frag_b, nt)
        fbl = kiln.local(frag_b, nt)
        acc = kiln.local(f32, mt * nt * 4)
        part = kiln.local(f32, mt * nt * 4)  # one k tile's sum (with promote)
        pa = kiln.local(kiln.f32x4, a_loads)
        pb = kiln.local(kiln.f32x4, b_loads)
        tid = kiln.thread_idx.x
        warp = tid // 32
        wrow = (warp // warps_n) * wm
        wcol = (warp % warps_n) * wn
        row0 = kiln.block_idx.y * bm
        col0 = kiln.block_idx.x * bn
        for i in kiln.static_range(mt * nt * 4):
            acc[i] = 0.0
        ktiles = a.shape[1] // bk
        for t in range(ktiles + 1):
            if t < ktiles:  # tile t from global memory into registers
                for j in kiln.static_range(a_loads):
                    v = tid + j * threads
                    pa[j] = kiln.load(kiln.f32x4, a, row0 + v // a_vecs, t * a_vecs + v % a_vecs)
                for j in kiln.static_range(b_loads):
                    v = tid + j * threads
                    pb[j] = kiln.load(kiln.f32x4, b, t * bk + v // b_vecs,
                                      col0 // 4 + v % b_vecs)
            if t > 0:  # multiply tile t - 1
                sa = ((t - 1) % 2) * bm
                sb = ((t - 1) % 2) * bk
                for i in kiln.static_range(mt * nt * 4):
                    part[i] = 0.0
                for kk in kiln.static_range(bk // 8):
                    for i in kiln.static_range(mt):
                        fah[i] = kiln.mma_load_a(a_hi, sa + wrow + i * 16, kk * 8)
                        fal[i] = kiln.mma_load_a(a_lo, sa + wrow + i * 16, kk * 8)
                    for j in kiln.static_range(nt):
                        fbh[j] = kiln.mma_load_b(b_hi, sb + kk * 8, wcol + j * 8)
                        fbl[j] = kiln.mma_load_b(b_lo, sb + kk * 8, wcol + j * 8)
                    for i in kiln.static_range(mt):
                        for j in kiln.static_range(nt):
                            if promote:
                                kiln.mma(part, i * nt + j, fal[i], fbh[j])
                                kiln.mma(part, i * nt + j, fah[i], fbl[j])
                                kiln.mma(part, i * nt + j, fah[i], fbh[j])
                            else:
                                kiln.mma(acc, i * nt + j, fal[i], fbh[j])
                                kiln.mma(acc, i * nt + j, fah[i], fbl[j])
                                kiln.mma(acc, i * nt + j, fah[i], fbh[j])
                if promote:
                    for i in kiln.static_range(mt * nt * 4):
                        acc[i] += part[i]
            if t < ktiles:  # split tile t into stage t % 2 (last read two steps ago)
                for j in kiln.static_range(a_loads):
                    v = tid + j * threads
                    x = pa[j]
                    hi = kiln.f32x4(kiln.tf32(x.x), kiln.tf32(x.y), kiln.tf32(x.z),
                                    kiln.tf32(x.w))
                    kiln.store(a_hi, (t % 2) * bm + v // a_vecs, v % a_vecs, hi)
                    kiln.store(a_lo, (t % 2) * bm + v // a_vecs, v % a_vecs, x - hi)
                for j in kiln.static_range(b_loads):
                    v = tid + j * threads
                    y = pb[j]
                    hi = kiln.f32x4(kiln.tf32(y.x), kiln.tf32(y.y), kiln.tf32(y.z),
                                    kiln.tf32(y.w))
                    kiln.store(b_hi, (t % 2) * bk + v // b_vecs, v % b_vecs, hi)
                    kiln.store(b_lo, (t % 2) * bk + v // b_vecs, v % b_vecs, y - hi)
            kiln.barrier()
        for i in kiln.static_range(mt):
            for j in kiln.static_range(nt):
                kiln.mma_store(c, row0 + wrow + i * 16, col0 + wcol + j * 8, acc, i * nt + j)

    matmul_tf32x3.tile = (bm, bn, bk)
    matmul_tf32x3.threads = threads
    return matmul_tf32x3
