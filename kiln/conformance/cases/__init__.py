"""The built-in conformance cases; importing this package registers them, in this order."""

from . import algorithms, arithmetic, atomics, control

MODULES = (algorithms, arithmetic, control, atomics)
