"""The cpu backend's math: its own vectorisable f32 exp/log (accuracy against float64
NumPy, specials), the softmax example, and fastmath kernels that vectorise libm calls
into glibc's vector math library (they must load)."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import f32, f64
from kiln.examples import BLOCK, softmax_rows
from tests.helpers import backend_entry

pytestmark = pytest.mark.compiler


@pytest.fixture(scope="module")
def cpu() -> kiln.Device:
    entry = backend_entry("cpu")
    if not entry.available:
        pytest.skip(f"cpu backend unavailable: {entry.reason}")
    return kiln.device("cpu")


@kiln.kernel
def exp_log(x: f32[:], e: f32[:], g: f32[:]):
    i = kiln.global_id(0)
    if i < len(x):
        e[i] = kiln.exp(x[i])
        g[i] = kiln.log(x[i])


def ulp_error(actual: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """|actual - exact| in units of the last place of the f32 nearest `exact` (of the
    smallest subnormal below the normal range)."""
    nearest = exact.astype(np.float32)
    unit = np.where(np.abs(exact) >= np.finfo(np.float32).tiny,
                    np.spacing(np.abs(nearest)).astype(np.float64), 2.0**-149)
    return np.abs(actual.astype(np.float64) - exact) / unit


def test_exp_and_log_are_within_one_ulp(cpu: kiln.Device) -> None:
    bits = np.arange(0, 2**32, 4099, dtype=np.uint64).astype(np.uint32)
    x = bits.view(np.float32)
    x = x[np.isfinite(x)]
    e, g = (kiln.to_device(np.zeros_like(x), cpu) for _ in range(2))
    exp_log[(x.size + 255) // 256, 256](kiln.to_device(x, cpu), e, g)
    e_out, g_out = e.numpy(), g.numpy()
    wide = x.astype(np.float64)
    in_range = (x > -103.9) & (x < 88.72)
    assert ulp_error(e_out[in_range], np.exp(wide[in_range])).max() <= 1.0
    positive = x > 0
    assert ulp_error(g_out[positive], np.log(wide[positive])).max() <= 1.0
    assert (e_out[x >= 88.73] == np.inf).all() and (e_out[x <= -104] == 0).all()
    assert np.isnan(g_out[x < 0]).all()


def test_exp_and_log_specials(cpu: kiln.Device) -> None:
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, 1e-45, -1.0], np.float32)
    e, g = (kiln.to_device(np.zeros_like(x), cpu) for _ in range(2))
    exp_log[1, 8](kiln.to_device(x, cpu), e, g)
    with np.errstate(all="ignore"):
        np.testing.assert_allclose(e.numpy(), np.exp(x), rtol=2.4e-7)  # within 1 ulp
        np.testing.assert_allclose(g.numpy(), np.log(x), rtol=2.4e-7)


@pytest.mark.parametrize("rows, cols", [(64, 1024), (7, 300)])
def test_softmax_rows_matches_numpy(cpu: kiln.Device, rows: int, cols: int) -> None:
    x = (np.random.default_rng(rows).standard_normal((rows, cols)) * 4).astype(np.float32)
    y = kiln.to_device(np.zeros_like(x), cpu)
    softmax_rows[rows, BLOCK](kiln.to_device(x, cpu), y)
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(y.numpy(), e / e.sum(axis=1, keepdims=True), rtol=1e-5,
                               atol=1e-9)


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
