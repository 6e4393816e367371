"""`python -m pyggml check`: every registered case on every backend, against its NumPy oracle
and against the other backends."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime

import numpy as np

from pyggml.backend import devices
from pyggml.errors import Unsplittable
from pyggml.runner import Runner, Unsupported
from pyggml.testing import cases as case_registry
from pyggml.testing.junit import write_junit
from pyggml.types import DeviceType


@dataclass
class Record:
    case: str
    backend: str
    status: str  # pass, fail, known (a disagreement findings.md records), unsupported, skipped, error
    error: float | None = None  # NMSE against the oracle (worst output)
    bound: float | None = None
    message: str = ""
    cross: dict = field(default_factory=dict)  # other backend -> NMSE between the two results
    seconds: float = 0.0
    ops: list = field(default_factory=list)  # the op kinds the case's graphs compute


# Mesa's lavapipe (llvmpipe) compiles the Vulkan shaders of these types' products for 30-90 s each, and
# NVFP4's does not finish in 15 minutes (docs/findings.md): on it they are skipped unless asked for
SLOW_ON_LAVAPIPE = {"q1_0", "q2_0", "tq1_0", "tq2_0", "nvfp4"}


def slow_on(backend: str, case) -> bool:
    """The case involves a type lavapipe takes minutes to compile shaders for, and `backend` is lavapipe."""
    if not backend.startswith("vulkan") or not case_registry.case_types(case) & SLOW_ON_LAVAPIPE:
        return False
    from pyggml.backend import device
    return "llvmpipe" in device(backend).description.lower()


def available_backends() -> list[str]:
    """`cpu` and every non-CPU device of this build (vulkan0, cuda0, ...)."""
    names = ["cpu"]
    for d in devices():
        if d.type != DeviceType.CPU:
            names.append(d.name.lower())
    return names


def run_case(case, runner: Runner | _Recorder, backend: str) -> tuple[Record, list[np.ndarray] | None]:
    start = time.perf_counter()
    try:
        actual = case.execute(runner)
    except (Unsupported, Unsplittable) as e:  # a meta device that cannot split a node cannot compute it
        return Record(case.name, backend, "unsupported", message=f"not supported: {e}"), None
    except case_registry.Mismatch as e:
        return Record(case.name, backend, "fail", message=str(e), seconds=time.perf_counter() - start), None
    except Exception as e:  # a failing case must not stop the run (a guard overwritten included)
        return Record(case.name, backend, "error", message=f"{type(e).__name__}: {e}",
                      seconds=time.perf_counter() - start), None
    expected = case.expected()
    seconds = time.perf_counter() - start
    if len(actual) != len(expected):
        return Record(case.name, backend, "fail", message=f"{len(actual)} outputs, oracle has {len(expected)}"), actual
    nmse_bound, max_error_bound = case.bounds_for(backend)
    verdicts = [case_registry.compare(a, e, nmse_bound, max_error_bound) for a, e in zip(actual, expected)]
    worst = max(verdicts, key=lambda v: (not v.ok, v.nmse))
    err = max(v.nmse for v in verdicts)
    if worst.ok:
        return Record(case.name, backend, "pass", err, nmse_bound, seconds=seconds), actual
    known = case.known_failure(backend)
    status, message = ("known", f"known: {known} ({worst.message})") if known else ("fail", worst.message)
    return Record(case.name, backend, status, err, nmse_bound, message=message, seconds=seconds), actual


def cross_compare(results: dict[str, list[np.ndarray]]) -> dict[str, float]:
    """NMSE of every backend's outputs against the first backend's (usually the CPU)."""
    names = list(results)
    if len(names) < 2:
        return {}
    ref = results[names[0]]
    out = {}
    for n in names[1:]:
        out[n] = max(case_registry.nmse(a, r) for a, r in zip(results[n], ref))
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

    def __init__(self, stream, total: int, every: int = 250):
        self.stream, self.total, self.every = stream, total, every
        self.tty = stream is not None and getattr(stream, "isatty", lambda: False)()
        self.done, self.bad = 0, 0

    def step(self, label: str, status: str):
        self.done += 1
        self.bad += status in ("fail", "error")
        if self.stream is None:
            return
        if self.tty:
            width = 30
            filled = width * self.done // max(self.total, 1)
            self.stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total}"
                              f"  {self.bad} failing  {label[:50]:<50}")
            self.stream.flush()
        elif self.done % self.every == 0 or self.done == self.total:
            self.stream.write(f"[{self.done}/{self.total}] {self.bad} failing\n")
            self.stream.flush()

    def close(self):
        if self.stream is not None and self.tty:
            self.stream.write("\n")


def run_check(backends: list[str], pattern: str | None = None, progress=sys.stderr, ops: list[str] | None = None,
              type_names: list[str] | None = None, slow: bool = False) -> list[Record]:
    selected = case_registry.select(pattern, ops, type_names)
    runners = {}
    records: list[Record] = []
    for name in backends:
        try:
            runners[name] = Runner(name)
        except Exception as e:
            records.append(Record("*", name, "error", message=f"backend unavailable: {e}"))
    bar = Progress(progress, len(selected) * len(runners))
    for case in selected:
        outputs = {}
        case_records = []
        for name, runner in runners.items():
            recorder = _Recorder(runner)
            if not slow and slow_on(name, case):
                rec, out = Record(case.name, name, "skipped", message="lavapipe compiles this type's shaders for "
                                  "minutes (--slow runs it)"), None
            else:
                rec, out = run_case(case, recorder, name)
            rec.ops = sorted(recorder.ops | getattr(case, "graph_ops", set()))
            bar.step(f"{case.name} on {name}: {rec.status}", rec.status)
            if out is not None and rec.status == "pass":
                outputs[name] = out
            case_records.append(rec)
        cross = cross_compare(outputs)
        for rec in case_records:
            if rec.backend in cross:
                rec.cross = {next(iter(outputs)): cross[rec.backend]}
        records.extend(case_records)
    bar.close()
    return records


def fmt_err(x: float | None) -> str:
    return "" if x is None else ("0" if x == 0 else f"{x:.1e}")


def table(records: list[Record]) -> str:
    backends = list(dict.fromkeys(r.backend for r in records))
    by = {(r.case, r.backend): r for r in records}
    names = list(dict.fromkeys(r.case for r in records if r.case != "*"))
    width = max([len(n) for n in names] + [4])
    lines = [f"{'case':<{width}}  " + "  ".join(f"{b:<22}" for b in backends)]
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
    lines.append("")
    lines.append("  ".join(f"{k}: {v}" for k, v in sorted(counts.items())) +
                 "   (error = NMSE vs the NumPy oracle; x = largest NMSE vs the first backend)")
    for r in records:
        if r.status in ("fail", "error"):
            lines.append(f"{r.status.upper()}: {r.case} on {r.backend}: {r.message or fmt_err(r.error)}"
                         + (f" > bound {fmt_err(r.bound)}" if r.status == "fail" and r.bound is not None else ""))
    return "\n".join(lines)


def list_cases(cases) -> str:
    lines = [f"{c.name:<60} {case_registry.case_op(c):<20} {','.join(sorted(case_registry.case_types(c)))}"
             for c in cases]
    lines.append(f"{len(cases)} cases")
    return "\n".join(lines)


def main(args) -> int:
    if args.list:
        cases = case_registry.select(args.only, args.op, args.type)
        print(list_cases(cases))
        return 0 if cases else 2
    backends = [b.lower() for b in (args.backend or available_backends())]
    reports = [(kind, path) for kind, path in (("JSON", args.json), ("JUnit", getattr(args, "junit", None))) if path]
    for kind, path in reports:  # found out now, not after the whole run
        try:
            with open(path, "a"):
                pass
        except OSError as e:
            print(f"check: cannot write the {kind} report {path!r}: {e.strerror}", file=sys.stderr)
            return 2
    progress = None if args.quiet else sys.stderr
    started = datetime.now()  # the JUnit report's timestamp
    if args.mode == "grad":
        from pyggml.testing.grad import run_grad
        records = run_grad(backends, args.only)
    else:
        records = run_check(backends, args.only, progress, args.op, args.type, args.slow)
    if not records:
        print(f"no case matches {args.only!r}", file=sys.stderr)
        return 2
    print(table(records))
    for kind, path in reports:
        try:
            if kind == "JSON":
                with open(path, "w") as f:
                    json.dump([asdict(r) for r in records], f, indent=1)
            else:
                grad = args.mode == "grad"
                write_junit(records, path, "pyggml.check.grad" if grad else "pyggml.check",
                            "relative gradient error against finite differences" if grad
                            else "NMSE against the oracle", started)
        except OSError as e:
            print(f"check: writing the {kind} report {path!r} failed: {e.strerror}", file=sys.stderr)
            return 2
    failed = [r for r in records if r.status in ("fail", "error")]
    return 1 if failed else 0
