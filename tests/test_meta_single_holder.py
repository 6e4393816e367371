"""Splits that put a whole tensor on one device ("single-holder": `Split(1, (0, 8))`), as llama.cpp's split
by KV heads does for a model with fewer KV heads than devices. Such a split has no meaningful axis: the
holder has every element, the other devices none. ggml derived an axis for it anyway, from the shapes it
went through (the product of a weight held whole along its outputs is split along dim 0; a reshape of a
1-d source keeps dim 0 where one of a 2-d source moves to dim 1), and refused the ops that work along that
axis (rms_norm: `GGML_ASSERT(src_ss[0].axis != GGML_BACKEND_SPLIT_AXIS_0)`, soft_max, sum_rows, argsort,
concat along it, flash attention's queries off their heads dim) and a mirrored operand that does not
broadcast along it. Patch 0028 lets the holder compute such a node alone;
PYGGML_SKIP_PATCHES=0028-meta-single-holder-computes-alone.patch shows the refusals (`Unsplittable`)."""

import numpy as np
import pytest

import pyggml as gg
from pyggml.meta import Split

E, D = 6, 8  # model width, K projection width (one KV head of 8)
RNG = np.random.default_rng(7)
WK = RNG.standard_normal((D, E)).astype(np.float32)  # [E, D]: x -> k
WO = RNG.standard_normal((E, D)).astype(np.float32)  # [D, E]: back to the width, reduced over D
WV = RNG.standard_normal((D, E)).astype(np.float32)  # [E, D]: x -> keys and values, mirrored
G = RNG.standard_normal(D).astype(np.float32)  # a norm's weight, mirrored

HOLDERS = {"device 0": (D, 0), "device 1": (0, D)}


def _run(runner_name, policy, build, n_tokens):
    runner = gg.Runner(runner_name, n_threads=1)
    runner.set_policy(policy)
    wctx = gg.Context()
    weights = (("wk", WK), ("wo", WO), ("wv", WV), ("g", G))
    w = {n: wctx.tensor("f32", a.shape, n) for n, a in weights}
    runner.backend.alloc_tensors(wctx)
    for n, a in weights:
        w[n].set(a)
    ctx = gg.Context()
    x = ctx.tensor("f32", (n_tokens, E), "x", input=True)
    pos = ctx.tensor("i32", (n_tokens,), "pos", input=True)
    outs = build(ctx, w, x, pos)
    graph = gg.Graph(ctx)
    for o in outs:
        graph.build_forward_expand(o)
    xs = np.linspace(-1, 1, n_tokens * E, dtype=np.float32).reshape(n_tokens, E)
    return runner.run(graph, {x: xs, pos: np.arange(3, 3 + n_tokens, dtype=np.int32)}, outs)


def _attention_k(ctx, w, x, pos):
    """llama.cpp's K path of a model with one KV head: project, one head per token, norm it, scale by the
    norm's weight, rotate; then back to the model's width (reduced over the devices) and the residual."""
    n_tokens = x.ne[1]
    k = ctx.reshape_3d(ctx.mul_mat(w["wk"], x), D, 1, n_tokens)  # 1 token: the split stays on dim 0
    k = ctx.rope_ext(ctx.mul(ctx.rms_norm(k, 1e-6), w["g"]), pos)
    out = ctx.add(ctx.mul_mat(w["wo"], ctx.reshape_2d(k, D, n_tokens)), x)
    return [k, out]


def _flash_attention(ctx, w, x, pos):
    """The queries of the one head held whole by one device, keys and values mirrored: flash attention
    wants its queries split by heads (dim 2); with one token they are split along dim 0."""
    n_tokens = x.ne[1]
    q = ctx.rope_ext(ctx.reshape_3d(ctx.mul_mat(w["wk"], x), D, 1, n_tokens), pos)
    q = ctx.permute(q, 0, 2, 1, 3)  # [D, n_tokens, 1]
    kv = ctx.reshape_3d(ctx.mul_mat(w["wv"], x), D, n_tokens, 1)  # [D, n_kv, 1]
    o = ctx.flash_attn_ext(q, kv, kv, scale=D**-0.5)  # [D, 1, n_tokens]
    return [o, ctx.add(ctx.mul_mat(w["wo"], ctx.reshape_2d(o, D, n_tokens)), x)]


def _ops_along_the_axis(ctx, w, x, pos):
    """The product itself (split along dim 0) through ops that work along dim 0."""
    y = ctx.mul_mat(w["wk"], x)  # [D, n_tokens]
    return [
        ctx.rms_norm(y, 1e-6),
        ctx.soft_max(y),
        ctx.sum_rows(y),
        ctx.argsort(y),
        ctx.concat(y, y, 0),
        ctx.mul(y, w["g"]),  # a mirrored operand that does not broadcast along dim 0
        ctx.add(ctx.mul_mat(w["wo"], ctx.soft_max(y)), x),
        ctx.rope_ext(ctx.reshape_3d(y, D, 1, x.ne[1]), pos),
    ]


@pytest.mark.parametrize("n_tokens", [1, 3])
@pytest.mark.parametrize("holder", HOLDERS)
@pytest.mark.parametrize("build", [_attention_k, _flash_attention, _ops_along_the_axis])
def test_a_tensor_held_whole_by_one_device_runs_every_op_as_the_single_device(build, holder, n_tokens):
    policy = [("wk", Split(1, HOLDERS[holder])), ("wo", Split(0, HOLDERS[holder]))]
    want = _run("cpu", None, build, n_tokens)
    got = _run("meta:cpu,cpu", policy, build, n_tokens)
    for i, (g, w) in enumerate(zip(got, want)):
        # a meta runner reads a one-token result with its leading 1 dropped ((8,) for (1, 8)), split or not
        np.testing.assert_allclose(g.reshape(w.shape), w, rtol=1e-5, atol=1e-6, err_msg=f"output {i}")


def _nan_everywhere(ctx, w, x, pos):
    """_attention_k of NaN inputs: every value NaN."""
    return _attention_k(ctx, w, ctx.sqrt(ctx.scale(ctx.sqr(x), -1.0)), pos)


def test_an_empty_share_is_zeroed_whatever_its_memory_held():
    """Device 0 holds nothing of wk and wo, so it computes nothing of the output product's partial sum, and the
    meta backend zeroes its part before the reduction. It scaled that unset memory by 0 (a NaN stays NaN): in
    10 of 20 runs a NaN from memory went into every device's sum (ggml patch 0033, docs/findings.md 32)."""
    policy = [("wk", Split(1, HOLDERS["device 1"])), ("wo", Split(0, HOLDERS["device 1"]))]
    want = _run("cpu", None, _attention_k, 1)
    for _ in range(20):
        _run("meta:cpu,cpu", policy, _nan_everywhere, 1)  # its freed memory is likely the next runner's
        got = _run("meta:cpu,cpu", policy, _attention_k, 1)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g.reshape(w.shape), w, rtol=1e-5, atol=1e-6)


def test_a_split_between_devices_is_still_refused_along_the_dim_a_norm_works_on():
    """Only a split whose one device holds everything has no meaningful axis: halves are still refused."""

    def build(ctx, w, x, pos):
        return [ctx.rms_norm(ctx.mul_mat(w["wk"], x), 1e-6)]

    with pytest.raises(gg.Unsplittable, match="AXIS_0"):
        _run("meta:cpu,cpu", [("wk", Split(1, (4, 4)))], build, 1)
