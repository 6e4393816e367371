"""Random calls through pyggml's Python layer: it must raise or be right, never die.

    python -m pyggml.fuzz --calls N --seed S [--batch B] [--no-meta] [--json FILE]

Call i is reproducible from (seed, i) alone: a fresh context, a few random tensors (random
types incl. quantized, shapes with odd, 0, 1 and huge sizes, views, permutations,
transposes, tensors of a foreign context), then one public op or method with random valid
and invalid arguments (types, extents, strides, offsets, axes, indices, NaN and infinite
scalars). What builds is computed on the CPU and, unless --no-meta, on a two-CPU meta
device, with random inputs; results are compared with NumPy where an oracle is at hand and
the meta result with the CPU's.

Outcomes: `ok`, `raised` (a documented exception: TypeError, ValueError and its subclasses
OpError/GraphError/Unsupported/Unsplittable, MemoryError, GGMLError), `off-contract` (any
other exception), `wrong` (a result that disagrees), `death` (the process died). Calls run
in batches, each in a child process; when a batch dies, its calls are replayed one by one to
find the one that kills, and a standalone reproducer is printed. Exit status 1 if anything
died, was wrong or off-contract.
"""

from __future__ import annotations

import argparse
import inspect
import json
import subprocess
import sys
import time
from collections import Counter

import numpy as np

DOCUMENTED = (TypeError, ValueError, MemoryError)  # OpError, GraphError, ... are ValueErrors
TYPES = ("f32", "f32", "f32", "f16", "bf16", "i32", "q8_0", "q4_0", "q4_k", "q8_k", "i64")
SIZES = (1, 1, 2, 3, 4, 5, 7, 8, 13, 32, 64)
INTS = (-1, 0, 0, 1, 1, 2, 3, 4, 5, 7, 8, 16, 32, 64, 96, 2**31, 2**62, -(2**63))
FLOATS = (0.0, 1.0, -1.0, 0.5, 2.0, 1e-6, float("nan"), float("inf"), -float("inf"), 1e30)
TENSOR_ARGS = {"a", "b", "c", "sx", "pos", "mask", "freq_factors"}
ELEMENTWISE = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}
UNARY_ORACLE = {"abs": np.abs, "neg": np.negative, "sqr": np.square, "relu": lambda x: np.maximum(x, 0),
                "exp": np.exp, "tanh": np.tanh}


class Call:
    """One random call: the script that reproduces it, and what it did."""

    def __init__(self, seed: int, index: int):
        self.rng = np.random.default_rng([seed, index])
        self.lines = ["import numpy as np", "import pyggml as gg", "from pyggml import ops",
                      "ctx = gg.Context()", "other = gg.Context()"]

    def say(self, line: str):
        self.lines.append(line)

    def pick(self, seq):
        return seq[int(self.rng.integers(len(seq)))]


def _tensor(call: Call, gg, ctx, cname: str, k: int):
    """A random tensor in ctx (named t{k} in the script), sometimes a view, permutation or transpose."""
    rng = call.rng
    t = call.pick(TYPES)
    ndim = int(rng.integers(1, 5))
    shape = [call.pick(SIZES) for _ in range(ndim)]
    if rng.random() < 0.05:
        shape[int(rng.integers(ndim))] = call.pick((0, 2**40))
    if t.startswith("q") and rng.random() < 0.8:
        shape[-1] = call.pick((32, 64, 256))
    call.say(f"t{k} = {cname}.tensor({t!r}, {tuple(shape)!r})")
    x = ctx.tensor(t, tuple(shape))
    r = rng.random()
    if r < 0.1 and x.ne[1] > 1:
        call.say(f"t{k} = ops.transpose({cname}, t{k})")
        x = gg.ops.transpose(ctx, x)
    elif r < 0.2:
        axes = tuple(int(a) for a in rng.permutation(4))
        call.say(f"t{k} = ops.permute({cname}, t{k}, *{axes})")
        x = gg.ops.permute(ctx, x, *axes)
    elif r < 0.3 and x.ne[0] > 1:
        ne0 = int(rng.integers(1, x.ne[0] + 1))
        call.say(f"t{k} = ops.view_2d({cname}, t{k}, {ne0}, {x.ne[1]}, {x.nb[1]}, 0)")
        x = gg.ops.view_2d(ctx, x, ne0, x.ne[1], x.nb[1], 0)
    return x


def _argument(call: Call, name: str, param, pool: list):
    """A random value for one parameter, with the script text that makes it."""
    rng = call.rng
    if name in TENSOR_ARGS or name == "a":
        if param.default is None and rng.random() < 0.3:
            return None, "None"
        if rng.random() < 0.04:
            return call.pick(([1.0], "t", 3)), repr(call.pick(([1.0], "t", 3)))
        i = int(rng.integers(len(pool)))
        return pool[i], f"t{i}"
    if name in ("ne", "nb"):
        vals = [call.pick(INTS) if rng.random() < 0.3 else call.pick(SIZES) * (4 if name == "nb" else 1)
                for _ in range(call.pick((4, 4, 4, 2)))]
        return vals, repr(vals)
    if name == "order":
        v = call.pick(("asc", "desc", "sideways", 0, 1, 7))
        return v, repr(v)
    if name == "name":
        v = call.pick(("x", "y" * 100, ""))
        return v, repr(v)
    if param.annotation in ("float",) or name in ("s", "eps", "scale", "max_bias", "min", "max", "start", "stop",
                                                    "step", "negative_slope") or name.startswith(("freq_", "ext_",
                                                                                                    "attn_", "beta_")):
        v = call.pick(FLOATS) if rng.random() < 0.5 else float(rng.uniform(-4, 4))
        return v, repr(v)
    if rng.random() < 0.03:
        v = call.pick((2.5, "3", None))
        return v, repr(v)
    v = call.pick(INTS) if rng.random() < 0.3 else call.pick((0, 1, 2, 3, 4, 8, 16, 32))
    return v, repr(v)


def _inputs(rng, graph) -> dict:
    vals = {}
    for leaf in graph.leafs():
        if leaf.ptr.view_src:  # views read their source's memory
            continue
        leaf.set_input()
        t = leaf.type.name
        if t in ("I32", "I64"):
            vals[leaf] = rng.integers(0, 3, size=leaf.shape)
        else:
            vals[leaf] = rng.uniform(-2, 2, size=leaf.shape).astype(np.float32)
    return vals


def _oracle(op: str, args: list, inputs: dict):
    """The NumPy answer for the ops with an obvious one on contiguous F32 inputs, else None."""
    srcs = [a for a in args if hasattr(a, "ptr")]
    if not srcs or any(s not in inputs or s.type.name != "F32" for s in srcs):
        return None
    if op in ELEMENTWISE and len(srcs) == 2:
        a, b = inputs[srcs[0]].reshape(tuple(reversed(srcs[0].ne))), inputs[srcs[1]].reshape(tuple(reversed(srcs[1].ne)))
        reps = tuple(x // y for x, y in zip(a.shape, b.shape))
        return ELEMENTWISE[op](a, np.tile(b, reps))
    if op in UNARY_ORACLE and len(srcs) == 1:
        return UNARY_ORACLE[op](inputs[srcs[0]])
    if op == "mul_mat" and len(srcs) == 2 and all(s.ne[2] == s.ne[3] == 1 for s in srcs):
        a, b = (inputs[s].reshape(s.ne[1], s.ne[0]) for s in srcs)
        return b @ a.T
    return None


def _compare(got: np.ndarray, want: np.ndarray, tol: float) -> bool:
    got, want = np.asarray(got, np.float64).reshape(-1), np.asarray(want, np.float64).reshape(-1)
    if got.shape != want.shape:
        return False
    nan = np.isnan(got) | np.isnan(want)
    if not np.array_equal(np.isnan(got), np.isnan(want)):
        return False
    scale = max(1.0, float(np.max(np.abs(np.where(np.isfinite(want) & ~nan, want, 0)))))
    ok = np.isclose(got, want, rtol=tol, atol=tol * scale) | nan | (got == want)
    return bool(ok.all())


def run_one(seed: int, index: int, meta: bool) -> dict:
    """Make and run call `index`; returns its record (outcome, op, reproducer)."""
    import pyggml as gg
    from pyggml import ops
    call = Call(seed, index)
    rng = call.rng
    record = {"index": index, "op": "", "outcome": "ok", "message": "", "computed": False, "checked": False}
    try:
        ctx, other = gg.Context(), gg.Context()
        pool = []
        for k in range(int(rng.integers(1, 4))):
            foreign = rng.random() < 0.1
            pool.append(_tensor(call, gg, other if foreign else ctx, "other" if foreign else "ctx", k))
        names = sorted(n for n in ops.__all__ if callable(getattr(ops, n)))
        op = call.pick(names)
        record["op"] = op
        fn = getattr(ops, op)
        args, texts = [], []
        for pname, param in list(inspect.signature(fn).parameters.items())[1:]:
            if param.default is not inspect.Parameter.empty and rng.random() < 0.4:
                continue
            v, text = _argument(call, pname, param, pool)
            args.append(v)
            texts.append(text)
        target_ctx = ctx if rng.random() < 0.97 else "not a context"
        call.say(f"out = ops.{op}({'ctx' if target_ctx is ctx else repr(target_ctx)}, {', '.join(texts)})")
        out = fn(target_ctx, *args)
        if not isinstance(out, gg.Tensor) or rng.random() < 0.2:
            return record
        call.say("graph = gg.Graph(ctx).build_forward_expand(out)")
        graph = gg.Graph(ctx).build_forward_expand(out)
        inputs = _inputs(rng, graph)
        call.say("inputs = {t: np.random.default_rng(0).uniform(-2, 2, t.shape) for t in graph.leafs() "
                 "if not t.ptr.view_src}")
        call.say("[y] = gg.Runner('cpu').run(graph, inputs, [out])")
        [y] = gg.Runner("cpu").run(graph, inputs, [out])
        record["computed"] = True
        want = _oracle(op, args, inputs)
        if want is not None:
            record["checked"] = True
            if not _compare(y, want, 1e-3 if out.type.name == "F32" else 3e-2):
                record.update(outcome="wrong", message="the CPU disagrees with NumPy")
                return record
        if meta:
            call.say("[z] = gg.Runner('meta:cpu,cpu').run(graph, inputs, [out])")
            [z] = gg.Runner("meta:cpu,cpu").run(graph, inputs, [out])
            if not _compare(z, y, 1e-5):
                record.update(outcome="wrong", message="meta:cpu,cpu disagrees with the CPU")
    except DOCUMENTED as e:
        record.update(outcome="raised", message=f"{type(e).__name__}: {e}"[:300])
    except Exception as e:  # noqa: BLE001 - classifying is the point
        from pyggml.errors import GGMLError
        outcome = "raised" if isinstance(e, GGMLError) else "off-contract"
        record.update(outcome=outcome, message=f"{type(e).__name__}: {e}"[:300])
    finally:
        record["reproducer"] = "\n".join(call.lines)
    return record


def _child(seed: int, start: int, count: int, meta: bool):
    """Run calls start..start+count-1 here; one JSON line per call, flushed (a death loses none)."""
    for i in range(start, start + count):
        rec = run_one(seed, i, meta)
        sys.stdout.write(json.dumps(rec) + "\n")
        sys.stdout.flush()


def _spawn(seed: int, start: int, count: int, meta: bool) -> tuple[list[dict], int]:
    cmd = [sys.executable, "-m", "pyggml.fuzz", "--child", "--seed", str(seed), "--start", str(start),
           "--calls", str(count)] + ([] if meta else ["--no-meta"])
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    records = []
    for line in res.stdout.splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            pass
    return records, res.returncode


def fuzz(calls: int, seed: int, batch: int, meta: bool, progress=sys.stderr) -> dict:
    counts: Counter = Counter()
    findings: list[dict] = []
    start_time = time.time()
    for start in range(0, calls, batch):
        count = min(batch, calls - start)
        records, rc = _spawn(seed, start, count, meta)
        if len(records) < count:  # the call after the last record killed the child
            dead = start + len(records)
            counts["death"] += 1
            findings.append({"index": dead, "outcome": "death", "returncode": rc,
                             "reproducer": _reproducer(seed, dead, meta)})
            rest, _ = _spawn(seed, dead + 1, start + count - dead - 1, meta) if dead + 1 < start + count else ([], 0)
            records += rest  # (a second death in the same batch is counted on the next run)
        for r in records:
            counts[r["outcome"]] += 1
            counts["computed"] += r["computed"]
            counts["checked"] += r["checked"]
            if r["outcome"] in ("wrong", "off-contract"):
                findings.append(r)
        if progress and progress.isatty():
            progress.write(f"\r{min(start + batch, calls)}/{calls} calls, {counts['death']} deaths")
            progress.flush()
    if progress and progress.isatty():
        progress.write("\n")
    counts["calls"] = calls
    return {"seed": seed, "counts": dict(counts), "findings": findings, "seconds": round(time.time() - start_time, 1)}


def _reproducer(seed: int, index: int, meta: bool) -> str:
    """The script of a call that killed its process (its text is made without running it)."""
    res = subprocess.run([sys.executable, "-m", "pyggml.fuzz", "--script", "--seed", str(seed), "--start", str(index)]
                         + ([] if meta else ["--no-meta"]), capture_output=True, text=True, timeout=120)
    return res.stdout.strip() or f"python -m pyggml.fuzz --child --seed {seed} --start {index} --calls 1"


def _script(seed: int, index: int, meta: bool):
    """Print call `index`'s reproducer: the call is made with compute disabled, then its script shown."""
    import pyggml as gg
    real_run = gg.Runner.run
    gg.Runner.run = lambda self, *a, **k: (_ for _ in ()).throw(_Stop())  # the script up to the compute
    try:
        rec = run_one(seed, index, meta)
    finally:
        gg.Runner.run = real_run
    print(rec["reproducer"])


class _Stop(Exception):
    pass


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pyggml.fuzz", description=__doc__.splitlines()[0])

    def natural(text):
        v = int(text)
        if v < 0:
            raise argparse.ArgumentTypeError(f"must be >= 0, got {v}")
        return v
    ap.add_argument("--calls", type=natural, default=1000)
    ap.add_argument("--seed", type=natural, default=0)
    ap.add_argument("--batch", type=natural, default=250, help="calls per child process")
    ap.add_argument("--no-meta", dest="meta", action="store_false", help="skip the meta:cpu,cpu runs")
    ap.add_argument("--json", metavar="FILE", help="write the summary and findings here")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--script", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--start", type=natural, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.batch < 1:
        ap.error("--batch must be >= 1")
    if args.child:
        _child(args.seed, args.start, args.calls, args.meta)
        return 0
    if args.script:
        _script(args.seed, args.start, args.meta)
        return 0
    summary = fuzz(args.calls, args.seed, args.batch, args.meta)
    c = summary["counts"]
    print(f"fuzz: seed {args.seed}, {c['calls']} calls in {summary['seconds']} s: built-and-computed {c.get('computed', 0)}, "
          f"checked {c.get('checked', 0)}, ok {c.get('ok', 0)}, raised {c.get('raised', 0)}, "
          f"off-contract {c.get('off-contract', 0)}, wrong {c.get('wrong', 0)}, deaths {c.get('death', 0)}")
    for f in summary["findings"]:
        print(f"\n--- {f['outcome']} (call {f['index']}): {f.get('message', '')}\n{f['reproducer']}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(summary, fh, indent=1)
    return 1 if c.get("death") or c.get("wrong") or c.get("off-contract") else 0


if __name__ == "__main__":
    sys.exit(main())
