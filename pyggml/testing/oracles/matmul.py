"""Oracles of the matrix products."""

from __future__ import annotations

import numpy as np

from pyggml.testing.oracles._common import (
    _as4,
    _lead,
)


# --- matrix -----------------------------------------------------------------------------------------
def mul_mat(a, b):
    """ggml_mul_mat: a [.., M, K], b [.., N, K] -> [.., N, M], out = b @ a^T per matrix. Over dims 2 and 3
    a broadcasts to b by repetition of each matrix: b's matrix i12 uses a's i12 // (ne12/ne02)."""
    a4 = _as4(np.asarray(a, dtype=np.float64))
    b4 = _as4(np.asarray(b, dtype=np.float64))
    a4 = np.repeat(np.repeat(a4, b4.shape[0] // a4.shape[0], axis=0), b4.shape[1] // a4.shape[1], axis=1)
    out = b4 @ np.swapaxes(a4, -1, -2)
    return _lead(out.astype(np.float32))



def mul_mat_id(as_, b, ids):
    """ggml_mul_mat_id: as_ [n_as, M, K], b [n_tokens, n_b, K], ids [n_tokens, n_used] ->
    [n_tokens, n_used, M]: out[t, e] = as_[ids[t, e]] @ b[t, e % n_b]."""
    a3 = _as4(np.asarray(as_, dtype=np.float64))[0]
    b3 = _as4(np.asarray(b, dtype=np.float64))[0]
    ids2 = _as4(np.asarray(ids))[0, 0]
    n_tok, n_used = ids2.shape
    out = np.empty((n_tok, n_used, a3.shape[1]))
    for t in range(n_tok):
        for e in range(n_used):
            out[t, e] = a3[ids2[t, e]] @ b3[t, e % b3.shape[1]]
    return _lead(out.astype(np.float32))


def out_prod(a, b):
    """ggml_out_prod: a [.., K, M], b [.., K, N] -> [.., N, M], out = b^T @ a per matrix; over dims 2 and 3
    a broadcasts to b by repetition of each matrix (b's matrix i12 uses a's i12 // (ne12/ne02))."""
    a4 = _as4(np.asarray(a, dtype=np.float64))
    b4 = _as4(np.asarray(b, dtype=np.float64))
    a4 = np.repeat(np.repeat(a4, b4.shape[0] // a4.shape[0], axis=0), b4.shape[1] // a4.shape[1], axis=1)
    out = np.swapaxes(b4, -1, -2) @ a4
    return _lead(out.astype(np.float32))


def add_id(a, b, ids):
    """ggml_add_id: out[i3, i2, i1] = a[i3, i2, i1] + b[ids[i2, i1]] (b's rows: its ggml dim 1)."""
    a4 = _as4(np.asarray(a, dtype=np.float64))
    rows = np.asarray(b, dtype=np.float64).reshape(-1, np.shape(b)[-1])  # only b's first matrix is addressed
    ids2 = np.asarray(ids).reshape(a4.shape[1], a4.shape[2])
    out = a4 + rows[ids2][None]
    return out.reshape(np.shape(a)).astype(np.float32)


# the family's oracles, listed so that type checkers see them (tests/test_types.py keeps it exact)
__all__ = [
    "add_id", "mul_mat", "mul_mat_id", "out_prod",
]
