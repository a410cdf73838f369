"""The built-in backends, one subpackage each.

Importing a backend binds this package as the attribute `kiln.backends`, which would hide
the public function `kiln.backends()`; so the package itself is callable and returns the
same list (every registered backend, highest priority first).
"""

from __future__ import annotations

import sys
import types
from typing import Any

from ..runtime.device import backends


class _CallableModule(types.ModuleType):
    def __call__(self) -> list[Any]:
        return backends()


sys.modules[__name__].__class__ = _CallableModule
