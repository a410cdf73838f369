"""docs/aot.md's round trip, block by block: the module, `kiln build`, the C program, its
output and the Python check."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO, backend_entry

pytestmark = [pytest.mark.compiler, pytest.mark.slow]


def doc_blocks(path: Path) -> list[tuple[str, str, str]]:
    """(language, label, text) of each fenced block whose info string names a label."""
    found = re.findall(r"^```(\w+) ([\w.]+)\n(.*?)^```$", path.read_text(), re.M | re.S)
    return [(lang, label, text) for lang, label, text in found]


@pytest.mark.skipif(not backend_entry("cpu").available, reason="the doc builds for cpu")
def test_the_docs_round_trip_runs(tmp_path) -> None:
    """docs/aot.md, block by block: the module, `kiln build`, the C program, its output,
    and the Python check."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    output = None
    blocks = doc_blocks(REPO / "docs" / "aot.md")
    assert [label for _, label, _ in blocks] == [
        "kernels.py", "build", "main.c", "run", "output", "check.py"]
    for lang, label, text in blocks:
        if lang in ("python", "c"):
            (tmp_path / label).write_text(text)
        if lang == "sh":
            result = subprocess.run(["bash", "-ec", text], cwd=tmp_path, env=env,
                                    capture_output=True, text=True, timeout=300)
            assert result.returncode == 0, result.stdout + result.stderr
            output = result.stdout
        if lang == "text":
            assert output == text
    result = subprocess.run([sys.executable, "check.py"], cwd=tmp_path, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr
