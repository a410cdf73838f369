"""`kiln bench --plot FILE.png|svg`: the benchmarks' measurements as a picture.

The benchmark scripts append one JSON line per measurement (`benchmarks/common.record`:
benchmark, implementation, size, throughput, unit) to the file `KILN_BENCH_RECORD` names;
this draws one panel per benchmark, throughput against size on log axes, one line per
implementation (kiln on each backend, its peers beside it). matplotlib is the optional
extra `kiln[plot]`.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

FORMATS = (".png", ".svg")


class PlotError(Exception):
    """A plot that cannot be drawn (no matplotlib, a bad file name, nothing measured)."""


def check_target(path: Path) -> None:
    """Fail before any benchmark runs: the format, the folder, and matplotlib."""
    if path.suffix.lower() not in FORMATS:
        raise PlotError(f"--plot writes .png or .svg files, got {path.name!r}")
    if not path.resolve().parent.is_dir():
        raise PlotError(f"--plot: folder {path.resolve().parent} does not exist")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise PlotError("--plot needs matplotlib: pip install 'kiln[plot]'") from None


def read_records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def plot(records: list[dict[str, Any]], path: Path, title: str) -> None:
    """Draw `records` into `path` (its suffix picks the format)."""
    if not records:
        raise PlotError("no benchmark recorded a measurement to plot (--only and --backend "
                        "may have selected none that does: bench_sizes.py does)")
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt

    matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text: smaller, searchable
    panels: dict[str, dict[str, list[tuple[int, float]]]] = defaultdict(lambda: defaultdict(list))
    units: dict[str, str] = {}
    for r in records:
        panels[r["benchmark"]][r["implementation"]].append((r["size"], r["throughput"]))
        units[r["benchmark"]] = r["unit"]
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.2), squeeze=False)
    for ax, (benchmark, lines) in zip(axes[0], panels.items()):
        for implementation, points in sorted(lines.items()):
            sizes, rates = zip(*sorted(points))
            style = "-o" if implementation.startswith("kiln") else "--s"
            ax.plot(sizes, rates, style, label=implementation, markersize=4)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(benchmark)
        ax.set_xlabel("size (elements)" if units[benchmark] == "GB/s" else "size (n of n x n)")
        ax.set_ylabel(units[benchmark])
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
