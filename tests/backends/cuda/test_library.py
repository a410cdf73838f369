"""The cuda target of `kiln build` (kiln/builtin_backends/cuda/library.py) without a GPU:
NVRTC builds the cubins, C programs compile against the library and, without a driver,
stop at the context saying why."""

from __future__ import annotations

import json
import subprocess

import pytest

from kiln.cli import main
from tests.aot.helpers import CHECKED, EXAMPLES, HERE, build, compile_program, nvrtc_missing
from tests.helpers import backend_entry

pytestmark = [pytest.mark.compiler, pytest.mark.slow]


@pytest.mark.skipif(bool(nvrtc_missing()), reason=nvrtc_missing())
def test_cuda_library_builds_without_a_gpu(tmp_path) -> None:
    """NVRTC makes the cubins (sm_80 and sm_90) and gcc the host code with no GPU or CUDA
    headers here; a C program compiles and links against it. Without a driver, creating a
    context fails with a message saying so (with a GPU, the parametrised tests of tests/aot
    run the program)."""
    out = tmp_path / "lib"
    build(EXAMPLES, out, "--target", "cuda", "--arch", "sm_90,sm_80")
    manifest = json.loads((out / "ex.json").read_text())
    assert manifest["architectures"] == ["sm_90", "sm_80"]
    library = (out / "libex.so").read_bytes()
    assert library.count(b"\x7fELF") >= 1 + 2 * len(manifest["entry_points"])  # the cubins
    needed = subprocess.run(["ldd", str(out / "libex.so")], capture_output=True, text=True)
    assert "libcuda" not in needed.stdout  # the driver is loaded at run time
    compile_program(HERE / "examples_client.c", out, "ex", tmp_path / "client")
    if backend_entry("cuda").available:
        return
    result = subprocess.run([str(tmp_path / "client"), str(tmp_path)], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 1
    assert result.stderr.startswith("no device: ")


@pytest.mark.skipif(bool(nvrtc_missing()), reason=nvrtc_missing())
def test_unknown_cuda_architecture_is_refused(tmp_path, capsys) -> None:
    out = tmp_path / "lib"
    assert main(["build", str(EXAMPLES), "--target", "cuda", "--arch", "sm_13", "-o",
                 str(out)]) == 2
    assert "unknown CUDA architecture 'sm_13' (this NVRTC knows sm_" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.skipif(bool(nvrtc_missing()), reason=nvrtc_missing())
def test_cuda_library_of_checked_kernels_builds_without_a_gpu(tmp_path) -> None:
    """The cuda library of the checked kernels (a debug one, a fixed block shape) builds
    with NVRTC and the C API checks program compiles against it; with a GPU the
    parametrised tests of tests/aot/test_glue.py run it, without one it stops at the
    context, saying why."""
    lib = tmp_path / "lib"
    build(CHECKED, lib, "--target", "cuda", "--arch", "sm_90", "--block", "staged=64",
          name="chk")
    header = (lib / "chk.h").read_text()
    assert "CHK_ERROR_KERNEL = 5" in header and " *   block: 64x1x1 */" in header
    assert "chk_copy_to_host(chk_context *ctx, void *host_dst, size_t host_bytes," in header
    assert "chk_register(chk_context *ctx, void *ptr, size_t nbytes);" in header
    assert "cuPointerGetAttribute" in header
    for client in ("api_checks_client.c", "registered_memory_client.c"):
        exe = tmp_path / client.removesuffix(".c")
        compile_program(HERE / client, lib, "chk", exe)
        if backend_entry("cuda").available:
            continue
        result = subprocess.run([str(exe), "device"], capture_output=True, text=True,
                                timeout=60)
        assert result.returncode == 1
        assert "chk_context_create failed (2): no NVIDIA driver" in result.stderr
