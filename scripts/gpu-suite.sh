#!/usr/bin/env bash
# The whole GPU suite of the cuda backend, in one run on a machine with an NVIDIA GPU:
# the cuda tests (codegen, GPU, CuPy/PyTorch interop), `kiln check cuda`, compute-sanitizer
# memcheck and racecheck over the end-to-end kernels, and the benchmarks.
#
#   scripts/gpu-suite.sh [--quick]      # logs and results under $OUT (default ./gpu-out)
#
# Needs python3 with numpy, rich, cuda-bindings, cuda-core and NVRTC (cupy, torch and
# triton for the interop tests and the peers in the benchmarks). kiln runs from this
# checkout (PYTHONPATH), with an empty compile cache. Prints a summary last.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
KILN_CACHE_DIR=$(mktemp -d)
export KILN_CACHE_DIR
PY=${PYTHON:-python3}
QUICK=${1:-}
SUMMARY=()

step() {  # step NAME TIMEOUT COMMAND...: run, log to $OUT/NAME.log, record the status
    local name=$1 limit=$2
    shift 2
    echo "== $name"
    local start=$SECONDS
    timeout "$limit" "$@" 2>&1 | tee "$OUT/$name.log"
    local status=${PIPESTATUS[0]}
    SUMMARY+=("$(printf '%-12s %s (%ss)' "$name" "$([ "$status" = 0 ] && echo ok || echo "FAILED ($status)")" $((SECONDS - start)))")
}

echo "== environment"
{
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    $PY --version
    $PY -m pip list 2>/dev/null | grep -iE '^(cuda-|nvidia-cuda-nvrtc|cupy|torch |triton|numpy )'
    command -v compute-sanitizer
} 2>&1 | tee "$OUT/environment.log"

E2E="vector_add,reduce,matmul,transpose,stencil,mma_bf16"
step pytest 300 $PY -m pytest -q -ra -p no:cacheprovider tests/backends/cuda/test_dialect.py \
    tests/backends/cuda/test_backend.py tests/backends/cuda/test_interop.py \
    tests/codegen/test_vectors.py tests/ir/passes/test_matrix.py
# kiln build --target cuda: a C program against the built library, compared with NumPy
step aot 240 $PY -m pytest -q -ra -p no:cacheprovider tests/aot \
    tests/backends/cuda/test_library.py -k cuda
step check 300 $PY -m kiln check cuda
step memcheck 300 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 20 \
    $PY -m kiln check cuda -k "$E2E"
step racecheck 300 compute-sanitizer --tool racecheck --error-exitcode 9 --print-limit 20 \
    $PY -m kiln check cuda -k "$E2E"
step bench 480 $PY benchmarks/bench_cuda.py $QUICK --json "$OUT/bench.json" \
    --markdown "$OUT/bench.md"
step launch 120 $PY benchmarks/launch_steps.py

echo "== summary"
printf '%s\n' "${SUMMARY[@]}" | tee "$OUT/summary.log"
grep -hE "passed|failed|error" "$OUT/pytest.log" | tail -n 1
grep -hE "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/memcheck.log" "$OUT/racecheck.log"
