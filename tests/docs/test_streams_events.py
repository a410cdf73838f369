"""Every Python example in docs/streams-events.md runs, on every available backend (each is
a whole program with its own asserts), and Event.elapsed_time's contract."""

from __future__ import annotations

import re
import runpy
from pathlib import Path

import numpy as np
import pytest

import kiln
from kiln.conformance.cases.host import scale
from tests.helpers import REPO, doc_examples, run_example

EXAMPLES = doc_examples("streams-events.md")
BACKENDS = [e.name for e in kiln.backends() if e.available]


def test_the_page_has_examples() -> None:
    assert len(EXAMPLES) >= 3


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("index", range(len(EXAMPLES)))
def test_example_runs(backend: str, index: int, monkeypatch: pytest.MonkeyPatch,
                      capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    monkeypatch.setenv("KILN_BACKEND", backend)
    run_example(EXAMPLES[index], tmp_path / f"streams_example_{index + 1}.py")
    if "elapsed_time(start)" in EXAMPLES[index]:
        assert "before the start" in capsys.readouterr().out


def test_elapsed_time_is_start_to_end_and_never_negative(interp: kiln.Device) -> None:
    x = kiln.to_device(np.ones(4096, np.float32), interp)
    start, end = kiln.Event(interp), kiln.Event(interp)
    start.record()
    kiln.launch(scale, dim=4096, args=(x, 2.0, 4096))
    end.record()
    assert start.elapsed_time(end) >= 0
    with pytest.raises(ValueError, match=r"call start.elapsed_time\(end\)"):
        end.elapsed_time(start)
    with pytest.raises(RuntimeError, match="must be recorded"):
        start.elapsed_time(kiln.Event(interp))


def test_the_early_exit_idiom_in_language_md(tmp_path: Path) -> None:
    """The barrier-safe guard language.md shows instead of `if i >= n: return` compiles and
    sums each block, last partial block included, on every available backend."""
    text = (REPO / "docs" / "language.md").read_text()
    block = next(b for b in re.findall(r"```python\n(.*?)```", text, re.S)
                 if "not: if i >= n: return" in b)
    program = tmp_path / "early_exit.py"
    program.write_text("import kiln\nfrom kiln import f32, i32\n" + block)
    kernel = runpy.run_path(str(program))["block_sums"]
    x = np.random.default_rng(0).random(1000, dtype=np.float32)
    for backend in BACKENDS:
        out = np.zeros(4, np.float32)
        kiln.launch(kernel, 4, 256, (x, out, 1000), device=backend)
        np.testing.assert_allclose(out, [x[k * 256:(k + 1) * 256].sum() for k in range(4)],
                                   rtol=1e-5, err_msg=backend)
