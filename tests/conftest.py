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

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def interp() -> kiln.Device:
    """The NumPy interpreter's device: always there, needs nothing but NumPy."""
    return kiln.device("interp")


def marked_line(obj: Any, marker: str = "# error") -> int:
    """The line number of the one source line of a kernel or function marked `marker`."""
    pyfunc = getattr(obj, "pyfunc", obj)
    lines, first = inspect.getsourcelines(pyfunc)
    hits = [first + i for i, line in enumerate(lines) if marker in line]
    assert len(hits) == 1, f"{pyfunc.__name__}: mark exactly one line with '{marker}'"
    return hits[0]


def run_python(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run `python -c code` in a fresh interpreter (for environment variables read once)."""
    full_env = {k: v for k, v in os.environ.items()
                if not k.startswith(("KILN_BACKEND", "KILN_DISABLE_"))}
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-c", code], env=full_env, capture_output=True,
                          text=True, timeout=120, cwd=REPO)
