"""Specialise kernels for a target and run an action on them, all or nothing.

The action writes into a scratch folder beside the output; only a complete result is
renamed into place, so a failed build leaves the output folder as it was.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..execution.drivers import frontend
from ..execution.kernel import Kernel
from ..framework.backend import Backend
from ..framework.registry import registry, target_pipeline
from ..ir.types import ArrayType, ConstexprType, ScalarType, Type
from .actions import ActionError, ActionRequest, SpecialisedKernel, action_named

_C_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def library_name(stem: str) -> str:
    """A C identifier from a module's file name (`my-kernels` -> `my_kernels`)."""
    name = re.sub(r"\W", "_", stem)
    return f"_{name}" if name[:1].isdigit() else name


def target_backend(target: str) -> Backend:
    try:
        return registry.get(target).backend
    except KeyError as exc:
        raise ActionError(exc.args[0]) from None


def hinted_types(kernel: Kernel) -> tuple[Type, ...]:
    """The kernel's annotations, when they give every parameter a type or value."""
    untyped = [name for name, t in kernel.signature if t is None]
    valueless = [name for name, t in kernel.signature
                 if isinstance(t, ConstexprType) and t.value is None]
    if untyped or valueless:
        what = [*([f"{', '.join(untyped)} {'has' if len(untyped) == 1 else 'have'} no type "
                   "hint"] if untyped else []),
                *([f"{', '.join(valueless)} {'is a' if len(valueless) == 1 else 'are'} "
                   f"kiln.constexpr without a value"] if valueless else [])]
        spelled = ",".join(
            f"TYPE_OF_{name.upper()}" if t is None
            else f"VALUE_OF_{name.upper()}" if isinstance(t, ConstexprType) and t.value is None
            else str(t) for name, t in kernel.signature)
        raise ActionError(
            f"{kernel.name}: {' and '.join(what)}; give every parameter with --kernel "
            f"{kernel.name}:{spelled} (a type such as f32[:] or i32, or a constexpr's "
            "value such as 4)")
    return tuple(t for _, t in kernel.signature)  # type: ignore[misc]


def agrees(declared: Type | None, given: Type) -> bool:
    """A type given for a parameter is its annotation (a launch in-process refuses any
    other), any constexpr value for a bare `kiln.constexpr`; unannotated ones take any."""
    if declared is None or declared == given:
        return True
    return (isinstance(declared, ConstexprType) and declared.value is None
            and isinstance(given, ConstexprType))


def specialise(kernel: Kernel, types: Sequence[Type], backend: Backend) -> SpecialisedKernel:
    """The kernel lowered by the target's pipeline for `types` (its hints when empty)."""
    arg_types = tuple(types) or hinted_types(kernel)
    names = tuple(name for name, _ in kernel.signature)
    if len(arg_types) != len(names):
        raise ActionError(f"{kernel.name} has {len(names)} parameter(s) ({', '.join(names)}), "
                          f"{len(arg_types)} type(s) given")
    for (name, declared), t in zip(kernel.signature, arg_types):
        if not agrees(declared, t):
            raise ActionError(f"{kernel.name}: parameter {name} is annotated {declared}, so it "
                              f"cannot take {t} (only unannotated parameters take any type)")
        plain = t.elem if isinstance(t, ArrayType) else t
        if not isinstance(plain, (ScalarType, ConstexprType)):
            raise ActionError(f"{kernel.name}: parameter {name} is {t}; library entry points "
                              "take arrays of scalars, scalars and constexpr values")
    program = frontend(kernel, arg_types, backend)  # with debug=True's checks, as in-process
    for stage in target_pipeline(backend):
        program = stage(program)
    return SpecialisedKernel(kernel.name, arg_types, names, program, kernel.options)


def build(kernels: Sequence[tuple[Kernel, Sequence[Type]]], *, target: str, out: Path | str,
          name: str, emit: str = "library", architectures: Sequence[str] = (),
          settings: dict[str, Any] | None = None) -> list[Path]:
    """Run action `emit` for `target` on the kernels (each with its types, or () for its
    hints); returns the files written into `out`."""
    if not _C_NAME.match(name):
        raise ActionError(f"library name {name!r} is not a C identifier (use --name)")
    if not kernels:
        raise ActionError("no kernels to build")
    action = action_named(emit)
    if target not in action.targets:
        raise ActionError(f"the {emit} action has no target {target!r} "
                          f"(targets: {', '.join(sorted(action.targets))})")
    backend = target_backend(target)
    specialised = [specialise(k, types, backend) for k, types in kernels]
    out = Path(out)
    blocker = next((p for p in (out, *out.parents) if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        raise ActionError(f"-o {out}: {blocker} is a file, not a folder")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=f".{out.name}.kiln-", dir=out.parent))
    except OSError as exc:
        raise ActionError(f"-o {out}: cannot write there: {exc.strerror or exc}") from None
    umask = os.umask(0)
    os.umask(umask)
    scratch.chmod(0o777 & ~umask)  # mkdtemp's folder is private; the result is not
    try:
        action.run(ActionRequest(name, target, specialised, scratch, tuple(architectures),
                                 dict(settings or {})))
        try:
            return _move_into(scratch, out)
        except OSError as exc:  # e.g. a folder where a file of the result goes
            raise ActionError(f"-o {out}: moving the files into place failed: {exc}") from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _move_into(scratch: Path, out: Path) -> list[Path]:
    """The finished files into `out`: the folder renamed into place when `out` does not
    exist yet, else each file replaced (each replacement is atomic)."""
    names = sorted(p.name for p in scratch.iterdir())
    if not out.exists():
        os.rename(scratch, out)
    else:
        for n in names:
            os.replace(scratch / n, out / n)
    return [out / n for n in names]
