"""`check -j N` (pyggml.testing.engine.workers): the records of a run in one process, in the same order, and a
worker's death reported as its case's error while the run goes on."""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import asdict
from types import SimpleNamespace

import pytest

from pyggml.__main__ import main as pyggml_main
from pyggml.testing.check import run_check
from pyggml.testing.engine import cases, child, workers


def _plain(records):
    return [{k: v for k, v in asdict(r).items() if k != "seconds"} for r in records]


def test_workers_give_the_records_of_one_process_in_its_order(monkeypatch):
    monkeypatch.setitem(workers.START_SECONDS, False, 0.0)  # two workers for these few cases
    backends = ["cpu", "meta:cpu,cpu", "no_such_backend"]
    alone = run_check(backends, "^(soft_max|argsort|get_rows)/", progress=None, jobs=0)
    assert alone[0].case == "*" and alone[0].backend == "no_such_backend"
    assert len(alone) > 50
    assert _plain(run_check(backends, "^(soft_max|argsort|get_rows)/", progress=None, jobs=2)) == _plain(alone)


def test_a_worker_that_dies_takes_only_its_case_on_that_backend(monkeypatch):
    monkeypatch.setitem(workers.START_SECONDS, False, 0.0)
    some = [c.name for c in cases.select("^add/f32")][:3]
    names = [some[0], "dying/abort", some[1], "dying/kill", some[2]]
    stubs = [SimpleNamespace(name=n, types=frozenset()) for n in names]
    unavailable, per_case = workers.run_cases(stubs, ["cpu", "meta:cpu,cpu"], 2, modules=["worker_cases"])
    assert unavailable == []
    assert [[(r.case, r.backend) for r in recs] for recs in per_case] == [
        [(n, "cpu"), (n, "meta:cpu,cpu")] for n in names
    ]
    by = {(r.case, r.backend): r for recs in per_case for r in recs}
    for n in some:
        assert by[n, "cpu"].status == by[n, "meta:cpu,cpu"].status == "pass"
    abort, kill = by["dying/abort", "cpu"], by["dying/kill", "cpu"]
    assert abort.status == "error" and "SIGABRT" in abort.message and "dying by abort now" in abort.message
    assert kill.status == "error" and "SIGKILL" in kill.message
    # the dying cases' other backend ran in the worker that took the dead one's place
    assert by["dying/abort", "meta:cpu,cpu"].status == by["dying/kill", "meta:cpu,cpu"].status == "pass"


def _forked_run_with_a_death():
    """In a fresh interpreter (nothing of ggml made yet, as in `check`): forked workers, one case dying."""
    some = [c.name for c in cases.select("^add/f32")][:2]
    names = [some[0], "dying/abort", some[1]]
    stubs = [SimpleNamespace(name=n, types=frozenset()) for n in names]
    pool = workers.start(["cpu"], 2, modules=["worker_cases"], fork=True)
    how = [type(w.child.proc).__name__ for w in pool]
    _, per_case = workers.run_cases(stubs, ["cpu"], 2, modules=["worker_cases"], started=pool)
    return how, [(r.case, r.status, r.message) for recs in per_case for r in recs]


@pytest.mark.skipif(not child.can_fork(), reason="forks only where os.pidfd_open exists (Linux)")
def test_forked_workers_give_the_same_records_and_survive_a_death():
    outcome = child.run(_forked_run_with_a_death, timeout=600)
    assert outcome.status == "returned", outcome.stderr + outcome.traceback
    how, records = outcome.value
    assert how == ["_Forked", "_Forked"]
    assert [(c, s) for c, s, _ in records] == [
        (records[0][0], "pass"),
        ("dying/abort", "error"),
        (records[2][0], "pass"),
    ]
    assert "SIGABRT" in records[1][2] and "dying by abort now" in records[1][2]


def test_a_deadline_ends_the_run_and_skips_what_was_not_done(monkeypatch):
    monkeypatch.setitem(workers.START_SECONDS, False, 0.0)
    some = [c.name for c in cases.select("^add/f32")][:2]
    names = [some[0], "sleeping/minute", some[1]]
    stubs = [SimpleNamespace(name=n, types=frozenset()) for n in names]
    t = time.monotonic()
    _, per_case = workers.run_cases(
        stubs, ["cpu"], 1, modules=["worker_cases"], deadline=t + 20, over="not run: out of time"
    )
    assert time.monotonic() - t < 50  # the sleeping case's worker was killed, not waited for
    got = [(r.case, r.status, r.message) for recs in per_case for r in recs]
    assert got[0][:2] == (some[0], "pass")
    assert got[1:] == [
        ("sleeping/minute", "skipped", "not run: out of time"),
        (some[1], "skipped", "not run: out of time"),
    ]


def test_a_case_the_workers_do_not_have_is_an_error_not_a_hang():
    stubs = [SimpleNamespace(name="registered/here_only", types=frozenset())]
    _, [[rec]] = workers.run_cases(stubs, ["cpu"], 1)
    assert rec.status == "error" and "-j 0" in rec.message


def test_a_run_gets_the_workers_its_cases_repay():
    every, few = cases.select(), cases.select("^add/f32/")[:3]
    start = workers.START_SECONDS[True]
    assert workers.wanted(8, few, ["cpu"], fork=True) == 1  # a worker's start costs more than a third of few
    assert workers.wanted(1, every, ["cpu"], fork=True) == 1  # never more than -j
    assert workers.wanted(8, few, ["vulkan0"], fork=True) <= len(few)  # nor more than the cases
    n = workers.wanted(8, every, ["cpu"], fork=True)
    total = workers.expected_seconds(every, ["cpu"])
    assert n > 1 and total / ((n - 1) * n) > start and (n == 8 or total / (n * (n + 1)) <= start)
    assert workers.wanted(8, every, ["cpu"], fork=False) <= n  # interpreters cost more to start than forks
    # the scenario cases and a second backend make a run worth more
    scenarios = [c for c in every if not isinstance(c, cases.OpCase)]
    assert scenarios and workers.expected_seconds(scenarios[:1], ["cpu"]) > workers.expected_seconds(few[:1], ["cpu"])
    assert workers.expected_seconds(few, ["cpu", "meta:cpu,cpu"]) == 2 * workers.expected_seconds(few, ["cpu"])


def test_check_starts_the_workers_its_selection_is_worth(monkeypatch):
    """`check` without -j forks what `wanted` says, -j N forks N (at most one per case)."""
    from pyggml.testing import check

    started = []
    monkeypatch.setattr(workers, "start", lambda backends, count, slow, fork: started.append((count, fork)) or [])
    monkeypatch.setattr(check, "_main", lambda args, pool: 0)
    add = cases.select(None, ["add"])
    one = add[0].name
    for argv, want in (
        (["--op", "add"], workers.wanted(workers.default_jobs(), add, ["cpu"], fork=True)),
        (["--op", "add", "-j", "2"], 2),
        (["--only", f"^{one}$", "-j", "2"], 1),
    ):
        started.clear()
        assert pyggml_main(["check", "--backend", "cpu", *argv]) == 0
        assert started == [(want, True)], argv


def test_check_cli_takes_jobs():
    res = subprocess.run(
        [sys.executable, "-m", "pyggml", "check", "--backend", "cpu", "--only", "^soft_max/", "-q", "-j", "2"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().splitlines()[-1].startswith("pass: ")
    bad = subprocess.run([sys.executable, "-m", "pyggml", "check", "-j", "-1"], capture_output=True, text=True)
    assert bad.returncode == 2 and "-j takes" in bad.stderr


def test_a_death_inside_ggml_is_judged_by_what_ggml_said(monkeypatch):
    # a kernel's type dispatch with no branch for the types is `unsupported` with ggml's text (a tree other than
    # the pin); any other abort an error naming ggml's file, line and text, not the Python stack below it
    monkeypatch.setitem(workers.START_SECONDS, False, 0.0)
    names = ["dying/ggml-dispatch", "dying/ggml-assert"]
    stubs = [SimpleNamespace(name=n, types=frozenset()) for n in names]
    _, per_case = workers.run_cases(stubs, ["cpu"], 1, modules=["worker_cases"])
    dispatch, assertion = (recs[0] for recs in per_case)
    assert dispatch.status == "unsupported", dispatch
    assert (
        dispatch.message
        == "not supported by this ggml's kernel: ggml-cpu/ops.cpp:5092: src0->type = 1 (f16) not supported"
    )
    assert assertion.status == "error" and "SIGABRT" in assertion.message
    assert assertion.message.endswith("ggml aborted: ggml-cpu/ops.cpp:77: GGML_ASSERT(ne0 == nc) failed")
    assert "File " not in assertion.message and "pyggml_abort_callback" not in assertion.message


def test_a_death_is_judged_from_the_abort_callbacks_line():
    from pyggml.testing.engine import verdict

    case = cases.select("^add/f32$")[0]
    stderr = (
        "pyggml: ggml aborted: /x/llama-cpp/vendor/llama.cpp/ggml/src/ggml-cpu/ops.cpp:4102: fatal error\n"
        'Python call site (most recent call last):\n  File "...", line 264, in pyggml_abort_callback\n'
    )
    rec = verdict.died(case, "cpu", "SIGABRT", stderr)
    assert rec.status == "unsupported" and rec.message.endswith("ggml-cpu/ops.cpp:4102: fatal error")
    rec = verdict.died(
        case,
        "vulkan0",
        "SIGABRT",
        stderr.replace("ggml-cpu/ops.cpp:4102: fatal error", "ggml-vulkan/ggml-vulkan.cpp:9: fatal error"),
    )
    assert rec.status == "error" and "ggml aborted: ggml-vulkan/ggml-vulkan.cpp:9: fatal error" in rec.message
    rec = verdict.died(case, "cpu", "SIGSEGV", "Fatal Python error: Segmentation fault\nline a\nline b\n")
    assert rec.status == "error" and rec.message.endswith(
        "SIGSEGV) running this case: Fatal Python error: Segmentation fault | line a | line b"
    )


def test_a_case_that_kills_every_worker_is_given_up_not_sent_forever(monkeypatch):
    monkeypatch.setitem(workers.START_SECONDS, False, 0.0)
    some = [c.name for c in cases.select("^add/f32")][:1]
    names = ["dying/even-judged", some[0]]
    stubs = [SimpleNamespace(name=n, types=frozenset()) for n in names]
    _, per_case = workers.run_cases(stubs, ["cpu"], 1, modules=["worker_cases"])
    (gave_up,), (after,) = per_case
    assert gave_up.status == "error" and gave_up.message == "the worker processes died 2 times running this case"
    assert after.status == "pass"
