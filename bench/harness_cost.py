"""Where `check`'s time goes, case by case, on the CPU (one thread, as a `-j 2` worker runs it).

Each op case is run the way `check` runs it, its phases timed apart:

- inputs: drawing the values from the case's seed and encoding them to the tensors' bytes (quantized
  types quantized; ggml's tables for IQ2_S, IQ3_S and IQ3_XXS, built at a process's first quantization
  of them, are built first and timed apart);
- build: the graph through pyggml's checked wrappers;
- preflight: pyggml's checks before compute (`pyggml.preflight.check`);
- compute: ggml's own graph compute;
- transfers and guards: placing every tensor between guard bytes, writing the inputs, reading the
  guards and the outputs back;
- oracle: the NumPy oracle;
- verdict: the comparison (NMSE, largest error, NaN/Inf positions).

The scenario cases (delta_net, conv_state: several graphs each) are timed whole. Prints a markdown
table for bench/README.md.

    python bench/harness_cost.py [--only PATTERN]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import defaultdict

import pyggml.backend  # noqa: F401 - the module, found in sys.modules below
from pyggml import preflight, types
from pyggml.runner import Runner
from pyggml.testing.engine import cases
from pyggml.testing.engine.guard import run_guarded
from pyggml.testing.engine.verdict import judge
from pyggml.testing.engine.workers import QUANT_TABLES

PHASES = ("inputs", "build", "preflight", "compute", "transfers and guards", "oracle", "verdict")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", default=None)
    args = p.parse_args()
    backend_module = sys.modules["pyggml.backend"]  # the module (pyggml.backend is also a function's name)
    t_start = time.perf_counter()
    selected = cases.select(args.only)
    t_registry = time.perf_counter() - t_start
    t = time.perf_counter()
    for name in QUANT_TABLES:  # ggml's tables, built at a process's first quantization of these types
        types.can_quantize(name)
    t_tables = time.perf_counter() - t
    runner = Runner("cpu", n_threads=1)
    spent: dict[str, float] = defaultdict(float)
    clock = {"preflight": 0.0, "compute": 0.0}
    check, graph_compute = preflight.check, backend_module.lib.ggml_backend_graph_compute

    def timed_check(*a, **k):
        t = time.perf_counter()
        try:
            return check(*a, **k)
        finally:
            clock["preflight"] += time.perf_counter() - t

    class Lib:  # the C layer as backend.py sees it, with graph compute timed
        def __getattr__(self, name):
            return getattr(backend_module.__dict__["_real_lib"], name)

        @staticmethod
        def ggml_backend_graph_compute(*a):
            t = time.perf_counter()
            try:
                return graph_compute(*a)
            finally:
                clock["compute"] += time.perf_counter() - t

    backend_module.__dict__["_real_lib"] = backend_module.lib
    preflight.check = timed_check
    backend_module.lib = Lib()  # type: ignore[assignment]
    n_op, n_scenario, scenario_s = 0, 0, 0.0
    for case in selected:
        if not isinstance(case, cases.OpCase):
            t = time.perf_counter()
            try:
                judge(case, "cpu", case.execute(runner), case.expected())
            except Exception:  # noqa: BLE001 - its time counts all the same
                pass
            scenario_s += time.perf_counter() - t
            n_scenario += 1
            continue
        n_op += 1
        t0 = time.perf_counter()
        raw = case.raw_values()
        t1 = time.perf_counter()
        ctx, x, out, graph = case.build()
        t2 = time.perf_counter()
        if runner.backend.unsupported(graph):
            continue
        clock["preflight"] = clock["compute"] = 0.0
        actual = run_guarded(runner.backend, ctx, graph, {x[k]: raw[k] for k in x}, [out], raw=True)
        t3 = time.perf_counter()
        expected = case.expected()
        t4 = time.perf_counter()
        judge(case, "cpu", actual, expected)
        t5 = time.perf_counter()
        spent["inputs"] += t1 - t0
        spent["build"] += t2 - t1
        spent["preflight"] += clock["preflight"]
        spent["compute"] += clock["compute"]
        spent["transfers and guards"] += t3 - t2 - clock["preflight"] - clock["compute"]
        spent["oracle"] += t4 - t3
        spent["verdict"] += t5 - t4
    preflight.check = check
    backend_module.lib = backend_module.__dict__.pop("_real_lib")
    total = sum(spent.values())
    print(f"# CPU, 1 thread; load average (1 min) {os.getloadavg()[0]:.1f}")
    print(f"# once per process: the registry {t_registry:.2f} s, ggml's quantization tables {t_tables:.2f} s")
    print()
    print(f"{n_op} op cases in {total:.2f} s: {n_op / total:.0f} cases/s, {1e3 * total / n_op:.2f} ms per case")
    print()
    print("| phase | s | ms per case | share |")
    print("|---|---|---|---|")
    for ph in PHASES:
        print(f"| {ph} | {spent[ph]:.2f} | {1e3 * spent[ph] / n_op:.3f} | {100 * spent[ph] / total:.0f} % |")
    if n_scenario:
        print()
        print(f"{n_scenario} scenario cases: {scenario_s:.2f} s, {1e3 * scenario_s / n_scenario:.1f} ms per case")


if __name__ == "__main__":
    main()
