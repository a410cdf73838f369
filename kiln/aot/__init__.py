"""Ahead of time: `kiln build` writes artifacts through an action (`build`, above the
executor: import it as `kiln.aot.build`); `load_library` runs a built library from Python
without the kernels' source or a compiler."""

from .loader import Library, LibraryArray, load_library, opencl_loader

__all__ = ["Library", "LibraryArray", "load_library", "opencl_loader"]
