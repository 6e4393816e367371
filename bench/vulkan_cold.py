"""What a cold Mesa shader cache costs `check` on lavapipe, and where it goes.

Runs `python -m pyggml check --backend vulkan0` on a selection twice with MESA_SHADER_CACHE_DIR
pointing at a new empty folder: cold (every pipeline the cases need is compiled by lavapipe's LLVM)
then warm (the same folder: every pipeline comes from the cache), at each -j given. Each case's
seconds come from the --json report; cold minus warm is what compiling its pipelines cost (a case
pays for the pipelines no earlier case of its worker compiled). Prints a markdown table.

    python bench/vulkan_cold.py [--only PATTERN] [--jobs 0 --jobs 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time


def run(only: str, jobs: int, cache: str, report: str) -> float:
    env = {**os.environ, "MESA_SHADER_CACHE_DIR": cache, "GGML_VK_VISIBLE_DEVICES": "0"}
    cmd = [sys.executable, "-m", "pyggml", "check", "--backend", "vulkan0", "--only", only, "-q", "-j", str(jobs)]
    t = time.perf_counter()
    subprocess.run([*cmd, "--json", report], env=env, capture_output=True)
    return time.perf_counter() - t


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", default="^(add|soft_max|rms_norm|rope_ext|get_rows|mul_mat/(q4_0|f16|f32))/")
    p.add_argument("--jobs", type=int, action="append")
    args = p.parse_args()
    rows = []
    slow: list[tuple[float, str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for jobs in args.jobs or [0, 2]:
            cache = tempfile.mkdtemp(dir=tmp)
            load = os.getloadavg()[0]
            walls, secs = {}, {}
            for state in ("cold", "warm"):
                report = os.path.join(tmp, f"{jobs}-{state}.json")
                walls[state] = run(args.only, jobs, cache, report)
                secs[state] = {r["case"]: r["seconds"] for r in json.load(open(report)) if r["case"] != "*"}
            n = len(secs["cold"])
            size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(cache) for f in fs)
            rows.append((jobs, n, walls["cold"], walls["warm"], size, load))
            if jobs == (args.jobs or [0])[0]:
                slow = sorted(((secs["cold"][c] - secs["warm"].get(c, 0), c) for c in secs["cold"]), reverse=True)
    print(f"# lavapipe (vulkan0); selection {args.only!r}")
    print()
    print("| -j | cases | cold wall s | warm wall s | cold s per case | warm s per case | cache MiB | load |")
    print("|---|---|---|---|---|---|---|---|")
    for jobs, n, cold, warm, size, load in rows:
        print(
            f"| {jobs} | {n} | {cold:.1f} | {warm:.1f} | {cold / n:.2f} | {warm / n:.3f} | {size / 2**20:.1f} | {load:.1f} |"
        )
    print()
    print("The cases whose pipelines cost most to compile (cold - warm seconds, first -j):")
    print()
    for d, c in slow[:12]:
        print(f"    {d:7.2f}  {c}")


if __name__ == "__main__":
    main()
