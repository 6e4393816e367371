"""Oracles of the matrix products."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from pyggml.testing.engine.oracles._common import (
    _as4,
    _lead,
)

# --- matrix -----------------------------------------------------------------------------------------
# Products of more multiply-adds than this are computed in float32 (BLAS), smaller ones in float64: a model's
# products (a 1B model's weights: 0.8 billion values, 6 GB as float64) spent most of `check --model`'s oracle
# time converting the weights. float32 accumulation errs by about 1e-7 * sqrt(K) relative, an NMSE near 1e-12
# for K = 4096, far below any product's bound (1e-6 for the CPU's modeled quantized products).
FLOAT64_UP_TO = 1 << 24
# and a weight of more values than this times one row of activations (a generation step's product): converting
# the weight to float64 cost 1-3 ms a product, ten times the product itself (bench/README.md, "What a checked
# conversation ... costs"); a 0.6B model's 1024 x 1024 K and V projections (1 << 20 values) were the last
# converted, 0.1 s of a checked step
FLOAT64_WEIGHT_UP_TO = 1 << 16


def _product_dtype(a: ArrayLike, b: ArrayLike) -> type:
    """float64, or float32 for a product whose weight a is float32 and that does more than FLOAT64_UP_TO
    multiply-adds (at most a's values times b's rows), or reads a weight of more than FLOAT64_WEIGHT_UP_TO values
    with one row of b."""
    rows = np.size(b) // max(1, np.shape(b)[-1])
    big = np.size(a) * rows > FLOAT64_UP_TO or (rows == 1 and np.size(a) > FLOAT64_WEIGHT_UP_TO)
    return np.float32 if big and np.asarray(a).dtype == np.float32 else np.float64


def _broadcast(a4: np.ndarray, b4: np.ndarray) -> np.ndarray:
    """a's matrices repeated over dims 2 and 3 to b's count (ggml's broadcast: b's matrix i12 uses a's
    i12 // (ne12/ne02)); no copy where the counts already match (a model's weights: up to gigabytes)."""
    r0, r1 = b4.shape[0] // a4.shape[0], b4.shape[1] // a4.shape[1]
    if r0 > 1:
        a4 = np.repeat(a4, r0, axis=0)
    return np.repeat(a4, r1, axis=1) if r1 > 1 else a4


def mul_mat(a: ArrayLike, b: ArrayLike) -> np.ndarray:
    """ggml_mul_mat: a [.., M, K], b [.., N, K] -> [.., N, M], out = b @ a^T per matrix. Over dims 2 and 3
    a broadcasts to b by repetition of each matrix: b's matrix i12 uses a's i12 // (ne12/ne02)."""
    dtype = _product_dtype(a, b)
    a4 = _as4(np.asarray(a, dtype=dtype))
    b4 = _as4(np.asarray(b, dtype=dtype))
    a4 = _broadcast(a4, b4)
    # (a @ b^T)^T: the same sums; with a a model's weight matrix and b one row (a generation step) BLAS takes its
    # matrix-vector path (0.09 ms for 3072 x 1024 here, against 3.1 ms for b @ a^T in float32)
    out = np.swapaxes(a4 @ np.swapaxes(b4, -1, -2), -1, -2)
    return _lead(out.astype(np.float32))


def mul_mat_id(as_: ArrayLike, b: ArrayLike, ids: ArrayLike) -> np.ndarray:
    """ggml_mul_mat_id: as_ [n_as, M, K], b [n_tokens, n_b, K], ids [n_tokens, n_used] ->
    [n_tokens, n_used, M]: out[t, e] = as_[ids[t, e]] @ b[t, e % n_b]."""
    dtype = _product_dtype(as_, b)
    a3 = _as4(np.asarray(as_, dtype=dtype))[0]
    b3 = _as4(np.asarray(b, dtype=dtype))[0]
    ids2 = _as4(np.asarray(ids))[0, 0]
    n_tok, n_used = ids2.shape
    out = np.empty((n_tok, n_used, a3.shape[1]))
    for t in range(n_tok):
        for e in range(n_used):
            out[t, e] = a3[ids2[t, e]] @ b3[t, e % b3.shape[1]]
    return _lead(out.astype(np.float32))


def out_prod(a: ArrayLike, b: ArrayLike) -> np.ndarray:
    """ggml_out_prod: a [.., K, M], b [.., K, N] -> [.., N, M], out = b^T @ a per matrix; over dims 2 and 3
    a broadcasts to b by repetition of each matrix (b's matrix i12 uses a's i12 // (ne12/ne02))."""
    a4 = _as4(np.asarray(a, dtype=np.float64))
    b4 = _as4(np.asarray(b, dtype=np.float64))
    a4 = _broadcast(a4, b4)
    out = np.swapaxes(b4, -1, -2) @ a4
    return _lead(out.astype(np.float32))


def add_id(a: ArrayLike, b: ArrayLike, ids: ArrayLike) -> np.ndarray:
    """ggml_add_id: out[i3, i2, i1] = a[i3, i2, i1] + b[ids[i2, i1]] (b's rows: its ggml dim 1)."""
    a4 = _as4(np.asarray(a, dtype=np.float64))
    rows = np.asarray(b, dtype=np.float64).reshape(-1, np.shape(b)[-1])  # only b's first matrix is addressed
    ids2 = np.asarray(ids).reshape(a4.shape[1], a4.shape[2])
    out = a4 + rows[ids2][None]
    return out.reshape(np.shape(a)).astype(np.float32)
