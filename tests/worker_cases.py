"""Cases that end the process they run in (and one that takes a minute), for tests/test_workers.py: imported by `check -j`'s workers
only (`workers.run_cases(..., modules=["worker_cases"])`), never registered in the pytest process."""

from __future__ import annotations

import os
import signal
import sys
import time

import numpy as np

from pyggml.runner import Runner
from pyggml.testing.engine.cases import Case, register


class Dying(Case):
    """Passes everywhere but on the CPU, where it dies as `how` says (abort: as ggml's GGML_ASSERT does)."""

    def __init__(self, how: str) -> None:
        self.name, self.op, self.how = f"dying/{how}", "dying", how

    def execute(self, runner: Runner) -> list[np.ndarray]:
        if runner.name == "cpu":
            print(f"dying by {self.how} now", file=sys.stderr, flush=True)
            if self.how == "abort":
                os.abort()
            os.kill(os.getpid(), signal.SIGKILL)
        return [np.zeros(3, np.float32)]

    def expected(self) -> list[np.ndarray]:
        return [np.zeros(3, np.float32)]


for _how in ("abort", "kill"):
    register(Dying(_how))


class Sleeping(Case):
    """Takes a minute on the CPU, then passes: a case a run's deadline stops."""

    name, op = "sleeping/minute", "sleeping"

    def execute(self, runner: Runner) -> list[np.ndarray]:
        time.sleep(60)
        return [np.zeros(3, np.float32)]

    def expected(self) -> list[np.ndarray]:
        return [np.zeros(3, np.float32)]


register(Sleeping())
