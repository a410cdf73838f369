"""Kernels for the C API's checks (tests/aot/api_checks_client.c): plain ones (of 1 and 3
dimensions), one that needs blocks of 64 threads (built with `--block staged=64`), a debug
one writing past the end and a debug one that writes past the end of a view."""

import kiln
from kiln import f32, i32


@kiln.kernel
def fill(x: f32[:], value: f32):
    i = kiln.global_id(0)
    if i < x.shape[0]:
        x[i] = value


@kiln.kernel
def staged(x: f32[:], out: f32[:]):
    s = kiln.shared(f32, 64)
    t = kiln.thread_idx.x
    i = kiln.global_id(0)
    s[t] = x[i]
    kiln.barrier()
    out[i] = s[63 - t]


@kiln.kernel(debug=True)
def off_by_one(x: f32[:], n: i32):
    i = kiln.global_id(0)
    if i <= n:
        x[i] = f32(1)


@kiln.kernel(debug=True)
def head_of(x: f32[:], n: i32):
    seg = x[0:4]
    i = kiln.global_id(0)
    if i < n:
        seg[i] = f32(2)


@kiln.kernel
def fill3(x: f32[:, :, :]):
    i = kiln.global_id(2)
    if i < x.shape[2]:
        x[0, 0, i] = f32(3)
