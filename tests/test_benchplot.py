"""`kiln bench --plot` (a real benchmark run, drawn with matplotlib: the `kiln[plot]`
extra, which CI installs), `--only`/`--quick`, progress lines, and `kiln check`'s progress
in a log."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kiln.benchplot import PlotError, plot, read_records
from kiln.cli import main
from tests.helpers import REPO

needs_matplotlib = pytest.mark.skipif(
    importlib.util.find_spec("matplotlib") is None,
    reason="kiln[plot] (matplotlib) is not installed: pip install 'kiln[plot]'")


def kiln_command(*argv: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "kiln", *argv], capture_output=True,
                          text=True, env=env, timeout=600)


@needs_matplotlib
@pytest.mark.slow
def test_bench_plot_draws_every_implementation(tmp_path: Path) -> None:
    picture = tmp_path / "throughput.svg"
    done = kiln_command("bench", "--backend", "interp", "--only", "sizes", "--quick",
                        "--plot", str(picture))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[1/1] bench_sizes.py" in done.stdout and "plotted 20 measurements" in done.stdout
    svg = picture.read_text()
    for text in ("vector_add", "reduce", "matmul", "kiln interp", "numpy", "GFLOP/s"):
        assert text in svg, text


@needs_matplotlib
def test_plot_from_records(tmp_path: Path) -> None:
    records = tmp_path / "records.jsonl"
    lines = [{"benchmark": "vector_add", "implementation": who, "size": 2**k,
              "throughput": rate * k, "unit": "GB/s"}
             for who, rate in (("kiln cpu", 2.0), ("kiln opencl", 1.5), ("numpy", 1.0))
             for k in (10, 12, 14)]
    records.write_text("".join(json.dumps(line) + "\n" for line in lines))
    picture = tmp_path / "p.png"
    plot(read_records(records), picture, "test")
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(PlotError, match="no benchmark recorded"):
        plot([], picture, "test")


@pytest.mark.parametrize(("argv", "message"), [
    (["--plot", "out.pdf"], "writes .png or .svg files, got 'out.pdf'"),
    (["--plot", "/no/such/folder/out.png"], "does not exist"),
    (["--only", "no-such-benchmark"], "match --only 'no-such-benchmark'"),
])
def test_bench_misuse_is_a_usage_error(capsys: pytest.CaptureFixture[str], argv: list[str],
                                       message: str) -> None:
    assert main(["bench", *argv]) == 2
    assert message in capsys.readouterr().err


def test_check_shows_progress_in_a_log() -> None:
    done = kiln_command("check", "interp", "-k", "vector_add,launch_by_size")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[1/2] interp:0 vector_add_f32: passed" in done.stdout
    assert "[2/2] interp:0 launch_by_size: passed" in done.stdout


def test_results_md_links_the_committed_picture() -> None:
    results = (REPO / "benchmarks" / "RESULTS.md").read_text()
    assert "(throughput.svg)" in results
    assert (REPO / "benchmarks" / "throughput.svg").read_text().count("kiln ") >= 2
