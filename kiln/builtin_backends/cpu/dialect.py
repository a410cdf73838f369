"""The cpu dialect: the shared thread-loop emitter with OpenMP, and vectorisable math.

Blocks run in parallel on OpenMP threads (`parallel` + `for` over the grid), each thread
loop's x loop is marked `omp simd`, so gcc vectorises across threads, and f32 `exp`/`log`
run through kiln's vectorisable helpers (vmath). Everything else, the lowering's loops,
per-thread storage, atomics and the `kiln_entry` launch wrapper, is
`kiln.codegen.ThreadLoopEmitter`'s.
"""

from __future__ import annotations

from typing import ClassVar

from ...codegen.helpers import HelperTemplate
from ...codegen.threadloops import NUM_THREADS, ThreadLoopEmitter, thread_loop_prologue
from .vmath import VMATH_HELPERS, VMATH_SPELLINGS


class CpuEmitter(ThreadLoopEmitter):
    spellings = VMATH_SPELLINGS
    namespaces: ClassVar[tuple[str, ...]] = ("cpu", "threads", "c")
    prologue = thread_loop_prologue(simd="omp simd")
    parallel_pragma = f"#pragma omp parallel num_threads({NUM_THREADS})"
    block_loop_pragma = "#pragma omp for collapse(3) schedule(guided)"
    helpers: ClassVar[dict[str, HelperTemplate]] = {**ThreadLoopEmitter.helpers,
                                                     **VMATH_HELPERS}
