"""Threads: a Runner, Scheduler or Backend shared by threads takes one graph at a time (its `lock`,
pyggml.serial), so no thread kills the process and every result is its own graph's; independent objects
compute in parallel, the GIL released during ggml's compute. Before, eight threads sharing a Runner("cpu")
died of SIGSEGV."""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np
import pytest

import pyggml as gg
from pyggml.backend import SMALL_GRAPH_WORK, graph_work

THREADS, RUNS = 8, 25


def _graph(k: int) -> tuple[gg.Graph, gg.Tensor, gg.Tensor, gg.Tensor, tuple[np.ndarray, np.ndarray]]:
    """Thread k's own graph, of its own shape: y = x @ w.T * (k + 1), big enough that computes overlap."""
    rng = np.random.default_rng(k)
    n = 48 + 8 * k
    ctx = gg.Context()
    x = ctx.tensor("f32", (n, 64), "x", input=True)
    w = ctx.tensor("f32", (n, 64), "w", input=True)
    y = ctx.scale(ctx.mul_mat(w, x), float(k + 1))
    X = rng.standard_normal((n, 64)).astype(np.float32)
    W = rng.standard_normal((n, 64)).astype(np.float32)
    return gg.Graph(ctx).build_forward_expand(y), x, w, y, (X, W)


def _in_threads(work: Callable[[int], None]) -> list[BaseException]:
    errors: list[BaseException] = []

    def body(k: int) -> None:
        try:
            work(k)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)

    threads = [threading.Thread(target=body, args=(k,)) for k in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert not any(t.is_alive() for t in threads), "a thread did not finish (a deadlock?)"
    return errors


def _check(out: np.ndarray, k: int, XW: tuple[np.ndarray, np.ndarray]) -> None:
    X, W = XW
    np.testing.assert_allclose(out, (X @ W.T) * (k + 1), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("name", ["cpu", "meta:cpu,cpu"])
def test_threads_sharing_one_runner_take_turns_and_each_gets_its_own_result(name):
    runner = gg.Runner(name)

    def work(k: int) -> None:
        graph, x, w, y, XW = _graph(k)
        for _ in range(RUNS):
            _check(runner.run(graph, {x: XW[0], w: XW[1]}, y), k, XW)

    assert _in_threads(work) == []


def test_threads_sharing_one_scheduler_hold_its_lock_around_their_steps():
    sched = gg.Scheduler([gg.cpu_backend()])

    def work(k: int) -> None:
        graph, x, w, y, XW = _graph(k)
        for _ in range(RUNS):
            with sched.lock:  # allocate, write, compute, read: one graph's, with nothing in between
                sched.alloc_graph(graph)
                x.set(XW[0])
                w.set(XW[1])
                sched.compute(graph)
                _check(y.numpy(), k, XW)

    assert _in_threads(work) == []


def test_steps_of_other_threads_in_between_raise_and_never_compute_another_graph():
    """Without the lock around the steps, another thread's allocation takes the memory back: the next step
    raises (a tensor without memory, a graph not allocated here), and no thread reads another's result."""
    sched = gg.Scheduler([gg.cpu_backend()])
    wrong: list[int] = []

    def work(k: int) -> None:
        graph, x, w, y, XW = _graph(k)
        for _ in range(RUNS):
            try:
                sched.alloc_graph(graph)
                x.set(XW[0])
                w.set(XW[1])
                sched.compute(graph)
                out = y.numpy()
            except (ValueError, RuntimeError):  # GraphError and a read of memory taken back are ValueErrors
                continue
            X, W = XW
            if out.shape != (X.shape[0], W.shape[0]) or not np.allclose(out, (X @ W.T) * (k + 1), rtol=1e-4, atol=1e-3):
                wrong.append(k)

    errors = _in_threads(work)
    assert errors == [] and wrong == []


def test_one_backend_computing_graphs_from_several_threads():
    backend = gg.cpu_backend()

    def work(k: int) -> None:
        graph, x, w, y, XW = _graph(k)
        ctx_buffer = backend.alloc_tensors(graph.ctx)
        for _ in range(RUNS):
            x.set(XW[0])
            w.set(XW[1])
            backend.compute(graph)
            _check(y.numpy(), k, XW)
        del ctx_buffer

    assert _in_threads(work) == []


def test_independent_runners_compute_in_parallel_threads():
    def work(k: int) -> None:
        runner = gg.Runner("cpu", n_threads=1)
        graph, x, w, y, XW = _graph(k)
        for _ in range(RUNS):
            _check(runner.run(graph, {x: XW[0], w: XW[1]}, y), k, XW)

    assert _in_threads(work) == []


def test_the_compute_releases_the_gil():
    """While one thread is inside ggml's compute of a large graph, another thread runs Python."""
    import time

    ctx = gg.Context()
    a = ctx.tensor("f32", (512, 512), "a", input=True)
    y = a
    for _ in range(20):
        y = ctx.mul_mat(a, y)  # 20 products of 512 x 512: tens of milliseconds in C
    graph = gg.Graph(ctx).build_forward_expand(y)
    runner = gg.Runner("cpu", n_threads=1)
    A = (np.eye(512) * 0.5).astype(np.float32)
    ticks = [0]
    done = threading.Event()

    def count() -> None:
        while not done.is_set():
            ticks[0] += 1
            time.sleep(0)

    counter = threading.Thread(target=count)
    counter.start()
    try:
        t = time.perf_counter()
        runner.run(graph, {a: A}, y)
        seconds = time.perf_counter() - t
        before = ticks[0]
        runner.run(graph, {a: A}, y)
        during = ticks[0] - before
    finally:
        done.set()
        counter.join()
    assert seconds > 0.005 and during > 100, (seconds, during)


# --- threads that fit the machine (pyggml.threads) ----------------------------------------------------------------
def _in_one_core(code: str) -> str:
    """Run code in a fresh interpreter pinned to one core; its last printed line."""
    import subprocess
    import sys

    prelude = "import os\nos.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})\n"
    out = subprocess.run([sys.executable, "-c", prelude + code], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.strip().splitlines()[-1]


def _os_threads() -> str:
    return "len(os.listdir('/proc/self/task'))"


needs_affinity = pytest.mark.skipif(not hasattr(__import__("os"), "sched_setaffinity"), reason="Linux only")


@needs_affinity
def test_the_cores_are_those_this_process_may_run_on() -> None:
    assert _in_one_core("from pyggml import threads\nprint(threads.cores())") == "1"


@needs_affinity
def test_a_meta_backend_over_cpus_gives_its_devices_the_threads_of_the_machine() -> None:
    # its CPU devices kept ggml's default of 4 threads whatever the machine had (ggml patch 0035): on one core,
    # OpenMP then started 3 more threads that spin in barriers with no core of their own
    code = f"""
import numpy as np, pyggml as gg
r = gg.Runner("meta:cpu,cpu")
ctx = gg.Context()
x = ctx.tensor("f32", (64, 512), "x", input=True)
w = ctx.tensor("f32", (512, 512), "w", input=True)
y = ctx.mul_mat(w, x)
g = gg.Graph(ctx).build_forward_expand(y)
before = {_os_threads()}
r.run(g, {{x: np.ones((64, 512), np.float32), w: np.ones((512, 512), np.float32)}}, y)
print({_os_threads()} - before, r.backend.n_threads)
"""
    assert _in_one_core(code) == "0 1"


def test_a_meta_runner_given_threads_keeps_them_for_every_graph() -> None:
    # check -j's workers give each runner its share of the cores; a meta runner took every core for each large
    # graph whatever it was given, so two workers ran four threads on two cores: the delta_net cases of the
    # meta:cpu,cpu suite took 5 s each, 100 times the CPU's (bench/README.md, "Threads that fit the machine")
    with gg.Runner("meta:cpu,cpu", n_threads=1) as r:
        ctx = gg.Context()
        x = ctx.tensor("f32", (64, 512), "x", input=True)
        w = ctx.tensor("f32", (512, 512), "w", input=True)
        y = ctx.mul_mat(w, x)
        g = gg.Graph(ctx).build_forward_expand(y)
        assert graph_work(g) >= SMALL_GRAPH_WORK  # a graph that would take every core
        r.run(g, {x: np.ones((64, 512), np.float32), w: np.ones((512, 512), np.float32)}, y)
        assert r.backend.n_threads == 1
    with pytest.raises(ValueError):
        gg.Runner("meta:cpu,cpu", n_threads=0)


@needs_affinity
def test_a_llama_context_takes_the_cores_of_the_machine(tmp_path) -> None:
    llama = pytest.importorskip("pyggml.llama", reason="pyggml built without libllama (PYGGML_LLAMA=OFF)")
    from pyggml.models.make_model import make_model

    path = tmp_path / "llama.gguf"
    make_model("llama", path)
    code = f"""
from pyggml import llama, lib
for backend in ("cpu", "meta:cpu,cpu"):
    model = llama.Model.for_backend({str(path)!r}, backend, False)
    with llama.Context(model, n_ctx=64) as ctx:
        assert (lib.llama_n_threads(ctx.ptr), lib.llama_n_threads_batch(ctx.ptr)) == (1, 1)
        before = {_os_threads()}
        ctx.decode(list(range(1, 17)))
        grown = {_os_threads()} - before
    model.close()
    assert grown == 0, (backend, grown)  # the split's CPU devices too (llama.cpp patch 0006)
print("ok")
"""
    assert _in_one_core(code) == "ok"
    model = llama.Model.for_backend(path, "cpu", False)
    try:
        with llama.Context(model, n_ctx=64, n_threads=3) as ctx:  # an explicit count wins
            assert (llama.lib.llama_n_threads(ctx.ptr), llama.lib.llama_n_threads_batch(ctx.ptr)) == (3, 3)
        for bad in (0, -1, 1.5, True, "2"):
            with pytest.raises(ValueError, match="threads must be an int of at least 1"):
                llama.Context(model, n_ctx=64, n_threads=bad)
    finally:
        model.close()


@pytest.mark.parametrize("bad", ["0"])
def test_check_refuses_a_thread_count_below_one_in_every_mode(bad) -> None:
    import subprocess
    import sys

    for mode in (["--op", "add"], ["--mode", "perf", "--op", "add"], ["--arch", "llama"]):
        out = subprocess.run(
            [sys.executable, "-m", "pyggml", "check", *mode, "--threads", bad],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert out.returncode == 2 and "--threads" in out.stderr and "Traceback" not in out.stderr, (mode, out.stderr)


def test_check_model_takes_the_thread_count_given(tmp_path) -> None:
    pytest.importorskip("pyggml.llama", reason="pyggml built without libllama (PYGGML_LLAMA=OFF)")
    import json
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "pyggml", "check", "--arch", "llama", "--threads", "1", "--json", "-", "-q"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert {r["status"] for r in json.loads(out.stdout)} <= {"pass", "skipped"}


@needs_affinity
def test_an_observed_llama_context_computes_with_a_pool_that_sleeps_between_pieces(tmp_path) -> None:
    """Under an observer the CPU computes a graph in pieces with Python's work between them; ggml's own thread
    pool (the wheel's) polled through that work for the next piece, on the core the work needed. An observed
    context gets a pool whose workers sleep (`threads.quiet_pool`): its threads are made with the context and go
    with it, and the logits are those of a context without an observer, bit for bit."""
    llama = pytest.importorskip("pyggml.llama", reason="pyggml built without libllama (PYGGML_LLAMA=OFF)")
    import os
    import sys

    import numpy as np

    from pyggml import threads
    from pyggml.models.make_model import make_model

    pool = threads.quiet_pool(2)
    assert pool is not None
    threads.free_pool(pool)
    for bad in (0, -1, 1.5, True):  # ggml made a pool of no threads for 0, without a word
        with pytest.raises(ValueError, match="threads must be an int of at least 1"):
            threads.quiet_pool(bad)  # type: ignore[arg-type]
    path = tmp_path / "llama.gguf"
    make_model("llama", path)
    own_pool = sys.modules["pyggml.backend"].backend_features().get("CPU", {}).get("OPENMP") != "1"
    model = llama.Model.for_backend(path, "cpu", False)
    try:
        with llama.Context(model, n_ctx=64, n_threads=3) as ctx:
            ctx.decode(list(range(1, 17)), logits="all")
            plain = np.array(ctx.logits())
        seen: list[str] = []

        def observe(t, ask: bool) -> bool:
            seen.append(t.name)
            return True

        before = len(os.listdir("/proc/self/task"))
        with llama.Context(model, n_ctx=64, n_threads=3, observe=observe) as ctx:
            made = len(os.listdir("/proc/self/task")) - before
            ctx.decode(list(range(1, 17)), logits="all")
            observed = np.array(ctx.logits())
        gone = len(os.listdir("/proc/self/task")) - before
    finally:
        model.close()
    assert seen and np.array_equal(plain, observed)
    if own_pool:  # ggml's pool makes its workers at once (OpenMP's builds make none)
        assert made == 2, made
    assert gone == 0, gone
