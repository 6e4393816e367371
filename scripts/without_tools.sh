#!/usr/bin/env bash
# Run a command as on a machine without some programs: each folder of PATH that holds one of them is replaced
# by a folder of links to the rest of its entries, so everything else in it is still found.
#
#   bash scripts/without_tools.sh dot -- python -m pytest -q          # the tests as on a machine without Graphviz
#   bash scripts/without_tools.sh dot glslc python3.12 python3.13 pyenv -- python -m pytest -q
#
# README's test command must pass this way with any of the optional programs hidden (Graphviz's dot, a second
# Python, ...): a test that needs one skips, saying how to install it, or takes the documented fallback.
set -euo pipefail

hide=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
    hide+=("$1")
    shift
done
if [ $# -lt 2 ] || [ ${#hide[@]} -eq 0 ]; then
    echo "usage: bash scripts/without_tools.sh PROGRAM... -- COMMAND [ARG...]" >&2
    exit 2
fi
shift

shadow="$(mktemp -d)"
trap 'rm -rf "$shadow"' EXIT
path=""
n=0
IFS=: read -r -a folders <<<"$PATH"
for d in "${folders[@]}"; do
    holds=0
    for p in "${hide[@]}"; do
        if [ -e "$d/$p" ] || [ -L "$d/$p" ]; then holds=1; fi
    done
    if [ "$holds" = 1 ]; then
        n=$((n + 1))
        mkdir "$shadow/$n"
        for entry in "$d"/* "$d"/.[!.]*; do
            [ -e "$entry" ] || [ -L "$entry" ] || continue
            name="${entry##*/}"
            skip=0
            for p in "${hide[@]}"; do [ "$name" = "$p" ] && skip=1; done
            [ "$skip" = 1 ] || ln -s "$entry" "$shadow/$n/$name"
        done
        d="$shadow/$n"
    fi
    path="${path:+$path:}$d"
done
for p in "${hide[@]}"; do
    if PATH="$path" command -v "$p" >/dev/null 2>&1; then
        echo "without_tools: $p is still found: $(PATH="$path" command -v "$p")" >&2
        exit 2
    fi
done
PATH="$path" "$@"
