"""`lower_thread_loops`: SIMT kernels as explicit block and thread loops (the cpu backend's
lowering, usable by any non-SIMT target): the nodes it makes, the validator's rules for
them, the printer, device functions' index parameters and 64-bit index arithmetic."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

import kiln
from kiln import f32, i32
from kiln.codegen.regions import plan_region
from kiln.codegen.threadloop_intrinsics import THREAD_LOOP_IMPLS
from kiln.examples import block_sum, matmul_tiled_square
from kiln.ir import nodes as ir
from kiln.ir.intrinsics import intrinsics
from kiln.ir.passes import (
    InternalError,
    lower_aggregates,
    lower_thread_loops,
    pipeline_for,
    widen_index_arithmetic,
)
from kiln.ir.passes.validate import validate
from kiln.ir.printer import format_program
from kiln.ir.types import i64, void
from kiln.ir.visit import walk
from tests.helpers import marked_line, requires_backend


def lowered(kernel: kiln.Kernel, *types: kiln.Type) -> ir.Program:
    program = lower_thread_loops(lower_aggregates(kernel.program(kernel._types(types))))
    validate(program)
    return program


def test_barriers_split_the_kernel_into_thread_loops_under_one_block_loop() -> None:
    program = lowered(block_sum)
    (blocks,) = program.kernel.body
    assert isinstance(blocks, ir.BlockLoop) and not blocks.exits
    assert not any(isinstance(n, ir.IntrinsicCall) and n.name == "barrier"
                   for n in walk(blocks))
    kinds = [type(s).__name__ for s in blocks.body]
    # set-up, the grid-stride loop, the store to shared memory, k = block_dim // 2, the
    # tree (a block-level loop of thread loops), the atomic
    assert kinds == ["ThreadLoop", "LockstepLoop", "ThreadLoop", "ThreadLoop", "While",
                     "ThreadLoop"]
    lockstep = blocks.body[1]
    assert isinstance(lockstep, ir.LockstepLoop) and lockstep.counted
    (induction,) = lockstep.inductions
    assert isinstance(induction, ir.Induction) and induction.var == "i"
    assert blocks.thread_vars == ["acc"] and blocks.block_vars == ["k"]
    text = format_program(program)
    assert "    for each block (thread vars: acc; block vars: k):\n" in text
    assert "        lockstep while i < n (counted; loads: acc; stores: acc):\n" in text
    assert "            induction i = " in text
    assert "        while k > 0:\n            for each thread (private: t; loads: k):" in text


def test_values_computed_from_indices_are_recomputed_and_short_loops_unrolled() -> None:
    program = lowered(matmul_tiled_square)
    (blocks,) = program.kernel.body
    assert isinstance(blocks, ir.BlockLoop)
    assert blocks.thread_vars == ["acc"]  # row, col, tx, ty: recomputed, not stored
    loops = [n for n in walk(blocks) if isinstance(n, ir.ThreadLoop)]
    assert all("row" in loop.private for loop in loops if "row" in _reads(loop))
    inner = [n for n in walk(blocks) if isinstance(n, ir.For) and n.var == "k"]
    assert inner and all(f.unroll == 16 for f in inner)


def _reads(node: ir.Stmt) -> set[str]:
    return {n.name for n in walk(node) if isinstance(n, ir.Var)}


@kiln.func
def lane() -> i32:
    return kiln.thread_idx.x + 10 * kiln.block_idx.x


@kiln.func
def lane_twice() -> i32:
    return lane() * 2


@kiln.kernel
def through_functions(out: i32[:]):
    i = kiln.global_id(0)
    out[i] = lane_twice()


def test_device_functions_receive_the_index_intrinsics_they_reach() -> None:
    program = lowered(through_functions)
    for f in program.functions:
        assert [p.name for p in f.params] == ["thread_idx_x", "block_idx_x"]
        assert not any(isinstance(n, ir.IntrinsicCall) for n in walk(f.body))
    call = next(n for n in walk(program.kernel.body) if isinstance(n, ir.Call))
    assert [a.name for a in call.args] == ["thread_idx_x", "block_idx_x"]  # type: ignore


@requires_backend("cpu", "no C compiler with OpenMP")
def test_device_functions_see_each_threads_indices_on_cpu() -> None:
    out = kiln.to_device(np.zeros(64, np.int32), kiln.device("cpu"))
    through_functions[4, 16](out)
    i = np.arange(64)
    np.testing.assert_array_equal(out.numpy(), (i % 16 + 10 * (i // 16)) * 2)


@kiln.func
def synchronising(s: f32[:]):
    kiln.barrier()
    s[0] = 1.0


@kiln.kernel
def barrier_in_function(out: f32[:]):
    s = kiln.shared(f32, 4)
    synchronising(s)
    out[0] = s[0]


def test_a_barrier_inside_a_device_function_is_reported() -> None:
    with pytest.raises(kiln.UnsupportedError, match=r"call barrier\(\) from the kernel"):
        lowered(barrier_in_function)


def test_the_validator_checks_the_explicit_loops() -> None:
    program = lowered(block_sum)
    (blocks,) = program.kernel.body
    assert isinstance(blocks, ir.BlockLoop)
    loop = next(s for s in blocks.body if isinstance(s, ir.ThreadLoop))
    barrier = ir.ExprStmt(ir.IntrinsicCall(void, "barrier", []))
    cases = [
        ([ir.ThreadLoop([])], "a thread loop outside a block loop"),
        ([blocks, blocks], "a block loop that is not its kernel's whole body"),
        ([ir.BlockLoop([ir.ThreadLoop([ir.ThreadLoop([])])])], "or inside another"),
        ([ir.BlockLoop([ir.ThreadLoop([barrier])])], "a barrier inside a thread loop"),
        ([ir.BlockLoop([ir.ThreadLoop([], loads=["nowhere"])])], "not thread or block storage"),
        ([ir.BlockLoop([ir.If(ir.Compare(kiln.bool_, "<", ir.IntrinsicCall(i32, "thread_idx_x",
                                                                           []),
                                         ir.Const(i32, 1)), [loop])])],
         "thread_idx_x at block level"),
    ]
    for body, message in cases:
        program.kernel.body = body
        with pytest.raises(InternalError, match=message):
            validate(program)


@kiln.kernel
def shifted(x: f32[:], out: f32[:]):
    t = kiln.thread_idx.x
    out[t] = x[t + 1]


def test_index_arithmetic_is_widened_to_64_bits() -> None:
    program = widen_index_arithmetic(lowered(shifted))
    load = next(n for n in walk(program.kernel.body) if isinstance(n, ir.Load))
    (index,) = load.indices
    assert isinstance(index, ir.BinOp) and index.type == i64
    assert isinstance(index.left, ir.Cast) and index.right.type == i64
    validate(program)


@kiln.kernel
def lanes(out: i32[:]):
    out[kiln.global_id(0)] = kiln.lane_id()  # error


def test_warp_operations_left_for_thread_loops_name_the_capability() -> None:
    """A backend whose devices claim warps wider than one thread gets a message saying so,
    not a missing spelling for `lane_id`."""
    with pytest.raises(kiln.UnsupportedError, match=r"Capabilities\(warp_size=1\)") as info:
        lowered(lanes)
    assert info.value.loc is not None and info.value.loc.line == marked_line(lanes)


def test_region_plans_name_each_thread_loops_storage() -> None:
    (blocks,) = lowered(block_sum).kernel.body
    assert isinstance(blocks, ir.BlockLoop)
    plans = [plan_region(blocks, s) for s in blocks.body
             if isinstance(s, (ir.ThreadLoop, ir.LockstepLoop))]
    lockstep = plans[1]
    assert lockstep.lockstep and lockstep.inductions == ["i"]
    assert lockstep.loads == ["acc"] and lockstep.stores == ["acc"] and not lockstep.kept
    assert lockstep.thread_locals >= {"acc", "i"} and not lockstep.skips_exited
    loop = blocks.body[1]
    assert isinstance(loop, ir.LockstepLoop)
    test = plan_region(blocks, loop, reads=[loop.cond])  # the condition's pass
    assert "acc" not in test.loads and test.stores == [] and test.kept == []
    setting_k = [p for p in plans if "k" in p.stores]
    assert setting_k and all(p.kept == ["k"] for p in setting_k)
    tree = blocks.body[4]
    assert isinstance(tree, ir.While)
    step = tree.body[0]
    assert isinstance(step, ir.ThreadLoop)
    plan = plan_region(blocks, step)
    assert plan.loads == ["k"] and plan.private == ["t"]
    assert [a.target for a in plan.initial] == ["t"]


@dataclass(frozen=True)
class Traits:
    name: str
    supports_recursion: bool
    intrinsic_namespaces: tuple[str, ...]

    def intrinsic_implementation(self, name: str) -> Any:
        return intrinsics.registered(name, self.intrinsic_namespaces)


def test_the_implementation_check_runs_after_the_codegen_passes() -> None:
    """A thread-loop target need not spell `barrier`: `lower_thread_loops` removes it
    before the check that every intrinsic has an implementation."""
    spellings = {k: v for k, v in THREAD_LOOP_IMPLS.items() if k != "barrier"}
    intrinsics.implement("test_loops_without_barrier", spellings)
    traits = Traits("loops", False, ("test_loops_without_barrier", "c"))
    assert traits.intrinsic_implementation("barrier") is None
    program = block_sum.program(block_sum._types(()))
    for run in pipeline_for(None, backend=traits, single_lane_warps=True,
                            then=(lower_thread_loops,)):
        program = run(program)
    assert not any(isinstance(n, ir.IntrinsicCall) and n.name == "barrier"
                   for n in walk(program.kernel))
    with pytest.raises(kiln.UnsupportedError, match="barrier has no implementation"):
        for run in pipeline_for(None, backend=traits, single_lane_warps=True):
            run(block_sum.program(block_sum._types(())))
