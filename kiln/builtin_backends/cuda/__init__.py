"""The `cuda` backend (NVIDIA GPUs through NVRTC and the CUDA driver, via cuda-bindings).

Importing this package never needs the CUDA packages: they load on first use, and the
backend reports itself unavailable, with the reason, where they or a GPU are missing.
"""

from __future__ import annotations

from ...aot.library import register_library_target
from ...backend import register_backend
from ...runtime.interop import register_adopter
from .backend import CudaBackend
from .interop import adopt
from .library import CudaLibrary

backend = CudaBackend()
register_backend(backend, priority=CudaBackend.priority)
register_adopter(adopt)
register_library_target(CudaLibrary())

__all__ = ["CudaBackend", "backend"]
