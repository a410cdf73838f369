#!/usr/bin/env bash
# The webgpu plugin on the GPU machine's Vulkan driver: its tests, `kiln check webgpu` and
# benchmarks/bench_webgpu.py (beside the cuda backend and a hand-written WGSL kernel).
#
# The GPU machine has NVIDIA's Vulkan driver (its ICD file is there) but no Vulkan loader,
# and no network. Made once on the development machine, in the repository's root:
#   .gl/    Debian's libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2 (.deb):
#           o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
#           mkdir -p .gl /tmp/amd64/partial; apt-get $o update
#           (cd .gl && apt-get $o download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
#   .whl/   wheels for the machine's Python 3.12: wgpu cffi pycparser rendercanvas sniffio
#           pytest hypothesis rich platformdirs ml_dtypes (pip download --only-binary=:all:
#           --python-version 3.12 --platform manylinux_2_28_x86_64 -d .whl ...)
# Run through the device tool with carry [".gl", ".whl"]:  bash scripts/webgpu-gpu.sh
# The summary goes to $OUT/webgpu-gpu-output.md (committed as benchmarks/webgpu-gpu-output.md).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT=${OUT:-$(mktemp -d)}
summary="$OUT/webgpu-gpu-output.md"
export PYTHONUNBUFFERED=1 COLUMNS=110 KILN_CACHE_DIR=$(mktemp -d)

for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
python -m pip install -q --break-system-packages --no-index --find-links .whl wgpu cffi \
    pycparser rendercanvas sniffio pytest hypothesis rich platformdirs ml_dtypes 2>&1 | tail -2
python -m pip install -q --break-system-packages --no-deps --no-build-isolation \
    -e . -e plugins/kiln-webgpu 2>&1 | tail -2

{
    echo "# The webgpu plugin on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader) ($(date -u +%F))"
    echo
    python -c "import wgpu; a = wgpu.gpu.request_adapter_sync(power_preference='high-performance'); print('adapter:', a.info['device'], a.info['backend_type'], a.info['adapter_type'], '; wgpu', wgpu.__version__)"
    echo
    echo '```'
    timeout 300 python -m pytest -q -p no:cacheprovider plugins/kiln-webgpu/tests 2>&1 | tail -2
    timeout 300 python -m kiln check webgpu 2>&1 | grep -E "failed  |passed in|passed,"
    echo '```'
    echo
    timeout 300 python benchmarks/bench_webgpu.py 2>&1
} | tee "$summary"
