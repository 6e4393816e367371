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
from typing import Any


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


def quiet_pool(n_threads: int) -> Any:
    """A ggml thread pool of the process's CPU backend (the CPU variant in use, as ggml's registry gives it) whose
    workers sleep as soon as a compute ends (`poll` 0), for a llama.cpp context under an eval callback.

    Without one, ggml's own thread pool (the wheel's, `pip install .`; a native build uses OpenMP) polls for the
    next compute: under an observer the CPU computes a graph in many pieces with Python's work between them, and
    the polling worker took the core that work ran on. A checked 32-token decode of a 0.8B model took 5.0 s with
    it and 3.75 s with this pool (bench/README.md, "On a Xeon with AMX, and ggml's thread pool under the
    checker"); OpenMP's builds measured the same either way.

    Args:
        n_threads: the pool's threads.

    Returns:
        The pool (`struct ggml_threadpool *`; free it with `free_pool` once no context uses it), or None where
        the CPU backend offers none.

    Raises:
        ValueError: n_threads is not an int of at least 1 (ggml made a pool of no threads for 0).
    """
    from pyggml._native import ffi, lib

    n_threads = checked("quiet_pool: n_threads", n_threads)

    dev = lib.ggml_backend_dev_by_type(lib.GGML_BACKEND_DEVICE_TYPE_CPU)
    reg = lib.ggml_backend_dev_backend_reg(dev) if dev != ffi.NULL else ffi.NULL
    new = lib.ggml_backend_reg_get_proc_address(reg, b"ggml_threadpool_new") if reg != ffi.NULL else ffi.NULL
    if new == ffi.NULL:
        return None
    params = ffi.new("struct ggml_threadpool_params *", lib.ggml_threadpool_params_default(n_threads))
    params.poll = 0
    pool = ffi.cast("struct ggml_threadpool * (*)(struct ggml_threadpool_params *)", new)(params)
    return pool if pool != ffi.NULL else None


def free_pool(pool: Any) -> None:
    """Free a pool of `quiet_pool` (through the CPU backend that made it).

    Args:
        pool: the pool.
    """
    from pyggml._native import ffi, lib

    reg = lib.ggml_backend_dev_backend_reg(lib.ggml_backend_dev_by_type(lib.GGML_BACKEND_DEVICE_TYPE_CPU))
    free = lib.ggml_backend_reg_get_proc_address(reg, b"ggml_threadpool_free")
    ffi.cast("void (*)(struct ggml_threadpool *)", free)(pool)
