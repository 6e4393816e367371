"""What the checked op layer costs over the raw cffi call, on the op mix a model graph uses.

    python bench/checked_ops.py [--layers 2000] [--repeat 7]

One "layer" is 11 ops: mul_mat, add, mul, reshape_3d, rope_ext, permute, cont, view_2d,
soft_max_ext, get_rows, set_rows. The same layers are built twice in one run, side by side:
through `pyggml.lib` (the raw generated cffi functions, cdata in and out, nothing checked)
and through the checked layer (`ctx.mul_mat(...)`: guarded C call, ownership, Tensor
objects). Printed: microseconds per op, best of `repeat` runs, and the ratio.
"""

from __future__ import annotations

import argparse
import time

import pyggml as gg
from pyggml import ffi, lib

OPS_PER_LAYER = 11


def inputs(ctx: gg.Context) -> dict:
    return {
        "x": ctx.tensor("f32", (8, 64), "x"),
        "w": ctx.tensor("f32", (64, 64), "w"),
        "pos": ctx.tensor("i32", (8,), "pos"),
        "idx": ctx.tensor("i32", (4,), "idx"),
        "cache": ctx.tensor("f32", (32, 64), "cache"),
    }


def raw_layers(n: int) -> float:
    ctx = gg.Context(n_tensors=OPS_PER_LAYER * n + 16)
    t = {k: v.ptr for k, v in inputs(ctx).items()}
    c, x, w, pos, idx, cache = ctx.ptr, t["x"], t["w"], t["pos"], t["idx"], t["cache"]
    null = ffi.NULL
    start = time.perf_counter()
    for _ in range(n):
        h = lib.ggml_mul_mat(c, w, x)
        h = lib.ggml_add(c, h, x)
        h = lib.ggml_mul(c, h, x)
        r = lib.ggml_reshape_3d(c, h, 16, 4, 8)
        r = lib.ggml_rope_ext(c, r, pos, null, 16, 0, 0, 10000.0, 1.0, 0.0, 1.0, 32.0, 1.0)
        p = lib.ggml_permute(c, r, 0, 2, 1, 3)
        q = lib.ggml_cont(c, p)
        v = lib.ggml_view_2d(c, q, 16, 8, 64, 0)
        lib.ggml_soft_max_ext(c, v, null, 0.125, 0.0)
        g = lib.ggml_get_rows(c, x, idx)
        lib.ggml_set_rows(c, cache, g, idx)
    return time.perf_counter() - start


def checked_layers(n: int) -> float:
    ctx = gg.Context(n_tensors=OPS_PER_LAYER * n + 16)
    t = inputs(ctx)
    x, w, pos, idx, cache = t["x"], t["w"], t["pos"], t["idx"], t["cache"]
    start = time.perf_counter()
    for _ in range(n):
        h = ctx.mul_mat(w, x)
        h = ctx.add(h, x)
        h = ctx.mul(h, x)
        r = ctx.reshape_3d(h, 16, 4, 8)
        r = ctx.rope_ext(r, pos, None, 16, 0)
        p = ctx.permute(r, 0, 2, 1, 3)
        q = ctx.cont(p)
        v = ctx.view_2d(q, 16, 8, 64, 0)
        ctx.soft_max_ext(v, None, 0.125, 0.0)
        g = ctx.get_rows(x, idx)
        ctx.set_rows(cache, g, idx)
    return time.perf_counter() - start


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    best = {"raw": float("inf"), "checked": float("inf")}
    for _ in range(args.repeat):  # interleaved, so both see the same machine state
        best["raw"] = min(best["raw"], raw_layers(args.layers))
        best["checked"] = min(best["checked"], checked_layers(args.layers))
    per_op = {k: v / (args.layers * OPS_PER_LAYER) * 1e6 for k, v in best.items()}
    print(f"# {args.layers} layers x {OPS_PER_LAYER} ops, best of {args.repeat}")
    print("| layer | us per op | vs raw |")
    print("|---|---|---|")
    print(f"| raw cffi (`lib.ggml_*`) | {per_op['raw']:.3f} | 1.00x |")
    print(f"| checked (`ctx.*`) | {per_op['checked']:.3f} | {per_op['checked'] / per_op['raw']:.2f}x |")


if __name__ == "__main__":
    main()
