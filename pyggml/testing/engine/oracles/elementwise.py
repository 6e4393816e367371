"""Oracles of the element-wise ops and generators."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike

from pyggml.testing.engine.oracles._common import (
    _as4,
    _f32,
    _lead,
    broadcast_to,
)

if TYPE_CHECKING:
    from pyggml.types import Type


# --- element-wise binary (b repeats to a's shape, result has a's type) ----------------------
def add(a: np.ndarray, b: ArrayLike) -> np.ndarray:
    return _f32(a) + broadcast_to(_f32(b), a.shape)


def sub(a: np.ndarray, b: ArrayLike) -> np.ndarray:
    return _f32(a) - broadcast_to(_f32(b), a.shape)


def mul(a: np.ndarray, b: ArrayLike) -> np.ndarray:
    return _f32(a) * broadcast_to(_f32(b), a.shape)


def div(a: np.ndarray, b: ArrayLike) -> np.ndarray:
    return _f32(a) / broadcast_to(_f32(b), a.shape)


def scale(a: ArrayLike, s: float) -> np.ndarray:
    return _f32(a) * np.float32(s)


def clamp(a: ArrayLike, lo: float, hi: float) -> np.ndarray:
    return np.minimum(np.maximum(_f32(a), np.float32(lo)), np.float32(hi))


# --- element-wise unary ---------------------------------------------------------------------
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
GELU_COEF_A = 0.044715
GELU_QUICK_COEF = 1.702


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _unary(fn):
    def op(a: ArrayLike) -> np.ndarray:
        x = np.asarray(a, dtype=np.float64)
        with np.errstate(all="ignore"):
            return fn(x).astype(np.float32)

    op.__name__ = getattr(fn, "__name__", "unary")
    return op


abs = _unary(np.abs)  # noqa: A001
sgn = _unary(np.sign)
neg = _unary(np.negative)
step = _unary(lambda x: (x > 0).astype(np.float64))
tanh = _unary(np.tanh)
elu = _unary(lambda x: np.where(x > 0, x, np.expm1(x)))
relu = _unary(lambda x: np.where(x > 0, x, 0.0))
sigmoid = _unary(_sigmoid)
gelu = _unary(lambda x: 0.5 * x * (1.0 + np.tanh(SQRT_2_OVER_PI * x * (1.0 + GELU_COEF_A * x * x))))
gelu_quick = _unary(lambda x: x * _sigmoid(GELU_QUICK_COEF * x))
gelu_erf = _unary(lambda x: 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0))))
silu = _unary(lambda x: x * _sigmoid(x))
hardsigmoid = _unary(lambda x: np.clip((x + 3.0) / 6.0, 0.0, 1.0))
hardswish = _unary(lambda x: x * np.clip((x + 3.0) / 6.0, 0.0, 1.0))
exp = _unary(np.exp)
softplus = _unary(lambda x: np.where(x > 20.0, x, np.log1p(np.exp(np.minimum(x, 20.0)))))
floor = _unary(np.floor)
ceil = _unary(np.ceil)
round = _unary(lambda x: np.sign(x) * np.floor(np.abs(x) + 0.5))  # noqa: A001  C roundf: halves away from 0
trunc = _unary(np.trunc)
sqr = _unary(np.square)
sqrt = _unary(np.sqrt)
log = _unary(np.log)
sin = _unary(np.sin)
cos = _unary(np.cos)


def leaky_relu(a: ArrayLike, negative_slope: float = 0.01) -> np.ndarray:
    x = np.asarray(a, dtype=np.float64)
    return np.where(x > 0, x, negative_slope * x).astype(np.float32)


def arange(start: float, stop: float, step: float = 1.0) -> np.ndarray:
    n = int(math.ceil((np.float32(stop) - np.float32(start)) / np.float32(step)))
    return (np.float32(start) + np.float32(step) * np.arange(n, dtype=np.float32)).astype(np.float32)


# --- newer unary ops --------------------------------------------------------------------------
expm1 = _unary(np.expm1)


def _softplus(v):
    return v if v > 20.0 else math.log1p(math.exp(v))


def xielu(
    a: ArrayLike, alpha_n: float = 0.8, alpha_p: float = 0.8, beta: float = 0.5, eps: float = -1e-6
) -> np.ndarray:
    """ggml stores alpha_n as beta + softplus(alpha_n) and alpha_p as softplus(alpha_p)."""
    an, ap = beta + _softplus(alpha_n), _softplus(alpha_p)
    x = np.asarray(a, dtype=np.float64)
    with np.errstate(all="ignore"):
        neg = (np.expm1(np.minimum(x, eps)) - x) * an + beta * x
        return np.where(x > 0, ap * x * x + beta * x, neg).astype(np.float32)


# --- gated linear units -----------------------------------------------------------------------
_GLU_ACT = {
    "reglu": lambda x: np.maximum(x, 0.0),
    "geglu": lambda x: 0.5 * x * (1.0 + np.tanh(SQRT_2_OVER_PI * x * (1.0 + GELU_COEF_A * x * x))),
    "swiglu": lambda x: x * _sigmoid(x),
    "geglu_erf": lambda x: 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0))),
    "geglu_quick": lambda x: x * _sigmoid(GELU_QUICK_COEF * x),
}


def _halves(a, b, swapped=False):
    """(x, g): x is activated, g gates; without b, the two halves of a's rows."""
    a = np.asarray(a, dtype=np.float64)
    if b is not None:
        return a, np.asarray(b, dtype=np.float64)
    nc = a.shape[-1] // 2
    x, g = a[..., :nc], a[..., nc : 2 * nc]
    return (g, x) if swapped else (x, g)


def _make_glu(name):
    act = _GLU_ACT[name.split("_swapped")[0].split("_split")[0]]

    def split(a: ArrayLike, b: ArrayLike) -> np.ndarray:
        x, g = _halves(a, b)
        with np.errstate(all="ignore"):
            return (act(x) * g).astype(np.float32)

    def halves(a: ArrayLike) -> np.ndarray:
        x, g = _halves(a, None, name.endswith("_swapped"))
        with np.errstate(all="ignore"):
            return (act(x) * g).astype(np.float32)

    op = split if name.endswith("_split") else halves
    op.__name__ = op.__qualname__ = name
    return op


reglu = _make_glu("reglu")
reglu_swapped = _make_glu("reglu_swapped")
reglu_split = _make_glu("reglu_split")
geglu = _make_glu("geglu")
geglu_swapped = _make_glu("geglu_swapped")
geglu_split = _make_glu("geglu_split")
swiglu = _make_glu("swiglu")
swiglu_swapped = _make_glu("swiglu_swapped")
swiglu_split = _make_glu("swiglu_split")
geglu_erf = _make_glu("geglu_erf")
geglu_erf_swapped = _make_glu("geglu_erf_swapped")
geglu_erf_split = _make_glu("geglu_erf_split")
geglu_quick = _make_glu("geglu_quick")
geglu_quick_swapped = _make_glu("geglu_quick_swapped")
geglu_quick_split = _make_glu("geglu_quick_split")


def swiglu_oai(a: ArrayLike, b: np.ndarray | None = None, alpha: float = 1.702, limit: float = 7.0) -> np.ndarray:
    """x = min(x, limit), g = clamp(g, -limit, limit): x * sigmoid(alpha * x) * (g + 1)."""
    x, g = _halves(a, b)
    x, g = np.minimum(x, limit), np.clip(g, -limit, limit)
    with np.errstate(all="ignore"):
        return (x * _sigmoid(alpha * x) * (g + 1.0)).astype(np.float32)


def swiglu_clamp(a: ArrayLike, b: np.ndarray | None = None, limit: float = 7.0) -> np.ndarray:
    """x = min(x, limit), g = clamp(g, -limit, limit): silu(x) * g."""
    x, g = _halves(a, b)
    x, g = np.minimum(x, limit), np.clip(g, -limit, limit)
    with np.errstate(all="ignore"):
        return (x * _sigmoid(x) * g).astype(np.float32)


# --- more arithmetic, casts, generators ---------------------------------------------------------
def _round_to(x, type):
    """x (F32) as a tensor of `type` holds it: F16 / BF16 round to nearest even, others stay F32."""
    name = str(getattr(type, "name", type)).lower()
    x = _f32(x)
    if name == "f16":
        return x.astype(np.float16).astype(np.float32)
    if name == "bf16":
        u = x.view(np.uint32).astype(np.uint64)
        u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
        return u.astype(np.uint32).view(np.float32)
    return x


def add1(a: ArrayLike, b: ArrayLike) -> np.ndarray:
    return _f32(a) + _f32(b).reshape(-1)[0]


def add_cast(a: np.ndarray, b: np.ndarray, type: str | Type) -> np.ndarray:
    return _round_to(add(a, b), type)


def cast(a: ArrayLike, type: str | Type) -> np.ndarray:
    return _round_to(a, type)


def scale_bias(a: ArrayLike, s: float, b: float) -> np.ndarray:
    return _f32(a) * np.float32(s) + np.float32(b)


def fill(a: ArrayLike, c: float) -> np.ndarray:
    return np.full(np.shape(a), np.float32(c), dtype=np.float32)


def count_equal(a: ArrayLike, b: ArrayLike) -> np.ndarray:
    return np.array([np.count_nonzero(np.asarray(a) == np.asarray(b))], dtype=np.int64)


def tri(a: ArrayLike, type: int | str = 0) -> np.ndarray:
    """Keep a[.., r, i] where i >= r (0 upper_diag), i > r (1 upper), i <= r (2 lower_diag), i < r (3 lower)."""
    t = (
        {"upper_diag": 0, "upper": 1, "lower_diag": 2, "lower": 3}.get(type, type)
        if isinstance(type, str)
        else int(type)
    )
    x = _f32(a)
    r, i = np.indices(x.shape[-2:])
    keep = [i >= r, i > r, i <= r, i < r][t]  # type: ignore[index]  # an unknown name raises TypeError here
    return np.where(keep, x, np.float32(0))


def diag(a: ArrayLike) -> np.ndarray:
    """[.., 1, n] -> [.., n, n] with a's row on the diagonal."""
    x = _as4(_f32(a))
    n = x.shape[-1]
    out = np.zeros(x.shape[:2] + (n, n), np.float32)
    out[..., np.arange(n), np.arange(n)] = x[..., 0, :]
    return _lead(out)


def diag_mask_zero(a: ArrayLike, n_past: int) -> np.ndarray:
    x = _f32(a)
    j, i = np.indices(x.shape[-2:]) if x.ndim >= 2 else (np.zeros((1, x.shape[-1]), int), np.arange(x.shape[-1])[None])
    return np.where(i > n_past + j, np.float32(0), x).reshape(x.shape)


def roll(a: ArrayLike, shift0: int = 0, shift1: int = 0, shift2: int = 0, shift3: int = 0) -> np.ndarray:
    x = _as4(_f32(a))
    return _lead(np.roll(x, (shift3, shift2, shift1, shift0), axis=(0, 1, 2, 3)))


def repeat_4d(a: ArrayLike, ne0: int, ne1: int = 1, ne2: int = 1, ne3: int = 1) -> np.ndarray:
    return _lead(broadcast_to(_as4(np.asarray(a)), (ne3, ne2, ne1, ne0)))


def cumsum(a: ArrayLike) -> np.ndarray:
    return np.cumsum(np.asarray(a, dtype=np.float64), axis=-1).astype(np.float32)


# --- acc / set ----------------------------------------------------------------------------------
def _view_index(a, b, nb1, nb2, nb3, offset):
    """Flat element indices of a (contiguous) that b's elements land on, in b's NumPy order."""
    es = np.asarray(a).dtype.itemsize
    b4 = _as4(np.asarray(b))
    i3, i2, i1, i0 = np.indices(b4.shape)
    return (offset + i0 * es + i1 * nb1 + i2 * nb2 + i3 * nb3) // es, b4


def acc(a: ArrayLike, b: np.ndarray, nb1: int, nb2: int, nb3: int, offset: int) -> np.ndarray:
    out = np.array(a, dtype=np.float32).ravel()
    idx, b4 = _view_index(out, b, nb1, nb2, nb3, offset)
    out[idx] += b4.astype(np.float32)
    return out.reshape(np.shape(a))


def set(a: ArrayLike, b: np.ndarray, nb1: int, nb2: int, nb3: int, offset: int) -> np.ndarray:  # noqa: A001
    out = np.array(a).ravel()
    idx, b4 = _view_index(out, b, nb1, nb2, nb3, offset)
    out[idx] = b4
    return out.reshape(np.shape(a))


def _nb(a: ArrayLike) -> tuple[int, int, int]:
    a4 = _as4(np.asarray(a))
    es = a4.dtype.itemsize
    return es * a4.shape[3], es * a4.shape[3] * a4.shape[2], es * a4.shape[3] * a4.shape[2] * a4.shape[1]


def set_1d(a: np.ndarray, b: np.ndarray, offset: int) -> np.ndarray:
    return set(a, b, *_nb(a), offset)


def set_2d(a: np.ndarray, b: np.ndarray, nb1: int, offset: int) -> np.ndarray:
    return set(a, b, nb1, *_nb(a)[1:], offset)


# --- padding, embeddings ---------------------------------------------------------------------------
def _pad(a, pads, mode):
    """a padded by (lp0, rp0, ..., lp3, rp3), those not given 0, in np.pad's mode."""
    pads = tuple(pads) + (0,) * (8 - len(pads))
    x = _as4(np.asarray(a))
    width = [(pads[2 * d], pads[2 * d + 1]) for d in (3, 2, 1, 0)]
    return _lead(np.pad(x, width, mode=mode))


def pad_ext(
    a: ArrayLike,
    lp0: int = 0,
    rp0: int = 0,
    lp1: int = 0,
    rp1: int = 0,
    lp2: int = 0,
    rp2: int = 0,
    lp3: int = 0,
    rp3: int = 0,
) -> np.ndarray:
    return _pad(a, (lp0, rp0, lp1, rp1, lp2, rp2, lp3, rp3), "constant")


def pad_ext_circular(a: ArrayLike, *pads: int) -> np.ndarray:
    """pad_ext's paddings (lp0, rp0, ..., lp3, rp3), filled from the other end of each dim."""
    return _pad(a, pads, "wrap")


def pad_circular(a: ArrayLike, p0: int = 0, p1: int = 0, p2: int = 0, p3: int = 0) -> np.ndarray:
    return _pad(a, (0, p0, 0, p1, 0, p2, 0, p3), "wrap")


def timestep_embedding(timesteps: ArrayLike, dim: int, max_period: int = 10000) -> np.ndarray:
    """[n] -> [n, dim]: cos(t * f_j) for j < dim // 2, then sin(t * f_j), f_j = max_period^(-j / half);
    an odd dim ends with a 0."""
    t = np.asarray(timesteps, dtype=np.float64).reshape(-1, 1)
    half = dim // 2
    freqs = np.exp(-math.log(max_period) * np.arange(half) / half)
    out = np.zeros((t.shape[0], dim))
    out[:, :half], out[:, half : 2 * half] = np.cos(t * freqs), np.sin(t * freqs)
    return out.astype(np.float32)
