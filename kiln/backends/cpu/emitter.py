"""The cpu dialect: C11 + OpenMP, blocks in parallel, threads as vectorisable loops.

The kernel becomes a C function whose blocks are an OpenMP `for` loop; inside a block,
each barrier region (see `regions.py`) is a loop over the block's threads, x fastest, so
gcc vectorises across threads. The block shape is a compile-time constant
(`-Dkiln_block_dim_x=16 ...`: one binary per shape), which turns the thread loops into
fixed-trip-count SIMD loops and per-thread storage into fixed arrays. A
`kiln_entry(args)` wrapper unpacks the launch slots (`backend.launch_format`) and calls
the kernel.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from typing import ClassVar

from ...codegen.abi import function_abi
from ...codegen.emitter import BINARY_PREC, CEmitter, CExpr, handles
from ...codegen.helpers import C_HELPERS, HelperTemplate
from ...ir import nodes as ir
from ...ir.analysis import reads_and_writes
from ...ir.enums import MemorySpace
from ...ir.types import ArrayType, i8, i16, i32, i64
from .atomics import ATOMIC_HELPERS
from .regions import (
    Barrier,
    BlockIf,
    BlockJump,
    BlockLoop,
    Item,
    Region,
    constant_trips,
    plan_kernel,
)

AXES = "xyz"
LAUNCH_DIMS = [f"kiln_grid_dim_{a}" for a in AXES]
BLOCK_DIMS = [f"kiln_block_dim_{a}" for a in AXES]
NUM_THREADS = "kiln_num_threads"
NARROW_SIGNED = (i8, i16, i32)
ACTIVE = "kiln_active"  # per thread: still running the current lockstep `while` loop
ITERATION = "kiln_iteration"  # of the current lockstep `while` loop
SLOT = 8  # bytes per launch slot

PROLOGUE = """\
#include <stdint.h>
#include <stdbool.h>
#include <string.h>
#include <stdio.h>
#include <math.h>

/* kiln_block_dim_x, _y, _z: the block shape, defined on the compiler's command line. */
#define kiln_nt (kiln_block_dim_x * kiln_block_dim_y * kiln_block_dim_z)

/* Runs the statement after it once per thread of the block, x fastest. SIMT threads of a
   region have no ordering between them, so the x loop may run as SIMD lanes. */
#define KILN_FOR_EACH_THREAD \\
for (int32_t kiln_thread_idx_z = 0; kiln_thread_idx_z < kiln_block_dim_z; kiln_thread_idx_z++) \\
for (int32_t kiln_thread_idx_y = 0; kiln_thread_idx_y < kiln_block_dim_y; kiln_thread_idx_y++) \\
_Pragma("omp simd") \\
for (int32_t kiln_thread_idx_x = 0; kiln_thread_idx_x < kiln_block_dim_x; kiln_thread_idx_x++)

/* The same, or-reducing kiln_any (set by the threads still running a lockstep loop). */
#define KILN_FOR_EACH_THREAD_ANY \\
for (int32_t kiln_thread_idx_z = 0; kiln_thread_idx_z < kiln_block_dim_z; kiln_thread_idx_z++) \\
for (int32_t kiln_thread_idx_y = 0; kiln_thread_idx_y < kiln_block_dim_y; kiln_thread_idx_y++) \\
_Pragma("omp simd reduction(|:kiln_any)") \\
for (int32_t kiln_thread_idx_x = 0; kiln_thread_idx_x < kiln_block_dim_x; kiln_thread_idx_x++)

/* The same, finding a counted lockstep loop's highest start and its bound and step. */
#define KILN_FOR_EACH_THREAD_TRIPS \\
for (int32_t kiln_thread_idx_z = 0; kiln_thread_idx_z < kiln_block_dim_z; kiln_thread_idx_z++) \\
for (int32_t kiln_thread_idx_y = 0; kiln_thread_idx_y < kiln_block_dim_y; kiln_thread_idx_y++) \\
_Pragma("omp simd reduction(max:kiln_high) reduction(min:kiln_bound, kiln_step)") \\
for (int32_t kiln_thread_idx_x = 0; kiln_thread_idx_x < kiln_block_dim_x; kiln_thread_idx_x++)
"""

LINEAR_THREAD = ("const int32_t kiln_t = (kiln_thread_idx_z * kiln_block_dim_y + "
                 "kiln_thread_idx_y) * kiln_block_dim_x + kiln_thread_idx_x;")


def _on_block_memory(emitter: CpuEmitter, call: ir.IntrinsicCall) -> bool:
    """Atomics on shared/local arrays: one OS thread runs the whole block, so plain
    read-modify-write is exact (and vectorises)."""
    if not call.name.startswith("atomic_"):
        return False
    t = call.args[0].type
    return isinstance(t, ArrayType) and t.space in (MemorySpace.SHARED, MemorySpace.LOCAL)


class CpuEmitter(CEmitter):
    namespaces = ("cpu", "c")
    prologue = PROLOGUE
    function_qualifier = "static inline"
    implicit_index_params = frozenset(
        f"{base}_{a}" for base in ("thread_idx", "block_idx", "grid_dim") for a in AXES)
    helpers: ClassVar[dict[str, HelperTemplate]] = {**C_HELPERS, **ATOMIC_HELPERS}

    # ------------------------------------------------------------ per-kernel state

    def begin_function(self, func: ir.Function) -> None:
        super().begin_function(func)
        self.in_kernel = func.is_kernel
        self.block_level = False

    @handles(ir.IntrinsicCall, when=lambda e, n: e.block_level and n.name.startswith("thread_"))
    def thread_index_at_block_level(self, call: ir.IntrinsicCall) -> CExpr:
        """Block-level conditions are uniform: thread 0's view stands for the block."""
        return CExpr("0")

    @handles(ir.IntrinsicCall, when=_on_block_memory)
    def block_memory_atomic(self, call: ir.IntrinsicCall) -> CExpr:
        array = call.args[0]
        assert isinstance(array, ir.Var) and isinstance(array.type, ArrayType)
        nidx = array.type.ndim
        args = [f"&{self.element(array, call.args[1:1 + nidx])}",
                *(self.expr(a).text for a in call.args[1 + nidx:])]
        kind = call.name.replace("atomic_", "plain_")
        return CExpr(f"{self.use_helper(kind, array.type.elem)}({', '.join(args)})")

    @handles(ir.For, when=lambda e, n: e.in_kernel and n.unroll is None
             and constant_trips(n) is not None)
    def unrolled_for(self, s: ir.For) -> None:
        """A short constant loop inside a region (regions.constant_trips): unrolled whole."""
        self.stmt_For(dataclasses.replace(s, unroll=constant_trips(s)))

    @handles(ir.Return, when=lambda e, n: e.in_kernel)
    def kernel_return(self, s: ir.Return) -> None:
        if self.block_level:
            self.line("goto kiln_block_end;", s.loc)
            return
        if self.plan.exits:
            self.line("kiln_exited[kiln_t] = 1;", s.loc)
        self.line(f"goto kiln_next_{self.region.index};", s.loc)

    def index(self, e: ir.Expr) -> CExpr:
        """Signed index arithmetic in 64 bits (the same value wherever the narrow one does
        not overflow): in an `omp simd` loop gcc 12 loads `s[t + k]` under a condition
        contiguously only when it is computed so; otherwise it gathers."""
        if not (isinstance(e, ir.BinOp) and e.op in ("+", "-", "*") and e.type in NARROW_SIGNED):
            return self.expr(e)
        return self.binary(e.op, self.wide(e.left), self.wide(e.right))

    def wide(self, e: ir.Expr) -> CExpr:
        if isinstance(e, ir.BinOp) and e.op in ("+", "-", "*") and e.type in NARROW_SIGNED:
            return self.index(e)
        if isinstance(e, ir.Const) or e.type not in NARROW_SIGNED:
            return self.expr(e)
        return self.cast(self.expr(e), i64)

    def var(self, name: str) -> str:
        if self.in_kernel and self.block_level and name in self.thread_arrays:
            return f"{self.thread_arrays[name]}[0]"
        if self.in_kernel and self.block_level and name in self.block_values:
            return self.block_values[name]
        return self.names[name]

    # ------------------------------------------------------------ the kernel

    def emit_kernel(self, kernel: ir.Function) -> None:
        plan = self.plan = plan_kernel(self.program)
        self.begin_function(kernel)
        self.thread_arrays = {n: self.names.fresh(f"{self.names[n]}_v") for n in plan.thread}
        self.block_values = {n: self.names.fresh(f"{self.names[n]}_b") for n in plan.uniform}
        self.block_stores = {n: self.names.fresh(f"{self.names[n]}_w") for n in plan.uniform}
        params = {p.name for p in kernel.params}
        self.param_copies = {n: self.names.fresh(f"{self.names[n]}_arg")
                             for n in plan.thread if n in params}
        decls = self.param_decls(kernel)
        decls += [f"int32_t {d}" for d in LAUNCH_DIMS] + [f"int32_t {NUM_THREADS}"]
        with self.indented(f"static void {self.fnames[kernel.name]}({', '.join(decls)}) {{",
                           loc=kernel.loc):
            self.unmapped()
            self.line(f"#pragma omp parallel num_threads({NUM_THREADS})")
            with self.indented("{"):
                self.declare_block_storage(kernel)
                self.line("#pragma omp for collapse(3) schedule(guided)")
                for axis in reversed(AXES):
                    self.line(f"for (int32_t kiln_block_idx_{axis} = 0; kiln_block_idx_{axis} "
                              f"< kiln_grid_dim_{axis}; kiln_block_idx_{axis}++)")
                with self.indented("{"):
                    self.begin_block(kernel)
                    self.items(plan.items)
                    if plan.block_return:
                        self.line("kiln_block_end:;")
        self.unmapped()
        self.line("")
        self.emit_entry(kernel)

    def declare_block_storage(self, kernel: ir.Function) -> None:
        """Shared arrays and per-thread storage: one set per OpenMP thread, reused by blocks."""
        for name, t in kernel.locals.items():
            if isinstance(t, ArrayType) and t.space is MemorySpace.SHARED:
                self.line(self.declaration(name, t))
        for name in self.plan.uniform:
            ctype = self.ctype(kernel.var_type(name))  # type: ignore[arg-type]
            self.line(f"{ctype} {self.block_values[name]}, {self.block_stores[name]};")
        for name in self.plan.thread:
            t = kernel.var_type(name)
            arr = self.thread_arrays[name]
            if isinstance(t, ArrayType):
                self.line(f"{self.storage_type(t.elem)} {arr}[kiln_nt][{t.size}];")
            else:
                self.line(f"{self.ctype(t)} {arr}[kiln_nt];")  # type: ignore[arg-type]
        if self.plan.exits:
            self.line("unsigned char kiln_exited[kiln_nt];")
        if self.plan.masked:
            self.line(f"int32_t {ACTIVE}[kiln_nt];")

    def begin_block(self, kernel: ir.Function) -> None:
        for name in self.plan.block:
            self.line(self.declaration(name, kernel.locals[name]))
        if self.plan.exits:
            self.line("memset(kiln_exited, 0, sizeof kiln_exited);")
        if self.param_copies:
            with self.indented("KILN_FOR_EACH_THREAD {"):
                self.line(LINEAR_THREAD)
                for name, arg in self.param_copies.items():
                    self.line(f"{self.thread_arrays[name]}[kiln_t] = {arg};")

    def param_decls(self, func: ir.Function) -> list[str]:
        decls = super().param_decls(func)
        if not func.is_kernel or not getattr(self, "param_copies", None):
            return decls
        out = []
        for a, decl in zip(function_abi(func), decls):
            if a.kind == "scalar" and a.param in self.param_copies:
                decl = f"{self.ctype(a.type)} {self.param_copies[a.param]}"
            out.append(decl)
        return out

    def items(self, items: list[Item]) -> None:
        for item in items:
            if isinstance(item, Region):
                self.emit_region(item)
            elif isinstance(item, Barrier):
                self.line("/* barrier */", item.stmt.loc)
            else:
                self.block_item(item)

    def block_item(self, item: BlockIf | BlockLoop | BlockJump) -> None:
        """A block-uniform statement: conditions evaluated once, from thread 0's values."""
        s = item.stmt
        self.block_level = True
        if isinstance(item, BlockJump):
            self.stmt(s)
            self.block_level = False
            return
        if isinstance(item, BlockIf):
            assert isinstance(s, ir.If)
            opener = f"if ({self.expr(s.cond).text}) {{"
        elif isinstance(s, ir.While):
            opener = f"while ({self.expr(s.cond).text}) {{"
        else:
            assert isinstance(s, ir.For)
            opener = self.for_header(s, self.names[s.var]) + " {"
        self.block_level = False
        then = item.then if isinstance(item, BlockIf) else item.body
        with self.indented(opener, closer="", loc=s.loc):
            self.items(then)
        if isinstance(item, BlockIf) and item.orelse:
            with self.indented("} else {", closer=""):
                self.items(item.orelse)
        self.line("}")

    def emit_region(self, region: Region) -> None:
        """A region's thread loop; a lockstep `while` loop's passes (`masked_loop`), after
        its unmasked iterations when it is counted (`full_iterations`)."""
        self.region = region
        if region.loop is None:
            with self.thread_loop(region, "KILN_FOR_EACH_THREAD"):
                self.block(region.body)
        elif region.counted is None or self.plan.exits:
            self.masked_loop(region, "0")
        else:
            with self.indented("{"):  # scopes the trip count's variables
                self.masked_loop(region, self.full_iterations(region))

    def masked_loop(self, region: Region, first: str) -> None:
        """A lockstep `while` loop from iteration `first` on: per iteration, one thread loop
        tests the condition of the threads still running (none: the loop ends), then one
        runs the body for them. That test is repeated before the body: it has no side
        effects and sees the same values, and gcc learns index ranges from it (`i < n`),
        so it loads contiguously where it would otherwise gather. (Measured: faster than
        one loop per iteration that also tests for the next.)"""
        loop = region.loop
        assert loop is not None
        test = self.expr(loop.cond).wrap(BINARY_PREC["&&"] + 1)
        with self.indented("KILN_FOR_EACH_THREAD {"):
            self.line(LINEAR_THREAD)
            self.line(f"{ACTIVE}[kiln_t] = {'!kiln_exited[kiln_t]' if self.plan.exits else 1};")
        with self.indented(f"for (int64_t {ITERATION} = {first}; ; {ITERATION}++) {{",
                           loc=loop.loc):
            self.line("int kiln_any = 0;")
            with self.thread_loop(region, "KILN_FOR_EACH_THREAD_ANY", region.test_reads):
                self.inductions(region)
                self.line(f"{ACTIVE}[kiln_t] = {ACTIVE}[kiln_t] && {test};", loop.loc)
                self.unmapped()
                self.line(f"kiln_any |= {ACTIVE}[kiln_t];")
            self.line("if (!kiln_any) break;")
            with self.thread_loop(region, "KILN_FOR_EACH_THREAD"):
                self.inductions(region)
                with self.indented(f"if ({ACTIVE}[kiln_t] && {test}) {{"):
                    self.block(region.body)

    def full_iterations(self, region: Region) -> str:
        """A counted loop (`regions.Counted`): the iterations every thread runs, with no
        test or mask; returns the variable holding their number, where the masked ones
        start. That is the trip count of the thread starting highest (none if the step is
        not positive: the masked loop then runs them all). The body's thread loop has no
        test, so gcc keeps the block's accumulators in registers across iterations (the
        reduce's grid-stride loop: 7.0 -> 5.9 ms on one core, 2^24 f32)."""
        counted = region.counted
        assert counted is not None and region.loop is not None
        ind = counted.induction
        reads = set().union(*(reads_and_writes(e)[0] for e in (ind.init, ind.step, counted.bound)))
        self.line("int64_t kiln_high = INT64_MIN, kiln_bound = INT64_MAX, "
                  "kiln_step = INT64_MAX;")
        with self.thread_loop(region, "KILN_FOR_EACH_THREAD_TRIPS", reads):
            for name, e in (("high", ind.init), ("bound", counted.bound), ("step", ind.step)):
                op = ">" if name == "high" else "<"
                value = self.cast(self.expr(e), i64).text
                self.line(f"int64_t kiln_{name}_t = {value};")
                self.line(f"kiln_{name} = kiln_{name}_t {op} kiln_{name} "
                          f"? kiln_{name}_t : kiln_{name};")
        self.line("const int64_t kiln_full = kiln_step > 0 && kiln_high < kiln_bound ? "
                  "(kiln_bound - kiln_high + kiln_step - 1) / kiln_step : 0;")
        header = f"for (int64_t {ITERATION} = 0; {ITERATION} < kiln_full; {ITERATION}++) {{"
        with (self.indented(header, loc=region.loop.loc),
              self.thread_loop(region, "KILN_FOR_EACH_THREAD")):
            self.inductions(region)
            self.block(region.body)
        return "kiln_full"

    def inductions(self, region: Region) -> None:
        """Induction variables at this iteration: `init + iteration * step`."""
        for ind in region.inductions:
            ctype = self.ctype(self.func.var_type(ind.var))  # type: ignore[arg-type]
            init = self.expr(ind.init).wrap(BINARY_PREC["+"])
            step = self.expr(ind.step).wrap(BINARY_PREC["*"] + 1)
            self.line(f"{ctype} {self.names[ind.var]} = {init} + ({ctype}){ITERATION} * {step};")

    @contextlib.contextmanager
    def thread_loop(self, region: Region, macro: str,
                    reads: set[str] | None = None) -> Iterator[None]:
        """`macro {` with the region's per-thread and per-block values loaded (and stored
        back after; only `reads` loaded and nothing stored when given). Every thread
        computes the same block-uniform value; the last one's is kept, through a second
        variable, so no thread reads another's update."""
        plan = self.plan
        writes = region.writes if reads is None else set()
        used = (region.reads if reads is None else reads) | writes
        loaded = [n for n in plan.thread if n in used]
        uniform = [n for n in plan.uniform if n in used]
        stored = [n for n in uniform if n in writes]
        for name in stored:
            self.line(f"{self.block_stores[name]} = {self.block_values[name]};")
        with self.indented(f"{macro} {{"):
            if loaded or plan.exits or region.loop is not None:
                self.line(LINEAR_THREAD)
            if plan.exits:
                self.line("if (kiln_exited[kiln_t]) continue;")
            for name in loaded:
                t = self.func.var_type(name)
                arr = f"{self.thread_arrays[name]}[kiln_t]"
                if isinstance(t, ArrayType):
                    self.line(f"{self.storage_type(t.elem)} *{self.names[name]} = {arr};")
                else:
                    self.line(f"{self.ctype(t)} {self.names[name]} = {arr};")  # type: ignore
            for name in uniform:
                ctype = self.ctype(self.func.var_type(name))  # type: ignore[arg-type]
                self.line(f"{ctype} {self.names[name]} = {self.block_values[name]};")
            for name in region.remat:
                value = self.expr(self.plan.remat[name].value).text
                self.line(f"{self.ctype(self.func.locals[name])} {self.names[name]} = {value};")
            for name in region.private:
                self.line(self.declaration(name, self.func.var_type(name)))
            yield
            self.unmapped()
            if region.has_return:
                self.line(f"kiln_next_{region.index}:;")
            for name in loaded:
                if name in writes and not isinstance(self.func.var_type(name), ArrayType):
                    self.line(f"{self.thread_arrays[name]}[kiln_t] = {self.names[name]};")
            for name in stored:
                self.line(f"{self.block_stores[name]} = {self.names[name]};")
        for name in stored:
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
