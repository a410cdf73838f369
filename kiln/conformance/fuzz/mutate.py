"""Mutations of valid kernels: each must compile and run, or fail with a kiln error that
has a location (a `LaunchError` names the argument instead), never a raw exception or a
hang.

A mutation edits the kernel's syntax tree once: an operator, a name, a constant, a type
annotation, an index, an argument list changed; a statement deleted, put under a condition
(partial assignment, divergent barriers), or replaced by something kernels do not support.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import dataclasses
import random
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import kiln

from .kernels import FuzzKernel

OPERATORS = [ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.LShift,
             ast.RShift, ast.BitAnd, ast.BitOr, ast.BitXor, ast.MatMult]
CONSTANTS = [2**70, -(2**63) - 1, 2**64, -1, 0, 1e308, float("nan"), "text", None, True,
             3000000000, 2**31, -7, 0.5]
TYPES = ["i8", "u8", "i16", "u16", "i32", "u32", "i64", "u64", "f16", "bf16", "f32", "f64",
         "bool_", "f32x4", "i32[:]", "f32[:, :]", "Pair", "Pair[:]"]
UNSUPPORTED = ["x = [1, 2]", "del i", "try:\n    pass\nexcept Exception:\n    pass",
               "with open('f') as f:\n    pass", "print(i)", "assert i", "f = lambda: 1",
               "global g", "import math", "raise ValueError()", "x = {1: 2}", "x = 'str'",
               "x = i if i else None", "x = (y := 3)", "x = [j for j in range(3)]",
               "x = i in (1, 2)", "x = i is None", "yield i", "x = kiln.sqrt(1.0, 2.0)",
               "x = kiln.atomic_add(i, 0, 1)", "x = kiln.shared(kiln.f32, i)",
               "x = kiln.barrier", "return 5", "x = fuzz(i)", "x = len(i)",
               "for j in range(0, 4, 0):\n    pass", "for j in range(1.5):\n    pass",
               "for j, k in range(3):\n    pass", "while True:\n    pass\nelse:\n    pass",
               "x = s_i32[0]", "x = grid[i]", "x = grid[i, 0, 1]", "x = grid[-1, 0]",
               "x = pairs[i].zz", "x = pairs.a", "x = kiln.f32x4(1.0, 2.0)", "x = i.x",
               "x = kiln.global_id(3)", "x = kiln.thread_idx.w", "x = unknown_name",
               "x = kiln.i32(1, 2)", "x = abs()", "x = min(1)", "x = 1 / 0", "x = 1 // 0",
               "x = 2 ** 200", "x = 1 << 100", "x: kiln.i32 = 1.5", "x: int[:] = 3",
               "x = kiln.local(kiln.f32, 1000000000)", "x = kiln.fma(1.0, 2.0)",
               "if i < 3:\n    kiln.barrier()", "x = i + grid", "x = -grid", "x = not grid",
               "x = grid < 3", "i += 1.5", "x_i8[i] = 1000", "x_u8[i] = -1", "x_i32[i] = 0.5"]


@dataclass
class Mutant:
    description: str
    source: str


def mutate(source: str, rng: random.Random) -> Mutant:
    """One mutation of a kernel module's source (its `fuzz` kernel and helpers)."""
    while True:
        tree = ast.parse(source)
        kind = rng.choice(list(_MUTATIONS))
        description = _MUTATIONS[kind](tree, rng)
        text = ast.unparse(ast.fix_missing_locations(tree))
        try:
            compile(text, "<mutant>", "exec")
        except SyntaxError:
            continue  # not Python (a slice in an expression): mutate again
        return Mutant(f"{kind}: {description}", text)


def _functions(tree: ast.Module) -> list[ast.FunctionDef]:
    return [n for n in tree.body if isinstance(n, ast.FunctionDef)]


def _pick(tree: ast.Module, kind: type | tuple[type, ...], rng: random.Random) -> ast.AST | None:
    nodes = [n for f in _functions(tree) for n in ast.walk(f) if isinstance(n, kind)]
    return rng.choice(nodes) if nodes else None


def _operator(tree: ast.Module, rng: random.Random) -> str:
    node = _pick(tree, (ast.BinOp, ast.AugAssign), rng)
    if node is None:
        return "none"
    node.op = rng.choice(OPERATORS)()  # type: ignore[attr-defined]
    return type(node.op).__name__  # type: ignore[attr-defined]


def _name(tree: ast.Module, rng: random.Random) -> str:
    node = _pick(tree, ast.Name, rng)
    if node is None:
        return "none"
    names = sorted({n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | {"nope"})
    node.id = rng.choice(names)  # type: ignore[attr-defined]
    return node.id  # type: ignore[attr-defined]


def _constant(tree: ast.Module, rng: random.Random) -> str:
    node = _pick(tree, ast.Constant, rng)
    if node is None:
        return "none"
    node.value = rng.choice(CONSTANTS)  # type: ignore[attr-defined]
    return repr(node.value)  # type: ignore[attr-defined]


def _annotation(tree: ast.Module, rng: random.Random) -> str:
    args = [a for f in _functions(tree) for a in f.args.args if a.annotation is not None]
    if not args:
        return "none"
    arg = rng.choice(args)
    text = rng.choice(TYPES)
    arg.annotation = ast.parse(text if text.startswith("Pair") else f"kiln.{text}",
                               mode="eval").body
    return f"{arg.arg}: {text}"


def _subscript(tree: ast.Module, rng: random.Random) -> str:
    node = _pick(tree, ast.Subscript, rng)
    if node is None or not isinstance(node, ast.Subscript):
        return "none"
    choice = rng.choice(["extra", "float", "negative", "drop", "huge"])
    index = {"extra": ast.Tuple([node.slice, ast.Constant(0)], ast.Load()),
             "float": ast.Constant(1.5), "negative": ast.Constant(-1),
             "drop": node.slice.elts[0] if isinstance(node.slice, ast.Tuple) else node.slice,
             "huge": ast.BinOp(node.slice, ast.Add(), ast.Constant(10**6))}[choice]
    node.slice = index
    return choice


def _call(tree: ast.Module, rng: random.Random) -> str:
    node = _pick(tree, ast.Call, rng)
    if node is None or not isinstance(node, ast.Call):
        return "none"
    choice = rng.choice(["drop", "extra", "keyword"])
    if choice == "drop" and node.args:
        node.args.pop(rng.randrange(len(node.args)))
    elif choice == "extra":
        node.args.append(ast.Name("i", ast.Load()))
    else:
        node.keywords.append(ast.keyword("bogus", ast.Constant(1)))
    return choice


def _statements(tree: ast.Module) -> list[tuple[list[ast.stmt], int]]:
    """(body, position) of every statement inside the functions."""
    found = []
    for f in _functions(tree):
        for node in ast.walk(f):
            for name in ("body", "orelse"):
                body = getattr(node, name, None)
                if isinstance(body, list) and body and isinstance(body[0], ast.stmt) \
                        and node is not tree:
                    found += [(body, k) for k in range(len(body))]
    return found


def _delete(tree: ast.Module, rng: random.Random) -> str:
    spots = _statements(tree)
    body, k = rng.choice(spots)
    removed = body.pop(k)
    if not body:
        body.append(ast.Pass())
    return ast.unparse(removed).split("\n")[0]


def _guard(tree: ast.Module, rng: random.Random) -> str:
    spots = _statements(tree)
    body, k = rng.choice(spots)
    statement = body[k]
    body[k] = ast.If(ast.parse("i < 3", mode="eval").body, [statement], [])
    return ast.unparse(statement).split("\n")[0]


def _unsupported(tree: ast.Module, rng: random.Random) -> str:
    spots = _statements(tree)
    body, k = rng.choice(spots)
    text = rng.choice(UNSUPPORTED)
    body[k:k] = copy.deepcopy(ast.parse(text).body)
    return text.split("\n")[0]


_MUTATIONS: dict[str, Callable[[ast.Module, random.Random], str]] = {
    "operator": _operator, "name": _name, "constant": _constant, "annotation": _annotation,
    "subscript": _subscript, "call": _call, "delete": _delete, "guard": _guard,
    "unsupported": _unsupported,
}


class Deadline(BaseException):
    """Raised in the main thread when a mutant's step runs past its time (a BaseException,
    so that no `except Exception` on the way swallows it)."""


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Interrupt the block (Python code only) after `seconds`."""

    def expire(signum: int, frame: object) -> None:
        raise Deadline(f"over {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def check(mutant: Mutant, kernel: FuzzKernel, directory: Path, compile_on: list[str],
          seconds: float = 60.0, run_seconds: float | None = 5.0) -> str | None:
    """Compile the mutant (IR, then for each backend of `compile_on`) and run it on the
    interp; None when it worked or failed as it should, else what went wrong. A run that
    takes over `run_seconds` is stopped and fine (the mutant may loop forever); compiling
    may not take over `seconds`."""
    variant = dataclasses.replace(kernel, source=mutant.source)
    for backend in ("interp", *compile_on):  # set up (and time) outside the deadline
        kiln.device(backend)
    try:
        fn = variant.load(directory)
    except (kiln.KernelError, kiln.LaunchError) as exc:
        return _located(exc)
    except Exception as exc:
        if _raised_by_user_code(exc, directory):
            return None  # Python rejected the module at the user's line (`f32[:, 0]`)
        return f"raw {type(exc).__name__} loading the module: {exc}"
    try:
        with deadline(seconds):
            fn.ir()
            for backend in compile_on:
                fn.compile(backend)
    except (kiln.KernelError, kiln.LaunchError) as exc:
        return _located(exc)
    except Deadline:
        return f"compiling took over {seconds} s"
    except Exception as exc:
        return f"raw {type(exc).__name__}: {exc}"
    if run_seconds is None:  # compile only: a mutant that loops forever would keep the
        return None          # interp's stream thread busy after the deadline
    args, _ = variant.arguments()
    try:
        with deadline(run_seconds):
            kiln.launch(fn, 1, len(args[0]), args, device="interp")
            kiln.device("interp").synchronize()
    except (kiln.KernelError, kiln.LaunchError) as exc:
        return _located(exc)
    except Deadline:
        return None
    except Exception as exc:
        return f"raw {type(exc).__name__} at run time: {exc}"
    return None


def _located(exc: Exception) -> str | None:
    if isinstance(exc, kiln.KernelError) and exc.loc is None:
        return f"{type(exc).__name__} without a location: {exc}"
    return None


def _raised_by_user_code(exc: BaseException, directory: Path) -> bool:
    """Whether the exception came from evaluating the generated module itself (Python
    evaluates annotations when the module runs; errors there point at the user's line)."""
    tb = exc.__traceback__
    while tb is not None:
        if Path(tb.tb_frame.f_code.co_filename).parent == directory:
            return True
        tb = tb.tb_next
    return False
