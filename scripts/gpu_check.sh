#!/usr/bin/env bash
# Build pyggml with ggml's CUDA backend and run the differential suite on CPU and CUDA.
#
#   bash scripts/gpu_check.sh [OUT_DIR]
#
# For a machine with an NVIDIA GPU, nvcc and no network: everything the build needs must
# already be there -- Python with cffi, numpy, scikit-build-core and pip installed, and
# ggml's pinned sdist in the pyggml cache (PYGGML_CACHE_DIR, default ~/.cache/pyggml; copy
# it from a machine that has built pyggml once). The build targets the visible GPU's
# architecture (CMAKE_CUDA_ARCHITECTURES to override) with all cores.
# Writes OUT_DIR/check.json (the records of `check`) and OUT_DIR/check.txt (the table).
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-gpu-check}"
mkdir -p "$out"

nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader | tee "$out/gpu.txt"
start=$(date +%s)
CMAKE_ARGS="-DGGML_CUDA=ON ${CMAKE_ARGS:-}" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
    python3 -m pip install --no-build-isolation --no-deps --no-index -e . > "$out/build.log" 2>&1 \
    || { tail -40 "$out/build.log"; exit 1; }
echo "build: $(( $(date +%s) - start )) s" | tee "$out/build_time.txt"

python3 -m pyggml info | tee "$out/info.txt"
status=0
python3 -m pyggml check --backend cpu --backend cuda0 --json "$out/check.json" -q > "$out/check.txt" || status=$?
tail -15 "$out/check.txt"
exit $status
