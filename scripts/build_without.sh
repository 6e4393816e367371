#!/usr/bin/env bash
# Build pyggml as a bare machine would, with one prerequisite hidden, and check what the build says.
#
#   bash scripts/build_without.sh patch       # GNU patch (hidden by scripts/without_tools.sh)
#   bash scripts/build_without.sh compiler    # cc, gcc, c++, g++ (likewise)
#   bash scripts/build_without.sh headers     # Python's headers (Python.h): an empty folder mounted over them,
#                                             # in a mount namespace of its own (unshare -m; root)
#
# The build (`pip install --no-build-isolation` of a copy of the tracked tree; it stops at configure) must say
# in one line what is missing and the command that installs it (README.md, "On a bare machine"), with no Python
# traceback: the script prints that line and exits 0 when it does, 1 otherwise.
set -euo pipefail
what=${1:?"which prerequisite to hide: patch, compiler or headers"}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/src" "$work/empty"
(cd "$root" && git ls-files -z | xargs -0 cp --parents -t "$work/src")
build="pip install --no-build-isolation --no-deps -q $work/src"
case "$what" in
patch) out=$(bash "$root/scripts/without_tools.sh" patch -- $build 2>&1 || true) ;;
compiler)
    tools=()
    for t in cc gcc c++ g++ x86_64-linux-gnu-gcc x86_64-linux-gnu-g++ aarch64-linux-gnu-gcc aarch64-linux-gnu-g++ \
        clang clang++ gcc-12 g++-12 x86_64-linux-gnu-gcc-12 x86_64-linux-gnu-g++-12; do
        command -v "$t" >/dev/null 2>&1 && tools+=("$t")
    done
    out=$(CC= CXX= bash "$root/scripts/without_tools.sh" "${tools[@]}" -- $build 2>&1 || true)
    ;;
headers)
    inc=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
    out=$(unshare -m sh -c "mount --bind '$work/empty' '$inc' && $build" 2>&1 || true)
    ;;
*)
    echo "build_without.sh: unknown prerequisite '$what' (patch, compiler, headers)" >&2
    exit 2
    ;;
esac
# the message, joined where CMake wrapped it: from "pyggml: ... not found" to the next blank line
line=$(printf '%s\n' "$out" | awk '/pyggml: .*(not found|compiler found)/ {on = 1} on && /^ *$/ {exit} on {sub(/^ +/, ""); printf "%s ", $0}')
line=${line% }
if [ -n "$line" ] && ! printf '%s\n' "$out" | grep -q 'Traceback'; then
    echo "hidden $what: $line"
    exit 0
fi
printf '%s\n' "$out" | tail -20
echo "build_without.sh: the build did not name the missing $what in one line" >&2
exit 1
