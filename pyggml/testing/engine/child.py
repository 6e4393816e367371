"""Run a call in a child process: for work that may kill the process it runs in (ggml aborts on a
failed GGML_ASSERT, a kernel may segfault or hang), so that only the child dies.

    from pyggml.testing.engine import child
    outcome = child.run("pyggml.testing.fuzzers.gguf_fuzz:check_batch", (seed, start, count, None), timeout=60)
    outcome = child.run(math.factorial, (5,))          # a picklable callable
    if outcome.status == "returned":
        print(outcome.value)

The target is a picklable callable (a module-level function is pickled by reference) or the name
of a module-level function, "package.module:function", which the child imports (the parent need
not). Its arguments and its returned value travel pickled.

The child is a fresh interpreter (`sys.executable -c ...`): ggml's thread pools and devices in the
parent do not survive a fork. It gets the parent's `sys.path`, so it imports the same pyggml (the
same checkout), the parent's environment updated with `env`, no standard input, and its own process
group, so that a timeout ends whatever it started too. `start(..., fork=True)` forks instead (Linux:
no interpreter start, no import to pay; `check -j`'s workers), for a caller that has made no ggml
device, backend or thread pool yet: the child gets the parent as it is, with only the descriptors
it is handed open besides its standard streams. Where the system refuses the fork (ENOMEM: a process
with large mappings, under the kernel's overcommit rules), an interpreter is started instead.

`Outcome.status` says how the call ended:

- "returned": `value` is what it returned;
- "raised": it raised an Exception: `error_type` (the exception's qualified name, e.g.
  "ValueError" or "pyggml.errors.GGMLError"), `message` (str of it) and `traceback` (its text);
- "died": the process ended with no result, or with a nonzero exit status after one: `exit_code`
  is its exit status, or -N when signal N killed it (as subprocess reports it; `signal_name`
  names it): ggml's abort (SIGABRT), a segfault (SIGSEGV), os._exit or sys.exit in the call;
- "timeout": it ran past `timeout` seconds and was killed with its process group.

Whatever the status, `stdout` is everything the child wrote to its standard output (a call can
report its progress there, to tell what it was doing when it died) and `stderr` the last
`stderr_tail` characters of its standard error (ggml's abort message; the Python stack of a
crash when the call enabled faulthandler). Both are written to files, not pipes: a child that
writes much never blocks on a pipe nobody reads, and what it wrote before it died is kept.

`start` is `run` without the waiting, for a child that serves while the parent works (the RPC
fuzzer's server, `check -j`'s workers): it returns a `Child` to `poll`, `kill` and `wait` on for its
Outcome. Its `pass_fds` hands the child open file descriptors (one end of a socket pair, to talk with
it while it runs).
"""

from __future__ import annotations

import importlib
import os
import pickle
import select
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any, Literal

Status = Literal["returned", "raised", "died", "timeout"]

# what the child runs first: the parent's sys.path before anything imports pyggml, so that the
# request (which may name pyggml's functions) unpickles against the same files as the parent's
_BOOT = (
    "import pickle, sys\n"
    "request = open(sys.argv[1], 'rb')\n"
    "sys.path[:] = pickle.load(request)\n"
    "from pyggml import parent\n"
    "parent.end_with(int(sys.argv[3]), death_signal=sys.argv[4] == '1')\n"
    "from pyggml.testing.engine.child import _serve\n"
    "_serve(request, sys.argv[2])\n"
)


@dataclass(frozen=True)
class Outcome:
    """How a call in a child process ended (the module's docstring says what each field holds)."""

    status: Status
    value: Any = None
    error_type: str = ""
    message: str = ""
    traceback: str = ""
    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""
    seconds: float = 0.0

    @property
    def signal_name(self) -> str | None:
        """The name of the signal that killed the child ("SIGABRT", "SIGSEGV"...), else None."""
        if self.exit_code is None or self.exit_code >= 0:
            return None
        try:
            return signal.Signals(-self.exit_code).name
        except ValueError:
            return f"signal {-self.exit_code}"


class _Forked:
    """A forked child, with what `Child` uses of `subprocess.Popen`: pid, poll, wait and returncode."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._pidfd = os.pidfd_open(pid)  # readable once the child has ended: a wait with a timeout

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self._reaped(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if not select.select([self._pidfd], [], [], timeout)[0]:
                raise subprocess.TimeoutExpired(f"forked child {self.pid}", timeout or 0)
            self._reaped(os.waitpid(self.pid, 0)[1])
        assert self.returncode is not None
        return self.returncode

    def _reaped(self, status: int) -> None:
        self.returncode = os.waitstatus_to_exitcode(status)
        os.close(self._pidfd)


def can_fork() -> bool:
    """Whether `start(..., fork=True)` forks here (Linux, with pidfd_open); elsewhere it starts an interpreter."""
    return hasattr(os, "fork") and hasattr(os, "pidfd_open")


class Child:
    """A call running in a child process (made by `start`)."""

    def __init__(
        self,
        proc: subprocess.Popen[bytes] | _Forked,
        folder: tempfile.TemporaryDirectory[str],
        stdout: IO[bytes],
        stderr: IO[bytes],
        stderr_tail: int,
    ) -> None:
        self.proc = proc
        self._folder = folder
        self._stdout = stdout
        self._stderr = stderr
        self._stderr_tail = stderr_tail
        self._started = time.monotonic()
        self._outcome: Outcome | None = None

    @property
    def pid(self) -> int:
        """The child's process id."""
        return self.proc.pid

    def poll(self) -> int | None:
        """None while the child runs, else its exit status (-N: killed by signal N)."""
        return self.proc.poll()

    def kill(self) -> None:
        """Kill the child and everything it started (its process group) at once, with SIGKILL."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:  # it ended in between, or a fork has not made its group yet
                try:
                    os.kill(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def wait(self, timeout: float | None = None) -> Outcome:
        """Wait for the call to end (killing the child after `timeout` seconds) and say how it ended;
        a later wait gives the same Outcome."""
        if self._outcome is not None:
            return self._outcome
        timed_out = False
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:  # a timeout, or the parent interrupted (Ctrl-C): the child must not outlive the wait
            self.kill()
            self.proc.wait()
        try:
            self._outcome = self._read_outcome(timed_out)
            return self._outcome
        finally:
            self._stdout.close()
            self._stderr.close()
            self._folder.cleanup()

    def _read_outcome(self, timed_out: bool) -> Outcome:
        seconds = time.monotonic() - self._started
        rc = self.proc.returncode
        self._stdout.seek(0)
        stdout = self._stdout.read().decode(errors="replace")
        size = self._stderr.seek(0, os.SEEK_END)
        self._stderr.seek(max(0, size - 4 * self._stderr_tail))  # UTF-8: at most 4 bytes a character
        stderr = self._stderr.read().decode(errors="replace")[-self._stderr_tail :]
        common: dict[str, Any] = {"exit_code": rc, "stdout": stdout, "stderr": stderr, "seconds": seconds}
        if timed_out:
            return Outcome("timeout", **common)
        result_path = os.path.join(self._folder.name, "result")
        if rc != 0 or not os.path.exists(result_path):
            return Outcome("died", **common)
        with open(result_path, "rb") as f:
            result = pickle.load(f)
        if result[0] == "returned":
            return Outcome("returned", value=result[1], **common)
        return Outcome("raised", error_type=result[1], message=result[2], traceback=result[3], **common)


def start(
    target: Callable[..., Any] | str,
    args: tuple[Any, ...] = (),
    kwargs: Mapping[str, Any] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    stderr_tail: int = 20_000,
    pass_fds: Sequence[int] = (),
    fork: bool = False,
    waited: bool = False,
) -> Child:
    """Start `target(*args, **kwargs)` in a child process; `Child.wait` gives its Outcome. `pass_fds`: file
    descriptors the child inherits (under the same numbers). `fork`: a fork of this process where `can_fork`
    (the module's docstring says when that is safe); `env` is then applied in the child. The child ends when
    this process ends (`pyggml.parent`); `waited`: this thread waits for it (`run`), so Linux's parent-death
    signal may end it at once."""
    folder = tempfile.TemporaryDirectory(prefix="pyggml-child-")
    if fork and can_fork():
        try:
            return _fork(target, args, kwargs, env, stderr_tail, pass_fds, folder, waited)
        except OSError:  # no fork to be had (ENOMEM: a process with large mappings, under overcommit rules)
            pass  # an interpreter then, as without `fork`
    request_path = os.path.join(folder.name, "request")
    with open(request_path, "wb") as f:
        pickle.dump(list(sys.path), f)
        pickle.dump((target, tuple(args), dict(kwargs or {})), f)
    stdout = open(os.path.join(folder.name, "stdout"), "w+b")
    stderr = open(os.path.join(folder.name, "stderr"), "w+b")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _BOOT,
            request_path,
            os.path.join(folder.name, "result"),
            str(os.getpid()),
            str(int(waited)),
        ],
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=stderr,
        env={**os.environ, **(env or {})},
        start_new_session=True,
        pass_fds=tuple(pass_fds),
    )
    return Child(proc, folder, stdout, stderr, stderr_tail)


def _fork(
    target: Callable[..., Any] | str,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any] | None,
    env: Mapping[str, str] | None,
    stderr_tail: int,
    pass_fds: Sequence[int],
    folder: tempfile.TemporaryDirectory[str],
    waited: bool = False,
) -> Child:
    stdout = open(os.path.join(folder.name, "stdout"), "w+b")
    stderr = open(os.path.join(folder.name, "stderr"), "w+b")
    result_path = os.path.join(folder.name, "result")
    sys.stdout.flush()  # what this process has buffered is written once, by it, not again by the child
    sys.stderr.flush()
    me = os.getpid()
    # the one thread such a process has besides its own is numpy's OpenBLAS pool, which stops itself
    # before a fork (pthread_atfork) and starts again in the child when it is next needed
    try:
        pid = os.fork()
    except OSError:
        stdout.close()
        stderr.close()
        raise
    if pid:
        return Child(_Forked(pid), folder, stdout, stderr, stderr_tail)
    from pyggml import parent

    code = 1
    try:  # the child: it never returns into the caller's code, whatever happens
        os.setsid()
        parent.end_with(me, death_signal=waited)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        os.dup2(stdout.fileno(), 1)
        os.dup2(stderr.fileno(), 2)
        keep = sorted({*pass_fds, 0, 1, 2})
        for lo, hi in zip(keep, [*keep[1:], os.sysconf("SC_OPEN_MAX")]):
            os.closerange(lo + 1, hi)  # the parent's other sockets and files (other workers' ends among them)
        # Python's streams on the new descriptors (the caller's may be objects of its own, as pytest's are)
        sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 - the child's for its life
        sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
        os.environ.update(env or {})
        _write_result(result_path, _call(target, tuple(args), dict(kwargs or {})))
        code = 0
    except SystemExit as e:  # the status an interpreter would exit with
        code = e.code if isinstance(e.code, int) else int(e.code is not None)
    finally:
        os._exit(code)


def run(
    target: Callable[..., Any] | str,
    args: tuple[Any, ...] = (),
    kwargs: Mapping[str, Any] | None = None,
    *,
    timeout: float | None = None,
    env: Mapping[str, str] | None = None,
    stderr_tail: int = 20_000,
) -> Outcome:
    """Run `target(*args, **kwargs)` in a child process and say how it ended (see the module's docstring)."""
    return start(target, args, kwargs, env=env, stderr_tail=stderr_tail, waited=True).wait(timeout)


# --- in the child ---------------------------------------------------------------------------------
def _resolve(name: str) -> Callable[..., Any]:
    """The function a "package.module:function" name names."""
    module, _, attr = name.partition(":")
    if not attr:
        raise ValueError(f"a target's name is 'package.module:function', got {name!r}")
    fn: Any = importlib.import_module(module)
    for part in attr.split("."):
        fn = getattr(fn, part)
    return fn


def _type_name(t: type) -> str:
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def _serve(request: IO[bytes], result_path: str) -> None:
    """Run the request's call and write how it ended to result_path (an exit without that file: a death)."""
    try:
        target, args, kwargs = pickle.load(request)
        request.close()
    except Exception as e:  # noqa: BLE001 - the parent gets every exception of the call, its own or pickle's
        _write_result(result_path, pickle.dumps(("raised", _type_name(type(e)), str(e), traceback.format_exc())))
        return
    _write_result(result_path, _call(target, args, kwargs))


def _call(target: Callable[..., Any] | str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bytes:
    """The call's outcome, pickled: what it returned or what it raised."""
    try:
        fn = _resolve(target) if isinstance(target, str) else target
        return pickle.dumps(("returned", fn(*args, **kwargs)))
    except Exception as e:  # noqa: BLE001 - the parent gets every exception of the call, its own or pickle's
        return pickle.dumps(("raised", _type_name(type(e)), str(e), traceback.format_exc()))


def _write_result(result_path: str, data: bytes) -> None:
    sys.stdout.flush()  # what the call printed lands before the result counts as written
    # written whole or not at all: a child killed while writing leaves no half result
    with open(result_path + ".part", "wb") as f:
        f.write(data)
    os.replace(result_path + ".part", result_path)
