"""Build environments (DaCe's idea): what a backend compiles with, as one hashable object.

A `BuildEnv` names the compiler (a command or a library such as NVRTC) and its version,
the flags, include paths, libraries and defines. Its `identity` goes into compile-cache
keys, so upgrading the compiler or changing a flag misses the cache.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field, replace


@dataclass(frozen=True)
class BuildEnv:
    backend: str
    compiler: tuple[str, ...]
    """The compiler command (argv prefix), or a library name such as ("nvrtc",)."""
    version: str
    flags: tuple[str, ...] = ()
    include_dirs: tuple[str, ...] = ()
    library_dirs: tuple[str, ...] = ()
    libraries: tuple[str, ...] = ()
    defines: tuple[str, ...] = ()
    extra: tuple[tuple[str, str], ...] = field(default=())
    """Anything else that changes the binary, as sorted (name, value) pairs."""

    @property
    def identity(self) -> str:
        """A stable hash of everything above."""
        text = json.dumps([self.backend, self.compiler, self.version, self.flags,
                           self.include_dirs, self.library_dirs, self.libraries, self.defines,
                           self.extra])
        return hashlib.sha256(text.encode()).hexdigest()

    def with_flags(self, *flags: str) -> BuildEnv:
        return replace(self, flags=(*self.flags, *flags)) if flags else self

    def with_defines(self, *defines: str) -> BuildEnv:
        """More `NAME=value` defines (a thread-loop kernel's block shape, for one)."""
        return replace(self, defines=(*self.defines, *defines)) if defines else self

    def compile_args(self) -> list[str]:
        """Flags, defines and include paths in the usual C-compiler spelling: before the
        sources."""
        args = list(self.flags)
        args += [f"-D{d}" for d in self.defines]
        args += [f"-I{d}" for d in self.include_dirs]
        return args

    def link_args(self) -> list[str]:
        """Library paths and libraries: after the sources and objects (a linker that drops
        unneeded libraries, `--as-needed`, keeps only those a preceding input uses)."""
        return [f"-L{d}" for d in self.library_dirs] + [f"-l{lib}" for lib in self.libraries]

    def describe(self) -> str:
        args = [*self.compile_args(), *self.link_args()]
        return f"{' '.join(self.compiler)} ({self.version}) {' '.join(args)}"


class ToolNotFoundError(RuntimeError):
    """A compiler named by a build environment is missing or does not run."""


def find_command(spec: str) -> tuple[str, ...]:
    """Resolve a command line such as `cc` or `ccache gcc` (first word on PATH)."""
    argv = shlex.split(spec)
    if not argv:
        raise ToolNotFoundError("empty compiler command")
    path = shutil.which(argv[0])
    if path is None:
        raise ToolNotFoundError(f"compiler '{argv[0]}' not found on PATH")
    return (path, *argv[1:])


def command_version(command: tuple[str, ...]) -> str:
    """The first line of `command --version` (e.g. `gcc (Debian 12.2.0-14) 12.2.0`)."""
    try:
        result = subprocess.run([*command, "--version"], capture_output=True, text=True,
                                timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolNotFoundError(f"'{' '.join(command)} --version' failed: {exc}") from None
    first = (result.stdout or result.stderr).strip().splitlines()
    if result.returncode != 0 or not first:
        raise ToolNotFoundError(f"'{' '.join(command)} --version' failed: {result.stderr.strip()}")
    return first[0]
