#!/usr/bin/env bash
# Build pyggml and ggml with AddressSanitizer + UndefinedBehaviorSanitizer (CPU only) into a
# throwaway virtual environment, then run the tests under them.
#
#   scripts/sanitize.sh [pytest args...]      (default: the safety, bad-input, op and fuzz tests)
#
# CPython is not built with ASan, so libasan is preloaded; leak detection is off because the
# interpreter keeps memory to the end by design. UBSan reports without stopping; the script
# fails if either sanitizer printed a report.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="build/sanitize-venv"
python3 -m venv "$venv"
"$venv/bin/pip" install -q --upgrade pip
flags="-fsanitize=address,undefined -fno-omit-frame-pointer"
CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_SANITIZE_ADDRESS=ON -DGGML_SANITIZE_UNDEFINED=ON -DCMAKE_C_FLAGS='$flags' -DCMAKE_CXX_FLAGS='$flags' -DCMAKE_SHARED_LINKER_FLAGS='$flags' -DCMAKE_MODULE_LINKER_FLAGS='$flags'" \
    "$venv/bin/pip" install -q --config-settings=build-dir=build/sanitize ".[test]"
asan="$(gcc -print-file-name=libasan.so)"
ubsan="$(gcc -print-file-name=libubsan.so)"
log="build/sanitize.log"
set +e
(cd build && LD_PRELOAD="$asan:$ubsan" ASAN_OPTIONS=detect_leaks=0:halt_on_error=0 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=0 \
    "../$venv/bin/python" -m pytest -q -p no:cacheprovider "${@:-../tests/test_safety.py ../tests/test_bad_input.py ../tests/test_op_cases.py}") 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
if grep -qE "ERROR: AddressSanitizer|runtime error:" "$log"; then
    echo "sanitize: findings above (also in $log)"; exit 1
fi
exit "$status"
