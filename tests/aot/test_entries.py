"""Entry points (kiln/aot/entries.py): the C types of kernel parameters (f16 and bf16 as
their bits, bool), through a built library."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.aot.helpers import build, target_params

pytestmark = [pytest.mark.compiler, pytest.mark.slow]


HALF_KERNELS = '''
import kiln
from kiln import bf16, f16, f32

@kiln.kernel
def mix(x: f16[:], y: bf16[:], flag: bool, h: f16, b: bf16, out: f32[:]):
    i = kiln.global_id(0)
    if i < out.shape[0]:
        out[i] = f32(x[i]) * f32(h) + (f32(y[i]) * f32(b) if flag else f32(0))
'''


@pytest.mark.parametrize("target", target_params())
def test_half_precision_and_bool_values_travel_as_bits(target, tmp_path) -> None:
    """f16 and bf16 arrays and scalars (their 16 bits in the header) and a bool scalar,
    through load_library, against NumPy. An OpenCL device without f16 (PoCL on some
    CPUs) refuses the kernel when the context is created, saying why."""
    import ml_dtypes

    module = tmp_path / "halves.py"
    module.write_text(HALF_KERNELS)
    build(module, tmp_path / "lib", "--target", target, name="halves")
    header = (tmp_path / "lib" / "halves.h").read_text()
    assert ("uint16_t *x, int32_t x_shape0, uint16_t *y, int32_t y_shape0, bool flag, "
            "uint16_t h, uint16_t b, float *out") in header
    if target == "opencl" and not kiln.device("opencl").capabilities.fp16:
        with pytest.raises(RuntimeError, match="(?s)building mix for the device failed.*fp16"):
            kiln.load_library(tmp_path / "lib")
        return
    lib = kiln.load_library(tmp_path / "lib")
    rng = np.random.default_rng(7)
    n = 300
    x = rng.standard_normal(n).astype(np.float16)
    y = rng.standard_normal(n).astype(ml_dtypes.bfloat16)
    for flag in (True, False):
        out = np.zeros(n, np.float32)
        lib.mix(3, 128, x, y, flag, 1.5, -2.25, out)
        expected = x.astype(np.float32) * np.float32(1.5)
        if flag:
            expected = expected + y.astype(np.float32) * np.float32(-2.25)
        np.testing.assert_allclose(out, expected, rtol=1e-6)
