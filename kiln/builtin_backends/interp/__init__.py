"""The `interp` backend: kernels run by a NumPy interpreter of the IR (SIMT as SIMD).

Always available, needing nothing but NumPy: device memory is host memory, launches go on a
host stream (a worker thread), and `execute` compiles the IR once into closures that run
every statement for all threads of a chunk of blocks at once (see `executor`).
"""

from ...backend import register_backend
from .backend import InterpBackend

backend = InterpBackend()
register_backend(backend)

__all__ = ["InterpBackend", "backend"]
