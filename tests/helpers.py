"""Helpers shared by test modules: backend availability, error locations, fresh interpreters,
a third-party backend and the compile cache's ownership checks. Fixtures stay in conftest.py;
test modules import these with `from tests.helpers import ...`."""

from __future__ import annotations

import inspect
import logging
import os
import re
import runpy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import kiln
from kiln import f32, i32
from kiln.builtin_backends.interp import InterpBackend
from kiln.framework.registry import BackendEntry
from kiln.ir import nodes as ir
from kiln.ir.types import Type, void

REPO = Path(__file__).resolve().parent.parent
TESTS = REPO / "tests"
OTHER_UID = 54321  # a user other than the one running the tests


def doc_examples(page: str) -> list[str]:
    """The Python code blocks of docs/`page`, in order (the docs tests run them)."""
    return re.findall(r"```python\n(.*?)```", (REPO / "docs" / page).read_text(), re.S)


def run_example(source: str, path: Path) -> dict[str, Any]:
    """Run a docs example in this process as a program written to `path` (kiln reads a
    kernel's source from its file); its globals."""
    path.write_text(source)
    return runpy.run_path(str(path), run_name="__main__")


def run_example_process(source: str, path: Path) -> subprocess.CompletedProcess:
    """Run a docs example as a program of its own, from `path`'s folder (10 minutes at
    most)."""
    path.write_text(source)
    return subprocess.run([sys.executable, str(path)], capture_output=True, text=True,
                          timeout=600, cwd=path.parent)


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


def compile_error(kernel: kiln.Kernel, *types: kiln.ScalarType) -> kiln.KernelError:
    """The KernelError that building `kernel`'s IR for `types` raises."""
    with pytest.raises(kiln.KernelError) as info:
        kernel.ir(*types)
    return info.value


PUBLIC_ENTRY = str(Path(kiln.Kernel.ir.__code__.co_filename).resolve())  # kiln/execution/kernel.py


def kiln_frames(exc: BaseException) -> list[str]:
    """The traceback's frames in kiln's package, as file:line."""
    package = str(Path(kiln.__file__).resolve().parent)
    tb, frames = exc.__traceback__, []
    while tb is not None:
        file = str(Path(tb.tb_frame.f_code.co_filename).resolve())
        if file.startswith(package):
            frames.append(f"{file}:{tb.tb_lineno}")
        tb = tb.tb_next
    return frames


def assert_only_entry_frames(exc: BaseException, most: int) -> None:
    """No kiln frame but the public entry point's (`kernel[...](...)` -> `launch`: two)."""
    frames = kiln_frames(exc)
    assert len(frames) <= most, frames
    assert all(f.startswith(PUBLIC_ENTRY + ":") for f in frames), frames


def run_python(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run `python -c code` in a fresh interpreter (for environment variables read once)."""
    full_env = {k: v for k, v in os.environ.items()
                if not k.startswith(("KILN_BACKEND", "KILN_DISABLE_"))}
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-c", code], env=full_env, capture_output=True,
                          text=True, timeout=120, cwd=REPO)


class MirrorBackend(InterpBackend):
    """A third-party backend, as a plugin would write one: kiln's NumPy executor under its
    own name, with its own device, registered through the public `kiln.register_backend`."""

    name = "mirror"


def give_away(path: Path) -> None:
    """Make `path` another user's (skips where this user may not: tests run as root)."""
    try:
        os.chown(path, OTHER_UID, OTHER_UID, follow_symlinks=False)
    except PermissionError:
        pytest.skip("chown to another user is not permitted here (tests need root for it)")


def warnings_about(caplog: pytest.LogCaptureFixture, *fragments: str) -> list[str]:
    """The compile cache's warnings that hold every fragment."""
    return [r.getMessage() for r in caplog.records if r.name == "kiln.cache"
            and r.levelno == logging.WARNING and all(f in r.getMessage() for f in fragments)]


# ---------------------------------------------------------------- IR built by hand

LOC = ir.Loc("kernel.py", 7, 4)  # where hand-built IR says it comes from


def var(name: str, t: Type = i32) -> ir.Var:
    """A variable of hand-built IR."""
    return ir.Var(t, name)


def const(value: int | float | bool, t: Type = i32) -> ir.Const:
    """A constant of hand-built IR."""
    return ir.Const(t, value)


def kernel_program(body: list[ir.Stmt], locals_: dict[str, Type] | None = None,
                   params: tuple[tuple[str, Type], ...] = (("a", f32[:]), ("n", i32)),
                   functions: list[ir.Function] | None = None) -> ir.Program:
    """A program whose kernel `k` has `body` (hand-built IR, for passes' unit tests)."""
    kernel = ir.Function("k", [ir.Param(n, t) for n, t in params], void, body,
                         dict(locals_ or {}), is_kernel=True, loc=LOC)
    return ir.Program(kernel, functions or [])


def at_loc(stmt: ir.Stmt) -> ir.Stmt:
    """`stmt`, located at LOC."""
    stmt.loc = LOC
    return stmt
