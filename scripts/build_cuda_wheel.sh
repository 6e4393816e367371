#!/usr/bin/env bash
# Build a pyggml wheel with ggml's CUDA backend on a machine without a GPU.
#
#   bash scripts/build_cuda_wheel.sh [options]
#
# The CUDA toolkit comes from the Python package index, installed with pip into a folder of its own
# (nothing of the system's CUDA is used): nvcc, its front end and libraries (crt, nvvm), the runtime, the
# CCCL headers (cub, thrust, libcu++) and cuBLAS, pinned below to CUDA 13.0 Update 2 (the driver of the GPU
# machine this project's checks run on serves CUDA 13.0). The wheel is built for the architectures given
# (CMAKE_CUDA_ARCHITECTURES) and is portable (CMakeLists.txt, PYGGML_PORTABLE and PYGGML_CUDA_PORTABLE):
# the CPU part runs on any x86-64 with AVX2, the CUDA runtime is linked in statically, ggml's VMM pool is
# left out (it would link the driver, libcuda.so.1), and cuBLAS is loaded at run time from the pip package
# nvidia-cublas, which the wheel requires. So the wheel imports on a machine without a GPU or driver
# (`python -m pyggml info` says CUDA is built and lists no CUDA device) and its CPU backend works there.
#
# Options:
#   --arch "LIST"   CUDA architectures, ;-separated (default: 90; docs/building.md has the
#                   build time of each set on a 2-core machine). 90 is Hopper (H100, H200); 75 Turing,
#                   80 A100, 86 RTX 30xx/A10, 89 RTX 40xx/L4/L40, 120 Blackwell (RTX 50xx). A plain number
#                   builds machine code and PTX for it; "90-real" leaves the PTX out (smaller); the driver
#                   compiles the PTX of the newest architecture below a GPU's at start-up, slowly
#   --python PY     the Python the wheel is built for (default: python3.12 on PATH, else pyenv's 3.12: the
#                   GPU machines' Python)
#   -j N            build jobs (default: CMAKE_BUILD_PARALLEL_LEVEL, else the number of cores)
#   --clean         start from an empty build folder (a cold build: what build-times.txt compares)
#   --toolkit-only  install the toolkit and the build environment, build nothing
#   --smoke         after the build: install the wheel into a fresh virtual environment (offline, from the
#                   downloaded wheels) and run `python -m pyggml info` and `check --backend cpu --only add`
#
# Environment: CUDA_WHEEL_DIR is where everything goes (default build/cuda); PYGGML_CACHE_DIR as for the
# package build (the ggml sdist is downloaded once). Whatever takes long runs under `nice`.
#
# What it leaves in CUDA_WHEEL_DIR:
#   toolkit-wheels/  the toolkit's wheels as downloaded (nvidia-cublas is 420 MB)
#   toolkit/         the toolkit, installed from them; its root is toolkit/nvidia/cu13
#   venv/            the build environment (scikit-build-core, cffi, cmake, ninja; pinned below)
#   build/           CMake's build folder (a rebuild for the same architectures is incremental)
#   wheelhouse/      the CUDA wheel, pyggml-VERSION+cu130-cpXY-cpXY-linux_x86_64.whl, and the wheels a GPU
#                    machine without network needs beside it (cffi, pycparser, numpy for Python
#                    $GPU_PYTHON_VERSION): what scripts/gpu_check.sh installs there
#   build-times.txt  one line per build: date, architectures, jobs, cold or incremental, wall and CPU
#                    seconds, load average, wheel size
set -euo pipefail
cd "$(dirname "$0")/.."

DEFAULT_ARCHS="90"
# CUDA 13.0 Update 2, as pip packages (the same versions as a toolkit assembled from them elsewhere)
TOOLKIT=(
    nvidia-cuda-nvcc==13.0.88
    nvidia-cuda-crt==13.0.88
    nvidia-nvvm==13.0.88
    nvidia-cuda-runtime==13.0.96
    nvidia-cuda-cccl==13.0.85
    nvidia-cublas==13.1.0.3
    nvidia-cuda-cuobjdump==13.2.51  # the oldest on the index; only lists the architectures built
)
CUDA_LOCAL_VERSION="cu130"
# what the wheel requires at run time: cuBLAS of this major version (it is not bundled: 600 MB unpacked)
CUBLAS_REQUIREMENT="nvidia-cublas>=13.0,<14"
BUILD_REQUIREMENTS=(scikit-build-core==1.1.2 cffi==2.0.0 pycparser==3.0 cmake==4.4.5 ninja==1.13.2)
# the GPU machines' Python has numpy but not cffi; numpy is carried for a Python without it
GPU_PYTHON_VERSION="${GPU_PYTHON_VERSION:-3.12}"
GPU_WHEELS=(cffi==2.0.0 pycparser==3.0 numpy==2.4.6)
PLATFORMS=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
    --platform manylinux2014_x86_64)

archs="$DEFAULT_ARCHS"
python=""
jobs="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"
toolkit_only=0
smoke=0
clean=0
while [ $# -gt 0 ]; do
    case "$1" in
        --arch) archs="$2"; shift 2 ;;
        --python) python="$2"; shift 2 ;;
        -j) jobs="$2"; shift 2 ;;
        --toolkit-only) toolkit_only=1; shift ;;
        --smoke) smoke=1; shift ;;
        --clean) clean=1; shift ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
        *) echo "unknown option: $1 (--help)" >&2; exit 2 ;;
    esac
done

if [ -z "$python" ]; then  # python3.12 on PATH, else pyenv's
    for candidate in python3.12 "$(pyenv root 2>/dev/null)"/versions/3.12*/bin/python3.12; do
        if "$candidate" -c "" 2>/dev/null; then python="$candidate"; break; fi
    done
    [ -n "$python" ] || { echo "no python3.12 found: give one with --python" >&2; exit 2; }
fi
work="${CUDA_WHEEL_DIR:-build/cuda}"
mkdir -p "$work"
work="$(cd "$work" && pwd)"
say() { echo "build_cuda_wheel: $*"; }

# --- the toolkit: pip packages in a folder of their own, made into a CUDA root ----------------------------
root="$work/toolkit/nvidia/cu13"
pins="${TOOLKIT[*]}"
if [ "$(cat "$work/toolkit/.pins" 2>/dev/null)" != "$pins" ]; then
    say "installing the CUDA toolkit: $pins"
    rm -rf "$work/toolkit"
    "$python" -m pip download -q --no-deps --only-binary=:all: "${PLATFORMS[@]}" \
        -d "$work/toolkit-wheels" "${TOOLKIT[@]}"
    "$python" -m pip install -q --no-index --find-links "$work/toolkit-wheels" --no-deps --no-compile \
        --target "$work/toolkit" "${TOOLKIT[@]}"
    # the pip packages lay the toolkit out as bin/, include/, lib/, nvvm/; nvcc looks for its headers and
    # libraries under targets/x86_64-linux (nvcc.profile), CMake for unversioned library names
    mkdir -p "$root/targets/x86_64-linux"
    ln -sfn ../../include "$root/targets/x86_64-linux/include"
    ln -sfn ../../lib "$root/targets/x86_64-linux/lib"
    ln -sfn lib "$root/lib64"
    for lib in cudart cublas cublasLt; do
        ln -sfn "lib$lib.so.13" "$root/lib/lib$lib.so"
    done
    echo "$pins" > "$work/toolkit/.pins"
fi
"$root/bin/nvcc" --version | tail -2

# --- the build environment --------------------------------------------------------------------------------
venv="$work/venv"
if [ "$(cat "$venv/.pins" 2>/dev/null)" != "$python ${BUILD_REQUIREMENTS[*]}" ]; then
    say "build environment: $python, ${BUILD_REQUIREMENTS[*]}"
    rm -rf "$venv"
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install -q "${BUILD_REQUIREMENTS[@]}"
    echo "$python ${BUILD_REQUIREMENTS[*]}" > "$venv/.pins"
fi

# --- the wheels a GPU machine without network installs beside pyggml's -------------------------------------
wheelhouse="$work/wheelhouse"
mkdir -p "$wheelhouse"
"$python" -m pip download -q --no-deps --only-binary=:all: --implementation cp --python-version "$GPU_PYTHON_VERSION" \
    "${PLATFORMS[@]}" -d "$wheelhouse" "${GPU_WHEELS[@]}"
[ "$toolkit_only" = 1 ] && { say "toolkit in $root"; exit 0; }

# --- the wheel ----------------------------------------------------------------------------------------------
say "building for CUDA architectures $archs with $jobs jobs"
rm -rf "$work/dist"
[ "$clean" = 1 ] && rm -rf "$work/build"
start=$(date +%s)
# in a subshell that ends with `times`: the CPU time of the whole build (its second line: the children's user
# and system time), which does not depend on what else the machine runs, unlike the wall time
(
    export CMAKE_ARGS="-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=$archs -DCMAKE_CUDA_COMPILER=$root/bin/nvcc \
-DCUDAToolkit_ROOT=$root ${CMAKE_ARGS:-}"
    export CMAKE_BUILD_PARALLEL_LEVEL="$jobs" PATH="$venv/bin:$PATH"
    nice -n 10 "$venv/bin/python" -m pip wheel -v . --no-deps --no-build-isolation -w "$work/dist" \
        -C build-dir="$work/build" > "$work/build.log" 2>&1 \
        || { tail -40 "$work/build.log"; say "failed (the whole log: $work/build.log)"; exit 1; }
    times > "$work/build-cpu.txt"
)
seconds=$(( $(date +%s) - start ))
cpu_seconds=$(sed -n 2p "$work/build-cpu.txt" | awk '{ t = 0; for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); t += a[1] * 60 + a[2] } printf "%d", t }')
raw=$(ls "$work"/dist/pyggml-*.whl)
rm -f "$wheelhouse"/pyggml-*.whl
wheel=$("$venv/bin/python" tools/retag_wheel.py "$raw" --local "$CUDA_LOCAL_VERSION" \
    --requires "$CUBLAS_REQUIREMENT" --out "$wheelhouse")
size=$(stat -c %s "$wheel")
cold=$([ "$clean" = 1 ] && echo cold || echo incremental)
echo "$(date -u +%FT%TZ) archs=$archs jobs=$jobs $cold wall_s=$seconds cpu_s=$cpu_seconds load=$(cut -d' ' -f1-3 /proc/loadavg | tr ' ' /) wheel_bytes=$size" \
    >> "$work/build-times.txt"
say "built in $seconds s ($cpu_seconds s of CPU time): $wheel ($(( size / 1048576 )) MiB)"

# --- what the module needs from the system: the C library and cuBLAS, never the driver or the runtime ---------
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && "$venv/bin/python" -m zipfile -e "$wheel" .)
module=$(ls "$tmp"/pyggml/_pyggml_cffi.*.so)
needed=$(readelf -d "$module" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
say "the module needs: $needed; runpath: $(readelf -d "$module" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')"
for lib in $needed; do
    case "$lib" in
        libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|ld-linux*|libcublas.so.13|libcublasLt.so.13) ;;
        *) say "unexpected dependency $lib: the wheel would not import everywhere"; exit 1 ;;
    esac
done
say "machine code (ELF images) and PTX per architecture:" \
    "$("$root/bin/cuobjdump" --list-elf "$module" | grep -o 'sm_[0-9]*[a-z]*' | sort | uniq -c | tr -s ' \n' ' ')" \
    "$("$root/bin/cuobjdump" --list-ptx "$module" | grep -o 'sm_[0-9]*[a-z]*' | sort | uniq -c | tr -s ' \n' ' ')"
if [ "$size" -gt $(( 64 * 1048576 )) ]; then
    say "the wheel is over 64 MiB: build fewer architectures, or real ones only (e.g. --arch \"80-real;90-real\")"
fi
say "wheelhouse ($(du -sh "$wheelhouse" | cut -f1)): $(cd "$wheelhouse" && ls | tr '\n' ' ')"

# --- a fresh virtual environment, offline: what a machine without a GPU sees --------------------------------
if [ "$smoke" = 1 ]; then
    "$python" -m venv "$tmp/venv"
    "$tmp/venv/bin/python" -m pip install -q --no-index --find-links "$wheelhouse" \
        --find-links "$work/toolkit-wheels" "$wheel"
    (cd "$tmp" && "$tmp/venv/bin/python" -m pyggml info && \
        "$tmp/venv/bin/python" -m pyggml check --backend cpu -q --only add)
fi
