"""Every built-in backend package has the shape docs/architecture.md draws: an `__init__`
that only registers, the `Backend` subclass in `backend.py`, a source backend's emitter in
`dialect.py`, its library target in `library.py`."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import kiln.builtin_backends as builtin
from kiln.aot.library import LibraryTarget
from kiln.backend import Backend
from kiln.codegen.emitter import CEmitter

ROOT = Path(builtin.__file__).parent
PACKAGES = sorted(p.name for p in ROOT.iterdir() if (p / "__init__.py").exists())


def _module(package: str, name: str) -> ast.Module:
    return ast.parse((ROOT / package / f"{name}.py").read_text())


def _classes(tree: ast.Module) -> list[str]:
    return [node.name for node in tree.body if isinstance(node, ast.ClassDef)]


def test_every_backend_is_listed() -> None:
    assert PACKAGES == ["cpu", "cuda", "interp", "opencl", "serial"]


@pytest.mark.parametrize("package", PACKAGES)
def test_init_only_registers(package: str) -> None:
    defined = [node for node in _module(package, "__init__").body
               if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)]
    assert not defined, f"{package}/__init__.py defines {[d.name for d in defined]}"


@pytest.mark.parametrize("package", PACKAGES)
def test_backend_class_lives_in_backend_py(package: str) -> None:
    module = __import__(f"kiln.builtin_backends.{package}", fromlist=["backend"])
    assert isinstance(module.backend, Backend)
    assert type(module.backend).__module__ == f"kiln.builtin_backends.{package}.backend"


def _subclasses_by_file(package: str, base: type) -> dict[str, list[str]]:
    """The classes each module of a backend package defines that derive from `base`."""
    found = {}
    for path in (ROOT / package).glob("*.py"):
        name = f"kiln.builtin_backends.{package}"  # `pkg.__init__` would run it a second time
        module = __import__(name if path.stem == "__init__" else f"{name}.{path.stem}",
                            fromlist=["_"])
        found[path.name] = [cls for cls in _classes(ast.parse(path.read_text()))
                            if isinstance(getattr(module, cls), type)
                            and issubclass(getattr(module, cls), base)]
    return found


@pytest.mark.parametrize("package", PACKAGES)
@pytest.mark.parametrize(("base", "home"),
                         [(CEmitter, "dialect.py"), (LibraryTarget, "library.py")],
                         ids=["emitters", "library targets"])
def test_emitters_and_library_targets_live_in_their_modules(package: str, base: type,
                                                            home: str) -> None:
    """A source backend's emitter is its dialect; its target of `kiln build --emit library`
    is its own code, beside it (what every target shares is `kiln.aot`'s)."""
    for filename, classes in _subclasses_by_file(package, base).items():
        assert not classes or filename == home, f"{package}/{filename}: {classes}"
