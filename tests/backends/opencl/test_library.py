"""The opencl target of `kiln build` (kiln/builtin_backends/opencl/library.py): recursion
inlined to its max_depth, as in-process compiles do."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import kiln
from tests.aot.helpers import HERE, build, opencl_loader_missing

pytestmark = [pytest.mark.compiler, pytest.mark.slow]


def embedded_opencl_source(library: Path) -> str:
    """The OpenCL C an opencl library holds (one C string holding `__kernel`)."""
    data = library.read_bytes()
    at = data.index(b"__kernel")
    return data[data.rfind(b"\0", 0, at) + 1:data.index(b"\0", at)].decode()


def defined_functions(source: str) -> list[tuple[str, str]]:
    """(name, body) of each function defined in C source, in order."""
    heads = list(re.finditer(r"^[\w ]+?\b(\w+)\([^;{]*\)\s*\{", source, re.M))
    return [(m[1], source[m.end():heads[k + 1].start() if k + 1 < len(heads) else None])
            for k, m in enumerate(heads)]


@pytest.mark.skipif(bool(opencl_loader_missing()), reason=opencl_loader_missing())
def test_an_opencl_library_bounds_recursion_as_in_process_compiles_do(tmp_path) -> None:
    """OpenCL C forbids recursion: the opencl library inlines `fib` to its max_depth (no
    function of its OpenCL C calls itself or one defined after it) and computes the right
    values on PoCL, as `kiln.launch` does on the opencl backend; a launch going deeper
    returns REC_ERROR_RECURSION_DEPTH (kiln.RecursionDepthError) with the in-process
    message, and the context works afterwards."""
    lib = tmp_path / "lib"
    build(HERE / "recursive_kernels.py", lib, "--target", "opencl", name="rec")
    functions = defined_functions(embedded_opencl_source(lib / "librec.so"))
    names = [name for name, _ in functions]
    assert "fib_depth12" in names and names[-1] == "fibs"
    for k, (name, body) in enumerate(functions):
        called = set(re.findall(r"\b(\w+)\(", body)) & set(names)
        assert called <= set(names[:k]), f"{name} calls {called - set(names[:k])}"
    header = (lib / "rec.h").read_text()
    assert "REC_ERROR_RECURSION_DEPTH = 6" in header
    assert "returns REC_ERROR_RECURSION_DEPTH when a call goes deeper */" in header
    assert "indices are checked" not in header
    library = kiln.load_library(lib)
    out = np.zeros(12, np.int32)
    library.fibs(1, 12, out, 12)
    expected = [0, 1]
    while len(expected) < 12:
        expected.append(expected[-1] + expected[-2])
    np.testing.assert_array_equal(out, expected)
    with pytest.raises(kiln.RecursionDepthError, match=r"recursive_kernels.py:12:\d+: "
                       r"recursion: `fib` recursed deeper than its max_depth=12 in kernel "
                       r"`fibs` on the opencl backend"):
        library.fibs(1, 14, np.zeros(14, np.int32), 14)
    out[:] = 0
    library.fibs(1, 12, out, 12)
    np.testing.assert_array_equal(out, expected)
