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
            if self.how in GGML_ABORTS:  # through ggml's own GGML_ABORT, as its kernels abort
                from pyggml._native import ffi, lib

                file, line, text = GGML_ABORTS[self.how]
                lib.ggml_abort(file, line, b"%s", ffi.new("char[]", text))
            os.kill(os.getpid(), signal.SIGKILL)
        return [np.zeros(3, np.float32)]

    def expected(self) -> list[np.ndarray]:
        return [np.zeros(3, np.float32)]


# where and what: a type switch of ggml-cpu without a branch for the types (ggml 0.16.0's set_rows on an F16
# source), and an assertion of ggml's
GGML_ABORTS = {
    "ggml-dispatch": (b"/build/tree/ggml/src/ggml-cpu/ops.cpp", 5092, b"src0->type = 1 (f16) not supported"),
    "ggml-assert": (b"/build/tree/ggml/src/ggml-cpu/ops.cpp", 77, b"GGML_ASSERT(ne0 == nc) failed"),
}

for _how in ("abort", "kill", *GGML_ABORTS):
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


class DyingEvenJudged(Dying):
    """Dies computing on the CPU, and again in the worker that judges that death (its known disagreements
    abort): a case that would kill every worker sent it."""

    def __init__(self) -> None:
        super().__init__("abort")
        self.name = "dying/even-judged"

    @property
    def known(self):  # read by the verdict of a death only
        os.abort()


register(DyingEvenJudged())
