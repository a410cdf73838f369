"""CUDA C++ to cubin or PTX with NVRTC (cuda.bindings.nvrtc); works without a GPU.

Errors become `BackendCompileError` at the user's Python line: the generated source carries
`#line` directives, so NVRTC reports `file.py(LINE): error: ...`.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from ...codegen.diagnostics import compile_error


@cache
def _api() -> Any:
    from cuda.bindings import nvrtc

    return nvrtc


@cache
def version() -> tuple[int, int]:
    """NVRTC's (major, minor) version."""
    _, major, minor = _api().nvrtcVersion()
    return int(major), int(minor)


def supported_architectures() -> list[int]:
    """The architectures this NVRTC compiles for, as major * 10 + minor (e.g. 90)."""
    _, archs = _api().nvrtcGetSupportedArchs()
    return [int(a) for a in archs]


def options_for(arch: str, target: str, fastmath: bool = False,
                extra: tuple[str, ...] = (), contract: bool = False) -> list[str]:
    """NVRTC options: `arch` like "sm_90"; PTX targets the matching virtual `compute_NN`.
    No fused multiply-adds unless the kernel allows them (`contract=True`, `fastmath=True`):
    kiln's one contraction policy, so results match the other backends bit for bit."""
    gpu = arch if target == "cubin" else arch.replace("sm_", "compute_")
    opts = [f"--gpu-architecture={gpu}", "--std=c++17"]
    if fastmath:
        opts.append("--use_fast_math")
    elif not contract:
        opts.append("--fmad=false")
    return opts + list(extra)


def compile_source(source: str, name: str, options: list[str], target: str = "cubin") -> bytes:
    """Compile one translation unit; return the cubin or the PTX (NUL-terminated text)."""
    nv = _api()
    err, prog = nv.nvrtcCreateProgram(source.encode(), f"{name}.cu".encode(), 0, [], [])
    _check(err, "nvrtcCreateProgram")
    try:
        opts = [o.encode() for o in options]
        err, = nv.nvrtcCompileProgram(prog, len(opts), opts)
        if err != nv.nvrtcResult.NVRTC_SUCCESS:
            raise compile_error(_log(prog), source, "NVRTC")
        size_fn, get_fn = ((nv.nvrtcGetCUBINSize, nv.nvrtcGetCUBIN) if target == "cubin"
                           else (nv.nvrtcGetPTXSize, nv.nvrtcGetPTX))
        err, size = size_fn(prog)
        _check(err, "nvrtcGet size")
        out = b" " * size
        _check(get_fn(prog, out)[0], "nvrtcGet code")
        return out
    finally:
        nv.nvrtcDestroyProgram(prog)


def _log(prog: Any) -> str:
    nv = _api()
    _, size = nv.nvrtcGetProgramLogSize(prog)
    log = b" " * size
    nv.nvrtcGetProgramLog(prog, log)
    return log.rstrip(b"\x00").decode(errors="replace")


def _check(err: Any, what: str) -> None:
    nv = _api()
    if err != nv.nvrtcResult.NVRTC_SUCCESS:
        _, text = nv.nvrtcGetErrorString(err)
        raise RuntimeError(f"{what} failed: {text.decode() if text else err}")

