"""`python -m pyggml check`: every registered case on every backend, against its NumPy oracle and against the other backends.

The same from Python:

    from pyggml.testing.check import available_backends, run_check, table
    records = run_check(available_backends(), pattern="add")
    print(table(records))

Each case runs on each backend; its output is compared with the case's NumPy oracle (NMSE and every
element within bounds) and with the first backend's (cross). Each record says pass, known (a disagreement
docs/findings.md records), unsupported, skipped, fail or error, with the figures.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict
from datetime import datetime
from typing import TextIO

import numpy as np

from pyggml import rpc
from pyggml.backend import devices
from pyggml.runner import Runner
from pyggml.testing import cases as case_registry
from pyggml.testing.cases import Case
from pyggml.testing.junit import write_junit
from pyggml.testing.verdict import Record, Status, nmse, run_case
from pyggml.types import DeviceType

# the Python API (the rest of this module serves the command line)
__all__ = [
    "available_backends",
    "check_case",
    "cross_compare",
    "main",
    "make_runners",
    "run_check",
    "summary",
    "table",
]


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
            runners[name] = Runner(name, n_threads=n_threads)
        except Exception as e:
            records.append(Record("*", name, Status.ERROR, message=f"backend unavailable: {e}"))
    return runners, records


def check_case(
    case: Case,
    runners: dict[str, Runner],
    slow: bool = False,
    dead: dict[str, str] | None = None,
    begin: Callable[[str], None] | None = None,
) -> list[Record]:
    """One case on every runner, each result against the oracle and the others (cross).

    Args:
        case: the case (`pyggml.testing.cases.Case`).
        runners: backend name -> Runner.
        slow: also run it where it is skipped only for its cost.
        dead: backends where a worker process died running this case (backend -> why), recorded as
            errors without running them again.
        begin: called with the backend's name before each run.

    Returns:
        The case's Records, in the runners' order.
    """
    outputs = {}
    records: list[Record] = []
    for name, runner in runners.items():
        if dead and name in dead:
            records.append(Record(case.name, name, Status.ERROR, message=dead[name]))
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


def run_check(
    backends: list[str],
    pattern: str | None = None,
    progress: TextIO | None = sys.stderr,
    ops: list[str] | None = None,
    type_names: list[str] | None = None,
    slow: bool = False,
    jobs: int = 0,
    started: list | None = None,
) -> list[Record]:
    """Every selected case on every backend.

    Args:
        backends: backend names ('cpu', 'vulkan0', 'meta:cpu,cpu', ...).
        pattern: select cases whose name contains it or matches it as a regular expression; None: all.
        progress: where to show progress (a terminal: a bar; elsewhere a line every 250 steps); None: quiet.
        ops: select cases of these op names; None: all.
        type_names: select cases of these ggml type names; None: all.
        slow: also run what is skipped only for its cost (shaders lavapipe compiles for minutes).
        jobs: 0 runs the cases in this process; N >= 1 in N worker processes (`pyggml.testing.workers`:
            the same records in the same order, and a worker's death is the case's error instead of the
            run's end).
        started: workers already started for these backends.

    Returns:
        One Record per case and backend (`pyggml.testing.verdict.Record`: status, NMSE, bound, message),
        plus an error record per backend that cannot be had.
    """
    selected = case_registry.select(pattern, ops, type_names)
    if (jobs or started) and selected:
        from pyggml.testing import workers

        return workers.run_check(selected, backends, jobs, slow, progress, started)
    runners, records = make_runners(backends)
    bar = Progress(progress, len(selected) * len(runners))
    for case in selected:
        case_records = check_case(case, runners, slow)
        for rec in case_records:
            bar.step(f"{case.name} on {rec.backend}: {rec.status}", rec.status)
        records.extend(case_records)
    bar.close()
    return records


def fmt_err(x: float | None) -> str:
    return "" if x is None else ("0" if x == 0 else f"{x:.1e}")


STATUSES = tuple(Status)


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
    for r in records:
        if r.status in ("fail", "error"):
            lines.append(
                f"{r.status.upper()}: {r.case} on {r.backend}: {r.message or fmt_err(r.error)}"
                + (f" > bound {fmt_err(r.bound)}" if r.status == "fail" and r.bound is not None else "")
            )
    return "\n".join(lines)


def list_cases(cases: Sequence[Case]) -> str:
    lines = [f"{c.name:<60} {c.op:<20} {','.join(sorted(c.types))}" for c in cases]
    lines.append(f"{len(cases)} cases")
    return "\n".join(lines)


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


# CMake option that builds each ggml backend (README, Building)
CMAKE_OPTION = {
    "vulkan": "GGML_VULKAN",
    "cuda": "GGML_CUDA",
    "rpc": "GGML_RPC",
    "metal": "GGML_METAL",
    "sycl": "GGML_SYCL",
    "hip": "GGML_HIP",
    "rocm": "GGML_HIP",
    "opencl": "GGML_OPENCL",
    "cann": "GGML_CANN",
    "musa": "GGML_MUSA",
    "webgpu": "GGML_WEBGPU",
    "blas": "GGML_BLAS",
}


LABEL = {
    "vulkan": "Vulkan",
    "cuda": "CUDA",
    "rpc": "RPC",
    "metal": "Metal",
    "sycl": "SYCL",
    "hip": "HIP",
    "rocm": "HIP",
    "opencl": "OpenCL",
    "cann": "CANN",
    "musa": "MUSA",
    "webgpu": "WebGPU",
    "blas": "BLAS",
}


def backend_error(name: str) -> str | None:
    """Why this build cannot run on backend `name` (cpu, vulkan0, meta:cpu,cpu, ...), with what to do;
    None when it can. Found before any case runs."""
    from pyggml import build_info

    name = name.lower()
    if name.startswith("meta:"):
        parts = [d for d in name[len("meta:") :].split(",") if d]
        if not parts:
            return f"backend {name!r}: a meta backend names its devices, e.g. meta:cpu,cpu or meta:vulkan0,vulkan1"
        for part in parts:
            why = backend_error(part)
            if why:
                return why
        return None
    names = [d.name.lower() for d in devices()]
    if name in names or name == "cpu":
        return None
    built = [b.lower() for b in build_info()["backends"]]
    have = f"this build's backends: {', '.join(built)}; its devices: {', '.join(names)}"
    family = re.sub(r"\d+$", "", name)
    if family in CMAKE_OPTION and family not in built:
        return (
            f"no device {name!r}: this build of pyggml has no {LABEL.get(family, family)} backend ({have}).\n"
            f'Build it in: CMAKE_ARGS="-D{CMAKE_OPTION[family]}=ON" pip install -e .   (README, Building)'
        )
    if family == "vulkan":
        visible = os.environ.get("GGML_VK_VISIBLE_DEVICES")
        return (
            f"no device {name!r} ({have}).\nggml lists CPU-type Vulkan devices (Mesa's lavapipe) only when "
            f"GGML_VK_VISIBLE_DEVICES names them (now {visible!r}): --vk-devices 0 for vulkan0, --vk-devices 0,0 "
            "for vulkan0 and vulkan1 (the same device twice)"
        )
    if family == "rpc":
        return (
            f"no device {name!r} ({have}).\nRPC devices come from servers: start one with "
            "`python -m pyggml rpc-server` and add it with --rpc HOST:PORT (rpc0, rpc1, ... in that order)"
        )
    near = closest(name, names + ["meta:cpu,cpu"])
    if family in built or family in CMAKE_OPTION:
        return f"no device {name!r}" + (f"; did you mean {', '.join(near)}?" if near else "") + f" ({have})"
    return (
        f"no backend {name!r}"
        + (f"; did you mean {', '.join(near)}?" if near else "")
        + f"\n{have}; a meta backend over several devices: meta:DEV,DEV (e.g. meta:cpu,cpu)"
    )


def backends_of(args: argparse.Namespace) -> list[str]:
    return [b.lower() for b in (args.backend or available_backends())]


def _reports(args: argparse.Namespace) -> list[tuple[str, str]]:
    return [(kind, path) for kind, path in (("JSON", args.json), ("JUnit", getattr(args, "junit", None))) if path]


def backends_reports_error(args: argparse.Namespace, backends: list[str]) -> str | None:
    """Why the backends or the report files cannot be had, found before any case runs."""
    for b in dict.fromkeys(backends):
        why = backend_error(b)
        if why:
            return f"--backend {b}: {why}"
    reports = _reports(args)
    if sum(path == "-" for _, path in reports) > 1:
        return "only one report can go to stdout (-): give --json or --junit a file"
    for kind, path in reports:
        if path == "-":
            continue
        try:
            with open(path, "a"):
                pass
        except OSError as e:
            return f"cannot write the {kind} report {path!r}: {e.strerror}"
    return None


def perf_main(args: argparse.Namespace, backends: list[str]) -> int:
    """`check --mode perf`: the table (rows as they come on stderr with -q off), --json, --junit."""
    from pyggml.testing import perf

    why = backends_reports_error(args, backends)
    if why:
        return _fail(why)
    if args.perf_time <= 0 or (args.threads is not None and args.threads < 1):
        return _fail("--perf-time takes seconds above 0 and --threads a count of 1 or more")
    reports = _reports(args)
    out = sys.stderr if any(path == "-" for _, path in reports) else sys.stdout
    started = datetime.now()
    selected = case_registry.select(args.only, args.op, args.type)
    records, limits = perf.run_perf(
        selected, backends, args.perf_time, args.threads, None if args.quiet else sys.stderr
    )
    print(perf.table(records, limits), file=out, flush=True)
    for kind, path in reports:
        stream = sys.stdout if path == "-" else None
        if kind == "JSON":
            data = {"limits": {k: asdict(v) for k, v in limits.items()}, "records": [asdict(r) for r in records]}
            text = json.dumps(data, indent=1) + "\n"
            if stream is not None:
                stream.write(text)
            else:
                with open(path, "w") as f:
                    f.write(text)
        else:
            write_junit(
                perf.as_records(records), sys.stdout.buffer if stream else path, "pyggml.perf", "us/run", started
            )
    return 1 if any(r.status == "error" for r in records) else 0


def explicit_jobs(args: argparse.Namespace) -> bool:
    """Whether the command line named the number of workers (`-j N`): then a run has N (at most one per case);
    by default, as many as its cases are worth (`pyggml.testing.workers.wanted`), at most the machine's cores."""
    return getattr(args, "jobs", None) is not None


def jobs_for(args: argparse.Namespace, backends: list[str]) -> int:
    """The most worker processes of a run (0: this process). RPC devices stay in this process: ggml's RPC server
    serves one client at a time, and this process is connected to it already."""
    from pyggml.testing.workers import default_jobs

    jobs = args.jobs if explicit_jobs(args) else default_jobs()
    if getattr(args, "rpc", None) or any("rpc" in b for b in backends):
        return 0
    return jobs


def _fail(msg: str) -> int:
    print(f"check: {msg}", file=sys.stderr)
    return 2


def main(args: argparse.Namespace) -> int:
    """`python -m pyggml check`: run the suite as the command line asks.

    In test mode the cases are selected first, then the worker processes they are worth start (forks of this
    process when backends are named, before it lists ggml's devices). `--repro`, `--model`, `--mode grad` and
    `--mode perf` go to their own modules.

    Args:
        args: the parsed command line (`python -m pyggml check --help`).

    Returns:
        The exit status: 0 when every case passed, 1 when some failed, 2 for a bad command line.
    """
    pool = None
    plain = not any(getattr(args, a, None) for a in ("list", "repro", "model"))
    if args.mode == "test" and plain and (getattr(args, "jobs", None) or 0) >= 0:
        # named backends: the workers are forked now, before this process lists ggml's devices (a fork
        # after it would share the drivers' state); else they start as interpreters once the devices are known
        fork = bool(args.backend)
        backends = backends_of(args)
        jobs = jobs_for(args, backends)
        if jobs and (fork or not any(backend_error(b) for b in backends)):
            from pyggml.testing import cases, workers

            # the registry and the selection first: each fork then has the registry, as this process has it,
            # and the run gets the workers its cases are worth (`-j` the most); an invalid selection: _main says why
            bad = selection_error(args.only, args.op, args.type)
            selected = [] if bad else cases.select(args.only, args.op, args.type)
            count = min(jobs, len(selected)) if explicit_jobs(args) else workers.wanted(jobs, selected, backends, fork)
            pool = workers.start(backends, count, args.slow, fork=fork) if selected else None
            if pool and fork and any(backend_error(b) for b in backends):  # _main says why
                workers.close(pool)
                pool = None
    try:
        return _main(args, pool)
    finally:
        if pool:
            from pyggml.testing import workers

            workers.close([w for w in pool if w.child.poll() is None])


def _main(args: argparse.Namespace, pool: list | None) -> int:
    if getattr(args, "repro", None):  # saved nodes, each computed again on its own
        from pyggml.testing import model_check, repro

        why = model_check.not_applicable(args, "--repro")
        return _fail(why) if why else repro.main(args)
    if getattr(args, "model", None) or getattr(args, "arch", None):  # llama.cpp's graphs of models, node by node
        from pyggml.testing import model_check

        return model_check.main(args)
    grad = args.mode == "grad"
    if getattr(args, "jobs", None) is not None and args.jobs < 0:
        return _fail("-j takes 0 (this process) or a number of worker processes")
    if grad and (args.op or args.type):
        return _fail(
            "--mode grad selects cases by name only: use --only PATTERN (`check --mode grad --list` "
            "is not available; the grad cases are in pyggml/testing/grad.py)"
        )
    if not grad:
        why = selection_error(args.only, args.op, args.type)
        if why:
            return _fail(why)
    if args.mode == "perf" and not args.list:
        return perf_main(args, backends_of(args))
    if args.list:
        if grad:
            return _fail("--list lists the oracle cases; leave out --mode grad")
        print(list_cases(case_registry.select(args.only, args.op, args.type)))
        return 0
    backends = backends_of(args)
    why = backends_reports_error(args, backends)
    if why:
        return _fail(why)
    reports = _reports(args)
    # a report on stdout (-) keeps stdout for itself: the table goes to stderr then
    out = sys.stderr if any(path == "-" for _, path in reports) else sys.stdout
    progress = None if args.quiet else sys.stderr
    started = datetime.now()  # the JUnit report's timestamp
    if grad:
        from pyggml.testing.grad import run_grad

        records = run_grad(backends, args.only)
    else:
        jobs = jobs_for(args, backends)
        records = run_check(backends, args.only, progress, args.op, args.type, args.slow, jobs, pool)
    if not records:
        return _fail(f"no case matches {args.only!r}")
    print(table(records, quiet=args.quiet), file=out, flush=True)
    for kind, path in reports:
        try:
            if kind == "JSON":
                if path == "-":
                    json.dump([asdict(r) for r in records], sys.stdout, indent=1)
                    sys.stdout.write("\n")
                else:
                    with open(path, "w") as f:
                        json.dump([asdict(r) for r in records], f, indent=1)
            else:
                write_junit(
                    records,
                    sys.stdout.buffer if path == "-" else path,
                    "pyggml.check.grad" if grad else "pyggml.check",
                    "relative gradient error against finite differences" if grad else "NMSE against the oracle",
                    started,
                )
        except OSError as e:
            if isinstance(e, BrokenPipeError):
                raise
            return _fail(f"writing the {kind} report {path!r} failed: {e.strerror}")
    failed = [r for r in records if r.status in ("fail", "error")]
    return 1 if failed else 0
