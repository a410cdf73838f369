"""The action registry (kiln/aot/actions.py): `kiln build --help` lists the actions and
their targets, and a plugin's action runs through `kiln build`."""

from __future__ import annotations

import pytest

from kiln.cli import main
from tests.aot.helpers import EXAMPLES

pytestmark = [pytest.mark.compiler, pytest.mark.slow]


def test_build_help_lists_the_actions(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["build", "--help"])
    assert "library [cpu, cuda, opencl]" in capsys.readouterr().out


def test_a_plugin_action_runs_through_kiln_build(tmp_path, monkeypatch, capsys) -> None:
    """An action registered by a plugin (here: the lowered IR of each kernel) is listed by
    `kiln build --help` and run by `kiln build --emit`, with the same specialisation and
    all-or-nothing output."""
    from kiln.aot import actions
    from kiln.ir.printer import format_program

    def write_ir(request: actions.ActionRequest) -> None:
        for k in request.kernels:
            (request.out_dir / f"{k.kernel}.ir").write_text(format_program(k.program))

    monkeypatch.setitem(actions._ACTIONS, "ir", actions.Action(
        "ir", "the lowered IR of each kernel", {"cpu": write_ir}))
    with pytest.raises(SystemExit):
        main(["build", "--help"])
    assert "ir [cpu]: the lowered IR of each kernel" in capsys.readouterr().out
    out = tmp_path / "out"
    assert main(["build", str(EXAMPLES), "--emit", "ir", "--target", "cpu", "--kernel",
                 "vector_add", "-o", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["vector_add.ir"]
    assert "vector_add" in (out / "vector_add.ir").read_text()
    assert main(["build", str(EXAMPLES), "--emit", "ir", "--target", "opencl", "-o",
                 str(tmp_path / "other")]) == 2
    assert "the ir action has no target 'opencl' (targets: cpu)" in capsys.readouterr().err
