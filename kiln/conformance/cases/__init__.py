"""The built-in conformance cases; importing this package registers them, in this order."""

from . import (
    advanced,
    aggregates,
    algorithms,
    arithmetic,
    atomics,
    control,
    host,
    matrix,
    spellings,
    wide,
)

MODULES = (algorithms, arithmetic, control, atomics, advanced, aggregates, wide, host,
           spellings, matrix)
