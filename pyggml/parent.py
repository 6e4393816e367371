"""Children that end with their parent: every process pyggml starts (check's workers and model children,
the fuzzers' children, `rpc.Server`'s server) ends when the process that started it ends, however that one
ends: SIGTERM, SIGKILL, a crash.

Two mechanisms, both set in the child as it starts (`end_with`):

- Linux's parent-death signal (`prctl(PR_SET_PDEATHSIG, SIGKILL)`): the kernel kills the child the moment
  the parent goes. It is tied to the parent's thread that started the child, so it is set only where the
  caller says that thread outlives the child (a child it waits for);
- a watch thread that looks at the parent every WATCH_SECONDS and ends the child once it is gone (the
  child's parent id changes to the reaper's), whatever thread started it, on any POSIX system.

    from pyggml import parent
    parent.end_with(os.getppid())                 # in the child, first thing
    env = {parent.ENV: str(os.getpid())}          # or: the child's pyggml reads it (`end_with_env`)
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
import threading
import time

ENV = "PYGGML_END_WITH"  # the parent's pid, for a child started as a command (`python -m pyggml ...`)
WATCH_SECONDS = 0.2
_PR_SET_PDEATHSIG = 1


def end_with(parent_pid: int, death_signal: bool = False) -> None:
    """End this process when process `parent_pid` (its parent) ends.

    Args:
        parent_pid: the parent's pid, as the parent knew it (`os.getpid()` there): if this process's parent
            is already another one, it has died and this process ends now.
        death_signal: also ask Linux for SIGKILL at the parent's death (only where the parent's thread that
            started this process outlives it; see the module's doc).
    """
    if death_signal and sys.platform.startswith("linux"):
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:  # it died before we got here
        os._exit(128 + signal.SIGKILL)

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(WATCH_SECONDS)
        os._exit(128 + signal.SIGKILL)  # no cleanup to wait for: the parent that wanted the results is gone

    threading.Thread(target=watch, name="pyggml-parent-watch", daemon=True).start()


def end_with_env() -> None:
    """`end_with` the parent named by the environment (ENV), if it names one; taken out of the environment
    so that this process's own children do not watch the wrong process."""
    pid = os.environ.pop(ENV, None)
    if pid and pid.isdigit():
        end_with(int(pid))
