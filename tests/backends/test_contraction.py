"""One floating-point contraction policy: no backend fuses `a * b + c` unless the kernel
allows it (`contract=True` or `fastmath=True`); `kiln.fma` fuses, exactly, everywhere."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import f32, f64, i32
from tests.helpers import backend_entry

BACKENDS = [name for name in ("interp", "cpu", "opencl", "cuda") if backend_entry(name).available]


@kiln.kernel
def julia(out: i32[:, :], cr: f32, ci: f32, max_iter: i32):
    x, y = kiln.global_id(0), kiln.global_id(1)
    if x < out.shape[1] and y < out.shape[0]:
        zr = -1.6 + 3.2 * x / out.shape[1]
        zi = -0.9 + 1.8 * y / out.shape[0]
        it = 0
        while it < max_iter and zr * zr + zi * zi < 4.0:
            zr, zi = zr * zr - zi * zi + cr, 2.0 * zr * zi + ci
            it += 1
        out[y, x] = it


def run_julia(device: str) -> np.ndarray:
    out = np.zeros((120, 200), np.int32)
    args = (out, np.float32(-0.8), np.float32(0.156), 300)
    kiln.launch(julia, (13, 8), (16, 16), args, device=device)
    return out


def test_escape_time_julia_set_agrees_on_every_backend() -> None:
    results = {name: run_julia(name) for name in BACKENDS}
    reference = results.pop("interp")
    assert 0 < reference.min() < reference.max() == 300  # a real picture
    for name, out in results.items():
        assert np.count_nonzero(out != reference) == 0, name


@kiln.kernel
def fused(a: f32[:], b: f32[:], c: f32[:], out: f32[:], wide: f64[:]):
    i = kiln.global_id(0)
    out[i] = kiln.fma(a[i], b[i], c[i])
    wide[i] = kiln.fma(f64(a[i]), f64(a[i]), f64(c[i]) * 1e-30)


@pytest.mark.parametrize("backend", BACKENDS)
def test_fma_rounds_once_on_every_backend(backend: str) -> None:
    eps = np.float32(2.0**-23)
    a = np.array([1 + eps, 1 + 2 * eps, 3.0, 1e30], np.float32)
    b = np.array([1 - eps, 1 + eps, 1 / 3, 1e30], np.float32)
    c = np.array([-1.0, -1.0, -1.0, -np.inf], np.float32)
    out, wide = np.zeros(4, np.float32), np.zeros(4, np.float64)
    kiln.launch(fused, 1, 4, (a, b, c, out, wide), device=backend)
    from fractions import Fraction
    exact = [float(Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z)))
             for x, y, z in zip(a[:3], b[:3], c[:3])]
    np.testing.assert_array_equal(out[:3], np.array(exact, np.float32))
    assert out[0] == -(2.0**-46) and out[3] == -np.inf  # a * b + c would give 0 and -inf
    x = float(a[1])
    assert wide[1] == float(Fraction(x) * Fraction(x) + Fraction(float(c[1]) * 1e-30))


nvrtc = pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-bindings is not installed")


def julia_ptx(**options: object) -> str:
    from kiln.builtin_backends.cuda import nvrtc as kiln_nvrtc

    source = julia.source("cuda")
    flags = kiln_nvrtc.options_for("sm_90", "ptx", bool(options.get("fastmath")),
                                   contract=bool(options.get("contract")))
    return kiln_nvrtc.compile_source(source, "julia", flags, "ptx").decode(errors="replace")


def test_cuda_fuses_only_when_the_kernel_allows_it() -> None:
    assert "fma.rn" not in julia_ptx()
    assert "fma.rn" in julia_ptx(contract=True)
    assert "fma.rn" in julia_ptx(fastmath=True)
