"""Ahead of time: `kiln build` writes artifacts through an action; `load_library` runs a
built library from Python without the kernels' source or a compiler."""

from .build import build, library_name
from .loader import Library, LibraryArray, load_library, opencl_loader

__all__ = ["Library", "LibraryArray", "build", "library_name", "load_library", "opencl_loader"]
