"""Kernel objects and the executor: what happens between `kernel[grid, block](...)` and a
backend running it (validate, specialise, cache, dispatch on the execution model).

Above the runtime (devices, arrays, streams) and the backend contract, below code
generation and the backends (docs/architecture.md).
"""
