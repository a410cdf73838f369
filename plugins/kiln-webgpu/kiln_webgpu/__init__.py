"""kiln-webgpu: kiln's `webgpu` backend, WGSL compute shaders through the `wgpu` package.

Registered through the `kiln.backends` entry point (`kiln_webgpu:backend`); importing this
package does not start wgpu (`availability()` does, once).
"""

from .backend import WebGPUBackend

backend = WebGPUBackend()

__all__ = ["WebGPUBackend", "backend"]
