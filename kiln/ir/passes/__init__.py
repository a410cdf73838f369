"""IR passes: checks (raise KernelError) and transforms (Program -> Program).

`check_program` runs once per signature for every backend. A backend's `pipeline(device)`
returns the transforms it wants, usually `pipeline_for(device, inline=...)`: a `Pipeline` of
named stages, so that a backend replaces or drops a stage by its name, not its position. Transforms
never mutate their input (the checked program is cached and shared between backends): each
returns a new Program.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol, overload

from ..intrinsics import Spelling
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
from .lockstep import lower_lockstep_loops
from .matrix import lower_matrix_ops
from .operations import check_implementations, lower_operations
from .recursion import bound_recursion
from .thread_loops import lower_thread_loops, widen_index_arithmetic
from .validate import InternalError, validate
from .warps import lower_single_lane_warps

Pass = Callable[[Program], Program]

__all__ = [
    "BackendTraits", "InternalError", "Pass", "Pipeline", "PipelineTarget", "bound_recursion",
    "check_definite_assignment", "check_program",
    "default_pipeline", "device_feature_check", "fold_constants", "inline_aggregate_returns",
    "inline_functions", "lower_aggregates", "lower_bf16", "lower_matrix_ops",
    "lower_lockstep_loops", "lower_single_lane_warps",
    "lower_thread_loops", "pipeline_for", "remove_dead_code", "widen_index_arithmetic",
]


def check_program(program: Program) -> Program:
    """The checks every kernel gets whatever the backend: the structural type check, then
    the convergence check. Returns the program unchanged."""
    validate(program)
    check_convergence(program)
    return program


@dataclass(frozen=True)
class Pipeline(Sequence[Pass]):
    """Passes in order, each under a stage name: a backend edits a pipeline by name
    (`replace`, `without`, `then`), so that stages added to the shared pipeline later do
    not shift what it edits. Iterates over the passes."""

    stages: tuple[tuple[str, Pass], ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.stages)

    def stage(self, name: str) -> Pass:
        """The pass of stage `name`."""
        return self.stages[self._index(name)][1]

    def replace(self, name: str, transform: Pass) -> Pipeline:
        """This pipeline with stage `name` running `transform` instead."""
        i = self._index(name)
        return Pipeline((*self.stages[:i], (name, transform), *self.stages[i + 1:]))

    def without(self, name: str) -> Pipeline:
        """This pipeline without stage `name`."""
        i = self._index(name)
        return Pipeline((*self.stages[:i], *self.stages[i + 1:]))

    def then(self, name: str, transform: Pass) -> Pipeline:
        """This pipeline with stage `name` appended."""
        return Pipeline((*self.stages, (name, transform)))

    def _index(self, name: str) -> int:
        try:
            return self.names.index(name)
        except ValueError:
            raise KeyError(f"no pipeline stage {name!r} (stages: {', '.join(self.names)})") \
                from None

    def __iter__(self) -> Iterator[Pass]:
        return (transform for _, transform in self.stages)

    def __len__(self) -> int:
        return len(self.stages)

    @overload
    def __getitem__(self, index: int) -> Pass: ...

    @overload
    def __getitem__(self, index: slice) -> list[Pass]: ...

    def __getitem__(self, index: int | slice) -> Pass | list[Pass]:
        if isinstance(index, slice):
            return [transform for _, transform in self.stages[index]]
        return self.stages[index][1]


def default_pipeline() -> Pipeline:
    """Matrix operations as scalar code, functions returning vectors, records or tuples
    inlined, then records, variants and vectors lowered to scalars, bf16 arithmetic moved
    to f32, constants folded, dead code gone."""
    return Pipeline((("matrix", lower_matrix_ops(False)), ("returns", inline_aggregate_returns),
                     ("aggregates", lower_aggregates), ("bf16", lower_bf16),
                     ("fold", fold_constants), ("dead_code", remove_dead_code)))


class BackendTraits(Protocol):
    """What the pipeline needs to know of a device's backend."""

    @property
    def name(self) -> str: ...

    @property
    def supports_recursion(self) -> bool: ...

    @property
    def intrinsic_namespaces(self) -> tuple[str, ...]: ...

    def intrinsic_implementation(self, name: str) -> Spelling: ...


class PipelineTarget(Protocol):
    """What `pipeline_for` reads from a device (a `kiln.Device`): the passes know devices
    only through this, so they sit below the runtime."""

    @property
    def capabilities(self) -> Capabilities: ...

    @property
    def backend(self) -> BackendTraits: ...


def pipeline_for(device: PipelineTarget | None, *, inline: bool = False,
                 matrix_units: bool = False, warpgroup_mma: bool = False,
                 backend: BackendTraits | None = None,
                 single_lane_warps: bool = False, then: Sequence[Pass] = ()) -> Pipeline:
    """The default pipeline, after the device's feature check (when a device is known) and
    before inlining of every device function (for backends that cannot call functions).
    On devices whose warps have one thread, warp operations are lowered first. Records,
    variants and vectors are lowered before anything else, so that the checks see scalars.
    Where the backend cannot recurse (or every call is inlined), recursive functions are
    inlined to the depth the user gives (`bound_recursion`). Matrix operations come first:
    native where the device has `matrix_units` (warpgroup products too where it has
    `warpgroup_mma`), scalar code elsewhere. Without a device
    (code generated for another machine), `backend` gives what depends on the backend
    alone: operations it does not implement lowered, recursion bounding, the check that
    each intrinsic has an implementation; and `single_lane_warps` says its warps have one
    thread on every device (threads run as loops). `then` (the backend's `codegen_passes`)
    run before that check, so that what they remove (`barrier`, under `lower_thread_loops`)
    needs no spelling."""
    traits = device.backend if device is not None else backend
    matrix = lower_matrix_ops(matrix_units, warpgroup_mma)
    shared = default_pipeline().replace("matrix", matrix)
    stages = list(shared.stages[:3])
    if traits is not None:
        stages.append(("operations", lower_operations(traits.intrinsic_implementation)))
    if device is not None:
        stages.append(("features", device_feature_check(device.capabilities)))
        single_lane_warps = device.capabilities.warp_size == 1
    if single_lane_warps:
        stages.append(("warps", lower_single_lane_warps))
    if inline or (traits is not None and not traits.supports_recursion):
        stages.append(("recursion", bound_recursion(traits.name if traits is not None
                                                    else "this")))
    stages += shared.stages[3:]
    if inline:
        stages.append(("inline", inline_functions))
    stages += [(f"codegen:{getattr(p, '__name__', k)}", p) for k, p in enumerate(then)]
    if traits is not None:
        stages.append(("implementations",
                       check_implementations(traits.name, traits.intrinsic_implementation,
                                             traits.intrinsic_namespaces)))
    return Pipeline(tuple(stages))
