"""A backend written from docs/backends.md alone (tests/fixtures/hostsim.py, kiln's public
API only) registers with kiln.backend.register_backend, passes `kiln check`, and each optional
protocol it declares works through kiln's public features."""

from __future__ import annotations

import ast
import io
import sys

import numpy as np
import pytest
from rich.console import Console

import kiln
from kiln.conformance import check_command
from tests.helpers import REPO

FIXTURE = REPO / "tests" / "fixtures" / "hostsim.py"


@pytest.fixture(scope="module")
def hostsim() -> kiln.Device:
    sys.path.insert(0, str(FIXTURE.parent))
    try:
        import hostsim as plugin
    finally:
        sys.path.remove(str(FIXTURE.parent))
    if "hostsim" not in {e.name for e in kiln.backends()}:
        kiln.backend.register_backend(plugin.backend)
    return kiln.device("hostsim")


def test_the_plugin_imports_only_public_api() -> None:
    tree = ast.parse(FIXTURE.read_text())
    modules = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    modules |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    kiln_modules = {m for m in modules if m and m.startswith("kiln")}
    assert kiln_modules <= {"kiln", "kiln.backend", "kiln.builtin_backends.interp"}


def test_the_plugin_passes_kiln_check(hostsim: kiln.Device) -> None:
    out = io.StringIO()
    code = check_command("hostsim", None, console=Console(file=out, width=200))
    assert code == 0, out.getvalue()[-4000:]
    assert "passed" in out.getvalue()


def test_its_optional_protocols_work(hostsim: kiln.Device) -> None:
    backend = hostsim.backend
    kb = kiln.backend
    for protocol in (kb.RawKernels, kb.KernelGraphs, kb.DLPackInterop):
        assert kiln.backend.supports(backend, protocol)
    assert kiln.backend.supports(backend.allocator, kiln.backend.ZeroCopy)
    assert kiln.backend.supports(backend.allocator, kiln.backend.SubBuffers)

    @kiln.kernel
    def add(a: kiln.f32[:], k: kiln.f32):
        i = kiln.global_id(0)
        a[i] = a[i] + k

    x = kiln.to_device(np.zeros(4, np.float32), hostsim)
    for _ in range(3):  # the fast path (FastLaunch) from the second launch on
        add[1, 4](x, 1.0)
    prepared = add.prepare(1, 4, x, 1.0, device=hostsim)  # FastLaunch.prepare_launch
    prepared()
    built = backend.graphs_built  # kiln check's case builds some too
    with kiln.capture(hostsim) as g:  # KernelGraphs: recorded, not run
        add[1, 4](x, 10.0)
    assert x.numpy().tolist() == [4] * 4
    g.replay()
    assert backend.graphs_built == built + 1
    g.update(0, k=5.0)  # update_graph
    g.replay()
    assert x.numpy().tolist() == [19] * 4
    assert np.from_dlpack(x).tolist() == [19] * 4  # DLPackInterop
    shared = np.zeros(4, np.float32)
    view = kiln.as_device_array(shared, hostsim)  # ZeroCopy
    add[1, 4](view, 2.0)
    hostsim.synchronize()
    assert shared.tolist() == [2] * 4
    assert x[1:3].numpy().tolist() == [19, 19]  # SubBuffers
    raw = kiln.RawKernel("def fill(grid, block, a, v):\n    a[:] = v\n", "fill",
                         backend="hostsim")  # RawKernels
    raw[1, 1](x, 7.0)
    assert x.numpy().tolist() == [7] * 4
