"""The cpu backend's C toolchain: `cc` (or `KILN_CC`) with OpenMP, probed once.

The probe (compiler version, a tiny OpenMP build, `_Float16` support, the `-march=native`
target) takes ~0.1 s, so its result is memoised in kiln's compile cache (`toolchain/`, an
entry checked like any other), keyed by the compiler binary (path, size, mtime) and the
flags.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import subprocess
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from ... import settings
from ...framework.buildenv import BuildEnv, ToolNotFoundError, command_version, find_command
from ...framework.cache import CompileCache

BASE_FLAGS = ("-O3", "-march=native", "-fopenmp", "-fPIC", "-shared")
EXTRA_FLAGS = ("-fno-math-errno", "-fno-trapping-math", "-ffp-contract=off",
               "-fno-diagnostics-show-caret", "-w")
"""`-fno-math-errno` lets sqrt and friends vectorise (kiln never reads errno).
`-fno-trapping-math`: kiln never reads floating-point exception flags, so gcc may compute
both sides of a float select (`x < lo ? lo : x`) and vectorise it; values are unchanged
(kiln's own `exp`/`log` helpers only vectorise so).
`-ffp-contract=off`: no fused multiply-add unless asked (`contract=True`; kiln's policy on
every backend, see docs/language.md), so every operation
rounds as written: f16/bf16 results match NumPy on CPUs with native half-precision
arithmetic, and f32 ones match NumPy. It costs the 16x16 tiled matmul about 7%."""
OPTION_FLAGS = {"fastmath": ("-ffast-math", "-ffp-contract=fast"),
                "contract": ("-ffp-contract=fast",)}
"""Kernel options (`@kiln.kernel(fastmath=True)`) that change compiler flags."""
MATH_LIBRARIES = ("-lm",)
VECTOR_MATH = ("-Wl,--as-needed", "-lmvec", "-Wl,--no-as-needed")
"""glibc's vector math library, linked where it exists: under `-ffast-math` gcc vectorises
math calls in loops into calls of it (`_ZGVdN8v_expf`), which a kernel library must
resolve when it loads. `--as-needed`: a library that calls none does not depend on it."""

PROBE_VERSION = 2
"""Bumped when the probe finds more (2: the libraries), so older memos are not read."""
PROBE_SOURCE = """\
#include <omp.h>
#include <stdint.h>
int kiln_probe(void) {
    int n = 0;
    #pragma omp parallel reduction(+:n)
    n += 1;
    return n + omp_get_max_threads();
}
#ifdef KILN_PROBE_F16
_Float16 kiln_half(_Float16 x) { return x * (_Float16)2; }
#endif
"""


@dataclass(frozen=True)
class Toolchain:
    env: BuildEnv
    arch: str  # e.g. "x86_64-znver3-1a2b3c4d": machine, -march=native target, ISA macros
    fp16: bool
    libraries: tuple[str, ...] = MATH_LIBRARIES  # linked after the source


def compile_command(env: BuildEnv, output: str, libraries: tuple[str, ...] = ()) -> list[str]:
    """Compile C source from stdin into a shared library (stdin keeps output deterministic),
    linking `libraries` after it."""
    return [*env.compiler, *env.compile_args(), "-x", "c", "-", "-o", output, *env.link_args(),
            *libraries]


def _user_flags() -> tuple[str, ...]:
    return settings.c_flags()


def _memo_key(compiler: tuple[str, ...], flags: tuple[str, ...]) -> str:
    st = os.stat(compiler[0])
    ident = json.dumps([compiler, st.st_size, st.st_mtime_ns, flags, platform.machine(),
                        PROBE_VERSION])
    return hashlib.sha256(ident.encode()).hexdigest()


def probed(compiler: tuple[str, ...], flags: tuple[str, ...]) -> dict:
    """What `_probe` finds, remembered in kiln's compile cache: its libraries go on every
    link line, so the memo passes the cache's checks like a binary."""
    key = _memo_key(compiler, flags)
    entry = _MEMO.lookup(key)
    if entry is not None:
        with contextlib.suppress(ValueError):
            return dict(json.loads(entry.payload))
    found = _probe(compiler, flags)
    if "error" not in found:
        with contextlib.suppress(OSError):
            _MEMO.store(key, json.dumps(found).encode())
    return found


_MEMO = CompileCache("toolchain", ".json")


def _build(env: BuildEnv, source: str, extra: tuple[str, ...] = (),
           libraries: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory(prefix="kiln-probe-") as tmp:
        cmd = compile_command(env.with_flags(*extra), str(Path(tmp) / "probe.so"), libraries)
        return subprocess.run(cmd, input=source, capture_output=True, text=True, timeout=120)


def _march(env: BuildEnv) -> str:
    """The CPU `-march=native` selects, plus a hash of the ISA macros it defines."""
    macros = subprocess.run([*env.compiler, *env.flags, "-dM", "-E", "-x", "c", "-"], input="",
                            capture_output=True, text=True, timeout=60).stdout
    digest = hashlib.sha256(macros.encode()).hexdigest()[:8]
    name = "native"
    target = subprocess.run([*env.compiler, "-march=native", "-Q", "--help=target"],
                            capture_output=True, text=True, timeout=60)
    for line in target.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "-march=":
            name = parts[1]
            break
    return f"{platform.machine()}-{name}-{digest}"


def _probe(compiler: tuple[str, ...], flags: tuple[str, ...]) -> dict:
    version = command_version(compiler)
    env = BuildEnv("cpu", compiler, version, flags)
    result = _build(env, PROBE_SOURCE)
    if result.returncode != 0:
        log = (result.stderr or result.stdout).strip().splitlines()
        reason = log[-1] if log else f"exit status {result.returncode}"
        return {"error": f"'{compiler[0]}' cannot build OpenMP shared libraries: {reason}"}
    fp16 = _build(env, PROBE_SOURCE, ("-DKILN_PROBE_F16",)).returncode == 0
    libraries = list(MATH_LIBRARIES)
    if _build(env, PROBE_SOURCE, libraries=(*MATH_LIBRARIES, *VECTOR_MATH)).returncode == 0:
        libraries += VECTOR_MATH
    return {"version": version, "arch": _march(env), "fp16": fp16, "libraries": libraries}


@cache
def toolchain() -> Toolchain:
    """The probed toolchain; raises ToolNotFoundError with the reason when unusable."""
    compiler = find_command(settings.c_compiler())
    flags = (*BASE_FLAGS, *EXTRA_FLAGS, *_user_flags())
    found = probed(compiler, flags)
    if "error" in found:
        raise ToolNotFoundError(found["error"])
    env = BuildEnv("cpu", compiler, found["version"], flags)
    return Toolchain(env, found["arch"], bool(found["fp16"]), tuple(found["libraries"]))
