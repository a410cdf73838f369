"""docs/backends.md: every Python example runs (each a whole program with its own asserts,
in a fresh interpreter, on the devices it picks), and the page covers the contract."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import kiln
from kiln.framework import backend as contract
from tests.helpers import REPO, doc_examples

pytestmark = pytest.mark.slow

DOC = REPO / "docs" / "backends.md"
EXAMPLES = doc_examples("backends.md")


def test_the_page_has_an_example_for_each_extension_point() -> None:
    text = "\n".join(EXAMPLES)
    for call in ("register_execution_model", "CustomBackend", "def pipeline",
                 "register_intrinsic", "register_operation", "register_template"):
        assert call in text, call


def test_the_page_names_every_part_and_protocol_of_the_contract() -> None:
    text = DOC.read_text()
    parts = [name for name, obj in vars(contract).items()
             if isinstance(obj, type) and obj.__module__ == contract.__name__
             and not name.startswith("_")]
    assert len(parts) > 15
    missing = [name for name in parts if f"`{name}`" not in text and f"class {name}" not in text]
    assert not missing, missing


@pytest.mark.parametrize("index", range(len(EXAMPLES)))
def test_example_runs(index: int, tmp_path: Path) -> None:
    program = tmp_path / f"backends_example_{index + 1}.py"  # kiln reads kernels' files
    program.write_text(EXAMPLES[index])
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("KILN_BACKEND", "KILN_DISABLE_"))}
    result = subprocess.run([sys.executable, str(program)], env=env, cwd=REPO,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]


def test_examples_used_public_names_only() -> None:
    for example in EXAMPLES:
        for module in re.findall(r"^from (kiln[\w.]*) import", example, re.M):
            assert module in ("kiln", "kiln.backend", "kiln.builtin_backends.interp",
                              "kiln.codegen", "kiln.conformance", "kiln.execution.drivers",
                              "kiln.framework.cache", "kiln.ir", "kiln.ir.intrinsics",
                              "kiln.ir.passes", "kiln.ir.types", "kiln.ir.visit"), module
    assert kiln.backend.register_intrinsic and kiln.backend.register_operation


def test_the_plugin_package_installs_and_passes_kiln_check(tmp_path: Path) -> None:
    """Section 15's package, installed with pip from the page into a temporary directory,
    found through its entry point by `kiln check` in a fresh process."""
    section = DOC.read_text().split("## 15.", 1)[1]
    pyproject = re.search(r"```toml\n(.*?)```", section, re.S)
    module = re.search(r"```python\n(.*?)```", section, re.S)
    assert pyproject and module
    package, site = tmp_path / "kiln-tracing", tmp_path / "site"
    package.mkdir()
    (package / "pyproject.toml").write_text(pyproject.group(1))
    (package / "kiln_tracing.py").write_text(module.group(1))
    install = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                              "--no-build-isolation", "--target", str(site), str(package)],
                             capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stderr[-3000:]
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("KILN_BACKEND", "KILN_DISABLE_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")])
    info = subprocess.run([sys.executable, "-m", "kiln", "info"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert "tracing:0" in info.stdout, info.stdout[-3000:] + info.stderr[-3000:]
    check = subprocess.run([sys.executable, "-m", "kiln", "check", "tracing"], env=env,
                           cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-3000:]
    assert re.search(r"\d+ passed in", check.stdout) and "failed" not in check.stdout


KERNELS = """import kiln


@kiln.kernel
def shadowing(out: kiln.i32[:]):
    list = kiln.global_id(0)  # names the generated code must not shadow
    range = list * 2
    np = range + 1
    kiln_t = np * 3
    out[list] = kiln_t


@kiln.kernel
def c_only(out: kiln.i32[:]):
    x = out[0]
    kiln.native(c="{x} += 1;")
    out[0] = x


@kiln.kernel
def deep(out: kiln.i32[:]):
""" + "".join("    " * (k + 1) + f"for a{k} in range(2):\n" for k in range(19)) + \
    "    " * 20 + "kiln.atomic_add(out, 0, 1)\n"

PYTHON_BACKEND_CHECKS = """
import sys
from pathlib import Path

import numpy as np

import kiln
import kernels
import pyloops_backend

out = np.zeros(1, np.int32)
try:
    kiln.launch(kernels.deep, 1, 1, (out,), device="pyloops")
    raise AssertionError("a kernel nested past Python's limit compiled")
except kiln.BackendCompileError as exc:
    assert "too many statically nested blocks" in str(exc), exc
    innermost = len(Path(kernels.__file__).read_text().splitlines()) - 1  # its loop
    assert exc.loc.file.endswith("kernels.py") and exc.loc.line == innermost, exc.loc

try:
    kiln.launch(kernels.c_only, 1, 1, (out,), device="pyloops")
    raise AssertionError("kiln.native without python= code ran")
except kiln.UnsupportedError as exc:
    assert "needs python= code" in str(exc) and exc.loc.line == 16, exc

out = np.zeros(40, np.int32)
kiln.launch(kernels.shadowing, 5, 8, (out,), device="pyloops")
assert out.tolist() == [(2 * i + 1) * 3 for i in range(40)], out

x = np.arange(128, dtype=np.float32)
sums = np.zeros(2, np.float32)
kiln.launch(pyloops_backend.block_sums, 2, 64, (x, sums), device="pyloops")
assert sums.tolist() == [x[:64].sum(), x[64:].sum()], sums
entries = list((Path(sys.argv[1]) / "pyloops").glob("*.py"))
assert len(entries) == 2, entries  # shadowing and block_sums
for entry in entries:
    text = entry.read_text()
    compile(text, str(entry), "exec")  # the entry is the source, its footer a comment
    assert "for kiln_t, (kiln_thread_idx_z" in text and text.rstrip().splitlines()[-1][0] == "#"
"""


def test_the_python_backend_of_section_16_caches_source_and_locates_errors(
        tmp_path: Path) -> None:
    """Section 16's backend, imported as a module (its launch and conformance run are
    `test_example_runs`'): Python's nesting limit and native code without python= are
    errors at the user's line, user names never shadow what the generated code calls,
    and the cache entry is the generated source."""
    section = DOC.read_text().split("## 16.", 1)[1]
    backend = next(code for code in re.findall(r"```python\n(.*?)```", section, re.S)
                   if "class PythonEmitter" in code)
    (tmp_path / "pyloops_backend.py").write_text(backend)
    (tmp_path / "kernels.py").write_text(KERNELS)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("KILN_BACKEND", "KILN_DISABLE_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(REPO)])
    env["KILN_CACHE_DIR"] = str(tmp_path / "cache")
    result = subprocess.run([sys.executable, "-c", PYTHON_BACKEND_CHECKS, str(tmp_path / "cache")],
                            env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
