"""What the AOT tests share: the targets that run here, `kiln build` and C programs
compiled against its libraries, and what the C API's checks must print."""

from __future__ import annotations

import ctypes
import os
import subprocess
from pathlib import Path

import pytest

from kiln.cli import main
from tests.helpers import REPO, backend_entry

HERE = Path(__file__).resolve().parent
EXAMPLES = REPO / "kiln" / "examples.py"


def opencl_loader_missing() -> str:
    """Why a C program cannot use OpenCL here ("" when it can)."""
    entry = backend_entry("opencl")
    if not entry.available:
        return f"the opencl backend is unavailable: {entry.reason}"
    try:
        ctypes.CDLL("libOpenCL.so.1")
    except OSError:
        return "no system OpenCL ICD loader (libOpenCL.so.1; Debian: ocl-icd-libopencl1)"
    return ""


def nvrtc_missing() -> str:
    try:
        from kiln.builtin_backends.cuda import nvrtc

        nvrtc.version()
    except (ImportError, RuntimeError, OSError) as exc:
        return f"no NVRTC (pip install 'kiln[cuda]'): {exc}"
    return ""


def target_params() -> list:
    """cpu and opencl (PoCL) run here and in CI; cuda runs where there is a GPU."""
    cpu, cuda = backend_entry("cpu"), backend_entry("cuda")
    missing_cl = opencl_loader_missing()
    return [
        pytest.param("cpu", marks=pytest.mark.skipif(
            not cpu.available, reason=f"no C compiler with OpenMP: {cpu.reason}")),
        pytest.param("opencl", marks=pytest.mark.skipif(bool(missing_cl), reason=missing_cl)),
        pytest.param("cuda", marks=pytest.mark.skipif(
            not cuda.available, reason=f"no CUDA GPU (the cuda library is built and compiled "
            f"against without one in tests/backends/cuda/test_library.py): {cuda.reason}")),
    ]


def build(module: Path, out: Path, *args: str, name: str = "ex") -> None:
    status = main(["build", str(module), "-o", str(out), "--name", name, *args])
    assert status == 0


def compile_program(source: Path, lib_dir: Path, name: str, exe: Path, *flags: str) -> None:
    """gcc, strict, against the header; linked to libNAME.so with an rpath."""
    cmd = ["gcc", "-std=c11", "-Wall", "-Wextra", "-Wpedantic", "-Werror", *flags, f"-I{lib_dir}",
           str(source), f"-L{lib_dir}", f"-l{name}", f"-Wl,-rpath,{lib_dir}", "-o", str(exe)]
    result = subprocess.run(cmd, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def run_program(exe: Path, *args: str) -> str:
    result = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


CHECKED = HERE / "checked_kernels.py"


API_CHECKS = {
    "create_null": (1, "context_create: ctx is NULL"),
    "create_negative_device": (1, "-1"),
    "create_missing_device": (1, "1000"),
    "create_left_null": (0, ""),
    "synchronize_null": (1, "synchronize: the context is NULL"),
    "synchronize_unknown": (1, "is not a live context (chk_context_create; destroyed?)"),
    "alloc_null_context": (-1, "alloc: the context is NULL"),
    "alloc_unknown_context": (-1, "alloc: 0x"),
    "alloc_huge": (-1, "alloc: 18446744073709551615 bytes"),
    "free_twice": (1, "is not memory of this context (chk_alloc; freed twice?)"),
    "free_unknown": (1, "is not memory of this context"),
    "free_null_context": (1, "free: the context is NULL"),
    "free_unknown_context": (1, "free: 0x"),
    "free_null_pointer": (0, ""),
    "to_device_null_context": (1, "copy_to_device: the context is NULL"),
    "to_device_unknown_dst": (1, "copy_to_device: device_dst (0x"),
    "to_device_freed_dst": (1, "is not memory of this context"),
    "to_device_too_many": (1, "copy_to_device: 4000 bytes at device_dst, which has 40 bytes"),
    "to_device_null_src": (1, "copy_to_device: host_src is NULL"),
    "to_device_null_dst": (1, "copy_to_device: device_dst is NULL"),
    "to_host_small_buffer": (1, "copy_to_host: 4000 bytes into host_dst of 40 bytes"),
    "to_host_too_many": (1, "copy_to_host: 4000 bytes at device_src, which has 40 bytes"),
    "to_host_unknown_src": (1, "copy_to_host: device_src (0x"),
    "to_host_null_dst": (1, "copy_to_host: host_dst is NULL"),
    "to_host_null_context": (1, "copy_to_host: the context is NULL"),
    "within_too_many": (1, "copy_device_to_device: 4000 bytes at device_dst"),
    "within_unknown": (1, "copy_device_to_device: device_src (0x"),
    "within_freed": (1, "copy_device_to_device: device_dst (0x"),
    "launch_null_context": (1, "fill: the context is NULL"),
    "launch_unknown_context": (1, "is not a live context"),
    "launch_zero_grid": (1, "fill: grid (0, 1, 1): each dimension must be 1 to 2^31-1"),
    "launch_grid_times_block": (1, "fill: 67108864 blocks of 64 threads along x is over "
                                "2^31-1 threads per axis"),
    "launch_tall_grid": (1, "fill: grid (1, 2147483648, 1)"),
    "launch_block_over_device": (1, "fill: block (1048576, 1, 1) has more than the device's"),
    "launch_block_y_over": (1, "fill: block (1, 70000, 1) has more than the device's"),
    "launch_grid_y_over_limit": (1, "fill: grid dimension y is 70000, over the device's "
                                 "limit of 65535"),
    "launch_block_z_over_limit": (1, "fill: block dimension z is 128, over the device's limit "
                                  "of 64"),
    "launch_negative_extent": (1, "fill: argument 'x': extent 0 is -1, not >= 0"),
    "launch_extent_over_memory": (1, "fill: argument 'x' has 1000 elements of 4 bytes; its "
                                  "memory has 40 bytes from there"),
    "launch_null_array": (1, "fill: argument 'x' is NULL with 1000 elements"),
    "launch_extents_wrap": (1, "fill3: argument 'x' has more than 2^63 bytes of elements"),
    "within_itself": (0, ""),
    "within_overlap": (1, "copy_device_to_device: 16 bytes from 0x"),
    "launch_unknown_array": (1, "fill: argument 'x' (0x"),
    "launch_freed_array": (1, "is not memory of this context"),
    "launch_wrong_block_shape": (1, "staged: block (32, 1, 1) is not a block shape it was "
                                 "built for (64x1x1)"),
    "launch_debug_out_of_bounds": (5, "checked_kernels.py:30:9: index out of bounds: kernel "
                                   "`off_by_one`: thread (40, 0, 0) of block (15, 0, 0) wrote "
                                   "`x[1000]`, outside its 1000 elements"),
    "synchronize_destroyed": (1, "is not a live context"),
    "launch_destroyed": (1, "is not a live context"),
}
"""What tests/aot/api_checks_client.c's calls must return: the status (-1: a NULL pointer
with a message) and part of the message."""


TARGET_API_CHECKS = {"opencl": {"launch_grid_y_over_limit": (0, ""),
                                "within_overlap": (1, "copy_device_to_device: device_dst (0x"),
                                "launch_block_z_over_limit": (0, "")}}
"""Where a target's limits differ (OpenCL grids: 2^31-1 along every axis; PoCL blocks:
4096 threads along every axis), as kiln.launch's do, and where OpenCL has no pointers into
a buffer."""


def sanitizer_flags() -> list[str]:
    """AddressSanitizer when this gcc can link it (Debian's gcc can)."""
    probe = subprocess.run(["gcc", "-fsanitize=address", "-x", "c", "-", "-o", os.devnull],
                           input="int main(void) { return 0; }", capture_output=True, text=True)
    return ["-fsanitize=address", "-fno-omit-frame-pointer", "-g"] if probe.returncode == 0 \
        else []


def check_api_output(stdout: str, target: str) -> None:
    check_client_output(stdout, {**API_CHECKS, **TARGET_API_CHECKS.get(target, {})})


def check_client_output(stdout: str, expected: dict[str, tuple[int, str]]) -> None:
    """A client's `LABEL STATUS MESSAGE` lines, then `ok`: every label expected, with its
    status and part of its message."""
    lines = stdout.splitlines()
    assert lines and lines[-1] == "ok", stdout
    got = {}
    for line in lines[:-1]:
        label, status, message = (line.split(" ", 2) + [""])[:3]
        got[label] = (int(status), message)
    assert set(got) == set(expected), stdout
    for label, (status, part) in expected.items():
        assert got[label][0] == status and part in got[label][1], (label, got[label])
