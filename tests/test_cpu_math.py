"""The cpu backend's math: fastmath kernels that vectorise libm calls into glibc's vector
math library (they must load)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import backend_entry

import kiln
from kiln import f32, f64


@pytest.fixture(scope="module")
def cpu() -> kiln.Device:
    entry = backend_entry("cpu")
    if not entry.available:
        pytest.skip(f"cpu backend unavailable: {entry.reason}")
    return kiln.device("cpu")


@kiln.kernel(fastmath=True)
def fast_math(x: f32[:], out: f32[:]):
    i = kiln.global_id(0)
    out[i] = kiln.sin(x[i]) + kiln.cos(x[i]) + kiln.exp(x[i]) + kiln.log(x[i])


@kiln.kernel(fastmath=True)
def fast_math_f64(x: f64[:], out: f64[:]):
    i = kiln.global_id(0)
    out[i] = kiln.exp(x[i]) + kiln.log(x[i]) + kiln.sin(x[i])


def test_fastmath_kernels_load_with_vector_math(cpu: kiln.Device) -> None:
    """gcc turns libm calls in vectorised loops into glibc vector math calls under
    -ffast-math (`_ZGVdN4v_exp` for the f64 kernel); the library must link libmvec to
    load."""
    x = np.linspace(0.5, 4.0, 1024, dtype=np.float32)
    w = x.astype(np.float64)
    out, wide = kiln.to_device(np.zeros_like(x), cpu), kiln.to_device(np.zeros_like(w), cpu)
    fast_math[4, 256](kiln.to_device(x, cpu), out)
    fast_math_f64[4, 256](kiln.to_device(w, cpu), wide)
    np.testing.assert_allclose(out.numpy(), np.sin(x) + np.cos(x) + np.exp(x) + np.log(x),
                               rtol=1e-5)
    np.testing.assert_allclose(wide.numpy(), np.exp(w) + np.log(w) + np.sin(w), rtol=1e-12)
