"""Several Python threads using kiln at once, as CuPy and Numba users do (a thread pool, a
data loader, Dask's threaded scheduler): each compiles its own kernels, shares one, copies
arrays in and out and launches, on every available backend; every result matches NumPy."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

import kiln
from kiln import f32
from tests.helpers import backend_entry

pytestmark = pytest.mark.slow

THREADS, ROUNDS = 8, 12
SOURCE = '''
import kiln
from kiln import f32, i32


@kiln.kernel
def scale_{k}(x: f32[:], y: f32[:], n: i32):
    i = kiln.global_id(0)
    if i < n:
        y[i] = x[i] * {k}.0 + 1.0
'''


def scale_kernel(k: int, folder: Path) -> kiln.Kernel:
    """A kernel of its own for each thread (kiln reads a kernel's source from its file)."""
    path = folder / f"scale_{k}.py"
    path.write_text(SOURCE.format(k=k))
    scope: dict[str, object] = {}
    exec(compile(path.read_text(), str(path), "exec"), scope)
    kernel = scope[f"scale_{k}"]
    assert isinstance(kernel, kiln.Kernel)
    return kernel


@pytest.mark.parametrize("backend", ["cpu", "interp", "opencl", "cuda"])
def test_threads_compile_copy_and_launch_at_once(backend: str, tmp_path: Path) -> None:
    entry = backend_entry(backend)
    if not entry.available:
        pytest.skip(f"no {backend} device here: {entry.reason}")
    dev = kiln.device(backend)
    shared = scale_kernel(100, tmp_path)
    start = threading.Barrier(THREADS)
    wrong: list[str] = []

    def work(t: int) -> None:
        rng = np.random.default_rng(t)
        own = scale_kernel(t, tmp_path)
        start.wait()  # every thread compiles and launches at the same time
        for r in range(ROUNDS):
            kernel, k = (shared, 100) if r % 2 else (own, t)
            n = int(rng.integers(1, 1 << 17))  # copies of up to 512 KiB: staged on GPUs
            x = rng.random(n).astype(np.float32)
            want = x * np.float32(k) + np.float32(1)
            out = kiln.empty(n, f32, dev)
            kernel[(n + 127) // 128, 128](kiln.to_device(x, dev), out, n)
            host = np.empty(n, np.float32)
            kiln.launch(kernel, (n + 127) // 128, 128, (x, host, n), device=dev)
            if not (np.array_equal(out.numpy(), want) and np.array_equal(host, want)):
                wrong.append(f"thread {t}, round {r}, n {n}")

    errors: list[BaseException] = []

    def run(t: int) -> None:
        try:
            work(t)
        except BaseException as exc:  # reported below, with the thread's traceback
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(t,)) for t in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    assert not wrong, wrong[:5]
