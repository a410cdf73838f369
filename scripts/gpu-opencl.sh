#!/usr/bin/env bash
# kiln's opencl backend on the GPU machine: NVIDIA's OpenCL driver and PoCL.
#
# Registers NVIDIA's OpenCL driver (present there, but with no ICD file), installs pyopencl
# (and PoCL, PyPI's pocl-binary-distribution) from carried wheels, runs `kiln check` on every
# OpenCL device and tests/backends/opencl/test_backend.py on the GPU, then benchmarks
# NVIDIA OpenCL against the cuda backend. The summary goes to $OUT/gpu-opencl-output.md (committed as
# benchmarks/gpu-opencl-output.md).
#
# Wheels (made on the development machine, for the device's Python 3.12):
#   .whl-opencl/  pyopencl, pytools, siphash24, platformdirs   (about 1 MiB)
#   .whl-pocl/    pocl-binary-distribution                     (about 56 MiB, optional)
# Run through the device tool with carry [".whl-opencl", ".whl-pocl"]:
#   bash scripts/gpu-opencl.sh
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
summary="$OUT/gpu-opencl-output.md"
export PYTHONUNBUFFERED=1 COLUMNS=110

wheels=(.whl-opencl/*.whl)
[ -d .whl-pocl ] && wheels+=(.whl-pocl/*.whl)
"$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site "${wheels[@]}" || exit 1
export PYTHONPATH="/tmp/site:$PWD"

icd=$(mktemp -d)
cp /etc/OpenCL/vendors/*.icd "$icd"/ 2>/dev/null
echo libnvidia-opencl.so.1 > "$icd/nvidia.icd"
export OCL_ICD_VENDORS=$icd

opencl_devices() {  # names of the OpenCL devices of one kind (GPU, CPU) or all
    "$PY" -c "import kiln, sys
kind = sys.argv[1] if len(sys.argv) > 1 else ''
print(' '.join(d.name for d in kiln.devices() if d.backend.name == 'opencl'
               and kind in ('', d.capabilities.kind.name)))" "$@"
}

status=0
{
    echo "# kiln's opencl backend on the GPU machine"
    echo
    echo "Run by \`scripts/gpu-opencl.sh\` on $(date -u '+%Y-%m-%d %H:%M UTC');" \
         "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1)," \
         "Python $("$PY" -c 'import platform; print(platform.python_version())')."
    echo
    echo '## kiln info'
    echo '```'
    "$PY" -m kiln info 2>&1
    echo '```'
} > "$summary"

for dev in $(opencl_devices); do
    log="$OUT/check-${dev/:/-}.log"
    "$PY" -m kiln check "$dev" > "$log" 2>&1
    rc=$?
    [ $rc -ne 0 ] && status=1
    {
        echo
        echo "## kiln check $dev (exit status $rc)"
        echo '```'
        "$PY" -c "import kiln; print(kiln.device('$dev').handle.identity)"
        grep -E "failed|error|Error|skipped" "$log" | grep -v "^│.*│ passed │" | head -40
        tail -1 "$log"
        if [ $rc -ge 128 ]; then  # the driver killed the process: find the cases that do it
            echo "cases that end the process when run alone:"
            "$PY" -c "from kiln.conformance import all_cases
print('\n'.join(c.name for c in all_cases()))" | xargs -P 8 -I{} sh -c \
                "'$PY' -m kiln check '$dev' -k '{}' >/dev/null 2>&1; [ \$? -ge 128 ] && echo '  {}'"
        fi
        echo '```'
    } >> "$summary"
done

"$PY" -m pytest -q -p no:cacheprovider tests/backends/opencl/test_backend.py \
    > "$OUT/pytest-opencl.log" 2>&1 || status=1
{
    echo
    echo "## pytest tests/backends/opencl/test_backend.py (on the best OpenCL device, the GPU)"
    echo '```'
    grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/pytest-opencl.log" | tail -15
    echo '```'
} >> "$summary"

gpus=$(opencl_devices GPU)
has_cuda=$("$PY" -c "import kiln; print(any(e.name == 'cuda' and e.available
                                           for e in kiln.backends()))")
[ "$has_cuda" = True ] && gpus="$gpus cuda"
{
    echo
    echo "## Benchmarks: NVIDIA OpenCL vs the cuda backend"
    echo
} >> "$summary"
if [ -n "$gpus" ]; then
    # shellcheck disable=SC2086 # one word per device
    "$PY" benchmarks/bench_opencl.py --devices $gpus --n $((1 << 24)) --mm 2048 \
        --markdown "$summary" 2>&1 | tail -5 || status=1
fi
cat "$summary"
exit $status
