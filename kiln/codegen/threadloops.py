"""C for targets that run a block's threads as loops: the emitter of `lower_thread_loops`.

A dialect of the shared emitter for any target without SIMT hardware (the cpu backend's C +
OpenMP; an out-of-tree C, FPGA-HLS or serial backend): it emits kernels lowered by
`lower_thread_loops` (kiln.ir.passes). The `BlockLoop` becomes a loop over the grid's
blocks, each `ThreadLoop` a loop over the block's threads, x fastest; a `LockstepLoop` runs
its `while` a pass at a time with an activity mask. Thread variables are per-thread arrays
indexed by the thread's linear id, block variables one C variable per block runner. The
block shape is a compile-time constant (`-Dkiln_block_dim_x=16 ...`: one binary per
shape), which turns the thread loops into fixed-trip-count loops and per-thread storage
into fixed arrays. A `kiln_entry(args)` wrapper unpacks the launch slots (8 bytes per
value: the ABI's values, then the grid's three dimensions and the number of host threads)
and calls the kernel, which is `static`: no kernel name can meet a C library's.

A dialect sets attributes: `parallel_pragma` and `block_loop_pragma` run blocks in
parallel (OpenMP's `parallel` and `for`), `prologue = thread_loop_prologue(simd=...)`
marks the x loop of each thread loop for vectorisation; without them the code is plain
serial C11.
"""

from __future__ import annotations

import contextlib
import functools
import os
import struct
from collections.abc import Iterator, Sequence
from typing import ClassVar

from .. import settings
from ..ir import nodes as ir
from ..ir.abi import AbiParam, function_abi
from ..ir.analysis import reads_and_writes
from ..ir.enums import MemorySpace
from ..ir.passes import InternalError
from ..ir.passes.common import has_side_effects
from ..ir.types import ArrayType, i32, i64
from ..ir.visit import handles, walk
from .emitter import BINARY_PREC, CEmitter, CExpr
from .guards import ThreadGuard, thread_guard
from .helpers import C_HELPERS, HelperTemplate
from .inner_loops import InnerLoop, carried, inner_loop
from .regions import initialisations, plan_region
from .threadloop_intrinsics import ATOMIC_HELPERS, THREAD_LOOP_IMPLS

AXES = "xyz"
LAUNCH_DIMS = [f"kiln_grid_dim_{a}" for a in AXES]
BLOCK_DIMS = [f"kiln_block_dim_{a}" for a in AXES]
NUM_THREADS = "kiln_num_threads"
ACTIVE = "kiln_active"  # per thread: still running the current lockstep `while` loop
ITERATION = "kiln_iteration"  # of the current lockstep `while` loop
SLOT = 8  # bytes per launch slot
STRUCT_CODES = {"bool_": "?", "i8": "b", "i16": "h", "i32": "i", "i64": "q", "u8": "B",
                "u16": "H", "u32": "I", "u64": "Q", "f16": "e", "bf16": "H", "f32": "f",
                "f64": "d"}
LINEAR_THREAD = ("const int32_t kiln_t = (kiln_thread_idx_z * kiln_block_dim_y + "
                 "kiln_thread_idx_y) * kiln_block_dim_x + kiln_thread_idx_x;")

CLAMP = "INT64_C(17179869184)"
"""2^34: a guard's bound beyond it excludes (or includes) every thread alike."""
SMALL_LAUNCH = 8192
"""Launches of fewer threads in all run on one host thread: waking a second costs more than
it saves (tens of microseconds)."""

INCLUDES = """\
#include <stdint.h>
#include <stdbool.h>
#include <string.h>
#include <stdio.h>
#include <math.h>

/* kiln_block_dim_x, _y, _z: the block shape, defined on the compiler's command line. */
#define kiln_nt (kiln_block_dim_x * kiln_block_dim_y * kiln_block_dim_z)
"""

THREAD_LOOP_MACROS = (
    ("", False, "", "Runs the statement after it once per thread of the block, x fastest. "
     "SIMT threads of a\n   region have no ordering between them, so the x loop may run as "
     "SIMD lanes."),
    ("_ANY", False, " reduction(|:kiln_any)", "The same, or-reducing kiln_any (set by the "
     "threads still running a lockstep loop)."),
    ("_TRIPS", False, " reduction(max:kiln_high) reduction(min:kiln_bound, kiln_step)", "The "
     "same, finding a counted lockstep loop's highest start and its bound and step."),
    ("_IN", True, "", "The same for the threads whose x index is in [kiln_lo, kiln_hi) (a "
     "guard's range)."),
    ("_ALL_IN", True, " reduction(&:kiln_all)", "The same, and-reducing kiln_all (set by "
     "the threads that pass a guard's test)."),
    ("_ANY_IN", True, " reduction(|:kiln_any)", "The same, or-reducing kiln_any (set by "
     "the threads still in a lockstep inner loop)."),
)
"""`KILN_FOR_EACH_THREAD` and its variants: suffix, whether it takes an x range, reduction
clauses, comment."""


def launch_format(abi: Sequence[AbiParam]) -> struct.Struct:
    """What `kiln_entry` unpacks: the ABI's values, the grid's dimensions and the number of
    host threads, 8 bytes each (`pack(*abi_values(...), *grid, threads)`)."""
    codes = []
    for p in abi:
        code = "Q" if p.kind == "pointer" else STRUCT_CODES[p.type.name]
        codes.append(f"{code}{SLOT - struct.calcsize('=' + code)}x")
    codes += ["i4x"] * 4
    return struct.Struct("=" + "".join(codes))


def host_threads() -> int:
    """Host threads a launch may use: `KILN_NUM_THREADS`, else every core this process may
    run on (`process_cores`)."""
    chosen = settings.num_threads()
    if chosen is not None:
        return chosen
    return process_cores()


@functools.cache
def process_cores() -> int:
    """The cores this process may run on, read once: the first time, before any kernel has
    started the OpenMP runtime. The affinity read is the calling thread's, and an OpenMP
    runtime told to bind threads (`OMP_PROC_BIND`, `OMP_PLACES`) binds the thread that
    starts it to one core: read after that, every launch would run on one thread (16 cores:
    softmax_rows 4096x1024 took 14.5 ms instead of 1.0 ms)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def team_size(grid: Sequence[int], block: Sequence[int], threads: int) -> int:
    """What `kiln_entry`'s thread slot should hold for one launch (the value of
    `kiln_num_threads` in `parallel_pragma`): at most `threads` (`host_threads()`, or a
    split device's share) and the number of blocks, and 1 for a small launch."""
    blocks = grid[0] * grid[1] * grid[2]
    if blocks * block[0] * block[1] * block[2] < SMALL_LAUNCH:
        return 1
    return min(threads, blocks)


def thread_loop_prologue(simd: str = "") -> str:
    """The includes, `kiln_nt` (threads per block) and the `KILN_FOR_EACH_THREAD` macros.
    `simd` (OpenMP's "omp simd") marks each macro's x loop, with the reductions its loop
    makes: SIMT threads of a region have no ordering between them."""
    text = INCLUDES
    for suffix, ranged, clauses, comment in THREAD_LOOP_MACROS:
        x_from, x_to = ("(kiln_lo)", "(kiln_hi)") if ranged else ("0", "kiln_block_dim_x")
        loops = [f"for (int32_t kiln_thread_idx_{a} = 0; kiln_thread_idx_{a} < "
                 f"kiln_block_dim_{a}; kiln_thread_idx_{a}++)" for a in "zy"]
        loops.append(f"for (int32_t kiln_thread_idx_x = {x_from}; kiln_thread_idx_x < {x_to}; "
                     "kiln_thread_idx_x++)")
        if simd:
            loops.insert(2, f'_Pragma("{simd}{clauses}")')
        params = "(kiln_lo, kiln_hi)" if ranged else ""
        text += f"\n/* {comment} */\n#define KILN_FOR_EACH_THREAD{suffix}{params} \\\n"
        text += " \\\n".join(loops) + "\n"
    return text


def _on_block_memory(emitter: ThreadLoopEmitter, call: ir.IntrinsicCall) -> bool:
    """Atomics on shared/local arrays: one OS thread runs the whole block, so plain
    read-modify-write is exact (and vectorises)."""
    if not call.name.startswith("atomic_"):
        return False
    t = call.args[0].type
    return isinstance(t, ArrayType) and t.space in (MemorySpace.SHARED, MemorySpace.LOCAL)


class ThreadLoopEmitter(CEmitter):
    """Emits `lower_thread_loops`' output as C: blocks as a loop, threads as loops."""

    spellings = THREAD_LOOP_IMPLS
    namespaces: ClassVar[tuple[str, ...]] = ("threads", "c")
    prologue = thread_loop_prologue()
    function_qualifier = "static inline"
    helpers: ClassVar[dict[str, HelperTemplate]] = {**C_HELPERS, **ATOMIC_HELPERS}
    parallel_pragma: ClassVar[str] = ""
    """A whole line before the scope in which host threads run blocks; the block storage
    (shared arrays, block and thread variables) is declared inside it, once per host
    thread. The kernel's parameter `kiln_num_threads` holds `kiln_entry`'s thread slot. The
    cpu backend's: `#pragma omp parallel num_threads(kiln_num_threads)`."""
    block_loop_pragma: ClassVar[str] = ""
    """A whole line before the loops over the grid's blocks, three nested `for`s (z, y, x),
    which split the blocks among the host threads: the cpu backend's is `#pragma omp for
    collapse(3) schedule(guided)` (without `collapse(3)` only z would be split)."""

    def begin_function(self, func: ir.Function) -> None:
        super().begin_function(func)
        self.in_kernel = func.is_kernel
        self.thread_locals: set[str] | None = None  # inside a thread loop: its own variables
        self.block_return = False

    # ------------------------------------------------------------ the kernel

    @property
    def entry_name(self) -> str:
        return "kiln_entry"  # the launch wrapper `emit_kernel` writes around every kernel

    def emit_kernel(self, kernel: ir.Function) -> None:
        blocks = kernel.body[0] if len(kernel.body) == 1 else None
        if not isinstance(blocks, ir.BlockLoop):
            raise InternalError(f"{type(self).__name__} emits kernels lowered by "
                                "lower_thread_loops", kernel.loc)
        self.blocks = blocks
        self.begin_function(kernel)
        fresh = self.names.fresh
        self.thread_arrays = {n: fresh(f"{self.names[n]}_v") for n in blocks.thread_vars}
        self.block_values = {n: fresh(f"{self.names[n]}_b") for n in blocks.block_vars}
        self.block_stores = {n: fresh(f"{self.names[n]}_w") for n in blocks.block_vars}
        params = {p.name for p in kernel.params}
        self.param_copies = {n: fresh(f"{self.names[n]}_arg")
                             for n in blocks.thread_vars if n in params}
        self.labels = 0
        decls = self.param_decls(kernel)
        decls += [f"int32_t {d}" for d in LAUNCH_DIMS] + [f"int32_t {NUM_THREADS}"]
        with self.indented(f"static void {self.fnames[kernel.name]}({', '.join(decls)}) {{",
                           loc=kernel.loc):
            self.unmapped()
            if self.parallel_pragma:
                self.line(self.parallel_pragma)
            with self.indented("{"):
                self.declare_block_storage(kernel)
                if self.block_loop_pragma:
                    self.line(self.block_loop_pragma)
                for axis in reversed(AXES):
                    self.line(f"for (int32_t kiln_block_idx_{axis} = 0; kiln_block_idx_{axis} "
                              f"< kiln_grid_dim_{axis}; kiln_block_idx_{axis}++)")
                with self.indented("{"):
                    self.begin_block()
                    self.block(blocks.body)
                    if self.block_return:
                        self.line("kiln_block_end:;")
        self.unmapped()
        self.line("")
        self.emit_entry(kernel)

    def declare_block_storage(self, kernel: ir.Function) -> None:
        """Shared arrays, block and thread variables: one set per OpenMP thread, reused by
        the blocks it runs."""
        for name, t in kernel.locals.items():
            if isinstance(t, ArrayType) and t.space is MemorySpace.SHARED:
                self.line(self.declaration(name, t))
        for name in self.blocks.block_vars:
            ctype = self.ctype(kernel.var_type(name))  # type: ignore[arg-type]
            self.line(f"{ctype} {self.block_values[name]}, {self.block_stores[name]};")
        for name in self.blocks.thread_vars:
            t = kernel.var_type(name)
            arr = self.thread_arrays[name]
            if isinstance(t, ArrayType):
                self.line(f"{self.storage_type(t.scalar_elem)} {arr}[kiln_nt][{t.size}];")
            else:
                self.line(f"{self.ctype(t)} {arr}[kiln_nt];")  # type: ignore[arg-type]
        if self.blocks.exits:
            self.line("unsigned char kiln_exited[kiln_nt];")
        if any(isinstance(n, ir.LockstepLoop) for n in walk(self.blocks.body)):
            self.line(f"int32_t {ACTIVE}[kiln_nt];")

    def begin_block(self) -> None:
        if self.blocks.exits:
            self.line("memset(kiln_exited, 0, sizeof kiln_exited);")
        if self.param_copies:
            with self.indented("KILN_FOR_EACH_THREAD {"):
                self.line(LINEAR_THREAD)
                for name, arg in self.param_copies.items():
                    self.line(f"{self.thread_arrays[name]}[kiln_t] = {arg};")

    def param_decls(self, func: ir.Function) -> list[str]:
        """A kernel parameter that is a thread variable arrives as `NAME_arg`."""
        decls = super().param_decls(func)
        if not func.is_kernel or not self.param_copies:
            return decls
        out = []
        for a, decl in zip(function_abi(func), decls):
            if a.kind == "scalar" and a.param in self.param_copies:
                decl = f"{self.ctype(a.type)} {self.param_copies[a.param]}"
            out.append(decl)
        return out

    def var(self, name: str) -> str:
        """Block level reads thread variables as thread 0's; thread loops read their own
        copies, other block variables as they are."""
        if not self.in_kernel or (self.thread_locals is not None and name in self.thread_locals):
            return self.names[name]
        if self.thread_locals is None and name in self.thread_arrays:
            return f"{self.thread_arrays[name]}[0]"
        return self.block_values.get(name) or self.names[name]

    @handles(ir.IntrinsicCall, when=_on_block_memory)
    def block_memory_atomic(self, call: ir.IntrinsicCall) -> CExpr:
        array = call.args[0]
        assert isinstance(array, ir.Var) and isinstance(array.type, ArrayType)
        nidx = array.type.ndim
        args = [f"&{self.element(array, call.args[1:1 + nidx])}",
                *(self.expr(a).text for a in call.args[1 + nidx:])]
        kind = call.name.replace("atomic_", "plain_")
        return CExpr(f"{self.use_helper(kind, array.type.scalar_elem)}({', '.join(args)})")

    @handles(ir.Return, when=lambda e, n: e.in_kernel)
    def kernel_return(self, s: ir.Return) -> None:
        """At block level the block ends; in a thread loop the thread (`kiln_exited`)."""
        if self.thread_locals is None:
            self.block_return = True
            self.line("goto kiln_block_end;", s.loc)
            return
        if self.blocks.exits:
            self.line("kiln_exited[kiln_t] = 1;", s.loc)
        self.thread_return = True
        self.line(f"goto kiln_next_{self.labels};", s.loc)

    # ------------------------------------------------------------ thread loops

    def stmt_ThreadLoop(self, s: ir.ThreadLoop) -> None:
        """Its threads; a guarded loop (`thread_guard`) over the x range its guard lets
        through, and where its test can be, after testing every thread: where all pass,
        without a test."""
        initial = initialisations(s.body, s.private)
        guard = thread_guard(self.blocks, s, initial, self.ranges.fits)
        if guard is None:
            self.thread_body(s, s.body[len(initial):], "")
            return
        with self.indented("{"):  # scopes the range's and the test's variables
            x_range = self.thread_range(guard)
            if not guard.uniform:
                self.guarded_threads(s, guard, x_range)
                return
            assert guard.test is not None
            self.line("int kiln_all = 1;")
            reads = [guard.test, *(a.value for a in initial)]
            with self.threads(s, f"KILN_FOR_EACH_THREAD_ALL_IN{x_range}", reads=reads):
                test = self.expr(guard.test).wrap(BINARY_PREC["&"] + 1)
                self.line(f"kiln_all &= {test};")
            with self.indented("if (kiln_all) {", closer=""):
                self.thread_body(s, guard.body, x_range)
            with self.indented("} else {"):
                self.guarded_threads(s, guard, x_range)

    def guarded_threads(self, s: ir.ThreadLoop, guard: ThreadGuard, x_range: str) -> None:
        """The threads of `x_range` run the guard's body where its test holds."""
        if guard.test is None:
            self.thread_body(s, guard.body, x_range)
            return
        with (self.threads(s, f"KILN_FOR_EACH_THREAD_IN{x_range}"),
              self.indented(f"if ({self.expr(guard.test).text}) {{", loc=s.loc)):
            self.block(guard.body)

    def thread_body(self, s: ir.ThreadLoop, body: list[ir.Stmt], x_range: str) -> None:
        """`body` (what follows the loop's initial assignments) for the threads of `x_range`
        (all without one), its inner loop lockstep where it has one that can be."""
        macro = f"KILN_FOR_EACH_THREAD_IN{x_range}" if x_range else "KILN_FOR_EACH_THREAD"
        found = inner_loop(body)
        plan = plan_region(self.blocks, s)
        state = carried(found, plan.thread_locals) if found is not None else []
        if (found is None or plan.kept
                or any(has_side_effects(a.value) for a in initialisations(s.body, s.private))
                or any(isinstance(self.func.var_type(n), ArrayType) for n in state)):
            with self.threads(s, macro):
                self.block(body)
            return
        self.lockstep_inner(s, found, state, x_range or "(0, kiln_block_dim_x)")

    def lockstep_inner(self, s: ir.ThreadLoop, found: InnerLoop, state: list[str],
                       x_range: str) -> None:
        """The thread loop in three parts: each thread's statements before the inner loop;
        passes of one iteration of every thread still in the loop (`kiln_live`), until
        none is; the statements after it. Between them each thread's variables wait in
        per-thread arrays (`NAME_ls`)."""
        kept = {n: self.names.fresh(f"{self.names[n]}_ls") for n in state}
        loop = found.loop
        with self.indented("{"):
            for n, arr in kept.items():
                self.line(f"{self.ctype(self.func.var_type(n))} {arr}[kiln_nt];")  # type: ignore[arg-type]
            self.line("int32_t kiln_live[kiln_nt];")

            def save() -> None:
                for n, arr in kept.items():
                    self.line(f"{arr}[kiln_t] = {self.names[n]};")

            def restore() -> None:
                for n, arr in kept.items():
                    self.line(f"{self.names[n]} = {arr}[kiln_t];")

            before = reads_and_writes(found.pre)[1] | set(plan_region(self.blocks, s).loads)
            if isinstance(loop, ir.For):
                before.add(loop.var)
            unset = [n for n in state if n not in before]
            with self.threads(s, f"KILN_FOR_EACH_THREAD_IN{x_range}", linear=True):
                for n in unset:  # set by the loop: a value to keep until it is
                    self.line(f"{self.names[n]} = 0;")
                self.block(found.pre)
                if isinstance(loop, ir.For):
                    self.line(f"{self.var(loop.var)} = {self.expr(loop.start).text};", loop.loc)
                self.line("kiln_live[kiln_t] = 1;")
                save()
            with self.indented("for (;;) {", loc=loop.loc):
                self.line("int kiln_any = 0;")
                with self.threads(s, f"KILN_FOR_EACH_THREAD_ANY_IN{x_range}", linear=True):
                    restore()
                    self.line("int32_t kiln_in = kiln_live[kiln_t];")
                    with self.indented("if (kiln_in) {"):  # locals only: gcc if-converts it
                        self.lockstep_iteration(found)
                    save()
                    self.line("kiln_live[kiln_t] = kiln_in;")
                    self.line("kiln_any |= kiln_in;")
                self.line("if (!kiln_any) break;")
            with self.threads(s, f"KILN_FOR_EACH_THREAD_IN{x_range}", linear=True):
                restore()
                self.block(found.post)

    def lockstep_iteration(self, found: InnerLoop) -> None:
        """One iteration of the inner loop for a thread still in it, as the sequential loop
        runs it (a `for`: test, body, step; its leading `break` test first)."""
        loop = found.loop
        if isinstance(loop, ir.For):
            var = self.var(loop.var)
            step = loop.step
            assert isinstance(step, ir.Const)
            op = "<" if step.value > 0 else ">"
            test = f"{var} {op} {self.expr(loop.stop).wrap(BINARY_PREC[op] + 1)}"
        else:
            test = self.expr(loop.cond).text
        with self.indented(f"if ({test}) {{", closer="", loc=loop.loc):
            if found.exit is not None:
                with self.indented(f"if ({self.expr(found.exit).text}) {{", closer=""):
                    self.line("kiln_in = 0;")
                with self.indented("} else {"):
                    self.block(found.body)
                    if isinstance(loop, ir.For):
                        self.line(f"{var} += {self.expr(loop.step).text};")
            else:
                self.block(found.body)
                if isinstance(loop, ir.For):
                    self.line(f"{var} += {self.expr(loop.step).text};")
        with self.indented("} else {"):
            self.line("kiln_in = 0;")

    def thread_range(self, guard: ThreadGuard) -> str:
        """`(lo, hi)`, the x indices the guard's bounds let through, computed at block level
        in 64 bits: a bound's value is clamped to +-2^34 before its shift (at most 2^32)
        is taken off, since x + shift, an i32 that does not wrap, is within 2^33 of 0; then
        to [-1, block_dim_x], so that adding 1 cannot overflow."""
        if not guard.lows and not guard.highs:
            return "(0, kiln_block_dim_x)"
        self.line("int64_t kiln_x_lo = 0, kiln_x_hi = kiln_block_dim_x, kiln_x_b;")
        for bounds, name, op in ((guard.lows, "kiln_x_lo", ">"), (guard.highs, "kiln_x_hi", "<")):
            for bound in bounds:
                value = self.cast(self.expr(bound.value), i64).text
                self.line(f"kiln_x_b = {value};")
                shift = bound.shift
                if shift.by is not None:
                    by = self.cast(self.expr(shift.by), i64).wrap(BINARY_PREC["-"] + 1)
                    sign = "-" if shift.sign > 0 else "+"
                    self.line(f"kiln_x_b = (kiln_x_b < -{CLAMP} ? -{CLAMP} : kiln_x_b > {CLAMP} "
                              f"? {CLAMP} : kiln_x_b) {sign} {by};")
                offset = f" + {bound.offset}" if bound.offset else ""
                self.line("kiln_x_b = (kiln_x_b < -1 ? -1 : kiln_x_b > kiln_block_dim_x ? "
                          f"kiln_block_dim_x : kiln_x_b){offset};")
                self.line(f"{name} = kiln_x_b {op} {name} ? kiln_x_b : {name};")
        return "((int32_t)kiln_x_lo, (int32_t)kiln_x_hi)"

    def stmt_LockstepLoop(self, s: ir.LockstepLoop) -> None:
        """Its passes (`masked_loop`), after its unmasked iterations when it is counted
        (`full_iterations`)."""
        if not s.counted or self.blocks.exits:
            self.masked_loop(s, "0")
        else:
            with self.indented("{"):  # scopes the trip count's variables
                self.masked_loop(s, self.full_iterations(s))

    def masked_loop(self, s: ir.LockstepLoop, first: str) -> None:
        """A lockstep `while` loop from iteration `first` on: per iteration, one thread loop
        tests the condition of the threads still running (none: the loop ends), then one
        runs the body for them. That test is repeated before the body: it has no side
        effects and sees the same values, and gcc learns index ranges from it (`i < n`),
        so it loads contiguously where it would otherwise gather. (Measured: faster than
        one loop per iteration that also tests for the next.)"""
        with self.indented("KILN_FOR_EACH_THREAD {"):
            self.line(LINEAR_THREAD)
            exited = "!kiln_exited[kiln_t]" if self.blocks.exits else "1"
            self.line(f"{ACTIVE}[kiln_t] = {exited};")
        with self.indented(f"for (int64_t {ITERATION} = {first}; ; {ITERATION}++) {{",
                           loc=s.loc):
            self.line("int kiln_any = 0;")
            with self.threads(s, "KILN_FOR_EACH_THREAD_ANY", reads=[s.cond]):
                self.inductions(s)
                test = self.expr(s.cond).wrap(BINARY_PREC["&&"] + 1)
                self.line(f"{ACTIVE}[kiln_t] = {ACTIVE}[kiln_t] && {test};", s.loc)
                self.unmapped()
                self.line(f"kiln_any |= {ACTIVE}[kiln_t];")
            self.line("if (!kiln_any) break;")
            with self.threads(s, "KILN_FOR_EACH_THREAD"):
                self.inductions(s)
                test = self.expr(s.cond).wrap(BINARY_PREC["&&"] + 1)
                with self.indented(f"if ({ACTIVE}[kiln_t] && {test}) {{"):
                    self.block(s.body)

    def full_iterations(self, s: ir.LockstepLoop) -> str:
        """A counted loop: the iterations every thread runs, with no test or mask; returns
        the variable holding their number, where the masked ones start. That is the trip
        count of the thread starting highest (none if the step is not positive: the
        masked loop then runs them all). The body's thread loop has no test, so gcc keeps
        the block's accumulators in registers across iterations (the reduce's grid-stride
        loop: 7.0 -> 5.9 ms on one core, 2^24 f32)."""
        ind, cond = s.inductions[0], s.cond
        assert isinstance(cond, ir.Compare)
        bound = cond.right if cond.op == "<" else cond.left
        self.line("int64_t kiln_high = INT64_MIN, kiln_bound = INT64_MAX, "
                  "kiln_step = INT64_MAX;")
        with self.threads(s, "KILN_FOR_EACH_THREAD_TRIPS", reads=[ind.init, ind.step, bound]):
            for name, e in (("high", ind.init), ("bound", bound), ("step", ind.step)):
                op = ">" if name == "high" else "<"
                value = self.cast(self.expr(e), i64).text
                self.line(f"int64_t kiln_{name}_t = {value};")
                self.line(f"kiln_{name} = kiln_{name}_t {op} kiln_{name} "
                          f"? kiln_{name}_t : kiln_{name};")
        self.line("const int64_t kiln_full = kiln_step > 0 && kiln_high < kiln_bound ? "
                  "(kiln_bound - kiln_high + kiln_step - 1) / kiln_step : 0;")
        header = f"for (int64_t {ITERATION} = 0; {ITERATION} < kiln_full; {ITERATION}++) {{"
        with self.indented(header, loc=s.loc), self.threads(s, "KILN_FOR_EACH_THREAD"):
            self.inductions(s)
            self.block(s.body)
        return "kiln_full"

    def inductions(self, s: ir.LockstepLoop) -> None:
        """Induction variables at this iteration: `init + iteration * step`."""
        for ind in s.inductions:
            assert isinstance(ind, ir.Induction)
            ctype = self.ctype(self.func.var_type(ind.var))  # type: ignore[arg-type]
            init = self.expr(ind.init).wrap(BINARY_PREC["+"])
            step = self.expr(ind.step).wrap(BINARY_PREC["*"] + 1)
            self.line(f"{ctype} {self.names[ind.var]} = {init} + ({ctype}){ITERATION} * {step};")

    @contextlib.contextmanager
    def threads(self, loop: ir.ThreadLoop | ir.LockstepLoop, macro: str,
                reads: list[ir.Expr] | None = None, linear: bool = False) -> Iterator[int]:
        """`macro {` with the loop's thread and block variables loaded (and stored back
        after; with `reads`, only what those expressions read is loaded and nothing is
        stored), and its private variables declared: those a thread loop's body starts
        by assigning are declared there (yields how many such statements it emitted). A
        block variable's last thread's value is kept, through a second variable, so no
        thread reads another's update. `linear`: `kiln_t` is defined in any case."""
        plan = plan_region(self.blocks, loop, reads)
        for name in plan.kept:
            self.line(f"{self.block_stores[name]} = {self.block_values[name]};")
        self.thread_locals = plan.thread_locals
        self.thread_return = False
        with self.indented(f"{macro} {{"):
            if (linear or any(n in self.thread_arrays for n in plan.loads)
                    or plan.skips_exited or plan.lockstep):
                self.line(LINEAR_THREAD)
            if plan.skips_exited:
                self.line("if (kiln_exited[kiln_t]) continue;")
            for name in plan.loads:
                t = self.func.var_type(name)
                source = (f"{self.thread_arrays[name]}[kiln_t]" if name in self.thread_arrays
                          else self.block_values[name])
                if isinstance(t, ArrayType):
                    self.line(f"{self.storage_type(t.scalar_elem)} *{self.names[name]} = {source};")
                else:
                    self.line(f"{self.ctype(t)} {self.names[name]} = {source};")  # type: ignore[arg-type]
            for a in plan.initial:
                ctype = self.ctype(self.func.var_type(a.target))  # type: ignore[arg-type]
                self.line(f"{ctype} {self.names[a.target]} = {self.expr(a.value).text};", a.loc)
            done = {a.target for a in plan.initial}
            for name in plan.private:
                if name not in done:
                    self.line(self.declaration(name, self.func.var_type(name)))
            if isinstance(loop, ir.LockstepLoop):
                self.block(loop.setup[len(plan.initial):])
            yield len(plan.initial)
            self.unmapped()
            if self.thread_return:
                self.line(f"kiln_next_{self.labels}:;")
            for name in plan.stores:
                target = (f"{self.thread_arrays[name]}[kiln_t]" if name in self.thread_arrays
                          else self.block_stores[name])
                self.line(f"{target} = {self.names[name]};")
        self.thread_locals = None
        self.labels += self.thread_return
        for name in plan.kept:
            self.line(f"{self.block_values[name]} = {self.block_stores[name]};")

    def emit_entry(self, kernel: ir.Function) -> None:
        """`void kiln_entry(const unsigned char *args)`: one 8-byte slot per value."""
        abi = function_abi(kernel)
        with self.indented("void kiln_entry(const unsigned char *kiln_args) {"):
            values = []
            for slot, a in enumerate(abi):
                if a.kind == "pointer":
                    decl = f"{self.storage_type(a.type)} *p{slot}"
                else:
                    decl = f"{self.ctype(a.type if a.kind == 'scalar' else i32)} p{slot}"
                self.line(f"{decl}; memcpy(&p{slot}, kiln_args + {slot * SLOT}, "
                          f"sizeof p{slot});")
                values.append(f"p{slot}")
            for k, name in enumerate([*LAUNCH_DIMS, NUM_THREADS], len(abi)):
                self.line(f"int32_t {name}; memcpy(&{name}, kiln_args + {k * SLOT}, "
                          f"sizeof {name});")
                values.append(name)
            self.line(f"{self.fnames[kernel.name]}({', '.join(values)});")
