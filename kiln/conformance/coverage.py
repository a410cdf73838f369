"""IR coverage: do the suite's kernels, together, use every construct a backend must handle?

Computed by building every conformance kernel's program (for its annotations or its
declared signatures) and walking it, as the frontend makes it, after `lower_aggregates`
(which makes the nodes every backend sees instead of records and vectors, `VectorAccess`)
and after `lower_thread_loops` (the explicit block and thread loops of non-SIMT targets,
whose warps have one thread), against what the IR and the intrinsic registry define.
Adding an IR node, an operator or an intrinsic without a conformance case shows up here.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from dataclasses import dataclass, field

from ..execution.kernel import Kernel
from ..ir import nodes as ir
from ..ir.intrinsics import intrinsics
from ..ir.nodes import Program
from ..ir.passes import (
    inline_aggregate_returns,
    lower_aggregates,
    lower_single_lane_warps,
    lower_thread_loops,
)
from ..ir.passes.validate import BINOPS, COMPARES, UNARY
from ..ir.visit import walk
from .cases import MODULES
from .registry import declared_signatures

BOOLOPS = ("and", "or")
OPERATOR_NODES: dict[type, tuple[str, ...]] = {
    ir.BinOp: BINOPS, ir.UnaryOp: UNARY, ir.Compare: COMPARES, ir.BoolOp: BOOLOPS,
}


# Nodes the shared passes remove before any backend sees them: `check_bounds` turns each
# `CheckedIndex` (debug=True's view checks) into a call.
REMOVED_BEFORE_BACKENDS = frozenset({"CheckedIndex"})


def node_classes() -> set[str]:
    """Every concrete expression and statement class of the IR that backends handle."""
    return {name for name, cls in vars(ir).items()
            if inspect.isclass(cls) and issubclass(cls, (ir.Expr, ir.Stmt))
            and cls not in (ir.Expr, ir.Stmt) and name not in REMOVED_BEFORE_BACKENDS}


@dataclass
class Coverage:
    nodes: set[str] = field(default_factory=set)
    operators: set[tuple[str, str]] = field(default_factory=set)  # (node class, operator)
    intrinsics: set[str] = field(default_factory=set)

    def add(self, program: Program) -> None:
        for func in (*program.functions, program.kernel):
            for node in walk(func.body):
                self.nodes.add(type(node).__name__)
                if isinstance(node, (ir.BinOp, ir.UnaryOp, ir.Compare, ir.BoolOp)):
                    self.operators.add((type(node).__name__, node.op))
                if isinstance(node, ir.IntrinsicCall):
                    self.intrinsics.add(node.name)

    def gaps(self) -> list[str]:
        """What the IR and the registry define but no conformance kernel uses."""
        out = [f"IR node {n}" for n in sorted(node_classes() - self.nodes)]
        for cls, ops in OPERATOR_NODES.items():
            out += [f"{cls.__name__} operator {op!r}" for op in ops
                    if (cls.__name__, op) not in self.operators]
        out += [f"intrinsic {n}" for n in intrinsics.names() if n not in self.intrinsics
                and intrinsics[n].category not in ("matrix_native", "plugin", "operation")]
        return out


def conformance_kernels() -> Iterator[Kernel]:
    """The module-level kernels of the built-in case modules."""
    for module in MODULES:
        for value in vars(module).values():
            if isinstance(value, Kernel):
                yield value
            elif isinstance(value, dict):  # kernels made per intrinsic
                yield from (v for v in value.values() if isinstance(v, Kernel))


def kernel_programs(kernel: Kernel) -> list[Program]:
    signatures = declared_signatures(kernel)
    if not signatures:
        types = [t for _, t in kernel.signature]
        if any(t is None for t in types):
            raise ValueError(f"conformance kernel {kernel.name} has unannotated parameters: "
                             "declare its launch types with @signatures(...)")
        signatures = [tuple(types)]  # type: ignore[arg-type]
    return [kernel.program(types) for types in signatures]


def suite_coverage() -> Coverage:
    coverage = Coverage()
    for kernel in conformance_kernels():
        for program in kernel_programs(kernel):
            coverage.add(program)
            lowered = lower_aggregates(inline_aggregate_returns(program))
            coverage.add(lowered)
            coverage.add(lower_thread_loops(lower_single_lane_warps(lowered)))
    return coverage
