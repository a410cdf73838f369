"""The `opencl` backend: OpenCL C through pyopencl, on any OpenCL platform (PoCL, NVIDIA, ...).

Every device of every platform is a kiln device `opencl:N`. A GPU ranks above the `cpu`
backend, a CPU device (PoCL's) below it. This module imports without pyopencl; the backend
is then unavailable and says why.
"""

from ...aot.library import register_library_target
from ...backend import register_backend
from .backend import OpenCLBackend
from .library import OpenCLLibrary

backend = OpenCLBackend()
register_backend(backend)
register_library_target(OpenCLLibrary())

__all__ = ["OpenCLBackend", "backend"]
