"""When does a second CPU thread pay? Times one compute of small graphs at 1 thread and at all the
machine's cores, by the graph's work (`pyggml.backend.graph_work`: multiply-adds, 8 per element of
other nodes), to set the size rule `pyggml.backend.auto_threads` uses. Best of 7 rounds of
200 computes (at most 2 s per point); prints a table (markdown) for bench/README.md.

    python bench/cpu_threads.py
"""

from __future__ import annotations

import os
import time

import numpy as np

import pyggml as gg
from pyggml.backend import graph_work


def elementwise(n: int):
    ctx = gg.Context()
    a = ctx.tensor("f32", (n,), "a")
    y = ctx.exp(ctx.mul(ctx.add(a, a), a))
    return ctx, [a], gg.Graph(ctx).build_forward_expand(y)


def matmul(n: int):
    ctx = gg.Context()
    w = ctx.tensor("f32", (n, n), "w")
    x = ctx.tensor("f32", (8, n), "x")
    return ctx, [w, x], gg.Graph(ctx).build_forward_expand(ctx.mul_mat(w, x))


def per_compute(make, n: int, threads: int) -> tuple[float, int]:
    ctx, leaves, graph = make(n)
    be = gg.cpu_backend(threads)
    be.alloc_tensors(ctx)
    for t in leaves:
        t.set(np.random.default_rng(0).uniform(-1, 1, t.shape).astype(np.float32))
    best = float("inf")
    reps = 200
    for _ in range(7):
        t0 = time.perf_counter()
        for _ in range(reps):
            be.compute(graph)
        best = min(best, (time.perf_counter() - t0) / reps)
        if best * reps * 7 > 2:
            reps = max(5, reps // 4)
    return best * 1e6, graph_work(graph)


def main():
    cores = os.cpu_count() or 1
    print(f"cores: {cores}, load average: {os.getloadavg()[0]:.1f}")
    print(f"| graph | work | 1 thread (us) | {cores} threads (us) | faster |")
    print("|---|---|---|---|---|")
    for make, sizes in ((elementwise, (64, 1024, 8192, 32768, 131072, 524288)), (matmul, (16, 32, 64, 128, 256))):
        for n in sizes:
            one, work = per_compute(make, n, 1)
            many, _ = per_compute(make, n, cores)
            print(f"| {make.__name__} {n} | {work} | {one:.1f} | {many:.1f} | {'1' if one <= many else cores} |")


if __name__ == "__main__":
    main()
