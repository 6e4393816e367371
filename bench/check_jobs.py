"""`check -j N` against `-j 1`: the wall time of the whole suite on one backend, the runs interleaved
(1, N, 1, N, ...), each a fresh `python -m pyggml check` as a user starts it; and whether their
reports (--json, --junit) are the same but for the timing fields. Prints a markdown table for
bench/README.md with the load average before each run.

    python bench/check_jobs.py [--backend cpu] [--jobs 2] [--repeat 3] [--wait-load 1.5]

`--default` compares `check` without `-j` (the workers the selection is worth, pyggml.testing.engine.workers.wanted)
with `-j 1` over a small, a medium and the whole selection; `--costs` measures what the rule's figures are
(CASE_SECONDS: a case's seconds by kind, from a `-j 0` run's records; START_SECONDS: what `-j 1` and `-j 2`
add to a one-case run over `-j 0`).

    python bench/check_jobs.py --default [--backend cpu] [--repeat 3]
    python bench/check_jobs.py --costs [--backend cpu] [--repeat 5]
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

# the selections of --default: a few cases, the product and attention ops (349 records), everything
SELECTIONS = {
    "small (--op add)": ["--op", "add"],
    "medium (6 ops)": [
        *("--op", "mul_mat", "--op", "soft_max_ext", "--op", "rope_ext"),
        *("--op", "flash_attn_ext", "--op", "conv_2d", "--op", "set_rows"),
    ],
    "whole suite": [],
}


def run(backend: str, jobs: int | None, folder: str, select: list[str] = ()) -> tuple[float, str, str]:
    js, xml = os.path.join(folder, f"j{jobs}.json"), os.path.join(folder, f"j{jobs}.xml")
    cmd = [sys.executable, "-m", "pyggml", "check", "--backend", backend, "-q", *select]
    cmd += [] if jobs is None else ["-j", str(jobs)]
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


def default_against_one(args: argparse.Namespace) -> None:
    from pyggml.testing.engine import cases, workers

    print(f"# cores: {os.cpu_count()}; backend {args.backend}; {args.repeat} runs each, interleaved; load average")
    rows, loads = [], []
    with tempfile.TemporaryDirectory() as folder:
        for label, select in SELECTIONS.items():
            chosen = cases.select(*_filters(select))
            worth = workers.wanted(workers.default_jobs(), chosen, [args.backend], fork=True)
            times: dict[int | None, list[float]] = {1: [], None: []}
            for _ in range(args.repeat):
                for jobs in (1, None):
                    loads.append(wait_for_load(args.wait_load) if args.wait_load else os.getloadavg()[0])
                    times[jobs].append(run(args.backend, jobs, folder, select)[0])
            one, default = statistics.median(times[1]), statistics.median(times[None])
            rows.append(
                f"| {label} | {len(chosen)} | {worth} | {one:.2f} ({', '.join(f'{t:.2f}' for t in times[1])}) | "
                f"{default:.2f} ({', '.join(f'{t:.2f}' for t in times[None])}) | {default / one:.2f}x |"
            )
    print(f"# (1 min) before the runs: {', '.join(f'{x:.1f}' for x in loads)}")
    print()
    print("| selection | cases | default workers | `-j 1` s (runs) | default s (runs) | default / `-j 1` |")
    print("|---|---|---|---|---|---|")
    print("\n".join(rows))


def _filters(select: list[str]) -> tuple[None, list[str] | None, None]:
    ops = [select[i + 1] for i in range(0, len(select), 2) if select[i] == "--op"]
    return None, ops or None, None


def costs(args: argparse.Namespace) -> None:
    """CASE_SECONDS: each case as a worker runs it (check_case: inputs, graph, compute, oracle, verdict), timed in
    this process on one backend; START_SECONDS: what `-j 1` adds to a one-case run over `-j 0`."""
    from pyggml.testing.check import check_case, make_runners
    from pyggml.testing.engine import cases

    selected = cases.select()
    runners, _ = make_runners([args.backend])
    by_kind: dict[str, list[float]] = {}
    for case in selected:
        t = time.perf_counter()
        check_case(case, runners, False)
        by_kind.setdefault("op" if isinstance(case, cases.OpCase) else "scenario", []).append(time.perf_counter() - t)
    print(f"# backend {args.backend}: seconds of one case as a worker runs it, median, mean and sum")
    for k, xs in sorted(by_kind.items()):
        print(
            f"{k}: {len(xs)} cases, median {statistics.median(xs):.4f} s, mean {statistics.fmean(xs):.4f} s, "
            f"sum {sum(xs):.1f} s"
        )
    with tempfile.TemporaryDirectory() as folder:
        one_case = ["--only", f"^{selected[0].name}$"]
        walls: dict[int, list[float]] = {0: [], 1: []}
        for _ in range(args.repeat):
            for jobs in walls:
                walls[jobs].append(run(args.backend, jobs, folder, one_case)[0])
        base = statistics.median(walls[0])
        for jobs, ts in walls.items():
            print(f"-j {jobs}, one case: median {statistics.median(ts):.2f} s (+{statistics.median(ts) - base:.2f})")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="cpu")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--wait-load", type=float, default=0, help="before each run, wait for a 1-minute load under this")
    p.add_argument("--default", action="store_true", help="the default workers against -j 1, over three selections")
    p.add_argument("--costs", action="store_true", help="measure the figures of the default's rule")
    args = p.parse_args()
    if args.default:
        return default_against_one(args)
    if args.costs:
        return costs(args)
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
