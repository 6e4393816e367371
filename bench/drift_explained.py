"""Where a llama.cpp run departs from the CPU's, and why: the key figures of the drift study, from scratch.

    python bench/drift_explained.py --model gemma-3-270m-q4_k_m.gguf --prompt "some English text ..." [--vulkan]

Prints (1) the logits of meta:cpu,cpu and of cpu with repacked weights against cpu --no-repack, over every prompt
token plus 4 greedy steps (KLD as llama-perplexity --kl-divergence reports it); (2) the first node that differs
and the layer-by-layer growth (llama.compare); (3) meta's first differing node recomputed bitwise in a pyggml graph:
the whole dot product against two K halves added in F32 (the tensor split's partial sums and all-reduce);
(4) the CPU's own logits with noise of the same NMSE injected at that node; (5) with --vulkan, vulkan0 too
(lavapipe: its first run compiles shaders for many minutes).
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("GGML_VK_VISIBLE_DEVICES", "0,0")

import numpy as np

import pyggml as gg
from pyggml import gguf, llama, types
from pyggml.drift import compare_values, logit_stats
from pyggml.testing.engine.oracles import dot_rounding


def logits(path, backend, toks, gen=None, n_gen=4, extra=False, observe=None):
    """Every prompt token's logits, then n_gen greedy steps (following `gen` when given)."""
    m = llama.Model.for_backend(path, backend, use_extra_bufts=extra)
    ctx = llama.Context(m, n_ctx=256, n_batch=128, n_ubatch=128, observe=observe)
    ctx.decode(toks, logits="all")
    rows, chosen = [ctx.all_logits()], []
    for i in range(n_gen):
        t = gen[i] if gen is not None else int(np.argmax(rows[-1][-1]))
        chosen.append(t)
        ctx.decode([t], logits="last")
        rows.append(ctx.all_logits())
    ctx.close()
    m.close()
    return np.concatenate(rows), chosen


def fmt(a, b, nxt):
    s = logit_stats(a, b, nxt)
    k = s["kld"]
    rows = np.nonzero(np.abs(np.asarray(b) - np.asarray(a)).max(axis=1))[0]
    first = f"first output that differs: row {rows[0]}" if rows.size else "all outputs equal bitwise"
    return (
        f"{first}; KLD mean {k['mean']:.3g} median {k['median']:.3g} p99 {k['p99']:.3g} max {k['max']:.3g}; "
        f"same top-1 {100 * s['same_top1']:.1f}% of {s['outputs']}; NMSE {s['nmse']:.3g}"
    )


def first_nodes(path, backend, names, toks):
    """The first node of each name in the prompt's decode, copied as it is computed."""
    m = llama.Model.for_backend(path, backend, use_extra_bufts=False)
    out = {}

    def obs(t, ask):
        if t.name not in names or t.name in out:
            return False
        if not ask:
            out[t.name] = t.numpy().copy()
        return True

    ctx = llama.Context(m, n_ctx=256, n_batch=128, n_ubatch=128, observe=obs)
    ctx.decode(toks, logits="last")
    ctx.close()
    m.close()
    return out


class Noise:
    """An observer adding Gaussian noise of a given NMSE to every node of one name (in every step)."""

    def __init__(self, name, nmse, seed):
        self.name, self.nmse, self.rng = name, nmse, np.random.default_rng(seed)

    def __call__(self, t, ask):
        if t.name != self.name:
            return False
        if not ask:
            x = t.numpy().astype(np.float64)
            t.set(
                (
                    x + np.sqrt(self.nmse * np.mean(x * x, axis=-1, keepdims=True)) * self.rng.standard_normal(x.shape)
                ).astype(np.float32)
            )
        return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompt", required=True)
    ap.add_argument("--layer", type=int, default=0, help="the layer whose ffn_down product is recomputed")
    ap.add_argument("--seeds", type=int, default=3, help="noise injections")
    ap.add_argument("--vulkan", action="store_true", help="vulkan0 as well (slow on lavapipe)")
    a = ap.parse_args()
    voc = llama.Model.load(a.model, n_gpu_layers=0, devices=[], vocab_only=True)
    toks = llama.tokenize(voc, a.prompt)
    script = llama.Script.from_tokens(toks, generate=4)
    voc.close()
    print(f"{len(toks)} prompt tokens + 4 greedy steps; reference: cpu --no-repack")
    ref, gen = logits(a.model, "cpu", toks)
    nxt = np.array(toks[1:] + gen + [-1])
    print("\n(1) logits against the reference, every output")
    runs = [("cpu (repacked weights)", "cpu", True), ("meta:cpu,cpu", "meta:cpu,cpu", False)]
    runs += [("vulkan0", "vulkan0", False)] if a.vulkan else []
    for label, backend, extra in runs:
        print(f"  {label:24} {fmt(ref, logits(a.model, backend, toks, gen, extra=extra)[0], nxt)}")
    print("\n(2) node by node (llama.compare, logits of the last prompt token and the 4 steps)")
    for backend in ["meta:cpu,cpu"] + (["vulkan0"] if a.vulkan else []):
        c = llama.compare(a.model, None, script, backend_a="cpu", backend_b=backend, use_extra_bufts=False)
        first = next(d for d in c.nodes if not d.error and d.nmse > 0)
        fd = c.first_divergent
        print(
            f"  {backend}: first node that differs at all: {first.name} ({first.op}, {first.step}) NMSE "
            f"{first.nmse:.3g}, inputs {first.inputs} identical; tool's first_divergent: "
            f"{fd.name if fd else None} ({fd.op if fd else ''}) NMSE {fd.nmse if fd else float('nan'):.3g}"
        )
        print("  l_out NMSE by layer: " + " ".join(f"{x['layer']}:{x['nmse']:.1e}" for x in c.layers()))
    L = a.layer
    print(f"\n(3) meta's ffn_out-{L} recomputed (the split halves K of ffn_down, the all-reduce adds in F32)")
    names = (f"ffn_geglu-{L}", f"ffn_out-{L}")
    cpu, meta = first_nodes(a.model, "cpu", names, toks), first_nodes(a.model, "meta:cpu,cpu", names, toks)
    x = cpu[names[0]].reshape(len(toks), -1)
    info = gguf.read_info(a.model)
    ti = info.tensor_info[f"blk.{L}.ffn_down.weight"]
    raw = np.fromfile(a.model, np.uint8, count=ti.nbytes, offset=info.data_offset + ti.offset)
    K, N, T = ti.ne[0], ti.ne[1], ti.type.name.lower()
    rows, h = raw.reshape(N, -1), K // 2
    r, wctx = gg.Runner("cpu"), gg.Context()
    w, w0, w1 = (wctx.tensor(T, (N, k), n) for n, k in (("W", K), ("W0", h), ("W1", h)))
    r.backend.alloc_tensors(wctx)
    w.set_raw(rows.copy())
    w0.set_raw(np.ascontiguousarray(rows[:, : rows.shape[1] // 2]))
    w1.set_raw(np.ascontiguousarray(rows[:, rows.shape[1] // 2 :]))
    ctx = gg.Context()
    X, X0, X1 = (ctx.tensor("f32", (x.shape[0], k), n, input=True) for n, k in (("X", K), ("X0", h), ("X1", h)))
    full, split = ctx.mul_mat(w, X), ctx.add(ctx.mul_mat(w0, X0), ctx.mul_mat(w1, X1))
    g = gg.Graph(ctx).build_forward_expand(full)
    g.build_forward_expand(split)
    yf, ys = r.run(g, {X: x, X0: np.ascontiguousarray(x[:, :h]), X1: np.ascontiguousarray(x[:, h:])}, [full, split])
    c_out, m_out = cpu[names[1]].reshape(yf.shape), meta[names[1]].reshape(yf.shape)
    print(
        f"  ffn_down {ti.type.name} {N}x{K}; input identical on both: {np.array_equal(x.ravel(), meta[names[0]].ravel())}"
    )
    print(f"  cpu  ffn_out-{L} == mul_mat(W, x) bitwise: {np.array_equal(c_out, yf)}")
    print(
        f"  meta ffn_out-{L} == mul_mat(W[:, :{h}], x0) + mul_mat(W[:, {h}:], x1) bitwise: {np.array_equal(m_out, ys)}"
    )
    nm = compare_values(c_out, m_out)[0]
    print(f"  meta against cpu: NMSE {nm:.3g}, {int((c_out != m_out).sum())} of {c_out.size} values differ")
    print(f"\n(4) cpu with Gaussian noise of NMSE {nm:.3g} added to ffn_out-{L} (every step), against the reference")
    for seed in range(a.seeds):
        print(
            f"  seed {seed}: {fmt(ref, logits(a.model, 'cpu', toks, gen, observe=Noise(names[1], nm, seed))[0], nxt)}"
        )
    if a.vulkan:
        vulkan_product(a.model, toks)


def vulkan_product(path, toks):
    """Qcur-0 = attn_q (Q5_0) x attn_norm-0 on cpu and vulkan0 against NumPy models of each one's rounding."""
    info = gguf.read_info(path)
    ti = info.tensor_info["blk.0.attn_q.weight"]
    raw = np.fromfile(path, np.uint8, count=ti.nbytes, offset=info.data_offset + ti.offset)
    K, N = ti.ne[0], ti.ne[1]
    W = types.decode(ti.type.name, raw, (N, K)).astype(np.float64)
    x = first_nodes(path, "cpu", ("attn_norm-0",), toks)["attn_norm-0"].reshape(-1, K)
    h = lambda v: np.asarray(v).astype(np.float16).astype(np.float64)  # noqa: E731
    xf, wf, acc = h(x), h(W), np.zeros((x.shape[0], N))
    for k in range(0, K, 2):  # mul_mm.comp f16acc: acc = fma(a.x, b.x, fma(a.y, b.y, acc)), each op rounded to F16
        acc = h(acc + h(xf[:, k + 1 : k + 2] * wf[None, :, k + 1]))
        acc = h(acc + h(xf[:, k : k + 1] * wf[None, :, k]))
    models = {
        "exact": x.astype(np.float64) @ W.T,
        "x as Q8_0 (CPU)": dot_rounding.as_dot_type(x, "Q8_0") @ W.T,
        "F16 x, W, products, sum (Vulkan mul_mm)": acc,
    }
    print(f"\n(5) Qcur-0 = attn_q ({ti.type.name}) x attn_norm-0, NMSE against models of the rounding")
    for rows in (x.shape[0], 1):
        for dev in ("cpu", "vulkan0"):
            r, wctx = gg.Runner(dev), gg.Context()
            w = wctx.tensor(ti.type.name.lower(), (N, K), "W")
            r.backend.alloc_tensors(wctx)
            w.set_raw(raw)
            ctx = gg.Context()
            X = ctx.tensor("f32", (rows, K), "X", input=True)
            y = ctx.mul_mat(w, X)
            v = r.run(gg.Graph(ctx).build_forward_expand(y), {X: np.ascontiguousarray(x[-rows:])}, y)
            print(
                f"  {dev:8} {rows:3} columns: "
                + ", ".join(f"{n} {compare_values(m[-rows:], v)[0]:.3g}" for n, m in models.items())
            )


if __name__ == "__main__":
    main()
