"""The `serial` backend (CUSTOM, priority 5): every kernel as single-threaded C, for
debugging (`gdb`, `valgrind`) and as kiln's worked example of the CUSTOM execution model.

It receives each kernel before the frontend and owns its compilation and caching; see
`backend.py`. Importing this module registers it; without a C compiler it is unavailable,
with the reason.
"""

from ...backend import register_backend
from .backend import SerialBackend

backend = SerialBackend()
register_backend(backend)

__all__ = ["SerialBackend", "backend"]
