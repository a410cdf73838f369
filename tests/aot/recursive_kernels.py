"""A recursive kernel for the opencl library: OpenCL C forbids recursion, so the build
must inline `fib` to its max_depth, as in-process compiles do."""

import kiln
from kiln import i32


@kiln.func(max_depth=12)
def fib(n: i32) -> i32:
    if n < 2:
        return n
    return fib(n - 1) + fib(n - 2)


@kiln.kernel
def fibs(out: i32[:], n: i32):
    i = kiln.global_id(0)
    if i < n:
        out[i] = fib(i)
