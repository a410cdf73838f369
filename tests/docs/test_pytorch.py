"""docs/pytorch.md's whole example runs as a program: the operator against PyTorch,
gradcheck, opcheck, and a model calling it compiled with `torch.compile(fullgraph=True)`
(inductor, which compiles C++ on the CPU) and trained for a few steps."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import doc_examples, run_example_process

pytestmark = pytest.mark.slow

EXAMPLES = doc_examples("pytorch.md")


def test_the_whole_example_trains_a_compiled_model(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="PyTorch is not installed (pip install 'kiln[torch]')")
    done = run_example_process(EXAMPLES[-1], tmp_path / "pytorch_example.py")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ok"), done.stdout
