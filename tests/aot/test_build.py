"""`kiln build` (kiln/aot/build.py) end to end: build kiln/examples.py, compile a C program
against the header with gcc, run it, compare with NumPy; specialisation errors, bad output
folders and all-or-nothing output (exit status 2, nothing half-written)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kiln.cli import main
from tests.aot.helpers import EXAMPLES, HERE, build, compile_program, run_program

pytestmark = [pytest.mark.compiler, pytest.mark.slow]


def mandelbrot_reference(h: int, w: int, max_iter: int) -> np.ndarray:
    out = np.zeros((h, w), np.int32)
    for y in range(h):
        for x in range(w):
            cr = np.float32(-2.0) + np.float32(3.0) * np.float32(x) / np.float32(w)
            ci = np.float32(-1.5) + np.float32(3.0) * np.float32(y) / np.float32(h)
            zr = zi = np.float32(0)
            it = 0
            for k in range(max_iter):
                if zr * zr + zi * zi > np.float32(4.0):
                    break
                zr, zi = zr * zr - zi * zi + cr, np.float32(2.0) * zr * zi + ci
                it = k + 1
            out[y, x] = it
    return out


def test_c_program_runs_the_examples(examples_library, tmp_path) -> None:
    target, lib = examples_library
    rng = np.random.default_rng(11)
    n, m, k, p = 10007, 37, 53, 29
    a, b = (rng.standard_normal(n, dtype=np.float32) for _ in range(2))
    ma = rng.standard_normal((m, k), dtype=np.float32)
    mb = rng.standard_normal((k, p), dtype=np.float32)
    for name, array in {"a": a, "b": b, "ma": ma, "mb": mb}.items():
        array.tofile(tmp_path / f"{name}.f32")
    exe = tmp_path / "client"
    compile_program(HERE / "examples_client.c", lib, "ex", exe)
    assert run_program(exe, str(tmp_path)).strip() == "ok"

    np.testing.assert_array_equal(np.fromfile(tmp_path / "add.f32", np.float32), a + b)
    total = np.fromfile(tmp_path / "sum.f32", np.float32)[0]
    assert total == pytest.approx(float(a.astype(np.float64).sum()), abs=1e-2)
    for product in ("mm", "mm_naive"):
        got = np.fromfile(tmp_path / f"{product}.f32", np.float32).reshape(m, p)
        np.testing.assert_allclose(got, ma @ mb, rtol=1e-4, atol=1e-4)
    mandel = np.fromfile(tmp_path / "mandel.i32", np.int32).reshape(48, 64)
    np.testing.assert_array_equal(mandel, mandelbrot_reference(48, 64, 50))

    errors = (tmp_path / "errors.txt").read_text().splitlines()
    assert errors[0].startswith("1 vector_add: block (65536, 1, 1) has more than the device's")
    assert errors[1] == "1 vector_add: argument 'a': extent 0 is -1, not >= 0"
    assert errors[2].startswith("1 context_create:") and "1000" in errors[2]


BAD_KERNELS = '''
import kiln
from kiln import f32, i32

@kiln.kernel
def generic(x, n):
    x[0] = n

@kiln.kernel
def broken(x: f32[:], n: i32):
    x[0] = undefined_name

@kiln.kernel
def tiled(x: f32[:], n: i32, tile: kiln.constexpr):
    x[0] = tile

@kiln.kernel
def scaled(x: f32[:], k: kiln.constexpr):
    x[0] = x[0] * k

@kiln.func
def depth(n: i32) -> i32:
    return 0 if n <= 0 else 1 + depth(n - 1)

@kiln.kernel
def recurses(x: i32[:]):
    x[0] = depth(x[0])
'''


@pytest.mark.parametrize(("args", "message"), [
    (["--kernel", "generic"], "generic: x, n have no type hint; give every parameter with "
     "--kernel generic:TYPE_OF_X,TYPE_OF_N"),
    (["--kernel", "tiled"], "tiled: tile is a kiln.constexpr without a value; give every "
     "parameter with --kernel tiled:f32[:],i32,VALUE_OF_TILE"),
    (["--kernel", "broken"], "undefined_name"),
    (["--kernel", "generic:f32[:]"], "generic has 2 parameter(s), 1 type(s) given"),
    (["--kernel", "nothing"], "no kernel 'nothing'"),
    (["--kernel", "generic:f32[:],i32", "--target", "vulkan"], "has no target 'vulkan'"),
    (["--kernel", "generic:f32[:],i32", "--emit", "server"], "no action named 'server'"),
    (["--kernel", "generic:f32[:],i32", "--arch", "not-a-cpu"], "unknown cpu architecture"),
    (["--kernel", "generic:f32[:],i32", "--name", "bad-name"], "not a C identifier"),
    (["--kernel", "generic:f32[:],i32", "--block", "nothing=64"],
     "--block nothing=...: no kernel 'nothing' is built (kernels: generic)"),
    (["--kernel", "generic:f32[:],i32", "--block", "64x64x64"],
     "--block 64x64x64: more than kiln's 65536 threads per block"),
    (["--kernel", "generic:f32[:],i32", "--block", "=64"], "write [KERNEL=]X, XxY or XxYxZ"),
    (["--kernel", "generic:f32[:],i32", "--block", "0x4"], "write [KERNEL=]X, XxY or XxYxZ"),
    (["--kernel", "generic:f33[:],i32"], "'f33[:]' is not a kiln type"),
    (["--kernel", "generic:f32[:,i32"], "'f32[:,i32' is not a kiln type"),
    (["--kernel", "scaled:f32[:],[1, 2]"], "parameter k is a constexpr: a constexpr value is a "
     "Python literal that can be a dict key"),
    (["--kernel", "generic:f32[:],constexpr({})"], "a constexpr value is a Python literal"),
    (["--kernel", "broken:f64[:],i32"], "broken: parameter x is annotated f32[:], so it "
     "cannot take f64[:]"),
    (["--kernel", "broken:f32[:],i64"], "parameter n is annotated i32, so it cannot take i64"),
    (["--kernel", "broken:f32[:,:],i32"], "parameter x is annotated f32[:], so it cannot take "
     "f32[:, :]"),
    (["--kernel", "recurses", "--target", "opencl"], "`depth` is recursive and the opencl "
     "backend cannot recurse: give it a depth to inline it to, @kiln.func(max_depth=N)"),
])
def test_errors_exit_2_and_leave_nothing(args, message, tmp_path, capsys) -> None:
    module = tmp_path / "bad.py"
    module.write_text(BAD_KERNELS)
    out = tmp_path / "out"
    target = [] if "--target" in args else ["--target", "cpu"]
    assert main(["build", str(module), "-o", str(out), *target, *args]) == 2
    assert message in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.py"]  # no DIR, no scratch


@pytest.mark.parametrize("where", ["file", "under-a-file", "folder-in-the-way",
                                   "missing-module"])
def test_bad_output_or_module_exit_2_with_one_message(where, tmp_path, capsys) -> None:
    """`-o` naming a file or a folder under one, a folder where the header goes, or a
    module that is not there: one message, exit status 2, and what was there left as it
    was."""
    module = tmp_path / "bad.py"
    module.write_text(BAD_KERNELS)
    (tmp_path / "taken").write_text("mine")
    (tmp_path / "clash" / "bad.h").mkdir(parents=True)
    out = {"file": tmp_path / "taken", "under-a-file": tmp_path / "taken" / "lib",
           "folder-in-the-way": tmp_path / "clash", "missing-module": tmp_path / "out"}[where]
    source = tmp_path / "absent.py" if where == "missing-module" else module
    assert main(["build", str(source), "-o", str(out), "--target", "cpu", "--kernel",
                 "generic:f32[:],i32"]) == 2
    err = capsys.readouterr().err
    expected = {"file": f"-o {out}: {out} is a file, not a folder",
                "under-a-file": f"-o {out}: {tmp_path / 'taken'} is a file, not a folder",
                "folder-in-the-way": f"-o {out}: moving the files into place failed",
                "missing-module": f"{source}: no such file"}[where]
    assert expected in err.replace("\n", "") and "Traceback" not in err
    assert (tmp_path / "taken").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.py", "clash", "taken"]
    assert [p.name for p in (tmp_path / "clash").iterdir()] == ["bad.h"]


def test_an_unwritable_output_folder_exits_2(tmp_path) -> None:
    """A read-only parent folder (checked in a fresh process that is not root, where
    permissions apply): one message, exit status 2."""
    if os.geteuid() == 0:
        out = Path("/proc/kiln-cannot-write-here/lib")  # not writable even for root
    else:
        parent = tmp_path / "read-only"
        parent.mkdir(mode=0o555)
        out = parent / "lib"
    result = subprocess.run([sys.executable, "-m", "kiln", "build", str(EXAMPLES), "--target",
                             "cpu", "--kernel", "vector_add", "-o", str(out)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr
    assert f"-o {out}: cannot write there" in result.stderr.replace("\n", "")
    assert "Traceback" not in result.stderr


def test_a_failed_rebuild_keeps_the_previous_library(tmp_path) -> None:
    module = tmp_path / "bad.py"
    module.write_text(BAD_KERNELS)
    out = tmp_path / "out"
    build(module, out, "--target", "cpu", "--kernel", "generic:f32[:],i32", name="lib")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert main(["build", str(module), "-o", str(out), "--name", "lib", "--target", "cpu",
                 "--kernel", "broken"]) == 2
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.py", "out"]


STRUCT_KERNEL = '''
import kiln
from kiln import f32, i32

@kiln.struct
class Pair:
    a: f32
    b: f32

@kiln.kernel
def use_pair(p: Pair, out: f32[:]):
    out[0] = p.a + p.b
'''


def test_a_struct_parameter_is_refused(tmp_path, capsys) -> None:
    module = tmp_path / "structs.py"
    module.write_text(STRUCT_KERNEL)
    assert main(["build", str(module), "--target", "cpu", "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "use_pair: parameter p is Pair; library entry points take arrays of scalars" in err
    assert not (tmp_path / "out").exists()
