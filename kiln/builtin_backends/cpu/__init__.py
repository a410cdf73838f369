"""The `cpu` backend (JIT, priority 50): kernels as C11 + OpenMP, compiled by `cc`.

Importing this module registers the backend; a missing compiler or OpenMP makes it
unavailable (with the reason) rather than failing the import.
"""

from ...aot.library import register_library_target
from ...backend import register_backend
from .backend import CpuBackend
from .dialect import CpuEmitter
from .library import CpuLibrary

backend = CpuBackend()
register_backend(backend, priority=backend.priority)
register_library_target(CpuLibrary(backend))

__all__ = ["CpuBackend", "CpuEmitter", "backend"]
