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



