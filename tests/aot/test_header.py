"""`NAME.h` (kiln/aot/header.py): a C program written from the header alone gets NumPy's
answers; only debug kernels' entries declare the checks."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.aot.helpers import CHECKED, HERE, build, compile_program, run_program, target_params

pytestmark = [pytest.mark.compiler, pytest.mark.slow]


@pytest.mark.parametrize("target", target_params())
def test_c_program_from_the_header_alone_gets_numpys_answers(target, tmp_path) -> None:
    """The issue's "done when": a C program written from the header and manifest alone
    (tests/aot/unseen_client.c), built outside the repository against a library of
    kernels it has not seen (a generic saxpy given types, a constexpr box blur, an atomic
    histogram), gets NumPy's answers."""
    work = tmp_path / "outside"
    work.mkdir()
    (work / "kernels.py").write_text((HERE / "unseen_kernels.py").read_text())
    (work / "client.c").write_text((HERE / "unseen_client.c").read_text())
    build(work / "kernels.py", work / "lib", "--target", target, "--kernel",
          "saxpy:f32,f32[:],f32[:],f32[:],i32", "--kernel", "box_blur:f64[:, :],f64[:, :],2",
          "--kernel", "histogram", name="kernels")
    manifest = json.loads((work / "lib" / "kernels.json").read_text())
    assert [e["c_name"] for e in manifest["entry_points"]] == [
        "kernels_saxpy", "kernels_box_blur", "kernels_histogram"]
    compile_program(work / "client.c", work / "lib", "kernels", work / "client")
    out = work / "run"
    out.mkdir()
    assert run_program(work / "client", str(out)).strip() == "ok"

    x, y, got = (np.fromfile(out / f"{n}.f32", np.float32) for n in ("x", "y", "out"))
    np.testing.assert_array_equal(got, np.float32(1.5) * x + y)
    h, w, r = 123, 77, 2
    src = np.fromfile(out / "src.f64").reshape(h, w)
    padded, ones = np.pad(src, r), np.pad(np.ones_like(src), r)
    shifts = [(a, b) for a in range(2 * r + 1) for b in range(2 * r + 1)]
    total = sum(padded[a:a + h, b:b + w] for a, b in shifts)
    count = sum(ones[a:a + h, b:b + w] for a, b in shifts)
    np.testing.assert_allclose(np.fromfile(out / "dst.f64").reshape(h, w), total / count,
                               rtol=1e-12)
    data = np.fromfile(out / "data.u8", np.uint8).astype(np.int32)
    np.testing.assert_array_equal(np.fromfile(out / "bins.i32", np.int32),
                                  np.bincount(data % 17, minlength=17))


def test_a_non_debug_build_has_no_checks(tmp_path) -> None:
    """Only debug kernels pay for the checks: the plain ones' entries take no status."""
    lib = tmp_path / "lib"
    build(CHECKED, lib, "--target", "cpu", "--kernel", "fill", name="plain")
    header = (lib / "plain.h").read_text()
    assert "indices are checked" not in header and "kiln_status" not in header
