"""Fuzzing in the suite: random well-formed kernels agree on every available backend and
with the Python reference; mutations of them fail with located kiln errors or work.

Each test runs fixed seeds (hypothesis's explicit examples) and replays the failures kept
in `tests/fuzz-examples` (hypothesis's example database: commit what appears there);
`KILN_FUZZ_EXAMPLES=200` adds that many random seeds. Longer runs: `scripts/fuzz.py`
(docs/fuzzing.md). Every bug found is also a named regression test elsewhere.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from typing import Any, TypeVar

import pytest

from kiln.conformance.fuzz.differential import run
from kiln.conformance.fuzz.kernels import build, scratch_directory
from kiln.conformance.fuzz.mutate import check, mutate
from tests.helpers import TESTS, backend_entry

F = TypeVar("F", bound=Callable[..., Any])

hypothesis = pytest.importorskip("hypothesis", reason="hypothesis is not installed (test extra)")
from hypothesis import Phase, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.database import DirectoryBasedExampleDatabase  # noqa: E402

DATABASE = DirectoryBasedExampleDatabase(TESTS / "fuzz-examples")
EXPLORE = int(os.environ.get("KILN_FUZZ_EXAMPLES", "0"))
"""Random examples to add to the fixed ones (0 in CI); their failures go to DATABASE."""
BACKENDS = [name for name in ("interp", "cpu", "opencl", "cuda")
            if backend_entry(name).available]
DIRECTORY = scratch_directory()


def fuzzed(fixed: range, regressions: tuple[int, ...] = ()) -> Callable[[F], F]:
    """A test over `seed`: the fixed seeds, past failures kept in the database, and (with
    KILN_FUZZ_EXAMPLES=n) n random ones."""

    def decorate(test: F) -> F:
        for seed in (*fixed, *regressions):
            test = example(seed=seed)(test)
        phases = (Phase.explicit, Phase.reuse) + ((Phase.generate, Phase.shrink)
                                                  if EXPLORE else ())
        return settings(max_examples=max(EXPLORE, 1), deadline=None, database=DATABASE,
                        phases=phases)(given(seed=st.integers(0, 2**31 - 1))(test))

    return decorate


@fuzzed(range(1), regressions=(1, 1002))  # 1, 1002: bugs of the reference, kept
def test_random_kernels_agree_everywhere(seed: int) -> None:
    mismatches = run(build(seed), BACKENDS, DIRECTORY)
    assert not mismatches, "\n".join(map(str, mismatches))


@fuzzed(range(15))
def test_mutants_fail_with_located_kiln_errors(seed: int) -> None:
    kernel = build(seed % 50)
    mutant = mutate(kernel.source, random.Random(seed))
    problem = check(mutant, kernel, DIRECTORY, [], seconds=60.0, run_seconds=None)
    assert problem is None, f"{mutant.description}: {problem}\n{mutant.source}"


@pytest.mark.skipif(len(BACKENDS) < 2, reason="only the interp backend is available")
@fuzzed(range(1000, 1001))
def test_mutants_compile_cleanly_on_the_other_backends(seed: int) -> None:
    kernel = build(seed % 50)
    mutant = mutate(kernel.source, random.Random(seed))
    problem = check(mutant, kernel, DIRECTORY, BACKENDS[1:], seconds=300.0, run_seconds=None)
    assert problem is None, f"{mutant.description}: {problem}\n{mutant.source}"


nvrtc = pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-bindings is not installed")


@fuzzed(range(2000, 2001))
def test_random_kernels_compile_to_ptx(seed: int) -> None:
    from kiln.builtin_backends.cuda import backend as cuda
    from kiln.builtin_backends.cuda import nvrtc as kiln_nvrtc

    fn = build(seed).load(DIRECTORY)
    program = fn.program(fn._types(()))
    for stage in cuda.pipeline(None):
        program = stage(program)
    source = cuda.compiler.generate_source(program)
    ptx = kiln_nvrtc.compile_source(source, "fuzz", kiln_nvrtc.options_for("sm_90", "ptx"),
                                    "ptx")
    assert b".entry" in ptx
