"""The cpu target of `kiln build` (kiln/builtin_backends/cpu/library.py): warp operations
run as in-process cpu launches run them."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import kiln
from tests.aot.helpers import build
from tests.helpers import backend_entry

pytestmark = [pytest.mark.compiler, pytest.mark.slow]


WARP_KERNEL = '''
import kiln
from kiln import f32


@kiln.kernel
def lanes(x: f32[:], out: f32[:]):
    i = kiln.global_id(0)
    out[i] = kiln.shuffle_down(x[i], 1) * f32(kiln.warp_size) + f32(kiln.lane_id)
'''


@pytest.mark.skipif(not backend_entry("cpu").available, reason="no C compiler with OpenMP")
def test_a_cpu_library_runs_warp_operations_as_in_process_launches_do(tmp_path) -> None:
    """cpu threads run as loops, so their warps have one thread: the build lowers warp
    operations as in-process cpu compiles do (it refused them), with the same results."""
    module = tmp_path / "warps.py"
    module.write_text(WARP_KERNEL)
    build(module, tmp_path / "lib", "--target", "cpu", name="warps")
    x = np.arange(128, dtype=np.float32)
    out = np.zeros(128, np.float32)
    kiln.load_library(tmp_path / "lib").lanes(2, 64, x, out)
    np.testing.assert_array_equal(out, x)  # one lane: shuffle_down keeps its own value
    spec = importlib.util.spec_from_file_location("warps", module)
    assert spec is not None and spec.loader is not None
    warps = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(warps)
    in_process = np.zeros(128, np.float32)
    kiln.launch(warps.lanes, 2, 64, (x, in_process), device="cpu")
    np.testing.assert_array_equal(out, in_process)
