"""Oracles of the recurrent and state-space ops."""

from __future__ import annotations

import numpy as np


def ssm_conv(sx, c):
    """ggml_ssm_conv: sx [n_s, d_inner, d_conv-1+n_t], c [d_inner, d_conv] -> [n_s, n_t, d_inner];
    out[s, t, i] = sum_k sx[s, i, t+k] * c[i, k]."""
    sx = np.asarray(sx, dtype=np.float64)
    sx = sx.reshape((1,) * (3 - sx.ndim) + sx.shape)
    c = np.asarray(c, dtype=np.float64)
    d_conv = c.shape[-1]
    n_t = sx.shape[-1] - d_conv + 1
    win = np.stack([sx[:, :, t:t + d_conv] for t in range(n_t)], axis=1)  # [n_s, n_t, d_inner, d_conv]
    return np.einsum("stik,ik->sti", win, c).astype(np.float32)



