"""The Python example of docs/autotune.md runs (a whole program with its own assert), and a
second run of it reuses the choice the first stored."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

from tests.helpers import doc_examples, requires_backend

EXAMPLES = doc_examples("autotune.md")


def test_the_page_has_an_example() -> None:
    assert len(EXAMPLES) == 1


@pytest.mark.parametrize("backend", [
    pytest.param(name, marks=requires_backend(name, f"no {name} backend here"))
    for name in ("interp", "cpu", "opencl", "cuda")])
def test_example_runs(backend: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KILN_BACKEND", backend)
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    program = tmp_path / "autotune_example.py"  # kiln reads kernels' source files
    program.write_text(EXAMPLES[0])
    first = runpy.run_path(str(program), run_name="__main__")
    assert first["total"].tunings == 1
    again = runpy.run_path(str(program), run_name="__main__")  # a new kernel object: disk
    assert (again["total"].tunings, again["total"].disk_hits) == (0, 1)
