"""Threads that fit the machine: pyggml's default thread count against every count, on the build it runs in.

    python bench/threads_fit.py MODEL.gguf [--tokens 32] [--repeats 3] [--extra-bufts]

Each figure is the best of --repeats, each measurement in a fresh process (ggml's thread pools and OpenMP's are
per process), on the build of the `pyggml` this interpreter imports (`pip install .` / the wheel: portable, ggml's
own thread pool; `pip install -e .`: native, OpenMP):
- llama.cpp decoding a batch of --tokens random ids (`pyggml.llama.Context`, extra buffer types off, or on with
  --extra-bufts: CPU_REPACK, and AMX where the CPU has it) at pyggml's default and at 1 .. cores threads;
- a single-token step after that batch, the same way;
- llama.cpp's tensor split over two CPUs (`meta:cpu,cpu`) decoding the batch;
- a delta_net case of the suite (`check`'s `delta_net/*` on `meta:cpu,cpu` and on `cpu`: pyggml's own meta runner).
Prints markdown rows, dated, with the build named.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys

PROGRAM = r"""
import json, sys, time
from pyggml import llama
from pyggml.testing.engine import model_check
path, tokens, what, threads = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
extra_bufts = sys.argv[5] == "1"
kw = {} if threads == 0 else {"n_threads": threads}
backend = "meta:cpu,cpu" if what == "split" else "cpu"
model = llama.Model.for_backend(path, backend, extra_bufts)
ids = model_check.tokens_for(model.n_vocab, tokens)
with llama.Context(model, n_ctx=tokens + 8, n_batch=tokens, **kw) as ctx:
    t = time.perf_counter()
    ctx.decode(ids)
    batch = time.perf_counter() - t
    t = time.perf_counter()
    ctx.decode([ids[0]], positions=[tokens])
    step = time.perf_counter() - t
print(json.dumps({"batch": batch, "step": step}))
"""

CASES = r"""
import json, subprocess, sys, time
t = time.perf_counter()
out = subprocess.run([sys.executable, "-m", "pyggml", "check", "--op", "delta_net", "--only", sys.argv[2], "--backend", sys.argv[1], "-q", "-j", "1"],
                     capture_output=True, text=True)
print(json.dumps({"seconds": time.perf_counter() - t, "rc": out.returncode}))
"""


def child(program: str, *args: str) -> dict:
    out = subprocess.run([sys.executable, "-c", program, *args], capture_output=True, text=True, timeout=1200)
    if out.returncode != 0:
        raise SystemExit(f"child failed ({out.returncode}): {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def best(program: str, repeats: int, *args: str) -> dict:
    runs = [child(program, *args) for _ in range(repeats)]
    return {k: min(r[k] for r in runs) for k in runs[0] if isinstance(runs[0][k], float)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model")
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--label", default="", help="the build, in words (the wheel, the editable native build)")
    p.add_argument(
        "--extra-bufts",
        action="store_true",
        help="llama.cpp keeps weights in the CPU's extra buffer types (CPU_REPACK; AMX where the CPU has it), as "
        "by default; without it they are off (`--no-repack`)",
    )
    args = p.parse_args()
    extra = "1" if args.extra_bufts else "0"
    cores = len(os.sched_getaffinity(0))  # as pyggml.threads.cores, which a build before it lacks
    rows = {}
    for n in [0, *range(1, cores + 1)]:
        rows[n] = best(PROGRAM, args.repeats, args.model, str(args.tokens), "cpu", str(n), extra)
    split = {
        n: best(PROGRAM, args.repeats, args.model, str(args.tokens), "split", str(n), extra) for n in (0, 1, cores)
    }
    only = "delta_net/f32/K1/n1/kv2"  # one case, every step of the suite's checks included
    delta = {b: best(CASES, args.repeats, b, only)["seconds"] for b in ("cpu", "meta:cpu,cpu")}
    print(
        f"{args.model}, {args.tokens} tokens, {cores} cores, {datetime.date.today().isoformat()}, {args.label or 'this build'}"
        f", extra buffer types {'on' if args.extra_bufts else 'off'}"
    )
    print(f"check --only {only}: cpu {delta['cpu']:.2f} s, meta:cpu,cpu {delta['meta:cpu,cpu']:.2f} s (whole command)")
    print("| threads | batch s | step s | split batch s |")
    print("|---|---|---|---|")
    for n, r in rows.items():
        s = split.get(n)
        label = f"default ({cores})" if n == 0 else str(n)
        print(f"| {label} | {r['batch']:.3f} | {r['step']:.4f} | {s['batch']:.3f} |" if s else
              f"| {label} | {r['batch']:.3f} | {r['step']:.4f} | |")  # fmt: skip


if __name__ == "__main__":
    main()
