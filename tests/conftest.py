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
        kiln.register_backend(MirrorBackend(), priority=1)
    return kiln.device("mirror")


@pytest.fixture(scope="session")
def other_device(interp: kiln.Device, mirror: kiln.Device) -> kiln.Device:
    """A device other than interp's."""
    return mirror
