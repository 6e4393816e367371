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
    B = sys.modules["pyggml.backend"]

    def rss_mb():
        return int(open(f"/proc/{os.getpid()}/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

    def graph():
        ctx = gg.Context()
        a = ctx.tensor("f32", (2, 3), "a", input=True)
        y = ctx.add(a, a)
        return gg.Graph(ctx).build_forward_expand(y), a, y

    def runner(name):
        g, a, y = graph()
        gg.Runner(name).run(g, {a: np.ones((2, 3))}, y)

    def closed_runner():
        g, a, y = graph()
        with gg.Runner("cpu") as r:
            r.run(g, {a: np.ones((2, 3))}, y)

    def scheduler():
        g, a, y = graph()
        s = B.Scheduler([B.cpu_backend()])
        s.alloc_graph(g)
        a.set(np.ones((2, 3)))
        s.compute(g)

    def gallocr():
        g, a, y = graph()
        be = B.cpu_backend()
        al = B.Gallocr(be.buffer_type)
        al.alloc_graph(g)
        a.set(np.ones((2, 3)))
        be.compute(g)

    def backend():
        B.cpu_backend().name

    def buffer():
        ctx = gg.Context()
        w = ctx.tensor("f32", (64, 64), "w")
        B.cpu_backend().alloc_tensors(ctx)
        w.set(np.ones((64, 64)))

    def context():
        ctx = gg.Context(no_alloc=False)
        x = ctx.tensor("f32", (64, 64), "x")
        x.set(np.ones((64, 64)))
        ctx.mul_mat(x, x)

    def observer():
        g, a, y = graph()
        r = gg.Runner("cpu")
        r.sched.observe(lambda t, ask: True)
        r.run(g, {a: np.ones((2, 3))}, y)

    def llama_model():
        from pyggml import llama
        m = llama.Model.load(sys.argv[3], n_gpu_layers=0, devices=[])
        c = llama.Context(m, n_ctx=64, n_batch=8, observe=lambda t, ask: False)
        c.decode([1, 2, 3])

    KINDS = {
        "runner-cpu": lambda: runner("cpu"),
        "runner-meta": lambda: runner("meta:cpu,cpu"),
        "runner-closed": closed_runner,
        "scheduler": scheduler,
        "gallocr": gallocr,
        "backend": backend,
        "buffer": buffer,
        "context": context,
        "observer": observer,
        "llama": llama_model,
    }
    cycle, n = KINDS[sys.argv[1]], int(sys.argv[2])
    for _ in range(200):  # the warm-up: caches, the allocator's arenas
        cycle()
    gc.collect()
    base = rss_mb()
    for _ in range(n):
        cycle()
    print(rss_mb() - base)
""")

KINDS = [
    "runner-cpu",
    "runner-meta",
    "runner-closed",
    "scheduler",
    "gallocr",
    "backend",
    "buffer",
    "context",
    "observer",
    "llama",
]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the resident size from /proc")
@pytest.mark.parametrize("kind", KINDS)
def test_making_using_and_dropping_an_object_5000_times_grows_the_process_less_than_10_mb(kind, tmp_path):
    """A meta Runner grew 5 KB each (a new ggml meta device per Runner: pyggml.meta's slots now serve again)."""
    from pyggml.models.make_model import make_model

    model = tmp_path / "tiny.gguf"
    if kind == "llama":
        make_model("llama", model)
    cmd = [sys.executable, "-c", GROWTH, kind, "5000", str(model)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert float(proc.stdout) < 10, f"{kind}: {float(proc.stdout):.1f} MB more after 5,000"


def test_close_gives_the_memory_back_now_and_refuses_further_use():
    B = sys.modules["pyggml.backend"]  # noqa: N806 - the module (pyggml.backend is the function backend())

    ctx = gg.Context()
    a = ctx.tensor("f32", (2, 3), "a", input=True)
    y = ctx.add(a, a)
    graph = gg.Graph(ctx).build_forward_expand(y)
    with gg.Runner("cpu") as runner:
        assert (runner.run(graph, {a: np.ones((2, 3))}, y) == 2).all()
    assert runner.closed and runner.sched.closed and all(b.closed for b in runner.backends)
    with pytest.raises(ValueError, match="no memory"):  # the lent memory went back before the scheduler went
        y.numpy()
    with pytest.raises(ValueError, match="the runner is closed"):
        runner.run(graph, {a: np.ones((2, 3))}, y)
    runner.close()  # again: nothing
    # a backend a live scheduler computes with is not closed under it
    be = B.cpu_backend()
    sched = B.Scheduler([be])
    with pytest.raises(ValueError, match="a Scheduler still computes with CPU"):
        be.close()
    sched.close()
    be.close()
    with pytest.raises(ValueError, match="Backend is closed"):
        be.name  # noqa: B018
    # a buffer: its tensors lose their memory first
    ctx2 = gg.Context()
    w = ctx2.tensor("f32", (4,), "w")
    with B.cpu_backend().alloc_tensors(ctx2) as buf:
        w.set(np.arange(4))
        assert (w.numpy() == np.arange(4)).all()
    assert buf.closed
    with pytest.raises(ValueError, match="no memory"):
        w.numpy()
    # a graph allocator
    be3 = B.cpu_backend()
    alloc = B.Gallocr(be3.buffer_type)
    alloc.alloc_graph(graph)
    alloc.close()
    with pytest.raises(ValueError, match="Gallocr is closed"):
        alloc.alloc_graph(graph)


def test_a_llama_model_and_context_close_now_and_refuse_further_use(tmp_path):
    llama = pytest.importorskip("pyggml.llama", reason="pyggml built without libllama (PYGGML_LLAMA=OFF)")
    from pyggml.models.make_model import make_model

    path = tmp_path / "tiny.gguf"
    make_model("llama", path)
    with llama.Model.load(path, n_gpu_layers=0, devices=[]) as model:
        with llama.Context(model, n_ctx=64, n_batch=8) as ctx:
            ctx.decode([1, 2, 3])
            with pytest.raises(ValueError, match="a Context of .* is still open"):
                model.close()
        assert ctx.closed
        with pytest.raises(ValueError, match="Context is closed"):
            ctx.decode([4])
        ctx.close()  # again: nothing
    assert model.closed
    with pytest.raises(ValueError, match="Model is closed"):
        model.n_vocab  # noqa: B018


def test_a_view_made_before_its_buffer_was_closed_has_no_memory_after():
    """A view kept the address of its source's memory: after Buffer.close() it read freed memory (garbage), in
    its own context and in another."""
    B = sys.modules["pyggml.backend"]  # noqa: N806 - the module (pyggml.backend is the function backend())
    wctx = gg.Context()
    w = wctx.tensor("f32", (4, 8), "w")
    buf = B.cpu_backend().alloc_tensors(wctx)
    w.set(np.ones((4, 8)))
    same = wctx.reshape_1d(w, 32)
    other = gg.Context().reshape_1d(w, 32)
    assert (same.numpy() == 1).all() and (other.numpy() == 1).all()
    buf.close()
    for v in (w, same, other):
        with pytest.raises(ValueError, match="has no memory"):
            v.numpy()


@pytest.mark.parametrize("name", ["cpu", "meta:cpu,cpu"])
def test_a_graph_run_again_with_another_output_reads_that_output(name):
    """Runner.run(graph, ..., z) then run(graph, ..., [z, v]): ggml's allocator kept the first memory plan,
    in which exp(v) reused v's memory, and v came back as exp(v), silently (1.4e12 for 28)."""
    from pyggml.meta import Split

    w_values = np.arange(32, dtype=np.float32).reshape(4, 8)
    runner = gg.Runner(name)
    if runner.meta is not None:
        runner.set_policy([("w", lambda t: Split.even(1, t.ne[1], 2))])
    wctx = gg.Context()
    w = wctx.tensor("f32", (4, 8), "w")
    runner.backend.alloc_tensors(wctx)
    w.set(w_values)
    ctx = gg.Context()
    x = ctx.tensor("f32", (3, 8), "x", input=True)
    z = ctx.mul_mat(w, x)
    v = ctx.cont(ctx.transpose(z))
    graph = gg.Graph(ctx).build_forward_expand(ctx.exp(v))
    xs = np.ones((3, 8), np.float32)
    runner.run(graph, {x: xs}, z)
    got_z, got_v = runner.run(graph, {x: xs}, [z, v])
    np.testing.assert_array_equal(got_z, xs @ w_values.T)
    np.testing.assert_array_equal(got_v, (xs @ w_values.T).T)
