"""kiln.autotune: the fastest candidate per key and device, its cache on disk (reused by
other processes, never trusted blindly) and the errors of a wrong declaration or launch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import kiln
from kiln import f32, i32, settings
from kiln.examples import block_sum_tuned, matmul_tiled_tuned
from kiln.execution import autotune as autotune_module
from kiln.framework.cache import read_entry, write_entry
from tests.helpers import REPO, requires_backend, run_python

SMALL, LARGE = 64, 4096


@kiln.kernel
def doubled(x: f32[:], y: f32[:], n: i32, SLOW_SMALL: kiln.constexpr):
    """y = 2 x, repeated 300 times by the candidate that is slow at this size."""
    i = kiln.global_id(0)
    if i < n:
        reps = 1
        if (n < 1000) == (SLOW_SMALL == 1):
            reps = 300
        acc = f32(0)
        for _ in range(reps):
            acc += x[i]
        y[i] = 2.0 * acc / f32(reps)


CONFIGS = [kiln.Config({"SLOW_SMALL": 1}, block=64), kiln.Config({"SLOW_SMALL": 0}, block=64)]


def tuned() -> kiln.Autotuned:
    """A fresh autotuned `doubled` (its own memory; the disk cache is shared)."""
    return kiln.autotune(CONFIGS, key=["n"])(doubled)


def run(k: kiln.Autotuned, n: int, device: kiln.Device) -> None:
    x = np.arange(n, dtype=np.float32)
    y = np.zeros(n, np.float32)
    kiln.launch(k, grid=lambda cfg: (n + cfg.block - 1) // cfg.block, args=(x, y, n),
                device=device)
    np.testing.assert_allclose(y, 2 * x, rtol=1e-5)


def chosen(k: kiln.Autotuned) -> list[int]:
    return sorted(c.config["SLOW_SMALL"] for c in k._choices.values())


def entries(root: Path) -> list[Path]:
    return sorted((root / "autotune").glob("*.json"))


@pytest.fixture(autouse=True)
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("KILN_AUTOTUNE", raising=False)
    return tmp_path


def test_the_fastest_candidate_differs_by_size(interp: kiln.Device, cache_dir: Path) -> None:
    k = tuned()
    run(k, SMALL, interp)
    assert k._choices[next(iter(k._choices))].config["SLOW_SMALL"] == 0
    run(k, LARGE, interp)
    assert chosen(k) == [0, 1] and k.tunings == 2
    run(k, LARGE, interp)  # a known key: no timing
    assert k.tunings == 2 and len(entries(cache_dir)) == 2


def test_another_process_reuses_the_choice_without_timing(cache_dir: Path) -> None:
    script = cache_dir / "tune_me.py"  # one file: the kernel's fingerprint is its source
    script.write_text(f"""
import sys
sys.path.insert(0, {str(REPO)!r})
import kiln
from tests.execution.test_autotune import run, tuned
k = tuned()
run(k, {SMALL}, kiln.device("interp"))
print(k.tunings, k.disk_hits, list(k._choices.values())[0].config["SLOW_SMALL"])
""")
    code = f"import runpy; runpy.run_path({str(script)!r})"
    first = run_python(code, env={"KILN_CACHE_DIR": str(cache_dir)})
    assert first.returncode == 0, first.stderr
    assert first.stdout.split() == ["1", "0", "0"]
    second = run_python(code, env={"KILN_CACHE_DIR": str(cache_dir)})
    assert second.returncode == 0, second.stderr
    assert second.stdout.split() == ["0", "1", "0"]


def test_concurrent_processes_write_whole_entries(cache_dir: Path) -> None:
    code = f"""
import sys
sys.path.insert(0, {str(REPO)!r})
import kiln
from tests.execution.test_autotune import run, tuned
run(tuned(), {SMALL}, kiln.device("interp"))
"""
    env = {**os.environ, "KILN_CACHE_DIR": str(cache_dir)}
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, cwd=REPO,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    for p in procs:
        assert p.wait(timeout=120) == 0, p.stderr.read() if p.stderr else ""
    (entry,) = entries(cache_dir)
    k = tuned()
    run(k, SMALL, kiln.device("interp"))
    assert (k.tunings, k.disk_hits) == (0, 1) and chosen(k) == [0]
    assert entry.exists()


def test_threads_launching_one_key_tune_it_once(interp: kiln.Device) -> None:
    k = tuned()
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda _: run(k, SMALL, interp), range(4)))
    assert k.tunings == 1 and chosen(k) == [0]


@pytest.mark.parametrize("garbage", [b"not a cache entry", b"{" * 100])
def test_a_corrupt_entry_is_timed_again_and_replaced(interp: kiln.Device, cache_dir: Path,
                                                     garbage: bytes) -> None:
    run(tuned(), SMALL, interp)
    (entry,) = entries(cache_dir)
    entry.write_bytes(garbage)
    k = tuned()
    run(k, SMALL, interp)
    assert (k.tunings, k.disk_hits) == (1, 0) and chosen(k) == [0]
    again = tuned()
    run(again, SMALL, interp)
    assert (again.tunings, again.disk_hits) == (0, 1)


@pytest.mark.parametrize("change", [
    {"kernel": "other"}, {"choice": 7}, {"choice": "0"}, {"key": "n=5"}, {"format": 0},
    {"config": {"params": {"SLOW_SMALL": "2"}, "block": "64"}}, {"device": "cuda:0"},
])
def test_a_foreign_entry_is_never_trusted(interp: kiln.Device, cache_dir: Path,
                                          change: dict[str, object]) -> None:
    run(tuned(), SMALL, interp)
    (entry,) = entries(cache_dir)
    data = json.loads(read_entry(entry) or b"")
    data.update(change, choice=change.get("choice", 0))
    write_entry(entry, json.dumps(data).encode())  # a valid footer around a wrong choice
    k = tuned()
    run(k, SMALL, interp)
    assert (k.tunings, k.disk_hits) == (1, 0) and chosen(k) == [0]
    assert json.loads(read_entry(entry) or b"")["choice"] == 1


def test_an_entry_others_can_write_is_not_trusted(interp: kiln.Device, cache_dir: Path) -> None:
    run(tuned(), SMALL, interp)
    (entry,) = entries(cache_dir)
    entry.chmod(0o666)
    k = tuned()
    run(k, SMALL, interp)
    assert k.tunings == 1


def test_a_symbolic_link_entry_is_replaced_not_followed(interp: kiln.Device,
                                                        cache_dir: Path) -> None:
    run(tuned(), SMALL, interp)
    (entry,) = entries(cache_dir)
    target = cache_dir / "elsewhere.json"
    entry.rename(target)
    entry.symlink_to(target)
    before = target.read_bytes()
    k = tuned()
    run(k, SMALL, interp)
    assert k.tunings == 1 and not entry.is_symlink()  # timed again, the link replaced
    assert target.read_bytes() == before  # never written through


def test_each_device_has_its_own_choice(interp: kiln.Device, other_device: kiln.Device,
                                        cache_dir: Path) -> None:
    k = tuned()
    run(k, SMALL, interp)
    run(k, SMALL, other_device)
    assert k.tunings == 2 and len(entries(cache_dir)) == 2


def test_arrays_key_by_shape_and_dtype(interp: kiln.Device) -> None:
    @kiln.kernel
    def fill(y: f32[:], V: kiln.constexpr):
        i = kiln.global_id(0)
        if i < y.shape[0]:
            y[i] = f32(V)

    k = kiln.autotune([kiln.Config({"V": 3}, block=32), kiln.Config({"V": 3.0}, block=64)],
                      key=["y"])(fill)
    for n in (10, 100, 10):
        y = np.zeros(n, np.float32)
        k[lambda cfg: (n + cfg.block - 1) // cfg.block](y)  # noqa: B023
        assert (y == 3).all()
    assert k.tunings == 2
    assert sorted(key for _, key in k._choices) == ["y=float32[100]", "y=float32[10]"]


def test_kiln_autotune_0_takes_the_first_candidate_untimed(interp: kiln.Device,
                                                           monkeypatch: pytest.MonkeyPatch,
                                                           cache_dir: Path) -> None:
    monkeypatch.setenv("KILN_AUTOTUNE", "0")
    assert not settings.autotune()
    k = tuned()
    run(k, SMALL, interp)  # the first candidate is the slow one here: still correct
    assert k.tunings == 0 and entries(cache_dir) == []


def test_failing_candidates_are_skipped_and_reported(interp: kiln.Device,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    k = kiln.autotune([kiln.Config({"SLOW_SMALL": 0}, block=1 << 17), *CONFIGS],
                      key=["n"])(doubled)
    run(k, SMALL, interp)
    assert chosen(k) == [0]
    err = capsys.readouterr().err
    assert "skipped SLOW_SMALL=0, block=131072 (LaunchError" in err


def test_a_candidate_that_does_not_compile_is_skipped(interp: kiln.Device,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    broken = kiln.Config({"THREADS": "many"}, block=64)
    k = kiln.autotune([broken, kiln.Config({"THREADS": 64}, block=64)],
                      key=["n"])(block_sum_tuned.kernel)
    x = np.ones(300, np.float32)
    out = np.zeros(1, np.float32)
    kiln.launch(k, grid=2, args=(x, out, 300), device=interp)
    assert out[0] == 300
    assert "skipped THREADS='many', block=64 (" in capsys.readouterr().err


def test_numpy_scalars_key_as_python_numbers(interp: kiln.Device) -> None:
    k = tuned()
    run(k, SMALL, interp)
    x = np.zeros(SMALL, np.float32)
    kiln.launch(k, grid=1, args=(x, x.copy(), np.int32(SMALL)), device=interp)
    assert k.tunings == 1


def test_a_long_tuning_prints_one_progress_line(interp: kiln.Device,
                                                capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    run(tuned(), SMALL, interp)
    assert capsys.readouterr().err == ""  # quick, nothing skipped: silent
    monkeypatch.setattr(autotune_module, "PROGRESS_AFTER_S", 0.0)
    run(tuned(), LARGE, interp)
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"kiln: autotuned doubled for n={LARGE} on interp:0 in ")
    assert ": SLOW_SMALL=1, block=64 (" in line and line.endswith("ms of 2 candidates)")


def test_all_candidates_failing_is_an_error(interp: kiln.Device) -> None:
    k = kiln.autotune([kiln.Config({"SLOW_SMALL": 0}, block=1 << 17)], key=["n"])(doubled)
    with pytest.raises(kiln.AutotuneError, match="no candidate could run: SLOW_SMALL=0"):
        run(k, SMALL, interp)


@pytest.mark.parametrize(("configs", "key", "message"), [
    ([], ["n"], "configs= is empty"),
    ("abc", ["n"], "takes a list of kiln.Config"),
    ([{"SLOW_SMALL": 0}], ["n"], "is not a kiln.Config"),
    ([kiln.Config({"TILE": 4})], ["n"], "sets TILE, which doubled has no parameter"),
    ([kiln.Config({"n": 4})], [], "sets n, which is not a kiln.constexpr parameter"),
    ([kiln.Config({"SLOW_SMALL": 0}), kiln.Config({})], ["n"], "must set the same"),
    ([CONFIGS[0], CONFIGS[0]], ["n"], "two candidates are the same"),
    (CONFIGS, ["m"], "key names m, not a parameter"),
    (CONFIGS, ["SLOW_SMALL"], "key names SLOW_SMALL, not a parameter"),
    (CONFIGS, "n", "key= takes a list of parameter names"),
])
def test_wrong_declarations(configs: object, key: object, message: str) -> None:
    with pytest.raises(kiln.AutotuneError, match=message):
        kiln.autotune(configs, key=key)(doubled)  # type: ignore[arg-type]


def test_wrong_launches(interp: kiln.Device) -> None:
    k = tuned()
    x = np.zeros(4, np.float32)
    with pytest.raises(kiln.AutotuneError, match=r"takes 3 arguments \(x, y, n; the "):
        kiln.launch(k, grid=1, args=(x, x, 4, 0), device=interp)
    with pytest.raises(kiln.AutotuneError, match="not dim="):
        kiln.launch(k, dim=4, args=(x, x, 4), device=interp)
    with pytest.raises(kiln.AutotuneError, match="decorates a @kiln.kernel"):
        kiln.autotune(CONFIGS)(lambda: None)  # type: ignore[arg-type]
    with pytest.raises(kiln.AutotuneError, match="no 'TILE'"):
        CONFIGS[0]["TILE"]
    with pytest.raises(TypeError, match="launch an autotuned kernel"):
        k(x, x, 4)
    no_block = kiln.autotune([kiln.Config({"SLOW_SMALL": 0})], key=["n"])(doubled)
    with pytest.raises(kiln.AutotuneError, match="no candidate could run.*give the grid"):
        kiln.launch(no_block, grid=1, args=(x, x, 4), device=interp)
    kiln.launch(no_block, grid=1, block=4, args=(x, x, 4), device=interp)


EXAMPLE_BACKENDS = [pytest.param(name, marks=requires_backend(name, f"no {name} backend here"))
                    for name in ("interp", "cpu", "opencl", "cuda")]


@pytest.mark.parametrize("backend", EXAMPLE_BACKENDS)
def test_the_autotuned_examples(backend: str) -> None:
    dev = kiln.device(backend)
    n = 5000
    x = np.random.default_rng(1).random(n, dtype=np.float32)
    out = np.zeros(1, np.float32)
    block_sum_tuned[lambda cfg: min((n + cfg.block - 1) // cfg.block, 16), None,
                    dev.default_stream](x, out, n)
    dev.synchronize()
    np.testing.assert_allclose(out[0], x.sum(dtype=np.float64), rtol=1e-4)  # summed once
    a = np.random.default_rng(2).random((37, 29), dtype=np.float32)
    b = np.random.default_rng(3).random((29, 41), dtype=np.float32)
    c = np.zeros((37, 41), np.float32)
    kiln.launch(matmul_tiled_tuned, grid=lambda cfg: (-(-41 // cfg["T"]), -(-37 // cfg["T"])),
                args=(a, b, c), device=dev)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4)
