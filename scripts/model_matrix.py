"""llama.cpp's models node by node, as a matrix: each architecture `make-model` writes, quantized to each file
type by llama.cpp's own quantizer, checked by `check --model` on each backend (every node against its oracle).
Prints a markdown table (one row per architecture, type and backend: nodes checked, failed, without an oracle,
unread, seconds, or why the run could not be had), dated, for docs/llama.md.

    python scripts/model_matrix.py [--arch ARCH]... [--type TYPE]... [--backend cpu]... [--no-repack] [--tokens 8]

Defaults: every architecture of `make-model`, the types below, the CPU. Each (model, backend) runs in its own
`check --model` process, so a death costs one row. A type llama.cpp's quantizer refuses for a model (the IQ1/IQ2
types without an importance matrix) is a row saying so, never a pass.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter

TYPES = [
    "f32",
    "bf16",
    "f16",
    "q8_0",
    "q6_k",
    "q5_k_m",
    "q5_0",
    "q4_k_m",
    "q4_0",
    "q4_1",
    "iq4_nl",
    "iq4_xs",
    "q3_k_m",
    "q2_k",
]


def make(arch: str, file_type: str, folder: str, generator: str | None) -> tuple[str | None, str]:
    path = os.path.join(folder, f"{arch}-{file_type}.gguf")
    cmd = [sys.executable, "-m", "pyggml", "make-model", arch, path, "--type", file_type]
    cmd += ["--generator", generator] if generator else []
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        return None, proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"
    return path, ""


def check(path: str, backend: str, tokens: int, no_repack: bool) -> tuple[str, bool]:
    """One row's cells after the backend's name, and whether every node passed and none was left unread."""
    cmd = [sys.executable, "-m", "pyggml", "check", "--model", path, "--backend", backend, "--tokens", str(tokens)]
    cmd += ["--json", "-", "-q"] + (["--no-repack"] if no_repack else [])
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.perf_counter() - t
    try:
        records = [r for r in json.loads(proc.stdout) if r["backend"] == backend]
    except json.JSONDecodeError:
        last = proc.stderr.strip().splitlines()[-1][:120] if proc.stderr.strip() else "no report"
        return f"| - | - | - | - | - | {seconds:.1f} | {last} |", False
    counts: Counter = Counter()
    errors = []
    for r in records:
        kind, msg = r["case"].rsplit("/", 1)[-1], r["message"]
        if r["status"] == "error" or (kind == "logits" and r["status"] != "pass"):
            errors.append(f"{kind}: {msg}"[:140])
            continue
        if kind == "logits":
            continue
        counts["kinds"] += 1
        counts["nodes"] += int(msg.split()[0]) if msg.split() and msg.split()[0].isdigit() else 0
        counts["failed"] += r["status"] == "fail"
        counts["no oracle"] += r["status"] == "skipped" and "oracle" in msg
        counts["unread"] += "unread" in msg
    ok = not errors and counts["kinds"] > 0 and not (counts["failed"] or counts["no oracle"] or counts["unread"])
    cells = (
        f"| {counts['kinds']} | {counts['nodes']} | {counts['failed']} | {counts['no oracle']} | {counts['unread']} | "
        f"{seconds:.1f} | {'; '.join(errors)} |"
    )
    return cells, ok


def main() -> int:
    from pyggml.models import llama_archs
    from pyggml.models.make_model import architectures

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--arch",
        action="append",
        help="an architecture (repeatable; default: pyggml's own; `all`: every one of make-model --list)",
    )
    p.add_argument("--generator", choices=("pyggml", "llama.cpp"), help="make-model --generator")
    p.add_argument(
        "--type", action="append", help=f"a file type (repeatable; default: {' '.join(TYPES)}; `all`: every one)"
    )
    p.add_argument("--backend", action="append", help="a backend (repeatable; default: cpu)")
    p.add_argument("--tokens", type=int, default=8)
    p.add_argument("--no-repack", action="store_true", help="check --model --no-repack")
    args = p.parse_args()
    archs, types, backends = args.arch or architectures(), args.type or TYPES, args.backend or ["cpu"]
    if types == ["all"]:
        from pyggml import llama

        types = list(llama.file_types())
    if archs == ["all"]:
        archs = llama_archs.names()
        archs += [a for a in architectures() if a not in archs and args.generator != "llama.cpp"]
    print(f"# {datetime.date.today()}: python scripts/model_matrix.py {' '.join(sys.argv[1:])}")
    print(
        "| arch | type | backend | op kinds | nodes | kinds failed | kinds without oracle | kinds unread | s | error |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    bad = 0
    with tempfile.TemporaryDirectory() as folder:
        for arch in archs:
            for file_type in types:
                path, why = make(arch, file_type, folder, args.generator)
                for backend in backends:
                    if path is None:
                        print(f"| {arch} | {file_type} | {backend} | - | - | - | - | - | - | not made: {why[:120]} |")
                        continue
                    cells, ok = check(path, backend, args.tokens, args.no_repack)
                    bad += not ok
                    print(f"| {arch} | {file_type} | {backend} " + cells, flush=True)
    print(f"\n{bad} rows not wholly passed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
