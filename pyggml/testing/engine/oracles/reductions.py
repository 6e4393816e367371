"""Oracles of reductions, norms and sorting."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike


# --- reductions -------------------------------------------------------------------------------
def sum(a: ArrayLike) -> np.ndarray:  # noqa: A001
    """ggml_sum: every element, a 1-element tensor."""
    return np.array([np.sum(np.asarray(a, dtype=np.float64))], dtype=np.float32)


def sum_rows(a: ArrayLike) -> np.ndarray:
    """ggml_sum_rows: ne -> [1, ne1, ne2, ne3]."""
    return np.sum(np.asarray(a, dtype=np.float64), axis=-1, keepdims=True).astype(np.float32)


def mean(a: ArrayLike) -> np.ndarray:
    return np.mean(np.asarray(a, dtype=np.float64), axis=-1, keepdims=True).astype(np.float32)


def argmax(a: ArrayLike) -> np.ndarray:
    """ggml_argmax of a matrix: per row, the index of the maximum (the last one on ties), I32 [ne1]."""
    x = np.asarray(a).reshape(-1, np.asarray(a).shape[-1])
    n = x.shape[-1]
    return (n - 1 - np.argmax(x[:, ::-1], axis=-1)).astype(np.int32)


# --- norms, softmax -----------------------------------------------------------------------------
def norm(a: ArrayLike, eps: float = 1e-5) -> np.ndarray:
    x = np.asarray(a, dtype=np.float64)
    m = x.mean(axis=-1, keepdims=True)
    var = ((x - m) ** 2).mean(axis=-1, keepdims=True)
    return ((x - m) / np.sqrt(var + eps)).astype(np.float32)


def rms_norm(a: ArrayLike, eps: float = 1e-6) -> np.ndarray:
    x = np.asarray(a, dtype=np.float64)
    return (x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps)).astype(np.float32)


def l2_norm(a: ArrayLike, eps: float = 1e-12) -> np.ndarray:
    x = np.asarray(a, dtype=np.float64)
    return (x / np.maximum(np.sqrt((x * x).sum(axis=-1, keepdims=True)), eps)).astype(np.float32)


def argsort(a: ArrayLike, order: str | int = "asc") -> np.ndarray:
    """Per row (ne0), the indices that sort it, I32; order 'asc' or 'desc' (or SortOrder / 0 / 1)."""
    desc = str(getattr(order, "name", order)).lower() in ("desc", "1")
    x = np.asarray(a, dtype=np.float64)
    idx = np.argsort(-x if desc else x, axis=-1, kind="stable")
    return idx.astype(np.int32)


# --- top k, group norm ---------------------------------------------------------------------------
def argsort_top_k(a: np.ndarray, k: int) -> np.ndarray:
    """argsort DESC, the first k indices of each row (I32)."""
    return argsort(a, "desc")[..., :k]


def top_k(a: np.ndarray, k: int) -> np.ndarray:
    """The indices of the k largest of each row. ggml leaves their order open; the CPU kernel gives them
    largest first with the first two swapped, which this follows (cases compare them sorted)."""
    idx = argsort(a, "desc")[..., :k].copy()
    if k > 1:
        idx[..., [0, 1]] = idx[..., [1, 0]]
    return idx


def group_norm(a: ArrayLike, n_groups: int, eps: float = 1e-6) -> np.ndarray:
    """Per ne3 slice, channels (ne2) in groups of ceil(ne2 / n_groups), each normalized over its
    channels x ne1 x ne0 values (mean 0, variance 1)."""
    x = np.asarray(a, dtype=np.float64)
    x4 = x.reshape((1,) * (4 - x.ndim) + x.shape)
    out = np.empty_like(x4)
    step = -(-x4.shape[1] // n_groups)
    for s in range(0, x4.shape[1], step):
        g = x4[:, s : s + step]
        m = g.mean(axis=(1, 2, 3), keepdims=True)
        v = ((g - m) ** 2).mean(axis=(1, 2, 3), keepdims=True)
        out[:, s : s + step] = (g - m) / np.sqrt(v + eps)
    return out.reshape(x.shape).astype(np.float32)
