"""The host C every target shares (kiln/aot/glue.py): C programs call each entry point with
bad arguments and on memory they register, and each call returns its status and message
(under AddressSanitizer, and valgrind where installed)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.aot.helpers import (
    API_CHECKS,
    CHECKED,
    HERE,
    build,
    check_api_output,
    check_client_output,
    compile_program,
    sanitizer_flags,
    target_params,
)
from tests.helpers import backend_entry

pytestmark = [pytest.mark.compiler, pytest.mark.slow]


@pytest.mark.parametrize("target", target_params())
def test_c_api_refuses_bad_calls_without_crashing(target, tmp_path) -> None:
    """Every entry point, from C, with NULL and unknown contexts and pointers, double
    frees, bad devices, copies past either end, launches kiln.launch refuses, a wrong block
    shape and a debug kernel writing past the end: each returns its error code and a
    message, and the context still works afterwards. The program is built with
    AddressSanitizer (so a heap overflow fails it)."""
    lib = tmp_path / "lib"
    build(CHECKED, lib, "--target", target, "--block", "staged=64", name="chk")
    exe = tmp_path / "client"
    compile_program(HERE / "api_checks_client.c", lib, "chk", exe, *sanitizer_flags())
    # drivers keep what they load (leaks), and CUDA maps memory where ASan's gap would be
    env = {**os.environ, "ASAN_OPTIONS": "detect_leaks=0:protect_shadow_gap=0"}
    result = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    check_api_output(result.stdout, target)


REGISTRATION_REFUSALS = {
    "register_null_context": (1, "register: the context is NULL"),
    "register_null": (1, "register: ptr is NULL"),
    "register_zero_bytes": (1, "register: nbytes is 0 at 0x"),
    "register_wraps": (1, "register: 64 bytes at 0xfffffffffffffff7 run past the end of the "
                       "address space"),
    "register_allocation": (1, "overlap memory the context has already (chk_alloc or "
                            "chk_register)"),
}


REGISTERED_CHECKS = {
    **REGISTRATION_REFUSALS,
    "register": (0, ""),
    "register_overlap": (1, "register: 16 bytes at 0x"),
    "register_twice": (1, "register: 4096 bytes at 0x"),
    "launch_past_registered": (1, "fill: argument 'x' has 1024 elements of 4 bytes; its memory "
                               "has 4056 bytes from there"),
    "launch_misaligned": (1, "is not aligned to its 4-byte elements"),
    "to_host_past_registered": (1, "copy_to_host: 4096 bytes at device_src, which has 4092 "
                                "bytes from there"),
    "to_device_past_registered": (1, "copy_to_device: 4096 bytes at device_dst, which has "
                                  "4092 bytes"),
    "within_past_registered": (1, "copy_device_to_device: 4096 bytes at device_dst, which has "
                               "4092 bytes"),
    "free_registered": (1, "is registered memory, which the program owns (chk_unregister "
                        "forgets it)"),
    "unregister_allocation": (1, "is memory from chk_alloc (chk_free releases it)"),
    "unregister_inside": (1, "is not memory registered with this context (chk_register"),
    "unregister_null_context": (1, "unregister: the context is NULL"),
    "unregister_twice": (1, "is not memory registered with this context"),
    "launch_unregistered": (1, "is not memory of this context (chk_alloc or chk_register)"),
    "to_host_unregistered": (1, "copy_to_host: device_src (0x"),
}
"""What tests/aot/registered_memory_client.c's refused calls must return."""


TARGET_REGISTERED_CHECKS = {
    "opencl": {**REGISTRATION_REFUSALS,
               "register": (1, "the opencl target uses only memory from chk_alloc")},
    "cuda": {**REGISTERED_CHECKS,
             "register_past_allocation": (1, "register: 8192 bytes at 0x"),
             "register_host_pointer": (1, "is not device memory")},
}
"""The opencl target registers nothing; cuda checks device memory with the driver."""


@pytest.mark.parametrize("target", target_params())
def test_c_program_launches_on_memory_it_registers(target, tmp_path) -> None:
    """The program's own memory (cpu: malloc'd; cuda: device memory another context
    allocated) registered with chk_register: launches and copies on it give the expected
    values (on cpu in the program's array itself), and access past its end, a misaligned
    array, chk_free of it, unregistering twice and use after chk_unregister are refused.
    OpenCL refuses every registration. Built with AddressSanitizer."""
    lib = tmp_path / "lib"
    build(CHECKED, lib, "--target", target, "--block", "staged=64", name="chk")
    exe = tmp_path / "client"
    compile_program(HERE / "registered_memory_client.c", lib, "chk", exe, *sanitizer_flags())
    env = {**os.environ, "ASAN_OPTIONS": "detect_leaks=0:protect_shadow_gap=0"}
    mode = "device" if target == "cuda" else "host"
    result = subprocess.run([str(exe), mode], capture_output=True, text=True, timeout=300,
                            env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    check_client_output(result.stdout, TARGET_REGISTERED_CHECKS.get(target, REGISTERED_CHECKS))


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
@pytest.mark.skipif(not backend_entry("cpu").available, reason="no C compiler with OpenMP")
def test_c_api_checks_run_clean_under_valgrind(tmp_path) -> None:
    """The same programs (bad calls; registered memory) against the cpu library under
    valgrind's memcheck: no invalid read or write anywhere, the library's own included
    (OpenCL and CUDA drivers are too slow or noisy under it)."""
    lib = tmp_path / "lib"
    build(CHECKED, lib, "--target", "cpu", "--block", "staged=64", name="chk")
    for client, expected in (("api_checks_client.c", {**API_CHECKS}),
                             ("registered_memory_client.c", REGISTERED_CHECKS)):
        exe = tmp_path / client.removesuffix(".c")
        compile_program(HERE / client, lib, "chk", exe)
        result = subprocess.run(["valgrind", "--error-exitcode=1", "--quiet", str(exe), "host"],
                                capture_output=True, text=True, timeout=600,
                                env={**os.environ, "OMP_NUM_THREADS": "2"})
        assert result.returncode == 0, result.stdout + result.stderr
        check_client_output(result.stdout, expected)
