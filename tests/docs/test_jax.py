"""docs/jax.md's whole example runs as a program: a kiln operation inside jax.jit, its
gradients through the backward kernel (against JAX's and by check_grads) and jax.vmap."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import doc_examples

pytestmark = pytest.mark.slow

EXAMPLES = doc_examples("jax.md")


def test_the_whole_example_runs(tmp_path: Path) -> None:
    pytest.importorskip("jax", reason="JAX is not installed (pip install 'kiln[jax]')")
    program = tmp_path / "jax_example.py"
    program.write_text(EXAMPLES[-1])
    done = subprocess.run([sys.executable, str(program)], capture_output=True, text=True,
                          timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok", done.stdout
