"""`kiln.settings`: every `KILN_*` variable read in kiln/ is declared there and documented in
docs/configuration.md (checked on the source, with `ast` and regular expressions, as
tests/test_layers.py checks imports), and a value kiln cannot use is a `SettingError`
naming the variable, the value and what it expects."""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import kiln
from kiln import settings
from kiln.examples import vector_add
from tests.helpers import backend_entry, run_python

REPO = Path(__file__).resolve().parent.parent
KILN = REPO / "kiln"
DOC = REPO / "docs" / "configuration.md"

ENVIRON_READERS = ("get", "pop", "setdefault", "__getitem__", "getenv")


def doc_rows() -> dict[str, list[str]]:
    """The tables' rows by variable: the cells after the name."""
    rows = {}
    for line in DOC.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| `KILN_") and len(cells) > 1:
            rows[cells[0].strip("`")] = cells[1:]
    return rows


def string_prefix(node: ast.expr | None, constants: dict[str, str]) -> str:
    """What a key expression starts with, as far as the source says (`""` if unknown)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr) and node.values:
        return string_prefix(node.values[0], constants)
    if isinstance(node, ast.Name):
        return constants.get(node.id, "")
    return ""


def is_environ(node: ast.expr) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "environ") or (
        isinstance(node, ast.Name) and node.id == "environ")


def environ_keys(tree: ast.Module) -> list[tuple[int, ast.expr | None]]:
    """Each place the module looks the environment up: `os.environ[k]`, `os.environ.get(k)`,
    `k in os.environ`, `os.getenv(k)`, with its key."""
    found: list[tuple[int, ast.expr | None]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and is_environ(node.value):
            found.append((node.lineno, node.slice))
        elif isinstance(node, ast.Compare) and any(is_environ(c) for c in node.comparators):
            found.append((node.lineno, node.left))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute | ast.Name):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id
            on_environ = isinstance(func, ast.Attribute) and is_environ(func.value)
            if (on_environ and name in ENVIRON_READERS) or name == "getenv":
                found.append((node.lineno, node.args[0] if node.args else None))
    return found


def module_constants(tree: ast.Module) -> dict[str, str]:
    return {t.id: node.value.value for node in tree.body if isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
            for t in node.targets if isinstance(t, ast.Name)}


def test_kiln_uses_its_variables_only_through_the_settings_module() -> None:
    stray = []
    for path in sorted(KILN.rglob("*.py")):
        if path == KILN / "settings.py":
            continue
        tree = ast.parse(path.read_text(), str(path))
        constants = module_constants(tree)
        stray += [f"kiln/{path.relative_to(KILN)}:{line}" for line, key in environ_keys(tree)
                  if string_prefix(key, constants).startswith("KILN_")]
    assert not stray, f"use these through kiln.settings (docs/configuration.md): {stray}"


def test_every_variable_read_is_declared_and_documented() -> None:
    """The names the settings module reads, and those the generated C reads with `getenv`
    (a built opencl library), are declared in `SETTINGS`; the table lists exactly those,
    each with the type and default declared."""
    source = (KILN / "settings.py").read_text()
    read = set(re.findall(r"""_(?:raw|flag)\(\s*["'](KILN_[A-Z0-9_]+)["']""", source))
    read |= {f"{n}<NAME>" for n in re.findall(r"""f["'](KILN_[A-Z_]+_)\{""", source)}
    for path in KILN.rglob("*.py"):
        read |= set(re.findall(r'getenv\(\\?"(KILN_[A-Z0-9_]+)', path.read_text()))
    assert read, "the patterns above no longer match how kiln/settings.py reads"
    assert read <= settings.NAMES, f"not declared in kiln/settings.py: {read - settings.NAMES}"
    documented = {name: cells for name, cells in doc_rows().items() if len(cells) == 4}
    assert set(documented) == settings.NAMES
    for s in settings.SETTINGS:
        assert documented[s.name][:2] == [s.type, s.default], s.name


def test_the_repository_scripts_variables_are_documented() -> None:
    """Variables that `./run`, the tests, benchmarks and scripts read are in a table too."""
    reads = re.compile(r"""(?:environ(?:\.get|\.pop|\.setdefault)?\(?\[?|getenv\()"""
                       r"""["'](KILN_[A-Z0-9_]+)|\$\{?(KILN_[A-Z0-9_]+)""")
    files = [REPO / "run"]
    for folder in ("tests", "benchmarks", "scripts"):
        files += sorted((REPO / folder).rglob("*.py"))
    found = {a or b for f in files for a, b in reads.findall(f.read_text())}
    assert "KILN_EXTRAS" in found and "KILN_FUZZ_EXAMPLES" in found
    missing = {n for n in found if n not in doc_rows() and not n.startswith("KILN_DISABLE_")}
    assert not missing, f"document these in docs/configuration.md: {missing}"


@pytest.mark.parametrize(("name", "value", "read", "expected"), [
    ("KILN_NUM_THREADS", "four", settings.num_threads, "a positive integer"),
    ("KILN_NUM_THREADS", "0", settings.num_threads, "a positive integer"),
    ("KILN_NUM_THREADS", "-2", settings.num_threads, "a positive integer"),
    ("KILN_DEBUG", "maybe", settings.debug, "1 or 0"),
    ("KILN_CUDA_SHIM", "disabled", settings.cuda_shim, "1 or 0"),
    ("KILN_DISABLE_OPENCL", "2", lambda: settings.backend_disabled("opencl"), "1 or 0"),
    ("KILN_LOG", "verbose", settings.log_level, "a logging level"),
    ("KILN_CFLAGS", "-O3 '-DX=1", settings.c_flags, "compiler flags as a shell writes them"),
])
def test_a_value_kiln_cannot_use_names_the_variable(monkeypatch: pytest.MonkeyPatch,
                                                   name: str, value: str,
                                                   read: Callable[[], Any],
                                                   expected: str) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(kiln.SettingError) as info:
        read()
    assert str(info.value).startswith(f"environment variable {name}={value!r}: expected ")
    assert expected in str(info.value)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(("value", "on"), [
    ("", False), ("0", False), ("1", True), ("TRUE", True), ("yes", True), (" off ", False),
    ("false", False),
])
def test_flags_take_words_as_well_as_digits(monkeypatch: pytest.MonkeyPatch, value: str,
                                            on: bool) -> None:
    monkeypatch.setenv("KILN_DEBUG", value)
    assert settings.debug() is on


def test_values_are_read_when_asked_for(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    for name in ("KILN_NUM_THREADS", "KILN_CACHE_DIR", "KILN_CC", "KILN_BACKEND"):
        monkeypatch.delenv(name, raising=False)
    assert (settings.num_threads(), settings.cache_dir(), settings.c_compiler(),
            settings.backend()) == (None, None, "cc", None)
    monkeypatch.setenv("KILN_NUM_THREADS", " 3 ")
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("KILN_CFLAGS", "-O3 '-DNAME=a b'")
    monkeypatch.setenv("KILN_BACKEND", "")  # empty is unset
    assert (settings.num_threads(), settings.cache_dir(), settings.c_flags(),
            settings.backend()) == (3, tmp_path, ("-O3", "-DNAME=a b"), None)


def test_exported_restores_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SETTINGS_TEST_KEPT", "mine")
    monkeypatch.delenv("SETTINGS_TEST_ADDED", raising=False)
    values = {"SETTINGS_TEST_KEPT": "theirs", "SETTINGS_TEST_ADDED": "1"}
    with pytest.raises(RuntimeError), settings.exported(values):
        assert {name: os.environ[name] for name in values} == values
        raise RuntimeError("the block failed")
    assert os.environ["SETTINGS_TEST_KEPT"] == "mine" and "SETTINGS_TEST_ADDED" not in os.environ


def test_a_bad_thread_count_fails_the_cpu_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    entry = backend_entry("cpu")
    if not entry.available:
        pytest.skip(f"no C compiler with OpenMP here: {entry.reason}")
    x = kiln.to_device(np.ones(4, np.float32), kiln.device("cpu"))
    vector_add[1, 4](x, x, x, 4)
    monkeypatch.setenv("KILN_NUM_THREADS", "lots")
    with pytest.raises(kiln.SettingError, match="KILN_NUM_THREADS='lots'"):
        vector_add[1, 4](x, x, x, 4)
    monkeypatch.setenv("KILN_NUM_THREADS", "2")
    vector_add[1, 4](x, x, x, 4)
    np.testing.assert_array_equal(x.numpy(), [4, 4, 4, 4])


def test_bad_values_read_at_import_or_probe_name_the_variable() -> None:
    result = run_python("import kiln", {"KILN_DEBUG": "sometimes"})
    assert result.returncode == 1
    assert ("kiln.SettingError: environment variable KILN_DEBUG='sometimes': expected 1 or 0"
            in result.stderr)
    code = ("import kiln; e = [b for b in kiln.backends() if b.name == 'cpu'][0]; "
            "print(e.available, e.reason)")
    result = run_python(code, {"KILN_CFLAGS": "-DX='1"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("False") and "KILN_CFLAGS=\"-DX='1\"" in result.stdout
    result = run_python("import sys; from kiln.cli import main; sys.exit(main(['info']))",
                        {"KILN_NUM_THREADS": "0", "KILN_BACKEND": "cpu"})
    assert result.returncode == 2, result.stderr
    assert "error: environment variable KILN_NUM_THREADS='0': expected a positive integer" \
        in result.stderr and "Traceback" not in result.stderr
