"""Oracles of soft_max, masks and rotary position embedding."""

from __future__ import annotations

import math

import numpy as np

from pyggml.testing.oracles._common import (
    _as4,
)


def soft_max_ext(a, mask=None, scale=1.0, max_bias=0.0):
    """softmax over ne0 of a*scale + slope*mask; mask rows i1 map to a's rows i1 (mask.ne[1] >= a.ne[1]),
    its dims 2 and 3 broadcast (repeat) over a's. ALiBi slopes per head (a's dim 2) when max_bias > 0."""
    x4 = _as4(np.asarray(a, dtype=np.float64)) * scale
    if mask is not None:
        m4 = _as4(np.asarray(mask, dtype=np.float64))[:, :, :x4.shape[2], :]
        m4 = np.tile(m4, (x4.shape[0] // m4.shape[0], x4.shape[1] // m4.shape[1], 1, 1))
        if max_bias > 0:
            n_head = x4.shape[1]
            n_log2 = 1 << int(math.floor(math.log2(n_head)))
            m0 = 2.0 ** (-max_bias / n_log2)
            m1 = 2.0 ** (-(max_bias / 2.0) / n_log2)
            slopes = np.array([m0 ** (h + 1) if h < n_log2 else m1 ** (2 * (h - n_log2) + 1)
                               for h in range(n_head)])
            m4 = m4 * slopes[None, :, None, None]
        x4 = x4 + m4
    with np.errstate(invalid="ignore"):
        x4 = x4 - x4.max(axis=-1, keepdims=True)
        e = np.exp(x4)
        out = e / e.sum(axis=-1, keepdims=True)
    return out.reshape(np.asarray(a).shape).astype(np.float32)


def soft_max(a):
    return soft_max_ext(a)


def diag_mask_inf(a, n_past):
    """Row i1, column i0 set to -inf where i0 > n_past + i1 (causal mask)."""
    x = np.array(a, dtype=np.float32)
    rows, cols = x.shape[-2] if x.ndim > 1 else 1, x.shape[-1]
    i1, i0 = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    m = i0 > n_past + i1
    x4 = _as4(x).copy()
    x4[..., m] = -np.inf
    return x4.reshape(x.shape)


def rope_ext(a, pos, n_dims, mode=0, freq_base=10000.0, freq_scale=1.0, attn_factor=1.0, freq_factors=None):
    """RoPE, ext_factor 0 (no YaRN ramp). a: NumPy [ne3, ne2 (tokens), ne1 (heads), ne0]; pos[ne2].
    Pair k (k < n_dims/2) rotates by pos * freq_scale * base^(-2k/n_dims) / freq_factors[k]; mode 0
    (normal) pairs elements (2k, 2k+1), mode 2 (neox) pairs (k, k + n_dims/2). Elements past n_dims
    pass through."""
    x4 = _as4(np.asarray(a, dtype=np.float64))
    out = x4.copy()
    half = n_dims // 2
    k = np.arange(half, dtype=np.float64)
    inv = freq_base ** (-2.0 * k / n_dims)
    if freq_factors is not None:
        inv = inv / np.asarray(freq_factors, dtype=np.float64)[:half]
    theta = freq_scale * np.asarray(pos, dtype=np.float64)[:, None] * inv[None, :]  # [ne2, half]
    c = (np.cos(theta) * attn_factor)[None, :, None, :]
    s = (np.sin(theta) * attn_factor)[None, :, None, :]
    if mode == 0:
        i0, i1 = 2 * np.arange(half), 2 * np.arange(half) + 1
    elif mode == 2:
        i0, i1 = np.arange(half), np.arange(half) + half
    else:
        raise ValueError(f"rope_ext oracle: mode {mode} not modelled")
    x0, x1 = x4[..., i0], x4[..., i1]
    out[..., i0] = x0 * c - x1 * s
    out[..., i1] = x0 * s + x1 * c
    return out.reshape(np.asarray(a).shape).astype(np.float32)



