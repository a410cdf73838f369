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
from tests.helpers import REPO

pytestmark = pytest.mark.slow

DOC = REPO / "docs" / "backends.md"
EXAMPLES = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)


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
                              "kiln.ir", "kiln.ir.intrinsics", "kiln.ir.passes",
                              "kiln.ir.visit"), module
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
