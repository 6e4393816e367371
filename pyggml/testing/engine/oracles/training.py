"""Oracles of backward ops, losses and optimizer steps: each backward op is the analytic derivative
of its forward definition (ggml.h), contracted with the output gradient, in float64."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from pyggml.testing.engine.oracles._common import _as4, _lead
from pyggml.testing.engine.oracles.attention import rope_ext as _rope_ext


def _f64(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def _out(x, like) -> np.ndarray:
    """x in like's shape as a tensor shows it (leading 1s dropped), F32."""
    return _lead(np.asarray(x).reshape(np.asarray(like).shape).astype(np.float32))


def _shape_of(op, x) -> np.ndarray:
    """An argument read only for its shape (a tensor the graph does not compute or fill)."""
    if x is None:
        raise ValueError(f"{op} oracle: needs an array of the shape argument's shape")
    return np.asarray(x)


def silu_back(a: np.ndarray, b: ArrayLike) -> np.ndarray:
    """a * silu'(b): silu(x) = x*s(x), silu'(x) = s(x) * (1 + x*(1 - s(x)))."""
    x = _f64(b)
    s = 1.0 / (1.0 + np.exp(-x))
    return _out(_f64(a) * s * (1.0 + x * (1.0 - s)), a)


def rms_norm_back(a: np.ndarray, b: ArrayLike, eps: float = 1e-6) -> np.ndarray:
    """d/dx of y = x / sqrt(mean(x^2) + eps) along ne0, contracted with a:
    (a - x * sum(x*a) / (n*(mean(x^2) + eps))) / sqrt(mean(x^2) + eps)."""
    dz, x = _f64(a), _f64(b)
    n = x.shape[-1]
    ms = (x * x).mean(axis=-1, keepdims=True) + eps
    return _out((dz - x * (x * dz).sum(axis=-1, keepdims=True) / (n * ms)) / np.sqrt(ms), a)


def repeat_back(a: ArrayLike, b: np.ndarray) -> np.ndarray:
    """a summed over the tiles that repeat(b, a) made: every dim of a is whole copies of b's."""
    a4, b4 = _as4(_f64(a)), _as4(_shape_of("repeat_back", b))
    split = []
    for na, nb in zip(a4.shape, b4.shape):
        split += [na // nb, nb]
    return _out(a4.reshape(split).sum(axis=(0, 2, 4, 6)), b)


def get_rows_back(a: ArrayLike, b: ArrayLike, c: ArrayLike) -> np.ndarray:
    """Rows of a added into zeros of c's shape at rows b (repeated indices accumulate)."""
    out: np.ndarray = np.zeros(_shape_of("get_rows_back", c).shape[-2:], dtype=np.float64)
    np.add.at(out, np.asarray(b).ravel().astype(np.int64), _f64(a).reshape(-1, out.shape[-1]))
    return _lead(out.astype(np.float32))


def soft_max_ext_back(a: np.ndarray, b: ArrayLike, scale: float = 1.0, max_bias: float = 0.0) -> np.ndarray:
    """d/dx of y = softmax(scale*x + slope*mask) (mask and slope do not depend on x), given y = b:
    scale * y * (a - sum(y*a)) per row."""
    dy, y = _f64(a), _f64(b)
    return _out(scale * y * (dy - (y * dy).sum(axis=-1, keepdims=True)), a)


def rope_ext_back(
    a: np.ndarray,
    pos: ArrayLike,
    freq_factors: ArrayLike | None = None,
    n_dims: int | None = None,
    mode: int = 0,
    *yarn: Any,
    **named: Any,
) -> np.ndarray:
    """rope_ext rotates each pair by theta and scales it: the transpose of that map (the derivative contracted
    with a) rotates by -theta at the same scale, which is rope_ext at the negated positions (theta is linear
    in the position, YaRN's ramp included). The arguments are rope_ext's."""
    return _rope_ext(a, -_f64(pos), freq_factors, n_dims, mode, *yarn, **named)


def im2col_back(
    a: ArrayLike,
    b: ArrayLike,
    ne: Sequence[int],
    s0: int,
    s1: int,
    p0: int,
    p1: int,
    d0: int,
    d1: int,
    is_2D: bool = True,
) -> np.ndarray:
    """The adjoint of im2col: column entry (n, oh, ow, ic*KH*KW + kh*KW + kw) added into the input element
    (n, ic, oh*s1 - p1 + kh*d1, ow*s0 - p0 + kw*d0) when that lies inside the input (shape ne, ggml order)."""
    ne = list(ne) + [1] * (4 - len(ne))
    bshape = np.asarray(b).shape[::-1]  # ggml order
    kw = bshape[0]
    if is_2D:
        iw, ih, ic, n = ne
        kh = bshape[1] if len(bshape) > 1 else 1
    else:
        iw, ic, n = ne[0], ne[1], ne[2]
        ih, kh, s1, p1, d1 = 1, 1, 1, 0, 1
    g = _f64(a)
    ow = g.shape[-2]
    oh = g.shape[-3] if is_2D else 1
    g = g.reshape(n, oh, ow, ic, kh, kw)
    out = np.zeros((n, ic, ih, iw))
    for y in range(kh):
        for x in range(kw):
            rows = np.arange(oh) * s1 - p1 + y * d1
            cols = np.arange(ow) * s0 - p0 + x * d0
            ry, rx = (rows >= 0) & (rows < ih), (cols >= 0) & (cols < iw)
            part = g[:, ry][:, :, rx][..., y, x]  # [n, oh', ow', ic]
            # Any: NumPy 2.4's stubs refuse this index for add.at, 2.5's take it (no ignore that holds for both)
            index: Any = (slice(None), slice(None), rows[ry][:, None], cols[rx][None, :])
            np.add.at(out, index, part.transpose(0, 3, 1, 2))
    shape = (n, ic, ih, iw) if is_2D else (n, ic, iw)
    return _lead(out.reshape(shape).astype(np.float32))


def pool_2d_back(
    a: ArrayLike, af: np.ndarray, op: int, k0: int, k1: int, s0: int, s1: int, p0: float = 0.0, p1: float = 0.0
) -> np.ndarray:
    """The gradient of pool_2d(af, ...) given its output's gradient a. op 0 (max): each window's
    gradient goes to its largest element (the first in row-major order on ties); op 1 (avg): divided
    by k0*k1 among the window's elements inside af (the padding counts in the divisor)."""
    x = _as4(_f64(af))
    g = _as4(_f64(a))
    out = np.zeros_like(x)
    h, w = x.shape[2], x.shape[3]
    p0, p1 = int(p0), int(p1)
    for oy in range(g.shape[2]):
        for ox in range(g.shape[3]):
            y0, x0 = oy * s1 - p1, ox * s0 - p0
            ys = slice(max(y0, 0), min(y0 + k1, h))
            xs = slice(max(x0, 0), min(x0 + k0, w))
            if ys.start >= ys.stop or xs.start >= xs.stop:
                continue
            grad = g[:, :, oy, ox]
            if op == 1:
                out[:, :, ys, xs] += (grad / (k0 * k1))[:, :, None, None]
            elif op == 0:
                win = x[:, :, ys, xs].reshape(x.shape[0], x.shape[1], -1)
                idx = win.argmax(axis=-1)  # argmax takes the first of equal maxima
                wy, wx = np.divmod(idx, xs.stop - xs.start)
                i, j = np.indices(idx.shape)
                np.add.at(out, (i, j, ys.start + wy, xs.start + wx), grad)
            else:
                raise NotImplementedError(f"pool_2d_back oracle: op {op}")
    return _out(out, af)


def _log_softmax(x):
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def cross_entropy_loss(a: ArrayLike, b: ArrayLike) -> np.ndarray:
    """-sum(b * log_softmax(a)) over ne0, averaged over the rows; a 1-element result."""
    x, y = _f64(a), _f64(b)
    rows = x.size // x.shape[-1]
    return np.array([-(y * _log_softmax(x)).sum() / rows], dtype=np.float32)


def cross_entropy_loss_back(a: ArrayLike, b: np.ndarray, c: ArrayLike) -> np.ndarray:
    """d/db of cross_entropy_loss(b, c), times the loss gradient a: (softmax(b) - c) * a / rows."""
    x, y = _f64(b), _f64(c)
    rows = x.size // x.shape[-1]
    return _out((np.exp(_log_softmax(x)) - y) * _f64(a).ravel()[0] / rows, b)


def opt_step_adamw(a: np.ndarray, grad: ArrayLike, m: ArrayLike, v: ArrayLike, adamw_params: ArrayLike) -> np.ndarray:
    """The parameter a after one AdamW step (decoupled weight decay):
    m' = beta1*m + (1-beta1)*g, v' = beta2*v + (1-beta2)*g^2,
    a' = a*(1 - alpha*wd) - alpha * (m'*beta1h) / (sqrt(v'*beta2h) + eps)."""
    alpha, beta1, beta2, eps, wd, beta1h, beta2h = _f64(adamw_params).ravel()[:7]
    g = _f64(grad)
    m1 = beta1 * _f64(m) + (1 - beta1) * g
    v1 = beta2 * _f64(v) + (1 - beta2) * g * g
    return _out(_f64(a) * (1 - alpha * wd) - alpha * (m1 * beta1h) / (np.sqrt(v1 * beta2h) + eps), a)


def opt_step_sgd(a: np.ndarray, grad: ArrayLike, sgd_params: ArrayLike) -> np.ndarray:
    """The parameter a after one SGD step with weight decay: a*(1 - alpha*wd) - alpha*grad."""
    alpha, wd = _f64(sgd_params).ravel()[:2]
    return _out(_f64(a) * (1 - alpha * wd) - alpha * _f64(grad), a)
