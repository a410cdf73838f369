"""Kernels the C program in unseen_client.c was written without seeing: it knows only the
header and manifest that `kiln build` writes for them (tests/aot/test_build.py)."""

import kiln
from kiln import f64, i32, u8


@kiln.kernel
def saxpy(alpha, x, y, out, n):
    i = kiln.global_id(0)
    if i < n:
        out[i] = alpha * x[i] + y[i]


@kiln.kernel
def box_blur(src: f64[:, :], dst: f64[:, :], radius: kiln.constexpr):
    col = kiln.global_id(0)
    row = kiln.global_id(1)
    h, w = src.shape[0], src.shape[1]
    if row < h and col < w:
        acc = f64(0)
        count = 0
        for dr in range(-radius, radius + 1):
            for dc in range(-radius, radius + 1):
                r, c = row + dr, col + dc
                if r >= 0 and r < h and c >= 0 and c < w:
                    acc += src[r, c]
                    count += 1
        dst[row, col] = acc / f64(count)


@kiln.kernel
def histogram(data: u8[:], bins: i32[:], n: i32):
    i = kiln.global_id(0)
    stride = kiln.global_size(0)
    while i < n:
        kiln.atomic_add(bins, i32(data[i]) % bins.shape[0], 1)
        i += stride
