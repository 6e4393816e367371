"""How many threads ggml's CPU gets: the cores this process may run on, never more.

On a machine of 2 cores llama.cpp's default of 4 threads (GGML_DEFAULT_N_THREADS) made a 32-token decode 18 times
slower than 2 threads with ggml's own thread pool (the wheel, `pip install .`: 4.3 s against 0.24 s, bench/README.md,
"Threads that fit the machine"), and a one-token step 160 times: threads that
wait for each other in a barrier spin while the one they wait for has no core. So every place pyggml runs ggml's
CPU takes its count from here unless the caller names one: `pyggml.llama.Context`, a CPU backend choosing per
graph (`pyggml.backend.auto_threads`), the CPU devices of a meta backend (which computes its devices one after
another, so each may take every core), the RPC server, and the workers of `check -j` (`cores() // jobs` each).
"""

from __future__ import annotations

import os


def cores() -> int:
    """The cores this process may run on: its CPU affinity (taskset, a container's cpuset) and, where a cgroup
    caps its CPU time (a container's `--cpus`), that quota rounded up; at least 1.

    Returns:
        The count.
    """
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        n = os.cpu_count() or 1
    quota = _cgroup_quota()
    if quota is not None:
        n = min(n, quota)
    return max(1, n)


def _cgroup_quota() -> int | None:
    """The CPUs a cgroup v2 quota allows (cpu.max "quota period", rounded up), or None when there is none."""
    try:
        with open("/sys/fs/cgroup/cpu.max", encoding="ascii") as f:
            quota, period = f.read().split()[:2]
    except (OSError, ValueError):
        return None
    if quota == "max":
        return None
    try:
        return max(1, -(-int(quota) // int(period)))
    except (ValueError, ZeroDivisionError):
        return None


def checked(what: str, n: object) -> int:
    """An explicit thread count, checked: an int of at least 1.

    Args:
        what: what the count is for, for the message.
        n: the count.

    Returns:
        n.

    Raises:
        ValueError: not an int, or below 1 (say so, and what the default would be).
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"{what}: threads must be an int of at least 1, not {n!r} (leave it out for {cores()})")
    return n
