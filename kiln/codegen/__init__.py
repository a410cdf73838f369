"""Code generation shared by the C-family backends (cpu, cuda, opencl, ...).

`CEmitter` is the one walker over IR; a backend's dialect is a small subclass that sets
data and registers spellings in `kiln.ir.intrinsics` under its namespace.
`ThreadLoopEmitter` is the dialect base for targets that run a block's threads as loops
(`lower_thread_loops`' output: the cpu backend's C + OpenMP, or plain serial C), with
`launch_format` the layout of its `kiln_entry` launch slots and `team_size` what its
thread slot holds. `SourceCompiler` is the compiler part of a JIT backend that renders
C-family source with an emitter.
`kernel_abi` is the one definition of how kernel parameters are flattened for launches.
For any target, C or not: `plan_region` (a thread loop's per-thread storage, as data) and
`SourceMap` (errors at the user's line without `#line`).
"""

from ..ir.abi import AbiParam, abi_values, function_abi, kernel_abi
from ..ir.visit import handles
from . import c_intrinsics, threadloop_intrinsics  # noqa: F401 - the "c", "threads" spellings
from .compiler import SourceCompiler
from .diagnostics import SourceMap, compile_error
from .emitter import GENERATED_FILE, CEmitter, CExpr
from .names import NameTable
from .regions import RegionPlan, plan_region
from .threadloops import (
    BLOCK_DIMS,
    SMALL_LAUNCH,
    ThreadLoopEmitter,
    host_threads,
    launch_format,
    team_size,
    thread_loop_prologue,
)

__all__ = ["BLOCK_DIMS", "GENERATED_FILE", "SMALL_LAUNCH", "AbiParam", "CEmitter", "CExpr",
           "NameTable", "RegionPlan", "SourceCompiler", "SourceMap", "ThreadLoopEmitter",
           "abi_values", "compile_error", "function_abi", "handles", "host_threads",
           "kernel_abi", "launch_format", "plan_region", "team_size", "thread_loop_prologue"]
