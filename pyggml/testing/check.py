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
import sys
from dataclasses import asdict
from datetime import datetime
from typing import TextIO

from pyggml.target import Target
from pyggml.testing.engine import cases as case_registry
from pyggml.testing.engine import findings
from pyggml.testing.engine.junit import write_report

# the suite's session (pyggml.testing.engine.session), re-exported: this module was its home
from pyggml.testing.engine.session import (  # noqa: I001
    OP_ALIASES as OP_ALIASES,
)
from pyggml.testing.engine.session import (
    STATUSES as STATUSES,
)
from pyggml.testing.engine.session import (
    Progress as Progress,
)
from pyggml.testing.engine.session import (
    _wrap as _wrap,
)
from pyggml.testing.engine.session import (
    available_backends as available_backends,
)
from pyggml.testing.engine.session import (
    backend_error as backend_error,
)
from pyggml.testing.engine.session import (
    check_case as check_case,
)
from pyggml.testing.engine.session import (
    closest as closest,
)
from pyggml.testing.engine.session import (
    cross_compare as cross_compare,
)
from pyggml.testing.engine.session import (
    fmt_err as fmt_err,
)
from pyggml.testing.engine.session import (
    list_cases as list_cases,
)
from pyggml.testing.engine.session import (
    make_runners as make_runners,
)
from pyggml.testing.engine.session import (
    selection_error as selection_error,
)
from pyggml.testing.engine.session import (
    summary as summary,
)
from pyggml.testing.engine.session import (
    table as table,
)
from pyggml.testing.engine.session import (
    type_label as type_label,
)
from pyggml.testing.engine.verdict import Record as Record
from pyggml.testing.engine.verdict import Status as Status
from pyggml.testing.engine.verdict import nmse as nmse
from pyggml.testing.engine.verdict import run_case as run_case

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
        jobs: 0 runs the cases in this process; N >= 1 in N worker processes (`pyggml.testing.engine.workers`:
            the same records in the same order, and a worker's death is the case's error instead of the
            run's end).
        started: workers already started for these backends.

    Returns:
        One Record per case and backend (`pyggml.testing.engine.verdict.Record`: status, NMSE, bound, message),
        plus an error record per backend that cannot be had.
    """
    selected = case_registry.select(pattern, ops, type_names)
    if (jobs or started) and selected:
        from pyggml.testing.engine import workers

        return findings.explain(workers.run_check(selected, backends, jobs, slow, progress, started))
    runners, records = make_runners(backends)
    bar = Progress(progress, len(selected) * len(runners))
    for case in selected:
        case_records = check_case(case, runners, slow)
        for rec in case_records:
            bar.step(f"{case.name} on {rec.backend}: {rec.status}", rec.status)
        records.extend(case_records)
    bar.close()
    # a failure or death of an upstream bug this build has not the fix of is `known`, naming it
    return findings.explain(records)


def backends_of(args: argparse.Namespace) -> list[str]:
    """The backends to run on: --backend's (cpu:all standing for every CPU variant this machine runs), or every
    one available."""
    from pyggml.target import expand

    return expand(args.backend or available_backends())


def _reports(args: argparse.Namespace) -> list[tuple[str, str]]:
    from pyggml.testing.engine.junit import reports

    return reports(args.json, getattr(args, "junit", None))


def backends_reports_error(args: argparse.Namespace, backends: list[str]) -> str | None:
    """Why the backends or the report files cannot be had, found before any case runs."""
    from pyggml.testing.engine.junit import reports_error

    for b in dict.fromkeys(backends):
        why = backend_error(b)
        if why:
            return f"--backend {b}: {why}"
    return reports_error(args.json, getattr(args, "junit", None))


def perf_main(args: argparse.Namespace, backends: list[str]) -> int:
    """`check --mode perf`: the table (rows as they come on stderr with -q off), --json, --junit."""
    from pyggml.testing.engine import perf

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
        limits_and_records = {
            "limits": {k: asdict(v) for k, v in limits.items()},
            "records": [asdict(r) for r in records],
        }
        write_report(kind, path, perf.as_records(records), "pyggml.perf", "us/run", started, limits_and_records)
    return 1 if any(r.status == "error" for r in records) else 0


def explicit_jobs(args: argparse.Namespace) -> bool:
    """Whether the command line named the number of workers (`-j N`): then a run has N (at most one per case);
    by default, as many as its cases are worth (`pyggml.testing.engine.workers.wanted`), at most the machine's cores."""
    return getattr(args, "jobs", None) is not None


def jobs_for(args: argparse.Namespace, backends: list[str]) -> int:
    """The most worker processes of a run (0: this process). RPC devices stay in this process: ggml's RPC server
    serves one client at a time, and this process is connected to it already."""
    from pyggml.testing.engine.workers import default_jobs

    jobs = args.jobs if explicit_jobs(args) else default_jobs()
    if getattr(args, "rpc", None) or any(Target.parse(b).rpc for b in backends):
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
    threads = getattr(args, "threads", None)
    if threads is not None and threads < 1:
        return _fail(f"--threads takes a count of 1 or more, not {threads} (leave it out for the machine's cores)")
    pool = None
    plain = not any(getattr(args, a, None) for a in ("list", "repro", "model"))
    if args.mode == "test" and plain and (getattr(args, "jobs", None) or 0) >= 0:
        # named backends: the workers are forked now, before this process lists ggml's devices (a fork
        # after it would share the drivers' state); else they start as interpreters once the devices are known
        fork = bool(args.backend)
        backends = backends_of(args)
        jobs = jobs_for(args, backends)
        if jobs and (fork or not any(backend_error(b) for b in backends)):
            from pyggml.testing.engine import cases, workers

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
            from pyggml.testing.engine import workers

            workers.close([w for w in pool if w.child.poll() is None])


def _main(args: argparse.Namespace, pool: list | None) -> int:
    if getattr(args, "repro", None):  # saved nodes, each computed again on its own
        from pyggml.testing.engine import model_check, repro

        why = model_check.not_applicable(args, "--repro")
        return _fail(why) if why else repro.main(args)
    if getattr(args, "model", None) or getattr(args, "arch", None):  # llama.cpp's graphs of models, node by node
        from pyggml.testing.engine import model_check

        return model_check.main(args)
    from pyggml.testing.engine.model_check import model_only

    given = model_only(args)
    if given:  # ignored, the op cases would run in their place: hours where a model's check was meant
        return _fail(f"{', '.join(given)}: for --model or --arch runs only; name a model (--model FILE.gguf)")
    grad = args.mode == "grad"
    if getattr(args, "jobs", None) is not None and args.jobs < 0:
        return _fail("-j takes 0 (this process) or a number of worker processes")
    if grad and (args.op or args.type):
        return _fail(
            "--mode grad selects cases by name only: use --only PATTERN (`check --mode grad --list` "
            "is not available; the grad cases are in pyggml/testing/engine/grad.py)"
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
        from pyggml.testing.engine.grad import run_grad

        records = run_grad(backends, args.only)
    else:
        jobs = jobs_for(args, backends)
        records = run_check(backends, args.only, progress, args.op, args.type, args.slow, jobs, pool)
    if not records:
        return _fail(f"no case matches {args.only!r}")
    print(table(records, quiet=args.quiet), file=out, flush=True)
    for kind, path in reports:
        try:
            write_report(
                kind,
                path,
                records,
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
