#!/usr/bin/env python3
"""A longer run of the host API's state machine (tests/runtime/test_host_stateful.py)
than the suite's: random programs of allocations, views, copies, streams, events, launches, sharded
launches and threads on every available backend, checked against a NumPy model.

    .venv/bin/python scripts/host_fuzz.py --minutes 20
    .venv/bin/python scripts/host_fuzz.py --minutes 5 --backends interp,cpu --skip-known

Runs batches of `--examples` programs of up to `--steps` steps until `--minutes` pass;
prints each failure (hypothesis's falsifying program, with a @reproduce_failure blob),
then the counts of programs, rules run and refusals checked. Exits 1 when anything
failed. `--skip-known` looks past the defects the machine names (KNOWN_DEFECTS in the
test, all fixed), to hunt for others while a regression of one is mended. Record long
runs in docs/fuzzing.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=5.0, help="how long to run")
    parser.add_argument("--examples", type=int, default=20, help="programs per batch")
    parser.add_argument("--steps", type=int, default=60, help="most steps per program")
    parser.add_argument("--backends", default=None,
                        help="comma-separated (default: every available one)")
    parser.add_argument("--skip-known", action="store_true",
                        help="do not check the known defects (all fixed; to hunt past a regression)")
    parser.add_argument("--shrink", action="store_true", help="shrink failures (slow)")
    args = parser.parse_args()
    if args.skip_known:
        os.environ["KILN_SKIP_KNOWN_DEFECTS"] = "1"
    if args.backends:
        os.environ["KILN_HOST_FUZZ_BACKENDS"] = args.backends
    sys.path.insert(0, str(REPO))
    from tests.runtime import test_host_stateful as machine
    from hypothesis import HealthCheck, Phase, settings
    from hypothesis.stateful import run_state_machine_as_test

    phases = (Phase.generate, Phase.shrink) if args.shrink else (Phase.generate,)
    config = settings(max_examples=args.examples, stateful_step_count=args.steps,
                      deadline=None, database=None, phases=phases, print_blob=True,
                      suppress_health_check=list(HealthCheck))
    print(f"devices: {', '.join(d.name for d in machine.DEVICES)}; known defects "
          f"{'skipped' if args.skip_known else 'checked'}", flush=True)
    start, batches, failures = time.monotonic(), 0, 0
    while time.monotonic() - start < args.minutes * 60:
        batches += 1
        try:
            run_state_machine_as_test(machine.HostMachine, settings=config)
        except Exception as exc:  # report and go on
            failures += 1
            print(f"--- batch {batches}:", "".join(traceback.format_exception(exc)),
                  flush=True)
        counts = machine.COUNTS
        print(f"... {batches} batches, {counts['runs']} programs, "
              f"{sum(counts.values()) - counts['runs']} checks, {failures} failed batches, "
              f"{time.monotonic() - start:.0f} s", flush=True)
    print("rules run:")
    for name, count in sorted(machine.COUNTS.items()):
        print(f"  {name}: {count}")
    print(f"{batches} batches of up to {args.examples} programs of up to {args.steps} steps, "
          f"{machine.COUNTS['runs']} programs: {failures} failed batches, "
          f"{time.monotonic() - start:.0f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
