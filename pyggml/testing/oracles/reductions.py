"""Oracles of reductions, norms and sorting."""

from __future__ import annotations

import numpy as np


# --- reductions -------------------------------------------------------------------------------
def sum(a):  # noqa: A001
    """ggml_sum: every element, a 1-element tensor."""
    return np.array([np.sum(np.asarray(a, dtype=np.float64))], dtype=np.float32)


def sum_rows(a):
    """ggml_sum_rows: ne -> [1, ne1, ne2, ne3]."""
    return np.sum(np.asarray(a, dtype=np.float64), axis=-1, keepdims=True).astype(np.float32)


def mean(a):
    return np.mean(np.asarray(a, dtype=np.float64), axis=-1, keepdims=True).astype(np.float32)


def argmax(a):
    """ggml_argmax of a matrix: per row, the index of the maximum (the last one on ties), I32 [ne1]."""
    x = np.asarray(a).reshape(-1, np.asarray(a).shape[-1])
    n = x.shape[-1]
    return (n - 1 - np.argmax(x[:, ::-1], axis=-1)).astype(np.int32)


# --- norms, softmax -----------------------------------------------------------------------------
def norm(a, eps=1e-5):
    x = np.asarray(a, dtype=np.float64)
    m = x.mean(axis=-1, keepdims=True)
    var = ((x - m) ** 2).mean(axis=-1, keepdims=True)
    return ((x - m) / np.sqrt(var + eps)).astype(np.float32)


def rms_norm(a, eps=1e-6):
    x = np.asarray(a, dtype=np.float64)
    return (x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps)).astype(np.float32)


def l2_norm(a, eps=1e-12):
    x = np.asarray(a, dtype=np.float64)
    return (x / np.maximum(np.sqrt((x * x).sum(axis=-1, keepdims=True)), eps)).astype(np.float32)


def argsort(a, order="asc"):
    """Per row (ne0), the indices that sort it, I32; order 'asc' or 'desc' (or SortOrder / 0 / 1)."""
    desc = str(getattr(order, "name", order)).lower() in ("desc", "1")
    x = np.asarray(a, dtype=np.float64)
    idx = np.argsort(-x if desc else x, axis=-1, kind="stable")
    return idx.astype(np.int32)



