"""docs/jax.md's whole example runs as a program: a kiln operation inside jax.jit, its
gradients through the backward kernel (against JAX's and by check_grads) and jax.vmap."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import doc_examples, run_example_process

pytestmark = pytest.mark.slow

EXAMPLES = doc_examples("jax.md")


def test_the_whole_example_runs(tmp_path: Path) -> None:
    pytest.importorskip("jax", reason="JAX is not installed (pip install 'kiln[jax]')")
    done = run_example_process(EXAMPLES[-1], tmp_path / "jax_example.py")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok", done.stdout
