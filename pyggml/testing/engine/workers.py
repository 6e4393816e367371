"""`check -j N`: the cases of a run in N worker processes, with the records of a run in one process.

Each worker is started by `pyggml.testing.engine.child`: a fork of the calling process when `check` starts
its workers before it has made any ggml device (no interpreter start, no import: a worker is ready at
once), else a fresh interpreter (ggml's thread pools and devices do not survive a fork; a worker that
takes the place of a dead one is always one). It makes its own runners, one per backend, and runs whole
cases: a case on every backend, its cross-backend comparison included, so its records are the ones
`check_case` gives in one process. The parent hands out case names one or two at a time (the next
is queued while a worker computes, so a worker never waits on the parent) and puts the records back
in the order of the selection. A worker's CPU backend gets `cores // jobs` threads, so N workers
never ask for more threads than the machine has.

A worker that dies (ggml's abort, a segfault) takes only the case it was running with it: before
each backend it says which one it starts, so that backend's record of that case becomes an `error`
naming the signal and the last lines ggml wrote, a new worker takes the worker's place, and the
case runs again on its other backends. A run never ends on a worker's death, only when a new worker
cannot even start (that error is raised).

Cases are handed out by group (`group`: the op and types of a case's name) when a backend compiles
pipelines (any but the CPU): a worker that has begun a group takes its next cases, and no other worker
does, so a pipeline a cold Vulkan driver compiles for seconds is compiled by one worker only.
"""

from __future__ import annotations

import socket
import time
from collections import deque
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, wait
from typing import TYPE_CHECKING, Any, TextIO

from pyggml.target import Target
from pyggml.testing.engine import child, verdict
from pyggml.testing.engine.verdict import Record
from pyggml.threads import cores

if TYPE_CHECKING:
    from pyggml.testing.engine.cases import Case


def default_jobs() -> int:
    """The machine's cores (those this process may run on: `pyggml.threads.cores`)."""
    return cores()


def group(name: str) -> str:
    """A case's group: its op and types (`mul_mat/q4_0` of `mul_mat/q4_0/weights_m7_n3`). A group's cases
    go to one worker: on Vulkan they need the same pipelines, which a cold lavapipe compiles for seconds
    each, once per process (two workers starting the same group would both compile them)."""
    return "/".join(name.split("/")[:2])


# --- in the worker ------------------------------------------------------------------------------------------
def serve(fd: int, backends: list[str], slow: bool, n_threads: int | None, modules: Sequence[str]) -> None:
    """A worker: runners for `backends`, then cases by name from the socket `fd` until None."""
    import importlib

    from pyggml.testing.engine import cases
    from pyggml.testing.engine.session import check_case, make_runners

    conn = Connection(fd)
    for m in modules:  # modules that register cases of their own
        importlib.import_module(m)
    cases.select()  # the registry, before the first case's time counts
    runners, unavailable = make_runners(backends, n_threads)
    conn.send(("ready", unavailable))
    while (msg := conn.recv()) is not None:
        name, dead = msg
        case = cases.REGISTRY.get(name)
        if case is None:  # registered in the calling process only (by its own code, after pyggml's)
            why = f"no case {name!r} in the worker processes: a case registered by the calling process runs with -j 0"
            records = [verdict.error(name, b, why) for b in runners]
        else:
            records = check_case(case, runners, slow, dead, begin=lambda b: conn.send(("begin", name, b)))
        conn.send(("done", name, records))
    conn.close()


# --- in the parent -------------------------------------------------------------------------------------------
class _Worker:
    def __init__(self, slot: int, args: tuple[Any, ...], fork: bool = False) -> None:
        ours, theirs = socket.socketpair()
        self.slot, self.args = slot, args
        self.child = child.start(serve, (theirs.fileno(), *args), pass_fds=(theirs.fileno(),), fork=fork)
        theirs.close()
        self.conn = Connection(ours.detach())
        self.ready = False
        self.running: list[int] = []  # case indices handed to it, oldest first
        self.began: tuple[str, str] | None = None  # (case, backend) it last said it started
        self.stopped = False

    def stop(self) -> None:
        """Tell it to end once the cases it has are done."""
        self.stopped = True
        try:
            self.conn.send(None)
        except OSError:  # it has died: its wait says how
            pass


# --- how many workers a run is worth --------------------------------------------------------------------------
# A worker repays its start only with work to share: a run gets one more worker while that worker saves more time
# than starting it costs, so no selection is slower with the default than with `-j 1`. The figures are seconds of
# one core, measured on this project's 2-core machines (bench/check_jobs.py --costs; bench/README.md):
CASE_SECONDS = {
    "op": 0.0005,  # an op case on a CPU backend (the mean over the suite's 1,820: inputs, graph, compute, oracle)
    "scenario": 0.028,  # a scenario case (delta-net, conv-state): several graphs and a float64 reference
    "device": 0.05,  # any case on a device backend, warm (a cold lavapipe compiles pipelines: seconds each)
}
START_SECONDS = {
    True: 0.05,  # a worker forked from `check` after the registry (measured: a one-case run, -j 1 over -j 0)
    False: 1.0,  # a fresh interpreter: pyggml's import and the registry first
}


def expected_seconds(selected: Sequence[Case], backends: Sequence[str]) -> float:
    """What `selected` costs on `backends` in one worker, in seconds of one core (CASE_SECONDS)."""
    from pyggml.testing.engine.cases import OpCase

    ops = sum(isinstance(c, OpCase) for c in selected)
    total = 0.0
    for b in backends:
        if Target.parse(b).on_cpu:
            total += ops * CASE_SECONDS["op"] + (len(selected) - ops) * CASE_SECONDS["scenario"]
        else:
            total += len(selected) * CASE_SECONDS["device"]
    return total


def wanted(jobs: int, selected: Sequence[Case], backends: Sequence[str], fork: bool = False) -> int:
    """The workers worth starting for `selected` on `backends`, at most `jobs` (and the cases), at least one:
    an (n+1)-th worker shortens a run of T seconds by T/n - T/(n+1), and starts only when that is more than its
    start costs (START_SECONDS; `fork`: workers forked from `check`, else interpreters)."""
    total = expected_seconds(selected, backends)
    n = 1
    while n < min(jobs, len(selected)) and total / (n * (n + 1)) > START_SECONDS[fork]:
        n += 1
    return n


def start(
    backends: list[str],
    jobs: int,
    slow: bool = False,
    modules: Sequence[str] = (),
    count: int | None = None,
    fork: bool = False,
) -> list[_Worker]:
    """`count` (default `jobs`) workers of a run of `jobs` for `backends`, started now (they import pyggml
    while the caller selects its cases); each CPU backend gets its share of the cores for `jobs` workers.
    `fork`: fork them from this process, which must not have made a ggml device, backend or thread pool yet
    (`check` forks before it lists the devices)."""
    n_threads = None if jobs == 1 else max(1, default_jobs() // jobs)
    args = (backends, slow, n_threads, tuple(modules))
    return [_Worker(slot, args, fork) for slot in range(jobs if count is None else count)]


def close(workers: list[_Worker]) -> None:
    """End workers that no run has ended (a run ends its own): killed, they hold nothing."""
    for w in workers:
        w.child.kill()
        w.child.wait()
        w.conn.close()


class WorkerError(RuntimeError):
    """A worker process could not start (it died before it was ready)."""


def run_cases(
    selected: Sequence[Case],
    backends: list[str],
    jobs: int,
    slow: bool = False,
    ready: Callable[[list[Record]], None] | None = None,
    done: Callable[[list[Record]], None] | None = None,
    modules: Sequence[str] = (),
    started: list[_Worker] | None = None,
    deadline: float | None = None,
    over: str = "not run: the run's time was spent",
) -> tuple[list[Record], list[list[Record]]]:
    """Run `selected` on `backends` in `jobs` workers: (the records of backends that cannot be had, the
    records of each case in the order of `selected`). `ready(unavailable)` is called when the first
    worker has its runners, `done(records)` when a case is done (in the order cases finish). `modules`
    are imported by each worker first (modules that register cases of their own). `started`: workers
    from `start` for these backends and cases (the caller chose how many); else as many as the cases are worth
    (`wanted`). All end with the run. `deadline` (a `time.monotonic()` time): then the workers are killed, and
    every case not done by then is recorded as skipped, with the message `over`."""
    workers = started or start(backends, wanted(jobs, selected, backends), slow, modules)
    args = workers[0].args
    names = [c.name for c in selected]
    # by group, in the order of the selection; on CPUs alone (no pipelines to compile) each case is its own
    grouped = not all(Target.parse(b).on_cpu for b in backends)
    key = group if grouped else str
    todo: dict[str, deque[int]] = {}
    from pyggml.testing.engine.cases import OpCase

    # on CPUs the scenario cases first (several graphs and a float64 reference: 20-70x an op case): a long one
    # left for last keeps the other workers idle
    order = (
        range(len(selected)) if grouped else sorted(range(len(selected)), key=lambda i: isinstance(selected[i], OpCase))
    )
    for i in order:
        todo.setdefault(key(selected[i].name), deque()).append(i)
    owner: dict[str, int] = {}
    dead: dict[int, dict[str, tuple[str, str]]] = {}
    deaths: dict[int, int] = {}  # the workers each case killed: one a backend at most, unless judging them kills
    results: list[list[Record] | None] = [None] * len(selected)
    unavailable: list[Record] | None = None
    left = len(selected)

    def take(slot: int) -> int | None:
        """The next case of the first group left that this worker has begun or nobody has (only groups
        other workers are running come before it: a few)."""
        g = next((g for g in todo if owner.get(g, slot) == slot), None)
        if g is None:
            return None
        owner[g] = slot
        i = todo[g].popleft()
        if not todo[g]:
            del todo[g]
        return i

    def feed(w: _Worker) -> None:
        while len(w.running) < 2 and (i := take(w.slot)) is not None:
            w.running.append(i)
            try:
                w.conn.send((names[i], dead.get(i, {})))
            except OSError:  # it has just died: its next recv says so, and its cases go back
                return

    finished = False
    try:
        while left:
            live = {w.conn: w for w in workers if not w.stopped}
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            answered = wait(list(live), timeout)
            if not answered and deadline is not None and time.monotonic() >= deadline:
                break  # the time is spent: the cases not done are skipped (below)
            for ready_conn in answered:
                w = live[ready_conn]  # type: ignore[index]
                try:
                    msg: Any = w.conn.recv()
                except (EOFError, OSError):
                    workers[w.slot] = _replace(w, args, dead, names)
                    if w.running:
                        deaths[w.running[0]] = deaths.get(w.running[0], 0) + 1
                    for i in reversed(w.running):
                        if deaths.get(i, 0) > len(args[0]):  # more deaths than backends: never sent again
                            why = f"the worker processes died {deaths[i]} times running this case"
                            results[i] = [verdict.error(names[i], b, why) for b in args[0]]
                            left -= 1
                            continue
                        todo.setdefault(key(names[i]), deque()).appendleft(i)
                    continue
                if msg[0] == "ready":
                    w.ready = True
                    if unavailable is None:
                        unavailable = list(msg[1])
                        if ready is not None:
                            ready(unavailable)
                elif msg[0] == "begin":
                    w.began = (msg[1], msg[2])
                else:
                    i = w.running.pop(0)
                    results[i] = msg[2]
                    left -= 1
                    if done is not None:
                        done(msg[2])
                if w.ready:
                    feed(w)
        finished = True
    finally:
        for w in workers:  # told to end first, all of them, then waited for
            if finished and not w.stopped:
                w.stop()
        for w in workers:
            w.child.wait(timeout=60 if finished and not left else 0)  # interrupted or out of time: killed at once
            w.conn.close()
    if left:
        results = [r or [verdict.skip(names[i], b, over) for b in backends] for i, r in enumerate(results)]
    return unavailable or [], [r or [] for r in results]


def _replace(
    w: _Worker, args: tuple[Any, ...], dead: dict[int, dict[str, tuple[str, str]]], names: list[str]
) -> _Worker:
    """A new worker in the place of `w`, which died: the case it was running gets its record (judged by what
    ggml said: `verdict.died`) on the backend it had started (on every backend not yet recorded when it had
    started none)."""
    outcome = w.child.wait(timeout=30)
    w.conn.close()
    if not w.ready:
        raise WorkerError(f"a worker process died before it was ready ({_how(outcome)}):\n{outcome.stderr[-4000:]}")
    if w.running:
        i = w.running[0]
        backends = [w.began[1]] if w.began and w.began[0] == names[i] else list(args[0])
        how = _how(outcome) + ("" if len(backends) == 1 else ", before it named a backend")
        for b in backends:
            dead.setdefault(i, {})[b] = (how, outcome.stderr[-8000:])
    return _Worker(w.slot, args)


def _how(outcome: child.Outcome) -> str:
    return outcome.signal_name or f"exit status {outcome.exit_code}"


def run_check(
    selected: Sequence[Case],
    backends: list[str],
    jobs: int,
    slow: bool,
    progress: TextIO | None,
    started: list[_Worker] | None = None,
) -> list[Record]:
    """`check`'s run in `jobs` workers: the records of `run_check` in one process, with a progress bar."""
    from pyggml.testing.engine.session import Progress

    bar: list[Progress] = []

    def ready(unavailable: list[Record]) -> None:
        bar.append(Progress(progress, len(selected) * (len(backends) - len(unavailable))))

    def done(records: list[Record]) -> None:
        for r in records:
            bar[0].step(f"{r.case} on {r.backend}: {r.status}", r.status)

    unavailable, per_case = run_cases(selected, backends, jobs, slow, ready, done, started=started)
    if bar:
        bar[0].close()
    return unavailable + [r for records in per_case for r in records]
