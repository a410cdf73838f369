"""The conformance suite on every registered backend (one test per case per backend), its
IR coverage, and the runner behind `kiln check`."""

from __future__ import annotations

import dataclasses
import io

import numpy as np
import pytest
from rich.console import Console

import kiln
from kiln.conformance import Case, Skipped, Status, all_cases, check_command, run_case
from kiln.conformance import runner as runner_module
from kiln.conformance.coverage import suite_coverage
from kiln.conformance.registry import FP64, Requirement
from kiln.conformance.runner import selected


def _params() -> list:
    out = []
    for entry in kiln.backends():
        skip = () if entry.available else (
            pytest.mark.skip(reason=f"backend {entry.name} is not available: {entry.reason}"),)
        out += [pytest.param(entry.name, c, id=f"{entry.name}-{c.name}", marks=skip)
                for c in all_cases()]
    return out


@pytest.mark.parametrize(("backend", "case"), _params())
def test_case(backend: str, case: Case) -> None:
    try:
        device = kiln.device(backend)
    except kiln.DeviceNotFoundError as exc:
        pytest.skip(str(exc))
    reason = case.skip_reason(device.capabilities)
    if reason:
        pytest.skip(reason)
    try:
        case.run(device)
    except Skipped as exc:
        pytest.skip(str(exc))
    except kiln.DeviceFeatureError as exc:
        pytest.skip(f"the device lacks a feature: {exc.message}")


def test_ir_coverage() -> None:
    """Every IR node class, operator and standard intrinsic appears in some case's kernel."""
    gaps = suite_coverage().gaps()
    assert not gaps, "no conformance kernel uses: " + ", ".join(gaps)


def test_case_names_are_unique_and_described() -> None:
    names = [c.name for c in all_cases()]
    assert len(names) == len(set(names))
    assert all(c.description for c in all_cases())


def test_select_by_glob_and_substring() -> None:
    assert {c.name for c in selected("atomic_cas_*")} == {
        "atomic_cas_i32", "atomic_cas_u32", "atomic_cas_i64", "atomic_cas_u64"}
    assert [c.name for c in selected("matmul")] == ["matmul_naive_f32", "matmul_tiled_f32"]
    assert selected(None) == all_cases()


def _failing(device: kiln.Device) -> None:
    raise AssertionError("c: 1 of 4 element(s) differ")


def _crashing(device: kiln.Device) -> None:
    raise RuntimeError("backend exploded")


def _skipping(device: kiln.Device) -> None:
    raise Skipped("not today")


def _needing_f64(device: kiln.Device) -> None:
    kiln.launch(uses_f64, 1, 1, (np.zeros(1, np.float32),), device=device)


@kiln.kernel
def uses_f64(a: kiln.f32[:]):
    a[0] = kiln.f32(kiln.f64(a[0]) * 0.5)


def test_device_feature_error_skips(interp: kiln.Device, monkeypatch: pytest.MonkeyPatch
                                    ) -> None:
    """A kernel needing what the device's capabilities lack is a skip saying which."""
    caps = dataclasses.replace(interp.capabilities, fp64=False)
    monkeypatch.setattr(interp, "capabilities", caps)
    result = run_case(Case("needs_f64", _needing_f64, ""), interp)
    assert result.status is Status.SKIPPED
    assert result.message.startswith("the device lacks a feature: f64 (double precision)")


def test_run_case_outcomes(interp: kiln.Device) -> None:
    never = Requirement("never", lambda caps: f"{caps.name} lacks it")
    results = [run_case(Case(name, fn, ""), interp) for name, fn in
               (("fails", _failing), ("crashes", _crashing), ("skips", _skipping))]
    results.append(run_case(Case("needs", _failing, "", (never, FP64)), interp))
    assert [r.status for r in results] == [Status.FAILED, Status.FAILED, Status.SKIPPED,
                                           Status.SKIPPED]
    assert results[0].message == "c: 1 of 4 element(s) differ"
    assert results[1].message.startswith("RuntimeError: backend exploded (at ")
    assert results[2].message == "not today"
    assert results[3].message == "NumPy interpreter lacks it"


def _check(backend: str, select: str | None = None) -> tuple[int, str]:
    out = io.StringIO()
    code = check_command(backend, select, Console(file=out, width=200))
    return code, out.getvalue()


def test_check_command_passes() -> None:
    code, text = _check("interp", "vector_add,grid_")
    assert code == 0
    assert "3 passed in" in text and "grid_3d" in text


def test_check_command_fails_with_exit_code_1(monkeypatch: pytest.MonkeyPatch) -> None:
    suite = [Case("good", lambda device: None, ""), Case("bad", _failing, "")]
    monkeypatch.setattr(runner_module, "all_cases", lambda: suite)
    code, text = _check("interp")
    assert code == 1
    assert "1 passed, 1 failed" in text and "1 of 4 element(s) differ" in text


def test_check_command_cannot_run() -> None:
    code, text = _check("no-such-backend")
    assert code == 2 and "no-such-backend" in text
    code, text = _check("interp", "nothing-matches-this")
    assert code == 2 and "no conformance case matches" in text
