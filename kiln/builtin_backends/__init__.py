"""The built-in backends, one subpackage each (interp, cpu, cuda, opencl, serial).

Not named `kiln.backends`: that is the function `kiln.backends()`, the registered backends,
and a package of that name would be bound over it when a backend is imported.
"""
