"""Building the host side of a library: the system C compiler (`cc`, or `KILN_CC`)."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from functools import cache
from pathlib import Path

from .. import settings
from ..framework.buildenv import ToolNotFoundError, find_command
from .actions import ActionError

HOST_FLAGS = ("-O2", "-fPIC", "-fvisibility=hidden", "-w")
"""Host code: position independent, only the header's functions exported (`NAME_API`)."""
LINK_FLAGS = ("-shared", "-Wl,--no-undefined")
"""`--no-undefined`: a symbol nothing provides fails the build, not the first dlopen."""


@cache
def host_compiler() -> tuple[str, ...]:
    try:
        return find_command(settings.c_compiler())
    except ToolNotFoundError as exc:
        raise ActionError(f"building a library needs a C compiler (cc, or set KILN_CC): "
                          f"{exc}") from None


def run_tool(cmd: Sequence[str], what: str) -> None:
    result = subprocess.run(list(cmd), capture_output=True, text=True)
    if result.returncode != 0:
        log = (result.stderr or result.stdout).strip()
        raise ActionError(f"{what} failed ({' '.join(cmd)}):\n{log}")


def compile_object(text: str, stem: Path, include: Path,
                   command: Sequence[str] | None = None) -> str:
    """Compile C `text` (saved as `stem.c`) to `stem.o`; `command` is the compiler and
    flags (default: the host compiler with HOST_FLAGS)."""
    source = stem.with_suffix(".c")
    source.write_text(text)
    obj = str(stem.with_suffix(".o"))
    cmd = list(command or (*host_compiler(), *HOST_FLAGS))
    run_tool([*cmd, f"-I{include}", "-c", str(source), "-o", obj], f"compiling {source.name}")
    return obj


def link_library(lib: str, objects: Sequence[str], out: Path, libraries: Sequence[str] = (),
                 compiler: Sequence[str] | None = None) -> None:
    """`out/libLIB.so` from the objects."""
    cmd = [*(compiler or host_compiler()), *LINK_FLAGS, f"-Wl,-soname,lib{lib}.so", *objects,
           *libraries, "-o", str(out / f"lib{lib}.so")]
    run_tool(cmd, f"linking lib{lib}.so")
