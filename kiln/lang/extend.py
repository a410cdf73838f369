"""Public extension points for kernels: new intrinsics and new IR operations.

    saturate = kiln.backend.register_intrinsic(
        "saturate", float_like, arity=1, variance=None,
        implementations={"c": "fmin{f}(fmax{f}({0}, 0), 1)", "interp": saturate_numpy})

    lerp = kiln.backend.register_operation("lerp", same_float(3), lower_lerp, arity=3)

Both return the object kernels call (`saturate(x)`); the frontend types the call through
the registry. An intrinsic needs an implementation per backend (`implementations`, or
later `kiln.backend.intrinsics.implement(namespace, {...})`); a backend without one refuses the
kernel with an UnsupportedError at the call. An operation also has a lowering to existing
IR, used by every backend that does not implement it natively.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..ir.intrinsics import Intrinsic, Lowering, Typing, Variance, intrinsics
from .builtins import KernelOnly, register_intrinsic_object


def register_intrinsic(name: str, typing: Typing, *, arity: int | tuple[int, int],
                       variance: Variance | None = Variance.THREAD, convergent: bool = False,
                       side_effects: bool = False,
                       implementations: Mapping[str, Any] | None = None) -> KernelOnly:
    """Add an intrinsic usable from kernels: `typing(arg_types) -> (param_types, result)`
    (raise `kiln.backend.IntrinsicTypeError` for arguments it refuses), its variance (None: that of
    its arguments), whether a whole block must reach it (`convergent`) and whether it
    writes memory; `implementations` maps backend namespaces ("c", "cuda", "interp", ...)
    to a spelling or a callable (docs/backends.md, the intrinsic registry)."""
    return _register(Intrinsic(name, "plugin", _arity(arity), typing, variance, convergent,
                               side_effects), implementations)


def register_operation(name: str, typing: Typing, lowering: Lowering, *,
                       arity: int | tuple[int, int], variance: Variance | None = None,
                       implementations: Mapping[str, Any] | None = None) -> KernelOnly:
    """Add an IR operation: typed like an intrinsic, and lowered by
    `lowering(args, result_type) -> ir.Expr` (built from existing IR nodes) for every
    backend without a native implementation in `implementations`."""
    return _register(Intrinsic(name, "operation", _arity(arity), typing, variance,
                               lowering=lowering), implementations)


def _register(spec: Intrinsic, implementations: Mapping[str, Any] | None) -> KernelOnly:
    if spec.name in intrinsics:
        raise ValueError(f"an intrinsic named {spec.name!r} is already registered")
    if not spec.name.isidentifier():
        raise ValueError(f"{spec.name!r} cannot name an intrinsic (it is no identifier)")
    intrinsics.register(spec)
    for namespace, impl in (implementations or {}).items():
        intrinsics.implement(namespace, {spec.name: impl})
    return register_intrinsic_object(spec.name)


def _arity(arity: int | tuple[int, int]) -> tuple[int, int]:
    return (arity, arity) if isinstance(arity, int) else arity

