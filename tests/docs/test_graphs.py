"""Every Python example in docs/graphs.md runs, on every available backend (each is a whole
program with its own asserts against NumPy)."""

from __future__ import annotations

from pathlib import Path

import pytest

import kiln
from tests.helpers import doc_examples, run_example

EXAMPLES = doc_examples("graphs.md")
BACKENDS = [e.name for e in kiln.backends() if e.available]


def test_the_page_has_examples() -> None:
    assert len(EXAMPLES) >= 3


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("index", range(len(EXAMPLES)))
def test_example_runs(backend: str, index: int, monkeypatch: pytest.MonkeyPatch,
                      capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    monkeypatch.setenv("KILN_BACKEND", backend)
    run_example(EXAMPLES[index], tmp_path / f"graphs_example_{index + 1}.py")
    if "k=\"large\"" in EXAMPLES[index]:
        assert "updating launch #0 of axpy" in capsys.readouterr().out
