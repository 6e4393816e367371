"""Every child pyggml starts ends when its parent ends, however the parent ends (pyggml.parent): a parent
process starts one the way pyggml does, prints its pid, and is then killed (SIGKILL, SIGTERM) or crashes
(abort); the child must be gone within a few seconds."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

PARENT = textwrap.dedent("""
    import os, sys, time
    how, kind = sys.argv[1], sys.argv[2]
    if kind == "rpc-server":
        from pyggml import rpc
        srv = rpc.Server()
        pid = srv.proc.pid
    else:
        from pyggml.testing.engine import child
        c = child.start(time.sleep, (600,), fork=kind == "fork")
        pid = c.proc.pid
    print(pid, flush=True)
    if how == "abort":
        time.sleep(0.5)
        os.abort()
    time.sleep(600)
""")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            state = next(line for line in f if line.startswith("State:"))
    except (FileNotFoundError, ProcessLookupError, StopIteration):
        return False
    return "Z" not in state.split()[1]  # a zombie has ended; only its exit status waits for a reaper


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc to see the child's state")
@pytest.mark.parametrize("kind", ["interpreter", "fork", "rpc-server"])
@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM", "abort"])
def test_a_child_ends_when_its_parent_ends(kind, how):
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, how, kind], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    child_pid = int(parent.stdout.readline())
    try:
        time.sleep(0.5)
        assert _alive(child_pid)
        if how != "abort":
            parent.send_signal(getattr(signal, how))
        parent.wait(timeout=30)
        deadline = time.monotonic() + 5
        while _alive(child_pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(child_pid), f"the {kind} child outlived its parent ({how})"
    finally:
        if _alive(child_pid):
            os.kill(child_pid, signal.SIGKILL)
        parent.kill()
