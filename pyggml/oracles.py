"""NumPy oracles: each op written from its definition in ggml.h, never by calling ggml.

Arrays are in NumPy order (ggml's ne reversed): ggml dim d is NumPy axis -1-d. Every oracle
takes and returns plain arrays; arguments that mirror a C function keep the C meaning
(ggml dims, ggml-order shapes `ne`, byte strides `nb`, byte offsets).
"""

from __future__ import annotations

import math

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


def broadcast_to(b: np.ndarray, shape) -> np.ndarray:
    """ggml's repeat rule: b tiled so every dim reaches a's (a multiple of b's)."""
    b4 = b.reshape((1,) * (len(shape) - b.ndim) + b.shape)
    return np.tile(b4, [s // n for s, n in zip(shape, b4.shape)])


# --- element-wise binary (b repeats to a's shape, result has a's type) ----------------------
def add(a, b):
    return _f32(a) + broadcast_to(_f32(b), a.shape)


def sub(a, b):
    return _f32(a) - broadcast_to(_f32(b), a.shape)


def mul(a, b):
    return _f32(a) * broadcast_to(_f32(b), a.shape)


def div(a, b):
    return _f32(a) / broadcast_to(_f32(b), a.shape)


def scale(a, s):
    return _f32(a) * np.float32(s)


def clamp(a, lo, hi):
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
    def op(a):
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


def leaky_relu(a, negative_slope=0.01):
    x = np.asarray(a, dtype=np.float64)
    return np.where(x > 0, x, negative_slope * x).astype(np.float32)


# --- reductions -------------------------------------------------------------------------------
def sum(a):  # noqa: A001
    """ggml_sum: every element, a 1-element tensor."""
    return np.array([np.sum(np.asarray(a, dtype=np.float64))], dtype=np.float32)


def sum_rows(a):
    """ggml_sum_rows: ne -> [1, ne1, ne2, ne3]."""
    return np.sum(np.asarray(a, dtype=np.float64), axis=-1, keepdims=True).astype(np.float32)


def mean(a):
    return np.mean(np.asarray(a, dtype=np.float64), axis=-1, keepdims=True).astype(np.float32)


def argmax(a):
    """ggml_argmax of a matrix: per row, the index of the maximum (the last one on ties), I32 [ne1]."""
    x = np.asarray(a).reshape(-1, np.asarray(a).shape[-1])
    n = x.shape[-1]
    return (n - 1 - np.argmax(x[:, ::-1], axis=-1)).astype(np.int32)


# --- norms, softmax -----------------------------------------------------------------------------
def norm(a, eps=1e-5):
    x = np.asarray(a, dtype=np.float64)
    m = x.mean(axis=-1, keepdims=True)
    var = ((x - m) ** 2).mean(axis=-1, keepdims=True)
    return ((x - m) / np.sqrt(var + eps)).astype(np.float32)


def rms_norm(a, eps=1e-6):
    x = np.asarray(a, dtype=np.float64)
    return (x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps)).astype(np.float32)


def l2_norm(a, eps=1e-12):
    x = np.asarray(a, dtype=np.float64)
    return (x / np.maximum(np.sqrt((x * x).sum(axis=-1, keepdims=True)), eps)).astype(np.float32)


def soft_max_ext(a, mask=None, scale=1.0, max_bias=0.0):
    """softmax over ne0 of a*scale + slope*mask; mask rows i1 map to a's rows i1 (mask.ne[1] >= a.ne[1]),
    its dims 2 and 3 broadcast (repeat) over a's. ALiBi slopes per head (a's dim 2) when max_bias > 0."""
    x4 = _as4(np.asarray(a, dtype=np.float64)) * scale
    if mask is not None:
        m4 = _as4(np.asarray(mask, dtype=np.float64))[:, :, :x4.shape[2], :]
        m4 = np.tile(m4, (x4.shape[0] // m4.shape[0], x4.shape[1] // m4.shape[1], 1, 1))
        if max_bias > 0:
            n_head = x4.shape[1]
            n_log2 = 1 << int(math.floor(math.log2(n_head)))
            m0 = 2.0 ** (-max_bias / n_log2)
            m1 = 2.0 ** (-(max_bias / 2.0) / n_log2)
            slopes = np.array([m0 ** (h + 1) if h < n_log2 else m1 ** (2 * (h - n_log2) + 1)
                               for h in range(n_head)])
            m4 = m4 * slopes[None, :, None, None]
        x4 = x4 + m4
    with np.errstate(invalid="ignore"):
        x4 = x4 - x4.max(axis=-1, keepdims=True)
        e = np.exp(x4)
        out = e / e.sum(axis=-1, keepdims=True)
    return out.reshape(np.asarray(a).shape).astype(np.float32)


def soft_max(a):
    return soft_max_ext(a)


def diag_mask_inf(a, n_past):
    """Row i1, column i0 set to -inf where i0 > n_past + i1 (causal mask)."""
    x = np.array(a, dtype=np.float32)
    rows, cols = x.shape[-2] if x.ndim > 1 else 1, x.shape[-1]
    i1, i0 = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    m = i0 > n_past + i1
    x4 = _as4(x).copy()
    x4[..., m] = -np.inf
    return x4.reshape(x.shape)


def rope_ext(a, pos, n_dims, mode=0, freq_base=10000.0, freq_scale=1.0, attn_factor=1.0, freq_factors=None):
    """RoPE, ext_factor 0 (no YaRN ramp). a: NumPy [ne3, ne2 (tokens), ne1 (heads), ne0]; pos[ne2].
    Pair k (k < n_dims/2) rotates by pos * freq_scale * base^(-2k/n_dims) / freq_factors[k]; mode 0
    (normal) pairs elements (2k, 2k+1), mode 2 (neox) pairs (k, k + n_dims/2). Elements past n_dims
    pass through."""
    x4 = _as4(np.asarray(a, dtype=np.float64))
    out = x4.copy()
    half = n_dims // 2
    k = np.arange(half, dtype=np.float64)
    inv = freq_base ** (-2.0 * k / n_dims)
    if freq_factors is not None:
        inv = inv / np.asarray(freq_factors, dtype=np.float64)[:half]
    theta = freq_scale * np.asarray(pos, dtype=np.float64)[:, None] * inv[None, :]  # [ne2, half]
    c = (np.cos(theta) * attn_factor)[None, :, None, :]
    s = (np.sin(theta) * attn_factor)[None, :, None, :]
    if mode == 0:
        i0, i1 = 2 * np.arange(half), 2 * np.arange(half) + 1
    elif mode == 2:
        i0, i1 = np.arange(half), np.arange(half) + half
    else:
        raise ValueError(f"rope_ext oracle: mode {mode} not modelled")
    x0, x1 = x4[..., i0], x4[..., i1]
    out[..., i0] = x0 * c - x1 * s
    out[..., i1] = x0 * s + x1 * c
    return out.reshape(np.asarray(a).shape).astype(np.float32)


# --- matrix -----------------------------------------------------------------------------------------
def mul_mat(a, b):
    """ggml_mul_mat: a [.., M, K], b [.., N, K] -> [.., N, M], out = b @ a^T per matrix. Over dims 2 and 3
    a broadcasts to b by repetition of each matrix: b's matrix i12 uses a's i12 // (ne12/ne02)."""
    a4 = _as4(np.asarray(a, dtype=np.float64))
    b4 = _as4(np.asarray(b, dtype=np.float64))
    a4 = np.repeat(np.repeat(a4, b4.shape[0] // a4.shape[0], axis=0), b4.shape[1] // a4.shape[1], axis=1)
    out = b4 @ np.swapaxes(a4, -1, -2)
    return _lead(out.astype(np.float32))


def ssm_conv(sx, c):
    """ggml_ssm_conv: sx [n_s, d_inner, d_conv-1+n_t], c [d_inner, d_conv] -> [n_s, n_t, d_inner];
    out[s, t, i] = sum_k sx[s, i, t+k] * c[i, k]."""
    sx = np.asarray(sx, dtype=np.float64)
    sx = sx.reshape((1,) * (3 - sx.ndim) + sx.shape)
    c = np.asarray(c, dtype=np.float64)
    d_conv = c.shape[-1]
    n_t = sx.shape[-1] - d_conv + 1
    win = np.stack([sx[:, :, t:t + d_conv] for t in range(n_t)], axis=1)  # [n_s, n_t, d_inner, d_conv]
    return np.einsum("stik,ik->sti", win, c).astype(np.float32)


# --- index ops ------------------------------------------------------------------------------------------
def get_rows(a, b):
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


def set_rows(a, b, c):
    """a with rows replaced: a[i3, i2, c[i3 % c.ne2, i2 % c.ne1, i]] = b[i3, i2, i] (values converted to a's type
    by the caller's encoding)."""
    a4 = _as4(np.array(a, dtype=np.float32))
    b4 = _as4(np.asarray(b, dtype=np.float32))
    c3 = np.asarray(c, dtype=np.int64)
    c3 = c3.reshape((1,) * (3 - c3.ndim) + c3.shape)
    for i3 in range(b4.shape[0]):
        for i2 in range(b4.shape[1]):
            idx = c3[i3 % c3.shape[0], i2 % c3.shape[1]]
            a4[i3, i2, idx] = b4[i3, i2]
    return a4.reshape(np.asarray(a).shape)


def arange(start, stop, step=1.0):
    n = int(math.ceil((np.float32(stop) - np.float32(start)) / np.float32(step)))
    return (np.float32(start) + np.float32(step) * np.arange(n, dtype=np.float32)).astype(np.float32)


def argsort(a, order="asc"):
    """Per row (ne0), the indices that sort it, I32; order 'asc' or 'desc' (or SortOrder / 0 / 1)."""
    desc = str(getattr(order, "name", order)).lower() in ("desc", "1")
    x = np.asarray(a, dtype=np.float64)
    idx = np.argsort(-x if desc else x, axis=-1, kind="stable")
    return idx.astype(np.int32)


# --- data movement ------------------------------------------------------------------------------------------
def cpy(a, dtype=np.float32):
    """ggml_cpy's values: a's elements in order, converted (the caller gives the destination's NumPy shape)."""
    return np.asarray(a).astype(dtype)


def dup(a):
    return np.array(a)


def cont(a):
    return np.ascontiguousarray(a)


def reshape(a, ne):
    """ggml_reshape_Nd / cont_Nd: the same elements in ggml shape ne (ne[0] innermost)."""
    return np.asarray(a).reshape(tuple(reversed([int(n) for n in ne])))


cont_nd = reshape


def permute(a, axis0, axis1, axis2, axis3):
    """ggml_permute: source dim i becomes destination dim axis_i."""
    x4 = _as4(np.asarray(a))
    axes = (axis0, axis1, axis2, axis3)
    src_of = [0] * MAX_DIMS  # destination dim -> source dim
    for i, d in enumerate(axes):
        src_of[d] = i
    # NumPy axis of destination dim d is 3-d; it takes source dim src_of[d], NumPy axis 3-src_of[d]
    return _lead(np.transpose(x4, [_axis(src_of[_axis(n)]) for n in range(MAX_DIMS)]))


def transpose(a):
    """ggml_transpose: swap dims 0 and 1."""
    return permute(a, 1, 0, 2, 3)


def concat(a, b, dim):
    return _lead(np.concatenate([_as4(a), _as4(b)], axis=_axis(dim)))


def repeat(a, ne):
    """Repeat (tile) a to ggml shape ne."""
    shape = tuple(reversed([int(n) for n in ne]))
    return broadcast_to(np.asarray(a), shape)


def pad(a, p0=0, p1=0, p2=0, p3=0):
    """ggml_pad: zeros appended at the end of each dim."""
    x4 = _as4(np.asarray(a))
    return _lead(np.pad(x4, [(0, p3), (0, p2), (0, p1), (0, p0)]))


def view(a, ne, nb, offset=0, itemsize=None):
    """A strided view of a's bytes (ggml_view_Nd / view_nd): ne and nb in ggml order, nb[0] given or the
    element size, offset in bytes. Returned contiguous, NumPy order."""
    x = np.ascontiguousarray(a)
    itemsize = itemsize or x.itemsize
    ne = [int(n) for n in ne]
    nb = [int(n) for n in nb]
    if len(nb) == len(ne) - 1:
        nb = [itemsize] + nb
    flat = x.reshape(-1)
    out = np.lib.stride_tricks.as_strided(flat[offset // itemsize:], shape=tuple(reversed(ne)),
                                          strides=tuple(reversed(nb)), writeable=False)
    return _lead(np.array(out))


def view_1d(a, ne0, offset=0):
    return view(a, [ne0], [], offset)


def view_2d(a, ne0, ne1, nb1, offset=0):
    return view(a, [ne0, ne1], [nb1], offset)


def view_3d(a, ne0, ne1, ne2, nb1, nb2, offset=0):
    return view(a, [ne0, ne1, ne2], [nb1, nb2], offset)


def view_4d(a, ne0, ne1, ne2, ne3, nb1, nb2, nb3, offset=0):
    return view(a, [ne0, ne1, ne2, ne3], [nb1, nb2, nb3], offset)


def view_nd(a, ne, nb, offset=0):
    return view(a, ne, nb, offset)
