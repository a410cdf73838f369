"""The `cpu` backend (JIT, priority 50): kernels as C11 + OpenMP, compiled by `cc`.

Importing this module registers the backend; a missing compiler or OpenMP makes it
unavailable (with the reason) rather than failing the import.
"""

from ...framework.registry import register_backend
from . import atomics  # noqa: F401 - registers the "cpu" intrinsic spellings
from .backend import CpuBackend
from .emitter import CpuEmitter

backend = CpuBackend()
register_backend(backend, priority=backend.priority)

__all__ = ["CpuBackend", "CpuEmitter", "backend"]
