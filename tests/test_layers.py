"""The layer stack of docs/architecture.md, enforced: every import in kiln/ goes down the
stack (or stays in its layer), no two packages import each other, the modules of the
packages in `ORDER` import only modules below them, and imports inside functions are kept
for optional third-party modules that are slow to load or absent.

The check reads the source with `ast`, so it sees imports at any depth (functions,
`if TYPE_CHECKING:` blocks) without importing anything.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "kiln"

LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("base", ("kiln.errors", "kiln.version", "kiln.stdio", "kiln.settings")),
    ("ir", ("kiln.ir", "kiln.options")),
    ("passes", ("kiln.ir.passes",)),
    ("contract", ("kiln.framework",)),
    ("aot", ("kiln.aot",)),
    ("runtime", ("kiln.runtime",)),
    ("frontend", ("kiln.lang",)),
    ("execution", ("kiln.execution",)),
    ("contract API", ("kiln.backend",)),
    ("codegen", ("kiln.codegen",)),
    ("backends", ("kiln.builtin_backends",)),
    ("actions", ("kiln.aot.build", "kiln.dask", "kiln.torch", "kiln.jax")),
    ("public API", ("kiln",)),
    ("tools", ("kiln.conformance", "kiln.examples", "kiln.demo", "kiln.benchplot")),
    ("entry points", ("kiln.cli", "kiln.__main__")),
]
"""Bottom to top. A module belongs to the layer of its longest matching prefix; it may
import its own layer and the layers below."""

UNITS: tuple[str, ...] = (
    "kiln", "kiln.errors", "kiln.version", "kiln.stdio", "kiln.settings", "kiln.options", "kiln.ir",
    "kiln.ir.passes", "kiln.lang", "kiln.framework", "kiln.runtime", "kiln.execution",
    "kiln.backend", "kiln.codegen", "kiln.builtin_backends", "kiln.builtin_backends.cpu",
    "kiln.builtin_backends.cuda", "kiln.builtin_backends.interp", "kiln.builtin_backends.opencl",
    "kiln.aot", "kiln.dask", "kiln.torch", "kiln.jax", "kiln.conformance",
    "kiln.examples", "kiln.demo", "kiln.benchplot", "kiln.cli", "kiln.__main__",
)
"""The packages (and top-level modules) between which no import cycle may exist."""

LAZY_THIRD_PARTY: frozenset[str] = frozenset({
    "cuda",  # cuda-bindings / cuda-core: optional, and loading them starts the driver
    "pyopencl",  # optional; importing it probes the OpenCL ICDs
    "wgpu",  # optional WebGPU bindings
    "dask", "distributed",  # optional, slow to import
    "matplotlib",  # optional, slow to import
    "platformdirs",  # ~13 ms to import, needed only when KILN_CACHE_DIR is unset
})
"""Top-level names of the only modules that may be imported inside a function: optional
third-party modules, or ones whose import would add to `import kiln` for most runs."""

TYPE_ONLY_UPWARD: dict[tuple[str, str], str] = {
    ("kiln.framework", "kiln.runtime.device"):
        "the contract's methods take the Device they act on; a Device is made from a "
        "backend, so the runtime sits above the contract and names it at run time",
}
"""Annotation-only (`if TYPE_CHECKING:`) imports allowed to name a type from a higher
layer, as (importer prefix, imported module) with the reason. They do not run."""

ORDER: dict[str, tuple[str, ...]] = {
    "kiln.ir": ("enums", "types", "hosttypes", "nodes", "visit", "abi", "analysis",
                "intrinsics", "barriers", "ranges", "printer", "target"),
    "kiln.runtime": ("device", "host", "array", "status", "interop"),
    "kiln.execution": ("fingerprint", "tablewatch", "arguments", "state", "kernelcache",
                       "drivers", "dims", "fastpath", "executor", "kernel", "raw", "capture",
                       "sharding", "autotune"),
    "kiln.aot": ("actions", "entries", "header", "glue", "host", "library", "loader", "build"),
}
"""The modules of a package, bottom to top: none imports one above it (its `__init__` is
on top). Every module of a listed package is listed. Packages whose modules call each other
through one object are not (`kiln.lang`: the frontend's parts through its builder)."""

UPWARD_IN_PACKAGE: dict[tuple[str, str], str] = {
    ("kiln.runtime.device", "kiln.runtime.status"):
        "a stream keeps the status watches of the launches queued on it, to read them after "
        "a synchronisation; a watch holds a device array, which needs a device",
}
"""Annotation-only imports allowed to name a module above the importer in `ORDER`, as
(importer, imported module) with the reason. They do not run."""


@dataclass(frozen=True)
class Import:
    file: str
    line: int
    importer: str
    target: str
    in_function: bool
    type_only: bool

    def where(self) -> str:
        return f"kiln/{self.file}:{self.line}"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_module(name: str) -> bool:
    base = ROOT.parent.joinpath(*name.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


class _Collector(ast.NodeVisitor):
    def __init__(self, path: Path) -> None:
        self.path = path
        self.module = module_name(path)
        self.package = self.module if path.name == "__init__.py" else self.module.rpartition(".")[0]
        self.depth = 0  # functions enclosing the current node
        self.type_only = False
        self.found: list[Import] = []

    def _add(self, node: ast.stmt, target: str) -> None:
        self.found.append(Import(str(self.path.relative_to(ROOT)), node.lineno, self.module,
                                 target, self.depth > 0, self.type_only))

    def _function(self, node: ast.AST) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function

    def visit_If(self, node: ast.If) -> None:
        test = node.test
        guard = (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
            isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
        if not guard:
            self.generic_visit(node)
            return
        outer, self.type_only = self.type_only, True
        for stmt in node.body:
            self.visit(stmt)
        self.type_only = outer
        for stmt in node.orelse:
            self.visit(stmt)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(node, alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = self.package.split(".")
            base = base[: len(base) - (node.level - 1)]
            source = ".".join(base + ([node.module] if node.module else []))
        else:
            source = node.module or ""
        for alias in node.names:  # `from . import nodes` imports the module kiln.ir.nodes
            submodule = f"{source}.{alias.name}"
            self._add(node, submodule if is_module(submodule) else source)


def all_imports() -> list[Import]:
    found: list[Import] = []
    for path in sorted(ROOT.rglob("*.py")):
        collector = _Collector(path)
        collector.visit(ast.parse(path.read_text(), str(path)))
        found += collector.found
    return found


def _longest(name: str, prefixes: tuple[str, ...]) -> str | None:
    matches = [p for p in prefixes if name == p or name.startswith(p + ".")]
    return max(matches, key=len) if matches else None


def layer_of(module: str) -> int:
    best: tuple[int, int] | None = None  # (prefix length, layer)
    for index, (_, prefixes) in enumerate(LAYERS):
        prefix = _longest(module, prefixes)
        if prefix is not None and (best is None or len(prefix) > best[0]):
            best = (len(prefix), index)
    assert best is not None, f"{module} is in no layer: add it to LAYERS in {__file__}"
    return best[1]


def unit_of(module: str) -> str:
    unit = _longest(module, UNITS)
    assert unit is not None, f"{module} is in no unit: add its package to UNITS"
    return unit


IMPORTS = all_imports()
KILN = [i for i in IMPORTS if i.target == "kiln" or i.target.startswith("kiln.")]


def test_every_module_has_a_layer() -> None:
    for path in ROOT.rglob("*.py"):
        layer_of(module_name(path))
        unit_of(module_name(path))


def test_imports_go_down_the_stack() -> None:
    upward = []
    for imp in KILN:
        low, high = layer_of(imp.importer), layer_of(imp.target)
        if high <= low:
            continue
        allowed = imp.type_only and any(
            _longest(imp.importer, (who,)) and imp.target == what
            for who, what in TYPE_ONLY_UPWARD)
        if not allowed:
            upward.append(f"{imp.where()}: {imp.importer} ({LAYERS[low][0]}) imports "
                          f"{imp.target} ({LAYERS[high][0]})")
    assert not upward, "imports up the layer stack:\n" + "\n".join(upward)


def test_no_cycles_between_packages() -> None:
    edges: dict[str, dict[str, Import]] = {}
    for imp in KILN:
        a, b = unit_of(imp.importer), unit_of(imp.target)
        if a != b and not (imp.type_only and layer_of(imp.target) > layer_of(imp.importer)):
            edges.setdefault(a, {}).setdefault(b, imp)
    cycles = []
    for a, targets in edges.items():
        for b, imp in targets.items():
            path = _path(edges, b, a)
            if path is not None:
                back = edges[path[0]][path[1]] if len(path) > 1 else imp
                cycles.append(f"{imp.where()}: {a} -> {' -> '.join(path)} "
                              f"(back at {back.where()})")
    assert not cycles, "import cycles between packages:\n" + "\n".join(cycles)


def test_every_module_of_an_ordered_package_is_in_its_order() -> None:
    for package, order in ORDER.items():
        folder = ROOT.parent.joinpath(*package.split("."))
        modules = {p.stem for p in folder.glob("*.py") if p.stem != "__init__"}
        assert modules == set(order), (
            f"ORDER[{package!r}] in {__file__} lists {sorted(set(order) - modules)} that do "
            f"not exist and misses {sorted(modules - set(order))}: put each new module "
            "above the modules it imports")


def _rank(module: str) -> tuple[str, int] | None:
    """The ordered package of `module` and its place there (its `__init__`: the top)."""
    if module in ORDER:
        return module, len(ORDER[module])
    package, _, name = module.rpartition(".")
    order = ORDER.get(package)
    return (package, order.index(name)) if order is not None and name in order else None


def test_imports_go_down_the_order_inside_packages() -> None:
    upward = []
    for imp in KILN:
        mine, theirs = _rank(imp.importer), _rank(imp.target)
        if mine is None or theirs is None or mine[0] != theirs[0] or theirs[1] <= mine[1]:
            continue
        if not (imp.type_only and (imp.importer, imp.target) in UPWARD_IN_PACKAGE):
            upward.append(f"{imp.where()}: {imp.importer} imports {imp.target}, above it in "
                          f"ORDER[{mine[0]!r}]")
    assert not upward, "imports up the order inside a package:\n" + "\n".join(upward)


def _path(edges: dict[str, dict[str, Import]], start: str, goal: str) -> list[str] | None:
    """A path of units from start to goal, if the imports make one."""
    seen, frontier = {start}, [[start]]
    while frontier:
        path = frontier.pop()
        for nxt in edges.get(path[-1], {}):
            if nxt == goal:
                return [*path, nxt]
            if nxt not in seen:
                seen.add(nxt)
                frontier.append([*path, nxt])
    return None


def test_imports_inside_functions_only_for_optional_dependencies() -> None:
    lazy = [f"{imp.where()}: {imp.target}" for imp in IMPORTS
            if imp.in_function and imp.target.split(".")[0] not in LAZY_THIRD_PARTY]
    assert not lazy, ("imports inside functions (move them to the top of the module, or "
                      "list an optional dependency in LAZY_THIRD_PARTY):\n" + "\n".join(lazy))
