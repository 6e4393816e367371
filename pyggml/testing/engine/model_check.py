"""`python -m pyggml check --model FILE.gguf`: llama.cpp's own forward pass, every node against its oracle.

llama.cpp builds and computes the graph (pyggml.llama); its scheduler shows each node to pyggml's
`NodeChecker` (the context's `cb_eval`) just before and just after computing it, so every node is checked
against its op's NumPy oracle with the values it actually received, within that op's bound. Per backend:
nodes checked, passed and failed per op kind, the kinds with no oracle (listed, never counted as passed),
and the nodes left unread. The final logits are compared across backends against the first one named
(llama.cpp's own test-llama-archs bounds them at NMSE 1e-4 against the CPU).

Backends: `cpu`; a device (`vulkan0`, `cuda0`, `rpc0` with `--rpc HOST:PORT`: every layer offloaded to it);
`meta:DEV,DEV` (llama.cpp's `split_mode` tensor over those devices). On a meta device ggml's meta backend
calls the checker node by node inside its compute, and each node is read back whole (the devices' shares
assembled by its split state: ggml patch 0032); its logits are compared with the first backend's, or with a
CPU run added for that purpose when only meta devices are named.

The first failing nodes of each backend (MAX_FAILURES) are saved as reproducers (pyggml.testing.engine.repro) in
`--save-failures DIR`, and every node `--save-node PATTERN` names; `check --repro` reruns them.
"""

from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import os
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pyggml.conversation import ContextArgs, Script, has_tokenizer
from pyggml.target import Target
from pyggml.testing.engine import repro, verdict
from pyggml.testing.engine.nodes import WEIGHT_CACHE_BYTES, NodeChecker, NodeVerdict, file_weights
from pyggml.testing.engine.verdict import Record, nmse

LOGITS_NMSE = 1e-4  # llama.cpp's test-llama-archs: a backend's logits against the CPU's (F32 models)
# a model with quantized weights: each backend rounds the activations entering a quantized product its own way
# (the CPU to the weight's dot type, docs/findings.md 38; Vulkan to its own), each within the product bound
# NMSE_Q8_DOT of the op database, and the logits of two backends differ by that rounding carried through the
# layers: measured NMSE 5e-5 to 1.7e-4 on vulkan0 and meta:vulkan0,vulkan1 against the CPU for nine
# architectures at Q4_K_M (docs/llama.md), against the F32 models' 2e-7
LOGITS_NMSE_QUANTIZED = 5e-4
DIED = "the process running it died"


@dataclass(frozen=True)
class Talk:
    """What `check --model` decodes: `--prompt`/`--prompt-file` (or `--tokens` random ids), `--generate`,
    `--sequences`, `--speculative` (pyggml.conversation).

    Attributes:
        prompt: the prompt's text, tokenized by the model's own tokenizer; None: `tokens` random ids.
        tokens: random ids when there is no prompt, or the model has no tokenizer.
        generate: tokens generated one at a time after the prompt.
        sequences: sequences decoded together.
        speculative: the draft length K (0: none).
        seed: the random ids' seed.
        ctx_size: the context's tokens (0: what the conversation needs).
    """

    prompt: str | None = None
    tokens: int = 8
    generate: int = 0
    sequences: int = 1
    speculative: int = 0
    seed: int = 0
    ctx_size: int = 0

    def script(self, model: Any) -> tuple[Any, str]:
        """The conversation for a loaded model, and a note when the prompt could not be used (no tokenizer)."""
        kw = {"sequences": self.sequences, "generate": self.generate, "speculative": self.speculative}
        note = ""
        if self.prompt is not None and has_tokenizer(model):
            return Script.from_text(model, self.prompt, seed=self.seed, prefill_logits="all", **kw), note
        if self.prompt is not None:
            note = f"{Path(model.path).name} has no tokenizer llama.cpp reads: {self.tokens} random ids instead of the prompt"
        ids = tokens_for(model.n_vocab, max(self.tokens, self.sequences), self.seed)
        return Script.from_tokens(ids, seed=self.seed, prefill_logits="all", **kw), note

    def context_args(self, script: Any, model: Any) -> ContextArgs:
        """The Context's sizes: what the conversation needs, or `ctx_size` (then checked: ValueError with the
        numbers where the conversation does not fit)."""
        return script.context_args(model, n_ctx=self.ctx_size or None)


@dataclass
class ModelRun:
    """One conversation of a model on one backend: its node verdicts (each with its step) and its logits."""

    backend: str
    verdicts: list[NodeVerdict] = field(default_factory=list)
    logits: np.ndarray | None = None
    error: str = ""
    saved: list[Path] = field(default_factory=list)  # the reproducers written for this run
    seconds: float = 0.0  # the run's wall time, its child's start included
    died_with_extra_bufts: str = ""  # the death of the run with the CPU's extra buffer types, rerun without them
    transcript: Any = None  # what it decoded (pyggml.conversation.Transcript): later backends follow it
    rollback_nmse: float | None = None  # the logits after the rollback against a run that never drafted
    spread_nmse: float | None = None  # the logits with each product's rounding realized again (engine.spread)
    note: str = ""  # what the run could not do as asked (a prompt without a tokenizer)
    no_rollback: str = ""  # why the draft was left out: the model's memory cannot roll back

    def by_kind(self) -> dict[str, Counter]:
        """Per op kind: checked, passed, failed, without an oracle (or whose oracle could not model it) and
        left unread (with a weight in memory ggml cannot read back and not found in the model file)."""
        out: dict[str, Counter] = {}
        for v in self.verdicts:
            c = out.setdefault(v.kind, Counter())
            if v.unread:
                c["unread"] += 1
            elif v.comparison is None:
                c["no oracle" if not v.error else "not modelled"] += 1
            else:
                c["checked"] += 1
                c["passed" if v.ok else "known" if v.known else "failed"] += 1
        return out

    @property
    def failed(self) -> list[NodeVerdict]:
        """The nodes that disagreed with their oracle beyond their bound, no known disagreement covering them, in
        compute order."""
        return [v for v in self.verdicts if not v.ok and not v.known]


def tokens_for(n_vocab: int, n: int, seed: int = 0) -> list[int]:
    """n token ids drawn from the vocabulary, reproducibly."""
    return [int(t) for t in np.random.default_rng(seed).integers(0, n_vocab, n)]


def is_meta(backend: str) -> bool:
    """A meta device: llama.cpp's tensor split over the devices it names (meta:vulkan0,vulkan1)."""
    return Target.parse(backend).meta


def load_for(path: str, backend: str, extra_bufts: bool = True) -> Any:
    """The model loaded for `backend` (`pyggml.llama.Model.for_backend`): the CPU alone; every layer on one
    device; or llama.cpp's tensor split over a meta device's devices. extra_bufts: False is llama.cpp's
    `--no-repack` (no CPU_REPACK, AMX)."""
    from pyggml import llama

    return llama.Model.for_backend(path, backend, use_extra_bufts=extra_bufts)


def run_model(
    path: str,
    backend: str,
    n_tokens: int = 8,
    seed: int = 0,
    tolerance: Callable[[object, float], float] | None = None,
    keep: Callable[[NodeVerdict], bool] | None = None,
    extra_bufts: bool = True,
    talk: Talk | None = None,
    follow: Any = None,
    n_threads: int | None = None,
    oracle: str = "full",
    spread: bool = False,
) -> ModelRun:
    """Load `path` for `backend` and decode a conversation with every node checked (`talk`; None: n_tokens
    random ids in one batch); never raises for the model's sake: what went wrong is the run's `error`.
    tolerance, keep and oracle: as NodeChecker's; extra_bufts: as `load_for`'s; follow: another run's transcript
    to decode the very tokens of (pyggml.conversation.converse); n_threads: the CPU's (None: the cores); spread:
    decode the conversation once more with each product's rounding realized again (`engine.spread`), for the
    logits' bound of the runs compared with this one."""
    from pyggml import conversation, llama

    talk = talk or Talk(tokens=n_tokens, seed=seed)
    run = ModelRun(backend)
    try:
        model = load_for(path, backend, extra_bufts)
        script, run.note = talk.script(model)
        # weights llama.cpp put in a CPU extra buffer type (CPU_REPACK) are read from the file. Their decoded
        # values are kept for the steps after the first decode; with one decode nothing reads them again, and
        # keeping them cost fresh memory: qwen35-0.8b Q4_K_M, 32 tokens, 4.6 GB peak and 8-13 s, without 2.4 GB
        # and 3.9-4.1 s (bench/model_check_cost.py)
        cache = WEIGHT_CACHE_BYTES if script.generate or script.speculative else 0
        checker = NodeChecker(
            tolerance=tolerance,
            keep=keep,
            weights=file_weights(path),
            weight_cache_bytes=cache,
            backend=backend,
            oracle=oracle,
            projections=projected_cache() if oracle == "projected" else None,
        )
        starts: list[tuple[int, str]] = []
        args = talk.context_args(script, model)
        with llama.Context(model, **args, observe=checker, n_threads=n_threads) as ctx:
            why = conversation.cannot_roll_back(ctx, script)
            if why:  # the rest of the conversation is checked; the draft is reported skipped, with the reason
                script, run.no_rollback = dataclasses.replace(script, speculative=0), why
            run.transcript = conversation.converse(
                ctx, script, follow=follow, on_step=lambda label: starts.append((len(checker.verdicts), label))
            )
        for (begin, label), (end, _) in zip(starts, [*starts[1:], (len(checker.verdicts), "")]):
            for v in checker.verdicts[begin:end]:
                v.step = label
        run.verdicts, run.logits = checker.verdicts, run.transcript.logits()
        said = checker.projections.said if checker.projections is not None else []
        if said:  # a projection cache that could not be used: said in the report, the check ran without it
            run.note = "; ".join(x for x in (run.note, *said) if x)
        if script.speculative:  # the logits after the rollback against a run that never drafted
            with llama.Context(model, **args) as plain:
                again = conversation.no_draft(plain, run.transcript)
            run.rollback_nmse = nmse(run.transcript.steps[-1].logits, again)
        if spread:
            from pyggml.testing.engine.spread import Perturb

            try:
                with llama.Context(model, **args, observe=Perturb(), n_threads=n_threads) as ctx:
                    perturbed = conversation.converse(ctx, script, follow=run.transcript)
                run.spread_nmse = nmse(perturbed.logits(), run.logits)
            except Exception as e:  # noqa: BLE001 - the run's nodes stand; the others' logits get the fixed bound
                why = f"its own spread could not be measured ({type(e).__name__}: {e}): the logits' fixed bound"
                run.note = "; ".join(x for x in (run.note, why) if x)
    except Exception as e:  # noqa: BLE001 - reported as the backend's error, the other backends still run
        run.error = f"{type(e).__name__}: {e}"
    return run


def projected_cache() -> Any:
    """The projection cache of one model's run: its weights stay where llama.cpp loaded them while it runs."""
    from pyggml.testing.engine.projected import ProjectionCache

    return ProjectionCache(fixed_weights=True)


def keeper(patterns: list[str], failures: int = repro.MAX_FAILURES) -> Callable[[NodeVerdict], bool]:
    """NodeChecker's `keep` for one run: the first `failures` failing nodes, and every node whose name or
    kind matches one of the patterns (fnmatch, e.g. `attn_norm-*`, `MUL_MAT`)."""
    left = [failures]

    def keep(v: NodeVerdict) -> bool:
        if any(fnmatch.fnmatchcase(v.name, p) or fnmatch.fnmatchcase(v.kind, p.upper()) for p in patterns):
            return True
        if not v.ok and left[0] > 0:
            left[0] -= 1
            return True
        return False

    return keep


# The environment a model's check runs in (a variable the user set wins). ggml's CPU backend computes with
# OpenMP, whose idle threads spin after each graph compute (libgomp: GOMP_SPINCOUNT rounds, llama.cpp's 4
# threads by default); under the checker ggml computes one node at a time and Python reads and judges in
# between, so the spinning threads took the cores from Python. qwen35-0.8b Q4_K_M, 32 tokens, on this
# project's 2-core machine: 14.6 s, 8.8 s without the spin (bench/model_check_cost.py). NumPy's OpenBLAS does the
# same after each product it splits over threads (2^28 cycles, about 0.1 s, unless OPENBLAS_THREAD_TIMEOUT says
# less; 4, its least, is 16 cycles): after a prompt's large products its threads spun while llama.cpp computed the
# first generation step, and with ggml's own thread pool (the wheel) that step cost 0.4-0.7 s where the next took
# 0.3 (bench/README.md, "What a checked conversation and a comparison cost").
CHILD_ENV = {"GOMP_SPINCOUNT": "0", "OPENBLAS_THREAD_TIMEOUT": "4"}


def child_env(backend: str) -> dict[str, str]:
    """The environment a backend's run adds in its child: CHILD_ENV where the user set nothing, and for a CPU
    variant (cpu:zen4) that variant as the child's CPU, so that llama.cpp runs on it as it runs on `cpu`, its
    extra buffer types (repacked weights) included, as a release of llama.cpp that loaded it would."""
    env = {k: v for k, v in CHILD_ENV.items() if k not in os.environ}
    variant = Target.parse(backend).variant
    if variant is not None:
        env["PYGGML_CPU_VARIANT"] = variant
    return env


def run_in_child(
    path: str,
    backend: str,
    n_tokens: int = 8,
    seed: int = 0,
    nmse_bound: float | None = None,
    save_patterns: Sequence[str] = (),
    rpc_servers: str | None = None,
    extra_bufts: bool = True,
    talk: Talk | None = None,
    follow: Any = None,
    n_threads: int | None = None,
    oracle: str = "full",
    spread: bool = False,
) -> ModelRun:
    """run_model in a child process (pyggml.testing.engine.child), with `--node-nmse`'s bound and `--save-node`'s
    patterns: llama.cpp's GGML_ASSERTs end the process they fail in (docs/llama.md), and one backend's must
    not take the others' results with it. A child that dies is the run's error, with ggml's last words.
    rpc_servers: the `--rpc` servers, added in the child too (before anything lists the devices)."""
    from pyggml.testing.engine import child

    out = child.run(
        "pyggml.testing.engine.model_check:_child_run",
        (
            path,
            backend,
            n_tokens,
            seed,
            nmse_bound,
            list(save_patterns),
            rpc_servers,
            extra_bufts,
            talk,
            follow,
            n_threads,
            oracle,
            spread,
        ),
        env=child_env(backend),
    )
    if out.status == "returned":
        return out.value
    if out.status == "raised":
        return ModelRun(backend, error=f"{out.error_type}: {out.message}")
    said = [line.strip() for line in out.stderr.splitlines() if "GGML_ASSERT" in line or "ggml aborted" in line]
    how = out.signal_name or f"exit status {out.exit_code}"
    hint = ""
    if extra_bufts and not said:  # as ggml's AMX kernels died before ggml patch 0037 (docs/findings.md 37)
        hint = "; if the CPU keeps weights in an extra buffer type (CPU_REPACK, AMX), try --no-repack"
    return ModelRun(backend, error=f"{DIED} ({how})" + (f": {said[-1]}" if said else "") + hint)


def _child_run(
    path: str,
    backend: str,
    n_tokens: int,
    seed: int,
    nmse_bound: float | None,
    save_patterns: list[str],
    rpc_servers: str | None,
    extra_bufts: bool = True,
    talk: Talk | None = None,
    follow: Any = None,
    n_threads: int | None = None,
    oracle: str = "full",
    spread: bool = False,
) -> ModelRun:
    if rpc_servers:
        from pyggml import rpc

        rpc.add_servers(rpc_servers)
    tolerance = node_nmse(nmse_bound) if nmse_bound is not None else None
    return run_model(
        path,
        backend,
        n_tokens,
        seed,
        tolerance=tolerance,
        keep=keeper(save_patterns),
        extra_bufts=extra_bufts,
        talk=talk,
        follow=follow,
        n_threads=n_threads,
        oracle=oracle,
        spread=spread,
    )


def node_nmse(bound: float) -> Callable[[object, float], float]:
    """NodeChecker's `tolerance` for `--node-nmse`: every node of an inexact op judged within `bound`
    (exact ops stay bit-exact)."""
    return lambda t, b: b if b == 0 else bound


def save_captured(run: ModelRun, path: str, directory: str | Path) -> list[Path]:
    """Write the reproducer of every node of the run whose inputs were kept; returns the JSON files."""
    run.saved = [repro.save(directory, v, path, run.backend) for v in run.verdicts if v.capture is not None]
    return run.saved


def reference(runs: list[ModelRun]) -> ModelRun | None:
    """The run whose logits the others are compared with: the first that computed, a meta device's only when
    no other did."""
    done = [r for r in runs if r.logits is not None]
    return next((r for r in done if not is_meta(r.backend)), done[0] if done else None)


def logits_bound(path: str) -> float:
    """The NMSE two backends' logits of a model may differ by: LOGITS_NMSE for float weights (F32, F16, BF16),
    LOGITS_NMSE_QUANTIZED when a weight is quantized (the activations' rounding differs per backend)."""
    from pyggml import gguf

    floats = {"F32", "F16", "BF16"}
    quantized = any(i.type.name not in floats for i in gguf.read_info(path).tensor_info.values())
    return LOGITS_NMSE_QUANTIZED if quantized else LOGITS_NMSE


def logits_limit(path: str, ref: ModelRun) -> float:
    """The NMSE logits may differ from `ref`'s by: `logits_bound`, or SPREAD_FACTOR times the reference's own
    spread (`engine.spread`) where that was measured and is larger."""
    from pyggml.testing.engine import spread

    return spread.bound(logits_bound(path), ref.spread_nmse)


def logits_reason(path: str, ref: ModelRun) -> str:
    """Where `logits_limit`'s figure comes from, for the report."""
    from pyggml.testing.engine import spread

    floor = logits_bound(path)
    fixed = f"the bound of {'quantized' if floor == LOGITS_NMSE_QUANTIZED else 'float'} weights {floor:.1e}"
    if ref.spread_nmse is None:
        return f"bound: {fixed}"
    own = f"{spread.SPREAD_FACTOR:g} x {ref.backend}'s own spread {ref.spread_nmse:.1e} (its products' rounding realized again)"
    return f"bound {logits_limit(path, ref):.1e}: the larger of {fixed} and {own}"


def records(path: str, runs: list[ModelRun]) -> list[Record]:
    """The runs as check's records: one per backend and op kind (failed, passed, or skipped for a kind
    with no oracle or only unread nodes), one per backend for its logits against the reference's."""
    name = Path(path).name
    out: list[Record] = []
    ref = reference(runs)
    for run in runs:
        if run.error:
            out.append(verdict.error(f"{name}/model", run.backend, run.error))
            continue
        if run.died_with_extra_bufts:
            msg = f"with the CPU's extra buffer types: {run.died_with_extra_bufts}; its nodes checked without them"
            out.append(verdict.error(f"{name}/extra-buffers", run.backend, msg))
        for kind in sorted({v.kind for v in run.verdicts}):
            out.append(verdict.nodes(f"{name}/{kind}", run.backend, [v for v in run.verdicts if v.kind == kind]))
        if ref is not None and ref.logits is not None and run is not ref and run.logits is not None:
            from pyggml.drift import logit_stats

            err, bound = nmse(run.logits, ref.logits), logits_limit(path, ref)
            msg = f"against {ref.backend}"
            if run.logits.shape == ref.logits.shape:
                st = logit_stats(ref.logits, run.logits)
                msg += f": KLD mean {st['kld']['mean']:.3g}, max {st['kld']['max']:.3g}, same top-1 {100 * st['same_top1']:.1f} %"
            msg += "; " + logits_reason(path, ref)
            rules = verdict.Policy(bound, float("inf"))
            out.append(
                verdict.rule(f"{name}/logits", run.backend, [verdict.within(err, bound, "NMSE")], rules, note=msg)
            )
        if run.no_rollback:
            out.append(verdict.skip(f"{name}/rollback", run.backend, run.no_rollback))
        if run.rollback_nmse is not None:
            # a run that never drafted decodes the same tokens in other batches (matrix-vector products where the
            # draft had matrix-matrix ones): rounding of that size, within the bound of two backends' logits
            bound = logits_limit(path, ref or run)
            msg = "the logits after the rollback against a run that never drafted; " + logits_reason(path, ref or run)
            cmp = verdict.within(run.rollback_nmse, bound, "NMSE")
            out.append(
                verdict.rule(f"{name}/rollback", run.backend, [cmp], verdict.Policy(bound, float("inf")), note=msg)
            )
    return out


def table(runs: list[ModelRun]) -> str:
    """Per backend, a row per op kind: nodes checked, passed, failed, with no oracle, unread; then the first
    failing nodes and the reproducers saved."""
    lines = []
    for run in runs:
        lines.append(f"== {run.backend}" + (f": {run.error}" if run.error else ""))
        if run.error:
            continue
        if run.died_with_extra_bufts:
            lines.append(f"  ERROR with the CPU's extra buffer types: {run.died_with_extra_bufts}")
            lines.append("  the nodes below: checked without them (--no-repack)")
        where = Counter(v.buffer or "host" for v in run.verdicts)
        lines.append("  nodes in: " + ", ".join(f"{n} {b}" for b, n in sorted(where.items(), key=lambda x: -x[1])))
        lines.append(f"  {'op kind':<22} {'checked':>8} {'passed':>8} {'failed':>8} {'no oracle':>10} {'unread':>7}")
        for kind, c in sorted(run.by_kind().items()):
            known = f" ({c['known']} known)" if c["known"] else ""  # failed, a known disagreement covering them
            lines.append(
                f"  {kind:<22} {c['checked']:>8} {c['passed']:>8} {c['failed']:>8}"
                f" {c['no oracle'] + c['not modelled']:>10} {c['unread']:>7}{known}"
            )
        projected = Counter(v.oracle for v in run.verdicts if v.oracle != "full")
        if projected:
            rechecked = projected["full, after the projection failed it"]
            lines.append(
                f"  products judged by their weight's projection: {projected['projected']}"
                f"{f', failed by it and rechecked in full: {rechecked}' if rechecked else ''}"
            )
        steps: dict[str, Counter] = {}
        for v in run.verdicts:
            c = steps.setdefault(v.step, Counter())
            c["checked"] += v.comparison is not None
            c["failed"] += not v.ok and not v.known
        if len(steps) > 1:
            lines.append(f"  {'step':<22} {'checked':>8} {'failed':>8}")
            for label, c in steps.items():
                lines.append(f"  {label:<22} {c['checked']:>8} {c['failed']:>8}")
        if run.transcript is not None and run.transcript.accepted:
            lines.append(f"  draft: accepted per sequence {run.transcript.accepted}, the rest rolled back")
        if run.note:
            lines.append(f"  note: {run.note}")
        if run.no_rollback:
            lines.append(f"  no draft: {run.no_rollback}")
        for v in run.failed[:5]:
            assert v.comparison is not None
            at = f" ({v.step})" if v.step else ""
            lines.append(f"  FAIL node {v.index} {v.kind} {v.name!r}{at}: {v.comparison.message}")
        if run.saved:
            lines.append(f"  {len(run.saved)} reproducers saved in {run.saved[0].parent}")
    return "\n".join(lines)


def not_applicable(args: argparse.Namespace, what: str) -> str | None:
    """Why options given with `check --model` or `check --repro` (what) cannot apply, or None: those that
    select op cases, and those of the other mode. Refused rather than ignored."""
    flags = [
        ("--only", args.only),
        ("--op", args.op),
        ("--type", args.type and not getattr(args, "arch", None)),  # with --arch: the models' file types
        ("--list", args.list),
        ("--slow", args.slow),
        ("--mode grad", args.mode == "grad"),
    ]
    if what == "--repro":
        flags += [
            ("--model", args.model),
            ("--arch", getattr(args, "arch", None)),
            ("--save-failures", args.save_failures),
            ("--save-node", args.save_node),
            ("--node-nmse", args.node_nmse is not None),
            ("--no-repack", getattr(args, "no_repack", False)),
            ("--oracle projected", getattr(args, "oracle", "full") == "projected"),
        ]
    given = [flag for flag, value in flags if value]
    if not given:
        return None
    verb = "does" if len(given) == 1 else "do"
    runs = "a model's graph" if what == "--model" else "saved nodes"
    return f"{what} runs {runs}, not the op cases: {', '.join(given)} {verb} not apply"


def projection_seed(args: argparse.Namespace) -> str | None:
    """`--projection-seed N` for the runs (their children inherit it as $PYGGML_PROJECTION_SEED); why it cannot
    apply, or None: without `--oracle projected`, or another seed already in the environment (given twice)."""
    seed = getattr(args, "projection_seed", None)
    if seed is None:
        if getattr(args, "oracle", "full") == "projected":  # the environment's seed, read by every child
            from pyggml.testing.engine import projected

            try:
                projected.seed()
            except ValueError as e:
                return str(e)
        return None
    if getattr(args, "oracle", "full") != "projected":
        return "--projection-seed is the projected oracle's: add --oracle projected"
    given = os.environ.get("PYGGML_PROJECTION_SEED", "").strip()
    if given and given != str(seed):
        return f"--projection-seed {seed} and PYGGML_PROJECTION_SEED={given}: the seed given twice; give it once"
    os.environ["PYGGML_PROJECTION_SEED"] = str(seed)
    return None


def model_only(args: argparse.Namespace) -> list[str]:
    """The options given that apply to `--model`/`--arch` runs only (the op cases would ignore them)."""
    flags = [
        ("--oracle projected", getattr(args, "oracle", "full") == "projected"),
        ("--projection-seed", getattr(args, "projection_seed", None) is not None),
        ("--node-nmse", getattr(args, "node_nmse", None) is not None),
        ("--no-repack", getattr(args, "no_repack", False)),
        ("--save-node", getattr(args, "save_node", None)),
        ("--prompt", getattr(args, "prompt", None)),
        ("--prompt-file", getattr(args, "prompt_file", None)),
        ("--generate", getattr(args, "generate", 0)),
        ("--speculative", getattr(args, "speculative", 0)),
        ("--ctx-size", getattr(args, "ctx_size", 0)),
    ]
    return [flag for flag, value in flags if value]


def made_models(archs: Sequence[str], file_types: Sequence[str], folder: str) -> list[tuple[str, str | None, str]]:
    """`--arch` x `--type`: each model written by `make-model ARCH FILE --type TYPE` (in a child: llama.cpp's
    generator and quantizer run there) into folder, as (label, path or None, why not)."""
    import subprocess

    from pyggml.models import llama_archs
    from pyggml.models.make_model import architectures

    if list(archs) == ["all"]:
        archs = llama_archs.names() + [a for a in architectures() if a not in llama_archs.names()]
    out: list[tuple[str, str | None, str]] = []
    for arch in archs:
        for file_type in file_types:
            label, path = f"{arch}-{file_type}", str(Path(folder) / f"{arch}-{file_type}.gguf")
            cmd = [sys.executable, "-m", "pyggml", "make-model", arch, path, "--type", file_type]
            made = subprocess.run(cmd, capture_output=True, text=True)
            said = made.stderr.strip().splitlines()
            why = said[-1].removeprefix("make-model: ") if said else f"exit status {made.returncode}"
            out.append((label, path, "") if made.returncode == 0 else (label, None, why))
    return out


def summary(rows: list[tuple[str, ModelRun | None, str]]) -> str:
    """The matrix: a row per model and backend (nodes checked, failed, without an oracle, unread, seconds, and
    what went wrong), then the first failing nodes of each row that has them."""
    head = f"{'model':<28} {'backend':<18} {'nodes':>6} {'failed':>7} {'no oracle':>10} {'unread':>7} {'s':>6}  error"
    lines = [head]
    for label, run, why in rows:
        if run is None:
            lines.append(f"{label:<28} {'-':<18} {'-':>6} {'-':>7} {'-':>10} {'-':>7} {'-':>6}  not made: {why}")
            continue
        kinds = run.by_kind().values()
        count = {k: sum(c[k] for c in kinds) for k in ("checked", "failed", "no oracle", "not modelled", "unread")}
        lines.append(
            f"{label:<28} {run.backend:<18} {count['checked']:>6} {count['failed']:>7}"
            f" {count['no oracle'] + count['not modelled']:>10} {count['unread']:>7} {run.seconds:>6.1f}  {run.error}"
            + (
                f"with extra buffer types: {run.died_with_extra_bufts}; checked without"
                if run.died_with_extra_bufts
                else ""
            )
        )
    for label, run, _ in rows:
        if run is None:
            continue
        for v in run.failed[:3]:
            assert v.comparison is not None
            lines.append(f"  FAIL {label} on {run.backend}: node {v.index} {v.kind} {v.name!r}: {v.comparison.message}")
    return "\n".join(lines)


def talk_from(args: argparse.Namespace) -> Talk | str:
    """The conversation the options ask for (`--prompt`/`--prompt-file`, `--tokens`, `--generate`, `--sequences`,
    `--speculative`, `--ctx-size`: check --model's and compare's), or why they cannot be used."""
    ctx_size = getattr(args, "ctx_size", 0)
    for flag, value, least in (
        ("--tokens", args.tokens, 1),
        ("--generate", args.generate, 0),
        ("--sequences", args.sequences, 1),
        ("--speculative", args.speculative, 0),
        ("--ctx-size", ctx_size, 0),
    ):
        if value < least:
            return f"{flag} must be at least {least}, not {value}"
    if args.speculative > 64:
        return f"--speculative {args.speculative}: llama.cpp keeps at most 64 rollback snapshots (n_rs_seq)"
    if args.prompt is not None and args.prompt_file:
        return "give --prompt or --prompt-file, not both"
    prompt = args.prompt
    if args.prompt_file:
        try:
            prompt = Path(args.prompt_file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            return f"--prompt-file {args.prompt_file}: {e}"
    if prompt is not None and not prompt.strip():
        return "the prompt is empty"
    return Talk(prompt, args.tokens, args.generate, args.sequences, args.speculative, 0, ctx_size)


def conversation_refused(path: str, talk: Talk, probe: Any = None) -> str:
    """Why the conversation cannot run on this model, or "": a conversation longer than `--ctx-size`, or without
    it longer than the model was trained for (read from the file's vocabulary and hyperparameters alone: `probe`,
    the file loaded with `vocab_only`, where the caller has one), a draft (`--speculative`) where the memory cannot
    roll back. The draft is checked on the CPU in a child process (llama.cpp loads the file there; an abort ends
    only the child)."""
    from pyggml import llama
    from pyggml.testing.engine import child

    if not talk.ctx_size:
        model = probe
        if model is None:
            try:
                model = llama.Model.load(path, n_gpu_layers=0, devices=[], vocab_only=True)
            except (ValueError, llama.LlamaError):
                return ""  # the runs say why the file cannot be loaded
        try:
            script, _ = talk.script(model)
            script.context_args(model)
        except ValueError as e:
            return str(e)
        finally:
            if probe is None:
                model.close()
    if not talk.speculative and not talk.ctx_size:  # nothing else to refuse before the runs
        return ""
    out = child.run("pyggml.testing.engine.model_check:_refusal", (path, talk), timeout=600)
    if out.status == "returned":
        return str(out.value)
    if out.status == "raised":
        return f"{out.error_type}: {out.message}"
    return ""  # a death: the runs themselves report it


def _refusal(path: str, talk: Talk) -> str:
    from pyggml import conversation, llama

    model = llama.Model.load(path, n_gpu_layers=0, devices=[], use_extra_bufts=False)
    try:
        script, _ = talk.script(model)
        args = talk.context_args(script, model)
        if script.speculative:
            with llama.Context(model, **args) as ctx:
                return conversation.cannot_roll_back(ctx, script)
    except ValueError as e:
        return str(e)
    finally:
        model.close()
    return ""


def main(args: argparse.Namespace) -> int:
    """`check --model FILE [--model FILE ...]` or `check --arch ARCH... [--type TYPE...]`: exit 1 when a node
    or the logits fail, a backend could not run a model, or a model could not be made; 2 for arguments it
    cannot use. One model prints its table per op kind; several print the matrix (`summary`)."""
    import tempfile
    import time

    from pyggml.testing.engine.junit import write_report
    from pyggml.testing.engine.session import available_backends

    def fail(msg: str) -> int:
        print(f"check: {msg}", file=sys.stderr)
        return 2

    why = not_applicable(args, "--model")
    if why:
        return fail(why)
    why = projection_seed(args)
    if why:
        return fail(why)
    talk = talk_from(args)
    if isinstance(talk, str):
        return fail(talk)
    if args.node_nmse is not None and not 0 < args.node_nmse < float("inf"):
        return fail(f"--node-nmse must be a positive number, not {args.node_nmse}")
    files = list(args.model or [])
    archs = list(getattr(args, "arch", None) or [])
    if archs and archs != ["all"]:
        from pyggml.models import llama_archs
        from pyggml.models.make_model import architectures

        unknown = [a for a in archs if a not in llama_archs.names() and a not in architectures()]
        if unknown:
            return fail(f"--arch {', '.join(unknown)}: no such architecture (python -m pyggml make-model --list)")
    for f in files:
        from pyggml.gguf import not_a_file

        bad = not_a_file(f)
        if bad:  # a file that is not what it claims is bad input (2), not a run that failed
            return fail(f"--model {f}: {bad}")
        why = conversation_refused(f, talk)
        if why:
            return fail(f"--model {f}: {why}")
    from pyggml.testing.engine.junit import reports_error

    why = reports_error(args.json, args.junit)
    if why:
        return fail(why)
    from pyggml import target

    backends = target.expand(args.backend or ["cpu"])
    known = set(available_backends())
    for b in backends:
        why = target.refusal(b, known)
        if why:
            return fail(f"--backend {b}: {why}")
    if "cpu" not in backends:  # a device's or a split's logits are compared with the CPU's
        backends.insert(0, "cpu")
    directory = args.save_failures or repro.DEFAULT_DIR

    # run_in_child's arguments but the extra buffer types
    def common(path: str, backend: str) -> tuple[str, str, int, int, float | None, list[str], str | None]:
        return path, backend, args.tokens, 0, args.node_nmse, args.save_node or [], getattr(args, "rpc", None)

    follow: Any = None  # the first run's transcript: the later backends decode its very tokens

    rows: list[tuple[str, ModelRun | None, str]] = []
    recs: list[Record] = []
    all_runs: list[ModelRun] = []
    with tempfile.TemporaryDirectory(prefix="pyggml-models-") as folder:
        models = [(Path(f).name, f, "") for f in files]
        if archs:
            models += made_models(archs, args.type or ["f32"], folder)
        for label, path, not_made in models:
            if path is None:
                rows.append((label, None, not_made))
                recs.append(verdict.error(f"{label}.gguf/model", "-", f"not made: {not_made}"))
                continue
            runs = []
            for b in backends:
                started = time.perf_counter()
                repack = not getattr(args, "no_repack", False)
                oracle = getattr(args, "oracle", "full")
                # the first backend is the reference the others' logits are held against: its own spread sets
                # their bound (engine.spread), where there are others and the reference is a CPU's
                spread = b == backends[0] and len(backends) > 1 and Target.parse(b).family == "cpu"

                def checked(extra_bufts: bool) -> ModelRun:
                    return run_in_child(
                        *common(path, b),
                        extra_bufts,
                        talk=talk,
                        follow=follow,
                        n_threads=args.threads,
                        oracle=oracle,
                        spread=spread,
                    )

                run = checked(repack)
                if run.error.startswith(DIED) and repack:
                    # a kernel of an extra buffer type that kills the process (AMX's did, docs/findings.md 37):
                    # check the nodes without the extra buffer types, and report the death as the run's own error
                    # record
                    again = checked(False)
                    if not again.error:
                        again.died_with_extra_bufts, run = run.error, again
                run.seconds = time.perf_counter() - started
                if follow is None and run.transcript is not None:
                    follow = run.transcript
                runs.append(run)
                rows.append((label, run, ""))
            try:
                for run in runs:
                    save_captured(run, path, directory)
            except OSError as e:
                return fail(f"--save-failures {directory}: cannot write the reproducers: {e}")
            recs += records(path, runs)
            all_runs += runs
            follow = None
    out = sys.stderr if args.json == "-" else sys.stdout
    if len(rows) == len(backends) and files:  # one model file: its table per op kind
        print(table(all_runs), file=out)
    else:
        print(summary(rows), file=out)
    for r in recs:
        if r.case.endswith("/logits"):
            print(
                f"logits of {r.case[: -len('/logits')]} on {r.backend} {r.message}: NMSE {r.error:.1e} ({r.status})",
                file=out,
            )
        if r.case.endswith("/rollback"):
            print(
                f"{r.case[: -len('/rollback')]} on {r.backend}: {r.message}: "
                + (f"NMSE {r.error:.1e}" if r.error is not None else "no draft")
                + f" ({r.status})",
                file=out,
            )
    if any(run.saved for run in all_runs):
        print(f"rerun the saved nodes: python -m pyggml check --repro {directory}", file=out)
    for kind, path in (("JSON", args.json), ("JUnit", args.junit)):
        if path:
            write_report(kind, path, recs, "pyggml.check.model")
    return 1 if any(r.status.bad for r in recs) else 0
