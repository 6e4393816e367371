"""`check --mode perf` against test-backend-ops' own perf mode on the same graphs.

The cases of the given ops whose graph is one node computed from its inputs (no layout views) are
written in test-backend-ops' `--test-file` format (one node a line: op, type, ne, op_params, each
source's type, ne and nb), so test-backend-ops builds the very node pyggml's case builds. Both then
time it the same way (the node repeated in one graph, ggml's compute timed for about a second) on
the CPU with the same threads, interleaved: test-backend-ops, pyggml, test-backend-ops, pyggml...
Prints a markdown table of us/run (median of the rounds) for bench/README.md.

Build test-backend-ops from the pinned sdist first (bench/README.md says how), then:

    python bench/perf_vs_tbo.py --tbo build/tbo/test-backend-ops [--op add --op mul_mat ...] [--only REGEX] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import tempfile

from pyggml.backend import cpu_backend
from pyggml.testing.engine import cases, perf, tbo

# ops whose inputs are all floats: test-backend-ops fills a generic node's sources with random values, which
# would make indices (get_rows, rope's positions) point anywhere
OPS = ["add", "mul", "scale", "silu", "soft_max", "rms_norm", "mul_mat", "cpy", "sum_rows"]


def single_node_cases(ops: list[str]) -> list[tuple[cases.OpCase, str]]:
    """(case, its node as a --test-file line) for the cases whose graph is one node of its inputs."""
    lines = [(c, tbo.test_file_line(c)) for c in cases.select(None, ops)]
    return [(c, line) for c, line in lines if isinstance(c, cases.OpCase) and line is not None]


def tbo_times(exe: str, lines: list[str], threads: int) -> list[float | None]:
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write("\n".join(lines) + "\n")
    try:
        res = subprocess.run([exe, "perf", "-b", "CPU", "--test-file", f.name], capture_output=True, text=True)
    finally:
        os.unlink(f.name)
    times: list[float | None] = []
    for line in res.stdout.splitlines():
        if "not supported" in line and "(" in line:
            times.append(None)
        m = re.search(r"(\d+) runs -\s+([\d.]+) us/run", line)
        if m:
            times.append(float(m.group(2)))
    if len(times) != len(lines):
        raise RuntimeError(f"test-backend-ops gave {len(times)} results for {len(lines)} nodes:\n{res.stdout[-3000:]}")
    return times


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tbo", required=True, help="the test-backend-ops executable")
    p.add_argument("--op", action="append", help=f"ops (default: {', '.join(OPS)})")
    p.add_argument("--only", default=None, help="cases whose name matches this regular expression")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--seconds", type=float, default=1.0)
    args = p.parse_args()
    threads = max(1, (os.cpu_count() or 1) // 2)  # test-backend-ops' CPU threads
    chosen = [(c, line) for c, line in single_node_cases(args.op or OPS) if re.search(args.only or "", c.name)]
    ours: list[list[float]] = [[] for _ in chosen]
    theirs: list[list[float]] = [[] for _ in chosen]
    loads = []
    for _ in range(args.rounds):
        loads.append(os.getloadavg()[0])
        for i, t in enumerate(tbo_times(args.tbo, [line for _, line in chosen], threads)):
            if t is not None:
                theirs[i].append(t)
        loads.append(os.getloadavg()[0])
        be = cpu_backend(threads)
        for i, (c, _) in enumerate(chosen):
            rec = perf.time_case(c, be, args.seconds)
            if rec.status == "pass":
                ours[i].append(rec.us_per_run)
    print(f"# CPU, {threads} thread(s); {args.rounds} rounds, interleaved; load average (1 min) at each start: ")
    print("# " + ", ".join(f"{x:.1f}" for x in loads))
    print()
    print("| case | pyggml us/run | test-backend-ops us/run | pyggml / tbo |")
    print("|---|---|---|---|")
    ratios = []
    for (c, _), a, b in zip(chosen, ours, theirs):
        if not a or not b:
            print(
                f"| {c.name} | {'-' if not a else f'{statistics.median(a):.3f}'} | "
                f"{'-' if not b else f'{statistics.median(b):.3f}'} | - |"
            )
            continue
        r = statistics.median(a) / statistics.median(b)
        ratios.append(r)
        print(f"| {c.name} | {statistics.median(a):.3f} | {statistics.median(b):.3f} | {r:.2f} |")
    if ratios:
        within = sum(abs(r - 1) <= 0.1 for r in ratios)
        print()
        print(f"{len(ratios)} graphs: median ratio {statistics.median(ratios):.2f}, {within} within 10 %")


if __name__ == "__main__":
    main()
