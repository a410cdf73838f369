"""Building OpenCL programs: build environment, binaries through the compile cache, logs.

The compiler is the device's driver, so the build environment is the platform, the device
and the driver version, with the build options; program binaries are cached under that
key. A build log's first error is mapped back to the user's Python line (the emitter writes
`#line` directives) by the shared diagnostics.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...codegen.diagnostics import compile_error
from ...codegen.emitter import GENERATED_FILE
from ...framework.buildenv import BuildEnv
from ...framework.cache import CacheEntry, cache_key
from ...options import KernelOptions
from .dialect import CONTRACT_MACRO
from .runtime import CLDevice, import_pyopencl

if TYPE_CHECKING:
    import pyopencl as cl

STANDARD = "-cl-std=CL1.2"
FAST_MATH = "-cl-fast-relaxed-math"
CORRECT_DIVISION = "-cl-fp32-correctly-rounded-divide-sqrt"
"""f32 `/` and `sqrt` correctly rounded, as in C, CUDA and NumPy (OpenCL allows 2.5 ulp and
NVIDIA's driver uses that: `3.0 / 3.0` could floor to 0); where the device supports it."""

_POCL_DIAGNOSTIC = re.compile(r"^error: (.+?:\d+:\d+): ", re.MULTILINE)
"""PoCL writes `error: FILE:LINE:COL: message`; clang `FILE:LINE:COL: error: message`."""
_UNNAMED_DIAGNOSTIC = re.compile(r"^(?:<[^>\n]*>)?:(\d+):(\d+): ", re.MULTILINE)
"""NVIDIA writes `:LINE:COL: error: message`: an unnamed source, physical lines (#line unused)."""
_LOCATED_ERROR = re.compile(r":\d+:\d+: (?:fatal )?error", re.MULTILINE)
_QUOTED_SYMBOL = re.compile(r"'([A-Za-z_]\w*)'")
_LINE_DIRECTIVE = re.compile(r'^#line (\d+)(?: "(.*)")?$')


def build_env(handle: CLDevice, options: KernelOptions) -> BuildEnv:
    """The driver that compiles for `handle` and the flags for a kernel's options."""
    flags = [STANDARD]
    if options.contract or options.fastmath:
        flags.append(f"-D{CONTRACT_MACRO}")
    if options.fastmath:
        flags.append(FAST_MATH)
    elif handle.correct_division:
        flags.append(CORRECT_DIVISION)
    platform = handle.platform
    return BuildEnv("opencl", (platform.name.strip(),), platform.version.strip(), tuple(flags),
                    extra=(("device", handle.identity),))


@dataclass(eq=False)
class Built:
    """A built program and its one kernel, ready to launch on one device."""

    program: cl.Program
    kernel: cl.Kernel
    _args: list[Any] = field(default_factory=list)

    def set_args(self, values: list[Any]) -> None:
        """Set the kernel's arguments, skipping those equal to the last launch's (setting
        one through pyopencl costs microseconds; the driver keeps them between launches)."""
        last = self._args
        for i, value in enumerate(values):
            if i >= len(last) or not (type(value) is type(last[i]) and value == last[i]):
                self.kernel.set_arg(i, value)
        self._args = values


def build(handle: CLDevice, source: str, options: KernelOptions, label: str) -> Built:
    """The program for `source`: from the in-memory or disk cache, else built from source."""
    env = build_env(handle, options)
    key = cache_key("opencl", source, env, handle.identity)
    fresh: list[Built] = []

    def from_source() -> bytes:
        built = build_from_source(handle, source, list(env.flags))
        fresh.append(built)
        return binary_of(built.program)

    def load(entry: CacheEntry) -> Built:
        if fresh:
            return fresh[0]
        built = build_from_binary(handle, entry.payload, list(env.flags))
        return built if built is not None else build_from_source(handle, source, list(env.flags))

    return handle.cache.get_or_build(key, from_source, load, label)


def build_from_source(handle: CLDevice, source: str, flags: list[str]) -> Built:
    cl = import_pyopencl()
    try:
        program = cl.Program(handle.context, source).build(
            options=flags, devices=[handle.device], cache_dir=False)
    except cl.Error as exc:
        log = normalize_log(str(exc), source)
        compiler = f"OpenCL ({handle.platform.name.strip()}, {handle.device.name.strip()})"
        raise compile_error(log, source, compiler) from None
    return _single_kernel(program)


def normalize_log(log: str, source: str) -> str:
    """A build log in clang's `FILE:LINE:COL: error: ...` form, at `#line` locations."""
    log = _POCL_DIAGNOSTIC.sub(r"\1: error: ", log)
    if _UNNAMED_DIAGNOSTIC.search(log):
        presumed = presumed_lines(source)

        def locate(m: re.Match[str]) -> str:
            physical = int(m[1])
            if not 0 < physical <= len(presumed):
                return m[0]
            file, line = presumed[physical - 1]
            return f"{file}:{line}:{m[2]}: "

        log = _UNNAMED_DIAGNOSTIC.sub(locate, log)
    return log if _LOCATED_ERROR.search(log) else _locate_by_symbol(log, source)


def _locate_by_symbol(log: str, source: str) -> str:
    """A log with no location (NVIDIA's linker: "unresolved extern function 'f'"): put the
    error at the first line of `source` that uses the quoted symbol."""
    symbol = _QUOTED_SYMBOL.search(log)
    if symbol is None:
        return log
    uses = re.compile(rf"\b{re.escape(symbol[1])}\b")
    presumed = presumed_lines(source)
    for physical, text in enumerate(source.splitlines()):
        if not text.startswith("#") and uses.search(text):
            file, line = presumed[physical]
            return f"{file}:{line}:1: error: {log.strip()}"
    return log


def presumed_lines(source: str) -> list[tuple[str, int]]:
    """(file, line) of each physical line of `source`, as its `#line` directives say."""
    out: list[tuple[str, int]] = []
    file, line = GENERATED_FILE, 1
    for text in source.splitlines():
        out.append((file, line))
        directive = _LINE_DIRECTIVE.match(text)
        if directive:
            line, file = int(directive[1]), directive[2] or file
        else:
            line += 1
    return out


def build_from_binary(handle: CLDevice, binary: bytes, flags: list[str]) -> Built | None:
    """A program from a cached binary, or None when the driver refuses it."""
    cl = import_pyopencl()
    try:
        program = cl.Program(handle.context, [handle.device], [binary]).build(options=flags)
    except cl.Error:
        return None
    return _single_kernel(program)


def binary_of(program: cl.Program) -> bytes:
    cl = import_pyopencl()
    return bytes(program.get_info(cl.program_info.BINARIES)[0])


def _single_kernel(program: cl.Program) -> Built:
    kernels = program.all_kernels()
    if len(kernels) != 1:
        raise RuntimeError(f"an OpenCL program from kiln has {len(kernels)} kernels, not 1")
    return Built(program, kernels[0])
