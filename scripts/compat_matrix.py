"""Build pyggml on other ggml and llama.cpp trees and run the suite on each: the table of docs/compat.md.

Each tree is built in its own folder under --work (its source, a virtual environment, a build folder), with
PYGGML_GGML_SOURCE and PYGGML_LLAMA_SOURCE set and PYGGML_PATCHES as given (default: none, the tree as
upstream has it). Trees:

- a llama-cpp-python version (0.3.30, 0.3.33, 0.3.35, 0.3.36): its sdist, downloaded with pip, is an archive
  of llama.cpp and its ggml of that day; pyggml builds both, libllama included;
- `ggml=DIR`: a checkout of ggml's own repository (include/ and src/ at its root), built without libllama;
- `llama=DIR`: a llama.cpp checkout (its ggml/ and libllama).

For each: the build's seconds, `info` (ggml's version, what the binding adapted), `check --backend cpu` (records
by status; its exit status), `findings` (which findings the tree has), and with --model a `check --model` of a
model `make-model` writes (where the tree's llama.cpp loads it). Prints a dated markdown table (and --json).

    python scripts/compat_matrix.py --tree 0.3.30 --tree 0.3.33 --tree 0.3.35 --tree 0.3.36 --tree ggml=DIR
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import fetch_ggml  # noqa: E402

BUILD_REQUIREMENTS = ["cffi>=1.17", "numpy>=1.24", "scikit-build-core>=0.10", "ninja", "cmake>=3.21", "pip"]


def sources(tree: str, work: Path, py: str) -> tuple[str, dict[str, str], list[str]]:
    """(name, the environment that points pyggml's build at the tree, extra pip arguments). `py` downloads an
    sdist (pip reads its metadata with scikit-build-core, which the tree's environment has)."""
    kind, _, where = tree.partition("=")
    if kind == "ggml":
        return (
            f"ggml's repository ({Path(where).name})",
            {"PYGGML_GGML_SOURCE": where},
            ["-Ccmake.define.PYGGML_LLAMA=OFF"],
        )
    if kind == "llama":
        return (
            f"llama.cpp {Path(where).name}",
            {"PYGGML_GGML_SOURCE": f"{where}/ggml", "PYGGML_LLAMA_SOURCE": where},
            [],
        )
    folder = work / f"llama-cpp-python-{tree}"
    if not (folder / "ggml" / "include" / "ggml.h").exists():
        downloads = work / "downloads"
        downloads.mkdir(parents=True, exist_ok=True)
        sdist = next(iter(downloads.glob(f"llama_cpp_python-{tree}.tar.gz")), None)
        if sdist is None:
            cmd = [py, "-m", "pip", "download", "-q", "--no-deps", "--no-build-isolation", "--no-binary"]
            subprocess.run([*cmd, "llama-cpp-python", f"llama-cpp-python=={tree}", "-d", str(downloads)], check=True)
            sdist = next(downloads.glob(f"llama_cpp_python-{tree}.tar.gz"))
        fetch_ggml.extract_folders(sdist, {"vendor/llama.cpp": folder})
    return (
        f"llama-cpp-python {tree}",
        {"PYGGML_GGML_SOURCE": str(folder / "ggml"), "PYGGML_LLAMA_SOURCE": str(folder)},
        [],
    )


def run(cmd: list[str], env: dict | None = None, cwd: Path | None = None, timeout: float = 3600) -> tuple[int, str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)
    return proc.returncode, proc.stdout + proc.stderr


def one_tree(
    tree: str, work: Path, patches: str, model: bool, cmake_args: str = "", findings_backends: tuple[str, ...] = ()
) -> dict:
    slug = tree.replace("=", "-").replace("/", "_")
    venv, build = work / f"venv-{slug}", work / f"build-{slug}"
    if not (venv / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([venv / "bin" / "python", "-m", "pip", "install", "-q", *BUILD_REQUIREMENTS], check=True)
    py = str(venv / "bin" / "python")
    name, env_vars, extra = sources(tree, work, py)
    row: dict = {"tree": name}
    # the tree alone decides: a CPU build (CMAKE_ARGS as given, not the caller's Vulkan one), its own build folder
    env = {**os.environ, **env_vars, "PYGGML_PATCHES": patches, "CMAKE_ARGS": cmake_args}
    for variable in ("PYTHONPATH", "SKBUILD_BUILD_DIR"):
        env.pop(variable, None)
    start = time.perf_counter()
    cmd = [py, "-m", "pip", "install", "-q", "--no-build-isolation", str(ROOT), f"--config-settings=build-dir={build}"]
    rc, out = run([*cmd, *extra], env)
    # a tree built before (its build folder kept) is installed again for pyggml's current code; the table keeps
    # the seconds of its first build
    first = work / f"build-seconds-{slug}.txt"
    if rc == 0 and not first.exists():
        first.write_text(str(round(time.perf_counter() - start)))
    row["build_s"] = int(first.read_text()) if first.exists() else round(time.perf_counter() - start)
    if rc != 0:
        row["error"] = "build failed: " + out.strip().splitlines()[-1][:300] if out.strip() else "build failed"
        return row
    env.pop("PYGGML_GGML_SOURCE"), env.pop("PYGGML_LLAMA_SOURCE", None)
    rc, out = run([py, "-m", "pyggml", "info", "--json"], env, cwd=work)
    if rc != 0:
        row["error"] = "import failed: " + out.strip()[-300:]
        return row
    info = json.loads(out)
    tree_record = info["ggml"]["tree"] or {}
    row["ggml"] = tree_record.get("ggml_version") or info["ggml"]["version"]
    row["libllama"] = "llama.h" in info["build"]["headers"]
    row["patches"] = [p["name"] for p in tree_record.get("patches", []) if p["state"] == "applied"]
    row["patches_skipped"] = [p["name"] for p in tree_record.get("patches", []) if p["state"] == "does not apply"]
    row["adapted"] = {k: len(v) for k, v in info["ggml"]["adapted"].items()}
    row["changed"] = info["ggml"]["adapted"]["changed"]
    report = work / f"check-{slug}.json"
    start = time.perf_counter()
    rc, out = run([py, "-m", "pyggml", "check", "--backend", "cpu", "-q", "--json", str(report)], env, cwd=work)
    row["check_s"], row["check_rc"] = round(time.perf_counter() - start), rc
    records = json.loads(report.read_text()) if report.exists() else []
    row["records"] = dict(collections.Counter(r["status"] for r in records))
    row["failing"] = sorted(r["case"] for r in records if r["status"] in ("fail", "error"))
    where = [arg for b in findings_backends for arg in ("--backend", b)]
    rc, out = run([py, "-m", "pyggml", "findings", "--json", *where], env, cwd=work)
    found = json.loads(out) if rc == 0 else []
    row["findings_present"] = [f["finding"] for f in found if f["state"] == "present"]
    row["findings_absent"] = [f["finding"] for f in found if f["state"] == "absent"]
    if model and row["libllama"]:
        gguf = work / f"model-{slug}.gguf"
        rc, out = run([py, "-m", "pyggml", "make-model", "qwen3", str(gguf)], env, cwd=work)
        if rc == 0:
            rc, out = run([py, "-m", "pyggml", "check", "--model", str(gguf), "--no-repack"], env, cwd=work)
        row["model"] = "qwen3: every node passes" if rc == 0 else f"qwen3: {out.strip().splitlines()[-1][:200]}"
    return row


def table(rows: list[dict]) -> str:
    head = [
        "| tree | ggml | libllama | build s | cpu records: pass / unsupported / known / fail / error | check exit | "
        "findings present | adapted: missing / changed / absent |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            head.append(f"| {r['tree']} | | | {r.get('build_s', '')} | {r['error']} | | | |")
            continue
        c = r["records"]
        counts = " / ".join(str(c.get(k, 0)) for k in ("pass", "unsupported", "known", "fail", "error"))
        a = r["adapted"]
        head.append(
            f"| {r['tree']} | {r['ggml']} | {'yes' if r['libllama'] else 'no'} | {r['build_s']} | {counts} | "
            f"{r['check_rc']} | {', '.join(map(str, r['findings_present'])) or 'none'} | "
            f"{a['missing']} / {a['changed']} / {a['absent']} |"
        )
    return "\n".join(head)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", required=True, help="0.3.33, ggml=DIR or llama=DIR (repeatable)")
    parser.add_argument("--work", type=Path, default=Path("build/compat"), help="where the trees are built")
    parser.add_argument("--patches", default="none", help="PYGGML_PATCHES for every tree (default none)")
    parser.add_argument("--model", action="store_true", help="also check --model a make-model qwen3 file")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    parser.add_argument("--cmake-args", default="", help="CMAKE_ARGS for every tree (default none: a CPU build)")
    parser.add_argument(
        "--findings-backend",
        action="append",
        help="backends `findings` runs on (repeatable; default cpu and meta:cpu,cpu)",
    )
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    rows = []
    for tree in args.tree:
        print(f"compat: {tree} ...", file=sys.stderr, flush=True)
        backends = tuple(args.findings_backend or ("cpu", "meta:cpu,cpu"))
        rows.append(one_tree(tree, args.work.resolve(), args.patches, args.model, args.cmake_args, backends))
        print(f"compat: {json.dumps(rows[-1])[:400]}", file=sys.stderr, flush=True)
    print(f"Measured {datetime.date.today()} (PYGGML_PATCHES={args.patches}; `check --backend cpu`):\n")
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0 if all("error" not in r and r["check_rc"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
