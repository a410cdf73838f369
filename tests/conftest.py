"""Shared fixtures: the always-available interp device, a third-party backend's device, and
the pytest hooks of the suite. Helpers that test modules import live in tests/helpers.py."""

from __future__ import annotations

import pytest

import kiln
from tests.helpers import MirrorBackend


@pytest.fixture(scope="session")
def interp() -> kiln.Device:
    """The NumPy interpreter's device: always there, needs nothing but NumPy."""
    return kiln.device("interp")


@pytest.fixture(scope="session")
def mirror() -> kiln.Device:
    """The device of the third-party `mirror` backend (registered on first use)."""
    if "mirror" not in {entry.name for entry in kiln.backends()}:
        kiln.backend.register_backend(MirrorBackend(), priority=1)
    return kiln.device("mirror")


@pytest.fixture(scope="session")
def other_device(interp: kiln.Device, mirror: kiln.Device) -> kiln.Device:
    """A device other than interp's."""
    return mirror


# The marker that a test run on each backend needs (pyproject.toml registers them).
BACKEND_MARKERS = {"cpu": "compiler", "serial": "compiler", "opencl": "compiler", "cuda": "gpu"}


def backends_of(item: pytest.Item) -> set[str]:
    """The backends a parametrized test runs on: parameters that name one or are a device."""
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return set()
    names = {v.backend.name if isinstance(v, kiln.Device) else v for v in callspec.params.values()
             if isinstance(v, (str, kiln.Device))}
    return names & BACKEND_MARKERS.keys()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Marks each test parametrized over a backend with what that backend needs, so that
    `-m "not compiler"` or `-m "not gpu"` leaves those runs out without marking each test."""
    for item in items:
        for name in backends_of(item):
            item.add_marker(BACKEND_MARKERS[name])
