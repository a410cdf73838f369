#!/usr/bin/env python3
"""A longer fuzz run than the suite's: random kernels compared on every available backend
(and with the Python reference), and mutants that must fail with located kiln errors.

    ./run python scripts/fuzz.py --seed 0 --kernels 2000 --mutants 5000
    .venv/bin/python scripts/fuzz.py --backends interp,cpu,opencl --kernels 200

Prints every problem with its seed (replay one with --seed N --kernels 1), then the counts;
exits 1 when anything was found. Record the seed and counts of long runs in
docs/testing.md.
"""

from __future__ import annotations

import argparse
import random
import sys
import time

import kiln
from kiln.conformance.fuzz.differential import run
from kiln.conformance.fuzz.kernels import build, scratch_directory
from kiln.conformance.fuzz.mutate import check, mutate


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
    parser.add_argument("--kernels", type=int, default=100, help="random kernels to compare")
    parser.add_argument("--mutants", type=int, default=300, help="mutants to compile and run")
    parser.add_argument("--backends", default=None,
                        help="comma-separated (default: every available one)")
    parser.add_argument("--compile-mutants-on", default="",
                        help="backends to compile mutants for too (comma-separated)")
    args = parser.parse_args()
    backends = (args.backends.split(",") if args.backends else
                [b.name for b in kiln.backends() if b.available])
    directory = scratch_directory()
    problems = 0
    start = time.monotonic()
    for seed in range(args.seed, args.seed + args.kernels):
        try:
            found = [str(m) for m in run(build(seed), backends, directory)]
        except Exception as exc:  # noqa: BLE001 - report and go on
            found = [f"seed {seed}: {type(exc).__name__}: {exc}"]
        for line in found:
            print(line, flush=True)
        problems += bool(found)
        done = seed - args.seed + 1
        if done % 50 == 0:
            print(f"... {done} kernels, {problems} problems, "
                  f"{time.monotonic() - start:.0f} s", flush=True)
    compile_on = [b for b in args.compile_mutants_on.split(",") if b]
    for k in range(args.mutants):
        seed = args.seed + k
        kernel = build(args.seed + k // 10)  # ten mutants of each kernel
        mutant = mutate(kernel.source, random.Random(seed))
        problem = check(mutant, kernel, directory, compile_on)
        if problem is not None:
            problems += 1
            print(f"mutant {seed}: {mutant.description}: {problem}", flush=True)
        if (k + 1) % 100 == 0:
            print(f"... {k + 1} mutants, {problems} problems, "
                  f"{time.monotonic() - start:.0f} s", flush=True)
    print(f"seed {args.seed}: {args.kernels} kernels on {', '.join(backends)}, "
          f"{args.mutants} mutants (compiled on {', '.join(compile_on) or 'interp only'}): "
          f"{problems} problems, {time.monotonic() - start:.0f} s")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
