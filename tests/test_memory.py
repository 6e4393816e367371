"""Memory comes back: objects that own ggml memory free it when the last reference goes, by reference counting
alone, so a long process (a pytest session, a notebook kernel, a service) that makes and drops Runners stays
the same size. Before, a module table of pyggml.lifetime held every lender (the scheduler of each Runner that
ran a graph) and, through it, its graph's contexts: 163 KB per Runner made, run and dropped, for the life of
the process."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import weakref

import numpy as np
import pytest

import pyggml as gg


def _run_once(name: str = "cpu") -> tuple[weakref.ref, weakref.ref, weakref.ref]:
    ctx = gg.Context()
    a = ctx.tensor("f32", (2, 3), "a", input=True)
    y = ctx.add(a, a)
    graph = gg.Graph(ctx).build_forward_expand(y)
    runner = gg.Runner(name)
    assert (runner.run(graph, {a: np.ones((2, 3))}, y) == 2).all()
    return weakref.ref(runner.sched), weakref.ref(ctx), weakref.ref(graph)


@pytest.mark.parametrize("name", ["cpu", "meta:cpu,cpu"])
def test_a_dropped_runner_and_its_graph_are_freed_without_the_cycle_collector(name):
    gc.disable()
    try:
        refs = _run_once(name)
        assert [r() for r in refs] == [None, None, None]
    finally:
        gc.enable()


def test_a_context_dropped_before_its_runner_leaves_no_entry_behind():
    """The runner lives on: the graph's tensors went with their context, and no table lists their addresses
    (a later tensor at the same address would read as lent memory)."""
    from pyggml import lifetime

    runner = gg.Runner("cpu")
    ctx = gg.Context()
    a = ctx.tensor("f32", (2, 3), "a", input=True)
    y = ctx.add(a, a)
    graph = gg.Graph(ctx).build_forward_expand(y)
    runner.run(graph, {a: np.ones((2, 3))}, y)
    assert lifetime._lent
    del ctx, a, y, graph
    gc.collect()
    assert lifetime._lent == {} and lifetime._unwritten == {}
    # and the runner still runs other graphs
    ctx = gg.Context()
    b = ctx.tensor("f32", (4,), "b", input=True)
    z = ctx.scale(b, 3.0)
    assert (runner.run(gg.Graph(ctx).build_forward_expand(z), {b: np.ones(4)}, z) == 3).all()


GROWTH = textwrap.dedent("""
    import gc, os, sys
    import numpy as np
    import pyggml as gg

    def rss_mb():
        return int(open(f"/proc/{os.getpid()}/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

    def cycle(name):
        ctx = gg.Context()
        a = ctx.tensor("f32", (2, 3), "a", input=True)
        y = ctx.add(a, a)
        g = gg.Graph(ctx).build_forward_expand(y)
        gg.Runner(name).run(g, {a: np.ones((2, 3))}, y)

    name, n = sys.argv[1], int(sys.argv[2])
    for _ in range(200):  # the warm-up: caches, the allocator's arenas
        cycle(name)
    gc.collect()
    base = rss_mb()
    for _ in range(n):
        cycle(name)
    print(rss_mb() - base)
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the resident size from /proc")
def test_making_running_and_dropping_a_runner_5000_times_grows_the_process_less_than_10_mb():
    proc = subprocess.run([sys.executable, "-c", GROWTH, "cpu", "5000"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert float(proc.stdout) < 10, f"{float(proc.stdout):.0f} MB more after 5,000 Runners"
