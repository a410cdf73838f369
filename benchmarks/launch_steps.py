"""Where a cuda launch's host time goes, step by step, in one process.

Every variant runs interleaved with the others (rounds of 2000 calls each), so the numbers
compare within the run; between processes these VMs move by up to 40%. Variants: the
driver call with prepacked parameters through cuda-bindings and through kiln's C shim, the
launcher lookup, the plan's checks alone, the plan with the launch as a separate function
or inlined (with the shim, and with cuda-bindings: built with the shim switched off for
those plans), the plain `kernel[grid, block](...)` with a fixed grid and with a grid that
changes every call, `prepare()`, CuPy's RawKernel (fixed and changing grid) and PyTorch's
add.

    python benchmarks/launch_steps.py [ROUNDS]

Exits at once (status 0) where no CUDA GPU is available.
"""

from __future__ import annotations

import ctypes
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from common import backend_device

import kiln
from kiln import f32
from kiln.examples import vector_add
from kiln.execution import fastpath

GRID, BLOCK = (1, 1, 1), (256, 1, 1)


class _Plans:
    """Stands in for a kernel's plan table (fastpath.remember stores plans here)."""

    name = "vector_add"

    def __init__(self) -> None:
        self.launch_plans: dict[Any, Any] = {}


def variants(dev: kiln.Device) -> dict[str, Callable[[], Any]]:
    from cuda.bindings import driver

    import kiln.builtin_backends.cuda.launch as cuda_launch
    from kiln.builtin_backends.cuda import shim

    a, b, c = (kiln.zeros(256, f32, dev) for _ in range(3))
    n = 256
    args = (a, b, c, n)
    vector_add[1, 256](*args)
    (types, *_), spec = next(iter(vector_add.specializations.items()))
    routine, handle = spec.routine, dev.default_stream.handle  # kiln's stream handle
    stream = handle.stream  # the driver's, for the raw calls
    values = [ctypes.c_uint64(a.buffer.ptr), ctypes.c_int32(n), ctypes.c_uint64(b.buffer.ptr),
              ctypes.c_int32(n), ctypes.c_uint64(c.buffer.ptr), ctypes.c_int32(n),
              ctypes.c_int32(n)]
    pointers = (ctypes.c_void_p * 7)(*[ctypes.addressof(v) for v in values])
    address = ctypes.addressof(pointers)
    launch, function = driver.cuLaunchKernel, routine.function
    keep = (values, pointers)  # the prepacked block must outlive this function
    out: dict[str, Callable[[], Any]] = {
        "cuda-bindings cuLaunchKernel, prepacked": lambda keep=keep: launch(
            function, *GRID, *BLOCK, 0, stream, address, 0),
    }
    run = shim.shim()
    if run is not None:
        record = shim.record(function, GRID, BLOCK, 0, stream, address)
        out["kiln's C shim, prepacked"] = lambda keep=keep: run(record[1])
    plans = _Plans()
    out["kernel[1, 256]: launcher lookup"] = lambda: vector_add[1, 256]
    dims = (GRID, GRID), (BLOCK, BLOCK)
    fastpath.remember(plans, ("checks", None), *dims, args, types, dev,
                      lambda g, b, values: None, convert=False)
    target = routine.launch_target(args, handle)
    fastpath.remember(plans, ("call", None), *dims, args, types, dev, target, convert=False)
    shim_of = cuda_launch.shim
    cuda_launch.shim = lambda: None  # the same plan, calling cuda-bindings
    try:
        fastpath.remember(plans, ("bindings", None), *dims, args, types, dev,
                          routine.launch_target(args, handle), convert=False)
    finally:
        cuda_launch.shim = shim_of
    for key, label in (("checks", "plan: checks alone"),
                       ("call", "plan, then pack + launch function"),
                       ("bindings", "the same, calling cuda-bindings")):
        out[label] = lambda p=plans.launch_plans[(key, None)]: p(GRID, BLOCK, args)
    out["kiln vector_add[1, 256](a, b, c, n)"] = lambda: vector_add[1, 256](a, b, c, n)
    grids = iter(_cycle(64))
    out["kiln vector_add[g, 256](...), g changes every call"] = (
        lambda: vector_add[next(grids), 256](a, b, c, n))
    out["kiln vector_add.prepare(...)()"] = vector_add.prepare(1, 256, a, b, c, n)
    out.update(_peers(a, b, c, n))
    return out


def _cycle(count: int) -> Any:
    """1, 2, ..., count, 1, 2, ...: a grid that differs from the last launch's."""
    while True:
        yield from range(1, count + 1)


def _peers(a: Any, b: Any, c: Any, n: int) -> dict[str, Callable[[], Any]]:
    out: dict[str, Callable[[], Any]] = {}
    try:
        import cupy as cp

        source = r"""extern "C" __global__ void vector_add(const float *a, const float *b,
                                                        float *c, int n) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) c[i] = a[i] + b[i];
        }"""
        twin = cp.RawModule(code=source).get_function("vector_add")
        ca, cb, cc = cp.asarray(a), cp.asarray(b), cp.asarray(c)
        n32 = np.int32(n)
        out["CuPy RawKernel"] = lambda: twin((1,), (256,), (ca, cb, cc, n32))
        grids = iter(_cycle(64))
        out["CuPy RawKernel, grid changes every call"] = (
            lambda: twin((next(grids),), (256,), (ca, cb, cc, n32)))
        import torch

        ta, tb, tc = (torch.as_tensor(x, device="cuda") for x in (ca, cb, cc))
        out["PyTorch torch.add(out=)"] = lambda: torch.add(ta, tb, out=tc)
    except ImportError as exc:
        print(f"peer missing: {exc}")
    return out


def main() -> int:
    dev = backend_device("cuda", "launch_steps")
    if dev is None:
        return 0
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 11
    count = 2000
    table = variants(dev)
    times: dict[str, list[float]] = {name: [] for name in table}
    for _ in range(rounds):
        for name, fn in table.items():
            dev.synchronize()
            start = time.perf_counter()
            for _ in range(count):
                fn()
            times[name].append((time.perf_counter() - start) / count * 1e6)
            dev.synchronize()
    print(f"host us per call: median and minimum of {rounds} interleaved rounds of {count}")
    print("| step | median | min |\n|---|---|---|")
    for name, xs in times.items():
        print(f"| {name} | {statistics.median(xs):.2f} | {min(xs):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
