"""Run a call in a child process: for work that may kill the process it runs in (ggml aborts on a
failed GGML_ASSERT, a kernel may segfault or hang), so that only the child dies.

    from pyggml.testing import child
    outcome = child.run("pyggml.testing.gguf_fuzz:check_batch", (seed, start, count, None), timeout=60)
    outcome = child.run(math.factorial, (5,))          # a picklable callable
    if outcome.status == "returned":
        print(outcome.value)

The target is a picklable callable (a module-level function is pickled by reference) or the name
of a module-level function, "package.module:function", which the child imports (the parent need
not). Its arguments and its returned value travel pickled.

The child is a fresh interpreter (`sys.executable -c ...`), never a fork: ggml's thread pools and
devices in the parent do not survive a fork. It gets the parent's `sys.path`, so it imports the
same pyggml (the same checkout), the parent's environment updated with `env`, no standard input,
and its own process group, so that a timeout ends whatever it started too.

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
    "from pyggml.testing.child import _serve\n"
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


class Child:
    """A call running in a child process (made by `start`)."""

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
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
            except ProcessLookupError:  # it ended in between
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
) -> Child:
    """Start `target(*args, **kwargs)` in a child process; `Child.wait` gives its Outcome. `pass_fds`: file
    descriptors the child inherits (under the same numbers)."""
    folder = tempfile.TemporaryDirectory(prefix="pyggml-child-")
    request_path = os.path.join(folder.name, "request")
    with open(request_path, "wb") as f:
        pickle.dump(list(sys.path), f)
        pickle.dump((target, tuple(args), dict(kwargs or {})), f)
    stdout = open(os.path.join(folder.name, "stdout"), "w+b")
    stderr = open(os.path.join(folder.name, "stderr"), "w+b")
    proc = subprocess.Popen(
        [sys.executable, "-c", _BOOT, request_path, os.path.join(folder.name, "result")],
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=stderr,
        env={**os.environ, **(env or {})},
        start_new_session=True,
        pass_fds=tuple(pass_fds),
    )
    return Child(proc, folder, stdout, stderr, stderr_tail)


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
    return start(target, args, kwargs, env=env, stderr_tail=stderr_tail).wait(timeout)


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
        fn = _resolve(target) if isinstance(target, str) else target
        data = pickle.dumps(("returned", fn(*args, **kwargs)))
    except Exception as e:  # noqa: BLE001 - the parent gets every exception of the call, its own or pickle's
        data = pickle.dumps(("raised", _type_name(type(e)), str(e), traceback.format_exc()))
    sys.stdout.flush()  # what the call printed lands before the result counts as written
    # written whole or not at all: a child killed while writing leaves no half result
    with open(result_path + ".part", "wb") as f:
        f.write(data)
    os.replace(result_path + ".part", result_path)
