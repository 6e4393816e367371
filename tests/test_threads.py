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
