"""Oracles of soft_max, masks and rotary position embedding."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from pyggml.ops.attention import Yarn
from pyggml.testing.engine.oracles._common import (
    _as4,
    _lead,
)


def soft_max_ext(a: ArrayLike, mask: ArrayLike | None = None, scale: float = 1.0, max_bias: float = 0.0) -> np.ndarray:
    """softmax over ne0 of a*scale + slope*mask; mask rows i1 map to a's rows i1 (mask.ne[1] >= a.ne[1]),
    its dims 2 and 3 broadcast (repeat) over a's. ALiBi slopes per head (a's dim 2) when max_bias > 0."""
    x4 = _as4(np.asarray(a, dtype=np.float64)) * scale
    if mask is not None:
        m4 = _as4(np.asarray(mask, dtype=np.float64))[:, :, : x4.shape[2], :]
        m4 = np.tile(m4, (x4.shape[0] // m4.shape[0], x4.shape[1] // m4.shape[1], 1, 1))
        if max_bias > 0:
            n_head = x4.shape[1]
            n_log2 = 1 << int(math.floor(math.log2(n_head)))
            m0 = 2.0 ** (-max_bias / n_log2)
            m1 = 2.0 ** (-(max_bias / 2.0) / n_log2)
            slopes = np.array([m0 ** (h + 1) if h < n_log2 else m1 ** (2 * (h - n_log2) + 1) for h in range(n_head)])
            m4 = m4 * slopes[None, :, None, None]
        x4 = x4 + m4
    with np.errstate(invalid="ignore"):
        x4 = x4 - x4.max(axis=-1, keepdims=True)
        e = np.exp(x4)
        out = e / e.sum(axis=-1, keepdims=True)
    return out.reshape(np.asarray(a).shape).astype(np.float32)


def soft_max(a: np.ndarray) -> np.ndarray:
    return soft_max_ext(a)


def diag_mask_inf(a: ArrayLike, n_past: int) -> np.ndarray:
    """Row i1, column i0 set to -inf where i0 > n_past + i1 (causal mask)."""
    x = np.array(a, dtype=np.float32)
    rows, cols = x.shape[-2] if x.ndim > 1 else 1, x.shape[-1]
    i1, i0 = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    m = i0 > n_past + i1
    x4 = _as4(x).copy()
    x4[..., m] = -np.inf
    return x4.reshape(x.shape)


def rope_ext(
    a: np.ndarray,
    pos: np.ndarray,
    freq_factors: ArrayLike | None = None,
    n_dims: int | None = None,
    mode: int = 0,
    *yarn: Any,
    **named: Any,
) -> np.ndarray:
    """RoPE of a NumPy [ne3, ne2 (tokens), ne1 (heads), ne0], pos[ne2], with the wrapper's arguments (YaRN's
    scalars after mode: Yarn's, positionally or by name). Pair k (k < n_dims/2) rotates by
    pos * freq_scale * base^(-2k/n_dims) / freq_factors[k] (YaRN-corrected when ext_factor != 0); mode 0
    (normal) pairs elements (2k, 2k+1), mode 2 (neox) pairs (k, k + n_dims/2). Elements past n_dims pass."""
    if mode not in (0, 2):
        raise ValueError(f"rope_ext oracle: mode {mode} not modelled")
    return _rope(a, pos, freq_factors, n_dims, (0, 0, 0, 0), mode, Yarn(*yarn, **named))


def _alibi_slopes(n_head, max_bias):
    """ALiBi: head h's mask slope (1 for every head when max_bias is 0)."""
    if max_bias <= 0:
        return np.ones(n_head)
    n_log2 = 1 << math.floor(math.log2(n_head))
    m0 = 2.0 ** (-max_bias / n_log2)
    m1 = 2.0 ** (-(max_bias / 2.0) / n_log2)
    return np.array([m0 ** (h + 1) if h < n_log2 else m1 ** (2 * (h - n_log2) + 1) for h in range(n_head)])


def flash_attn_ext(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    mask: ArrayLike | None = None,
    scale: float = 1.0,
    max_bias: float = 0.0,
    logit_softcap: float = 0.0,
    sinks: ArrayLike | None = None,
) -> np.ndarray:
    """softmax_kv(scale*q.k [softcap*tanh(./softcap)] + slope_h*mask) @ v per head. NumPy order: q [ne3, H, n_q, D],
    k [ne3, Hk, n_kv, D], v [ne3, Hv, n_kv, Dv] (head h reads k's head h // (H/Hk), v's h // (H/Hv)),
    mask [m3, m2, >= n_q, >= n_kv] repeated over heads and ne3. sinks [H]: one extra logit per head in the
    denominator. A row whose every logit is -inf gives 0 (as the kernels). Result [ne3, n_q, H, Dv]."""
    q4 = _as4(np.asarray(q, dtype=np.float64))
    k4 = _as4(np.asarray(k, dtype=np.float64))
    v4 = _as4(np.asarray(v, dtype=np.float64))
    n3, n_head, n_q, _ = q4.shape
    n_kv, n_head_kv = k4.shape[2], k4.shape[1]
    grouped_heads = v4.shape[1] == n_head_kv
    if grouped_heads:
        # the heads that read one k and v head (h // group) as the rows of one product: the same sums as
        # repeating k and v to every head, without the copies (a generation step read its whole cache so)
        group = n_head // n_head_kv
        grouped = q4.reshape(n3, n_head_kv, group * n_q, q4.shape[3])
        s = (grouped @ np.swapaxes(k4, -1, -2)).reshape(n3, n_head, n_q, n_kv) * scale
    else:
        k4 = np.repeat(k4, n_head // n_head_kv, axis=1)
        v4 = np.repeat(v4, n_head // v4.shape[1], axis=1)
        s = (q4 @ np.swapaxes(k4, -1, -2)) * scale
    if logit_softcap != 0:
        s = logit_softcap * np.tanh(s / logit_softcap)
    if mask is not None:
        m4 = _as4(np.asarray(mask, dtype=np.float64))[:, :, :n_q, :n_kv]
        # repeated over ne3 and heads (ggml: index i reads the mask's i % its count); a count of 1 or the
        # whole broadcasts without a copy
        reps = [1 if m in (1, n) else n // m for m, n in ((m4.shape[0], n3), (m4.shape[1], n_head))]
        if reps != [1, 1]:
            m4 = np.tile(m4, (*reps, 1, 1))
        with np.errstate(invalid="ignore"):
            s = s + _alibi_slopes(n_head, max_bias)[None, :, None, None] * m4
    top = s.max(axis=-1, keepdims=True)
    if sinks is not None:
        sk = np.asarray(sinks, dtype=np.float64).reshape(-1)[None, :, None, None]
        top = np.maximum(top, sk)
    top = np.where(np.isfinite(top), top, 0.0)
    e = np.exp(s - top)
    den = e.sum(axis=-1, keepdims=True)
    if sinks is not None:
        den = den + np.exp(sk - top)
    if grouped_heads:  # as s was
        ev = (e.reshape(n3, n_head_kv, -1, n_kv) @ v4).reshape(n3, n_head, n_q, v4.shape[3])
    else:
        ev = e @ v4
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(den > 0, ev / np.where(den > 0, den, 1.0), 0.0)
    return _lead(np.swapaxes(out, 1, 2).astype(np.float32))


def _yarn_corr_dims(n_dims: int, yarn: Yarn) -> tuple[float, float]:
    def dim(n_rot):
        with np.errstate(divide="ignore"):
            return n_dims * np.log(np.float64(yarn.n_ctx_orig) / (n_rot * 2 * math.pi)) / (2 * math.log(yarn.freq_base))

    start, end = float(np.floor(dim(yarn.beta_fast))), float(np.ceil(dim(yarn.beta_slow)))
    return max(start, 0), min(end, n_dims - 1)


def _rope_angles(theta_extrap, i, yarn: Yarn, corr):
    """YaRN: cos and sin of pair i's angle, times the magnitude scale (rope_yarn)."""
    theta = yarn.freq_scale * theta_extrap
    mscale = yarn.attn_factor
    if yarn.ext_factor != 0:
        y = (i - corr[0]) / max(0.001, corr[1] - corr[0])
        ramp = (1 - min(1, max(0, y))) * yarn.ext_factor
        theta = theta * (1 - ramp) + theta_extrap * ramp
        mscale *= 1.0 + 0.1 * math.log(1.0 / yarn.freq_scale)
    return np.cos(theta) * mscale, np.sin(theta) * mscale


def _rope(a, pos, freq_factors, n_dims: int | None, sections, mode: int, yarn: Yarn) -> np.ndarray:
    """ggml's rope, every mode: per token, the angle of pair i (0 <= i < ne0/2) is its position stream's
    p * base^(-2i/n_dims) / freq_factors[i] (YaRN-corrected); NORMAL rotates (2i, 2i+1), NEOX / MROPE /
    IMROPE (i, i + n_dims/2) for i < n_dims/2, VISION (i, i + n_dims) for i < ne0/2. MROPE picks pair i's
    stream by its sector i % sum(sections) (t, h, w, e in turn; IMROPE interleaves them), VISION restarts
    the exponent at each section. n_dims None: the whole head (half of it for VISION), as the wrappers."""
    x4 = _as4(np.asarray(a, dtype=np.float64))
    ne0, n_tok = x4.shape[-1], x4.shape[1]
    pos = np.asarray(pos, dtype=np.float64).reshape(-1)
    ff = None if freq_factors is None else np.asarray(freq_factors, dtype=np.float64).reshape(-1)
    vision = mode == 24
    if n_dims is None:
        n_dims = ne0 // 2 if vision else ne0
    ff_bytes = None if ff is None else ff.tobytes()
    cos, sin = _rope_table(pos.tobytes(), ff_bytes, n_tok, ne0, n_dims, tuple(sections), mode, yarn)
    out = x4.copy()
    if mode == 0:
        i0, i1, k = 2 * np.arange(n_dims // 2), 2 * np.arange(n_dims // 2) + 1, np.arange(n_dims // 2)
    elif vision:
        i0, i1, k = np.arange(ne0 // 2), np.arange(ne0 // 2) + n_dims, np.arange(ne0 // 2)
    else:
        i0, i1, k = np.arange(n_dims // 2), np.arange(n_dims // 2) + n_dims // 2, np.arange(n_dims // 2)
    c, s = cos[None, :, None, k], sin[None, :, None, k]
    x0, x1 = x4[..., i0], x4[..., i1]
    out[..., i0] = x0 * c - x1 * s
    out[..., i1] = x0 * s + x1 * c
    return out.reshape(np.shape(a)).astype(np.float32)


@functools.lru_cache(maxsize=8)
def _rope_table(
    pos_bytes: bytes, ff_bytes: bytes | None, n_tok: int, ne0: int, n_dims: int, sections: tuple, mode: int, yarn: Yarn
) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin [n_tok, ne0 / 2] of every pair's angle (see _rope), read-only. Kept for the last few positions
    and settings: every layer of a model ropes its q and k at the same positions, and this loop, which multiplies
    theta pair by pair as the kernel does, cost a checked generation step 19 ms of 56 ropes. Eight kept: a long
    prompt's table is megabytes."""
    pos = np.frombuffer(pos_bytes, dtype=np.float64)
    ff = None if ff_bytes is None else np.frombuffer(ff_bytes, dtype=np.float64)
    mrope, vision, imrope = bool(mode & 8), mode == 24, mode == 40
    corr = _yarn_corr_dims(n_dims, yarn)
    ts = yarn.freq_base ** (-2.0 / n_dims)
    cos, sin = np.empty((n_tok, ne0 // 2)), np.empty((n_tok, ne0 // 2))
    for tok in range(n_tok):
        p = [pos[tok + j * n_tok] for j in range(4)] if mrope else [pos[tok]] * 4
        theta = list(p)  # t, h, w, e, each multiplied by ts at every pair as the kernel does
        s0, s1, s2, s3 = sections if mrope else (0, 0, 0, 0)
        sect_dims, sec_w = s0 + s1 + s2 + s3, s0 + s1
        for i in range(ne0 // 2):
            th = theta[0]
            if mrope:
                sector = i % sect_dims
                if vision:  # each section restarts its exponent
                    for j, start in enumerate((0, s0, sec_w, sec_w + s2)):
                        if sector == start:
                            theta[j] = p[j]
                            break
                if imrope:
                    j = (
                        1
                        if sector % 3 == 1 and sector < 3 * s1
                        else 2
                        if sector % 3 == 2 and sector < 3 * s2
                        else 0
                        if sector % 3 == 0 and sector < 3 * s0
                        else 3
                    )
                else:
                    j = 0 if sector < s0 else 1 if sector < sec_w else 2 if sector < sec_w + s2 else 3
                th = theta[j]
            f = ff[i] if ff is not None and i < ff.size else 1.0
            cos[tok, i], sin[tok, i] = _rope_angles(th / f, i, yarn, corr)
            theta = [t * ts for t in theta]
    cos.setflags(write=False)
    sin.setflags(write=False)
    return cos, sin


def rope_multi(
    a: np.ndarray,
    pos: np.ndarray,
    freq_factors: ArrayLike | None = None,
    n_dims: int | None = None,
    sections: Sequence[int] = (0, 0, 0, 0),
    mode: int = 8,
    *yarn: Any,
    **named: Any,
) -> np.ndarray:
    """RoPE with position streams by section (see _rope); pos holds 4 streams of a.ne2 positions. The wrapper's
    arguments (YaRN's after mode: Yarn's, positionally or by name)."""
    return _rope(a, pos, freq_factors, n_dims, tuple(sections), mode, Yarn(*yarn, **named))


# --- SAM -------------------------------------------------------------------------------------------------------
def win_part(a: ArrayLike, w: int) -> np.ndarray:
    """a [H, W, C] (ne3 = 1) zero-padded to whole w x w windows -> [n_windows, w, w, C], window py*npx + px."""
    x = _as4(np.asarray(a, dtype=np.float32))[0]
    h, wd, c = x.shape
    npy, npx = -(-h // w), -(-wd // w)
    pad = np.zeros((npy * w, npx * w, c), dtype=np.float32)
    pad[:h, :wd] = x
    return _lead(pad.reshape(npy, w, npx, w, c).transpose(0, 2, 1, 3, 4).reshape(npy * npx, w, w, c))


def win_unpart(a: ArrayLike, w0: int, h0: int, w: int) -> np.ndarray:
    """Windows a [n_windows, w, w, C] -> [h0, w0, C]: out[y, x] = a[(y//w)*npx + x//w, y%w, x%w]."""
    x = _as4(np.asarray(a, dtype=np.float32))
    npx = -(-w0 // w)
    yy, xx = np.meshgrid(np.arange(h0), np.arange(w0), indexing="ij")
    return _lead(x[(yy // w) * npx + xx // w, yy % w, xx % w])


def get_rel_pos(a: ArrayLike, qh: int, kh: int) -> np.ndarray:
    """a [.., 2*kh - 1, C] (its first matrix) -> [qh, kh, C], out[i, j] = a[i - j + kh - 1]."""
    x = _as4(np.asarray(a))[0, 0]
    i, j = np.meshgrid(np.arange(qh), np.arange(kh), indexing="ij")
    return _lead(x[i - j + kh - 1])


def add_rel_pos(a: ArrayLike, pw: ArrayLike, ph: ArrayLike) -> np.ndarray:
    """a [.., np, H*W', W*W] viewed [np, ne12, ne11, W, W] (W = pw.ne0) gets ph[..., :, None] + pw[..., None, :]
    (pw, ph [np, ne12, ne11, W]); only a's first ne3 slab."""
    out = _as4(np.asarray(a, dtype=np.float64)).copy()
    pw4, ph4 = _as4(np.asarray(pw, dtype=np.float64)), _as4(np.asarray(ph, dtype=np.float64))
    slab = out[0].reshape(pw4.shape + (pw4.shape[-1],))
    slab += ph4[..., :, None] + pw4[..., None, :]
    return _lead(out.astype(np.float32))


# --- DeepSeek ---------------------------------------------------------------------------------------------------
def lightning_indexer(q: ArrayLike, k: ArrayLike, weights: ArrayLike, mask: ArrayLike) -> np.ndarray:
    """q [S, T, H, E], k [S, KV, 1, E], weights [S, 1, T, H], mask [m3, 1, T, KV] ->
    [S, 1, T, KV] = sum_h relu(q[s, t, h] . k[s, kv]) * weights[s, 0, t, h] + mask[s % m3, 0, t, kv]."""
    q4, k4 = _as4(np.asarray(q, dtype=np.float64)), _as4(np.asarray(k, dtype=np.float64))
    w4, m4 = _as4(np.asarray(weights, dtype=np.float64)), _as4(np.asarray(mask, dtype=np.float64))
    qk = np.maximum(np.einsum("sthe,ske->sthk", q4, k4[:, :, 0, :]), 0.0)
    out = np.einsum("sthk,sth->stk", qk, w4[:, 0]) + np.tile(m4[:, 0], (q4.shape[0] // m4.shape[0], 1, 1))
    return _lead(out[:, None].astype(np.float32))


def dsv4_hc_comb(mixes: ArrayLike, scale: ArrayLike, base: ArrayLike, eps: float = 1e-6, n_iter: int = 1) -> np.ndarray:
    """mixes [T, (2+hc)*hc] (hc = 4) -> [T, src, dst]: logits mixes[t, 2hc + dst + hc*src]*scale[2] + base[...],
    softmax over dst + eps, then divide by (eps + sum over src); n_iter - 1 times more: by (eps + sum over dst),
    then by (eps + sum over src)."""
    hc = 4
    m = _as4(np.asarray(mixes, dtype=np.float64))[0, 0]
    sc = float(np.asarray(scale, dtype=np.float64).reshape(-1)[2])
    b = np.asarray(base, dtype=np.float64).reshape(-1)
    x = (m[:, 2 * hc :] * sc + b[2 * hc :]).reshape(-1, hc, hc)  # [t, src, dst]
    x = np.exp(x - x.max(axis=-1, keepdims=True))
    x = x / x.sum(axis=-1, keepdims=True) + eps
    x = x / (eps + x.sum(axis=-2, keepdims=True))
    for _ in range(1, n_iter):
        x = x / (eps + x.sum(axis=-1, keepdims=True))
        x = x / (eps + x.sum(axis=-2, keepdims=True))
    return _lead(x.astype(np.float32))


def dsv4_hc_pre(x: ArrayLike, weights: ArrayLike) -> np.ndarray:
    """x [T, hc, E], weights [T, hc] -> [T, E] = sum_h x[t, h] * weights[t, h]."""
    x3 = _as4(np.asarray(x, dtype=np.float64))[0]
    w2 = _as4(np.asarray(weights, dtype=np.float64))[0, 0]
    return _lead(np.einsum("the,th->te", x3, w2).astype(np.float32))


def dsv4_hc_pre_gated(x: ArrayLike, gate: ArrayLike, scale: float = 1.0) -> np.ndarray:
    """x, gate [T, hc, E] -> [T, E] = scale * sum_h x[t, h] * sigmoid(gate[t, h])."""
    x3 = _as4(np.asarray(x, dtype=np.float64))[0]
    g3 = _as4(np.asarray(gate, dtype=np.float64))[0]
    return _lead((scale * (x3 / (1.0 + np.exp(-g3))).sum(axis=1)).astype(np.float32))


def dsv4_hc_post(x: ArrayLike, residual: ArrayLike, post: ArrayLike, comb: ArrayLike | None = None) -> np.ndarray:
    """x [T, E], residual [T, hc, E], post [T, hc], comb [T, src, dst] -> [T, dst, E] =
    x[t] * post[t, dst] + sum_src residual[t, src] * comb[t, src, dst] (comb None: + residual[t, dst])."""
    x2 = _as4(np.asarray(x, dtype=np.float64))[0, 0]
    r3 = _as4(np.asarray(residual, dtype=np.float64))[0]
    p2 = _as4(np.asarray(post, dtype=np.float64))[0, 0]
    out = x2[:, None, :] * p2[:, :, None]
    if comb is None:
        out = out + r3
    else:
        out = out + np.einsum("tse,tsd->tde", r3, _as4(np.asarray(comb, dtype=np.float64))[0])
    return _lead(out.astype(np.float32))
