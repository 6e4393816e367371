#!/usr/bin/env bash
# llama.cpp's own tests of its models, built on pyggml's ggml and libllama source, and run on every device.
#
#   bash scripts/llama_tests.sh [options]
#
# Builds two of the tests that ship in the pinned sdist's llama.cpp (vendor/ggml/pin.toml) and runs them:
#
#   test-llama-archs               makes a tiny random model of each architecture and compares its logits on
#                                  every device, and on a Meta device made of all non-CPU devices (llama.cpp's
#                                  tensor split), with the CPU's (NMSE <= 1e-4), then saves and reloads it
#                                  (bit-exact "roundtrip");
#   test-recurrent-state-rollback  rolls a recurrent memory back (llama_memory_seq_rm with n_rs_seq 8) and
#                                  replays several sequences across ubatches, on the model files given:
#                                  llama.cpp's own tiny files (written by test-llama-archs -o) and pyggml's
#                                  (`python -m pyggml make-model`).
#
# The llama.cpp tree is the sdist's vendor/llama.cpp with its ggml/ replaced by pyggml's patched ggml and
# its src/ and include/ by pyggml's patched libllama source (the seed), both written by tools/fetch_ggml.py,
# so the same pin, hash check, cache and patch series apply as in pyggml's own build. With Vulkan (the
# default) lavapipe is listed twice (GGML_VK_VISIBLE_DEVICES=0,0: Vulkan0, Vulkan1), which gives
# test-llama-archs its Meta device on a machine without a GPU.
#
# Options:
#   --without-patches  the baseline: the sdist's ggml and llama.cpp as they are, but for
#                      0002-vulkan-old-headers.patch (without it ggml-vulkan does not compile against
#                      Debian 12's Vulkan headers; it changes nothing at run time)
#   --skip P1,P2       leave out these patches (file names in vendor/ggml/patches or vendor/llama/patches)
#   --cpu-only         build without Vulkan (CPU only: test-llama-archs then has no Meta device)
#   --archs "A B ..."  architectures to run (default: DEFAULT_ARCHS in this script)
#   --seed N           seed of test-llama-archs' random weights and tokens (default 42)
#   --timeout S        seconds one test process may run before it counts as TIMEOUT (default 1800)
#   --build-only       configure and build, run nothing
#   --no-build         run what the last build of this variant left
#   -j N               build jobs (default: CMAKE_BUILD_PARALLEL_LEVEL, else the number of cores)
#
# Environment: PYTHON is the Python that runs tools/fetch_ggml.py and, if it can import pyggml, make-model
# (default python3); LLAMA_TESTS_DIR is where everything goes (default build/llama-tests); PYGGML_CACHE_DIR
# as for the package build.
#
# Each variant (patched, baseline, skip-<hash>; -cpu for --cpu-only) has its own folder under
# LLAMA_TESTS_DIR: the prepared sources (prep/), the assembled tree (llama.cpp/), the build (build/), the
# model files (models/) and the results (results/: one log per test process, summary.txt). A rerun only
# rebuilds what changed. summary.txt has one line per test case:
#
#   archs     ARCH CONFIG DEVICE STATUS NMSE ROUNDTRIP   (DEVICE: Vulkan0, Vulkan1, CPU, Meta)
#   rollback  DEVICE MODEL ROLLBACK SPLIT-REPLAY         (DEVICE: CPU, Vulkan0, Vulkan1, Meta)
#   time      WHAT SECONDS
#
# and a last line `summary: N cases, P passed, S skipped, K known failures, F failed`. A case that crashes
# or times out counts as failed (CRASH, TIMEOUT); one listed in KNOWN (a failure understood and not fixed
# here, docs/llama_tests.md) is reported KNOWN-... with its reason. The exit status is 0 when nothing failed.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

# delta-net (qwen3next, qwen35, qwen35moe), hybrid (attention + recurrent layers) and recurrent
# architectures of this llama.cpp (llm_arch_is_hybrid / llm_arch_is_recurrent in src/llama-arch.cpp), and
# llama as a plain transformer. test-llama-archs marks the RWKV ones unsupported itself ("hang
# indefinitely"). Left out: kimi-linear (its f32 x f32 matmul shader, matmul_f32_f32, does not finish
# compiling in lavapipe's LLVM 15 within 30 minutes: TIMEOUT on every Vulkan device; pass --archs to run
# it), and the large hybrid MoE families (bailingmoe3, kimi-k3, glm5-next, qwen4exp, deepseek4, minimax-01).
DEFAULT_ARCHS="llama qwen3next qwen35 qwen35moe mamba mamba2 rwkv6 rwkv6qwen2 rwkv7 arwkv7 jamba falcon-h1
plamo2 granitehybrid lfm2 lfm2moe nemotron_h nemotron_h_moe"
# pyggml's own tiny files for the rollback test (make-model's recurrent and hybrid architectures)
PYGGML_MODELS="qwen3next qwen35 qwen35moe mamba2 rwkv7"

# the whole run is one function, read before it starts: editing this file during a run cannot derail it
main() {
    skip=""
    without_patches=0
    vulkan=ON
    archs=$DEFAULT_ARCHS
    seed=42
    timeout_s=1800
    do_build=1
    do_run=1
    jobs=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
    while [ $# -gt 0 ]; do
        case "$1" in
            --without-patches) without_patches=1 ;;
            --skip) skip="$2"; shift ;;
            --cpu-only) vulkan=OFF ;;
            --archs) archs="$2"; shift ;;
            --seed) seed="$2"; shift ;;
            --timeout) timeout_s="$2"; shift ;;
            --build-only) do_run=0 ;;
            --no-build) do_build=0 ;;
            -j) jobs="$2"; shift ;;
            -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
            *) echo "llama_tests: unknown option $1 (see --help)" >&2; exit 2 ;;
        esac
        shift
    done
    python=${PYTHON:-python3}
    archs=$(echo $archs | tr ', ' '\n\n' | grep -v '^$' | tr '\n' ' ')

    # --- the variant: which patches are left out ---------------------------------------------------------
    if [ $without_patches = 1 ]; then
        variant=baseline
        skip=$( (cd vendor/ggml/patches && ls *.patch | grep -v '^0002-vulkan-old-headers.patch$'
                 cd ../../llama/patches && ls *.patch) | tr '\n' ',' | sed 's/,$//')
    elif [ -n "$skip" ]; then
        variant=skip-$(echo "$skip" | tr ',' '\n' | sort | sha256sum | cut -c1-8)
    else
        variant=patched
    fi
    [ $vulkan = OFF ] && variant=$variant-cpu
    root=${LLAMA_TESTS_DIR:-build/llama-tests}
    mkdir -p "$root"
    root=$(cd "$root" && pwd)
    dir=$root/$variant
    results=$dir/results
    mkdir -p "$dir" "$results"
    echo "llama_tests: variant $variant in $dir"
    [ -n "$skip" ] && echo "llama_tests: patches left out: $skip"
    echo "$skip" > "$results/skipped-patches.txt"

    # --- the tree: the sdist's llama.cpp with pyggml's patched ggml/, src/ and include/ --------------------
    assemble() {
        # pyggml's ggml and libllama sources, as the package build prepares them (pin, hash, cache, patches)
        "$python" tools/fetch_ggml.py --dest "$dir/prep/ggml" --llama-dest "$dir/prep/llama" --skip "$skip"
        # the rest of llama.cpp that the tests need (its CMake files, common/, tests/, vendor/) from the same
        # sdist, then everything copied into one tree; a file whose content did not change keeps its time, so
        # a rerun rebuilds nothing
        "$python" - "$repo" "$root/sdist" "$dir" <<'EOF'
import shutil, sys, tarfile, tomllib
from pathlib import Path

repo, base, variant = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
sys.path.insert(0, str(repo / "tools"))
import fetch_ggml

pin = tomllib.loads(fetch_ggml.PIN_FILE.read_text())
sub = pin["llama_subdir"]
# what the tests need besides ggml/, src/ and include/ (with the top CMakeLists.txt)
FOLDERS = ("cmake", "common", "tests", "vendor")
# The one change made to llama.cpp's tests: test-llama-archs prints through common's log, whose worker
# thread is never joined (common_log_main() leaks it on purpose, "logs may be lost if not flushed before
# the program exits"), so the last rows of a run, or every row before a crash, could be lost. Flush it
# after each row's device, after each row and before the exit.
FLUSH = "common_log_flush(common_log_main());"
EDITS = {
    "tests/test-llama-archs.cpp": [
        ("                fflush(stdout);\n", f"                fflush(stdout); {FLUSH}\n"),
        ("nmse_str, status_roundtrip.c_str());\n", f"nmse_str, status_roundtrip.c_str()); {FLUSH}\n"),
        ("    return all_ok ? 0 : 1;\n", f"    {FLUSH}\n    return all_ok ? 0 : 1;\n"),
    ]
}
want_stamp = pin["sha256"] + repr(EDITS)
stamp = base / ".pyggml-stamp"
if not (stamp.exists() and stamp.read_text() == want_stamp):
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    with tarfile.open(fetch_ggml.cached_sdist(pin)) as tar:  # one pass over the 76 MB archive
        for m in tar:
            rel = m.name.split("/", 1)[-1]
            if not rel.startswith(sub + "/"):
                continue
            rel = rel[len(sub) + 1 :]
            if rel == "CMakeLists.txt" or ("/" in rel and rel.split("/", 1)[0] in FOLDERS):
                tar.extract(m.replace(name=rel), base, filter="data")
    for rel, edits in EDITS.items():
        text = (base / rel).read_text()
        for a, b in edits:
            if text.count(a) != 1:
                sys.exit(f"llama_tests: {rel} no longer has {a!r} once: update EDITS in scripts/llama_tests.sh")
            text = text.replace(a, b)
        (base / rel).write_text(text)
    stamp.write_text(want_stamp)


def sync(src: Path, dst: Path) -> None:
    """dst becomes a copy of src; only files whose bytes differ are written."""
    want = {p.relative_to(src) for p in src.rglob("*") if p.is_file()}
    for rel in sorted(want):
        s, d = src / rel, dst / rel
        if d.is_file() and d.stat().st_size == s.stat().st_size and d.read_bytes() == s.read_bytes():
            continue
        d.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(s, d)
        shutil.copymode(s, d)
    if dst.exists():
        for p in dst.rglob("*"):
            if p.is_file() and p.relative_to(dst) not in want:
                p.unlink()


tree = variant / "llama.cpp"
for f in FOLDERS:
    sync(base / f, tree / f)
top = tree / "CMakeLists.txt"
if not top.exists() or top.read_bytes() != (base / "CMakeLists.txt").read_bytes():
    shutil.copyfile(base / "CMakeLists.txt", top)
sync(variant / "prep" / "ggml", tree / "ggml")
sync(variant / "prep" / "llama" / "src", tree / "src")
sync(variant / "prep" / "llama" / "include", tree / "include")
EOF
    }

    build() {
        # llama.cpp's own CMake, with its tests on and everything else it can leave out off
        cmake -S "$dir/llama.cpp" -B "$dir/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
            -DLLAMA_BUILD_TESTS=ON -DLLAMA_BUILD_COMMON=ON -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
            -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_LLGUIDANCE=OFF \
            -DGGML_VULKAN=$vulkan -DGGML_RPC=OFF -DGGML_BUILD_TESTS=OFF -DGGML_BUILD_EXAMPLES=OFF
        # only the two tests (and what they link: llama-common, llama, ggml)
        cmake --build "$dir/build" -j "$jobs" --target test-llama-archs test-recurrent-state-rollback
    }

    if [ $do_build = 1 ]; then
        start=$(date +%s)
        assemble > "$results/prepare.log" 2>&1 || { tail -30 "$results/prepare.log"; exit 1; }
        echo "time prepare $(( $(date +%s) - start ))" > "$results/build-times.txt"
        start=$(date +%s)
        build > "$results/build.log" 2>&1 || { tail -40 "$results/build.log"; exit 1; }
        echo "time build $(( $(date +%s) - start ))" >> "$results/build-times.txt"
        cat "$results/build-times.txt"
    fi
    [ $do_run = 1 ] || exit 0

    bin=$dir/build/bin
    [ -x "$bin/test-llama-archs" ] || { echo "llama_tests: no build in $dir/build (run without --no-build)" >&2; exit 1; }
    rm -f "$results"/archs-*.log "$results"/rollback-*.log "$results/run-times.txt"
    export GGML_VK_VISIBLE_DEVICES=${GGML_VK_VISIBLE_DEVICES:-0,0}
    # the rows of test-llama-archs come in ggml's device order: the Vulkan devices, the CPU, then Meta
    devices=""
    if [ $vulkan = ON ]; then
        for i in $(seq 0 $(( $(echo "$GGML_VK_VISIBLE_DEVICES" | tr ',' '\n' | wc -l) - 1 ))); do
            devices="$devices Vulkan$i"
        done
    fi
    devices="$devices CPU Meta"
    echo "$devices" > "$results/devices.txt"

    # run CMD... with the timeout; log to FILE; record its seconds under NAME; never stop the script
    timed() {
        local name=$1 log=$2; shift 2
        local t0 rc=0
        t0=$(date +%s)
        timeout "$timeout_s" "$@" > "$log" 2>&1 || rc=$?
        echo "time $name $(( $(date +%s) - t0 ))" >> "$results/run-times.txt"
        echo "rc $rc" >> "$log"
        echo "llama_tests: $name: rc $rc, $(( $(date +%s) - t0 )) s"
    }

    # --- test-llama-archs, one process per architecture (a crash or hang ends only its own) ----------------
    for arch in $archs; do
        timed "archs-$arch" "$results/archs-$arch.log" "$bin/test-llama-archs" -a "$arch" -s "$seed"
    done

    # --- test-recurrent-state-rollback on llama.cpp's and pyggml's tiny files ------------------------------
    models=$dir/models
    rm -rf "$models" && mkdir -p "$models/all"
    regex="^($(echo $archs | tr ' ' '|'))\$"
    timed "save-models" "$results/save-models.log" "$bin/test-llama-archs" -a "$regex" -s "$seed" -o "$models/all"
    if (cd "$repo" && "$python" -c "import pyggml.llama" 2>/dev/null); then
        for arch in $PYGGML_MODELS; do
            (cd "$repo" && "$python" -m pyggml make-model "$arch" "$models/all/$arch-pyggml.gguf") \
                >> "$results/save-models.log" 2>&1 || echo "llama_tests: make-model $arch failed" >&2
        done
    else
        echo "llama_tests: $python cannot import pyggml.llama: no pyggml model files (set PYTHON)" | tee -a "$results/save-models.log"
    fi

    # the Meta device takes only the architectures llama.cpp can split by tensor (llm_arch_supports_sm_tensor):
    # list those it cannot, from the tree's own source
    no_tensor_split=$("$python" - "$dir/llama.cpp/src/llama-arch.cpp" <<'EOF'
import re, sys
src = open(sys.argv[1]).read()
names = dict(re.findall(r"\{\s*(LLM_ARCH_\w+),\s*\"([^\"]+)\"\s*\}", src))
body = src.split("bool llm_arch_supports_sm_tensor", 1)[1].split("return false;", 1)[0]
print(" ".join(names[e] for e in re.findall(r"case (LLM_ARCH_\w+):", body) if e in names))
EOF
    )
    rollback_configs="CPU"
    [ $vulkan = ON ] && rollback_configs="CPU Vulkan0 Vulkan1 Meta"
    for cfg in $rollback_configs; do
        case $cfg in
            CPU) dev=(-dev none -ngl 0) ;;
            Meta) dev=(-dev Vulkan0,Vulkan1 -sm tensor -ngl all) ;;
            *) dev=(-dev "$cfg" -ngl all) ;;
        esac
        # one process per model file (a model that hangs or crashes ends only its own case)
        for f in "$models"/all/*.gguf; do
            name=$(basename "$f" .gguf)
            a=${name%-*}
            if [ $cfg = Meta ] && [[ " $no_tensor_split " == *" $a "* ]]; then continue; fi
            mkdir -p "$models/$cfg/$name"
            ln -sf "$f" "$models/$cfg/$name/"
            timed "rollback-$cfg-$name" "$results/rollback-$cfg-$name.log" \
                "$bin/test-recurrent-state-rollback" --models "$models/$cfg/$name" -c 256 -fit off "${dev[@]}"
        done
    done

    # --- summary: one line per case -------------------------------------------------------------------
    "$python" - "$results" <<'EOF'
import re, sys
from pathlib import Path

res = Path(sys.argv[1])
devices = (res / "devices.txt").read_text().split()
ansi = re.compile(r"\x1b\[[0-9;]*m")
lines, counts = [], {"passed": 0, "skipped": 0, "failed": 0, "known": 0}

# Failures understood and not fixed here (docs/llama_tests.md says why): (test, device, case, column, patch,
# reason). test-llama-archs' case is the architecture, test-recurrent-state-rollback's the model file (regular
# expressions); column is the one that fails ("" for any); patch names the patch the failure comes with ("" for
# one that fails without our patches too). Such a case is reported KNOWN-..., with its reason, and does not
# fail the run; if it passes one day, it is reported so that its entry can go.
KNOWN = [
    ("rollback", r".*", r"(lfm2|lfm2moe|nemotron_h|nemotron_h_moe|qwen35|qwen35moe)-.*\.gguf", "replay",
     "0002-recurrent-rollback-within-the-last-ubatch.patch",
     "llama patch 0002 refuses (seq_rm returns false) removing all 3 tokens of the last ubatch, which upstream "
     "does inexactly (its replay differs from the reference within the test's NMSE 1e-4: max diff 8.9e-3 for lfm2 "
     "on the CPU, where an exact rollback is bit-exact)"),
]
skipped = {p for p in (res / "skipped-patches.txt").read_text().strip().split(",") if p}


def known(test, device, case, statuses=()):
    """the reason of the KNOWN entry for this case, when its failing column is the one named"""
    for t, d, c, column, patch, reason in KNOWN:
        if t != test or not re.fullmatch(d, device) or not re.fullmatch(c, case) or patch in skipped:
            continue
        if column == "replay" and statuses and re.search(r"FAIL|CRASH|TIMEOUT", statuses[0]):
            continue  # the rollback itself failed: not this entry's failure
        return reason
    return None


def count(*statuses, why=None):
    s = " ".join(statuses)
    kind = "failed" if re.search(r"FAIL|CRASH|TIMEOUT", s) else "passed" if re.search(r"OK|PASS", s) else "skipped"
    if why and kind == "failed":
        kind = "known"
        lines[-1] = re.sub(r"FAIL|CRASH|TIMEOUT", lambda m: "KNOWN-" + m.group(0), lines[-1]) + f"\t{why}"
    elif why and kind == "passed":
        lines[-1] += "\tknown failure passed: its KNOWN entry can go"
    counts[kind] += 1


def ended(text):
    rc = int(text.rstrip().rsplit("rc ", 1)[1])
    return "TIMEOUT" if rc in (124, 137) else "CRASH" if rc not in (0, 1) else None


for log in sorted(res.glob("archs-*.log")):
    arch = log.stem[len("archs-"):]
    text = ansi.sub("", log.read_text(errors="replace"))
    bad = ended(text)
    rows = [l for l in text.splitlines() if l.startswith("|") and not l.startswith("|-") and "Model arch." not in l]
    seen = {}
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        config = cells[2]
        k = seen.get(config, 0)
        seen[config] = k + 1
        dev = devices[k] if k < len(devices) else f"device{k}"
        if len(cells) >= 5:  # a finished row: status (nmse), roundtrip
            m = re.match(r"(\S+(?: \(toggle\))?)\s*(\(.*\))?", cells[3])
            status, nmse = m.group(1), (m.group(2) or "-").strip("()")
            rt = cells[4]
        else:  # the process died inside this case
            status, nmse, rt = bad or "CRASH", "-", "-"
        lines.append(f"archs\t{arch}\t{config}\t{dev}\t{status}\t{nmse}\t{rt}")
        count(status, rt, why=known("archs", dev, arch))
    if not rows:
        lines.append(f"archs\t{arch}\t-\t-\t{bad or 'NONE'}\t-\t-")
        if bad:
            count(bad, why=known("archs", "-", arch))

for log in sorted(res.glob("rollback-*.log")):  # rollback-DEVICE-MODEL.log
    _, cfg, model = log.stem.split("-", 2)
    text = ansi.sub("", log.read_text(errors="replace"))
    bad = ended(text)
    got = re.findall(r"^(\S+\.gguf)\s+(PASS|FAIL|SKIP)\s+(PASS|FAIL|SKIP)\s*$", text, re.M)
    for name, rb, rp in got:
        lines.append(f"rollback\t{cfg}\t{name}\t{rb}\t{rp}")
        count(rb, rp, why=known("rollback", cfg, name, (rb, rp)))
    if bad or not got:  # it died (or printed nothing) on this model
        lines.append(f"rollback\t{cfg}\t{model}.gguf\t{bad or 'CRASH'}\t{bad or 'CRASH'}")
        count(bad or "CRASH", why=known("rollback", cfg, f"{model}.gguf", (bad or "CRASH",)))

for f in ("build-times.txt", "run-times.txt"):
    if (res / f).exists():
        lines += [l.replace(" ", "\t") for l in (res / f).read_text().splitlines()]
n = sum(counts.values())
lines.append(f"summary: {n} cases, {counts['passed']} passed, {counts['skipped']} skipped, "
             f"{counts['known']} known failures, {counts['failed']} failed")
(res / "summary.txt").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
sys.exit(1 if counts["failed"] else 0)
EOF
}

main "$@"
