"""The examples of docs/scale-out.md run as whole programs (each checks its own answers);
the Dask one starts a local cluster of process workers, so it runs as a script file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import doc_examples

pytestmark = pytest.mark.slow

EXAMPLES = doc_examples("scale-out.md")


def test_the_page_has_both_examples() -> None:
    assert len(EXAMPLES) == 2 and "launch_sharded" in EXAMPLES[0] and "kiln.dask" in EXAMPLES[1]


@pytest.mark.parametrize("index", range(len(EXAMPLES)))
def test_example_runs(index: int, tmp_path: Path) -> None:
    if "kiln.dask" in EXAMPLES[index]:
        pytest.importorskip("distributed", reason="kiln[dask] is not installed")
    program = tmp_path / f"scale_out_example_{index + 1}.py"
    program.write_text(EXAMPLES[index])
    done = subprocess.run([sys.executable, str(program)], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "ok" in done.stdout
