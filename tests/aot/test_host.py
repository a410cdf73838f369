"""Building the host C (kiln/aot/host.py): a missing C compiler is one message and exit
status 2."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.aot.helpers import EXAMPLES

pytestmark = [pytest.mark.compiler, pytest.mark.slow]


def test_a_missing_c_compiler_is_reported(tmp_path) -> None:
    """A fresh process (the compiler is found once per process) with KILN_CC pointing
    nowhere: exit status 2, one message, nothing written."""
    env = {**os.environ, "KILN_CC": str(tmp_path / "no-such-cc")}
    result = subprocess.run([sys.executable, "-m", "kiln", "build", str(EXAMPLES), "--target",
                             "opencl", "-o", str(tmp_path / "out")], env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr
    assert "building a library needs a C compiler (cc, or set KILN_CC)" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []
