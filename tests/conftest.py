"""Shared fixtures: the always-available interp device and helpers for error tests."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import kiln
from kiln.builtin_backends.interp import InterpBackend
from kiln.framework.registry import BackendEntry

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def interp() -> kiln.Device:
    """The NumPy interpreter's device: always there, needs nothing but NumPy."""
    return kiln.device("interp")


def backend_entry(name: str) -> BackendEntry:
    """The registry's entry for backend `name` (available or not, with the reason)."""
    return next(e for e in kiln.backends() if e.name == name)


def requires_backend(name: str, missing: str) -> pytest.MarkDecorator:
    """Skips where backend `name` is unavailable, with the reason `missing: <why>`."""
    entry = backend_entry(name)
    return pytest.mark.skipif(not entry.available, reason=f"{missing}: {entry.reason}")


def marked_line(obj: Any, marker: str = "# error") -> int:
    """The line number of the one source line of a kernel or function marked `marker`."""
    pyfunc = getattr(obj, "pyfunc", obj)
    lines, first = inspect.getsourcelines(pyfunc)
    hits = [first + i for i, line in enumerate(lines) if marker in line]
    assert len(hits) == 1, f"{pyfunc.__name__}: mark exactly one line with '{marker}'"
    return hits[0]


def assert_kernel_error(kernel: kiln.Kernel, cls: type[kiln.KernelError], fragment: str) -> None:
    """Building `kernel`'s IR raises exactly a `cls` whose message holds `fragment`, located
    at the kernel's line marked `# error` in the file that defines it."""
    with pytest.raises(kiln.KernelError) as info:
        kernel.ir()
    exc = info.value
    assert type(exc) is cls, f"{type(exc).__name__}: {exc}"
    assert fragment in exc.message, exc.message
    assert exc.loc is not None
    here = str(Path(inspect.getsourcefile(kernel.pyfunc) or "").resolve())
    assert (exc.loc.file, exc.loc.line) == (here, marked_line(kernel))


def run_python(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run `python -c code` in a fresh interpreter (for environment variables read once)."""
    full_env = {k: v for k, v in os.environ.items()
                if not k.startswith(("KILN_BACKEND", "KILN_DISABLE_"))}
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-c", code], env=full_env, capture_output=True,
                          text=True, timeout=120, cwd=REPO)


class MirrorBackend(InterpBackend):
    """A third-party backend, as a plugin would write one: kiln's NumPy executor under its
    own name, with its own device, registered through the public `kiln.backend.register_backend`."""

    name = "mirror"


@pytest.fixture(scope="session")
def mirror() -> kiln.Device:
    """The device of the third-party `mirror` backend (registered on first use)."""
    if "mirror" not in {entry.name for entry in kiln.backends()}:
        kiln.backend.register_backend(MirrorBackend(), priority=1)
    return kiln.device("mirror")


@pytest.fixture(scope="session")
def other_device(interp: kiln.Device, mirror: kiln.Device) -> kiln.Device:
    """A device other than interp's."""
    return mirror
