"""IR passes: checks (raise KernelError) and transforms (Program -> Program).

`check_program` runs once per signature for every backend. A backend's `pipeline(device)`
returns the transforms it wants, usually `pipeline_for(device, inline=...)`. Transforms
never mutate their input (the checked program is cached and shared between backends): each
returns a new Program.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from ..nodes import Program
from ..target import Capabilities
from .aggregates import lower_aggregates
from .bf16 import lower_bf16
from .convergence import check_convergence
from .dead_code import remove_dead_code
from .definite import check_definite_assignment
from .features import device_feature_check
from .fold import fold_constants
from .inline import inline_aggregate_returns, inline_functions
from .matrix import lower_matrix_ops
from .operations import check_implementations, lower_operations
from .recursion import bound_recursion
from .thread_loops import lower_thread_loops, widen_index_arithmetic
from .validate import InternalError, validate
from .warps import lower_single_lane_warps

Pass = Callable[[Program], Program]

__all__ = [
    "BackendTraits", "InternalError", "Pass", "PipelineTarget", "bound_recursion",
    "check_definite_assignment", "check_program",
    "default_pipeline", "device_feature_check", "fold_constants", "inline_aggregate_returns",
    "inline_functions", "lower_aggregates", "lower_bf16", "lower_matrix_ops",
    "lower_single_lane_warps",
    "lower_thread_loops", "pipeline_for", "remove_dead_code", "widen_index_arithmetic",
]


def check_program(program: Program) -> Program:
    """The checks every kernel gets whatever the backend: the structural type check, then
    the convergence check. Returns the program unchanged."""
    validate(program)
    check_convergence(program)
    return program


def default_pipeline() -> list[Pass]:
    """Matrix operations as scalar code, functions returning vectors, records or tuples
    inlined, then records, variants and vectors lowered to scalars, bf16 arithmetic moved
    to f32, constants folded, dead code gone."""
    return [lower_matrix_ops(False), inline_aggregate_returns, lower_aggregates, lower_bf16,
            fold_constants, remove_dead_code]


class BackendTraits(Protocol):
    """What the pipeline needs to know of a device's backend."""

    @property
    def name(self) -> str: ...

    @property
    def supports_recursion(self) -> bool: ...

    @property
    def intrinsic_namespaces(self) -> tuple[str, ...]: ...


class PipelineTarget(Protocol):
    """What `pipeline_for` reads from a device (a `kiln.Device`): the passes know devices
    only through this, so they sit below the runtime."""

    @property
    def capabilities(self) -> Capabilities: ...

    @property
    def backend(self) -> BackendTraits: ...


def pipeline_for(device: PipelineTarget | None, *, inline: bool = False,
                 matrix_units: bool = False, backend: BackendTraits | None = None,
                 single_lane_warps: bool = False, then: Sequence[Pass] = ()) -> list[Pass]:
    """The default pipeline, after the device's feature check (when a device is known) and
    before inlining of every device function (for backends that cannot call functions).
    On devices whose warps have one thread, warp operations are lowered first. Records,
    variants and vectors are lowered before anything else, so that the checks see scalars.
    Where the backend cannot recurse (or every call is inlined), recursive functions are
    inlined to the depth the user gives (`bound_recursion`). Matrix operations come first:
    native where the device has `matrix_units`, scalar code elsewhere. Without a device
    (code generated for another machine), `backend` gives what depends on the backend
    alone: operations lowered along its namespaces, recursion bounding, the check that
    each intrinsic has an implementation; and `single_lane_warps` says its warps have one
    thread on every device (threads run as loops). `then` (the backend's `codegen_passes`)
    run before that check, so that what they remove (`barrier`, under `lower_thread_loops`)
    needs no spelling."""
    traits = device.backend if device is not None else backend
    _, returns, lowering, *rest = default_pipeline()
    passes: list[Pass] = [lower_matrix_ops(matrix_units), returns, lowering]
    if traits is not None:
        passes.append(lower_operations(traits.intrinsic_namespaces))
    if device is not None:
        passes.append(device_feature_check(device.capabilities))
        single_lane_warps = device.capabilities.warp_size == 1
    if single_lane_warps:
        passes.append(lower_single_lane_warps)
    if inline or (traits is not None and not traits.supports_recursion):
        passes.append(bound_recursion(traits.name if traits is not None else "this"))
    passes += rest
    if inline:
        passes.append(inline_functions)
    passes += then
    if traits is not None:
        passes.append(check_implementations(traits.name, traits.intrinsic_namespaces))
    return passes
