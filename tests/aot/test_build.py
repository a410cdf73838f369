"""`kiln build --emit library` end to end: build from kiln/examples.py, compile a C program
against the header with gcc, run it, compare with NumPy; the manifest; `load_library`;
errors (exit status 2, nothing half-written)."""

from __future__ import annotations

import ctypes
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import kiln
from kiln.cli import main
from tests.helpers import REPO, backend_entry

pytestmark = [pytest.mark.compiler, pytest.mark.slow]

HERE = Path(__file__).resolve().parent
EXAMPLES = REPO / "kiln" / "examples.py"


def opencl_loader_missing() -> str:
    """Why a C program cannot use OpenCL here ("" when it can)."""
    entry = backend_entry("opencl")
    if not entry.available:
        return f"the opencl backend is unavailable: {entry.reason}"
    try:
        ctypes.CDLL("libOpenCL.so.1")
    except OSError:
        return "no system OpenCL ICD loader (libOpenCL.so.1; Debian: ocl-icd-libopencl1)"
    return ""


def nvrtc_missing() -> str:
    try:
        from kiln.builtin_backends.cuda import nvrtc

        nvrtc.version()
    except (ImportError, RuntimeError, OSError) as exc:
        return f"no NVRTC (pip install 'kiln[cuda]'): {exc}"
    return ""


def target_params() -> list:
    """cpu and opencl (PoCL) run here and in CI; cuda runs where there is a GPU."""
    cpu, cuda = backend_entry("cpu"), backend_entry("cuda")
    missing_cl = opencl_loader_missing()
    return [
        pytest.param("cpu", marks=pytest.mark.skipif(
            not cpu.available, reason=f"no C compiler with OpenMP: {cpu.reason}")),
        pytest.param("opencl", marks=pytest.mark.skipif(bool(missing_cl), reason=missing_cl)),
        pytest.param("cuda", marks=pytest.mark.skipif(
            not cuda.available, reason=f"no CUDA GPU (the cuda library is built and compiled "
            f"against without one in test_cuda_library_builds_without_a_gpu): {cuda.reason}")),
    ]


def build(module: Path, out: Path, *args: str, name: str = "ex") -> None:
    status = main(["build", str(module), "-o", str(out), "--name", name, *args])
    assert status == 0


def compile_program(source: Path, lib_dir: Path, name: str, exe: Path, *flags: str) -> None:
    """gcc, strict, against the header; linked to libNAME.so with an rpath."""
    cmd = ["gcc", "-std=c11", "-Wall", "-Wextra", "-Wpedantic", "-Werror", *flags, f"-I{lib_dir}",
           str(source), f"-L{lib_dir}", f"-l{name}", f"-Wl,-rpath,{lib_dir}", "-o", str(exe)]
    result = subprocess.run(cmd, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def run_program(exe: Path, *args: str) -> str:
    result = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


@pytest.fixture(scope="module", params=target_params())
def examples_library(request, tmp_path_factory) -> tuple[str, Path]:
    target = request.param
    out = tmp_path_factory.mktemp(f"lib-{target}") / "ex"
    build(EXAMPLES, out, "--target", target, "--block", "matmul_tiled=16x16")
    return target, out


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


def test_manifest_describes_every_entry_point(examples_library) -> None:
    target, lib = examples_library
    manifest = json.loads((lib / "ex.json").read_text())
    assert manifest["target"] == target and manifest["kiln_version"] == "0.1.0"
    assert (manifest["library"], manifest["header"]) == ("libex.so", "ex.h")
    if target == "cpu":  # what -march=native meant on the build machine
        assert manifest["march"].startswith(platform.machine())
    entries = {e["kernel"]: e for e in manifest["entry_points"]}
    assert list(entries) == ["vector_add", "block_sum", "matmul_naive", "matmul_tiled",
                             "matmul_tiled_square", "mandelbrot", "spmv_csr", "julia",
                             "softmax_rows", "smooth_shard"]
    assert entries["matmul_tiled"]["block_shapes"] == [[16, 16, 1]]
    assert entries["matmul_naive"]["block_shapes"] is None
    add = entries["vector_add"]
    assert add["c_name"] == "ex_vector_add"
    assert add["specialisation"] == ["f32[:]", "f32[:]", "f32[:]", "i32"]
    assert add["parameters"][2] == {"name": "c", "kind": "array", "element_type": "f32",
                                    "ndim": 1, "written": True}
    assert add["parameters"][3] == {"name": "n", "kind": "scalar", "element_type": "i32"}
    assert [p["name"] for p in entries["matmul_tiled"]["c_parameters"]] == [
        "a", "a_shape0", "a_shape1", "b", "b_shape0", "b_shape1", "c", "c_shape0", "c_shape1"]
    header = (lib / "ex.h").read_text()
    assert "int ex_vector_add(ex_context *ctx, ex_dim3 grid, ex_dim3 block, float *a, " \
           "int32_t a_shape0, float *b, int32_t b_shape0, float *c, int32_t c_shape0, " \
           "int32_t n);" in header


def test_load_library_launches_through_the_library(examples_library) -> None:
    _, lib_dir = examples_library
    lib = kiln.load_library(lib_dir)
    rng = np.random.default_rng(3)
    n = 5000
    a, b = (rng.standard_normal(n, dtype=np.float32) for _ in range(2))
    c = np.zeros(n, np.float32)
    lib.vector_add((n + 127) // 128, 128, a, b, c, n)  # NumPy arrays: copied in and back
    np.testing.assert_array_equal(c, a + b)

    ma = rng.standard_normal((20, 30), dtype=np.float32)
    mb = rng.standard_normal((30, 10), dtype=np.float32)
    da, db, dc = lib.to_device(ma), lib.to_device(mb), lib.empty((20, 10), np.float32)
    lib.matmul_tiled((1, 2), (16, 16), da, db, dc)  # library memory: no copies
    np.testing.assert_allclose(dc.copy_to_host(), ma @ mb, rtol=1e-4, atol=1e-4)

    with pytest.raises(kiln.LaunchError, match=r"argument 'b' \(#2\) of vector_add: expected "
                       r"a 1-d float32 array, got a 1-d float64 one"):
        lib.vector_add(1, 32, a, b.astype(np.float64), c, n)
    with pytest.raises(kiln.LaunchError, match=r"argument 'b' \(#2\) of vector_add: expected "
                       r"a 1-d float32 array in this machine's byte order, got a big-endian "
                       r"one \(>f4\): pass x.astype"):
        lib.vector_add(1, 32, a, b.astype(">f4"), c, n)
    with pytest.raises(kiln.LaunchError, match="argument 'n' .*does not fit i32"):
        lib.vector_add(1, 32, a, b, c, 2**40)
    with pytest.raises(kiln.LaunchError, match="vector_add takes 4 argument"):
        lib.vector_add(1, 32, a, b, c)
    with pytest.raises(RuntimeError, match="block .* more than the device's"):
        lib.vector_add(1, 65536, a, b, c, n)


@pytest.mark.parametrize("target", target_params())
def test_c_program_from_the_header_alone_gets_numpys_answers(target, tmp_path) -> None:
    """The issue's "done when": a C program written from the header and manifest alone
    (tests/aot/unseen_client.c), built outside the repository against a library of
    kernels it has not seen (a generic saxpy given types, a constexpr box blur, an atomic
    histogram), gets NumPy's answers."""
    work = tmp_path / "outside"
    work.mkdir()
    (work / "kernels.py").write_text((HERE / "unseen_kernels.py").read_text())
    (work / "client.c").write_text((HERE / "unseen_client.c").read_text())
    build(work / "kernels.py", work / "lib", "--target", target, "--kernel",
          "saxpy:f32,f32[:],f32[:],f32[:],i32", "--kernel", "box_blur:f64[:, :],f64[:, :],2",
          "--kernel", "histogram", name="kernels")
    manifest = json.loads((work / "lib" / "kernels.json").read_text())
    assert [e["c_name"] for e in manifest["entry_points"]] == [
        "kernels_saxpy", "kernels_box_blur", "kernels_histogram"]
    compile_program(work / "client.c", work / "lib", "kernels", work / "client")
    out = work / "run"
    out.mkdir()
    assert run_program(work / "client", str(out)).strip() == "ok"

    x, y, got = (np.fromfile(out / f"{n}.f32", np.float32) for n in ("x", "y", "out"))
    np.testing.assert_array_equal(got, np.float32(1.5) * x + y)
    h, w, r = 123, 77, 2
    src = np.fromfile(out / "src.f64").reshape(h, w)
    padded, ones = np.pad(src, r), np.pad(np.ones_like(src), r)
    shifts = [(a, b) for a in range(2 * r + 1) for b in range(2 * r + 1)]
    total = sum(padded[a:a + h, b:b + w] for a, b in shifts)
    count = sum(ones[a:a + h, b:b + w] for a, b in shifts)
    np.testing.assert_allclose(np.fromfile(out / "dst.f64").reshape(h, w), total / count,
                               rtol=1e-12)
    data = np.fromfile(out / "data.u8", np.uint8).astype(np.int32)
    np.testing.assert_array_equal(np.fromfile(out / "bins.i32", np.int32),
                                  np.bincount(data % 17, minlength=17))


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


def test_build_help_lists_the_actions(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["build", "--help"])
    assert "library [cpu, cuda, opencl]" in capsys.readouterr().out


@pytest.mark.skipif(bool(nvrtc_missing()), reason=nvrtc_missing())
def test_cuda_library_builds_without_a_gpu(tmp_path) -> None:
    """NVRTC makes the cubins (sm_80 and sm_90) and gcc the host code with no GPU or CUDA
    headers here; a C program compiles and links against it. Without a driver, creating a
    context fails with a message saying so (with a GPU, the parametrised tests above run
    the program)."""
    out = tmp_path / "lib"
    build(EXAMPLES, out, "--target", "cuda", "--arch", "sm_90,sm_80")
    manifest = json.loads((out / "ex.json").read_text())
    assert manifest["architectures"] == ["sm_90", "sm_80"]
    library = (out / "libex.so").read_bytes()
    assert library.count(b"\x7fELF") >= 1 + 2 * len(manifest["entry_points"])  # the cubins
    needed = subprocess.run(["ldd", str(out / "libex.so")], capture_output=True, text=True)
    assert "libcuda" not in needed.stdout  # the driver is loaded at run time
    compile_program(HERE / "examples_client.c", out, "ex", tmp_path / "client")
    if backend_entry("cuda").available:
        return
    result = subprocess.run([str(tmp_path / "client"), str(tmp_path)], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 1
    assert result.stderr.startswith("no device: ")


@pytest.mark.skipif(bool(nvrtc_missing()), reason=nvrtc_missing())
def test_unknown_cuda_architecture_is_refused(tmp_path, capsys) -> None:
    out = tmp_path / "lib"
    assert main(["build", str(EXAMPLES), "--target", "cuda", "--arch", "sm_13", "-o",
                 str(out)]) == 2
    assert "unknown CUDA architecture 'sm_13' (this NVRTC knows sm_" in capsys.readouterr().err
    assert not out.exists()


def doc_blocks(path: Path) -> list[tuple[str, str, str]]:
    """(language, label, text) of each fenced block whose info string names a label."""
    found = re.findall(r"^```(\w+) ([\w.]+)\n(.*?)^```$", path.read_text(), re.M | re.S)
    return [(lang, label, text) for lang, label, text in found]


@pytest.mark.skipif(not backend_entry("cpu").available, reason="the doc builds for cpu")
def test_the_docs_round_trip_runs(tmp_path) -> None:
    """docs/aot.md, block by block: the module, `kiln build`, the C program, its output,
    and the Python check."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    output = None
    blocks = doc_blocks(REPO / "docs" / "aot.md")
    assert [label for _, label, _ in blocks] == [
        "kernels.py", "build", "main.c", "run", "output", "check.py"]
    for lang, label, text in blocks:
        if lang in ("python", "c"):
            (tmp_path / label).write_text(text)
        if lang == "sh":
            result = subprocess.run(["bash", "-ec", text], cwd=tmp_path, env=env,
                                    capture_output=True, text=True, timeout=300)
            assert result.returncode == 0, result.stdout + result.stderr
            output = result.stdout
        if lang == "text":
            assert output == text
    result = subprocess.run([sys.executable, "check.py"], cwd=tmp_path, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr


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


def test_a_missing_c_compiler_is_reported(tmp_path) -> None:
    """A fresh process (the compiler is found once per process) with KILN_CC pointing
    nowhere: exit status 2, one message, nothing written."""
    env = {**os.environ, "KILN_CC": str(tmp_path / "no-such-cc")}
    result = subprocess.run([sys.executable, "-m", "kiln", "build", str(EXAMPLES), "--target",
                             "opencl", "-o", str(tmp_path / "out")], env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr
    assert "building a library needs a C compiler (cc, or set KILN_CC)" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_plugin_action_runs_through_kiln_build(tmp_path, monkeypatch, capsys) -> None:
    """An action registered by a plugin (here: the lowered IR of each kernel) is listed by
    `kiln build --help` and run by `kiln build --emit`, with the same specialisation and
    all-or-nothing output."""
    from kiln.aot import actions
    from kiln.ir.printer import format_program

    def write_ir(request: actions.ActionRequest) -> None:
        for k in request.kernels:
            (request.out_dir / f"{k.kernel}.ir").write_text(format_program(k.program))

    monkeypatch.setitem(actions._ACTIONS, "ir", actions.Action(
        "ir", "the lowered IR of each kernel", {"cpu": write_ir}))
    with pytest.raises(SystemExit):
        main(["build", "--help"])
    assert "ir [cpu]: the lowered IR of each kernel" in capsys.readouterr().out
    out = tmp_path / "out"
    assert main(["build", str(EXAMPLES), "--emit", "ir", "--target", "cpu", "--kernel",
                 "vector_add", "-o", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["vector_add.ir"]
    assert "vector_add" in (out / "vector_add.ir").read_text()
    assert main(["build", str(EXAMPLES), "--emit", "ir", "--target", "opencl", "-o",
                 str(tmp_path / "other")]) == 2
    assert "the ir action has no target 'opencl' (targets: cpu)" in capsys.readouterr().err


HALF_KERNELS = '''
import kiln
from kiln import bf16, f16, f32

@kiln.kernel
def mix(x: f16[:], y: bf16[:], flag: bool, h: f16, b: bf16, out: f32[:]):
    i = kiln.global_id(0)
    if i < out.shape[0]:
        out[i] = f32(x[i]) * f32(h) + (f32(y[i]) * f32(b) if flag else f32(0))
'''


@pytest.mark.parametrize("target", target_params())
def test_half_precision_and_bool_values_travel_as_bits(target, tmp_path) -> None:
    """f16 and bf16 arrays and scalars (their 16 bits in the header) and a bool scalar,
    through load_library, against NumPy. An OpenCL device without f16 (PoCL on some
    CPUs) refuses the kernel when the context is created, saying why."""
    import ml_dtypes

    module = tmp_path / "halves.py"
    module.write_text(HALF_KERNELS)
    build(module, tmp_path / "lib", "--target", target, name="halves")
    header = (tmp_path / "lib" / "halves.h").read_text()
    assert ("uint16_t *x, int32_t x_shape0, uint16_t *y, int32_t y_shape0, bool flag, "
            "uint16_t h, uint16_t b, float *out") in header
    if target == "opencl" and not kiln.device("opencl").capabilities.fp16:
        with pytest.raises(RuntimeError, match="(?s)building mix for the device failed.*fp16"):
            kiln.load_library(tmp_path / "lib")
        return
    lib = kiln.load_library(tmp_path / "lib")
    rng = np.random.default_rng(7)
    n = 300
    x = rng.standard_normal(n).astype(np.float16)
    y = rng.standard_normal(n).astype(ml_dtypes.bfloat16)
    for flag in (True, False):
        out = np.zeros(n, np.float32)
        lib.mix(3, 128, x, y, flag, 1.5, -2.25, out)
        expected = x.astype(np.float32) * np.float32(1.5)
        if flag:
            expected = expected + y.astype(np.float32) * np.float32(-2.25)
        np.testing.assert_allclose(out, expected, rtol=1e-6)


CHECKED = HERE / "checked_kernels.py"

API_CHECKS = {
    "create_null": (1, "context_create: ctx is NULL"),
    "create_negative_device": (1, "-1"),
    "create_missing_device": (1, "1000"),
    "create_left_null": (0, ""),
    "synchronize_null": (1, "synchronize: the context is NULL"),
    "synchronize_unknown": (1, "is not a live context (chk_context_create; destroyed?)"),
    "alloc_null_context": (-1, "alloc: the context is NULL"),
    "alloc_unknown_context": (-1, "alloc: 0x"),
    "alloc_huge": (-1, "alloc: 18446744073709551615 bytes"),
    "free_twice": (1, "is not memory of this context (chk_alloc; freed twice?)"),
    "free_unknown": (1, "is not memory of this context"),
    "free_null_context": (1, "free: the context is NULL"),
    "free_unknown_context": (1, "free: 0x"),
    "free_null_pointer": (0, ""),
    "to_device_null_context": (1, "copy_to_device: the context is NULL"),
    "to_device_unknown_dst": (1, "copy_to_device: device_dst (0x"),
    "to_device_freed_dst": (1, "is not memory of this context"),
    "to_device_too_many": (1, "copy_to_device: 4000 bytes at device_dst, which has 40 bytes"),
    "to_device_null_src": (1, "copy_to_device: host_src is NULL"),
    "to_device_null_dst": (1, "copy_to_device: device_dst is NULL"),
    "to_host_small_buffer": (1, "copy_to_host: 4000 bytes into host_dst of 40 bytes"),
    "to_host_too_many": (1, "copy_to_host: 4000 bytes at device_src, which has 40 bytes"),
    "to_host_unknown_src": (1, "copy_to_host: device_src (0x"),
    "to_host_null_dst": (1, "copy_to_host: host_dst is NULL"),
    "to_host_null_context": (1, "copy_to_host: the context is NULL"),
    "within_too_many": (1, "copy_device_to_device: 4000 bytes at device_dst"),
    "within_unknown": (1, "copy_device_to_device: device_src (0x"),
    "within_freed": (1, "copy_device_to_device: device_dst (0x"),
    "launch_null_context": (1, "fill: the context is NULL"),
    "launch_unknown_context": (1, "is not a live context"),
    "launch_zero_grid": (1, "fill: grid (0, 1, 1): each dimension must be 1 to 2^31-1"),
    "launch_grid_times_block": (1, "fill: 67108864 blocks of 64 threads along x is over "
                                "2^31-1 threads per axis"),
    "launch_tall_grid": (1, "fill: grid (1, 2147483648, 1)"),
    "launch_block_over_device": (1, "fill: block (1048576, 1, 1) has more than the device's"),
    "launch_block_y_over": (1, "fill: block (1, 70000, 1) has more than the device's"),
    "launch_grid_y_over_limit": (1, "fill: grid dimension y is 70000, over the device's "
                                 "limit of 65535"),
    "launch_block_z_over_limit": (1, "fill: block dimension z is 128, over the device's limit "
                                  "of 64"),
    "launch_negative_extent": (1, "fill: argument 'x': extent 0 is -1, not >= 0"),
    "launch_extent_over_memory": (1, "fill: argument 'x' has 1000 elements of 4 bytes; its "
                                  "memory has 40 bytes from there"),
    "launch_null_array": (1, "fill: argument 'x' is NULL with 1000 elements"),
    "launch_extents_wrap": (1, "fill3: argument 'x' has more than 2^63 bytes of elements"),
    "within_itself": (0, ""),
    "within_overlap": (1, "copy_device_to_device: 16 bytes from 0x"),
    "launch_unknown_array": (1, "fill: argument 'x' (0x"),
    "launch_freed_array": (1, "is not memory of this context"),
    "launch_wrong_block_shape": (1, "staged: block (32, 1, 1) is not a block shape it was "
                                 "built for (64x1x1)"),
    "launch_debug_out_of_bounds": (5, "checked_kernels.py:30:9: index out of bounds: kernel "
                                   "`off_by_one`: thread (40, 0, 0) of block (15, 0, 0) wrote "
                                   "`x[1000]`, outside its 1000 elements"),
    "synchronize_destroyed": (1, "is not a live context"),
    "launch_destroyed": (1, "is not a live context"),
}
"""What tests/aot/api_checks_client.c's calls must return: the status (-1: a NULL pointer
with a message) and part of the message."""
TARGET_API_CHECKS = {"opencl": {"launch_grid_y_over_limit": (0, ""),
                                "within_overlap": (1, "copy_device_to_device: device_dst (0x"),
                                "launch_block_z_over_limit": (0, "")}}
"""Where a target's limits differ (OpenCL grids: 2^31-1 along every axis; PoCL blocks:
4096 threads along every axis), as kiln.launch's do, and where OpenCL has no pointers into
a buffer."""


def sanitizer_flags() -> list[str]:
    """AddressSanitizer when this gcc can link it (Debian's gcc can)."""
    probe = subprocess.run(["gcc", "-fsanitize=address", "-x", "c", "-", "-o", os.devnull],
                           input="int main(void) { return 0; }", capture_output=True, text=True)
    return ["-fsanitize=address", "-fno-omit-frame-pointer", "-g"] if probe.returncode == 0 \
        else []


def check_api_output(stdout: str, target: str) -> None:
    check_client_output(stdout, {**API_CHECKS, **TARGET_API_CHECKS.get(target, {})})


def check_client_output(stdout: str, expected: dict[str, tuple[int, str]]) -> None:
    """A client's `LABEL STATUS MESSAGE` lines, then `ok`: every label expected, with its
    status and part of its message."""
    lines = stdout.splitlines()
    assert lines and lines[-1] == "ok", stdout
    got = {}
    for line in lines[:-1]:
        label, status, message = (line.split(" ", 2) + [""])[:3]
        got[label] = (int(status), message)
    assert set(got) == set(expected), stdout
    for label, (status, part) in expected.items():
        assert got[label][0] == status and part in got[label][1], (label, got[label])


@pytest.mark.parametrize("target", target_params())
def test_c_api_refuses_bad_calls_without_crashing(target, tmp_path) -> None:
    """Every entry point, from C, with NULL and unknown contexts and pointers, double
    frees, bad devices, copies past either end, launches kiln.launch refuses, a wrong block
    shape and a debug kernel writing past the end: each returns its error code and a
    message, and the context still works afterwards. The program is built with
    AddressSanitizer (so a heap overflow fails it)."""
    lib = tmp_path / "lib"
    build(CHECKED, lib, "--target", target, "--block", "staged=64", name="chk")
    exe = tmp_path / "client"
    compile_program(HERE / "api_checks_client.c", lib, "chk", exe, *sanitizer_flags())
    # drivers keep what they load (leaks), and CUDA maps memory where ASan's gap would be
    env = {**os.environ, "ASAN_OPTIONS": "detect_leaks=0:protect_shadow_gap=0"}
    result = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    check_api_output(result.stdout, target)


REGISTRATION_REFUSALS = {
    "register_null_context": (1, "register: the context is NULL"),
    "register_null": (1, "register: ptr is NULL"),
    "register_zero_bytes": (1, "register: nbytes is 0 at 0x"),
    "register_wraps": (1, "register: 64 bytes at 0xfffffffffffffff7 run past the end of the "
                       "address space"),
    "register_allocation": (1, "overlap memory the context has already (chk_alloc or "
                            "chk_register)"),
}
REGISTERED_CHECKS = {
    **REGISTRATION_REFUSALS,
    "register": (0, ""),
    "register_overlap": (1, "register: 16 bytes at 0x"),
    "register_twice": (1, "register: 4096 bytes at 0x"),
    "launch_past_registered": (1, "fill: argument 'x' has 1024 elements of 4 bytes; its memory "
                               "has 4056 bytes from there"),
    "launch_misaligned": (1, "is not aligned to its 4-byte elements"),
    "to_host_past_registered": (1, "copy_to_host: 4096 bytes at device_src, which has 4092 "
                                "bytes from there"),
    "to_device_past_registered": (1, "copy_to_device: 4096 bytes at device_dst, which has "
                                  "4092 bytes"),
    "within_past_registered": (1, "copy_device_to_device: 4096 bytes at device_dst, which has "
                               "4092 bytes"),
    "free_registered": (1, "is registered memory, which the program owns (chk_unregister "
                        "forgets it)"),
    "unregister_allocation": (1, "is memory from chk_alloc (chk_free releases it)"),
    "unregister_inside": (1, "is not memory registered with this context (chk_register"),
    "unregister_null_context": (1, "unregister: the context is NULL"),
    "unregister_twice": (1, "is not memory registered with this context"),
    "launch_unregistered": (1, "is not memory of this context (chk_alloc or chk_register)"),
    "to_host_unregistered": (1, "copy_to_host: device_src (0x"),
}
"""What tests/aot/registered_memory_client.c's refused calls must return."""
TARGET_REGISTERED_CHECKS = {
    "opencl": {**REGISTRATION_REFUSALS,
               "register": (1, "the opencl target uses only memory from chk_alloc")},
    "cuda": {**REGISTERED_CHECKS,
             "register_past_allocation": (1, "register: 8192 bytes at 0x"),
             "register_host_pointer": (1, "is not device memory")},
}
"""The opencl target registers nothing; cuda checks device memory with the driver."""


@pytest.mark.parametrize("target", target_params())
def test_c_program_launches_on_memory_it_registers(target, tmp_path) -> None:
    """The program's own memory (cpu: malloc'd; cuda: device memory another context
    allocated) registered with chk_register: launches and copies on it give the expected
    values (on cpu in the program's array itself), and access past its end, a misaligned
    array, chk_free of it, unregistering twice and use after chk_unregister are refused.
    OpenCL refuses every registration. Built with AddressSanitizer."""
    lib = tmp_path / "lib"
    build(CHECKED, lib, "--target", target, "--block", "staged=64", name="chk")
    exe = tmp_path / "client"
    compile_program(HERE / "registered_memory_client.c", lib, "chk", exe, *sanitizer_flags())
    env = {**os.environ, "ASAN_OPTIONS": "detect_leaks=0:protect_shadow_gap=0"}
    mode = "device" if target == "cuda" else "host"
    result = subprocess.run([str(exe), mode], capture_output=True, text=True, timeout=300,
                            env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    check_client_output(result.stdout, TARGET_REGISTERED_CHECKS.get(target, REGISTERED_CHECKS))


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
@pytest.mark.skipif(not backend_entry("cpu").available, reason="no C compiler with OpenMP")
def test_c_api_checks_run_clean_under_valgrind(tmp_path) -> None:
    """The same programs (bad calls; registered memory) against the cpu library under
    valgrind's memcheck: no invalid read or write anywhere, the library's own included
    (OpenCL and CUDA drivers are too slow or noisy under it)."""
    lib = tmp_path / "lib"
    build(CHECKED, lib, "--target", "cpu", "--block", "staged=64", name="chk")
    for client, expected in (("api_checks_client.c", {**API_CHECKS}),
                             ("registered_memory_client.c", REGISTERED_CHECKS)):
        exe = tmp_path / client.removesuffix(".c")
        compile_program(HERE / client, lib, "chk", exe)
        result = subprocess.run(["valgrind", "--error-exitcode=1", "--quiet", str(exe), "host"],
                                capture_output=True, text=True, timeout=600,
                                env={**os.environ, "OMP_NUM_THREADS": "2"})
        assert result.returncode == 0, result.stdout + result.stderr
        check_client_output(result.stdout, expected)


@pytest.fixture(scope="module", params=target_params())
def checked_library(request, tmp_path_factory) -> tuple[str, Path]:
    target = request.param
    out = tmp_path_factory.mktemp(f"chk-{target}") / "chk"
    build(CHECKED, out, "--target", target, "--block", "staged=64", name="chk")
    return target, out


def test_load_library_refuses_launches_kiln_launch_refuses(checked_library) -> None:
    """grid x block over 2^31-1 along an axis is refused (as kiln.launch refuses it), not
    run with wrapped thread indices, and so is a grid over the device's limits; the context
    works afterwards."""
    target, lib_dir = checked_library
    lib = kiln.load_library(lib_dir)
    x = lib.empty(1000, np.float32)
    if target != "opencl":  # OpenCL grids take 2^31-1 along every axis
        with pytest.raises(kiln.LaunchError, match="fill: grid dimension y is 70000, over the "
                           "device's limit of 65535"):
            lib.fill((1, 70000), 64, x, 1.0)
    with pytest.raises(kiln.LaunchError, match=r"fill: 67108864 blocks of 64 threads along x "
                       r"is over 2\^31-1 threads per axis"):
        lib.fill(2**26, 64, x, 1.0)
    with pytest.raises(kiln.LaunchError, match=r"fill: 2 blocks of 1073741824 threads|"
                       r"block \(1073741824, 1, 1\) has more than"):
        lib.fill(2, 2**30, x, 1.0)
    lib.fill(16, 64, x, 2.5)
    np.testing.assert_array_equal(x.copy_to_host(), np.full(1000, 2.5, np.float32))
    with pytest.raises(kiln.LaunchError, match=r"grid must be 1 to 3 integers from 1 to 2\^31-1"):
        lib.fill(2**32 + 1, 64, x, 1.0)  # would wrap to 1 as a uint32
    with pytest.raises(kiln.LaunchError, match="shape is non-negative ints, got .-5,."):
        lib.empty(-5, np.float32)


def test_copy_to_host_checks_the_destination(checked_library) -> None:
    """A too-small, wrong-dtype, non-contiguous or read-only `out` is refused before the
    library writes anything."""
    _, lib_dir = checked_library
    lib = kiln.load_library(lib_dir)
    big = lib.to_device(np.arange(1000, dtype=np.float32))
    small = np.zeros(10, np.float32)
    with pytest.raises(kiln.LaunchError, match=r"expected shape \(1000,\) and dtype float32, "
                       r"got shape \(10,\) and dtype float32"):
        big.copy_to_host(small)
    assert not small.any()
    with pytest.raises(kiln.LaunchError, match="got shape .1000,. and dtype float64"):
        big.copy_to_host(np.zeros(1000, np.float64))
    with pytest.raises(kiln.LaunchError, match="not C-contiguous"):
        big.copy_to_host(np.zeros(2000, np.float32)[::2])
    frozen = np.zeros(1000, np.float32)
    frozen.flags.writeable = False
    with pytest.raises(kiln.LaunchError, match="read-only"):
        big.copy_to_host(frozen)
    with pytest.raises(kiln.LaunchError, match="expected a NumPy array, got list"):
        big.copy_to_host([0.0] * 1000)  # type: ignore[arg-type]
    out = np.empty(1000, np.float32)
    assert big.copy_to_host(out) is out
    np.testing.assert_array_equal(out, np.arange(1000, dtype=np.float32))


@pytest.mark.parametrize(("shape", "dtype", "message"), [
    ((2**21, 2**21, 2**22), np.float32, r"too large: over 2\*\*63 bytes"),  # wrapped to 0 bytes
    (2**62 + 16, np.float32, r"too large: over 2\*\*63 bytes"),
    ((4, -1), np.float32, "shape is non-negative ints"),
    (2.5, np.float32, "shape is non-negative ints"),
    ((True,), np.float32, "shape is non-negative ints"),
    (3, object, "not object"),
    (3, np.complex64, "not complex64"),
    (3, "U4", "not <U4"),
    (3, "no such dtype", "not 'no such dtype'"),
])
def test_library_arrays_refuse_shapes_and_dtypes_kiln_empty_refuses(
        checked_library, shape, dtype, message) -> None:
    """Shapes whose bytes pass 2**63 (not wrapped to a small size), negative or non-int
    extents, and dtypes no kernel parameter has are refused before anything is allocated."""
    lib = kiln.load_library(checked_library[1])
    with pytest.raises(kiln.LaunchError, match=message):
        lib.empty(shape, dtype)


def test_an_opencl_library_names_the_buffer_size_it_cannot_allocate(checked_library) -> None:
    """More bytes than the device's largest buffer: the library's message names the
    condition (CL_INVALID_BUFFER_SIZE), not only its number."""
    target, lib_dir = checked_library
    if target != "opencl" or not backend_entry("opencl").available:
        pytest.skip("an OpenCL library, with pyopencl to read the device's largest buffer")
    limit = int(kiln.device("opencl").handle.device.max_mem_alloc_size)
    lib = kiln.load_library(lib_dir)
    with pytest.raises(RuntimeError, match=r"OpenCL error -61 \(CL_INVALID_BUFFER_SIZE: more "
                       r"bytes than the device's largest buffer"):
        lib.empty(limit // 4 + 16, np.float32)
    np.testing.assert_array_equal(lib.to_device(np.ones(4, np.float32)).copy_to_host(), 1)


def test_to_device_takes_scalar_types_as_kiln_to_device_does(checked_library) -> None:
    """Object, complex and string arrays are refused by dtype (an object array's pointers
    are no data for a kernel); a 0-d array keeps shape (), and big-endian data arrives as
    its values."""
    lib = kiln.load_library(checked_library[1])
    for host, name in ((np.array([[1, 2, 3] * 100, "x" * 1000], dtype=object), "object"),
                       (np.ones(3, np.complex64), "complex64"), (np.array(["ab"]), "<U2")):
        with pytest.raises(kiln.LaunchError, match=f"not {name}"):
            lib.to_device(host)
    scalar = lib.to_device(np.float32(1.5))
    assert scalar.shape == kiln.to_device(np.float32(1.5), device="interp").shape == ()
    np.testing.assert_array_equal(scalar.copy_to_host(), np.float32(1.5))
    swapped = lib.to_device(np.arange(5, dtype=">f4"))
    assert swapped.dtype == np.float32
    np.testing.assert_array_equal(swapped.copy_to_host(), np.arange(5, dtype=np.float32))
    with pytest.raises(kiln.LaunchError, match="to_device takes an array"):
        lib.to_device([[1.0], [1.0, 2.0]])


class CudaArrayInterface:
    """An object that says it is a CUDA array (only its interface is read)."""

    def __init__(self, ptr: int, shape: tuple[int, ...], typestr: str = "<f4",
                 strides: tuple[int, ...] | None = None) -> None:
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr,
                                         "data": (ptr, False), "strides": strides,
                                         "version": 3, "stream": None}


def test_a_cuda_array_is_refused_by_a_library_of_another_target(checked_library) -> None:
    """Only a cuda library takes CUDA arrays; others refuse them by name, before launching
    (their pointers are not host memory)."""
    target, lib_dir = checked_library
    if target == "cuda":
        pytest.skip("the cuda library takes CUDA arrays (test_a_cuda_library_takes_...)")
    lib = kiln.load_library(lib_dir)
    with pytest.raises(kiln.LaunchError, match=rf"argument 'x' \(#1\) of fill: a "
                       rf"CudaArrayInterface lives in CUDA memory, which a {target} library "
                       r"cannot use; pass a NumPy array"):
        lib.fill(1, 64, CudaArrayInterface(0x1000, (64,)), 1.0)


@pytest.mark.skipif(not backend_entry("cuda").available,
                    reason=f"no CUDA GPU: {backend_entry('cuda').reason}")
def test_a_cuda_library_takes_cuda_arrays_of_other_libraries(tmp_path) -> None:
    """Arrays of another CUDA library (kiln's own, through `__cuda_array_interface__`) are
    registered for the launch: the kernels work on them in place, the same array may be
    passed twice, and a wrong dtype, a non-contiguous array, a span past the allocation or
    one of more bytes than a size_t holds is refused."""
    lib_dir = tmp_path / "lib"
    build(CHECKED, lib_dir, "--target", "cuda", "--block", "staged=64", name="chk")
    lib = kiln.load_library(lib_dir)
    x = kiln.to_device(np.arange(256, dtype=np.float32), device="cuda")
    out = kiln.to_device(np.zeros(256, np.float32), device="cuda")
    lib.staged(4, 64, x, out)
    np.testing.assert_array_equal(out.numpy(), np.concatenate(
        [np.arange(63, -1, -1) + 64 * k for k in range(4)]).astype(np.float32))
    lib.fill(4, 64, out, 2.5)
    np.testing.assert_array_equal(out.numpy(), np.full(256, 2.5, np.float32))
    lib.staged(4, 64, out, out)  # one array twice: registered once
    ptr = x.__cuda_array_interface__["data"][0]
    with pytest.raises(kiln.LaunchError, match="expected a 1-d float32 array, got a 1-d "
                       "float64 one"):
        lib.fill(1, 64, CudaArrayInterface(ptr, (32,), "<f8"), 1.0)
    with pytest.raises(kiln.LaunchError, match=r"is not C-contiguous \(strides \(8,\)\)"):
        lib.fill(1, 64, CudaArrayInterface(ptr, (128,), strides=(8,)), 1.0)
    with pytest.raises(kiln.LaunchError, match=r"shape \(2147483648,\) is not extents from 0 "
                       r"to 2\^31-1"):
        lib.fill(1, 64, CudaArrayInterface(ptr, (2**31,)), 1.0)
    with pytest.raises(kiln.LaunchError, match="__cuda_array_interface__ cannot be read"):
        lib.fill(1, 64, CudaArrayInterface(ptr, ("many",)), 1.0)
    with pytest.raises(kiln.LaunchError, match=r"shape \(2097152, 2097152, 4194304\) is "
                       r"over 2\*\*63 bytes"):  # 2^66 bytes: wraps to 0 as a size_t
        lib.fill3((1, 1, 1), (1, 1, 64), CudaArrayInterface(ptr, (2**21, 2**21, 2**22)))
    other = kiln.load_library(lib_dir).empty(256, np.float32)  # another context's cuMemAlloc
    with pytest.raises(kiln.LaunchError, match="register: 1073741824 bytes at 0x.*, whose "
                       "allocation has 1024 bytes from there"):
        lib.fill(1, 64, CudaArrayInterface(other.ptr, (2**28,)), 1.0)
    lib.fill(4, 64, CudaArrayInterface(other.ptr, (256,)), 3.0)
    np.testing.assert_array_equal(other.copy_to_host(), np.full(256, 3.0, np.float32))
    lib.fill(1, 64, CudaArrayInterface(ptr, (64,)), 7.0)  # x's first 64: fine afterwards
    np.testing.assert_array_equal(x.numpy()[:64], np.full(64, 7.0, np.float32))


def test_a_written_read_only_array_is_refused(checked_library) -> None:
    """An entry point writing a read-only NumPy array (here one over bytes) raises a kiln
    error before launching; read-only inputs are fine."""
    _, lib_dir = checked_library
    lib = kiln.load_library(lib_dir)
    data = bytes(4 * 128)
    frozen = np.frombuffer(data, np.float32)
    with pytest.raises(kiln.LaunchError, match=r"argument 'x' \(#1\) of fill: fill writes it, "
                       r"and the array is read-only"):
        lib.fill(2, 64, frozen, 1.0)
    assert data == bytes(4 * 128)
    out = np.zeros(128, np.float32)
    readonly_in = np.arange(128, dtype=np.float32)
    readonly_in.flags.writeable = False
    lib.staged(2, 64, readonly_in, out)
    np.testing.assert_array_equal(out, np.concatenate([np.arange(63, -1, -1),
                                                       np.arange(127, 63, -1)]))


def test_block_shapes_are_recorded_and_checked(checked_library) -> None:
    """`--block staged=64`: the header and manifest say so, and another block shape is
    refused with a message (not run into a bus error or wrong results)."""
    _, lib_dir = checked_library
    manifest = json.loads((lib_dir / "chk.json").read_text())
    shapes = {e["kernel"]: e["block_shapes"] for e in manifest["entry_points"]}
    assert shapes == {"fill": None, "staged": [[64, 1, 1]], "off_by_one": None,
                      "head_of": None, "fill3": None, "wide_tail": None}
    header = (lib_dir / "chk.h").read_text()
    assert " *   block: 64x1x1 */\nCHK_API int chk_staged(" in header
    assert " *   block: any shape */\nCHK_API int chk_fill(" in header
    lib = kiln.load_library(lib_dir)
    x = np.arange(256, dtype=np.float32)
    out = np.zeros(256, np.float32)
    for block in (32, 128, (64, 2)):
        with pytest.raises(kiln.LaunchError, match=r"staged: block \(.*\) is not a block "
                           r"shape it was built for \(64x1x1\)"):
            lib.staged(4, block, x, out)
    assert not out.any()


def test_a_debug_kernel_reports_an_index_out_of_bounds(checked_library) -> None:
    """`@kiln.kernel(debug=True)` in a library: the launch raises IndexOutOfBoundsError
    naming the array, the index and the line, as in-process debug launches do; a launch in
    bounds afterwards succeeds (the status was reset)."""
    _, lib_dir = checked_library
    manifest = json.loads((lib_dir / "chk.json").read_text())
    entry = next(e for e in manifest["entry_points"] if e["kernel"] == "off_by_one")
    assert entry["options"] == {"debug": True}
    assert [p["name"] for p in entry["c_parameters"]] == ["x", "x_shape0", "n"]
    lib = kiln.load_library(lib_dir)
    x = lib.empty(100, np.float32)
    with pytest.raises(kiln.IndexOutOfBoundsError, match=r"checked_kernels.py:30:9: index out "
                       r"of bounds: kernel `off_by_one`: thread \(36, 0, 0\) of block \(1, 0, 0\) "
                       r"wrote `x\[100\]`, outside its 100 elements"):
        lib.off_by_one(4, 64, x, 100)
    lib.off_by_one(4, 64, x, 99)
    np.testing.assert_array_equal(x.copy_to_host(), np.ones(100, np.float32))


def test_a_debug_library_checks_views_against_their_own_extent(checked_library) -> None:
    """A view's index is checked against the view, not only the array under it, in built
    libraries as in-process: `seg = x[0:4]; seg[4]` is inside `x` and still an error."""
    _, lib_dir = checked_library
    lib = kiln.load_library(lib_dir)
    x = lib.empty(100, np.float32)
    with pytest.raises(kiln.IndexOutOfBoundsError,
                       match=r"head_of.*wrote `seg\[4\]`, outside its 4 elements"):
        lib.head_of(1, 64, x, 5)
    lib.head_of(1, 64, x, 4)
    np.testing.assert_array_equal(x.copy_to_host()[:4], np.full(4, 2, np.float32))


def test_a_debug_library_checks_the_tail_of_wide_stores(checked_library) -> None:
    """`kiln.store(x, 2, f32x4(...))` into 10 elements writes x[8:12]: refused at x[10],
    the first element outside, as in-process, instead of writing past the end."""
    _, lib_dir = checked_library
    lib = kiln.load_library(lib_dir)
    x = lib.to_device(np.zeros(10, np.float32))
    with pytest.raises(kiln.IndexOutOfBoundsError,
                       match=r"wide_tail.*wrote `x\[10\]`, outside its 10 elements"):
        lib.wide_tail(1, 1, x, 2)
    lib.wide_tail(1, 1, x, 1)
    np.testing.assert_array_equal(x.copy_to_host()[4:], [1, 2, 3, 4, 0, 0])


def test_a_non_debug_build_has_no_checks(tmp_path) -> None:
    """Only debug kernels pay for the checks: the plain ones' entries take no status."""
    lib = tmp_path / "lib"
    build(CHECKED, lib, "--target", "cpu", "--kernel", "fill", name="plain")
    header = (lib / "plain.h").read_text()
    assert "indices are checked" not in header and "kiln_status" not in header


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


WARP_KERNEL = '''
import kiln
from kiln import f32


@kiln.kernel
def lanes(x: f32[:], out: f32[:]):
    i = kiln.global_id(0)
    out[i] = kiln.shuffle_down(x[i], 1) * f32(kiln.warp_size) + f32(kiln.lane_id)
'''


@pytest.mark.skipif(not backend_entry("cpu").available, reason="no C compiler with OpenMP")
def test_a_cpu_library_runs_warp_operations_as_in_process_launches_do(tmp_path) -> None:
    """cpu threads run as loops, so their warps have one thread: the build lowers warp
    operations as in-process cpu compiles do (it refused them), with the same results."""
    module = tmp_path / "warps.py"
    module.write_text(WARP_KERNEL)
    build(module, tmp_path / "lib", "--target", "cpu", name="warps")
    x = np.arange(128, dtype=np.float32)
    out = np.zeros(128, np.float32)
    kiln.load_library(tmp_path / "lib").lanes(2, 64, x, out)
    np.testing.assert_array_equal(out, x)  # one lane: shuffle_down keeps its own value
    spec = importlib.util.spec_from_file_location("warps", module)
    assert spec is not None and spec.loader is not None
    warps = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(warps)
    in_process = np.zeros(128, np.float32)
    kiln.launch(warps.lanes, 2, 64, (x, in_process), device="cpu")
    np.testing.assert_array_equal(out, in_process)


@pytest.mark.skipif(bool(nvrtc_missing()), reason=nvrtc_missing())
def test_cuda_library_of_checked_kernels_builds_without_a_gpu(tmp_path) -> None:
    """The cuda library of the checked kernels (a debug one, a fixed block shape) builds
    with NVRTC and the C API checks program compiles against it; with a GPU the
    parametrised tests above run it, without one it stops at the context, saying why."""
    lib = tmp_path / "lib"
    build(CHECKED, lib, "--target", "cuda", "--arch", "sm_90", "--block", "staged=64",
          name="chk")
    header = (lib / "chk.h").read_text()
    assert "CHK_ERROR_KERNEL = 5" in header and " *   block: 64x1x1 */" in header
    assert "chk_copy_to_host(chk_context *ctx, void *host_dst, size_t host_bytes," in header
    assert "chk_register(chk_context *ctx, void *ptr, size_t nbytes);" in header
    assert "cuPointerGetAttribute" in header
    for client in ("api_checks_client.c", "registered_memory_client.c"):
        exe = tmp_path / client.removesuffix(".c")
        compile_program(HERE / client, lib, "chk", exe)
        if backend_entry("cuda").available:
            continue
        result = subprocess.run([str(exe), "device"], capture_output=True, text=True,
                                timeout=60)
        assert result.returncode == 1
        assert "chk_context_create failed (2): no NVIDIA driver" in result.stderr


def bundled_opencl_loader(monkeypatch) -> str:
    """pyopencl's own ICD loader, as `opencl_loader()` finds it without a system one."""
    from kiln.aot import loader

    real = ctypes.CDLL

    def no_system_loader(name, *args, **kwargs):
        if name == "libOpenCL.so.1":
            raise OSError("hidden by the test")
        return real(name, *args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(loader.ctypes, "CDLL", no_system_loader)
        found = loader.opencl_loader()
    if found is None:
        pytest.skip("pyopencl's wheel bundles no ICD loader here")
    return found


@pytest.mark.skipif(bool(opencl_loader_missing()), reason=opencl_loader_missing())
def test_an_opencl_library_takes_the_loader_kiln_opencl_loader_names(tmp_path,
                                                                      monkeypatch) -> None:
    """Without a system libOpenCL.so.1 (pip-only PoCL), KILN_OPENCL_LOADER points the
    library at another loader: pyopencl's bundled one runs the C API checks here; a path
    that does not load is reported by context creation. `kiln.aot.opencl_loader()` names
    the bundled one when the system has none."""
    bundled = bundled_opencl_loader(monkeypatch)
    assert "pyopencl" in bundled
    lib = tmp_path / "lib"
    build(CHECKED, lib, "--target", "opencl", "--block", "staged=64", name="chk")
    exe = tmp_path / "client"
    compile_program(HERE / "api_checks_client.c", lib, "chk", exe)
    env = {**os.environ, "KILN_OPENCL_LOADER": bundled}
    result = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    check_api_output(result.stdout, "opencl")
    env["KILN_OPENCL_LOADER"] = str(tmp_path / "no-such-loader.so")
    result = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 1
    assert (f"chk_context_create failed (2): KILN_OPENCL_LOADER={tmp_path}/no-such-loader.so "
            "cannot be loaded") in result.stderr


def test_a_library_of_another_manifest_format_is_refused(checked_library, tmp_path) -> None:
    """A library built by a kiln with another C interface (format 1: copy_to_host without
    the host buffer's size) is refused by name, not called with the wrong arguments."""
    _, lib_dir = checked_library
    old = tmp_path / "old"
    shutil.copytree(lib_dir, old)
    manifest = json.loads((old / "chk.json").read_text())
    assert manifest["format"] == 2
    (old / "chk.json").write_text(json.dumps({**manifest, "format": 1}))
    with pytest.raises(ValueError, match="has manifest format 1; this kiln loads format 2: "
                       "rebuild the library"):
        kiln.load_library(old)
    (old / "chk.json").write_text("{not json")
    with pytest.raises(ValueError, match="is not the manifest of a kiln library"):
        kiln.load_library(old)
