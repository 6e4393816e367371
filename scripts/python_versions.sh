#!/usr/bin/env bash
# pyggml on each Python it supports: for each, a build in a fresh virtual environment (the CPU and libllama: the
# Vulkan half of the suite is the same C code whatever the Python), the tests whose verdict can depend on the
# Python (the binding, the C layer, libllama, typing, the notebooks, the wheel built for that Python) and the main
# job on the CPU; the first version given also runs the tests that build pyggml without the seed's patches.
#
#   bash scripts/python_versions.sh [VERSION...]        # default: 3.11 3.12 3.13, the Pythons README names
#
# An interpreter is python3.X on PATH, else pyenv's newest 3.X; a version with neither fails the run,
# since a skipped version would read as a passed one. Graphviz's dot is hidden from these runs
# (scripts/without_tools.sh): README's test command runs with it, these as on a machine without it.
set -euo pipefail
cd "$(dirname "$0")/.."

# the binding's surface, its refusals and guards, the C layer's build, libllama, GGUF, the CLI, the
# pytest plugin, the README's snippets, mypy's verdict (the releases the bounds resolve to differ per Python),
# the notebooks and the wheel (docs/building.md, "Python versions")
TESTS=(
    tests/test_imports.py tests/test_build.py tests/test_op_api.py tests/test_bad_input.py
    tests/test_correct_or_raise.py tests/test_guard.py tests/test_safety.py tests/test_gguf.py
    tests/test_llama.py tests/test_cli.py tests/test_pytest_plugin.py tests/test_readme.py tests/test_wheel.py
    tests/test_types.py
)
# the notebooks (a minute a Python) on the newest Python named only: README's Python runs them in the main suite
NEWEST=(tests/test_notebooks.py)
# PYGGML_NOTEBOOKS_ONCE="a.ipynb b.ipynb": notebooks left out of these runs because the main suite ran them (.ci/run:
# the two that study real-size models, a minute together, whose Python-dependent part the others exercise too)
for nb in ${PYGGML_NOTEBOOKS_ONCE:-}; do
    NEWEST+=(--deselect "tests/test_notebooks.py::test_notebook_reruns_to_what_is_committed[$nb]")
done
# not Python-dependent, but a build of its own: once, on the first version (PYGGML_SEED_TESTS=0: not at all, as in
# .ci/run, whose main run has run it)
ONCE=()
[ "${PYGGML_SEED_TESTS:-1}" = 0 ] || ONCE=(tests/test_seed_patch.py)

find_python() {
    local v="$1" d
    if "python$v" -c "" 2>/dev/null; then command -v "python$v"; return; fi
    if command -v pyenv >/dev/null; then
        for d in $(ls -d "$(pyenv root)/versions/$v".* 2>/dev/null | sort -V -r); do
            if [ -x "$d/bin/python$v" ]; then echo "$d/bin/python$v"; return; fi
        done
    fi
    echo "no Python $v on this machine (PATH or pyenv): install it, or name the versions to run" >&2
    return 1
}

versions=("$@")
[ ${#versions[@]} -gt 0 ] || versions=(3.11 3.12 3.13)
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
for v in "${versions[@]}"; do
    py="$(find_python "$v")"
    echo "== Python $v: $py"
    start=$(date +%s)
    "$py" -m venv "$work/venv-$v"
    (
        . "$work/venv-$v/bin/activate"
        # portable, as `pip wheel .` builds it: tests/test_wheel.py's wheel then comes from the same build
        # folder (SKBUILD_BUILD_DIR) without compiling it again
        export SKBUILD_BUILD_DIR="$work/build-$v" CMAKE_ARGS="-DGGML_VULKAN=OFF -DGGML_CUDA=OFF -DPYGGML_PORTABLE=ON -DPYGGML_CPU_VARIANTS=native"
        python -m pip install -q --upgrade pip
        pip install -q -e ".[test]"
        echo "build: $(($(date +%s) - start)) s"
        python -m pyggml check --backend cpu -q
        once=()
        [ "$v" != "${versions[0]}" ] || once=(${ONCE[@]+"${ONCE[@]}"})
        [ "$v" != "${versions[${#versions[@]}-1]}" ] || once+=("${NEWEST[@]}")
        PYGGML_REBUILD_TESTS=1 bash scripts/without_tools.sh dot -- \
            python -m pytest -q -p no:cacheprovider --durations=5 "${TESTS[@]}" "${once[@]}"
    )
    echo "== Python $v: $(($(date +%s) - start)) s in all"
done
