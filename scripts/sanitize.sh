#!/usr/bin/env bash
# Build pyggml and ggml with AddressSanitizer + UndefinedBehaviorSanitizer (CPU only) and run
# tests under them.
#
#   bash scripts/sanitize.sh [PYTEST ARGS...]
#   bash scripts/sanitize.sh --rpc-fuzz GRAPHS [SEED]
#
# Default tests: tests/test_op_cases.py tests/test_bad_input.py tests/test_conv_state.py
# tests/test_meta.py (the whole suite, notebooks included, is slow under ASan on 2 cores;
# pass `tests` to run it all). --rpc-fuzz runs the RPC server's graph fuzzer instead
# (`python -m pyggml rpc-fuzz --graphs GRAPHS --seed SEED`, seed 0 by default): its servers are
# child processes started with the same interpreter, environment and folder, so they are the
# instrumented build, and the fuzzer's own process is too. Environment:
#   SANITIZE_DIR   where the venv and build folder go (default: build/sanitize, git-ignored
#                  with build/), so the normal editable install is left alone
#   SANITIZE_SKIP_BUILD=1  reuse the last build
# Findings: build/sanitize/asan.log.* (one file per process, ASan and UBSan reports) and a
# summary of "runtime error" lines at the end. Exit status: pytest's (or the fuzzer's), or 3 if any sanitizer
# report was written.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
dir="${SANITIZE_DIR:-$root/build/sanitize}"
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
venv="$dir/venv"

san="-fsanitize=address,undefined -fno-omit-frame-pointer -g"
if [ "${SANITIZE_SKIP_BUILD:-0}" != 1 ]; then
    [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
    "$venv/bin/python" -m pip install -q --upgrade pip >/dev/null
    "$venv/bin/python" -m pip install -q "cffi>=1.17" "numpy>=1.24" "pytest>=7" \
        "scikit-build-core>=0.10" cmake ninja
    # ggml's own options instrument ggml; the flags cover pyggml's cffi module as well.
    # GGML_NATIVE=OFF: portable code; RelWithDebInfo: line numbers in the reports.
    start=$(date +%s)
    CMAKE_ARGS="-DGGML_SANITIZE_ADDRESS=ON -DGGML_SANITIZE_UNDEFINED=ON -DGGML_NATIVE=OFF \
-DCMAKE_C_FLAGS='$san' -DCMAKE_CXX_FLAGS='$san' \
-DCMAKE_MODULE_LINKER_FLAGS=-fsanitize=address,undefined \
-DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=address,undefined ${CMAKE_ARGS:-}" \
    CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
        "$venv/bin/python" -m pip install --no-build-isolation --no-deps \
        --config-settings=build-dir="$dir/build" --config-settings=cmake.build-type=RelWithDebInfo \
        . > "$dir/build.log" 2>&1 || { tail -40 "$dir/build.log"; exit 1; }
    echo "sanitize: build took $(( $(date +%s) - start )) s (log: $dir/build.log)"
fi

# CPython is not instrumented: the ASan runtime must be loaded first, into the interpreter.
# detect_leaks=0: CPython keeps objects alive until exit by design, every run would "leak".
# Run from a folder outside the source tree so `import pyggml` is the sanitized install.
rm -f "$dir"/asan.log.*
asan_lib=$(gcc -print-file-name=libasan.so)
ubsan_lib=$(gcc -print-file-name=libubsan.so)
sanitized() {
    (cd "$dir" && LD_PRELOAD="$asan_lib $ubsan_lib" \
        ASAN_OPTIONS="detect_leaks=0:halt_on_error=0:log_path=$dir/asan.log:allocator_may_return_null=1" \
        UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=0:log_path=$dir/asan.log" \
        "$venv/bin/python" "$@")
}
status=0
if [ "${1:-}" = --rpc-fuzz ]; then
    graphs="${2:?--rpc-fuzz needs a number of graphs}"
    start=$(date +%s)
    sanitized -m pyggml rpc-fuzz --graphs "$graphs" --seed "${3:-0}" || status=$?
    echo "sanitize: rpc-fuzz --graphs $graphs --seed ${3:-0} took $(( $(date +%s) - start )) s"
else
    [ "$#" -gt 0 ] || set -- tests/test_op_cases.py tests/test_bad_input.py tests/test_conv_state.py tests/test_meta.py
    args=()
    for a in "$@"; do
        # paths given relative to the repository, as pytest is run from another folder
        if [ -e "$root/$a" ]; then args+=("$root/$a"); else args+=("$a"); fi
    done
    sanitized -m pytest -q -p no:cacheprovider --rootdir "$root" -c "$root/pyproject.toml" "${args[@]}" || status=$?
fi

# a report is an error; "failed to allocate" warnings are the tests asking for too much memory on
# purpose (allocator_may_return_null=1 turns them into the NULL that pyggml must handle)
reports=("$dir"/asan.log.*)
if [ -e "${reports[0]}" ] && grep -q "runtime error\|ERROR: AddressSanitizer" "$dir"/asan.log.*; then
    echo "sanitize: reports in $dir/asan.log.*:"
    grep -h "runtime error\|ERROR: AddressSanitizer\|SUMMARY:" "$dir"/asan.log.* | sort | uniq -c | sort -rn | head -50
    [ "$status" -ne 0 ] || status=3
else
    echo "sanitize: no sanitizer report"
fi
exit $status
