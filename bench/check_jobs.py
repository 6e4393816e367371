"""`check -j N` against `-j 1`: the wall time of the whole suite on one backend, the runs interleaved
(1, N, 1, N, ...), each a fresh `python -m pyggml check` as a user starts it; and whether their
reports (--json, --junit) are the same but for the timing fields. Prints a markdown table for
bench/README.md with the load average before each run.

    python bench/check_jobs.py [--backend cpu] [--jobs 2] [--repeat 3] [--wait-load 1.5]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time


def run(backend: str, jobs: int, folder: str) -> tuple[float, str, str]:
    js, xml = os.path.join(folder, f"j{jobs}.json"), os.path.join(folder, f"j{jobs}.xml")
    cmd = [sys.executable, "-m", "pyggml", "check", "--backend", backend, "-q", "-j", str(jobs)]
    t = time.perf_counter()
    subprocess.run([*cmd, "--json", js, "--junit", xml], check=True, capture_output=True)
    return time.perf_counter() - t, js, xml


def same_reports(a: tuple[float, str, str], b: tuple[float, str, str]) -> bool:
    """--json without each record's seconds, --junit without its time and timestamp attributes."""

    def js(path: str) -> list[dict]:
        return [{k: v for k, v in r.items() if k != "seconds"} for r in json.load(open(path))]

    def xml(path: str) -> str:
        return re.sub(r' (time|timestamp)="[^"]*"', "", open(path).read())

    return js(a[1]) == js(b[1]) and xml(a[2]) == xml(b[2])


def wait_for_load(limit: float) -> float:
    while os.getloadavg()[0] > limit:
        time.sleep(20)
    return os.getloadavg()[0]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="cpu")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--wait-load", type=float, default=0, help="before each run, wait for a 1-minute load under this")
    args = p.parse_args()
    times: dict[int, list[float]] = {1: [], args.jobs: []}
    loads: list[float] = []
    same = True
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(args.repeat):
            runs = {}
            for jobs in (1, args.jobs):
                loads.append(wait_for_load(args.wait_load) if args.wait_load else os.getloadavg()[0])
                runs[jobs] = run(args.backend, jobs, folder)
                times[jobs].append(runs[jobs][0])
            same &= same_reports(runs[1], runs[args.jobs])
    one, many = statistics.median(times[1]), statistics.median(times[args.jobs])
    print(f"# cores: {os.cpu_count()}; backend {args.backend}; {args.repeat} runs each, interleaved; load average")
    print(f"# (1 min) before the runs: {', '.join(f'{x:.1f}' for x in loads)}")
    print(f"# reports (--json, --junit) the same but for timing fields: {'yes' if same else 'NO'}")
    print()
    print("| jobs | wall s (median) | runs (s) | x -j 1 |")
    print("|---|---|---|---|")
    for jobs, ts in times.items():
        print(
            f"| {jobs} | {statistics.median(ts):.1f} | {', '.join(f'{t:.1f}' for t in ts)} | "
            f"{statistics.median(ts) / one:.2f}x |"
        )
    print()
    print(f"-j {args.jobs} / -j 1: {many / one:.2f}")


if __name__ == "__main__":
    main()
