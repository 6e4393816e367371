"""Oracles of data movement: rows, copies, views, reshapes, permutations."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from pyggml.testing.engine.oracles._common import (
    MAX_DIMS,
    _as4,
    _axis,
    _lead,
    broadcast_to,
)

if TYPE_CHECKING:
    from pyggml.types import Type


# --- index ops ------------------------------------------------------------------------------------------
def get_rows(a: ArrayLike, b: ArrayLike) -> np.ndarray:
    """a [ne3, ne2, rows, ne0], b [ne3 (=b.ne2), ne2 (=b.ne1), n] -> [ne3, ne2, n, ne0]:
    out[k, j, i] = a[k, j, b[k, j, i]]. F32 result (I32 for I32 a)."""
    a4 = _as4(np.asarray(a))
    b3 = np.asarray(b, dtype=np.int64)
    b3 = b3.reshape((1,) * (3 - b3.ndim) + b3.shape)
    out = np.empty((a4.shape[0], a4.shape[1], b3.shape[-1], a4.shape[-1]), dtype=a4.dtype)
    for k in range(a4.shape[0]):
        for j in range(a4.shape[1]):
            out[k, j] = a4[k, j, b3[k, j]]
    return _lead(out.astype(np.int32 if a4.dtype == np.int32 else np.float32))


def set_rows(a: ArrayLike, b: ArrayLike, c: ArrayLike) -> np.ndarray:
    """a with rows replaced: a[i3, i2, c[i3 % c.ne2, i2 % c.ne1, i]] = b[i3, i2, i] (values converted to a's type
    by the caller's encoding). An F16 destination stays F16 (a KV cache: the copy of a float32 one cost a checked
    generation step more than its products)."""
    kept = np.asarray(a).dtype == np.float16
    a4 = _as4(np.array(a, dtype=np.float16 if kept else np.float32))
    b4 = _as4(np.asarray(b, dtype=a4.dtype))
    c3 = np.asarray(c, dtype=np.int64)
    c3 = c3.reshape((1,) * (3 - c3.ndim) + c3.shape)
    for i3 in range(b4.shape[0]):
        for i2 in range(b4.shape[1]):
            idx = c3[i3 % c3.shape[0], i2 % c3.shape[1]]
            a4[i3, i2, idx] = b4[i3, i2]
    return a4.reshape(np.asarray(a).shape)


# --- data movement ------------------------------------------------------------------------------------------
def cpy(a: ArrayLike, dtype: DTypeLike = np.float32) -> np.ndarray:
    """ggml_cpy's values: a's elements in order, converted (the caller gives the destination's NumPy shape)."""
    return np.asarray(a).astype(dtype)


def round_to(a: ArrayLike, t: str | Type) -> np.ndarray:
    """a's values as a tensor of type t (ggml name) holds them: F16 and BF16 rounded to nearest even
    (ggml's conversions), I32 / I16 cast (callers pass whole numbers), F32 unchanged; NumPy order."""
    x = np.asarray(a)
    t = str(t).lower()
    if t == "f16":
        return x.astype(np.float16)
    if t == "bf16":
        u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
        r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16  # nearest even on the 16 bits kept
        out = r.astype(np.uint32).view(np.float32)
        return np.where(np.isnan(x), np.float32(np.nan), out)
    if t in ("i32", "i16", "i8"):
        return x.astype({"i32": np.int32, "i16": np.int16, "i8": np.int8}[t])
    return x.astype(np.float32)


def dup(a: ArrayLike) -> np.ndarray:
    return np.array(a)


def cont(a: ArrayLike) -> np.ndarray:
    return np.ascontiguousarray(a)


def reshape(a: ArrayLike, ne: Sequence[int]) -> np.ndarray:
    """ggml_reshape_Nd / cont_Nd: the same elements in ggml shape ne (ne[0] innermost)."""
    return np.asarray(a).reshape(tuple(reversed([int(n) for n in ne])))


cont_nd = reshape


def permute(a: ArrayLike, axis0: int, axis1: int, axis2: int, axis3: int) -> np.ndarray:
    """ggml_permute: source dim i becomes destination dim axis_i."""
    x4 = _as4(np.asarray(a))
    axes = (axis0, axis1, axis2, axis3)
    src_of = [0] * MAX_DIMS  # destination dim -> source dim
    for i, d in enumerate(axes):
        src_of[d] = i
    # NumPy axis of destination dim d is 3-d; it takes source dim src_of[d], NumPy axis 3-src_of[d]
    return _lead(np.transpose(x4, [_axis(src_of[_axis(n)]) for n in range(MAX_DIMS)]))


def transpose(a: np.ndarray) -> np.ndarray:
    """ggml_transpose: swap dims 0 and 1."""
    return permute(a, 1, 0, 2, 3)


def concat(a: np.ndarray, b: np.ndarray, dim: int) -> np.ndarray:
    return _lead(np.concatenate([_as4(a), _as4(b)], axis=_axis(dim)))


def repeat(a: ArrayLike, ne: Sequence[int]) -> np.ndarray:
    """Repeat (tile) a to ggml shape ne."""
    shape = tuple(reversed([int(n) for n in ne]))
    return broadcast_to(np.asarray(a), shape)


def pad(a: ArrayLike, p0: int = 0, p1: int = 0, p2: int = 0, p3: int = 0) -> np.ndarray:
    """ggml_pad: zeros appended at the end of each dim."""
    x4 = _as4(np.asarray(a))
    return _lead(np.pad(x4, [(0, p3), (0, p2), (0, p1), (0, p0)]))


def view(
    a: ArrayLike, ne: Sequence[int], nb: Sequence[int], offset: int = 0, itemsize: int | None = None
) -> np.ndarray:
    """A strided view of a's bytes (ggml_view_Nd / view_nd): ne and nb in ggml order, nb[0] given or the
    element size, offset in bytes. Returned contiguous, NumPy order."""
    x = np.ascontiguousarray(a)
    itemsize = itemsize or x.itemsize
    ne = [int(n) for n in ne]
    nb = [int(n) for n in nb]
    if len(nb) == len(ne) - 1:
        nb = [itemsize] + nb
    flat = x.reshape(-1)
    out = np.lib.stride_tricks.as_strided(
        flat[offset // itemsize :], shape=tuple(reversed(ne)), strides=tuple(reversed(nb)), writeable=False
    )
    return _lead(np.array(out))


def view_1d(a: np.ndarray, ne0: int, offset: int = 0) -> np.ndarray:
    return view(a, [ne0], [], offset)


def view_2d(a: np.ndarray, ne0: int, ne1: int, nb1: int, offset: int = 0) -> np.ndarray:
    return view(a, [ne0, ne1], [nb1], offset)


def view_3d(a: np.ndarray, ne0: int, ne1: int, ne2: int, nb1: int, nb2: int, offset: int = 0) -> np.ndarray:
    return view(a, [ne0, ne1, ne2], [nb1, nb2], offset)


def view_4d(
    a: np.ndarray, ne0: int, ne1: int, ne2: int, ne3: int, nb1: int, nb2: int, nb3: int, offset: int = 0
) -> np.ndarray:
    return view(a, [ne0, ne1, ne2, ne3], [nb1, nb2, nb3], offset)


def view_nd(a: np.ndarray, ne: Sequence[int], nb: Sequence[int], offset: int = 0) -> np.ndarray:
    return view(a, ne, nb, offset)
