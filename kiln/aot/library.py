"""The `library` action: a C header, a shared library and a JSON manifest.

`build_library` writes `NAME.h` (`header.py`) and `NAME.json` for any target; the target
(`LibraryTarget`, one per backend that supports the action, registered by the backend's
package) generates its kernels' code, its host C around the shared launch checks
(`glue.py`) and builds `libNAME.so`.
"""

from __future__ import annotations

import json
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any, ClassVar

from ..ir.types import ArrayType, ConstexprType
from .actions import (
    Action,
    ActionError,
    ActionRequest,
    register_action,
    register_action_target,
)
from .entries import EntryPoint, entry_points
from .header import header_text

MANIFEST_FORMAT = 2
"""2: `NAME_copy_to_host` takes the host buffer's size; entries have `block_shapes`."""


class LibraryTarget(ABC):
    """How one target builds `libNAME.so` for the entry points."""

    name: ClassVar[str]
    notes: ClassVar[tuple[str, ...]]
    """Lines for the header's comment: where memory lives, what a device is."""
    interior_pointers: ClassVar[bool]
    """Whether a device pointer may point inside an allocation (else only at its start)."""
    settings: ClassVar[dict[str, str]] = {}
    """The build settings it takes beyond those of every target (`blocks`), by name, with
    the command-line option that gives each."""

    @abstractmethod
    def architectures(self, requested: Sequence[str]) -> tuple[str, ...]:
        """The architectures to build for (validated; a default when none are asked);
        raises ActionError naming the bad one."""

    @abstractmethod
    def build(self, lib: str, entries: Sequence[EntryPoint], architectures: tuple[str, ...],
              settings: dict[str, Any], work: Path, out: Path) -> dict[str, Any]:
        """Write `out/libLIB.so` (scratch files go to `work`); return what the manifest
        should add about the build (per-target settings)."""


def kiln_version() -> str:
    try:
        return metadata.version("kiln")
    except metadata.PackageNotFoundError:  # a source tree on sys.path, not installed
        return "unknown"


def build_library(target: LibraryTarget, request: ActionRequest) -> None:
    version = kiln_version()
    lib = request.name
    settings = dict(request.settings)
    blocks = settings.pop("blocks", ())
    for name in settings:
        if name not in target.settings:
            known = ", ".join(target.settings.values()) or "none"
            raise ActionError(f"the {target.name} target does not take {name!r} "
                              f"(its options: {known})")
    archs = target.architectures(request.architectures)
    entries = entry_points(lib, request.kernels, blocks)
    (request.out_dir / f"{lib}.h").write_text(
        header_text(lib, target.name, entries, target.notes, version,
                    target.interior_pointers))
    with tempfile.TemporaryDirectory(prefix="kiln-build-") as work:
        extra = target.build(lib, entries, archs, settings, Path(work), request.out_dir)
    manifest = {
        "format": MANIFEST_FORMAT,
        "kiln_version": version,
        "action": "library",
        "target": target.name,
        "architectures": list(archs),
        "library": f"lib{lib}.so",
        "header": f"{lib}.h",
        "prefix": lib,
        **extra,
        "entry_points": [_manifest_entry(e) for e in entries],
    }
    (request.out_dir / f"{lib}.json").write_text(json.dumps(manifest, indent=2) + "\n")


def _manifest_entry(e: EntryPoint) -> dict[str, Any]:
    k = e.kernel
    params = []
    for name, t in zip(k.parameters, k.types):
        if isinstance(t, ConstexprType):
            params.append({"name": name, "kind": "constexpr", "value": t.value})
        elif isinstance(t, ArrayType):
            params.append({"name": name, "kind": "array", "element_type": t.elem.name,
                           "ndim": t.ndim, "written": name in e.written})
        else:
            params.append({"name": name, "kind": "scalar", "element_type": str(t)})
    return {
        "c_name": e.c_name,
        "kernel": k.kernel,
        "specialisation": [str(t) for t in k.types],
        "options": k.options.changed(),
        "block_shapes": [list(b) for b in e.blocks] or None,
        "parameters": params,
        "c_parameters": [{"name": p.name, "role": p.role, "c_type": p.ctype,
                          "parameter": p.abi.param, "element_type": p.abi.type.name,
                          **({"axis": p.abi.axis} if p.role == "extent" else {})}
                         for p in e.params],
    }


LIBRARY = register_action(Action(
    "library", "a C header, a shared library and a JSON manifest (NAME.h, libNAME.so, "
    "NAME.json) with one launch function per kernel specialisation"))


def register_library_target(target: LibraryTarget) -> None:
    """Make `kiln build --emit library --target NAME` use `target`."""
    register_action_target(LIBRARY.name, target.name,
                           lambda request: build_library(target, request))
