"""The `kiln` command line: each subcommand, and user errors exiting 2 without a traceback."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import pytest

import kiln
from kiln.cli import UsageError, main, parse_type
from kiln.examples import vector_add
from kiln.ir.types import ArrayType

# a user's kernel file: the SPEC's vector_add, and kernels for the cases below
KERNELS = f'''\
import kiln
from kiln import f32, i32


{inspect.getsource(vector_add.pyfunc)}

@kiln.kernel
def untyped(a, n):
    a[0] = n


@kiln.kernel
def broken(a: f32[:]):
    x: i32 = a[0]
    a[1] = x


@kiln.kernel
def tiled(a: f32[:], tile: kiln.constexpr):
    s = kiln.shared(f32, tile)
    s[0] = a[0]
    a[1] = s[0]


NOT_A_KERNEL = 3
'''


@pytest.fixture
def kernels_file(tmp_path: Path) -> Path:
    path = tmp_path / "user_kernels.py"
    path.write_text(KERNELS)
    return path


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize(("text", "expected"), [
    ("f32", kiln.f32), ("int", kiln.i32), ("float64", kiln.f64), ("bool", kiln.bool_),
    ("f32[:]", ArrayType(kiln.f32, 1)), ("i64[:, :]", ArrayType(kiln.i64, 2)),
    ("u8[:,:,:]", ArrayType(kiln.u8, 3)), ("constexpr(16)", kiln.constexpr(16)),
])
def test_parse_type(text: str, expected: kiln.ScalarType) -> None:
    assert parse_type(text) == expected


@pytest.mark.parametrize("text", ["f33", "f32[]", "f32[1]", "numpy", "f32[:, 2]",
                                  "constexpr(x)"])
def test_parse_bad_type(text: str) -> None:
    with pytest.raises(UsageError, match=r"e.g. (f32|constexpr)"):
        parse_type(text)


def test_info_explains_every_backend(capsys) -> None:
    code, out, _ = run(capsys, "info")
    assert code == 0
    for entry in kiln.backends():
        assert entry.name in out
    assert "interp:0" in out and "max threads per block" in out


def test_compile_prints_ir_for_a_direct_backend(capsys, kernels_file: Path) -> None:
    code, out, _ = run(capsys, "compile", f"{kernels_file}:vector_add", "--backend", "interp")
    assert code == 0
    assert out.startswith("kernel vector_add(a: f32[:], b: f32[:], c: f32[:], n: i32):")


def test_compile_with_types(capsys, kernels_file: Path) -> None:
    code, out, _ = run(capsys, "compile", f"{kernels_file}:untyped", "-b", "interp",
                       "--types", "f64[:]", "i32")
    assert code == 0
    assert "kernel untyped(a: f64[:], n: i32)" in out and "f64(n)" in out


def test_compile_with_a_constexpr_value(capsys, kernels_file: Path) -> None:
    code, out, _ = run(capsys, "compile", f"{kernels_file}:tiled", "-b", "interp",
                       "--types", "f32[:]", "constexpr(8)")
    assert code == 0 and "var s: shared f32[8]" in out


def test_compile_prints_source_for_a_jit_backend(capsys, kernels_file: Path) -> None:
    jit = [e for e in kiln.backends()
           if e.available and e.backend.execution_model is kiln.backend.ExecutionModel.JIT]
    if not jit:
        pytest.skip("no JIT backend is available on this machine")
    code, out, _ = run(capsys, "compile", f"{kernels_file}:vector_add", "-b", jit[0].name)
    assert code == 0
    assert "vector_add" in out and "a[i] + b[i]" in out


@pytest.mark.parametrize(("target", "types", "fragment"), [
    ("{file}", [], "write FILE.py:KERNEL"),
    ("missing.py:k", [], "no such file"),
    ("{file}:nope", [], "'nope' is not defined; kernels there: broken, tiled, untyped, vector_add"),
    ("{file}:NOT_A_KERNEL", [], "a int, not a kernel"),
    ("{file}:untyped", [], "parameters a, n need a type"),
    ("{file}:tiled", [], "parameters tile need a type or a constexpr value"),
    ("{file}:vector_add", ["f32[:]"], "4 parameter(s), --types gave 1"),
    ("{file}:vector_add", ["f32[:]", "f32[:]", "f32[:]", "str"], "'str' is not a kiln type"),
])
def test_compile_usage_errors(capsys, kernels_file: Path, target: str, types: list[str],
                              fragment: str) -> None:
    argv = ["compile", target.format(file=kernels_file), "-b", "interp"]
    code, out, err = run(capsys, *argv, *(["--types", *types] if types else []))
    assert code == 2
    assert fragment in err and "Traceback" not in err
    assert err.startswith("error:")


def test_compile_kernel_error_points_at_the_line(capsys, kernels_file: Path) -> None:
    code, _, err = run(capsys, "compile", f"{kernels_file}:broken", "-b", "interp")
    assert code == 2
    line = KERNELS.splitlines().index("    x: i32 = a[0]") + 1
    assert f"{kernels_file}:{line}:14: type error: cannot assign a f32 value" in err
    assert "x: i32 = a[0]" in err and "^^^^" in err and "Traceback" not in err


def test_unknown_backend(capsys, kernels_file: Path) -> None:
    code, _, err = run(capsys, "compile", f"{kernels_file}:vector_add", "-b", "warp-drive")
    assert code == 2 and "no backend named 'warp-drive'" in err


def test_demo_on_interp(capsys) -> None:
    code, out, _ = run(capsys, "demo", "--device", "interp", "--repeat", "1")
    assert code == 0, out
    for name in ("vector_add", "block_sum", "matmul"):
        assert name in out
    assert out.count("OK") == 3 and "FAIL" not in out


def test_demo_on_unknown_device(capsys) -> None:
    code, _, err = run(capsys, "demo", "--device", "interp:9")
    assert code == 2 and "interp:9" in err


def test_check_runs_the_conformance_suite(capsys) -> None:
    code, out, _ = run(capsys, "check", "interp", "-k", "vector_add")
    assert code == 0
    assert "passed" in out and "failed" not in out


def test_check_unknown_backend(capsys) -> None:
    code, out, _ = run(capsys, "check", "warp-drive")
    assert code == 2 and "warp-drive" in out


def test_bench_unknown_backend(capsys) -> None:
    code, _, err = run(capsys, "bench", "--backend", "warp-drive")
    assert code == 2 and "no backend named 'warp-drive'" in err


def test_cache_info_and_clear(capsys, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    code, out, _ = run(capsys, "cache", "info")
    assert code == 0 and "total entries" in out
    code, out, _ = run(capsys, "cache", "clear")
    assert code == 0 and "removed 0 cache entries" in out


def test_python_dash_m_kiln() -> None:
    result = subprocess.run([sys.executable, "-m", "kiln", "--help"], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0
    for command in ("info", "compile", "demo", "check", "bench", "cache"):
        assert command in result.stdout
