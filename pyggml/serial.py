"""Threads: one graph at a time per Runner, Scheduler, Gallocr and Backend.

ggml's schedulers, allocators and backends keep per-object state across a compute (the scheduler's splits and
copies, the allocator's plan, a CPU backend's thread pool and work buffer), and pyggml's C calls release the GIL
(cffi does for every call), so two threads computing on one of them at once corrupted it: eight threads sharing
a `Runner("cpu")` killed the process. Each such object has a `lock` (a reentrant lock) that its methods which
allocate or compute hold (`serialized`); a Runner shares its scheduler's, and holds it for a whole `run`
(allocate, write, compute, read), so runs from several threads on one Runner take turns and each gets its own
graph's results. Work on different objects goes on in parallel: the compute itself runs without the GIL.

A sequence of steps on a Scheduler or Gallocr (allocate, `Tensor.set`, compute, `numpy()`) is one graph's only
while nothing else allocates on it: hold `with obj.lock:` around the steps when threads share the object (a
step of another thread in between takes the memory back, and the next step raises, never computes the wrong
graph).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


def serialized(method: F) -> F:
    """Hold `self.lock` (a `threading.RLock`) for the whole call.

    Args:
        method: a method of an object with a `lock`.

    Returns:
        The method, serialized.
    """

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        with self.lock:
            return method(self, *args, **kwargs)

    return wrapper  # type: ignore[return-value]
