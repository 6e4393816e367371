#!/usr/bin/env bash
# Run pyggml's differential suite, the seed's cases and the seed's benches on CPU and CUDA, on a machine
# with an NVIDIA GPU and no network.
#
#   bash scripts/gpu_check.sh [--wheels DIR] [--out DIR] [--quick] [--build]
#
# By default nothing is compiled there: the CUDA wheel built beforehand by scripts/build_cuda_wheel.sh is
# installed with the wheels beside it (DIR, default build/cuda/wheelhouse: pyggml-*+cu*.whl, and cffi,
# pycparser and numpy for the GPU machine's Python). The machine's python3 must be the wheel's version
# (3.12) and have cuBLAS 13 as the pip package nvidia-cublas (PyTorch's CUDA 13 builds bring it; pyggml
# loads it from sys.path) and a driver for CUDA 13.0 (580 or newer). pyggml is installed with
# `pip install --target` into a temporary folder put on PYTHONPATH; numpy only if python3 has none.
#
# Then, from a scratch folder (so that this checkout's pyggml/ does not shadow the installed one):
#   python3 -m pyggml info                                            what was built, which devices
#   python3 -m pyggml check --backend cpu --backend cuda0 -q          the whole suite (unless --quick)
#   python3 -m pyggml check ... --only 'conv_state|delta_net'          the seed's cases, row by row
#   python3 bench/delta_net_speculative.py --backend cpu --backend cuda0  (--quick: n = 4, 8 steps)
#   python3 bench/conv_state_write.py --quick                         (the CPU's; it has no backend option)
# Each step has a time limit (STEP_TIMEOUT, default 240 s) and a failed step does not stop the next.
# Without a GPU (CHECK_BACKENDS=cpu) the whole run took 39 s on 2 busy cores; on 16 cores with a GPU it
# should take about a minute (not run on a GPU yet). --quick leaves the whole suite out.
# CHECK_BACKENDS replaces "cpu cuda0" (CHECK_BACKENDS=cpu tries the script on a machine without a GPU).
#
# --build is the old path, for a machine with nvcc and cuBLAS but no prebuilt wheel: pyggml is built there
# (`pip install -e .` with -DGGML_CUDA=ON, all cores, the visible GPU's architecture; ggml's pinned sdist
# must be in the pyggml cache, PYGGML_CACHE_DIR, or its extracted ggml folder in PYGGML_GGML_SOURCE with
# PYGGML_PATCHES=all,strict (a tree given by its folder gets no patch unless asked: docs/building.md), and
# python3 must have cffi, numpy, scikit-build-core and pip), then the same steps run.
#
# Writes into OUT_DIR (--out, else $OUT when set, else gpu-check): gpu_check.txt (everything a reader
# needs: GPU, info, tables, bench output, each step's time and status), check.json and seed.json (the
# records of `check`), log.txt (the commands' stderr), build.log with --build. Exit status: 0 when every
# step passed, 1 otherwise.
set -uo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"

wheels="build/cuda/wheelhouse"
out="${OUT:-gpu-check}"
quick=0
build=0
while [ $# -gt 0 ]; do
    case "$1" in
        --wheels) wheels="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        --quick) quick=1; shift ;;
        --build) build=1; shift ;;
        -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d'; exit 0 ;;
        *) out="$1"; shift ;;  # the old form: gpu_check.sh OUT_DIR
    esac
done
mkdir -p "$out"
out="$(cd "$out" && pwd)"
report="$out/gpu_check.txt"
log="$out/log.txt"
: > "$report"
: > "$log"
limit="${STEP_TIMEOUT:-240}"
failed=0
say() { echo "$*" | tee -a "$report"; }

# step NAME COMMAND...: run it with a time limit, its stdout to the report, its stderr to the log
step() {
    local name="$1"; shift
    local t0=$SECONDS rc
    say "=== $name: $*"
    echo "=== $name: $*" >> "$log"
    timeout --kill-after=10 "$limit" "$@" 2>> "$log" | tee -a "$report"
    rc=${PIPESTATUS[0]}
    say "=== $name: exit $rc, $(( SECONDS - t0 )) s"
    [ "$rc" = 0 ] || failed=1
    return 0
}

say "gpu_check $(date -u +%FT%TZ), $(nproc) cores"
nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv,noheader 2>&1 | tee -a "$report"
start=$SECONDS

if [ "$build" = 1 ]; then
    say "=== build: pip install -e . with -DGGML_CUDA=ON (the log: build.log)"
    CMAKE_ARGS="-DGGML_CUDA=ON ${CMAKE_ARGS:-}" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
        python3 -m pip install --no-build-isolation --no-deps --no-index -e . > "$out/build.log" 2>&1 \
        || { tail -40 "$out/build.log" | tee -a "$report"; say "=== build failed"; exit 1; }
    say "=== build: $(( SECONDS - start )) s"
else
    wheel=$(ls "$wheels"/pyggml-*+cu*.whl 2>/dev/null | tail -1)
    [ -n "$wheel" ] || { say "no CUDA wheel in $wheels: build one with scripts/build_cuda_wheel.sh"; exit 1; }
    site="$(mktemp -d)/site"
    extra=("$wheels"/cffi-*.whl "$wheels"/pycparser-*.whl)
    python3 -c "import numpy" 2>/dev/null || extra+=("$wheels"/numpy-*.whl)
    say "=== install: $(basename "$wheel") ${extra[*]##*/} into $site"
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" "$wheel" "${extra[@]}" >> "$log" 2>&1 \
        || { tail -20 "$log" | tee -a "$report"; say "=== install failed"; exit 1; }
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
    say "=== install: $(( SECONDS - start )) s"
fi

scratch="$(mktemp -d)"
cd "$scratch"
step info python3 -m pyggml info
backends=()
for b in ${CHECK_BACKENDS:-cpu cuda0}; do backends+=(--backend "$b"); done
if [ "$quick" = 0 ]; then
    step check python3 -m pyggml check "${backends[@]}" -q --json "$out/check.json"
fi
step seed python3 -m pyggml check "${backends[@]}" --only 'conv_state|delta_net' --json "$out/seed.json"
bench_quick=()
[ "$quick" = 1 ] && bench_quick=(--quick)
step bench_delta_net python3 "$repo/bench/delta_net_speculative.py" "${backends[@]}" "${bench_quick[@]}"
step bench_conv_state python3 "$repo/bench/conv_state_write.py" --quick
say "=== done: $(( SECONDS - start )) s, $([ "$failed" = 0 ] && echo "every step passed" || echo "a step failed")"
exit "$failed"
