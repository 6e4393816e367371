"""Cases of soft_max, masks and rotary position embedding."""

from __future__ import annotations

from pyggml.testing import oracles
from pyggml.testing.cases import (
    integers,
    op_case,
    uniform,
)

op_case("soft_max/f32", {"a": ("f32", (2, 3, 16), uniform(-4, 4))}, lambda c, x: c.soft_max(x.a),
        lambda x: oracles.soft_max(x.a))
op_case("soft_max_ext/f32/mask_f32", {"a": ("f32", (2, 3, 16)), "m": ("f32", (3, 16), uniform(-2, 0))},
        lambda c, x: c.soft_max_ext(x.a, x.m, 0.5), lambda x: oracles.soft_max_ext(x.a, x.m, 0.5))
op_case("soft_max_ext/f32/mask_f16_broadcast", {"a": ("f32", (2, 4, 3, 16)), "m": ("f16", (1, 2, 5, 16), uniform(-2, 0))},
        lambda c, x: c.soft_max_ext(x.a, x.m, 2.0), lambda x: oracles.soft_max_ext(x.a, x.m, 2.0))
op_case("soft_max_ext/f32/no_mask", {"a": ("f32", (3, 16))}, lambda c, x: c.soft_max_ext(x.a, None, 3.0),
        lambda x: oracles.soft_max_ext(x.a, None, 3.0))
op_case("soft_max_ext/f32/alibi", {"a": ("f32", (6, 3, 16)), "m": ("f32", (3, 16), uniform(-2, 0))},
        lambda c, x: c.soft_max_ext(x.a, x.m, 1.0, 8.0), lambda x: oracles.soft_max_ext(x.a, x.m, 1.0, 8.0))
op_case("diag_mask_inf/f32", {"a": ("f32", (2, 5, 8))}, lambda c, x: c.diag_mask_inf(x.a, 0),
        lambda x: oracles.diag_mask_inf(x.a, 0))
op_case("diag_mask_inf/f32/n_past", {"a": ("f32", (2, 3, 5, 8))}, lambda c, x: c.diag_mask_inf(x.a, 2),
        lambda x: oracles.diag_mask_inf(x.a, 2))

# --- rope ------------------------------------------------------------------------------------------------------------
# a NumPy [batch, tokens, heads, head_dim]; pos one position per token
for _mode, _mname in ((0, "normal"), (2, "neox")):
    for _t in ("f32", "f16"):
        op_case(f"rope_ext/{_t}/{_mname}", {"a": (_t, (5, 2, 16)), "pos": ("i32", (5,), integers(0, 200))},
                lambda c, x, _m=_mode: c.rope_ext(x.a, x.pos, n_dims=16, mode=_m),
                lambda x, _m=_mode: oracles.rope_ext(x.a, x.pos, 16, _m))
    op_case(f"rope_ext/f32/{_mname}/partial", {"a": ("f32", (2, 4, 3, 16)), "pos": ("i32", (4,), integers(0, 200))},
            lambda c, x, _m=_mode: c.rope_ext(x.a, x.pos, n_dims=8, mode=_m, freq_base=500.0, freq_scale=0.5,
                                              attn_factor=1.5),
            lambda x, _m=_mode: oracles.rope_ext(x.a, x.pos, 8, _m, freq_base=500.0, freq_scale=0.5, attn_factor=1.5))
    op_case(f"rope_ext/f32/{_mname}/freq_factors",
            {"a": ("f32", (3, 2, 12)), "pos": ("i32", (3,), integers(0, 50)), "ff": ("f32", (6,), uniform(0.5, 4.0))},
            lambda c, x, _m=_mode: c.rope_ext(x.a, x.pos, x.ff, n_dims=12, mode=_m),
            lambda x, _m=_mode: oracles.rope_ext(x.a, x.pos, 12, _m, freq_factors=x.ff))



# ====================================================================================================================
# more of soft_max, masks and rope; flash attention; SAM's and DeepSeek's ops
# ====================================================================================================================
import numpy as np


def _causal(lo=-2.0, hi=0.0):
    """A mask [.., n_q, n_kv]: -inf above the diagonal shifted so every row keeps >= 1 finite entry."""
    def gen(rng, shape):
        m = rng.uniform(lo, hi, size=shape).astype(np.float32)
        n_q, n_kv = shape[-2], shape[-1]
        shift = n_kv - n_q
        i, j = np.meshgrid(np.arange(n_q), np.arange(n_kv), indexing="ij")
        m[..., j > i + max(shift, 0)] = -np.inf
        return m
    return gen


# --- soft_max_ext, diag_mask_inf: odd sizes, broadcast masks, ALiBi with odd head counts -----------------------------
for _mt in ("f32", "f16"):
    op_case(f"soft_max_ext/f32/odd/mask_{_mt}", {"a": ("f32", (5, 7, 13)), "m": (_mt, (7, 13), uniform(-3, 0))},
            lambda c, x: c.soft_max_ext(x.a, x.m, 0.3), lambda x: oracles.soft_max_ext(x.a, x.m, 0.3))
    op_case(f"soft_max_ext/f32/mask_{_mt}_longer", {"a": ("f32", (3, 5, 11)), "m": (_mt, (9, 11), uniform(-3, 0))},
            lambda c, x: c.soft_max_ext(x.a, x.m, 1.0), lambda x: oracles.soft_max_ext(x.a, x.m, 1.0))
    op_case(f"soft_max_ext/f32/mask_{_mt}_broadcast23", {"a": ("f32", (2, 6, 3, 13)), "m": (_mt, (1, 3, 3, 13), uniform(-3, 0))},
            lambda c, x: c.soft_max_ext(x.a, x.m, 0.7), lambda x: oracles.soft_max_ext(x.a, x.m, 0.7))
    op_case(f"soft_max_ext/f32/causal_{_mt}", {"a": ("f32", (3, 7, 7)), "m": (_mt, (7, 7), _causal())},
            lambda c, x: c.soft_max_ext(x.a, x.m, 0.5), lambda x: oracles.soft_max_ext(x.a, x.m, 0.5))
    for _h, _bias in ((5, 8.0), (7, 4.0), (3, 1.5)):
        op_case(f"soft_max_ext/f32/alibi_{_h}heads_{_mt}", {"a": ("f32", (_h, 3, 11)), "m": (_mt, (3, 11), uniform(-2, 0))},
                lambda c, x, _b=_bias: c.soft_max_ext(x.a, x.m, 0.5, _b),
                lambda x, _b=_bias: oracles.soft_max_ext(x.a, x.m, 0.5, _b))
for _s in (0.125, 2.5):
    op_case(f"soft_max_ext/f32/no_mask/scale_{_s}", {"a": ("f32", (2, 7, 13))}, lambda c, x, _s=_s: c.soft_max_ext(x.a, None, _s),
            lambda x, _s=_s: oracles.soft_max_ext(x.a, None, _s))
op_case("soft_max/f32/odd", {"a": ("f32", (5, 13), uniform(-4, 4))}, lambda c, x: c.soft_max(x.a), lambda x: oracles.soft_max(x.a))
op_case("soft_max/f32/row", {"a": ("f32", (37,), uniform(-4, 4))}, lambda c, x: c.soft_max(x.a), lambda x: oracles.soft_max(x.a))
for _np in (0, 1, 3, 12):
    op_case(f"diag_mask_inf/f32/odd/n_past_{_np}", {"a": ("f32", (3, 7, 11))}, lambda c, x, _np=_np: c.diag_mask_inf(x.a, _np),
            lambda x, _np=_np: oracles.diag_mask_inf(x.a, _np))
op_case("diag_mask_inf/f32/4d", {"a": ("f32", (2, 3, 5, 5))}, lambda c, x: c.diag_mask_inf(x.a, 1),
        lambda x: oracles.diag_mask_inf(x.a, 1))
op_case("diag_mask_inf/f32/then_soft_max", {"a": ("f32", (3, 7, 9))},
        lambda c, x: c.soft_max(c.diag_mask_inf(x.a, 2)), lambda x: oracles.soft_max(oracles.diag_mask_inf(x.a, 2)))

# --- rope_ext: odd token and head counts, strided input, YaRN ------------------------------------------------------------
for _mode, _mname in ((0, "normal"), (2, "neox")):
    for _t in ("f32", "f16"):
        op_case(f"rope_ext/{_t}/{_mname}/odd", {"a": (_t, (7, 5, 10)), "pos": ("i32", (7,), integers(0, 500))},
                lambda c, x, _m=_mode: c.rope_ext(x.a, x.pos, n_dims=10, mode=_m),
                lambda x, _m=_mode: oracles.rope_ext(x.a, x.pos, 10, _m))
        op_case(f"rope_ext/{_t}/{_mname}/odd_partial", {"a": (_t, (3, 5, 7, 14)), "pos": ("i32", (5,), integers(0, 500))},
                lambda c, x, _m=_mode: c.rope_ext(x.a, x.pos, n_dims=6, mode=_m, freq_base=1000.0),
                lambda x, _m=_mode: oracles.rope_ext(x.a, x.pos, 6, _m, freq_base=1000.0))
    # a permuted view (heads and tokens swapped in memory): packed rows, strided the rest
    op_case(f"rope_ext/f32/{_mname}/permuted", {"a": ("f32", (3, 5, 8)), "pos": ("i32", (5,), integers(0, 100))},
            lambda c, x, _m=_mode: c.rope_ext(c.permute(x.a, 0, 2, 1, 3), x.pos, n_dims=8, mode=_m),
            lambda x, _m=_mode: oracles.rope_ext(x.a.transpose(1, 0, 2), x.pos, 8, _m))
    for _ef, _fs in ((1.0, 0.25), (0.5, 0.5)):
        op_case(f"rope_ext/f32/{_mname}/yarn_{_ef}", {"a": ("f32", (5, 3, 16)), "pos": ("i32", (5,), integers(0, 300))},
                lambda c, x, _m=_mode, _ef=_ef, _fs=_fs: c.rope_ext(x.a, x.pos, n_dims=16, mode=_m, n_ctx_orig=64,
                                                                    freq_scale=_fs, ext_factor=_ef),
                lambda x, _m=_mode, _ef=_ef, _fs=_fs: oracles.rope_ext(x.a, x.pos, 16, _m, freq_scale=_fs, ext_factor=_ef,
                                                                       n_ctx_orig=64))

# --- rope_multi: MROPE, IMROPE, VISION -------------------------------------------------------------------------------------
for _mode, _mname, _secs, _nd, _ne0 in ((8, "mrope", (2, 3, 3, 0), 16, 16), (8, "mrope_partial", (2, 1, 1, 0), 8, 12),
                                         (8, "mrope_e", (1, 2, 2, 3), 16, 16), (40, "imrope", (3, 3, 2, 0), 16, 16),
                                         (40, "imrope_partial", (2, 1, 1, 0), 8, 10), (24, "vision", (2, 2, 0, 0), 8, 16),
                                         (24, "vision_3", (3, 1, 0, 0), 6, 12)):
    for _t in ("f32", "f16"):
        op_case(f"rope_multi/{_t}/{_mname}", {"a": (_t, (5, 3, _ne0)), "pos": ("i32", (20,), integers(0, 100))},
                lambda c, x, _m=_mode, _s=_secs, _nd=_nd: c.rope_multi(x.a, x.pos, None, _nd, _s, _m),
                lambda x, _m=_mode, _s=_secs, _nd=_nd: oracles.rope_multi(x.a, x.pos, None, _nd, _s, _m))
    op_case(f"rope_multi/f32/{_mname}/freq_factors",
            {"a": ("f32", (2, 5, 3, _ne0)), "pos": ("i32", (20,), integers(0, 100)), "ff": ("f32", (_ne0 // 2,), uniform(0.5, 3))},
            lambda c, x, _m=_mode, _s=_secs, _nd=_nd: c.rope_multi(x.a, x.pos, x.ff, _nd, _s, _m, freq_base=500.0,
                                                                   attn_factor=0.75),
            lambda x, _m=_mode, _s=_secs, _nd=_nd: oracles.rope_multi(x.a, x.pos, x.ff, _nd, _s, _m, freq_base=500.0,
                                                                      attn_factor=0.75))
op_case("rope_multi/f32/mrope/yarn", {"a": ("f32", (7, 3, 16)), "pos": ("i32", (28,), integers(0, 300))},
        lambda c, x: c.rope_multi(x.a, x.pos, None, 16, (4, 2, 2, 0), 8, 32, 10000.0, 0.5, 1.0),
        lambda x: oracles.rope_multi(x.a, x.pos, None, 16, (4, 2, 2, 0), 8, 32, 10000.0, 0.5, 1.0))

# --- flash_attn_ext ---------------------------------------------------------------------------------------------------------
# q [ne3, H, n_q, D] F32, k/v [ne3, Hkv, n_kv, D], mask F16 [.., >= n_q, >= n_kv]. With F16 k the CPU converts q to
# F16 for the dot products, with F16 v it accumulates softmax(qk)·v in F16 (3e-7 seen, within NMSE_F16). Vulkan's
# shaders do both in F16 whatever k and v are (4-6e-7 on lavapipe): NMSE_FA_F32 for all-F32 inputs.
NMSE_FA_F32 = 1e-6
NMSE_FA_Q8 = 5e-4  # quantized k: q is quantized to the dot type (Q8_0) first, as in mul_mat


def _fa_inputs(kv, n3=1, h=4, hkv=2, hv=None, n_q=7, n_kv=13, d=16, dv=16, mask=(7, 13)):
    x = {"q": ("f32", (n3, h, n_q, d)), "k": (kv, (n3, hkv, n_kv, d)), "v": (kv, (n3, hv or hkv, n_kv, dv))}
    if mask is not None:
        x["m"] = ("f16", mask, uniform(-2, 0)) if len(mask) > 2 or mask[0] != n_q else ("f16", mask, _causal())
    return x


def _fa(scale=1.0, max_bias=0.0, softcap=0.0, sinks=False, prec=None, view=None):
    def build(c, x):
        q = view(c, x.q) if view else x.q
        r = c.flash_attn_ext(q, x.k, x.v, getattr(x, "m", None), scale, max_bias, softcap)
        if sinks:
            c.flash_attn_ext_add_sinks(r, x.s)
        if prec is not None:
            c.flash_attn_ext_set_prec(r, prec)
        return r

    def oracle(x):
        q = np.swapaxes(x.q, -2, -3) if view else x.q
        return oracles.flash_attn_ext(q, x.k, x.v, getattr(x, "m", None), scale, max_bias, softcap,
                                      x.s if sinks else None)
    return build, oracle


for _kv, _bound in (("f32", NMSE_FA_F32), ("f16", None), ("bf16", None), ("q8_0", NMSE_FA_Q8), ("q4_0", NMSE_FA_Q8)):
    _d = 32 if _kv.startswith("q") else 16
    op_case(f"flash_attn_ext/{_kv}/causal", _fa_inputs(_kv, d=_d, dv=_d), *_fa(0.25), nmse=_bound)
    op_case(f"flash_attn_ext/{_kv}/no_mask", _fa_inputs(_kv, d=_d, dv=_d, mask=None), *_fa(0.25), nmse=_bound)
    op_case(f"flash_attn_ext/{_kv}/gqa_odd", _fa_inputs(_kv, h=6, hkv=3, n_q=5, n_kv=11, d=_d, dv=_d, mask=(1, 3, 7, 11)),
            *_fa(0.2), nmse=_bound)
    op_case(f"flash_attn_ext/{_kv}/batch_alibi", _fa_inputs(_kv, n3=2, h=5, hkv=5, n_q=3, n_kv=9, d=_d, dv=_d, mask=(1, 1, 3, 9)),
            *_fa(0.3, max_bias=8.0), nmse=_bound)
    op_case(f"flash_attn_ext/{_kv}/softcap", _fa_inputs(_kv, h=3, hkv=1, n_q=5, n_kv=7, d=_d, dv=_d, mask=(5, 7)),
            *_fa(1.0, softcap=2.0), nmse=_bound)
    op_case(f"flash_attn_ext/{_kv}/sinks", {**_fa_inputs(_kv, h=4, hkv=2, d=_d, dv=_d), "s": ("f32", (4,), uniform(-1, 2))},
            *_fa(0.25, sinks=True), nmse=_bound)
for _kv, _bound in (("f32", NMSE_FA_F32), ("f16", None)):
    op_case(f"flash_attn_ext/{_kv}/dv_8", _fa_inputs(_kv, h=2, hkv=2, d=16, dv=8, mask=(7, 13)), *_fa(0.25), nmse=_bound)
    op_case(f"flash_attn_ext/{_kv}/d_13", _fa_inputs(_kv, h=3, hkv=1, n_q=5, n_kv=7, d=13, dv=13, mask=(5, 7)),
            *_fa(0.3), nmse=_bound)
    op_case(f"flash_attn_ext/{_kv}/mask_heads", _fa_inputs(_kv, n3=2, h=4, hkv=2, n_q=3, n_kv=9, mask=(2, 4, 3, 9)),
            *_fa(0.5), nmse=_bound)
    op_case(f"flash_attn_ext/{_kv}/mask_padded", _fa_inputs(_kv, h=2, hkv=1, n_q=5, n_kv=11, mask=(8, 11)),
            *_fa(0.5), nmse=_bound)
    # 64 query rows: the CPU's tiled path
    op_case(f"flash_attn_ext/{_kv}/tiled", _fa_inputs(_kv, h=2, hkv=1, n_q=64, n_kv=19, d=16, dv=16, mask=(64, 19)),
            *_fa(0.25), nmse=_bound)
    # q as llama builds it: [D, H, n_q] permuted to [D, n_q, H]
    op_case(f"flash_attn_ext/{_kv}/q_permuted", {**_fa_inputs(_kv, h=4, hkv=2), "q": ("f32", (1, 7, 4, 16))},
            *_fa(0.25, view=lambda c, q: c.permute(q, 0, 2, 1, 3)), nmse=_bound)
    op_case(f"flash_attn_ext_set_prec/{_kv}/f32", _fa_inputs(_kv), *_fa(0.25, prec=10), nmse=_bound)
    op_case(f"flash_attn_ext_add_sinks/{_kv}/gqa",
            {**_fa_inputs(_kv, h=6, hkv=2, n_q=3, n_kv=9, mask=(3, 9)), "s": ("f32", (6,), uniform(-2, 3))},
            *_fa(0.4, sinks=True), nmse=_bound)

# --- SAM: windows and relative positions ----------------------------------------------------------------------------------
for _shape, _w in (((7, 5, 3), 3), ((13, 11, 2), 4), ((5, 7, 3), 8), ((4, 6, 5), 2), ((3, 5, 2), 1)):
    op_case(f"win_part/f32/{'x'.join(map(str, _shape))}_w{_w}", {"a": ("f32", _shape)},
            lambda c, x, _w=_w: c.win_part(x.a, _w), lambda x, _w=_w: oracles.win_part(x.a, _w), exact=True)
    _h0, _w0 = _shape[0], _shape[1]
    _n = (-(-_h0 // _w)) * (-(-_w0 // _w))
    op_case(f"win_unpart/f32/{_w0}x{_h0}_w{_w}", {"a": ("f32", (_n, _w, _w, _shape[2]))},
            lambda c, x, _w=_w, _w0=_w0, _h0=_h0: c.win_unpart(x.a, _w0, _h0, _w),
            lambda x, _w=_w, _w0=_w0, _h0=_h0: oracles.win_unpart(x.a, _w0, _h0, _w), exact=True)
op_case("win_unpart/f32/roundtrip", {"a": ("f32", (7, 9, 5))},
        lambda c, x: c.win_unpart(c.win_part(x.a, 4), 9, 7, 4), lambda x: x.a, exact=True)
for _kh, _c in ((3, 5), (5, 13), (7, 4), (1, 3)):
    op_case(f"get_rel_pos/f16/kh{_kh}_c{_c}", {"a": ("f16", (2 * _kh - 1, _c))},
            lambda c, x, _kh=_kh: c.get_rel_pos(x.a, _kh, _kh), lambda x, _kh=_kh: oracles.get_rel_pos(x.a, _kh, _kh),
            exact=True)
for _np_, _h2, _h1, _w in ((2, 3, 3, 3), (1, 2, 5, 3), (3, 1, 5, 5), (1, 1, 1, 4)):
    op_case(f"add_rel_pos/f32/{_np_}x{_h2}x{_h1}x{_w}",
            {"a": ("f32", (_np_, _h2 * _h1, _w * _w)), "pw": ("f32", (_np_, _h2, _h1, _w)), "ph": ("f32", (_np_, _h2, _h1, _w))},
            lambda c, x: c.add_rel_pos(x.a, x.pw, x.ph), lambda x: oracles.add_rel_pos(x.a, x.pw, x.ph))
# --- DeepSeek: lightning indexer, hyper-connections -----------------------------------------------------------------------
for _kt, _e, _bound in (("f32", 16, None), ("f16", 16, None), ("bf16", 16, None), ("q8_0", 32, 1e-6)):
    op_case(f"lightning_indexer/{_kt}", {"q": ("f32", (5, 3, _e)), "k": (_kt, (7, 1, _e)), "w": ("f32", (5, 3)),
                                         "m": ("f16", (5, 7), uniform(-1, 0))},
            lambda c, x: c.lightning_indexer(x.q, x.k, x.w, x.m), lambda x: oracles.lightning_indexer(x.q, x.k, x.w, x.m),
            nmse=_bound)
op_case("lightning_indexer/f32/streams", {"q": ("f32", (2, 3, 5, 13)), "k": ("f32", (2, 11, 1, 13)), "w": ("f32", (2, 1, 3, 5)),
                                          "m": ("f16", (1, 1, 3, 11), uniform(-1, 0))},
        lambda c, x: c.lightning_indexer(x.q, x.k, x.w, x.m), lambda x: oracles.lightning_indexer(x.q, x.k, x.w, x.m))
op_case("lightning_indexer/f32/causal", {"q": ("f32", (7, 2, 8)), "k": ("f32", (7, 1, 8)), "w": ("f32", (7, 2)),
                                         "m": ("f16", (7, 7), _causal())},
        lambda c, x: c.lightning_indexer(x.q, x.k, x.w, x.m), lambda x: oracles.lightning_indexer(x.q, x.k, x.w, x.m))
op_case("lightning_indexer/f32/q_permuted", {"q": ("f32", (3, 5, 16)), "k": ("f32", (9, 1, 16)), "w": ("f32", (5, 3)),
                                             "m": ("f16", (5, 9), uniform(-1, 0))},
        lambda c, x: c.lightning_indexer(c.permute(x.q, 0, 2, 1, 3), x.k, x.w, x.m),
        lambda x: oracles.lightning_indexer(x.q.transpose(1, 0, 2), x.k, x.w, x.m))
for _tokens, _it, _eps in ((5, 1, 1e-6), (7, 3, 1e-6), (3, 20, 1e-3), (1, 2, 0.0)):
    op_case(f"dsv4_hc_comb/f32/t{_tokens}_iter{_it}", {"mx": ("f32", (_tokens, 24)), "sc": ("f32", (3,), uniform(0.5, 2)), "b": ("f32", (24,))},
            lambda c, x, _it=_it, _eps=_eps: c.dsv4_hc_comb(x.mx, x.sc, x.b, _eps, _it),
            lambda x, _it=_it, _eps=_eps: oracles.dsv4_hc_comb(x.mx, x.sc, x.b, _eps, _it))
op_case("dsv4_hc_comb/f32/mixes_transposed", {"mx": ("f32", (24, 5)), "sc": ("f32", (4,), uniform(0.5, 2)), "b": ("f32", (24,))},
        lambda c, x: c.dsv4_hc_comb(c.transpose(x.mx), x.sc, x.b, 1e-6, 2),
        lambda x: oracles.dsv4_hc_comb(x.mx.T, x.sc, x.b, 1e-6, 2))
for _hc in (4, 3, 1):
    op_case(f"dsv4_hc_pre/f32/hc{_hc}", {"x": ("f32", (5, _hc, 13)), "w": ("f32", (5, _hc))},
            lambda c, x: c.dsv4_hc_pre(x.x, x.w), lambda x: oracles.dsv4_hc_pre(x.x, x.w))
    op_case(f"dsv4_hc_pre_gated/f32/hc{_hc}", {"x": ("f32", (5, _hc, 13)), "g": ("f32", (5, _hc, 13), uniform(-3, 3))},
            lambda c, x: c.dsv4_hc_pre_gated(x.x, x.g, 0.7), lambda x: oracles.dsv4_hc_pre_gated(x.x, x.g, 0.7))
    op_case(f"dsv4_hc_post/f32/hc{_hc}", {"x": ("f32", (5, 13)), "r": ("f32", (5, _hc, 13)), "p": ("f32", (5, _hc)),
                                         "cb": ("f32", (5, _hc, _hc))},
            lambda c, x: c.dsv4_hc_post(x.x, x.r, x.p, x.cb), lambda x: oracles.dsv4_hc_post(x.x, x.r, x.p, x.cb))
    op_case(f"dsv4_hc_post/f32/hc{_hc}/identity", {"x": ("f32", (5, 13)), "r": ("f32", (5, _hc, 13)), "p": ("f32", (5, _hc))},
            lambda c, x: c.dsv4_hc_post(x.x, x.r, x.p), lambda x: oracles.dsv4_hc_post(x.x, x.r, x.p))
# strided inputs: the kernels read every operand through its strides
op_case("dsv4_hc_pre/f32/x_permuted", {"x": ("f32", (4, 5, 13)), "w": ("f32", (4, 5))},
        lambda c, x: c.dsv4_hc_pre(c.permute(x.x, 0, 2, 1, 3), c.transpose(x.w)),
        lambda x: oracles.dsv4_hc_pre(x.x.transpose(1, 0, 2), x.w.T))
op_case("dsv4_hc_post/f32/comb_transposed", {"x": ("f32", (13, 5)), "r": ("f32", (5, 4, 13)), "p": ("f32", (5, 4)),
                                             "cb": ("f32", (5, 4, 4))},
        lambda c, x: c.dsv4_hc_post(c.transpose(x.x), x.r, x.p, c.permute(x.cb, 1, 0, 2, 3)),
        lambda x: oracles.dsv4_hc_post(x.x.T, x.r, x.p, x.cb.transpose(0, 2, 1)))
# the DeepSeek V4 block: combine, then mix the streams back
op_case("dsv4_hc_post/f32/with_comb_op", {"x": ("f32", (5, 13)), "r": ("f32", (5, 4, 13)), "p": ("f32", (5, 4)),
                                          "mx": ("f32", (5, 24)), "sc": ("f32", (3,), uniform(0.5, 2)), "b": ("f32", (24,))},
        lambda c, x: c.dsv4_hc_post(x.x, x.r, x.p, c.dsv4_hc_comb(x.mx, x.sc, x.b, 1e-6, 3)),
        lambda x: oracles.dsv4_hc_post(x.x, x.r, x.p, oracles.dsv4_hc_comb(x.mx, x.sc, x.b, 1e-6, 3)))
