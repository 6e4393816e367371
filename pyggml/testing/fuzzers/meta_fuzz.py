"""Split-equivalence fuzz: a random small graph with randomly split weights gives the same
result on a meta device as on one device.

    python -m pyggml meta-fuzz [--seed 0] [--trials 20] [--devices cpu,cpu] [--views] [--in-process]

Each trial is a chain of ops the meta backend has split rules for (mul_mat, add, mul,
scale, unary ops, rms_norm, soft_max, cont of a transpose), its weights split on axis 0,
axis 1 or mirrored. A third of the trials split the first weight in several segments, each
repeated (llama.cpp's fused [q | k | v] splits: every device holds several ranges of the
axis, `seg1` below, the layout after `|`), and biases or the second weight either the same
way (`seg0`: compatible) or otherwise. About half the trials end in views of the chain's (split) result:
view_1d, view_2d or view_3d at random offsets and extents, some straddling the devices'
shares, some strided (every s-th element, or a field of each group of a row), each made
contiguous and scaled. A trial runs in its own process (pyggml.testing.engine.child): when ggml cannot split a combination
(or pyggml refuses a view ggml would map wrongly) the trial is reported as `unsplittable`
with the op chain, the splits and the reason, never skipped silently.

Then the layouts matrix (`--layouts N`, `fuzz_layouts`): every op it knows with every pair of source layouts
(mirrored, an input, split along axis 0 or 1 evenly or not, partial), each against NumPy, in child processes of
64 trials; a batch whose child dies is run again one trial per child, so a death is its trial's record.
"""

from __future__ import annotations

import argparse
import json
import re
from typing import TYPE_CHECKING, Any

import numpy as np

from pyggml._args import at_least
from pyggml.target import META_PREFIX
from pyggml.testing.check_options import meta_devices, unavailable
from pyggml.testing.engine import child

if TYPE_CHECKING:
    from pyggml.context import Context
    from pyggml.meta import Split
    from pyggml.tensor import Tensor

UNARY = ("silu", "relu", "tanh", "gelu", "neg")
SPLITS = ("mirrored", 0, 1)


# a split run against the CPU's or NumPy's: the same kernels, an F32 sum split across the devices (reassociation)
SPLIT_NMSE = 1e-6


def split_status(err: float, devices: str) -> str:
    """A trial's "pass" or "fail", by the one judge (verdict.rule): its NMSE within SPLIT_NMSE."""
    from math import inf

    from pyggml.testing.engine import verdict

    rules = verdict.Policy(SPLIT_NMSE, inf)
    record = verdict.rule("meta-fuzz", f"meta:{devices}", [verdict.within(err, SPLIT_NMSE, "NMSE")], rules)
    return "fail" if record.status.bad else "pass"


def make_trial(seed: int, views: bool = False, segments: bool = True) -> dict:
    """A random op chain; dims are multiples of the device count so even splits exist. With views, the
    chain keeps a split result (a weight split on axis 1, then ops that keep the split) and always
    ends in views of it. With segments, a third of the trials split the first weight's M outputs in
    several segments (drawn from a stream of their own: the rest of a trial is as without)."""
    rng = np.random.default_rng(seed)
    K, M, P, N = (int(x) * 4 for x in rng.integers(1, 5, 4))
    if views:
        steps: list[dict[str, Any]] = [{"op": "mul_mat", "w": "w1", "split": 1}]
        for _ in range(int(rng.integers(0, 3))):
            kind = ["unary", "scale", "transpose"][rng.integers(3)]
            steps.append({"op": kind, "fn": UNARY[rng.integers(len(UNARY))]} if kind == "unary" else {"op": kind})
        steps.append(_views_step(rng))
        return _segmented({"seed": seed, "K": K, "M": M, "P": P, "N": N, "steps": steps}, segments)
    steps = [{"op": "mul_mat", "w": "w1", "split": SPLITS[rng.integers(3)]}]
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
    if rng.integers(2):
        steps.append(_views_step(rng))
    return _segmented({"seed": seed, "K": K, "M": M, "P": P, "N": N, "steps": steps}, segments)


def _segmented(trial: dict, segments: bool) -> dict:
    """A third of the trials: w1 split along its outputs (axis 1) in segments, `layout`: [extent, repeats]
    per segment (extents times repeats add up to M) and, per segment, 7 cut points in [0, 1) of which a
    meta device of n devices takes the first n-1 (a device's share may be empty); each bias and w2 then
    takes that layout (`seg0`) half of the time."""
    rng = np.random.default_rng([trial["seed"], 1])
    if not segments or rng.integers(3):
        return trial
    M = trial["M"]
    while True:
        n = int(rng.integers(1, 4))
        repeats, extents = rng.integers(1, 4, n), rng.integers(1, M + 1, n)
        if int((repeats * extents).sum()) == M and (n > 1 or repeats[0] > 1):
            break
    trial["layout"] = [[int(e), int(r)] for e, r in zip(extents, repeats)]
    trial["cuts"] = [[round(float(u), 4) for u in rng.random(7)] for _ in range(n)]
    for step in trial["steps"]:
        if step.get("w") == "w1":
            step["split"] = "seg1"
        elif "w" in step and rng.integers(2):
            step["split"] = "seg0"
    return trial


def layout_split(trial: dict, axis: int, extent: int, n_devices: int) -> "Split":
    """The trial's segmented split along axis for n devices (an even one when the tensor's extent along the
    axis is not the layout's M: after a transpose)."""
    from pyggml.meta import Split

    if extent != trial["M"]:
        return Split.even(axis, extent, n_devices)
    sizes = []
    for (e, _), cuts in zip(trial["layout"], trial["cuts"]):
        points = [0, *sorted(int(u * e) for u in cuts[: n_devices - 1]), e]
        sizes.append(tuple(b - a for a, b in zip(points, points[1:])))
    return Split(axis, tuple(sizes), tuple(r for _, r in trial["layout"]))


def _views_step(rng) -> dict:
    """1-3 views of the result: fractions, resolved against its shape when the graph is built."""
    return {
        "op": "views",
        "views": [
            {"kind": VIEWS[rng.integers(len(VIEWS))], "u": [round(float(f), 4) for f in rng.random(6)]}
            for _ in range(int(rng.integers(1, 4)))
        ],
    }


VIEWS = ("1d", "2d", "2d", "strided", "3d")


def _pick(u: float, n: int) -> int:
    """0..n-1 from a fraction in [0, 1)."""
    return min(int(u * n), n - 1)


def make_view(ctx: Context, cur: Tensor, spec: dict) -> Tensor:
    """One view of cur (2-D, contiguous) from its fractions: the same view on every runner."""
    ne0, ne1 = cur.ne[0], cur.ne[1]
    es, row = cur.element_size, cur.nb[1]
    u = spec["u"]
    whole = u[5] < 0.5  # half the views keep the rows whole (the split axis, where it is axis 0)
    if spec["kind"] == "1d":
        if whole:  # whole rows
            n = ne0 * (1 + _pick(u[0], ne1))
            return ctx.view_1d(cur, n, _pick(u[1], ne1 - n // ne0 + 1) * row)
        n = 1 + _pick(u[0], ne0 * ne1)
        return ctx.view_1d(cur, n, _pick(u[1], ne0 * ne1 - n + 1) * es)
    if spec["kind"] == "2d":
        w, h = (ne0 if whole else 1 + _pick(u[0], ne0)), 1 + _pick(u[1], ne1)
        off1 = _pick(u[3], ne1 - h + 1) * ne0
        if u[4] < 0.3:  # a block of a row's equal parts, e.g. llama.cpp's q/k/v
            parts = 2 + int(u[2] * 3)
            if ne0 % parts == 0:
                w = ne0 // parts
                return ctx.view_2d(cur, w, h, row, (_pick(u[4] / 0.3, parts) * w + off1) * es)
        return ctx.view_2d(cur, w, h, row, (_pick(u[2], ne0 - w + 1) + off1) * es)
    if spec["kind"] == "strided":  # every s-th element of a row, from a phase
        s = 1 + _pick(u[0], 4)
        phase = _pick(u[1], s)
        n = (ne0 - phase + s - 1) // s
        n = n if whole else 1 + _pick(u[2], n)
        h = 1 + _pick(u[3], ne1)
        return ctx.view_3d(cur, 1, n, h, s * es, row, (phase + _pick(u[4], ne1 - h + 1) * ne0) * es)
    # 3d: each row as groups of G elements, a field of each group (delta-net's q/k/v heads)
    divisors = [g for g in range(1, ne0 + 1) if ne0 % g == 0]
    G = divisors[_pick(u[0], len(divisors))]
    w = 1 + _pick(u[1], G)
    field = _pick(u[2], G - w + 1)
    groups = 1 + _pick(u[3], ne0 // G) if u[5] < 0.3 else ne0 // G
    g0 = _pick(u[4], ne0 // G - groups + 1)
    return ctx.view_3d(cur, w, groups, ne1, G * es, row, (g0 * G + field) * es)


def describe(trial: dict) -> str:
    parts = []
    for s in trial["steps"]:
        if s["op"] == "views":
            parts.append("views(" + ",".join(v["kind"] for v in s["views"]) + ")")
            continue
        name = s.get("fn", s["op"])
        parts.append(f"{name}({s['split']})" if "split" in s else name)
    layout = " | " + " ".join(f"{e}x{r}" for e, r in trial["layout"]) if "layout" in trial else ""
    return " -> ".join(parts) + layout


def _weights(trial: dict) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(trial["seed"] + 1000)
    K, M, P = trial["K"], trial["M"], trial["P"]
    out = {}
    width, other = M, trial["N"]  # the chain's ne[0] and ne[1] after w1
    for s in trial["steps"]:
        if s["op"] == "mul_mat":
            rows = M if s["w"] == "w1" else P
            cols = K if s["w"] == "w1" else width
            out[s["w"]] = rng.standard_normal((rows, cols)).astype(np.float32) / np.sqrt(cols)
            width = rows
        elif s["op"] in ("add", "mul"):
            out[s["w"]] = rng.standard_normal((width,)).astype(np.float32)
        elif s["op"] == "transpose":
            width, other = other, width
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
            if axis in ("seg0", "seg1"):
                return layout_split(trial, int(axis[3]), t.ne[int(axis[3])], n)
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
    outs = [cur]
    if trial["steps"][-1]["op"] == "views":
        outs = [ctx.scale(ctx.cont(make_view(ctx, cur, v)), 2.0) for v in trial["steps"][-1]["views"]]
    graph = gg.Graph(ctx)
    for out in outs:
        graph.build_forward_expand(out)
    X = np.random.default_rng(trial["seed"] + 2000).standard_normal((trial["N"], trial["K"])).astype(np.float32)
    results = runner.run(graph, {x: X}, outs)
    return np.concatenate([r.ravel() for r in results])


def run_in_child(trial: dict, devices: str, timeout: float = 120) -> dict:
    """One trial in a child process: pass / fail (with its NMSE) / unsplittable (with ggml's message)."""
    outcome = child.run(trial_result, (trial, devices), timeout=timeout)
    record = {"seed": trial["seed"], "graph": describe(trial)}
    if outcome.status == "returned":
        record.update(outcome.value)
        return record
    # only ggml's own refusal counts as unsplittable: in-process (Unsplittable) or an abort of its
    # meta code; any other error or death is a failure of the trial
    m = re.search(r"ggml aborted: (.*ggml-backend-meta.*)", outcome.stderr)
    if m:
        record.update(status="unsplittable", message=m.group(1).split(": ", 1)[-1])
    elif outcome.status == "raised":
        record.update(status="fail", message=f"raised {outcome.error_type}: {outcome.message}")
    elif outcome.status == "timeout":
        record.update(status="fail", message=f"no result within {timeout} s")
    else:
        last = (outcome.stderr.strip().splitlines() or ["no output"])[-1]
        record.update(status="fail", message=f"exit {outcome.exit_code}: {last}")
    return record


TRIAL_KEYS = ("seed", "K", "M", "P", "N")


def parse_trial(text: str) -> dict:
    """A trial from its JSON (as make_trial writes it); ValueError saying what is wrong."""
    try:
        trial = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"not valid JSON: {e}") from None
    return check_trial(trial)


def check_trial(trial: Any) -> dict:
    """trial, if it is one as make_trial writes it; ValueError saying what is wrong."""
    if not isinstance(trial, dict):
        raise ValueError(f"a trial is a JSON object, got {type(trial).__name__}")
    missing = [k for k in (*TRIAL_KEYS, "steps") if k not in trial]
    if missing:
        raise ValueError(f"the trial lacks {', '.join(missing)} (a trial has {', '.join(TRIAL_KEYS)} and steps)")
    for k in TRIAL_KEYS:
        if not isinstance(trial[k], int) or isinstance(trial[k], bool) or trial[k] < (0 if k == "seed" else 1):
            raise ValueError(f"{k} must be an integer >= {0 if k == 'seed' else 1}, got {trial[k]!r}")
    steps = trial["steps"]
    if not isinstance(steps, list) or not steps or not all(isinstance(x, dict) and "op" in x for x in steps):
        raise ValueError("steps must be a non-empty list of objects, each with an op")
    if steps[0]["op"] != "mul_mat":
        raise ValueError(f"the first step must be mul_mat, got {steps[0]['op']!r}")
    return trial


def trial_result(trial: dict, devices: str) -> dict:
    """Run a trial on the CPU and split over `devices`: {"status": "pass"/"fail", "error": NMSE} or
    {"status": "unsplittable", "message": ggml's reason}. ValueError for a trial that is not one."""
    from pyggml.errors import Unsplittable
    from pyggml.testing.engine.verdict import nmse

    check_trial(trial)
    single = run_trial(trial, "cpu")
    try:
        split = run_trial(trial, f"meta:{devices}")
    except Unsplittable as e:
        return {"status": "unsplittable", "message": str(e)}
    err = nmse(split, single)
    return {"status": split_status(err, devices), "error": float(err)}


def run_here(trial: dict, devices: str) -> dict:
    """One trial in this process (faster; an abort of ggml ends the process)."""
    return {"seed": trial["seed"], "graph": describe(trial), **trial_result(trial, devices)}


def fuzz(seed: int, trials: int, devices: str, views: bool = False, in_process: bool = False) -> list[dict]:
    run = run_here if in_process else run_in_child
    return [run(make_trial(seed + i, views), devices) for i in range(trials)]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `python -m pyggml meta-fuzz`."""
    parser.add_argument("--seed", type=at_least(0), default=0)
    parser.add_argument("--trials", type=at_least(0), default=20)
    parser.add_argument(
        "--devices",
        default="cpu,cpu",
        type=meta_devices,
        help="the meta device's devices, comma-separated (default cpu,cpu)",
    )
    parser.add_argument(
        "--views",
        action="store_true",
        help="every trial ends in views (1d/2d/3d, strided, straddling the shares) of a split result",
    )
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="run the trials in this process (faster; an abort of ggml ends the run)",
    )
    parser.add_argument(
        "--layouts",
        type=at_least(0),
        default=None,
        metavar="N",
        help="then the layouts matrix: every op it knows with every pair of source layouts (mirrored, an input, "
        "split along axis 0 or 1 evenly or not, partial); N of its trials drawn with --seed (default: all of it; "
        "0: none)",
    )
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a single trial (its JSON), in this process


def main(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Run `python -m pyggml meta-fuzz` with its parsed options; parser reports a bad --one, and --devices that
    this build does not have (each trial would fail on them)."""
    why = unavailable([META_PREFIX + args.devices])
    if why:
        parser.error(f"--devices {args.devices}: {why.split(': ', 1)[1]}")
    if args.one is not None:
        try:
            trial = parse_trial(args.one)
        except ValueError as e:
            parser.error(f"--one: {e}")
        print(json.dumps(trial_result(trial, args.devices)))
        return 0
    records = fuzz(args.seed, args.trials, args.devices, args.views, args.in_process)
    if args.layouts != 0:
        records += [{**r, "seed": f"L{r['seed']}"} for r in fuzz_layouts(args.devices, args.layouts, args.seed)]
    for r in records:
        detail = f"nmse {r['error']:.1e}" if r.get("error") is not None else r.get("message", "")
        print(f"{r['seed']:>5}  {r['status']:<12} {r['graph']}  [{detail}]")
    counts = {s: sum(r["status"] == s for r in records) for s in ("pass", "fail", "unsplittable")}
    counts["deaths"] = sum(bool(r.get("death")) for r in records)
    print("  ".join(f"{k}: {v}" for k, v in counts.items()))
    return 1 if counts["fail"] else 0


# --- the layouts matrix: every op with every pair of source layouts ------------------------------------------------

LAYOUTS = ("mirrored", "input", "split0", "split0u", "split1", "split1u", "partial")
"""A source's layout: a static tensor mirrored, split along axis 0 or 1 evenly or unevenly (`u`: the first device
takes all but one index per other device), or partial (each device holds a part of the sum); or a graph input
(mirrored on the meta device, written at each run)."""

BINARY_OPS = ("add", "sub", "mul", "div", "concat0", "concat1", "cpy", "mul_mat")
UNARY_OPS = ("scale", "scale_bias", "neg", "silu", "sqr", "rms_norm", "soft_max", "sum_rows", "cont_t", "get_rows")
LAYOUT_SHAPE = (4, 8)  # NumPy order: ne (8, 4); every operand has it


def layout_trials(n_devices: int = 2) -> list[dict]:
    """Every op the layouts matrix knows with every layout of its sources (binary: every pair), in a fixed order."""
    del n_devices  # the same matrix for any count; the splits are drawn per count when the trial runs
    trials = [{"op": op, "layouts": [a, b]} for op in BINARY_OPS for a in LAYOUTS for b in LAYOUTS]
    trials += [{"op": op, "layouts": [a]} for op in UNARY_OPS for a in LAYOUTS]
    return trials


def describe_layouts(trial: dict) -> str:
    return f"{trial['op']}({', '.join(trial['layouts'])})"


def source_split(layout: str, extent: int, n_devices: int) -> "Split | None":
    """The Split of a static source of this layout (None: mirrored)."""
    from pyggml.meta import Split

    if layout == "partial":
        return Split("partial")
    if layout.startswith("split"):
        axis = int(layout[5])
        if layout.endswith("u") and extent >= n_devices:
            return Split(axis, (extent - (n_devices - 1), *([1] * (n_devices - 1))))
        return Split.even(axis, extent, n_devices)
    return None


def _layout_values(k: int) -> np.ndarray:
    rng = np.random.default_rng(4000 + k)
    # away from 0: a divisor, and no sign of an element flips with rounding
    return (rng.uniform(0.5, 2.0, LAYOUT_SHAPE) * rng.choice([-1, 1], LAYOUT_SHAPE)).astype(np.float32)


_ROWS = np.array([3, 0, 2, 2], dtype=np.int32)


def _layout_oracle(op: str, a: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    """The op's value in NumPy (ggml's dim 0 is NumPy's last axis)."""
    if op in ("add", "sub", "mul", "div"):
        assert b is not None
        return {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}[op](a, b)
    if op in ("concat0", "concat1"):
        assert b is not None
        return np.concatenate([a, b], axis=1 if op == "concat0" else 0)
    if op == "cpy":
        return a
    if op == "mul_mat":
        return b @ a.T
    if op == "scale":
        return 0.5 * a
    if op == "scale_bias":
        return 0.5 * a + 1.0
    if op == "neg":
        return -a
    if op == "silu":
        return a / (1.0 + np.exp(-a))
    if op == "sqr":
        return a * a
    if op == "rms_norm":
        return a / np.sqrt((a * a).mean(axis=1, keepdims=True) + 1e-6)
    if op == "soft_max":
        e = np.exp(a - a.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)
    if op == "sum_rows":
        return a.sum(axis=1, keepdims=True)
    if op == "cont_t":
        return a.T
    if op == "get_rows":
        return a[_ROWS]
    raise ValueError(f"the layouts matrix knows no op {op!r}")


def layout_result(trial: dict, devices: str) -> dict:
    """One trial of the layouts matrix on meta:`devices` against NumPy: {"status": "pass"/"fail", "error": NMSE}
    or {"status": "unsplittable", "message": pyggml's Unsplittable}. A copy's destination, when it is a static
    tensor, is read back too (the copy writes into it)."""
    import pyggml as gg
    from pyggml.errors import Unsplittable
    from pyggml.testing.engine.verdict import nmse

    op, layouts = trial["op"], list(trial["layouts"])
    if op not in BINARY_OPS + UNARY_OPS or not all(x in LAYOUTS for x in layouts):
        raise ValueError(f"not a trial of the layouts matrix: {trial!r}")
    runner = gg.Runner(f"meta:{devices}")
    n = runner.n_devices
    names = ["a", "b"][: len(layouts)]
    splits = {
        nm: source_split(lay, LAYOUT_SHAPE[1 - int(lay[5])] if lay.startswith("split") else 0, n)
        for nm, lay in zip(names, layouts)
    }
    runner.set_policy(lambda t: splits.get(t.name))
    values = {nm: _layout_values(i) for i, nm in enumerate(names)}
    if op == "div":
        values["b"] = np.abs(values["b"]) + 0.5
    wctx, ctx = gg.Context(), gg.Context()
    srcs, inputs = {}, {}
    for nm, lay in zip(names, layouts):
        if lay == "input":
            srcs[nm] = ctx.tensor("f32", LAYOUT_SHAPE, nm, input=True)
            inputs[srcs[nm]] = values[nm]
        else:
            srcs[nm] = wctx.tensor("f32", LAYOUT_SHAPE, nm)
    static = [nm for nm, lay in zip(names, layouts) if lay != "input"]
    if static:
        runner.backend.alloc_tensors(wctx)
        for nm in static:
            srcs[nm].set(values[nm])
    a, b = srcs["a"], srcs.get("b", srcs["a"])  # b only for the ops of two sources
    if op in ("add", "sub", "mul", "div"):
        y = getattr(ctx, op)(a, b)
    elif op in ("concat0", "concat1"):
        y = ctx.concat(a, b, int(op[-1]))
    elif op == "cpy":
        y = ctx.cpy(a, b)
    elif op == "mul_mat":
        y = ctx.mul_mat(a, b)
    elif op in ("scale", "scale_bias"):
        y = ctx.scale(a, 0.5) if op == "scale" else ctx.scale_bias(a, 0.5, 1.0)
    elif op in ("neg", "silu", "sqr"):
        y = getattr(ctx, op)(a)
    elif op == "rms_norm":
        y = ctx.rms_norm(a, 1e-6)
    elif op == "soft_max":
        y = ctx.soft_max(a)
    elif op == "sum_rows":
        y = ctx.sum_rows(a)
    elif op == "cont_t":
        y = ctx.cont(ctx.transpose(a))
    else:
        rows = ctx.tensor("i32", (len(_ROWS),), "rows", input=True)
        inputs[rows] = _ROWS
        y = ctx.get_rows(a, rows)
    graph = gg.Graph(ctx).build_forward_expand(y)
    want = _layout_oracle(op, values["a"], values.get("b"))
    try:
        got = runner.run(graph, inputs, [y])[0]
    except Unsplittable as e:
        return {"status": "unsplittable", "message": str(e)}
    gots, wants = [np.asarray(got, np.float64).ravel()], [want.astype(np.float64).ravel()]
    if op == "cpy" and layouts[1] != "input":
        gots.append(np.asarray(b.numpy(), np.float64).ravel())  # the destination holds the copy too
        wants.append(wants[0])
    g, w = np.concatenate(gots), np.concatenate(wants)
    if g.shape != w.shape:
        return {"status": "fail", "error": None, "message": f"shape {g.shape}, expected {w.shape}"}
    err = float(nmse(g, w))
    return {"status": split_status(err, devices), "error": err}


def layout_batch(trials: list[dict], devices: str) -> list[dict]:
    """Trials of the layouts matrix in this process, each record with its trial's name."""
    return [{"seed": i, "graph": describe_layouts(t), **layout_result(t, devices)} for i, t in enumerate(trials)]


def fuzz_layouts(
    devices: str, trials: int | None = None, seed: int = 0, batch: int = 64, timeout: float = 300
) -> list[dict]:
    """The layouts matrix (all of it, or `trials` of it drawn with `seed`), in child processes of `batch` trials;
    a batch whose child dies is run again one trial per child, so that a death is the trial's record
    (`fail`, with the exit status and ggml's last words), never the end of the run."""
    from pyggml.testing.engine import child

    todo = layout_trials()
    if trials is not None and trials < len(todo):
        picks = np.random.default_rng(seed).choice(len(todo), trials, replace=False)
        todo = [todo[i] for i in sorted(picks)]
    records: list[dict] = []
    for start in range(0, len(todo), batch):
        part = todo[start : start + batch]
        outcome = child.run(layout_batch, (part, devices), timeout=timeout)
        if outcome.status == "returned":
            records += [{**r, "seed": start + r["seed"]} for r in outcome.value]
            continue
        for k, t in enumerate(part):
            one = child.run(layout_batch, ([t], devices), timeout=timeout)
            record = {"seed": start + k, "graph": describe_layouts(t)}
            if one.status == "returned":
                record.update({**one.value[0], "seed": start + k})
            elif one.status == "raised":
                record.update(status="fail", message=f"raised {one.error_type}: {one.message}")
            else:
                last = (one.stderr.strip().splitlines() or ["no output"])[-1]
                record.update(status="fail", death=True, message=f"{one.status} (exit {one.exit_code}): {last}")
            records.append(record)
    return records
