"""The child-process runner (pyggml.testing.engine.child): each way a call can end gives its outcome, and
the parent lives on."""

from __future__ import annotations

import os
import signal
import sys
import time

import pytest

from pyggml.testing.engine import child


def _say_then_abort(text: str) -> None:
    """Print to stdout and stderr, then die as ggml's abort does."""
    print(text, flush=True)
    print(f"about to abort: {text}", file=sys.stderr, flush=True)
    os.abort()


def test_a_normal_return_gives_the_value():
    outcome = child.run(divmod, (17, 5), timeout=60)
    assert outcome.status == "returned" and outcome.value == (3, 2) and outcome.exit_code == 0


def test_a_function_named_by_module_and_name_runs_with_keyword_arguments():
    outcome = child.run("textwrap:shorten", ("a b c d e f",), {"width": 7}, timeout=60)
    assert outcome.status == "returned" and outcome.value == "a [...]"


def test_a_python_exception_gives_its_type_and_message():
    outcome = child.run("math:sqrt", (-1.0,), timeout=60)
    assert outcome.status == "raised"
    assert (outcome.error_type, outcome.message) == ("ValueError", "math domain error")
    assert "Traceback" in outcome.traceback and outcome.exit_code == 0


def test_an_abort_gives_the_signal_and_the_tail_of_stderr():
    outcome = child.run(_say_then_abort, ("hello",), timeout=60)
    assert outcome.status == "died"
    assert outcome.exit_code == -signal.SIGABRT and outcome.signal_name == "SIGABRT"
    assert outcome.stdout == "hello\n"
    assert "about to abort: hello" in outcome.stderr


def test_a_segfault_gives_sigsegv():
    outcome = child.run("ctypes:string_at", (0,), timeout=60)
    assert outcome.status == "died" and outcome.signal_name == "SIGSEGV"


def test_an_exit_without_a_result_gives_its_status():
    outcome = child.run("sys:exit", (3,), timeout=60)
    assert outcome.status == "died" and outcome.exit_code == 3 and outcome.signal_name is None


def test_a_timeout_kills_the_child():
    t = time.monotonic()
    outcome = child.run("time:sleep", (60,), timeout=2)
    assert outcome.status == "timeout" and time.monotonic() - t < 30
    assert outcome.exit_code == -signal.SIGKILL


def test_a_started_child_can_be_polled_and_killed():
    running = child.start("time:sleep", (60,))
    assert running.poll() is None
    running.kill()
    outcome = running.wait(timeout=30)
    assert outcome.status == "died" and outcome.signal_name == "SIGKILL"
    assert running.wait() is outcome  # waiting again gives the same outcome


def _open(fds: list[int]) -> list[bool]:
    out = []
    for fd in fds:
        try:
            os.fstat(fd)
            out.append(True)
        except OSError:
            out.append(False)
    return out


needs_fork = pytest.mark.skipif(not child.can_fork(), reason="forks only where os.pidfd_open exists (Linux)")


def _forked(target, args, timeout=60, **kwargs):
    """`child.start(..., fork=True)` in a fresh interpreter, as `check` forks (a small process: this pytest
    process may be refused a fork, and then gets an interpreter): (how it started, the Outcome)."""
    running = child.start(target, args, fork=True, **kwargs)
    return type(running.proc).__name__, running.wait(timeout=timeout)


def _in_a_fresh_interpreter(target, args, **kwargs):
    outcome = child.run(_forked, (target, args), kwargs, timeout=120)
    assert outcome.status == "returned", outcome.stderr + outcome.traceback
    how, inner = outcome.value
    assert how == "_Forked"
    return inner


@needs_fork
@pytest.mark.parametrize(
    "target, args, status, check",
    [
        (divmod, (17, 5), "returned", lambda o: o.value == (3, 2) and o.exit_code == 0),
        ("math:sqrt", (-1.0,), "raised", lambda o: o.error_type == "ValueError" and "Traceback" in o.traceback),
        (_say_then_abort, ("hi",), "died", lambda o: o.signal_name == "SIGABRT" and "about to abort: hi" in o.stderr),
        ("ctypes:string_at", (0,), "died", lambda o: o.signal_name == "SIGSEGV"),
        ("sys:exit", (3,), "died", lambda o: o.exit_code == 3),
        ("os:_exit", (0,), "died", lambda o: o.exit_code == 0),  # gone without a result: a death, whatever its status
    ],
)
def test_a_forked_child_ends_as_an_interpreter_does(target, args, status, check):
    outcome = _in_a_fresh_interpreter(target, args)
    assert outcome.status == status and check(outcome), outcome


def _time_out_and_kill() -> tuple[str, float, str | None]:
    t = time.monotonic()
    running = child.start("time:sleep", (60,), fork=True)
    assert running.poll() is None
    outcome = running.wait(timeout=1)
    killed = child.start("time:sleep", (60,), fork=True)
    killed.kill()
    return outcome.status, time.monotonic() - t, killed.wait(timeout=30).signal_name


@needs_fork
def test_a_forked_child_times_out_and_can_be_killed():
    outcome = child.run(_time_out_and_kill, timeout=120)
    status, seconds, killed = outcome.value
    assert status == "timeout" and seconds < 30 and killed == "SIGKILL"


def _pipes_in_a_fork() -> list[bool]:
    r1, w1 = os.pipe()
    r2, w2 = os.pipe()
    how, outcome = _forked(_open, ([r1, w1, r2, w2],), pass_fds=(w2,))
    assert how == "_Forked" and outcome.status == "returned"
    return outcome.value


@needs_fork
def test_a_forked_child_has_only_the_descriptors_it_is_handed():
    outcome = child.run(_pipes_in_a_fork, timeout=120)
    assert outcome.status == "returned" and outcome.value == [False, False, False, True], outcome.traceback


@needs_fork
def test_a_refused_fork_starts_an_interpreter(monkeypatch):
    def refused():
        raise OSError(12, "Cannot allocate memory")

    monkeypatch.setattr(os, "fork", refused)
    running = child.start(divmod, (17, 5), fork=True)
    assert type(running.proc).__name__ == "Popen"
    assert running.wait(timeout=60).value == (3, 2)
