"""NumPy oracles: each op written from its definition in ggml.h, never by calling ggml.

Arrays are in NumPy order (ggml's ne reversed): ggml dim d is NumPy axis -1-d.
"""

from __future__ import annotations

import numpy as np


def broadcast_to(b: np.ndarray, shape) -> np.ndarray:
    """ggml's repeat rule: b tiled so every dim reaches a's (a multiple of b's)."""
    b4 = b.reshape((1,) * (len(shape) - b.ndim) + b.shape)
    return np.tile(b4, [s // n for s, n in zip(shape, b4.shape)])


def add(a, b):
    return a + broadcast_to(b, a.shape)
