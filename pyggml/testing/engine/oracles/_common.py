"""What the oracles share: ggml's dim order in NumPy terms, and ggml's broadcasting rule."""

from collections.abc import Sequence

import numpy as np

MAX_DIMS = 4


# --- helpers -------------------------------------------------------------------------------
def _f32(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float32)


def _as4(x: np.ndarray) -> np.ndarray:
    """x with ggml's 4 dims, NumPy order (ne3, ne2, ne1, ne0)."""
    x = np.asarray(x)
    return x.reshape((1,) * (MAX_DIMS - x.ndim) + x.shape)


def _lead(x: np.ndarray) -> np.ndarray:
    """Drop leading size-1 axes (ggml's trailing dims of 1), as Tensor.shape does; at least 1 dim."""
    x = np.asarray(x)
    while x.ndim > 1 and x.shape[0] == 1:
        x = x[0]
    return x


def _axis(dim: int) -> int:
    """NumPy axis of ggml dim `dim` in a 4-d array."""
    return MAX_DIMS - 1 - dim


def broadcast_to(b: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    """ggml's repeat rule: b tiled so every dim reaches a's (a multiple of b's).

    b may have more dims than `shape` where the extra ones are leading 1s (a tensor whose rank pyggml does not
    know, such as the scheduler's copy of an input, has the rank of its ne; ggml sees both as 4-d).
    """
    extra = b.ndim - len(shape)
    if extra > 0 and all(n == 1 for n in b.shape[:extra]):
        b = b.reshape(b.shape[extra:])
    b4 = b.reshape((1,) * (len(shape) - b.ndim) + b.shape)
    return np.tile(b4, [s // n for s, n in zip(shape, b4.shape)])
