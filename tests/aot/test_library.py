"""The `library` action (kiln/aot/library.py): the manifest and the header describe every
entry point, its specialisation and its block shapes."""

from __future__ import annotations

import json
import platform

import numpy as np
import pytest

import kiln

pytestmark = [pytest.mark.compiler, pytest.mark.slow]


def test_manifest_describes_every_entry_point(examples_library) -> None:
    target, lib = examples_library
    manifest = json.loads((lib / "ex.json").read_text())
    assert manifest["target"] == target and manifest["kiln_version"] == "0.1.0"
    assert (manifest["library"], manifest["header"]) == ("libex.so", "ex.h")
    if target == "cpu":  # what -march=native meant on the build machine
        assert manifest["march"].startswith(platform.machine())
    entries = {e["kernel"]: e for e in manifest["entry_points"]}
    assert list(entries) == ["vector_add", "block_sum", "matmul_naive", "matmul_tiled",
                             "matmul_tiled_square", "mandelbrot", "spmv_csr", "julia",
                             "softmax_rows", "smooth_shard"]
    assert entries["matmul_tiled"]["block_shapes"] == [[16, 16, 1]]
    assert entries["matmul_naive"]["block_shapes"] is None
    add = entries["vector_add"]
    assert add["c_name"] == "ex_vector_add"
    assert add["specialisation"] == ["f32[:]", "f32[:]", "f32[:]", "i32"]
    assert add["parameters"][2] == {"name": "c", "kind": "array", "element_type": "f32",
                                    "ndim": 1, "written": True}
    assert add["parameters"][3] == {"name": "n", "kind": "scalar", "element_type": "i32"}
    assert [p["name"] for p in entries["matmul_tiled"]["c_parameters"]] == [
        "a", "a_shape0", "a_shape1", "b", "b_shape0", "b_shape1", "c", "c_shape0", "c_shape1"]
    header = (lib / "ex.h").read_text()
    assert "int ex_vector_add(ex_context *ctx, ex_dim3 grid, ex_dim3 block, float *a, " \
           "int32_t a_shape0, float *b, int32_t b_shape0, float *c, int32_t c_shape0, " \
           "int32_t n);" in header


def test_block_shapes_are_recorded_and_checked(checked_library) -> None:
    """`--block staged=64`: the header and manifest say so, and another block shape is
    refused with a message (not run into a bus error or wrong results)."""
    _, lib_dir = checked_library
    manifest = json.loads((lib_dir / "chk.json").read_text())
    shapes = {e["kernel"]: e["block_shapes"] for e in manifest["entry_points"]}
    assert shapes == {"fill": None, "staged": [[64, 1, 1]], "off_by_one": None,
                      "head_of": None, "fill3": None, "wide_tail": None}
    header = (lib_dir / "chk.h").read_text()
    assert " *   block: 64x1x1 */\nCHK_API int chk_staged(" in header
    assert " *   block: any shape */\nCHK_API int chk_fill(" in header
    lib = kiln.load_library(lib_dir)
    x = np.arange(256, dtype=np.float32)
    out = np.zeros(256, np.float32)
    for block in (32, 128, (64, 2)):
        with pytest.raises(kiln.LaunchError, match=r"staged: block \(.*\) is not a block "
                           r"shape it was built for \(64x1x1\)"):
            lib.staged(4, block, x, out)
    assert not out.any()
