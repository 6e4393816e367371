"""`python -m pyggml check --model FILE.gguf`: llama.cpp's own forward pass, every node against its oracle.

llama.cpp builds and computes the graph (pyggml.llama); its scheduler shows each node to pyggml's
`NodeChecker` (the context's `cb_eval`) just before and just after computing it, so every node is checked
against its op's NumPy oracle with the values it actually received, within that op's bound. Per backend:
nodes checked, passed and failed per op kind, and the kinds with no oracle (listed, never counted as
passed). The final logits are compared across backends against the first one named (llama.cpp's own
test-llama-archs bounds them at NMSE 1e-4 against the CPU).

Backends: `cpu`, or a device (`vulkan0`, `cuda0`, `rpc0`: every layer offloaded to it). Meta devices
(llama.cpp's `split_mode` tensor) are refused for now: reading a node of llama.cpp's tensor split back
through ggml's meta buffer aborted in ggml_backend_tensor_get (an assert on the read's extent, found with
tiny_llama on meta:vulkan0,vulkan1), so the node checker cannot read them yet.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from pyggml.testing.nodes import NodeChecker, NodeVerdict
from pyggml.testing.verdict import Record, Status, nmse

LOGITS_NMSE = 1e-4  # llama.cpp's test-llama-archs: a backend's logits against the CPU's


@dataclass
class ModelRun:
    """One forward pass of a model on one backend: its node verdicts and its logits."""

    backend: str
    verdicts: list[NodeVerdict] = field(default_factory=list)
    logits: np.ndarray | None = None
    error: str = ""

    def by_kind(self) -> dict[str, Counter]:
        """Per op kind: checked, passed, failed and without an oracle (or whose oracle could not model it)."""
        out: dict[str, Counter] = {}
        for v in self.verdicts:
            c = out.setdefault(v.kind, Counter())
            if v.comparison is None:
                c["no oracle" if not v.error else "not modelled"] += 1
            else:
                c["checked"] += 1
                c["passed" if v.ok else "failed"] += 1
        return out

    @property
    def failed(self) -> list[NodeVerdict]:
        return [v for v in self.verdicts if not v.ok]


def tokens_for(n_vocab: int, n: int, seed: int = 0) -> list[int]:
    """n token ids drawn from the vocabulary, reproducibly."""
    return [int(t) for t in np.random.default_rng(seed).integers(0, n_vocab, n)]


def run_model(path: str, backend: str, n_tokens: int = 8, seed: int = 0) -> ModelRun:
    """Load `path` for `backend`, decode n_tokens tokens with every node checked; never raises for the
    model's sake: what went wrong is the run's `error`."""
    from pyggml import llama

    run = ModelRun(backend)
    try:
        if backend == "cpu":
            model = llama.Model.load(path, n_gpu_layers=0, devices=[])  # no GPU at all, not even for op offload
        else:
            model = llama.Model.load(path, devices=[backend], split_mode="none")
        checker = NodeChecker()
        ctx = llama.Context(model, n_ctx=max(64, 2 * n_tokens), n_batch=n_tokens, n_ubatch=n_tokens, observe=checker)
        ctx.decode(tokens_for(model.n_vocab, n_tokens, seed), logits="all")
        run.verdicts, run.logits = checker.verdicts, ctx.all_logits()
    except Exception as e:  # noqa: BLE001 - reported as the backend's error, the other backends still run
        run.error = f"{type(e).__name__}: {e}"
    return run


def records(path: str, runs: list[ModelRun]) -> list[Record]:
    """The runs as check's records: one per backend and op kind (failed, passed, or skipped for a kind
    with no oracle), one per backend for its logits against the first backend's."""
    name = Path(path).name
    out: list[Record] = []
    ref = next((r for r in runs if r.logits is not None), None)
    for run in runs:
        if run.error:
            out.append(Record(f"{name}/model", run.backend, Status.ERROR, message=run.error))
            continue
        for kind, c in sorted(run.by_kind().items()):
            worst = max(
                (v.comparison.nmse for v in run.verdicts if v.kind == kind and v.comparison is not None), default=None
            )
            if c["failed"]:
                bad = next(v for v in run.verdicts if v.kind == kind and not v.ok)
                assert bad.comparison is not None
                msg = f"{c['failed']} of {c['checked']} nodes; first: {bad.name!r}: {bad.comparison.message}"
                out.append(Record(f"{name}/{kind}", run.backend, Status.FAIL, worst, bad.nmse_bound, msg))
            elif c["checked"]:
                out.append(Record(f"{name}/{kind}", run.backend, Status.PASS, worst, message=f"{c['checked']} nodes"))
            else:
                n = c["no oracle"] + c["not modelled"]
                out.append(Record(f"{name}/{kind}", run.backend, Status.SKIPPED, message=f"{n} nodes, no oracle"))
        if ref is not None and ref.logits is not None and run is not ref and run.logits is not None:
            err = nmse(run.logits, ref.logits)
            status = Status.PASS if err <= LOGITS_NMSE else Status.FAIL
            out.append(
                Record(f"{name}/logits", run.backend, status, err, LOGITS_NMSE, message=f"against {ref.backend}")
            )
    return out


def table(runs: list[ModelRun]) -> str:
    lines = []
    for run in runs:
        lines.append(f"== {run.backend}" + (f": {run.error}" if run.error else ""))
        if run.error:
            continue
        lines.append(f"  {'op kind':<22} {'checked':>8} {'passed':>8} {'failed':>8} {'no oracle':>10}")
        for kind, c in sorted(run.by_kind().items()):
            lines.append(
                f"  {kind:<22} {c['checked']:>8} {c['passed']:>8} {c['failed']:>8}"
                f" {c['no oracle'] + c['not modelled']:>10}"
            )
        for v in run.failed[:5]:
            assert v.comparison is not None
            lines.append(f"  FAIL node {v.index} {v.kind} {v.name!r}: {v.comparison.message}")
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    """`check --model FILE`: exit 1 when a node or the logits fail, or a backend could not run the model."""
    from pyggml.testing.check import available_backends
    from pyggml.testing.junit import write_junit

    ignored = [
        flag
        for flag, given in (
            ("--only", args.only),
            ("--op", args.op),
            ("--type", args.type),
            ("--list", args.list),
            ("--slow", args.slow),
            ("--mode grad", args.mode == "grad"),
        )
        if given
    ]
    if ignored:  # they select op cases, which a model run has none of: refused rather than ignored
        verb = "does" if len(ignored) == 1 else "do"
        print(
            f"check: --model runs a model's graph, not the op cases: {', '.join(ignored)} {verb} not apply",
            file=sys.stderr,
        )
        return 2
    if args.tokens < 1:
        print(f"check: --tokens must be at least 1, not {args.tokens}", file=sys.stderr)
        return 2
    if not Path(args.model).is_file():
        print(f"check: --model {args.model}: no such file", file=sys.stderr)
        return 2
    backends = [b.lower() for b in (args.backend or ["cpu"])]
    if any(b.startswith("meta:") for b in backends):
        print(
            "check: --model on a meta device is not supported yet: ggml aborts reading the nodes of "
            "llama.cpp's tensor split back (pyggml/testing/model_check.py says more)",
            file=sys.stderr,
        )
        return 2
    known = set(available_backends())
    unknown = [b for b in backends if not b.startswith("meta:") and b not in known]
    if unknown:
        print(
            f"check: no backend {', '.join(unknown)} in this build (available: {', '.join(sorted(known))})",
            file=sys.stderr,
        )
        return 2
    runs = [run_model(args.model, b, args.tokens) for b in backends]
    recs = records(args.model, runs)
    out = sys.stderr if args.json == "-" else sys.stdout
    print(table(runs), file=out)
    for r in recs:
        if r.case.endswith("/logits"):
            print(f"logits on {r.backend} {r.message}: NMSE {r.error:.1e} ({r.status})", file=out)
    if args.json:
        data = json.dumps([asdict(r) for r in recs], indent=1)
        if args.json == "-":
            print(data)
        else:
            Path(args.json).write_text(data)
    if args.junit:
        write_junit(recs, sys.stdout.buffer if args.junit == "-" else args.junit, "pyggml.check.model")
    return 1 if any(r.status.bad for r in recs) else 0
