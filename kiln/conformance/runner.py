"""Running the suite against one device, and `kiln check BACKEND`."""

from __future__ import annotations

import fnmatch
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from ..errors import DeviceFeatureError
from ..runtime.device import Device
from ..runtime.device import device as resolve_device
from .registry import Case, Skipped, all_cases


class Status(Enum):
    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"


@dataclass(frozen=True)
class CaseResult:
    name: str
    status: Status
    seconds: float
    message: str = ""


@dataclass
class Report:
    """The outcome of one run of the suite on one device."""

    device: str
    results: list[CaseResult] = field(default_factory=list)

    def count(self, status: Status) -> int:
        return sum(r.status is status for r in self.results)

    @property
    def passed(self) -> int:
        return self.count(Status.PASSED)

    @property
    def failed(self) -> int:
        return self.count(Status.FAILED)

    @property
    def skipped(self) -> int:
        return self.count(Status.SKIPPED)

    @property
    def seconds(self) -> float:
        return sum(r.seconds for r in self.results)

    @property
    def ok(self) -> bool:
        """True when no case failed (skips do not count against a backend)."""
        return self.failed == 0

    def failures(self) -> list[CaseResult]:
        return [r for r in self.results if r.status is Status.FAILED]


def selected(select: str | None) -> list[Case]:
    """Cases whose names match `select`: comma-separated glob patterns (`atomic_*`) or
    substrings (`matmul`); every case when `select` is empty."""
    patterns = [p.strip() for p in (select or "").split(",") if p.strip()]
    if not patterns:
        return all_cases()

    def matches(name: str, pattern: str) -> bool:
        if any(ch in pattern for ch in "*?["):
            return fnmatch.fnmatchcase(name, pattern)
        return pattern in name

    return [c for c in all_cases() if any(matches(c.name, p) for p in patterns)]


def run_case(c: Case, device: Device) -> CaseResult:
    """Run one case; any exception but Skipped (or a DeviceFeatureError: the device lacks a
    capability a kernel needs) is a failure, described in the message."""
    reason = c.skip_reason(device.capabilities)
    if reason:
        return CaseResult(c.name, Status.SKIPPED, 0.0, reason)
    start = time.perf_counter()
    try:
        c.run(device)
    except Skipped as exc:
        return CaseResult(c.name, Status.SKIPPED, time.perf_counter() - start, str(exc))
    except DeviceFeatureError as exc:  # the device's capabilities lack what a kernel needs
        return CaseResult(c.name, Status.SKIPPED, time.perf_counter() - start,
                          f"the device lacks a feature: {exc.message}")
    except AssertionError as exc:
        message = str(exc) or "assertion failed"
        return CaseResult(c.name, Status.FAILED, time.perf_counter() - start, message)
    except Exception as exc:  # a crash in the backend is a failure of this case only
        where = traceback.extract_tb(exc.__traceback__)[-1]
        message = f"{type(exc).__name__}: {exc} (at {where.filename}:{where.lineno})"
        return CaseResult(c.name, Status.FAILED, time.perf_counter() - start, message)
    return CaseResult(c.name, Status.PASSED, time.perf_counter() - start)


def run_suite(device_or_backend: Device | str, *, select: str | None = None,
              on_result: Callable[[CaseResult], None] | None = None) -> Report:
    """Run the conformance cases (all, or those `select` matches) on a device.

    `device_or_backend` is a Device or a spec such as `"cpu"` or `"cuda:1"`; raises
    DeviceNotFoundError when it names no available device. `on_result` is called after
    each case (for progress displays).
    """
    device = resolve_device(device_or_backend)
    report = Report(device.name)
    for c in selected(select):
        result = run_case(c, device)
        report.results.append(result)
        if on_result is not None:
            on_result(result)
    return report
