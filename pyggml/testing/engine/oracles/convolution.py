"""Oracles of convolution, pooling, resampling and padding ops: direct loops over the output from each
op's definition (stride s, padding p, dilation d: output x reads input x*s + k*d - p), in float64."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from pyggml.types import TypeLike


def _cdiv(n, s):
    """C's integer division (toward zero): ggml sizes outputs with it."""
    return -(-n // s) if n < 0 else n // s


def _out(n, k, s, p, d):
    return _cdiv(n + 2 * p - d * (k - 1) - 1, s) + 1


def _dims(x, n):
    """x with at least n dims (leading 1s: ggml's trailing dims of extent 1)."""
    x = np.asarray(x)
    return x.reshape((1,) * (n - x.ndim) + x.shape)


def _pad_for(n, k, s, p, d):
    """Zero padding (before, after) of a dim so every window of the output fits (a window may pass
    the padded end when ggml's size rounds toward zero)."""
    last = (_out(n, k, s, p, d) - 1) * s + (k - 1) * d + 1
    return (p, max(p, last - n - p))


def _windows_2d(b, KH, KW, s, p, d):
    """b [..., H, W] -> [..., OH, OW, KH, KW] windows (zero padding)."""
    s0, s1 = s
    p0, p1 = p
    d0, d1 = d
    H, W = b.shape[-2:]
    OH, OW = _out(H, KH, s1, p1, d1), _out(W, KW, s0, p0, d0)
    x = np.pad(
        np.asarray(b, np.float64), [(0, 0)] * (b.ndim - 2) + [_pad_for(H, KH, s1, p1, d1), _pad_for(W, KW, s0, p0, d0)]
    )
    iy = (np.arange(OH) * s1)[:, None, None, None] + (np.arange(KH) * d1)[None, None, :, None]
    ix = (np.arange(OW) * s0)[None, :, None, None] + (np.arange(KW) * d0)[None, None, None, :]
    return x[..., iy, ix]


def im2col(
    a: np.ndarray,
    b: np.ndarray,
    s0: int,
    s1: int,
    p0: int,
    p1: int,
    d0: int,
    d1: int,
    is_2D: bool,
    dst_type: TypeLike | None = None,
) -> np.ndarray:
    """2-D: a [OC, IC, KH, KW], b [N, IC, H, W] -> [N, OH, OW, IC*KH*KW]; 1-D: a [OC, IC, K], b [N, IC, W]
    -> [N, OW, IC*K]."""
    if not is_2D:
        a, b = _dims(a, 3), _dims(b, 3)
        r = im2col(a[:, :, None, :], b[..., None, :], s0, 1, p0, 0, d0, 1, True)
        return r[:, 0]
    a, b = _dims(a, 4), _dims(b, 4)
    _, IC, KH, KW = np.shape(a)[-4:]
    w = _windows_2d(b, KH, KW, (s0, s1), (p0, p1), (d0, d1))  # [N, IC, OH, OW, KH, KW]
    N, _, OH, OW = w.shape[:4]
    return w.transpose(0, 2, 3, 1, 4, 5).reshape(N, OH, OW, IC * KH * KW)


def conv_2d(a: np.ndarray, b: np.ndarray, s0: int, s1: int, p0: int, p1: int, d0: int, d1: int) -> np.ndarray:
    """a [OC, IC, KH, KW], b [N, IC, H, W] -> [N, OC, OH, OW] (cross-correlation, as ggml)."""
    a, b = _dims(a, 4), _dims(b, 4)
    OC, IC, KH, KW = np.shape(a)
    w = _windows_2d(b, KH, KW, (s0, s1), (p0, p1), (d0, d1))  # [N, IC, OH, OW, KH, KW]
    return np.einsum("nchwyx,ocyx->nohw", w, np.asarray(a, np.float64))


def conv_2d_direct(a: np.ndarray, b: np.ndarray, s0: int, s1: int, p0: int, p1: int, d0: int, d1: int) -> np.ndarray:
    return conv_2d(a, b, s0, s1, p0, p1, d0, d1)


def conv_2d_dw(a: np.ndarray, b: np.ndarray, s0: int, s1: int, p0: int, p1: int, d0: int, d1: int) -> np.ndarray:
    """a [C, 1, KH, KW], b [N, C, H, W] -> [N, C, OH, OW]: channel c convolved with kernel c only."""
    a, b = _dims(a, 4), _dims(b, 4)
    C, _, KH, KW = np.shape(a)
    w = _windows_2d(b, KH, KW, (s0, s1), (p0, p1), (d0, d1))
    return np.einsum("nchwyx,cyx->nchw", w, np.asarray(a, np.float64)[:, 0])


def conv_2d_dw_direct(
    a: np.ndarray, b: np.ndarray, stride0: int, stride1: int, pad0: int, pad1: int, dilation0: int, dilation1: int
) -> np.ndarray:
    return conv_2d_dw(a, b, stride0, stride1, pad0, pad1, dilation0, dilation1)


def conv_1d(a: np.ndarray, b: np.ndarray, s0: int, p0: int, d0: int) -> np.ndarray:
    """a [OC, IC, K], b [N, IC, W] -> [N, OC, OW]."""
    a, b = _dims(a, 3), _dims(b, 3)
    return conv_2d(a[:, :, None, :], b[..., None, :], s0, 1, p0, 0, d0, 1)[:, :, 0]


def conv_1d_dw(a: np.ndarray, b: np.ndarray, s0: int, p0: int, d0: int) -> np.ndarray:
    """a [C, 1, K], b [N, C, W] -> [N, C, OW]."""
    a, b = _dims(a, 3), _dims(b, 3)
    return conv_2d_dw(a[:, :, None, :], b[..., None, :], s0, 1, p0, 0, d0, 1)[:, :, 0]


def conv_transpose_1d(a: np.ndarray, b: np.ndarray, s0: int, p0: int = 0, d0: int = 1) -> np.ndarray:
    """a [IC, OC, K], b [IC, W] -> [OC, (W-1)*s0 + K]: every input x adds a[ic, :, k] at x*s0 + k."""
    a, b = _dims(np.asarray(a, np.float64), 3), _dims(np.asarray(b, np.float64), 2)
    IC, OC, K = a.shape
    W = b.shape[-1]
    out = np.zeros((OC, (W - 1) * s0 + K))
    for x in range(W):
        out[:, x * s0 : x * s0 + K] += np.einsum("iok,i->ok", a, b[:, x])
    return out


def conv_transpose_2d_p0(a: np.ndarray, b: np.ndarray, stride: int) -> np.ndarray:
    """a [IC, OC, KH, KW], b [N, IC, H, W] -> [N, OC, (H-1)*s + KH, (W-1)*s + KW]."""
    a, b = _dims(np.asarray(a, np.float64), 4), _dims(np.asarray(b, np.float64), 4)
    IC, OC, KH, KW = a.shape
    N, _, H, W = b.shape
    out = np.zeros((N, OC, (H - 1) * stride + KH, (W - 1) * stride + KW))
    for y in range(H):
        for x in range(W):
            out[:, :, y * stride : y * stride + KH, x * stride : x * stride + KW] += np.einsum(
                "ioyx,ni->noyx", a, b[:, :, y, x]
            )
    return out


_FLT_MAX = float(np.finfo(np.float32).max)


def _pool_max(win: np.ndarray, axes: int | tuple[int, ...]) -> np.ndarray:
    """A max pool's window: ggml's definition starts every window's maximum at -FLT_MAX (the CPU, CUDA and
    Vulkan kernels alike), so a window of -Inf only (minimax-m3 masks its scores with -Inf) gives -FLT_MAX."""
    return np.maximum(win.max(axes), -_FLT_MAX)


def pool_1d(a: np.ndarray, op: int, k0: int, s0: int, p0: int) -> np.ndarray:
    """op 0 max, 1 average over the window's elements that lie inside a (padding is not counted)."""
    a = np.asarray(a, np.float64)
    W = a.shape[-1]
    OW = _cdiv(W + 2 * p0 - k0, s0) + 1
    out = np.empty(a.shape[:-1] + (OW,))
    for o in range(OW):
        lo, hi = max(o * s0 - p0, 0), min(o * s0 - p0 + k0, W)
        win = a[..., lo:hi]
        out[..., o] = _pool_max(win, -1) if op == 0 else win.mean(-1)
    return out


def pool_2d(a: np.ndarray, op: int, k0: int, k1: int, s0: int, s1: int, p0: int, p1: int) -> np.ndarray:
    """op 0 max over the window's elements inside a; op 1 their sum divided by k0*k1 (padding counts as 0)."""
    a = _dims(np.asarray(a, np.float64), 2)
    H, W = a.shape[-2:]
    OH, OW = _cdiv(H + 2 * p1 - k1, s1) + 1, _cdiv(W + 2 * p0 - k0, s0) + 1
    out = np.empty(a.shape[:-2] + (OH, OW))
    for oy in range(OH):
        y0, y1 = max(oy * s1 - p1, 0), min(oy * s1 - p1 + k1, H)
        for ox in range(OW):
            x0, x1 = max(ox * s0 - p0, 0), min(ox * s0 - p0 + k0, W)
            win = a[..., y0:y1, x0:x1]
            out[..., oy, ox] = _pool_max(win, (-1, -2)) if op == 0 else win.sum((-1, -2)) / (k0 * k1)
    return out


def pad_reflect_1d(a: np.ndarray, p0: int, p1: int) -> np.ndarray:
    return np.pad(np.asarray(a, np.float64), [(0, 0)] * (np.ndim(a) - 1) + [(p0, p1)], mode="reflect")


def col2im_1d(a: np.ndarray, s0: int, oc: int, p0: int) -> np.ndarray:
    """a [T_in, K*OC] -> [OC, (T_in-1)*s0 + K - 2*p0]: column t_in's entry oc*K + k adds to t_in*s0 + k - p0."""
    a = _dims(np.asarray(a, np.float64), 2)
    T_in, KOC = a.shape[-2:]
    K = KOC // oc
    full = np.zeros((oc, (T_in - 1) * s0 + K))
    for t in range(T_in):
        full[:, t * s0 : t * s0 + K] += a[t].reshape(oc, K)
    return full[:, p0 : full.shape[1] - p0]


_ALIGN_CORNERS = 1 << 8


def _nearest_index(n_out, n_in, sf):
    """ggml's CPU rule: output i reads input floor(i / sf), sf computed in float32."""
    return np.minimum((np.arange(n_out, dtype=np.float32) / np.float32(sf)).astype(np.int64), n_in - 1)


def _bilinear_weights(n_out, n_in, sf, offset):
    x = (np.arange(n_out, dtype=np.float64) + offset) / sf - offset
    x0 = np.floor(x).astype(np.int64)
    lo, hi = np.clip(x0, 0, n_in - 1), np.clip(x0 + 1, 0, n_in - 1)
    dx = np.clip(x - lo, 0.0, 1.0)
    w = np.zeros((n_out, n_in))
    np.add.at(w, (np.arange(n_out), lo), 1 - dx)
    np.add.at(w, (np.arange(n_out), hi), dx)
    return w


def interpolate(a: np.ndarray, ne0: int, ne1: int, ne2: int, ne3: int, mode: int = 0) -> np.ndarray:
    """Nearest (mode 0) in every dim, or bilinear (mode 1) in dims 0 and 1 with half-pixel centers
    (align-corners flag: corners on corners), nearest in dims 2 and 3."""
    a = np.asarray(a, np.float64)
    a = a.reshape((1,) * (4 - a.ndim) + a.shape)
    n3, n2, n1, n0 = a.shape
    sf = [ne0 / n0, ne1 / n1, ne2 / n2, ne3 / n3]
    offset = 0.5
    if mode & _ALIGN_CORNERS:
        offset = 0.0
        sf[0] = (ne0 - 1) / (n0 - 1) if ne0 > 1 and n0 > 1 else sf[0]
        sf[1] = (ne1 - 1) / (n1 - 1) if ne1 > 1 and n1 > 1 else sf[1]
    a = a[_nearest_index(ne3, n3, sf[3])][:, _nearest_index(ne2, n2, sf[2])]
    if mode & 0xFF == 0:
        return a[:, :, _nearest_index(ne1, n1, sf[1])][..., _nearest_index(ne0, n0, sf[0])]
    if mode & 0xFF == 1:
        wy, wx = _bilinear_weights(ne1, n1, sf[1], offset), _bilinear_weights(ne0, n0, sf[0], offset)
        return np.einsum("yh,abhw,xw->abyx", wy, a, wx)
    raise NotImplementedError(f"interpolate oracle: mode {mode:#x}")


def upscale_ext(a: np.ndarray, ne0: int, ne1: int, ne2: int, ne3: int, mode: int = 0) -> np.ndarray:
    return interpolate(a, ne0, ne1, ne2, ne3, mode)


def upscale(a: np.ndarray, scale_factor: int, mode: int = 0) -> np.ndarray:
    a4 = np.asarray(a).reshape((1,) * (4 - np.ndim(a)) + np.shape(a))
    n3, n2, n1, n0 = a4.shape
    return interpolate(a4, n0 * scale_factor, n1 * scale_factor, n2, n3, mode)


def _slices_3d(b, KD, KH, KW, s, p, d):
    """(kd, kh, kw, view of padded b [N, C, OD, OH, OW] that kernel tap reads); s, p, d in (w, h, d) order."""
    D, H, W = np.shape(b)[-3:]
    x = np.pad(
        np.asarray(b, np.float64),
        [
            (0, 0),
            (0, 0),
            _pad_for(D, KD, s[2], p[2], d[2]),
            _pad_for(H, KH, s[1], p[1], d[1]),
            _pad_for(W, KW, s[0], p[0], d[0]),
        ],
    )
    OD, OH, OW = _out(D, KD, s[2], p[2], d[2]), _out(H, KH, s[1], p[1], d[1]), _out(W, KW, s[0], p[0], d[0])
    for kd in range(KD):
        for kh in range(KH):
            for kw in range(KW):
                z, y, w = kd * d[2], kh * d[1], kw * d[0]
                yield (
                    kd,
                    kh,
                    kw,
                    x[
                        :,
                        :,
                        z : z + s[2] * (OD - 1) + 1 : s[2],
                        y : y + s[1] * (OH - 1) + 1 : s[1],
                        w : w + s[0] * (OW - 1) + 1 : s[0],
                    ],
                )


def im2col_3d(
    a: np.ndarray,
    b: np.ndarray,
    IC: int,
    s0: int,
    s1: int,
    s2: int,
    p0: int,
    p1: int,
    p2: int,
    d0: int,
    d1: int,
    d2: int,
    dst_type: TypeLike | None = None,
) -> np.ndarray:
    """a [IC*OC, KD, KH, KW] (its shape only), b [N*IC, D, H, W] -> [N*OD, OH, OW, IC*KD*KH*KW]."""
    a, b = _dims(a, 4), _dims(b, 4)
    KD, KH, KW = np.shape(a)[-3:]
    b = np.asarray(b).reshape((-1, IC) + np.shape(b)[-3:])
    cols = None
    for kd, kh, kw, v in _slices_3d(b, KD, KH, KW, (s0, s1, s2), (p0, p1, p2), (d0, d1, d2)):
        if cols is None:
            cols = np.zeros(v.shape[:2] + (KD, KH, KW) + v.shape[2:])
        cols[:, :, kd, kh, kw] = v
    assert cols is not None  # the kernel has at least one element
    N, _, _, _, _, OD, OH, OW = cols.shape
    return cols.transpose(0, 5, 6, 7, 1, 2, 3, 4).reshape(N * OD, OH, OW, -1)


def conv_3d(
    a: np.ndarray,
    b: np.ndarray,
    IC: int,
    s0: int,
    s1: int,
    s2: int,
    p0: int,
    p1: int,
    p2: int,
    d0: int,
    d1: int,
    d2: int,
) -> np.ndarray:
    """a [OC*IC, KD, KH, KW], b [N*IC, D, H, W] -> [N*OC, OD, OH, OW]: im2col_3d's columns times the kernel, as
    ggml_conv_3d computes it."""
    cols = im2col_3d(a, b, IC, s0, s1, s2, p0, p1, p2, d0, d1, d2)  # [N*OD, OH, OW, IC*KD*KH*KW]
    kernel = np.asarray(a, np.float64).reshape(-1, cols.shape[-1])  # [OC, IC*KD*KH*KW]
    n = _dims(b, 4).shape[0] // IC
    out = cols.reshape((n, -1) + cols.shape[1:]) @ kernel.T  # [N, OD, OH, OW, OC]
    return out.transpose(0, 4, 1, 2, 3).reshape((-1,) + out.shape[1:4])


def conv_3d_direct(
    a: np.ndarray,
    b: np.ndarray,
    s0: int,
    s1: int,
    s2: int,
    p0: int,
    p1: int,
    p2: int,
    d0: int,
    d1: int,
    d2: int,
    n_channels: int,
    n_batch: int,
    n_channels_out: int,
) -> np.ndarray:
    return conv_3d(a, b, n_channels, s0, s1, s2, p0, p1, p2, d0, d1, d2)
