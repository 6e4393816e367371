"""Time the delta-net conv-state rollback write on the CPU: the three strategies side by side.

    python bench/conv_state_write.py [--repeat 30] [--quick]

One graph holds the write of one layer alone (as in llama.cpp, per layer): d_conv = 4,
8192 channels, F32 cache, the conv input already computed. For K in {2,4,8}, tokens in
{1,4,8}, 8 and 32 sequences, 1 and 2 threads, it prints each strategy's median time of one
graph compute, its ratio to `copies`, and its effective bandwidth (bytes read + written by
the write) next to the machine's memcpy bandwidth, measured in the same run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

import pyggml as gg
from pyggml import lib
from pyggml.models.conv_state import STRATEGIES, GraphInputs, RecurrentMemory, build_conv_write, windows_written

D_CONV, CHANNELS = 4, 8192


def memcpy_gbps(nbytes=256 << 20, repeat=5) -> float:
    src = np.ones(nbytes // 4, np.float32)
    dst = np.empty_like(src)
    best = min(_timed(lambda: np.copyto(dst, src)) for _ in range(repeat))
    return 2 * nbytes / best / 1e9  # read + write


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def bench_one(strategy, K, n, n_seqs, threads, repeat) -> tuple[float, int]:
    backend = gg.cpu_backend(threads)
    mem = RecurrentMemory(backend, 1, D_CONV, CHANNELS, n_seqs, K - 1, "f32")
    ctx = gg.Context(n_tensors=64)
    conv_input = ctx.new_tensor_3d("f32", D_CONV - 1 + n, CHANNELS, n_seqs, name="conv_input").set_input()
    inp = GraphInputs(s_copy=None)
    graph = gg.Graph(ctx, 256)
    build_conv_write(ctx, graph, inp, mem, conv_input, 0, 0, strategy)
    backend.alloc_tensors(ctx)
    conv_input.set(np.random.default_rng(0).standard_normal(conv_input.nelements).astype(np.float32))
    if inp.s_slot_rev is not None:
        inp.s_slot_rev.view()[...] = np.arange(inp.s_slot_rev.ne[0] - 1, -1, -1, dtype=np.int32)
    for _ in range(3):
        backend.compute(graph)
    times = [_timed(lambda: lib.ggml_backend_graph_compute(backend.ptr, graph.ptr)) for _ in range(repeat)]
    windows = K if strategy == "copies" else windows_written(n, K)
    moved = 2 * windows * (D_CONV - 1) * CHANNELS * n_seqs * 4  # each window read once and written once
    return statistics.median(times), moved


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--quick", action="store_true", help="K=4, 4 tokens, 8 sequences only")
    args = parser.parse_args()
    bw = memcpy_gbps()
    print(f"# cores: {os.cpu_count()}, memcpy (np.copyto, 256 MiB, read+write): {bw:.1f} GB/s")
    print(f"# d_conv={D_CONV}, channels={CHANNELS}, F32 cache; median of {args.repeat} graph computes")
    print()
    head = "| K | tokens | seqs | threads | " + " | ".join(f"{s} us (x copies, GB/s)" for s in STRATEGIES) + " |"
    print(head)
    print("|" + "---|" * (4 + len(STRATEGIES)))
    shapes = [(4, 4, 8)] if args.quick else [(K, n, s) for K in (2, 4, 8) for n in (1, 4, 8) for s in (8, 32)]
    for K, n, n_seqs in shapes:
        for threads in (1, 2):
            res = {s: bench_one(s, K, n, n_seqs, threads, args.repeat) for s in STRATEGIES}
            base = res["copies"][0]
            cells = [f"{t * 1e6:.0f} ({t / base:.2f}x, {moved / t / 1e9:.1f})" for t, moved in res.values()]
            print(f"| {K} | {n} | {n_seqs} | {threads} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
