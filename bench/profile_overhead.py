"""What `Runner.profile` costs: a profiled compute (the scheduler's eval callback asking for every node, so
ggml computes node by node) against a plain compute of the same graph, on each backend, for a chain of
small nodes and one of large ones. Prints a table (markdown) for bench/README.md.

    GGML_VK_VISIBLE_DEVICES=0,0 python bench/profile_overhead.py
"""

from __future__ import annotations

import os
import statistics

import numpy as np

import pyggml as gg
from pyggml.meta import Split
from pyggml.testing.check import available_backends

REPEATS, WARMUP = 15, 3


def mlp(wctx: gg.Context, n_layers: int, width: int):
    """x -> (mul_mat, gelu) x n_layers: 2 nodes per layer."""
    ws = [wctx.tensor("f32", (width, width), f"w{i}") for i in range(n_layers)]
    ctx = gg.Context()
    x = ctx.tensor("f32", (8, width), "x", input=True)
    h = x
    for i, w in enumerate(ws):
        h = ctx.gelu(ctx.mul_mat(w, h).set_name(f"mm{i}")).set_name(f"act{i}")
    return ws, x, gg.Graph(ctx).build_forward_expand(h)


def tensor_parallel(t: gg.Tensor, n_devices: int) -> Split | None:
    """Even layers by rows, odd ones by columns (so each product pair reduces once)."""
    if not t.name.startswith("w"):
        return None
    axis = 1 if int(t.name[1:]) % 2 == 0 else 0
    return Split.even(axis, t.ne[axis], n_devices)


def main() -> None:
    os.environ.setdefault("GGML_VK_VISIBLE_DEVICES", "0,0")
    have = available_backends()
    runners = [("cpu", 1), ("cpu", None), ("meta:cpu,cpu", 1), ("vulkan0", None), ("meta:vulkan0,vulkan1", None)]
    rng = np.random.default_rng(0)
    print(f"# cores: {os.cpu_count()}; median of {REPEATS} computes after {WARMUP} warm-up, each way")
    print("| runner | nodes | width | plain us | profiled us | sum of rows us | rows | overhead | added us per node |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, threads in runners:
        if name.split(":")[-1].split(",")[0] not in have:
            continue
        for n_layers, width in ((4, 64), (32, 64), (32, 512)):
            runner = gg.Runner(name, n_threads=threads)
            if runner.meta is not None:
                runner.set_policy(lambda t, r=runner: tensor_parallel(t, r.n_devices))
            wctx = gg.Context()
            ws, x, graph = mlp(wctx, n_layers, width)
            runner.backend.alloc_tensors(wctx)
            for w in ws:
                w.set(rng.standard_normal((width, width)).astype(np.float32) / width**0.5)
            prof = runner.profile(graph, {x: rng.standard_normal((8, width)).astype(np.float32)}, REPEATS, WARMUP)
            plain, wall = statistics.median(prof.plain_us), statistics.median(prof.wall_us)
            label = f"{name} ({threads} thread)" if threads else name
            print(
                f"| {label} | {graph.n_nodes} | {width} | {plain:.0f} | {wall:.0f} | {prof.total_us:.0f} | "
                f"{len(prof.rows)} | x{prof.overhead:.2f} | {(wall - plain) / graph.n_nodes:.1f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
