"""What a checked conversation and a comparison cost, against llama.cpp's own decode of the same tokens.

    python bench/conversation_cost.py [--arch qwen3] [--like qwen3-0.6b] [--type q4_k_m] [--prompt-tokens 32]
                                      [--generate 4] [--folder DIR] [--threads N]

Makes `make-model ARCH FILE [--like PRESET] --type TYPE` (kept in --folder), then, each in its own process:
- llama.cpp alone: the conversation (`pyggml.llama.converse`: a prompt of N random ids, then --generate single
  token steps) with no observer; the best of three;
- the same conversation under the node checker (`check --model --generate` as `run_model` does it), the best of
  three, each with a checker of its own: per step, its seconds against llama.cpp's own step;
- the floor of a checked step: every weight of the file (each tensor of two dimensions or more) decoded once and
  kept in float32, as the checker keeps a conversation's weights, times one column in BLAS (what the product
  oracles of a single-token step compute, with nothing else), the best of three;
- a comparison of the file with itself on the CPU as `compare` makes it (`pyggml.llama.record_pair`: the two
  runs in turns, every node of both read and matched) against the two plain runs it compares, and against the
  same comparison of the logits only (the two runs as `compare --logits-only` makes them: each loads its
  model); each the best of three, alternating.
The CPU's extra buffer types are off everywhere (`--no-repack`, docs/findings.md 37). Prints markdown rows, dated.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys

PROGRAM = """
import json, sys, time
from pyggml import llama
from pyggml.testing.engine import model_check
path, n, gen, mode, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
threads = threads or None
model = llama.Model.load(path, n_gpu_layers=0, devices=[], use_extra_bufts=False)
script = llama.Script.from_tokens(model_check.tokens_for(model.n_vocab, n), generate=gen)
args = script.context_args(model)

def steps(on_step=None, observe=None):
    marks = []
    with llama.Context(model, **args, observe=observe, n_threads=threads) as ctx:
        def mark(label):
            marks.append((label, time.perf_counter()))
            if on_step:
                on_step(label)
        llama.converse(ctx, script, on_step=mark)
        marks.append(("end", time.perf_counter()))
    return {a[0]: b[1] - a[1] for a, b in zip(marks, marks[1:])}

if mode == "plain":
    best = None
    for _ in range(3):
        got = steps()
        best = got if best is None else {k: min(v, got[k]) for k, v in best.items()}
    print(json.dumps(best))
elif mode == "floor":
    import numpy as np
    from pyggml import gguf, types
    info = gguf.read_info(path)
    data = np.memmap(path, dtype=np.uint8, mode="r")
    kept = [  # as the checker keeps a conversation's weights (nodes.SourceCache): decoded once, in float32
        types.decode(w.type, data[info.data_offset + w.offset :][: w.nbytes], w.shape).reshape(-1, w.ne[0])
        for w in info.tensor_info.values() if len(w.shape) >= 2
    ]
    columns = {k: np.ones(k, np.float32) for k in {w.shape[1] for w in kept}}
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        for w in kept:
            w @ columns[w.shape[1]]
        best = min(best, time.perf_counter() - t)
    print(json.dumps({"seconds": best, "gb": sum(w.nbytes for w in kept) / 1e9}))
elif mode == "checked":
    from pyggml.testing.engine.nodes import NodeChecker, file_weights
    best = None
    for _ in range(3):  # a fresh checker each time, as each `check --model` run has: its weights decoded again
        checker = NodeChecker(weights=file_weights(path))
        got = steps(observe=checker)
        best = got if best is None else {k: min(v, got[k]) for k, v in best.items()}
    failed = sum(not v.ok for v in checker.verdicts)
    print(json.dumps({**best, "_checked": sum(v.comparison is not None for v in checker.verdicts), "_failed": failed}))
else:
    model.close()

    def compare(nodes):  # as the command makes them: every node in turns (record_pair), or the logits alone
        t = time.perf_counter()
        if nodes:
            a, b = llama.record_pair(path, path, script, "cpu", use_extra_bufts=False, n_threads=threads)
        else:
            a = llama.record(path, script, "cpu", nodes=False, use_extra_bufts=False, n_threads=threads)
            b = llama.record(path, script, "cpu", against=a, nodes=False, use_extra_bufts=False, n_threads=threads)
        return a, b, llama.held_against(a, b), time.perf_counter() - t

    # the two runs alone, as `compare --logits-only` makes them (each loads its model), against every node
    # compared; each the best of three, alternating
    runs, best = float("inf"), None
    for _ in range(3):
        runs = min(runs, compare(False)[3])
        got = compare(True)
        best = got if best is None or got[3] < best[3] else best
    a, b, cmp, total = best
    print(json.dumps({"a": a.seconds, "b": b.seconds, "total": total, "runs": runs, "nodes": len(cmp.nodes)}))
"""


def child(path: str, n: int, gen: int, mode: str, threads: int) -> dict:
    from pyggml.testing.engine.model_check import CHILD_ENV

    env = {**CHILD_ENV, **os.environ}  # the environment `check --model` gives its children, where not set here
    out = subprocess.run(
        [sys.executable, "-c", PROGRAM, path, str(n), str(gen), mode, str(threads)], capture_output=True, text=True,
        env=env,
    )  # fmt: skip
    if out.returncode != 0:
        raise SystemExit(f"{mode} failed ({out.returncode}): {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--arch", default="qwen3")
    p.add_argument("--like", default="qwen3-0.6b", help="a make-model preset ('' for llama.cpp's tiny model)")
    p.add_argument("--type", default="q4_k_m")
    p.add_argument("--prompt-tokens", type=int, default=32)
    p.add_argument("--generate", type=int, default=4)
    p.add_argument("--threads", type=int, default=0, help="the CPU's threads (0: llama.cpp's default)")
    p.add_argument("--folder", default="bench-models")
    args = p.parse_args()
    os.makedirs(args.folder, exist_ok=True)
    path = os.path.join(args.folder, f"{args.arch}-{args.like or 'tiny'}-{args.type}.gguf")
    if not os.path.exists(path):
        cmd = [sys.executable, "-m", "pyggml", "make-model", args.arch, path, "--type", args.type]
        subprocess.run(cmd + (["--like", args.like] if args.like else []), check=True)
    n, gen = args.prompt_tokens, args.generate
    plain = child(path, n, gen, "plain", args.threads)
    checked = child(path, n, gen, "checked", args.threads)
    both = child(path, n, gen, "compare", args.threads)
    floor = child(path, n, gen, "floor", args.threads)
    today = datetime.date.today().isoformat()
    print(f"{os.path.basename(path)}, {n}-token prompt, {gen} steps, {today}:")
    print("| step | llama.cpp s | checked s | ratio |")
    print("|---|---|---|---|")
    for label, seconds in plain.items():
        print(f"| {label} | {seconds:.3f} | {checked[label]:.3f} | {checked[label] / seconds:.1f}x |")
    plain_total = sum(plain.values())
    print(f"checked nodes {checked['_checked']}, failed {checked['_failed']}")
    last = plain[f"step {gen}"] if gen else None
    print(
        f"a step's floor ({floor['gb']:.2f} GB of float32 weights times one column): {floor['seconds']:.3f} s"
        + (f", {floor['seconds'] / last:.1f}x llama.cpp's last step" if last else "")
    )
    print(
        f"compare (file against itself on the CPU, {both['nodes']} nodes matched): {both['total']:.2f} s in all, "
        f"the two conversations {both['a']:.2f} + {both['b']:.2f} s, against 2 x {plain_total:.2f} s plain: "
        f"{both['total'] / (2 * plain_total):.2f}x; against the two runs alone, loads included (`--logits-only`): "
        f"{both['runs']:.2f} s, {both['total'] / both['runs']:.2f}x"
    )


if __name__ == "__main__":
    main()
