"""`kiln check BACKEND`: the suite on a backend's best device, shown as a rich table."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table

from ..runtime.device import DeviceNotFoundError
from ..runtime.device import device as resolve_device
from .runner import CaseResult, Report, Status, run_suite, selected

STYLES = {Status.PASSED: "green", Status.FAILED: "bold red", Status.SKIPPED: "yellow"}


def report_table(report: Report) -> Table:
    table = Table(title=f"kiln conformance on {report.device}", title_justify="left")
    table.add_column("case")
    table.add_column("result")
    table.add_column("time", justify="right")
    table.add_column("details", overflow="fold")
    for r in report.results:
        style = STYLES[r.status]
        table.add_row(r.name, f"[{style}]{r.status.value}[/]",
                      f"{r.seconds * 1000:.0f} ms" if r.status is not Status.SKIPPED else "",
                      r.message)
    return table


def summary(report: Report) -> str:
    parts = [f"[green]{report.passed} passed[/]"]
    if report.failed:
        parts.append(f"[bold red]{report.failed} failed[/]")
    if report.skipped:
        parts.append(f"[yellow]{report.skipped} skipped[/]")
    return ", ".join(parts) + f" in {report.seconds:.2f} s on {report.device}"


def check_command(backend_name: str, select: str | None = None,
                  console: Console | None = None) -> int:
    """Run the suite on `backend_name` (a backend or a device spec such as `cuda:1`).

    Returns the exit code: 0 when every selected case passed or was skipped, 1 when any
    failed, 2 when the suite cannot run (no such backend or device, or nothing selected).
    """
    console = console or Console()
    try:
        device = resolve_device(backend_name)
    except DeviceNotFoundError as exc:
        console.print(f"[bold red]kiln check:[/] {exc}")
        return 2
    total = len(selected(select))
    if total == 0:
        console.print(f"[bold red]kiln check:[/] no conformance case matches {select!r}")
        return 2
    if not console.is_terminal:  # a log (CI, a pipe): one line per case, as it finishes
        done = 0

        def log(result: CaseResult) -> None:
            nonlocal done
            done += 1
            console.print(f"[{done}/{total}] {device.name} {result.name}: "
                          f"{result.status.value} ({result.seconds:.2f} s)", markup=False,
                          highlight=False)

        report = run_suite(device, select=select, on_result=log)
    else:
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                      console=console, transient=True) as progress:
            task = progress.add_task(f"checking {device.name}", total=total)

            def advance(result: CaseResult) -> None:
                progress.update(task, advance=1, description=f"{device.name}: {result.name}")

            report = run_suite(device, select=select, on_result=advance)
    console.print(report_table(report))
    console.print(summary(report))
    return 0 if report.ok else 1
