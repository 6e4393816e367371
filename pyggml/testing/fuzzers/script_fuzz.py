"""Script fuzz: random whole programs written the way a user scripts ggml, every value read held against NumPy.

    python -m pyggml script-fuzz [--seed 0] [--programs 40] [--backend cpu --backend meta:cpu,cpu] [--in-process]

A program is a Context with inputs and weights, and a random graph of ops (unary, scale, add/sub/mul of two
nodes or of a broadcast row, a product with a weight, transpose + cont, sum_rows, soft_max, concat, a view of
rows), each with its NumPy value. Its weights are fed as inputs, or allocated on the runner's own buffer
(`runner.backend.alloc_tensors`), or on another runner's buffer; on a meta runner they are mirrored or split
along an axis. Then what scripts do:

1. `run` with a random subset of the nodes as outputs, and a read of every node of the graph;
2. `run` again with new inputs and other outputs, every node read again;
3. `allocate`, a read of a computed node before the compute, the inputs written, `compute`, every node read;
4. a second graph of the same context, on the same runner, and the first graph's nodes read;
5. the runner closed, and a node read.

Every value a read returns must be NumPy's (float32 rounding: 1e-3 of the node's largest value on the CPU,
2e-2 on a device, whose products may round to half precision); every refusal must be an exception of pyggml's
(ValueError and its kinds: StaleValue, GraphError, Unsplittable, OpError); the process must live. A program
that reads a wrong value is `wrong`; one whose process dies is `died` (programs run in child processes,
several to a child, and a dead batch is run again program by program to name the one that died).
"""

from __future__ import annotations

import argparse
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pyggml._args import at_least
from pyggml.target import Target
from pyggml.testing.check_options import backend_name, unavailable
from pyggml.testing.engine import child

UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "neg": np.negative,
    "sqr": np.square,
    "tanh": np.tanh,
    "relu": lambda x: np.maximum(x, 0.0),
    "silu": lambda x: x / (1.0 + np.exp(-x)),
    "exp": np.exp,
}


@dataclass
class Step:
    """One node of a program: its op, the indices of the nodes it reads (-1: the input x), its parameters."""

    op: str
    srcs: tuple[int, ...] = ()
    arg: Any = None


@dataclass
class Program:
    """A random program: the input's shape, the weights' shapes, the steps, and how its weights live."""

    seed: int
    rows: int
    cols: int
    weights: dict[str, tuple[int, ...]] = field(default_factory=dict)
    steps: list[Step] = field(default_factory=list)
    placement: str = "input"  # "input", "runner" (its own buffer) or "other" (another runner's buffer)
    splits: dict[str, Any] = field(default_factory=dict)  # weight -> ggml axis to split on a meta runner


def make_program(seed: int) -> Program:
    """A random program of 3 to 9 steps over an input x of shape (rows, cols); shapes are even so that a meta
    runner of two devices can split every weight."""
    rng = np.random.default_rng(seed)
    rows, cols = (int(v) * 2 for v in rng.integers(1, 5, 2))
    prog = Program(seed, rows, cols, placement=["input", "runner", "other"][int(rng.integers(3))])
    shapes: list[tuple[int, ...]] = []  # NumPy shape of each step's result

    def shape_of(i: int) -> tuple[int, ...]:
        return (rows, cols) if i < 0 else shapes[i]

    for k in range(int(rng.integers(3, 10))):
        cands = list(range(-1, len(shapes)))
        a = int(rng.choice(cands))
        sa = shape_of(a)
        kind = str(
            rng.choice(
                ["unary", "scale", "binary", "row", "mul_mat", "transpose", "sum_rows", "soft_max", "concat", "view"]
            )
        )
        if kind == "unary":
            step, out = Step(str(rng.choice(list(UNARY))), (a,)), sa
        elif kind == "scale":
            step, out = Step("scale", (a,), float(rng.choice([0.5, -2.0, 0.25, 3.0]))), sa
        elif kind == "binary":
            same = [i for i in cands if shape_of(i) == sa]
            step, out = Step(str(rng.choice(["add", "sub", "mul"])), (a, int(rng.choice(same)))), sa
        elif kind == "row":
            w = f"r{k}"
            prog.weights[w] = (1, sa[1])
            step, out = Step(str(rng.choice(["add", "mul"])), (a,), w), sa
        elif kind == "mul_mat":
            w, n_out = f"w{k}", int(rng.integers(1, 4)) * 2
            prog.weights[w] = (n_out, sa[1])
            step, out = Step("mul_mat", (a,), w), (sa[0], n_out)
        elif kind == "transpose":
            step, out = Step("transpose", (a,)), (sa[1], sa[0])
        elif kind == "sum_rows":
            step, out = Step("sum_rows", (a,)), (sa[0], 1)
        elif kind == "soft_max":
            step, out = Step("soft_max", (a,)), sa
        elif kind == "concat":
            same = [i for i in cands if shape_of(i) == sa]
            dim = int(rng.integers(2))  # ggml's axis: 0 joins along the rows (NumPy's last axis)
            step = Step("concat", (a, int(rng.choice(same))), dim)
            out = (sa[0], 2 * sa[1]) if dim == 0 else (2 * sa[0], sa[1])
        else:  # a view of some rows
            first = int(rng.integers(0, sa[0]))
            n = int(rng.integers(1, sa[0] - first + 1))
            step, out = Step("view", (a,), (first, n)), (n, sa[1])
        prog.steps.append(step)
        shapes.append(out)
    for w, shape in prog.weights.items():  # on a meta runner: mirrored, or split along an even axis
        axes = [ax for ax, n in enumerate(reversed(shape)) if n % 2 == 0]
        prog.splits[w] = str(rng.choice(["mirrored", *[str(ax) for ax in axes]]))
    return prog


def inputs_for(prog: Program, draw: int) -> dict[str, np.ndarray]:
    """The values of x and the weights for one run (draw: which run of the program)."""
    rng = np.random.default_rng([prog.seed, draw])
    vals = {"x": rng.uniform(-1, 1, (prog.rows, prog.cols)).astype(np.float32)}
    for w, shape in prog.weights.items():
        vals[w] = rng.uniform(-1, 1, shape).astype(np.float32)
    return vals


def oracle(prog: Program, vals: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Each step's value, in float64, from the ops' definitions."""
    out: list[np.ndarray] = []

    def v(i: int) -> np.ndarray:
        return vals["x"].astype(np.float64) if i < 0 else out[i]

    for s in prog.steps:
        a = v(s.srcs[0])
        if s.op in UNARY:
            with np.errstate(over="ignore"):
                r = UNARY[s.op](a)
        elif s.op == "scale":
            r = a * s.arg
        elif s.op in ("add", "sub", "mul"):
            b = vals[s.arg].astype(np.float64) if s.arg is not None else v(s.srcs[1])
            r = {"add": a + b, "sub": a - b, "mul": a * b}[s.op]
        elif s.op == "mul_mat":
            r = a @ vals[s.arg].astype(np.float64).T
        elif s.op == "transpose":
            r = a.T.copy()
        elif s.op == "sum_rows":
            r = a.sum(axis=1, keepdims=True)
        elif s.op == "soft_max":
            e = np.exp(a - a.max(axis=1, keepdims=True))
            r = e / e.sum(axis=1, keepdims=True)
        elif s.op == "concat":
            r = np.concatenate([a, v(s.srcs[1])], axis=1 if s.arg == 0 else 0)
        else:
            first, n = s.arg
            r = a[first : first + n]
        out.append(r)
    return out


def build(prog: Program, ctx: Any, x: Any, weights: dict[str, Any]) -> list:
    """The program's nodes in ctx (pyggml Tensors), one per step."""
    nodes: list = []

    def t(i: int) -> Any:
        return x if i < 0 else nodes[i]

    for s in prog.steps:
        a = t(s.srcs[0])
        if s.op in UNARY:
            n = getattr(ctx, s.op)(a)
        elif s.op == "scale":
            n = ctx.scale(a, s.arg)
        elif s.op in ("add", "sub", "mul"):
            n = getattr(ctx, s.op)(a, weights[s.arg] if s.arg is not None else t(s.srcs[1]))
        elif s.op == "mul_mat":
            n = ctx.mul_mat(weights[s.arg], a)
        elif s.op == "transpose":
            n = ctx.cont(ctx.transpose(a))
        elif s.op == "sum_rows":
            n = ctx.sum_rows(a)
        elif s.op == "soft_max":
            n = ctx.soft_max(a)
        elif s.op == "concat":
            n = ctx.concat(a, t(s.srcs[1]), s.arg)
        else:
            first, rows = s.arg
            src = a if a.is_contiguous else ctx.cont(a)
            n = ctx.view_2d(src, src.ne[0], rows, src.nb[1], first * src.nb[1])
        n.name = f"s{len(nodes)}"
        nodes.append(n)
    return nodes


class Tally:
    """What a program's reads gave: values checked, refusals by kind, wrong values (described)."""

    def __init__(self, backend: str) -> None:
        self.tol = 1e-3 if backend == "cpu" or Target.parse(backend).matches("meta:cpu") else 2e-2
        self.checked = 0
        self.refused: dict[str, int] = {}
        self.wrong: list[str] = []

    def read(self, what: str, node: Any, want: np.ndarray) -> None:
        """Read node (its numpy()); its value must be want, or the read must raise pyggml's refusal."""
        try:
            got = node.numpy()
        except ValueError as e:  # StaleValue, GraphError, ...: a refusal
            self.refused[type(e).__name__] = self.refused.get(type(e).__name__, 0) + 1
            return
        self.compare(what, node, got, want)

    def compare(self, what: str, node: Any, got: np.ndarray, want: np.ndarray) -> None:
        """Hold a value returned against NumPy's."""
        self.checked += 1
        if got.shape != want.shape:
            got = got.reshape(want.shape) if got.size == want.size else got
        scale = float(np.max(np.abs(want))) if want.size else 0.0
        finite = np.isfinite(want)
        if got.shape != want.shape or not np.array_equal(np.isfinite(got), finite):
            self.wrong.append(f"{what}: {node.name} shape {got.shape} or non-finite values differ from NumPy's")
            return
        err = float(np.max(np.abs(got[finite] - want[finite]))) if finite.any() else 0.0
        if err > self.tol * max(scale, 1e-3):
            self.wrong.append(f"{what}: {node.name} off by {err:.3g} (largest value {scale:.3g})")

    def refuse(self, e: BaseException) -> None:
        """Count a refusal of a whole action."""
        self.refused[type(e).__name__] = self.refused.get(type(e).__name__, 0) + 1


def run_program(seed: int, backend: str) -> dict:
    """Build and run one program on `backend` (a runner name); returns its record: seed, program, counts,
    wrong reads. A non-ValueError exception propagates (a crash of pyggml's, not a refusal)."""
    import pyggml as gg
    from pyggml.meta import Split

    prog = make_program(seed)
    tally = Tally(backend)
    record = {"seed": seed, "backend": backend, "program": describe(prog)}
    runner = gg.Runner(backend)
    other = None
    try:
        ctx = gg.Context()
        x = ctx.tensor("f32", (prog.rows, prog.cols), "x", input=True)
        wctx = ctx if prog.placement == "input" else gg.Context()
        weights = {
            w: wctx.tensor("f32", shape, w, input=prog.placement == "input") for w, shape in prog.weights.items()
        }
        if prog.placement != "input" and weights:
            if runner.meta is not None:
                runner.set_policy(
                    lambda t: None
                    if prog.splits.get(t.name, "mirrored") == "mirrored"
                    else Split.even(int(prog.splits[t.name]), t.ne[int(prog.splits[t.name])], runner.n_devices)
                )
            holder = runner
            if prog.placement == "other":
                other = gg.Runner("cpu" if backend != "cpu" else _other_than_cpu())
                holder = other
            holder.backend.alloc_tensors(wctx)
            for w, t in weights.items():
                t.set(inputs_for(prog, 0)[w])
        try:
            nodes = build(prog, ctx, x, weights)
        except ValueError as e:  # an op refused at build time
            tally.refuse(e)
            return _finish(record, tally)
        graph = gg.Graph(ctx)
        for n in nodes:
            graph.build_forward_expand(n)
        rng = np.random.default_rng([seed, 99])
        _actions(prog, runner, graph, ctx, x, weights, nodes, tally, rng)
    finally:
        if other is not None:
            other.close()
        runner.close()
    return _finish(record, tally)


def _other_than_cpu() -> str:
    """A second runner's backend for weights held elsewhere: the meta device of two CPUs."""
    return "meta:cpu,cpu"


def _feed(prog: Program, x: Any, weights: dict[str, Any], draw: int) -> tuple[dict, list[np.ndarray]]:
    """The run's inputs (x, and the weights fed as inputs) and the oracle's values for them."""
    vals = inputs_for(prog, draw)
    if prog.placement != "input":  # resident weights keep the values written once
        vals.update({w: inputs_for(prog, 0)[w] for w in prog.weights})
    feed = {x: vals["x"]}
    if prog.placement == "input":
        feed.update({weights[w]: vals[w] for w in prog.weights})
    return feed, oracle(prog, vals)


def _actions(prog, runner, graph, ctx, x, weights, nodes, tally, rng) -> None:
    """The five things scripts do with a graph (the module's docstring), each read checked."""
    import pyggml as gg

    def some_outputs() -> list:
        k = int(rng.integers(1, len(nodes) + 1))
        return [nodes[i] for i in sorted(rng.choice(len(nodes), k, replace=False))]

    def read_all(what: str, want: list[np.ndarray], among: list) -> None:
        for n, w in zip(nodes, want):
            tally.read(what, n, w)

    for draw in (1, 2):  # 1, 2: run, read everything; run again with new inputs and other outputs
        feed, want = _feed(prog, x, weights, draw)
        outs = some_outputs()
        try:
            got = runner.run(graph, feed, outs)
        except ValueError as e:
            tally.refuse(e)
            return
        for n, g in zip(outs, got):
            tally.compare(f"run {draw} output", n, g, want[nodes.index(n)])
        read_all(f"after run {draw}", want, outs)
    # 3: allocate, a read before the compute, write, compute, read
    feed, want = _feed(prog, x, weights, 3)
    runner.allocate(graph, some_outputs())
    early = nodes[int(rng.integers(len(nodes)))]
    try:
        early.numpy()
        if early.op.name not in ("VIEW", "RESHAPE", "PERMUTE", "TRANSPOSE"):
            tally.wrong.append(f"before compute: {early.name} ({early.op.name}) was read before its graph was computed")
    except ValueError as e:
        tally.refuse(e)
    for t, v in feed.items():
        t.set(v)
    runner.compute(graph)
    read_all("after allocate + compute", want, [])
    # 4: a second graph of the same context on the same runner; the first graph's nodes read again
    g2 = gg.Graph(ctx).build_forward_expand(nodes[int(rng.integers(len(nodes)))])
    feed4, want4 = _feed(prog, x, weights, 4)
    try:
        runner.run(g2, {t: v for t, v in feed4.items() if t.is_input}, nodes[0])
    except ValueError as e:
        tally.refuse(e)
    else:
        read_all("after a second graph", want4, [])
    # 5: closed runner
    runner.close()
    try:
        nodes[-1].numpy()
        tally.wrong.append("after close: a node was read from a closed runner's memory")
    except ValueError as e:
        tally.refuse(e)


def describe(prog: Program) -> str:
    """One line: the input's shape, the weights' placement, the steps."""
    steps = " ".join(f"{s.op}{list(s.srcs)}" + (f"={s.arg}" if s.arg is not None else "") for s in prog.steps)
    return f"x{(prog.rows, prog.cols)} weights:{prog.placement} {steps}"


def _finish(record: dict, tally: Tally) -> dict:
    record.update(checked=tally.checked, refused=tally.refused, wrong=tally.wrong)
    record["status"] = "wrong" if tally.wrong else "pass"
    return record


def run_batch(seeds: list[int], backend: str) -> list[dict]:
    """Programs in this process (a child's work): an exception that is not a refusal is a record of its own.
    A backend naming an RPC device (rpc0, meta:rpc0,rpc1) gets local RPC servers of the CPU for the batch."""
    import contextlib

    from pyggml import rpc

    with contextlib.ExitStack() as stack:
        for _ in range(max(Target.parse(backend).rpc_indices, default=-1) + 1):
            rpc.add_server(stack.enter_context(rpc.Server(threads=1)).endpoint)
        return _programs(seeds, backend)


def _programs(seeds: list[int], backend: str) -> list[dict]:
    out = []
    for seed in seeds:
        try:
            out.append(run_program(seed, backend))
        except Exception as e:  # not a ValueError: pyggml failed in a way a user should never see
            out.append(
                {
                    "seed": seed,
                    "backend": backend,
                    "program": describe(make_program(seed)),
                    "status": "error",
                    "wrong": [f"{type(e).__name__}: {e}", traceback.format_exc(limit=4)],
                }
            )
    return out


def fuzz(seed: int, programs: int, backends: list[str], in_process: bool = False, batch: int = 20) -> list[dict]:
    """Run `programs` programs from `seed` on each backend; returns one record per program and backend."""
    records: list[dict] = []
    for backend in backends:
        seeds = list(range(seed, seed + programs))
        for i in range(0, len(seeds), batch):
            chunk = seeds[i : i + batch]
            if in_process:
                records.extend(run_batch(chunk, backend))
                continue
            outcome = child.run("pyggml.testing.fuzzers.script_fuzz:run_batch", (chunk, backend), timeout=600)
            if outcome.status == "returned":
                records.extend(outcome.value)
                continue
            for s in chunk:  # name the program that died
                one = child.run("pyggml.testing.fuzzers.script_fuzz:run_batch", ([s], backend), timeout=300)
                if one.status == "returned":
                    records.extend(one.value)
                else:
                    records.append(
                        {
                            "seed": s,
                            "backend": backend,
                            "program": describe(make_program(s)),
                            "status": "died",
                            "wrong": [f"{one.status}: {one.stderr[-400:]}"],
                        }
                    )
    return records


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `python -m pyggml script-fuzz`."""
    parser.add_argument("--seed", type=at_least(0), default=0)
    parser.add_argument("--programs", type=at_least(1), default=40, help="programs per backend (default 40)")
    parser.add_argument(
        "--backend",
        action="append",
        dest="backends",
        type=backend_name,
        help="a runner name (cpu, vulkan0, meta:cpu,cpu, ...); repeat for several (default: cpu and meta:cpu,cpu)",
    )
    parser.add_argument("--in-process", action="store_true", help="run here (faster; a death ends the run)")


def main(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Run `python -m pyggml script-fuzz`; exit 1 when a program read a wrong value, died or failed."""
    backends = args.backends or ["cpu", "meta:cpu,cpu"]
    why = unavailable(backends, provided=("rpc",))  # RPC devices: local servers, started for each batch
    if why:
        parser.error(f"--backend {why}")
    records = fuzz(args.seed, args.programs, backends, args.in_process)
    for r in records:
        if r["status"] != "pass":
            print(f"{r['backend']:<16} {r['seed']:>5}  {r['status']:<6} {r['program']}")
            for w in r["wrong"][:5]:
                print(f"    {w}")
    for backend in backends:
        mine = [r for r in records if r["backend"] == backend]
        counts = {s: sum(r["status"] == s for r in mine) for s in ("pass", "wrong", "died", "error")}
        checked = sum(r.get("checked", 0) for r in mine)
        refused = sum(sum(r.get("refused", {}).values()) for r in mine)
        print(
            f"{backend}: {len(mine)} programs, {checked} values checked, {refused} refusals, "
            + ", ".join(f"{k} {v}" for k, v in counts.items())
        )
    return 1 if any(r["status"] != "pass" for r in records) else 0
