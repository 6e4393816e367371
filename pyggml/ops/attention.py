"""Attention's building blocks: soft_max, masks, rotary position embedding, flash attention, SAM's
windows and relative positions, DeepSeek's lightning indexer and hyper-connections."""

from __future__ import annotations

import math

from pyggml._args import integer
from pyggml._native import ffi, lib
from pyggml.ops._common import (
    UnaryWrapper,
    _new_tensor,
    _ARG_ERRORS,
    _NULL,
    _bad_arguments,
    _failed,
    _guarded,
    _make_unary,
    _result,
    _scalar,
)
from pyggml.tensor import Tensor

soft_max: UnaryWrapper = _make_unary("soft_max")
_soft_max_ext = _guarded("soft_max_ext")


def soft_max_ext(ctx, a, mask=None, scale: float = 1.0, max_bias: float = 0.0):
    if type(scale) is not float or type(max_bias) is not float:
        scale, max_bias = _scalar("soft_max_ext", "scale", scale), _scalar("soft_max_ext", "max_bias", max_bias)
    if not max_bias >= 0:
        raise ValueError(f"soft_max_ext: max_bias must be >= 0, got {max_bias}")
    if max_bias > 0 and mask is None:
        raise ValueError("soft_max_ext: max_bias > 0 (ALiBi) needs a mask")
    try:
        r = _soft_max_ext(ctx.ptr, a.ptr, _NULL if mask is None else mask.ptr, scale, max_bias)
    except _ARG_ERRORS as e:
        raise _bad_arguments("soft_max_ext", e, ctx, a=a, **({} if mask is None else {"mask": mask})) from None
    if not r:
        raise _failed("soft_max_ext")
    if a.ctx is not ctx:
        ctx.adopt(a)
    if mask is not None and mask.ctx is not ctx:
        ctx.adopt(mask)
    t = _new_tensor(Tensor)
    t.ptr, t.ctx = r, ctx
    return t


def diag_mask_inf(ctx, a, n_past: int):
    n_past = integer("diag_mask_inf: n_past", n_past)
    if n_past < 0:
        raise ValueError(f"diag_mask_inf: n_past must be >= 0, got {n_past}")
    try:
        r = _guarded("diag_mask_inf")(ctx.ptr, a.ptr, n_past)
    except _ARG_ERRORS as e:
        raise _bad_arguments("diag_mask_inf", e, ctx, a=a) from None
    return _result(ctx, r, "diag_mask_inf", a)


_rope_ext = _guarded("rope_ext")
_ROPE_MODES = (lib.GGML_ROPE_TYPE_NORMAL, lib.GGML_ROPE_TYPE_NEOX)


def rope_ext(ctx, a, pos, freq_factors=None, n_dims: int = 0, mode: int = 0, n_ctx_orig: int = 0,
             freq_base: float = 10000.0, freq_scale: float = 1.0, ext_factor: float = 0.0,
             attn_factor: float = 1.0, beta_fast: float = 32.0, beta_slow: float = 1.0):
    # multi-section modes read sections this wrapper cannot pass (ggml_rope_multi); the kernels
    # would read garbage, so only the two plain modes
    if mode not in _ROPE_MODES:
        raise ValueError(f"rope_ext: mode must be 0 (normal) or 2 (neox), got {mode} "
                         "(multi-section modes need ggml_rope_multi)")
    if type(n_dims) is not int:
        n_dims = integer("rope_ext: n_dims", n_dims)
    if not (0 < n_dims and n_dims % 2 == 0):  # ggml asserts n_dims <= ne[0] only in the kernels
        raise ValueError(f"rope_ext: n_dims ({n_dims}) must be even and positive")
    try:
        r = _rope_ext(ctx.ptr, a.ptr, pos.ptr, _NULL if freq_factors is None else freq_factors.ptr,
                      n_dims, mode, n_ctx_orig, freq_base, freq_scale, ext_factor, attn_factor, beta_fast, beta_slow)
    except _ARG_ERRORS as e:
        extra = {} if freq_factors is None else {"freq_factors": freq_factors}
        raise _bad_arguments("rope_ext", e, ctx, a=a, pos=pos, **extra) from None
    if not r:
        raise _failed("rope_ext")
    if a.ctx is not ctx:
        ctx.adopt(a)
    if pos.ctx is not ctx:
        ctx.adopt(pos)
    if freq_factors is not None and freq_factors.ctx is not ctx:
        ctx.adopt(freq_factors)
    t = _new_tensor(Tensor)
    t.ptr, t.ctx = r, ctx
    return t


def _finite(op: str, name: str, value) -> float:
    """A float scalar that must be finite: a NaN or infinity would poison every output."""
    v = _scalar(op, name, value)
    if not math.isfinite(v):
        raise ValueError(f"{op}: {name} must be finite, got {v}")
    return v


def _int_args(op: str, **values) -> list[int]:
    return [integer(f"{op}: {name}", v) for name, v in values.items()]


# --- rope with sections ------------------------------------------------------------------------------------
_rope_multi = _guarded("rope_multi")
_MROPE_MODES = (lib.GGML_ROPE_TYPE_MROPE, lib.GGML_ROPE_TYPE_VISION, lib.GGML_ROPE_TYPE_IMROPE)


def rope_multi(ctx, a: Tensor, pos: Tensor, freq_factors: Tensor | None = None, n_dims: int = 0,
               sections=(0, 0, 0, 0), mode: int = 8, n_ctx_orig: int = 0, freq_base: float = 10000.0,
               freq_scale: float = 1.0, ext_factor: float = 0.0, attn_factor: float = 1.0,
               beta_fast: float = 32.0, beta_slow: float = 1.0):
    """ggml_rope_multi: RoPE whose rotated pairs take their position from one of 4 position streams
    (pos I32 [4 * a.ne2]: t, h, w, e) by section; mode 8 (MROPE), 24 (VISION) or 40 (IMROPE)."""
    op = "rope_multi"
    n_dims, mode, n_ctx_orig = _int_args(op, n_dims=n_dims, mode=mode, n_ctx_orig=n_ctx_orig)
    # other modes (plain or with extra bits) fall to the kernels' "rope type not supported" abort
    if mode not in _MROPE_MODES:
        raise ValueError(f"{op}: mode must be 8 (MROPE), 24 (VISION) or 40 (IMROPE), got {mode} "
                         "(the plain modes are rope_ext's)")
    if not (0 < n_dims and n_dims % 2 == 0):
        raise ValueError(f"{op}: n_dims ({n_dims}) must be even and positive")
    try:
        secs = [integer(f"{op}: sections", s) for s in sections]
    except TypeError:
        raise TypeError(f"{op}: sections must be 4 integers, got {sections!r}") from None
    # the kernels take each rotated pair's section modulo their sum: negative sections or a zero sum
    # divide by zero or index outside them
    if len(secs) != 4 or min(secs) < 0 or sum(secs[:3]) == 0:
        raise ValueError(f"{op}: sections must be 4 non-negative integers, the first three not all 0, "
                         f"got {sections!r}")
    floats = [_scalar(op, n, v) for n, v in (("freq_base", freq_base), ("freq_scale", freq_scale),
                                             ("ext_factor", ext_factor), ("attn_factor", attn_factor),
                                             ("beta_fast", beta_fast), ("beta_slow", beta_slow))]
    try:
        r = _rope_multi(ctx.ptr, a.ptr, pos.ptr, _NULL if freq_factors is None else freq_factors.ptr,
                        n_dims, ffi.new("int[4]", secs), mode, n_ctx_orig, *floats)
    except _ARG_ERRORS as e:
        extra = {} if freq_factors is None else {"freq_factors": freq_factors}
        raise _bad_arguments(op, e, ctx, a=a, pos=pos, **extra) from None
    return _result(ctx, r, op, a, pos, *(() if freq_factors is None else (freq_factors,)))


# --- flash attention -----------------------------------------------------------------------------------------
_flash_attn_ext = _guarded("flash_attn_ext")
_PRECS = {int(getattr(lib, n)) for n in dir(lib) if n.startswith("GGML_PREC_")}


def flash_attn_ext(ctx, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, scale: float = 1.0,
                   max_bias: float = 0.0, logit_softcap: float = 0.0):
    """ggml_flash_attn_ext: softmax(scale*q.k + slope*mask) v per head (logit_softcap > 0: the scaled
    logits pass through softcap*tanh(x/softcap) first). q [D, n_q, n_head, ne3], k [D, n_kv, n_head_kv, ne3],
    v [Dv, n_kv, n_head_v, ne3] (k/v heads broadcast to q's), mask F16 [n_kv, >= n_q, ...]
    -> F32 [Dv, n_head, n_q, ne3] (permuted)."""
    op = "flash_attn_ext"
    scale, max_bias, logit_softcap = (_finite(op, "scale", scale), _finite(op, "max_bias", max_bias),
                                      _finite(op, "logit_softcap", logit_softcap))
    if max_bias < 0:
        raise ValueError(f"{op}: max_bias must be >= 0, got {max_bias}")
    try:
        pq, pk, pv = q.ptr, k.ptr, v.ptr
        pm = _NULL if mask is None else mask.ptr
        cp = ctx.ptr
    except _ARG_ERRORS as e:
        raise _bad_arguments(op, e, ctx, q=q, k=k, v=v, **({} if mask is None else {"mask": mask})) from None
    # ggml.c leaves these to the kernels, which read past v's rows or the mask's, or divide by
    # v's head count
    if pv.ne[1] != pk.ne[1]:
        raise ValueError(f"{op}: v must have k's {pk.ne[1]} kv rows (v.ne[1] = {pv.ne[1]})")
    if pq.ne[2] % pv.ne[2]:
        raise ValueError(f"{op}: v's heads ({pv.ne[2]}) must divide q's ({pq.ne[2]})")
    # ggml.h's mask is [n_kv, n_batch >= n_q, ...]: a shorter one is read past its end, a wider one
    # is read with a row stride of n_kv by the Vulkan shaders (the CPU uses its own stride)
    if mask is not None and (pm.ne[0] != pk.ne[1] or pm.ne[1] < pq.ne[1]):
        raise ValueError(f"{op}: the mask must be [n_kv = {pk.ne[1]}, >= n_q = {pq.ne[1]}, ...], "
                         f"got [{pm.ne[0]}, {pm.ne[1]}, ...]")
    r = _flash_attn_ext(cp, pq, pk, pv, pm, scale, max_bias, logit_softcap)
    return _result(ctx, r, op, q, k, v, *(() if mask is None else (mask,)))


def flash_attn_ext_add_sinks(ctx, a: Tensor, sinks: Tensor):
    """ggml_flash_attn_ext_add_sinks: one F32 logit per head (sinks [n_head]) joins every softmax
    denominator of the flash_attn_ext node a, with no value. Returns a."""
    op = "flash_attn_ext_add_sinks"
    try:
        failed = _guarded(op)(a.ptr, sinks.ptr)
    except _ARG_ERRORS as e:
        raise _bad_arguments(op, e, ctx, a=a, sinks=sinks) from None
    if failed:
        raise _failed(op)
    if sinks.ctx is not a.ctx:
        a.ctx.adopt(sinks)
    return a


def flash_attn_ext_set_prec(ctx, a: Tensor, prec: int):
    """ggml_flash_attn_ext_set_prec: the accumulation precision of the flash_attn_ext node a
    (a ggml_prec value: 0 default, 10 F32, ...). Returns a."""
    op = "flash_attn_ext_set_prec"
    prec = integer(f"{op}: prec", prec)
    if prec not in _PRECS:  # an enum value outside ggml_prec means nothing to any backend
        raise ValueError(f"{op}: prec must be one of {sorted(_PRECS)} (enum ggml_prec), got {prec}")
    try:
        failed = _guarded(op)(a.ptr, prec)
    except _ARG_ERRORS as e:
        raise _bad_arguments(op, e, ctx, a=a) from None
    if failed:
        raise _failed(op)
    return a


# --- SAM: windows and relative positions ----------------------------------------------------------------------
def win_part(ctx, a: Tensor, w: int):
    """ggml_win_part: a F32 [C, W, H] cut into w x w windows (zero padded) -> [C, w, w, n_windows],
    window index px + npx*py."""
    (w,) = _int_args("win_part", w=w)
    if w < 1:  # ggml.c divides by w
        raise ValueError(f"win_part: w must be >= 1, got {w}")
    try:
        r = _guarded("win_part")(ctx.ptr, a.ptr, w)
    except _ARG_ERRORS as e:
        raise _bad_arguments("win_part", e, ctx, a=a) from None
    return _result(ctx, r, "win_part", a)


def win_unpart(ctx, a: Tensor, w0: int, h0: int, w: int):
    """ggml_win_unpart: the inverse of win_part: windows a [C, w, w, n_windows] -> [C, w0, h0]."""
    op = "win_unpart"
    w0, h0, w = _int_args(op, w0=w0, h0=h0, w=w)
    if min(w0, h0, w) < 1:
        raise ValueError(f"{op}: w0, h0 and w must be >= 1, got {w0}, {h0}, {w}")
    # ggml.c does not check that a holds the windows; the kernel would read past its end
    if isinstance(a, Tensor):
        ne, need = a.ptr.ne, (-(-w0 // w)) * (-(-h0 // w))
        if ne[1] != w or ne[2] != w or ne[3] < need:
            raise ValueError(f"{op}: a must hold {need} windows of {w} x {w} ([C, {w}, {w}, >= {need}]), "
                             f"got ne {list(ne)}")
    try:
        r = _guarded(op)(ctx.ptr, a.ptr, w0, h0, w)
    except _ARG_ERRORS as e:
        raise _bad_arguments(op, e, ctx, a=a) from None
    return _result(ctx, r, op, a)


def get_rel_pos(ctx, a: Tensor, qh: int, kh: int):
    """ggml_get_rel_pos: a F16 [C, 2*kh - 1] -> F16 [C, kh, qh], out[:, j, i] = a[:, i - j + kh - 1]."""
    qh, kh = _int_args("get_rel_pos", qh=qh, kh=kh)
    try:
        r = _guarded("get_rel_pos")(ctx.ptr, a.ptr, qh, kh)
    except _ARG_ERRORS as e:
        raise _bad_arguments("get_rel_pos", e, ctx, a=a) from None
    return _result(ctx, r, "get_rel_pos", a)


def add_rel_pos(ctx, a: Tensor, pw: Tensor, ph: Tensor):
    """ggml_add_rel_pos: a F32 [W*W, W*H', np] (SAM's attention logits) plus the decomposed relative
    positions pw, ph F32 [W, W, H', np]: a viewed [np, H', W, W(h), W(w)] gets ph[..., h] + pw[..., w]."""
    try:
        r = _guarded("add_rel_pos")(ctx.ptr, a.ptr, pw.ptr, ph.ptr)
    except _ARG_ERRORS as e:
        raise _bad_arguments("add_rel_pos", e, ctx, a=a, pw=pw, ph=ph) from None
    return _result(ctx, r, "add_rel_pos", a, pw, ph)


# --- DeepSeek: lightning indexer, hyper-connections -----------------------------------------------------------
def lightning_indexer(ctx, q: Tensor, k: Tensor, weights: Tensor, mask: Tensor):
    """ggml_lightning_indexer: out[kv, t, 0, s] = sum_h relu(q[:, h, t, s] . k[:, 0, kv, s]) * weights[h, t, 0, s]
    + mask[kv, t, 0, s % mask.ne3]."""
    try:
        r = _guarded("lightning_indexer")(ctx.ptr, q.ptr, k.ptr, weights.ptr, mask.ptr)
    except _ARG_ERRORS as e:
        raise _bad_arguments("lightning_indexer", e, ctx, q=q, k=k, weights=weights, mask=mask) from None
    return _result(ctx, r, "lightning_indexer", q, k, weights, mask)


def dsv4_hc_comb(ctx, mixes: Tensor, scale: Tensor, base: Tensor, eps: float = 1e-6, n_iter: int = 1):
    """ggml_dsv4_hc_comb: the hyper-connection combination matrices [hc, hc, n_tokens] (hc = 4) from
    mixes [(2 + hc)*hc, n_tokens]: softmax over dst, + eps, then n_iter column/row normalisations."""
    op = "dsv4_hc_comb"
    eps = _finite(op, "eps", eps)
    if eps < 0:  # a negative eps can cancel a normalising sum to 0
        raise ValueError(f"{op}: eps must be >= 0, got {eps}")
    (n_iter,) = _int_args(op, n_iter=n_iter)
    try:
        r = _guarded(op)(ctx.ptr, mixes.ptr, scale.ptr, base.ptr, eps, n_iter)
    except _ARG_ERRORS as e:
        raise _bad_arguments(op, e, ctx, mixes=mixes, scale=scale, base=base) from None
    return _result(ctx, r, op, mixes, scale, base)


def dsv4_hc_pre(ctx, x: Tensor, weights: Tensor):
    """ggml_dsv4_hc_pre: x [n_embd, hc, n_tokens], weights [hc, n_tokens] -> [n_embd, n_tokens],
    out[i, t] = sum_h x[i, h, t] * weights[h, t]."""
    try:
        r = _guarded("dsv4_hc_pre")(ctx.ptr, x.ptr, weights.ptr)
    except _ARG_ERRORS as e:
        raise _bad_arguments("dsv4_hc_pre", e, ctx, x=x, weights=weights) from None
    return _result(ctx, r, "dsv4_hc_pre", x, weights)


def dsv4_hc_pre_gated(ctx, x: Tensor, gate: Tensor, scale: float = 1.0):
    """ggml_dsv4_hc_pre_gated: out[i, t] = scale * sum_h x[i, h, t] * sigmoid(gate[i, h, t])."""
    scale = _finite("dsv4_hc_pre_gated", "scale", scale)
    try:
        r = _guarded("dsv4_hc_pre_gated")(ctx.ptr, x.ptr, gate.ptr, scale)
    except _ARG_ERRORS as e:
        raise _bad_arguments("dsv4_hc_pre_gated", e, ctx, x=x, gate=gate) from None
    return _result(ctx, r, "dsv4_hc_pre_gated", x, gate)


def dsv4_hc_post(ctx, x: Tensor, residual: Tensor, post: Tensor, comb: Tensor | None = None):
    """ggml_dsv4_hc_post: out[i, d, t] = x[i, t] * post[d, t] + sum_s residual[i, s, t] * comb[d, s, t]
    (comb None: + residual[i, d, t])."""
    try:
        r = _guarded("dsv4_hc_post")(ctx.ptr, x.ptr, residual.ptr, post.ptr, _NULL if comb is None else comb.ptr)
    except _ARG_ERRORS as e:
        raise _bad_arguments("dsv4_hc_post", e, ctx, x=x, residual=residual, post=post,
                             **({} if comb is None else {"comb": comb})) from None
    return _result(ctx, r, "dsv4_hc_post", x, residual, post, *(() if comb is None else (comb,)))


# the family's op wrappers, listed so that type checkers see them (tests/test_types.py keeps it exact)
__all__ = [
    "add_rel_pos", "diag_mask_inf", "dsv4_hc_comb", "dsv4_hc_post", "dsv4_hc_pre",
    "dsv4_hc_pre_gated", "flash_attn_ext", "flash_attn_ext_add_sinks", "flash_attn_ext_set_prec",
    "get_rel_pos", "lightning_indexer", "rope_ext", "rope_multi", "soft_max", "soft_max_ext",
    "win_part", "win_unpart",
]
