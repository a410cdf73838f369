"""The `kiln` command: info, compile, build, demo, check, bench and cache.

Errors the user caused (a kernel that does not compile, a bad launch, an unknown device or
backend, a bad FILE.py:KERNEL) print one message and exit with status 2, no traceback.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rich.columns import Columns
from rich.console import Console
from rich.markup import escape
from rich.table import Table

import kiln

from . import benchplot
from .aot.actions import ActionError, actions
from .aot.build import build, library_name
from .conformance import check_command
from .demo import run_demo
from .errors import KernelError, LaunchError, SettingError
from .execution.kernel import Kernel
from .framework import cache
from .framework.backend import Backend, Capabilities, DeviceKind, ExecutionModel, JITBackend
from .framework.registry import registry
from .ir.enums import MemorySpace
from .ir.types import (
    SCALAR_BY_NAME,
    ArrayType,
    ConstexprType,
    ScalarType,
    Type,
    bool_,
    f32,
    i32,
)
from .runtime.device import Device, DeviceNotFoundError, devices_of

out = Console(highlight=False)
err = Console(stderr=True, highlight=False)

USAGE_EXIT = 2


class UsageError(Exception):
    """A mistake in the command line (bad FILE:KERNEL, unknown backend, bad --types)."""


USER_ERRORS = (UsageError, KernelError, LaunchError, DeviceNotFoundError, ActionError,
               SettingError)


# ---------------------------------------------------------------- helpers


def backend_named(name: str) -> Backend:
    try:
        return registry.get(name).backend
    except KeyError as exc:
        raise UsageError(exc.args[0]) from None


_TYPE_PATTERN = re.compile(r"^(\w+)\s*(?:\[([:,\s]*)\])?$")
_CONSTEXPR_PATTERN = re.compile(r"^constexpr\((.+)\)$")
_PYTHON_NAMES: dict[str, ScalarType] = {"int": i32, "float": f32, "bool": bool_}


def constexpr_value(text: str, what: str, example: str = "16") -> Type:
    """`kiln.constexpr(VALUE)` for a literal that can name a specialisation (hashable)."""
    try:
        value = ast.literal_eval(text.strip())
        hash(value)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        raise UsageError(f"{what}: a constexpr value is a Python literal that can be a dict "
                         f"key (a number, bool, string or tuple), e.g. {example}, not "
                         f"'{text}'") from None
    return kiln.constexpr(value)


def parse_type(text: str) -> Type:
    """`f32`, `int`, `float64`, `f32[:]`, `i32[:, :]`, `constexpr(16)` -> a kiln type."""
    constexpr = _CONSTEXPR_PATTERN.match(text.strip())
    if constexpr:
        return constexpr_value(constexpr.group(1), f"'{text}'", "constexpr(16)")
    match = _TYPE_PATTERN.match(text.strip())
    name = match.group(1) if match else ""
    scalar = _PYTHON_NAMES.get(name) or SCALAR_BY_NAME.get(name) or getattr(kiln, name, None)
    if not match or not isinstance(scalar, ScalarType):
        raise UsageError(f"'{text}' is not a kiln type (e.g. f32, i32, f32[:], f64[:, :])")
    dims = match.group(2)
    if dims is None:
        return scalar
    ndim = dims.count(":")
    if ndim == 0 or ndim != len(dims.split(",")):
        raise UsageError(f"'{text}': write one ':' per dimension, e.g. {name}[:, :]")
    return ArrayType(scalar, ndim)


def load_module(file: str) -> Any:
    """Import FILE.py as a module of its own."""
    path = Path(file)
    if not path.is_file():
        raise UsageError(f"{file}: no such file")
    module_name = f"_kiln_user_{path.stem}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise UsageError(f"{file}: cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    sys.path.insert(0, str(path.resolve().parent))
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise UsageError(f"importing {file} failed: {type(exc).__name__}: {exc}") from None
    finally:
        sys.path.pop(0)
    return module


def module_kernels(module: Any) -> dict[str, Any]:
    """The kernels a module defines (not those it imports), in definition order."""
    return {k: v for k, v in vars(module).items()
            if isinstance(v, Kernel) and v.pyfunc.__module__ == module.__name__}


def load_kernel(target: str) -> Any:
    """Import FILE.py and return its KERNEL attribute (a @kiln.kernel)."""
    file, sep, name = target.rpartition(":")
    if not sep or not file or not name:
        raise UsageError(f"'{target}': write FILE.py:KERNEL, e.g. examples/add.py:vector_add")
    module = load_module(file)
    kernel = getattr(module, name, None)
    if not isinstance(kernel, Kernel):
        kernels = sorted(module_kernels(module))
        found = f"; kernels there: {', '.join(kernels)}" if kernels else "; it defines none"
        what = "not defined" if kernel is None else f"a {type(kernel).__name__}, not a kernel"
        raise UsageError(f"{file}: '{name}' is {what}{found}")
    return kernel


def split_types(text: str) -> list[str]:
    """`f32[:, :],i32,constexpr(4)` -> its items: commas inside brackets do not split."""
    items, depth, current = [], 0, ""
    for ch in text:
        depth += 1 if ch in "[(" else -1 if ch in "])" else 0
        if ch == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += ch
    return [*items, current] if current or items else []


def kernel_types(kernel: Any, texts: list[str]) -> tuple[Type, ...]:
    """Types for `--kernel NAME:TYPES`: a plain literal stands for a constexpr parameter's
    value (`4` as well as `constexpr(4)`)."""
    out: list[Type] = []
    for (pname, declared), text in zip(kernel.signature, texts):
        if isinstance(declared, ConstexprType) and not text.strip().startswith("constexpr("):
            out.append(constexpr_value(text, f"{kernel.name}: parameter {pname} is a constexpr"))
        else:
            out.append(parse_type(text))
    if len(texts) != len(kernel.signature):
        raise UsageError(f"{kernel.name} has {len(kernel.signature)} parameter(s), "
                         f"{len(texts)} type(s) given")
    return tuple(out)


def _cell(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, tuple):
        return " x ".join(str(v) for v in value)
    return escape(str(value))


def _bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    raise AssertionError  # pragma: no cover


def _atomics(names: frozenset[str]) -> str:
    """`atomic_add:f32`, `atomic_add:i32`, ... as `add (f32 i32)`, ..."""
    types: dict[str, list[str]] = {}
    for item in sorted(names):
        op, _, t = item.partition(":")
        types.setdefault(op.removeprefix("atomic_"), []).extend([t] if t else [])
    return ", ".join(f"{op} ({' '.join(ts)})" if ts else op for op, ts in types.items()) or "-"


# ---------------------------------------------------------------- commands


def cmd_info(args: argparse.Namespace) -> int:
    """Every registered backend (and why one is unavailable), then every device."""
    table = Table(title="kiln backends", title_justify="left")
    for column in ("backend", "priority", "model", "available", "devices / reason"):
        table.add_column(column)
    all_devices = []
    for entry in kiln.backends():
        model = entry.backend.execution_model
        if entry.available:
            devices = devices_of(entry)
            all_devices += devices
            detail = ", ".join(f"{d.name} ({d.capabilities.name})" for d in devices) or "none"
            status = "[green]yes[/green]"
        else:
            detail, status = entry.reason, "[red]no[/red]"
        table.add_row(entry.name, str(entry.priority), model.name if isinstance(
            model, ExecutionModel) else str(model), status, escape(detail))
    out.print(table)
    for label, enum in (("execution models", ExecutionModel), ("device kinds", DeviceKind),
                        ("memory spaces", MemorySpace)):  # with the members plugins added
        out.print(f"{label}: {', '.join(m.name for m in enum.members())}")
    if not all_devices:
        out.print("no devices available")
        return 0
    out.print(f"default device: [bold]{kiln.device().name}[/bold]")
    out.print(Columns([device_table(d) for d in all_devices]))
    return 0


def device_table(device: Device) -> Table:
    table = Table(title=f"{device.name}: {escape(device.capabilities.name)}",
                  title_justify="left", show_header=False)
    table.add_column(no_wrap=True)
    table.add_column(max_width=40)
    for key in device.capabilities.as_dict():
        if key not in ("backend", "name"):
            table.add_row(key, _capability(device.capabilities, key))
    return table


def _capability(caps: Capabilities, key: str) -> str:
    if key == "atomics":
        return _atomics(caps.atomics)
    value = caps.as_dict()[key]
    if "memory" in key and isinstance(value, int) and not isinstance(value, bool):
        return _bytes(value)
    return _cell(value) if value != "" else "-"


def cmd_compile(args: argparse.Namespace) -> int:
    """Print the IR (DIRECT/CUSTOM backends) or the generated source (JIT backends)."""
    kernel = load_kernel(args.target)
    types = tuple(parse_type(t) for t in args.types or ())
    if types and len(types) != len(kernel.signature):
        raise UsageError(f"{kernel.name} has {len(kernel.signature)} parameter(s), "
                         f"--types gave {len(types)}")
    missing = [name for name, t in kernel.signature
               if t is None or (isinstance(t, ConstexprType) and t.value is None)]
    if missing and not types:
        raise UsageError(f"{kernel.name}: parameters {', '.join(missing)} need a type or a "
                         "constexpr value; give every parameter's with --types, e.g. "
                         "--types f32[:] i32 constexpr(16)")
    backend = backend_named(args.backend) if args.backend else kiln.device().backend
    if isinstance(backend, JITBackend):
        print(kernel.source(backend, *types), end="")
    else:
        print(kernel.ir(*types), end="")
    return 0


def cmd_build(args: argparse.Namespace) -> int:
    """Specialise a module's kernels for a target and write the action's files."""
    module = load_module(args.module)
    kernels = module_kernels(module)
    chosen = []
    for item in args.kernel or []:
        name, _, types = item.partition(":")
        if name not in kernels:
            raise UsageError(f"{args.module}: no kernel {name!r} (kernels: "
                             f"{', '.join(kernels) or 'none'})")
        kernel = kernels[name]
        chosen.append((kernel, kernel_types(kernel, split_types(types)) if types else ()))
    if not args.kernel:
        chosen = [(k, ()) for k in kernels.values()]
    blocks = [parse_block(b) for b in args.block or ()]
    written = build(chosen, target=args.target, out=args.output, emit=args.emit,
                    name=args.name or library_name(Path(args.module).stem),
                    architectures=[a for arch in args.arch or () for a in arch.split(",")],
                    settings={"blocks": blocks} if blocks else {})
    for path in written:
        out.print(str(path))
    return 0


def parse_block(text: str) -> tuple[str | None, tuple[int, int, int]]:
    """`256`, `16x16`, `8x8x4` -> (None, (x, y, z)); `KERNEL=16x16` -> (KERNEL, ...)."""
    kernel, _, shape = text.rpartition("=")
    try:
        dims = [int(d) for d in shape.lower().split("x")]
    except ValueError:
        dims = []
    if not 1 <= len(dims) <= 3 or min(dims) < 1 or (_ and not kernel):
        raise UsageError(f"--block {text!r}: write [KERNEL=]X, XxY or XxYxZ, e.g. 256 or "
                         "matmul=16x16")
    return kernel or None, (*dims, 1, 1)[:3]  # type: ignore[return-value]


def actions_help() -> str:
    lines = ["actions (--emit):"]
    for action in actions():
        targets = ", ".join(sorted(action.targets)) or "no targets"
        lines.append(f"  {action.name} [{targets}]: {action.description}")
    return "\n".join(lines)


def cmd_demo(args: argparse.Namespace) -> int:
    return run_demo(args.device, out, repeat=args.repeat)


def cmd_check(args: argparse.Namespace) -> int:
    """Run the conformance suite against one registered backend (or device spec)."""
    return check_command(args.backend, args.select, console=out)


def benchmarks_dir() -> Path:
    return Path(__file__).resolve().parent.parent / "benchmarks"


def cmd_bench(args: argparse.Namespace) -> int:
    """Run each benchmark script (benchmarks/bench_*.py in a checkout), on one backend if
    asked, saying which is running; with --plot, draw what they measured."""
    folder = benchmarks_dir()
    scripts = [s for s in sorted(folder.glob("bench_*.py")) if not args.only
               or any(part in s.stem for part in args.only.split(","))]
    if not scripts:
        raise UsageError(f"no benchmark scripts in {folder}" + (
            f" match --only {args.only!r}" if args.only else
            " (benchmarks ship with a checkout)"))
    env = dict(os.environ)
    if args.backend:
        backend_named(args.backend)
        env["KILN_BACKEND"] = args.backend
    if args.quick:
        env["KILN_BENCH_QUICK"] = "1"
    plot_path = Path(args.plot) if args.plot else None
    status = 0
    with tempfile.TemporaryDirectory(prefix="kiln-bench-") as tmp:
        if plot_path is not None:
            try:
                benchplot.check_target(plot_path)
            except benchplot.PlotError as exc:
                raise UsageError(str(exc)) from None
            env["KILN_BENCH_RECORD"] = str(Path(tmp) / "records.jsonl")
        for number, script in enumerate(scripts, 1):
            start = time.perf_counter()
            out.print(f"[bold][{number}/{len(scripts)}] {script.name}[/bold]")
            code = subprocess.call([sys.executable, str(script)], env=env)
            status |= code
            out.print(f"[dim][{number}/{len(scripts)}] {script.name}: "
                      f"{'done' if code == 0 else f'failed ({code})'} in "
                      f"{time.perf_counter() - start:.0f} s[/dim]")
        if plot_path is not None:
            records = benchplot.read_records(Path(env["KILN_BENCH_RECORD"]))
            title = f"kiln bench, {time.strftime('%Y-%m-%d %H:%M')}, {platform.node()}"
            try:
                benchplot.plot(records, plot_path, title)
            except benchplot.PlotError as exc:
                raise UsageError(str(exc)) from None
            out.print(f"plotted {len(records)} measurements to {plot_path}")
    return status


def cmd_cache(args: argparse.Namespace) -> int:
    """Show or clear the on-disk compile cache."""
    if args.action == "clear":
        removed = cache.clear(args.backend)
        out.print(f"removed {removed} cache entr{'y' if removed == 1 else 'ies'}")
        return 0
    table = Table(title="kiln compile cache", title_justify="left", show_header=False)
    for key, value in cache.info().items():
        table.add_row(escape(key), _bytes(value) if key.endswith("bytes") else _cell(value))
    out.print(table)
    return 0


# ---------------------------------------------------------------- parser and entry point


class KilnParser(argparse.ArgumentParser):
    """A parser whose help may end with text computed when help is asked for."""

    epilog_factory: Callable[[], str] | None = None

    def format_help(self) -> str:
        if self.epilog_factory is not None:
            self.epilog = self.epilog_factory()
        return super().format_help()


def build_parser() -> argparse.ArgumentParser:
    parser = KilnParser(
        prog="kiln", description="Write SIMT kernels once in Python; run them on every backend.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, handler: Callable[[argparse.Namespace], int],
                help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        p.set_defaults(handler=handler)
        return p

    command("info", cmd_info, "backends, their availability, devices and capabilities")
    p = command("compile", cmd_compile,
                "print a kernel's IR (DIRECT backends) or generated source (JIT backends)")
    p.add_argument("target", metavar="FILE.py:KERNEL")
    p.add_argument("--backend", "-b", help="backend name (default: the best device's)")
    p.add_argument("--types", "-t", nargs="+", metavar="TYPE",
                   help="parameter types, e.g. f32[:] f32[:] i32 (default: the annotations)")
    p = command("build", cmd_build,
                "specialise a module's kernels for a target and write files through an action "
                "(a C library: header, shared library, manifest)")
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog_factory = actions_help  # type: ignore[attr-defined]
    p.add_argument("module", metavar="MODULE.py")
    p.add_argument("--kernel", "-k", action="append", metavar="NAME[:TYPES]",
                   help="a kernel to build, with its parameter types when it has no hints "
                   "(e.g. saxpy:f32[:],f32[:],f32,i32; a constexpr as its value); repeat for "
                   "more kernels or signatures (default: every kernel of the module)")
    p.add_argument("--target", "-t", required=True, help="cpu, cuda, opencl, ...")
    p.add_argument("--emit", "-e", default="library", help="the action (default: library)")
    p.add_argument("--output", "-o", required=True, metavar="DIR", help="folder to write")
    p.add_argument("--name", "-n", help="library name (default: the module's file name)")
    p.add_argument("--arch", action="append",
                   help="cuda: sm_XX (repeat or comma-separate; default: this machine's GPU "
                   "or sm_90); cpu: a -march value (default native)")
    p.add_argument("--block", action="append", metavar="[KERNEL=]SHAPE",
                   help="a block shape the kernels (or KERNEL) must be launched with, e.g. "
                   "256 or matmul=16x16 (repeat for more; launches with other shapes are "
                   "refused; default: any shape)")
    p = command("demo", cmd_demo,
                "vector_add, reduce and matmul checked against NumPy, with timings")
    p.add_argument("--device", "-d", help="device spec, e.g. interp, cpu, cuda:0")
    p.add_argument("--repeat", type=int, default=7, help="timed runs per kernel (median)")
    p = command("check", cmd_check, "run the conformance suite against a backend")
    p.add_argument("backend", metavar="BACKEND", help="a backend name or device spec")
    p.add_argument("-k", dest="select", help="only tests matching this pytest -k expression")
    p = command("bench", cmd_bench, "run the benchmark scripts in benchmarks/")
    p.add_argument("--backend", "-b", help="run on this backend (sets KILN_BACKEND)")
    p.add_argument("--only", metavar="NAMES",
                   help="only the scripts whose names contain one of these (comma-separated)")
    p.add_argument("--quick", action="store_true", help="small sizes and few runs")
    p.add_argument("--plot", metavar="FILE.png|svg",
                   help="draw throughput against size per backend, peers beside kiln "
                        "(needs kiln[plot])")
    p = command("cache", cmd_cache, "show or clear the on-disk compile cache")
    p.add_argument("action", choices=("info", "clear"), nargs="?", default="info")
    p.add_argument("--backend", "-b", help="clear only this backend's entries")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except USER_ERRORS as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}", soft_wrap=True)
        return USAGE_EXIT
    except KeyboardInterrupt:
        return 130
