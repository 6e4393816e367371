"""Split-equivalence fuzz: a random small graph with randomly split weights gives the same
result on a meta device as on one device.

    python -m pyggml.meta_fuzz [--seed 0] [--trials 20] [--devices cpu,cpu]

Each trial is a chain of ops the meta backend has split rules for (mul_mat, add, mul,
scale, unary ops, rms_norm, soft_max, cont of a transpose), its weights split on axis 0,
axis 1 or mirrored. A trial runs in its own process: when ggml cannot split a combination
it aborts, and the trial is reported as `unsplittable` with the op chain, the splits and
ggml's message, never skipped silently.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from typing import Any

import numpy as np

from pyggml._args import at_least

UNARY = ("silu", "relu", "tanh", "gelu", "neg")
SPLITS = ("mirrored", 0, 1)


def make_trial(seed: int) -> dict:
    """A random op chain; dims are multiples of the device count so even splits exist."""
    rng = np.random.default_rng(seed)
    K, M, P, N = (int(x) * 4 for x in rng.integers(1, 5, 4))
    steps: list[dict[str, Any]] = [{"op": "mul_mat", "w": "w1", "split": SPLITS[rng.integers(3)]}]
    for _ in range(int(rng.integers(1, 4))):
        kind = ["unary", "scale", "add", "mul", "rms_norm", "soft_max", "transpose"][rng.integers(7)]
        step: dict[str, Any] = {"op": kind}
        if kind == "unary":
            step["fn"] = UNARY[rng.integers(len(UNARY))]
        if kind in ("add", "mul"):
            step["w"] = f"b{len(steps)}"
            step["split"] = SPLITS[rng.integers(2)]  # a bias vector: mirrored or axis 0
        steps.append(step)
    if rng.integers(2):
        steps.append({"op": "mul_mat", "w": "w2", "split": SPLITS[rng.integers(3)]})
    return {"seed": seed, "K": K, "M": M, "P": P, "N": N, "steps": steps}


def describe(trial: dict) -> str:
    parts = []
    for s in trial["steps"]:
        name = s.get("fn", s["op"])
        parts.append(f"{name}({s['split']})" if "split" in s else name)
    return " -> ".join(parts)


def _weights(trial: dict) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(trial["seed"] + 1000)
    K, M, P = trial["K"], trial["M"], trial["P"]
    out = {}
    width = M
    for s in trial["steps"]:
        if s["op"] == "mul_mat":
            rows = M if s["w"] == "w1" else P
            cols = K if s["w"] == "w1" else width
            out[s["w"]] = rng.standard_normal((rows, cols)).astype(np.float32) / np.sqrt(cols)
            width = rows
        elif s["op"] in ("add", "mul"):
            out[s["w"]] = rng.standard_normal((width,)).astype(np.float32)
        elif s["op"] == "transpose":
            width = trial["N"]
    return out


def run_trial(trial: dict, runner_name: str) -> np.ndarray:
    """Build and compute the trial's graph on one runner (cpu, or meta:...)."""
    import pyggml as gg
    from pyggml.meta import Split

    weights = _weights(trial)
    runner = gg.Runner(runner_name)
    splits = {s["w"]: s["split"] for s in trial["steps"] if "w" in s}
    if runner.meta is not None:
        n = runner.n_devices

        def policy(t):
            axis = splits.get(t.name, "mirrored")
            return Split(axis) if axis == "mirrored" else Split.even(axis, t.ne[axis], n)
        runner.set_policy(policy)
    wctx = gg.Context()
    tensors = {name: wctx.tensor("f32", w.shape, name) for name, w in weights.items()}
    runner.backend.alloc_tensors(wctx)
    for name, w in weights.items():
        tensors[name].set(w)
    ctx = gg.Context()
    x = ctx.tensor("f32", (trial["N"], trial["K"]), "x", input=True)
    cur = x
    for s in trial["steps"]:
        op = s["op"]
        if op == "mul_mat":
            cur = ctx.mul_mat(tensors[s["w"]], cur)
        elif op == "unary":
            cur = getattr(ctx, s["fn"])(cur)
        elif op == "scale":
            cur = ctx.scale(cur, 0.5)
        elif op in ("add", "mul"):
            cur = getattr(ctx, op)(cur, tensors[s["w"]])
        elif op == "rms_norm":
            cur = ctx.rms_norm(cur, 1e-6)
        elif op == "soft_max":
            cur = ctx.soft_max(cur)
        elif op == "transpose":
            cur = ctx.cont(ctx.transpose(cur))
    graph = gg.Graph(ctx).build_forward_expand(cur)
    X = np.random.default_rng(trial["seed"] + 2000).standard_normal((trial["N"], trial["K"])).astype(np.float32)
    [out] = runner.run(graph, {x: X}, [cur])
    return out


def run_in_child(trial: dict, devices: str, timeout: float = 120) -> dict:
    """One trial in a child process: pass / fail (with its NMSE) / unsplittable (with ggml's message)."""
    proc = subprocess.run([sys.executable, "-m", "pyggml.testing.meta_fuzz", "--one", json.dumps(trial), "--devices", devices],
                          capture_output=True, text=True, timeout=timeout, env=os.environ.copy())
    record = {"seed": trial["seed"], "graph": describe(trial)}
    if proc.returncode == 0 and proc.stdout.strip():
        record.update(json.loads(proc.stdout.strip().splitlines()[-1]))
        return record
    # only ggml's own refusal counts as unsplittable: in-process (Unsplittable) or an abort of its
    # meta code; any other error or death is a failure of the trial
    m = re.search(r"ggml aborted: (.*ggml-backend-meta.*)", proc.stderr)
    last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    if m:
        record.update(status="unsplittable", message=m.group(1).split(": ", 1)[-1])
    else:
        record.update(status="fail", message=f"exit {proc.returncode}: {last}")
    return record


def _child(trial_json: str, devices: str) -> int:
    from pyggml.errors import Unsplittable
    from pyggml.testing.cases import nmse
    trial = json.loads(trial_json)
    single = run_trial(trial, "cpu")
    try:
        split = run_trial(trial, f"meta:{devices}")
    except Unsplittable as e:
        print(json.dumps({"status": "unsplittable", "message": str(e)}))
        return 0
    err = nmse(split, single)
    print(json.dumps({"status": "pass" if err <= 1e-6 else "fail", "error": err}))
    return 0


def fuzz(seed: int, trials: int, devices: str) -> list[dict]:
    return [run_in_child(make_trial(seed + i), devices) for i in range(trials)]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=at_least(0), default=0)
    parser.add_argument("--trials", type=at_least(0), default=20)
    parser.add_argument("--devices", default="cpu,cpu", help="the meta device's devices (default cpu,cpu)")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a single trial, in a child process
    args = parser.parse_args(argv)
    if args.one:
        return _child(args.one, args.devices)
    records = fuzz(args.seed, args.trials, args.devices)
    for r in records:
        detail = f"nmse {r['error']:.1e}" if r.get("error") is not None else r.get("message", "")
        print(f"{r['seed']:>5}  {r['status']:<12} {r['graph']}  [{detail}]")
    counts = {s: sum(r["status"] == s for r in records) for s in ("pass", "fail", "unsplittable")}
    print("  ".join(f"{k}: {v}" for k, v in counts.items()))
    return 1 if counts["fail"] else 0


if __name__ == "__main__":
    sys.exit(main())
