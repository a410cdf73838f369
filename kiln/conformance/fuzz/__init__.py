"""Fuzzing: random well-formed kernels run on every backend and compared with each other
and with a Python reference (`kernels`, `generate`, `differential`), and mutations of
valid kernels that must fail with a located kiln error or work (`mutate`).
`tests/conformance/test_fuzz.py` runs a bounded number in the suite; `scripts/fuzz.py` runs
more."""
