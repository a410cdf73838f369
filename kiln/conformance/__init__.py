"""The conformance suite: what a backend must pass to be stable (docs/backends.md).

Shipped inside kiln so that any backend, built-in or third-party, can run it:
`kiln check NAME` on the command line, `run_suite("NAME")` from Python. Cases are named
functions `case(device) -> None` that launch kernels and compare with NumPy, raising
AssertionError with a description of the mismatch; `coverage.suite_coverage().gaps()` says
which IR constructs and intrinsics no case exercises (the project's tests require none).
"""

from __future__ import annotations

from . import cases  # noqa: F401 - registers the built-in cases, in order
from .console import check_command
from .registry import Case, Requirement, Skipped, all_cases, case
from .runner import CaseResult, Report, Status, run_case, run_suite, selected

__all__ = [
    "Case", "CaseResult", "Report", "Requirement", "Skipped", "Status", "all_cases", "case",
    "check_command", "run_case", "run_suite", "selected",
]
