"""`python -m pyggml compare`: one run of a llama.cpp model held against another, node by node.

    python -m pyggml compare F32.gguf Q4_K_M.gguf --prompt "..." --generate 4     # a file against its parent
    python -m pyggml compare M.gguf --backend cpu --backend vulkan0                # one file on two backends
    python -m pyggml compare M.gguf --backend vulkan0 --backend meta:vulkan0,vulkan1

Run A (the first file, or the first backend) decodes the conversation (`check --model`'s `--prompt`,
`--generate`, `--sequences`, `--speculative`); run B decodes the very same tokens (it follows A's transcript)
and every node it computes is compared with A's node of the same step, name and occurrence (pyggml.drift).
The two take turns, a step each (`pyggml.llama.record_pair`): B reads A's nodes where A computed them, so
both models are loaded at once and A's nodes are held for one step only; `--one-at-a-time` loads one model
at a time and keeps every node of A in memory until B is done (for two models that do not fit together).
The figures:
NMSE, largest difference, cosine, per layer the error of its output and its growth, the first node whose error
jumps beyond the bound, with a reproducer of it saved (`check --repro` reruns it against its oracle); at the
logits, KLD (mean, median, 99th percentile, max), same top-1 and RMS dp as llama-perplexity's --kl-divergence
reports them. `--plot FILE` draws the error by layer, `--json FILE` writes every figure.

Exit status: 0 when both runs completed, whatever the figures (a comparison measures, it does not judge); 1
when a run failed; 2 for arguments it cannot use (said on stderr).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

from pyggml.target import refusal
from pyggml.testing.check_options import add_backend_option

DEFAULT_DIR = "pyggml-compare"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The command's options."""
    p.add_argument("models", nargs="+", metavar="FILE.gguf", help="A, or A and B (one architecture and vocabulary)")
    add_backend_option(
        p,
        "with one file: the two backends, A's then B's (cpu, vulkan0, meta:cpu,cpu, ...); with two files: the "
        "backend of both (default cpu)",
    )
    p.add_argument("--prompt", metavar="TEXT", help="the text decoded, by A's tokenizer (default: --tokens random ids)")
    p.add_argument("--prompt-file", metavar="FILE", help="the prompt's text from a file")
    p.add_argument("--tokens", type=int, default=8, metavar="N", help="random ids without a prompt (default 8)")
    p.add_argument("--generate", type=int, default=0, metavar="N", help="tokens generated one at a time after it")
    p.add_argument("--sequences", type=int, default=1, metavar="S", help="sequences decoded together")
    p.add_argument("--speculative", type=int, default=0, metavar="K", help="a draft of K tokens, rolled back")
    p.add_argument(
        "--ctx-size",
        type=int,
        default=0,
        metavar="N",
        help="the context's tokens (default: what the conversation needs, the generated tokens within what the "
        "model was trained for)",
    )
    p.add_argument(
        "--bound",
        type=float,
        default=None,
        metavar="NMSE",
        help="the first divergent node: the first whose NMSE crosses this bound (default 1e-5) while its inputs' stayed within",
    )
    p.add_argument("--json", metavar="FILE", help="write every figure here (- : stdout, the table then on stderr)")
    p.add_argument("--plot", metavar="FILE.png", help="draw the error by layer, a line per kind of node (matplotlib)")
    p.add_argument(
        "--save",
        metavar="DIR",
        default=DEFAULT_DIR,
        help=f"save the first divergent node of B as a reproducer here (default {DEFAULT_DIR})",
    )
    p.add_argument("--no-save", action="store_true", help="save no reproducer")
    p.add_argument("--logits-only", action="store_true", help="compare the logits only (no node is read)")
    p.add_argument(
        "--one-at-a-time",
        action="store_true",
        help="run A whole, then B: one model loaded at a time, every node of A kept in memory meanwhile",
    )
    p.add_argument("--no-repack", action="store_true", help="no CPU extra buffer types (llama.cpp's --no-repack)")
    p.add_argument("--rows", type=int, default=12, metavar="N", help="the nodes listed (largest jumps first)")


def _fail(msg: str) -> int:
    print(f"compare: {msg}", file=sys.stderr)
    return 2


def _runs(args: argparse.Namespace) -> tuple[list[tuple[str, str]], str]:
    """[(file, backend)] for A and B, or why not."""
    backends = [b.lower() for b in (args.backend or [])]
    files = list(args.models)
    if len(files) > 2:
        return [], f"{len(files)} files: compare takes A, or A and B"
    if len(files) == 2:
        if len(backends) > 2:
            return [], "two files run on one backend (or A's and B's): give at most two --backend"
        b = backends or ["cpu"]
        if os.path.realpath(files[0]) == os.path.realpath(files[1]) and b[0] == b[-1]:
            return [], f"{files[1]} is {files[0]} on {b[0]} again: the run would be compared with itself"
        return [(files[0], b[0]), (files[1], b[-1])], ""
    if len(backends) != 2:
        return [], "one file is compared on two backends: give --backend twice (A's, then B's), or a second file"
    if backends[0] == backends[1]:
        return [], f"--backend {backends[0]} twice: the run would be compared with itself"
    return [(files[0], backends[0]), (files[0], backends[1])], ""


def main(args: argparse.Namespace) -> int:
    """The command; see the module's docstring."""
    from pyggml import llama
    from pyggml.testing.engine.session import available_backends

    runs, why = _runs(args)
    if why:
        return _fail(why)
    for path, _ in runs:
        from pyggml.gguf import not_a_file

        bad = not_a_file(path)
        if bad:
            return _fail(f"{path}: {bad}")
    known = set(available_backends())
    for _, b in runs:
        refused = refusal(b, known)
        if refused:
            return _fail(refused)
    if args.rows < 0:
        return _fail(f"--rows must be at least 0, not {args.rows}")
    if args.bound is not None and not 0 < args.bound < math.inf:
        return _fail(f"--bound must be a positive number, not {args.bound}")
    from pyggml.testing.engine import junit
    from pyggml.testing.engine.model_check import conversation_refused, talk_from

    talk = talk_from(args)
    if isinstance(talk, str):
        return _fail(talk)
    for option, target in (("--json", args.json), ("--plot", args.plot)):
        unwritable = junit.unwritable(target, make_folder=True) if target and target != "-" else None
        if unwritable:  # said before the runs, not after minutes of them
            return _fail(f"{option} {target}: {unwritable}")
    (path_a, backend_a), (path_b, backend_b) = runs
    out = sys.stderr if args.json == "-" else sys.stdout

    try:
        probe = llama.Model.load(path_a, n_gpu_layers=0, devices=[], vocab_only=True)
        try:
            script, note = talk.script(probe)
            why = conversation_refused(path_a, talk, probe)
        finally:
            probe.close()
        if why:
            return _fail(f"{path_a}: {why}")
        if path_b != path_a:
            other = llama.Model.load(path_b, n_gpu_layers=0, devices=[], vocab_only=True)
            try:
                llama.compatible_or_raise(path_a, other, nodes=not args.logits_only)
            except ValueError as e:
                return _fail(str(e))
            finally:
                other.close()
    except (ValueError, llama.LlamaError) as e:
        return _fail(str(e))
    if note:
        print(f"note: {note}", file=out)
    extra = not args.no_repack
    nodes = not args.logits_only
    started = time.perf_counter()
    try:
        n_ctx = talk.ctx_size or None
        if nodes and not args.one_at_a_time:
            print(f"A: {Path(path_a).name} on {backend_a}, B: {Path(path_b).name} on {backend_b}, in turns ...",
                  file=out, flush=True)  # fmt: skip
            run_a, run_b = llama.record_pair(path_a, path_b, script, backend_a, backend_b, extra, n_ctx=n_ctx)
        else:
            print(f"A: {Path(path_a).name} on {backend_a} ...", file=out, flush=True)
            run_a = llama.record(path_a, script, backend_a, nodes=nodes, use_extra_bufts=extra, n_ctx=n_ctx)
            print(f"B: {Path(path_b).name} on {backend_b}, on A's tokens ...", file=out, flush=True)
            run_b = llama.record(
                path_b, script, backend_b, against=run_a, nodes=nodes, use_extra_bufts=extra, n_ctx=n_ctx
            )
    except (ValueError, llama.LlamaError) as e:
        print(f"compare: a run failed: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    cmp = llama.held_against(run_a, run_b, args.bound if args.bound is not None else llama.BOUND)
    print(cmp.table(args.rows), file=out)
    seconds = time.perf_counter() - started
    print(
        f"time: A {run_a.seconds:.2f} s, B {run_b.seconds:.2f} s (the conversations"
        + (", every node read" if nodes else "")
        + f"), {seconds:.2f} s in all",
        file=out,
    )
    report: dict[str, Any] = cmp.to_json()
    report["seconds"] = {"a": run_a.seconds, "b": run_b.seconds, "total": seconds}
    fd = cmp.first_divergent
    if fd is not None and not args.no_save:
        saved = save_divergent(path_b, backend_b, script, fd, args.save, extra)
        report["first_divergent"]["reproducer"] = saved.get("path")
        report["first_divergent"]["own_oracle"] = saved.get("verdict")
        if "path" in saved:
            print(f"the first divergent node against its own oracle on {backend_b}: {saved['verdict']}", file=out)
            print(f"reproducer: {saved['path']} (python -m pyggml check --repro {saved['path']})", file=out)
        else:
            print(f"no reproducer: {saved.get('why')}", file=out)
    if args.plot:
        why = cmp.plot(args.plot)
        print(f"plot: {args.plot}" if not why else f"no plot: {why}", file=out)
        report["plot"] = None if why else args.plot
    if args.json:
        text = json.dumps(report, indent=1) + "\n"
        if args.json == "-":
            sys.stdout.write(text)
        else:
            try:
                Path(args.json).write_text(text)
            except OSError as e:
                return _fail(f"--json {args.json}: {e}")
    return 0


def save_divergent(path: str, backend: str, script: Any, fd: Any, directory: str, extra_bufts: bool) -> dict:
    """Decode B's conversation again and keep the inputs of node `fd` (its step, name and occurrence) as a
    reproducer (pyggml.testing.engine.repro), judged against its op's oracle. {"path", "verdict"}, or {"why"}."""
    from pyggml import llama
    from pyggml.node_reader import NodeReader
    from pyggml.testing.engine import repro
    from pyggml.testing.engine.nodes import NodeChecker, file_weights

    checker = NodeChecker(keep=lambda v: True, weights=file_weights(path))
    state: dict[str, Any] = {"step": "", "seen": 0}

    class OneNode(NodeReader):
        """The checker, told of node fd alone; every other node is computed on its own (one ggml did not keep is
        asked for all the same), so that fd's sources hold what it reads when it is asked."""

        def on_ask(self, t: Any) -> bool:
            if state["step"] == fd.step and t.name == fd.name:
                state["seen"] += 1
                if state["seen"] == fd.occurrence + 1:
                    state["target"] = t.ptr
                    return checker.on_ask(t)
            return True

        def on_done(self, t: Any) -> bool:
            if state.get("target") == t.ptr:
                state["target"] = None
                return checker.on_done(t)
            return True

    one_node = OneNode()

    def on_step(label: str) -> None:
        state["step"], state["seen"] = label, 0

    try:
        llama.record(path, script, backend, nodes=False, observe=one_node, use_extra_bufts=extra_bufts, on_step=on_step)
    except (ValueError, llama.LlamaError) as e:
        return {"why": f"{type(e).__name__}: {e}"}
    kept = [v for v in checker.verdicts if v.capture is not None]
    if not kept:
        why = next((v.error for v in checker.verdicts if v.error), "")
        return {"why": why or f"no oracle reads {fd.op} nodes"}
    v = kept[0]
    v.step = fd.step
    try:
        saved = repro.save(directory, v, path, backend)
    except OSError as e:
        return {"why": f"--save {directory}: {e}"}
    c = v.comparison
    verdict = (
        "not checked" if c is None else f"{'pass' if c.ok else 'FAIL'}, NMSE {c.nmse:.3g} (bound {v.nmse_bound:.3g})"
    )
    return {"path": os.fspath(saved), "verdict": verdict}
