"""The differential suite's session: the backends a run can have (`available_backends`, `backend_error`),
their Runners (`make_runners`), one case on each (`check_case`, `cross_compare`), the progress bar, and the
results table (`table`, `summary`); what `python -m pyggml check` (pyggml.testing.check), the worker
processes, `check --model` and `check --repro` share.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable, Iterable, Sequence
from typing import TextIO

import numpy as np

from pyggml import backend_kinds, cpu_variants, rpc
from pyggml.backend import devices
from pyggml.runner import Runner
from pyggml.target import Target
from pyggml.testing.engine import cases as case_registry
from pyggml.testing.engine import verdict
from pyggml.testing.engine.cases import Case
from pyggml.testing.engine.verdict import Record, Status, died, nmse, run_case
from pyggml.types import DeviceType

STATUSES = tuple(Status)


# --- what a user may name, and what to say when a name is not one -------------------------------------------------
# names other libraries give ggml's ops
OP_ALIASES = {
    "matmul": "mul_mat",
    "mm": "mul_mat",
    "bmm": "mul_mat",
    "gemm": "mul_mat",
    "linear": "mul_mat",
    "dot": "mul_mat",
    "moe": "mul_mat_id",
    "layernorm": "norm",
    "layer_norm": "norm",
    "softmax": "soft_max",
    "attention": "flash_attn_ext",
    "sdpa": "flash_attn_ext",
    "rope": "rope_ext",
    "embedding": "get_rows",
    "gather": "get_rows",
    "scatter": "set_rows",
    "copy": "cpy",
    "minus": "sub",
    "multiply": "mul",
    "divide": "div",
    "contiguous": "cont",
    "swish": "silu",
}


def available_backends() -> list[str]:
    """The backends `check` runs on by default.

    Returns:
        `cpu` and every non-CPU device of this build (vulkan0, cuda0, ...), lower case, without RPC devices
        whose server has failed (ggml cannot unregister them; computing on one raises RpcError).
    """
    names = ["cpu"]
    for d in devices():
        if d.type != DeviceType.CPU and not any(rpc.error(ep) for ep in rpc.endpoints_of_device(d.ptr)):
            names.append(d.name.lower())
    return names


def cross_compare(results: dict[str, list[np.ndarray]]) -> dict[str, float]:
    """The NMSE of every backend's outputs against the first backend's (usually the CPU).

    Args:
        results: backend -> its outputs, in the same order for every backend.

    Returns:
        backend -> the largest NMSE of its outputs, for every backend but the first; `{}` for fewer than
        two backends.
    """
    names = list(results)
    if len(names) < 2:
        return {}
    ref = results[names[0]]
    out = {}
    for n in names[1:]:
        out[n] = max(nmse(a, r) for a, r in zip(results[n], ref))
    return out


class _Recorder:
    """A runner that notes the op kinds of every graph a case runs (for `coverage`)."""

    def __init__(self, runner: Runner):
        self._runner = runner
        self.ops: set[str] = set()

    def __getattr__(self, name):
        return getattr(self._runner, name)

    def allocate(self, graph, outputs=()):
        self.ops |= case_registry.graph_ops(graph)
        return self._runner.allocate(graph, outputs)

    def run(self, graph, inputs, outputs):
        self.ops |= case_registry.graph_ops(graph)
        return self._runner.run(graph, inputs, outputs)


class Progress:
    """A progress bar on a terminal; elsewhere (CI logs) a line every `every` steps."""

    def __init__(self, stream: TextIO | None, total: int, every: int = 250) -> None:
        self.stream, self.total, self.every = stream, total, every
        self.tty = stream is not None and getattr(stream, "isatty", lambda: False)()
        self.done, self.bad = 0, 0

    def step(self, label: str, status: str) -> None:
        self.done += 1
        self.bad += status in ("fail", "error")
        if self.stream is None:
            return
        if self.tty:
            width = 30
            filled = width * self.done // max(self.total, 1)
            self.stream.write(
                f"\r[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total}"
                f"  {self.bad} failing  {label[:50]:<50}"
            )
            self.stream.flush()
        elif self.done % self.every == 0 or self.done == self.total:
            self.stream.write(f"[{self.done}/{self.total}] {self.bad} failing\n")
            self.stream.flush()

    def close(self) -> None:
        if self.stream is not None and self.tty:
            self.stream.write("\n")


def make_runners(backends: list[str], n_threads: int | None = None) -> tuple[dict[str, Runner], list[Record]]:
    """A Runner per backend, and an error record ("*") for each backend that cannot be had.

    Args:
        backends: backend names ('cpu', 'vulkan0', 'meta:cpu,cpu', ...).
        n_threads: the CPU threads of each runner; None chooses per graph.

    Returns:
        `(runners, records)`: name -> Runner for the backends made, and one error Record per backend that
        could not be.
    """
    runners, records = {}, []
    for name in backends:
        try:
            runners[name] = Runner(name, n_threads=n_threads, fallback=False)  # the device, never the CPU
        except Exception as e:
            records.append(verdict.unavailable(name, e))
    return runners, records


def check_case(
    case: Case,
    runners: dict[str, Runner],
    slow: bool = False,
    dead: dict[str, tuple[str, str]] | None = None,
    begin: Callable[[str], None] | None = None,
) -> list[Record]:
    """One case on every runner, each result against the oracle and the others (cross).

    Args:
        case: the case (`pyggml.testing.engine.cases.Case`).
        runners: backend name -> Runner.
        slow: also run it where it is skipped only for its cost.
        dead: backends where a worker process died running this case (backend -> how it died and its
            stderr), judged by what ggml said (`verdict.died`) without running them again.
        begin: called with the backend's name before each run.

    Returns:
        The case's Records, in the runners' order.
    """
    outputs = {}
    records: list[Record] = []
    for name, runner in runners.items():
        if dead and name in dead:
            records.append(died(case, name, *dead[name]))
            continue
        if begin is not None:
            begin(name)
        recorder = _Recorder(runner)
        rec, out = run_case(case, recorder, name, slow)
        rec.ops = sorted(recorder.ops | getattr(case, "graph_ops", set()))
        if out is not None and rec.status == "pass":
            outputs[name] = out
        records.append(rec)
    cross = cross_compare(outputs)
    for rec in records:
        if rec.backend in cross:
            rec.cross = {next(iter(outputs)): cross[rec.backend]}
    return records


def fmt_err(x: float | None) -> str:
    return "" if x is None else ("0" if x == 0 else f"{x:.1e}")


def summary(records: list[Record]) -> list[str]:
    """One line per backend: how many cases ended in each status.

    Args:
        records: what `run_check` returned.

    Returns:
        A header line and one line per backend.
    """
    backends = list(dict.fromkeys(r.backend for r in records))
    width = max([len(b) for b in backends] + [7])
    lines = [f"{'backend':<{width}}  " + "  ".join(f"{s:>11}" for s in STATUSES)]
    for b in backends:
        counts = [sum(1 for r in records if r.backend == b and r.status == s) for s in STATUSES]
        lines.append(f"{b:<{width}}  " + "  ".join(f"{n:>11}" for n in counts))
    return lines


def table(records: list[Record], quiet: bool = False) -> str:
    """The results as `check` prints them.

    A row per case and a column per backend (quiet: only the counts per backend), then the totals and every
    failure. The cross-backend column and legend appear with several backends only.

    Args:
        records: what `run_check` returned.
        quiet: only the counts.

    Returns:
        The text.
    """
    backends = list(dict.fromkeys(r.backend for r in records))
    by = {(r.case, r.backend): r for r in records}
    names = [] if quiet else list(dict.fromkeys(r.case for r in records if r.case != "*"))
    width = max([len(n) for n in names] + [4])
    lines = [] if quiet else [f"{'case':<{width}}  " + "  ".join(f"{b:<22}" for b in backends)]
    for n in names:
        cells = []
        for b in backends:
            r = by.get((n, b))
            if r is None:
                cells.append(f"{'-':<22}")
                continue
            cell = f"{r.status} {fmt_err(r.error)}"
            if r.cross:
                cell += f" x{fmt_err(max(r.cross.values()))}"
            cells.append(f"{cell:<22}")
        lines.append(f"{n:<{width}}  " + "  ".join(cells))
    counts: dict[str, int] = {}
    for r in records:
        counts[r.status] = counts.get(r.status, 0) + 1
    if names:
        lines.append("")
    lines.extend(summary(records))
    lines.append("")
    legend = "error = NMSE vs the NumPy oracle"
    if len(backends) > 1:
        legend += f"; x = largest NMSE vs the first backend ({backends[0]})"
    lines.append("  ".join(f"{k}: {v}" for k, v in sorted(counts.items())) + ("" if quiet else f"   ({legend})"))
    variant = cpu_variants.in_use()
    for r in records:
        if r.status in ("fail", "error"):
            # a finding on cpu names its kernels where cpu is one of ggml's CPU variants (a portable build's)
            on = f"cpu (ggml's {variant.name} CPU variant)" if r.backend == "cpu" and variant is not None else r.backend
            lines.append(
                f"{r.status.upper()}: {r.case} on {on}: {r.message or fmt_err(r.error)}"
                + (f" > bound {fmt_err(r.bound)}" if r.status == "fail" and r.bound is not None else "")
            )
    return "\n".join(lines)


def list_cases(cases: Sequence[Case]) -> str:
    lines = [f"{c.name:<60} {c.op:<20} {','.join(sorted(c.types))}" for c in cases]
    lines.append(f"{len(cases)} cases")
    return "\n".join(lines)


def closest(word: str, choices: Iterable[str], aliases: dict[str, str] | None = None, n: int = 5) -> list[str]:
    """The choices a mistyped `word` most likely meant, best first: its alias, the same name without
    underscores or with its parts in another order (matmul: mul_mat), the choices it begins (q4: q4_0,
    q4_1, q4_k), then the ones difflib finds close."""
    word = word.lower()
    choices = sorted(set(choices))
    flat = word.replace("_", "")
    found: list[str] = []
    if aliases and word in aliases and aliases[word] in choices:
        found.append(aliases[word])
    found += [c for c in choices if c.replace("_", "") == flat or sorted(c.replace("_", "")) == sorted(flat)]
    found += [c for c in choices if c.startswith(word)]
    found += difflib.get_close_matches(word, choices, n, 0.6)
    return list(dict.fromkeys(found))[:n]


def type_label(name: str) -> str:
    """ggml's own spelling of a type (q4_K), from its lower-case name."""
    from pyggml._native import ffi, lib
    from pyggml.types import Type

    try:
        return ffi.string(lib.ggml_type_name(int(Type[name.upper()]))).decode()
    except KeyError:
        return name


def _wrap(names, width: int = 100, indent: str = "  ") -> str:
    lines, line = [], indent
    for name in names:
        if len(line) + len(name) + 2 > width and line.strip():
            lines.append(line.rstrip(", "))
            line = indent
        line += name + ", "
    lines.append(line.rstrip(", "))
    return "\n".join(lines)


def selection_error(pattern: str | None, ops: list[str] | None, type_names: list[str] | None) -> str | None:
    """Why `--only`/`--op`/`--type` select no case, saying which names are valid and the closest ones to
    a typo; None when the filters select cases."""
    from pyggml.types import Type

    every = case_registry.select()
    valid_ops = sorted({c.op for c in every})
    ggml_types = {t.name.lower() for t in Type}
    any_type = set().union(*(c.types for c in every))
    valid_types = sorted(any_type & ggml_types)
    for op in ops or []:
        if op.lower() not in valid_ops:
            near = closest(op, valid_ops, OP_ALIASES)
            return (
                f"no op {op!r} among the cases"
                + (f"; did you mean {', '.join(near)}?" if near else ".")
                + f"\nops with cases ({len(valid_ops)}; `check --list` shows each case's op):\n{_wrap(valid_ops)}"
            )
    for t in type_names or []:
        if t.lower() not in any_type:
            near = [] if t.lower() in ggml_types else [type_label(n) for n in closest(t, valid_types)]
            what = "no case involves type" if t.lower() in ggml_types else "no ggml type"
            return (
                f"{what} {t!r}"
                + (f"; did you mean {', '.join(near)}?" if near else "")
                + f"\ntypes with cases:\n{_wrap(type_label(n) for n in valid_types)}"
            )
    if case_registry.select(pattern, ops, type_names):
        return None
    given = " ".join(
        f"{flag} {v}"
        for flag, vs in (("--only", [pattern] if pattern else []), ("--op", ops or []), ("--type", type_names or []))
        for v in vs
    )
    msg = f"no case matches {pattern!r}" if pattern and not ops and not type_names else f"no case matches {given}"
    if pattern and not case_registry.select(pattern):
        near = difflib.get_close_matches(pattern, [c.name for c in every], 3, 0.6)
        if near:
            msg += f"; did you mean {', '.join(near)}?"
        return msg + "\n(--only takes part of a case name or a regular expression; `check --list` lists the names)"
    return (
        msg + "\n(each filter matches cases, not all of them together: `check --list` with fewer filters shows "
        "what each selects)"
    )


def backend_error(name: str) -> str | None:
    """Why this build cannot run on backend `name` (cpu, vulkan0, meta:cpu,cpu, ...), with what to do;
    None when it can. Found before any case runs."""
    from pyggml import build_info

    try:
        target = Target.parse(name)
    except ValueError as e:
        return str(e)
    name = target.name
    if target.meta:
        return next((why for part in target.devices if (why := backend_error(part))), None)
    if target.variant is not None:  # ggml's CPU variants: cpu:zen4, cpu:best, cpu:all
        return cpu_variants.error(name)
    names = [d.name.lower() for d in devices()]
    if name in names or name == "cpu":
        return None
    built = [b.lower() for b in build_info()["backends"]]
    have = f"this build's backends: {', '.join(built)}; its devices: {', '.join(names)}"
    family, k = target.family, target.kinds[0]
    if k is not None and k.family not in built:
        return (
            f"no device {name!r}: this build of pyggml has no {k.label} backend ({have}).\n"
            f"Build it in: {backend_kinds.build_hint(k)}   (docs/building.md)"
        )
    if k is not None and k.family == "vulkan":
        visible = os.environ.get("GGML_VK_VISIBLE_DEVICES")
        return f"no device {name!r} ({have}).\n{k.missing} (GGML_VK_VISIBLE_DEVICES is now {visible!r})"
    if k is not None and k.missing:
        return f"no device {name!r} ({have}).\n{k.missing}"
    near = closest(name, names + ["meta:cpu,cpu"])
    if family in built or k is not None:
        return f"no device {name!r}" + (f"; did you mean {', '.join(near)}?" if near else "") + f" ({have})"
    return (
        f"no backend {name!r}"
        + (f"; did you mean {', '.join(near)}?" if near else "")
        + f"\n{have}; a meta backend over several devices: meta:DEV,DEV (e.g. meta:cpu,cpu)"
    )
