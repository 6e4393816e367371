"""Convolution, pooling, resampling and padding ops."""

from __future__ import annotations

from pyggml import types
from pyggml._args import integer
from pyggml.ops._common import _ARG_ERRORS, _bad_arguments, _guarded, _result, _shape_arg
from pyggml.tensor import Tensor

_I32_MAX = 2**31 - 1


def _ints(op: str, lo: int, **values) -> list[int]:
    """C int arguments in lo..INT32_MAX (cffi would wrap or raise an unnamed error)."""
    return [integer(f"{op}: {name}", v, lo, _I32_MAX) for name, v in values.items()]


def _geometry(op: str, s, p, d) -> list[int]:
    """Strides, paddings, dilations. ggml divides by the stride when it sizes the result (a stride of 0
    kills the process with SIGFPE); its output-size formula is meant for paddings >= 0 and dilations >= 1."""
    return (_ints(op, 1, **s) + _ints(op, 0, **p) + _ints(op, 1, **d))


def _fits(op: str, a, b, s, p, d) -> None:
    """CONV_2D, CONV_2D_DW and CONV_3D size their result without checking it: a kernel wider than the padded data
    would make a tensor of negative extent."""
    if isinstance(a, Tensor) and isinstance(b, Tensor):
        for i in range(len(s)):
            k, n = a.ptr.ne[i], b.ptr.ne[i]
            span = n + 2 * p[i] - d[i] * (k - 1) - 1
            if (-(-span // s[i]) if span < 0 else span // s[i]) + 1 <= 0:  # ggml's C division rounds toward 0
                raise ValueError(f"{op}: b too small compared to a: dim {i} has {n} elements (padding {p[i]} "
                                 f"each side) for a kernel of {k} (dilation {d[i]})")


def _call(op: str, c_name: str, ctx, tensors: dict, *args) -> Tensor:
    try:
        r = _guarded(c_name)(ctx.ptr, *(t.ptr for t in tensors.values()), *args)
    except _ARG_ERRORS as e:
        raise _bad_arguments(op, e, ctx, **tensors) from None
    return _result(ctx, r, op, *tensors.values())


# --- im2col and the convolutions built on it ------------------------------------------------------------------
def im2col(ctx, a: Tensor, b: Tensor, s0: int, s1: int, p0: int, p1: int, d0: int, d1: int, is_2D: bool,
           dst_type=types.Type.F32):
    """Columns of data b for kernel a (only a's shape is read): [IC*KH*KW, OW, OH, N] (2-D) or
    [IC*K, OW, N] (1-D)."""
    if not isinstance(is_2D, bool):
        raise TypeError(f"im2col: is_2D must be a bool, got {type(is_2D).__name__}")
    if is_2D:
        g = _geometry("im2col", dict(s0=s0, s1=s1), dict(p0=p0, p1=p1), dict(d0=d0, d1=d1))
    else:  # dim 1's geometry is not read (ggml's own conv_1d passes zeros)
        g = _geometry("im2col", dict(s0=s0), dict(p0=p0), dict(d0=d0))
        g = [g[0], *_ints("im2col", 0, s1=s1), g[1], *_ints("im2col", 0, p1=p1), g[2], *_ints("im2col", 0, d1=d1)]
    try:
        t = int(types.as_type(dst_type))
    except (TypeError, ValueError, KeyError) as e:
        raise TypeError(f"im2col: dst_type must be a ggml type, got {dst_type!r}") from e
    return _call("im2col", "im2col", ctx, dict(a=a, b=b), *g, is_2D, t)


def im2col_3d(ctx, a: Tensor, b: Tensor, IC: int, s0: int, s1: int, s2: int, p0: int, p1: int, p2: int,
              d0: int, d1: int, d2: int, dst_type=types.Type.F32):
    """3-D columns of b ([W, H, D, IC*N]) for kernel a ([KW, KH, KD, IC*OC]): [IC*KD*KH*KW, OW, OH, OD*N]."""
    ic = _ints("im2col_3d", 1, IC=IC)
    g = _geometry("im2col_3d", dict(s0=s0, s1=s1, s2=s2), dict(p0=p0, p1=p1, p2=p2), dict(d0=d0, d1=d1, d2=d2))
    _channels("im2col_3d", a, b, ic[0])
    try:
        t = int(types.as_type(dst_type))
    except (TypeError, ValueError, KeyError) as e:
        raise TypeError(f"im2col_3d: dst_type must be a ggml type, got {dst_type!r}") from e
    return _call("im2col_3d", "im2col_3d", ctx, dict(a=a, b=b), *ic, *g, t)


def _channels(op: str, a, b, IC: int) -> None:
    """ggml splits a's and b's dim 3 into IC channels without checking they divide it: the rest would be
    silently dropped."""
    for name, t in (("a", a), ("b", b)):
        if isinstance(t, Tensor) and t.ptr.ne[3] % IC:
            raise ValueError(f"{op}: {name}'s ne[3] ({t.ptr.ne[3]}) must be a multiple of IC ({IC})")


def conv_3d(ctx, a: Tensor, b: Tensor, IC: int, s0: int, s1: int, s2: int, p0: int, p1: int, p2: int,
            d0: int, d1: int, d2: int):
    """a: kernel [KW, KH, KD, IC*OC] (oc outer), b: data [W, H, D, IC*N] -> [OW, OH, OD, OC*N]."""
    (ic,) = _ints("conv_3d", 1, IC=IC)
    g = _geometry("conv_3d", dict(s0=s0, s1=s1, s2=s2), dict(p0=p0, p1=p1, p2=p2), dict(d0=d0, d1=d1, d2=d2))
    _channels("conv_3d", a, b, ic)
    return _call("conv_3d", "conv_3d", ctx, dict(a=a, b=b), ic, *g)


def conv_3d_direct(ctx, a: Tensor, b: Tensor, s0: int, s1: int, s2: int, p0: int, p1: int, p2: int,
                   d0: int, d1: int, d2: int, c: int, n: int, oc: int):
    """CONV_3D: a [KW, KH, KD, c*oc], b [W, H, D, c*n] -> [OW, OH, OD, oc*n] (F32)."""
    cno = _ints("conv_3d_direct", 1, c=c, n=n, oc=oc)
    g = _geometry("conv_3d_direct", dict(s0=s0, s1=s1, s2=s2), dict(p0=p0, p1=p1, p2=p2), dict(d0=d0, d1=d1, d2=d2))
    _fits("conv_3d_direct", a, b, g[0:3], g[3:6], g[6:9])
    return _call("conv_3d_direct", "conv_3d_direct", ctx, dict(a=a, b=b), *g, *cno)


def conv_1d(ctx, a: Tensor, b: Tensor, s0: int, p0: int, d0: int):
    """a: kernel [K, IC, OC], b: data [W, IC, 1] -> [OW, OC, 1]."""
    # ggml_conv_1d's last reshape reads the product [OW*N, OC] as [OW, OC, N]: for N > 1 batches and
    # channels come out interleaved, on every backend (docs/findings.md)
    if isinstance(b, Tensor) and b.ptr.ne[2] * b.ptr.ne[3] > 1:
        raise ValueError(f"conv_1d: b must hold one sequence (ne[2] == ne[3] == 1), got ne={b.ne}: ggml's conv_1d "
                         "mixes the batches of more")
    return _call("conv_1d", "conv_1d", ctx, dict(a=a, b=b),
                 *_geometry("conv_1d", dict(s0=s0), dict(p0=p0), dict(d0=d0)))


def conv_1d_dw(ctx, a: Tensor, b: Tensor, s0: int, p0: int, d0: int):
    """Depthwise: a [K, 1, C], b [W, C, N] -> [OW, C, N]."""
    return _call("conv_1d_dw", "conv_1d_dw", ctx, dict(a=a, b=b),
                 *_geometry("conv_1d_dw", dict(s0=s0), dict(p0=p0), dict(d0=d0)))


def conv_2d(ctx, a: Tensor, b: Tensor, s0: int, s1: int, p0: int, p1: int, d0: int, d1: int):
    """a: kernel [KW, KH, IC, OC], b: data [W, H, IC, N] -> [OW, OH, OC, N]."""
    return _call("conv_2d", "conv_2d", ctx, dict(a=a, b=b),
                 *_geometry("conv_2d", dict(s0=s0, s1=s1), dict(p0=p0, p1=p1), dict(d0=d0, d1=d1)))


def conv_2d_dw(ctx, a: Tensor, b: Tensor, s0: int, s1: int, p0: int, p1: int, d0: int, d1: int):
    """Depthwise: a [KW, KH, 1, C], b [W, H, C, N] -> [OW, OH, C, N]."""
    return _call("conv_2d_dw", "conv_2d_dw", ctx, dict(a=a, b=b),
                 *_geometry("conv_2d_dw", dict(s0=s0, s1=s1), dict(p0=p0, p1=p1), dict(d0=d0, d1=d1)))


def conv_2d_direct(ctx, a: Tensor, b: Tensor, s0: int, s1: int, p0: int, p1: int, d0: int, d1: int):
    """CONV_2D: a [KW, KH, IC, OC], b [W, H, IC, N] -> [OW, OH, OC, N] of b's type."""
    g = _geometry("conv_2d_direct", dict(s0=s0, s1=s1), dict(p0=p0, p1=p1), dict(d0=d0, d1=d1))
    _fits("conv_2d_direct", a, b, g[0:2], g[2:4], g[4:6])
    return _call("conv_2d_direct", "conv_2d_direct", ctx, dict(a=a, b=b), *g)


def conv_2d_dw_direct(ctx, a: Tensor, b: Tensor, stride0: int, stride1: int, pad0: int, pad1: int,
                      dilation0: int, dilation1: int):
    """CONV_2D_DW: a [KW, KH, 1, C], b [W, H, C, N] -> [OW, OH, C, N]."""
    g = _geometry("conv_2d_dw_direct", dict(stride0=stride0, stride1=stride1), dict(pad0=pad0, pad1=pad1),
                  dict(dilation0=dilation0, dilation1=dilation1))
    _fits("conv_2d_dw_direct", a, b, g[0:2], g[2:4], g[4:6])
    return _call("conv_2d_dw_direct", "conv_2d_dw_direct", ctx, dict(a=a, b=b), *g)


def conv_transpose_1d(ctx, a: Tensor, b: Tensor, s0: int, p0: int = 0, d0: int = 1):
    """a: kernel [K, OC, IC], b: data [W, IC] -> [(W-1)*s0 + K, OC]; ggml takes p0 == 0 and d0 == 1 only."""
    return _call("conv_transpose_1d", "conv_transpose_1d", ctx, dict(a=a, b=b),
                 *_geometry("conv_transpose_1d", dict(s0=s0), dict(p0=p0), dict(d0=d0)))


def conv_transpose_2d_p0(ctx, a: Tensor, b: Tensor, stride: int):
    """a: kernel [KW, KH, OC, IC], b: data [W, H, IC, N] -> [(W-1)*s + KW, (H-1)*s + KH, OC, N]."""
    return _call("conv_transpose_2d_p0", "conv_transpose_2d_p0", ctx, dict(a=a, b=b),
                 *_ints("conv_transpose_2d_p0", 1, stride=stride))


def col2im_1d(ctx, a: Tensor, s0: int, oc: int, p0: int):
    """Overlap-add of columns a [K*OC, T_in] (t_in*s0 + k lands on t): [(T_in-1)*s0 + K - 2*p0, OC]."""
    return _call("col2im_1d", "col2im_1d", ctx, dict(a=a), *_ints("col2im_1d", 0, s0=s0, oc=oc, p0=p0))


# --- pooling -------------------------------------------------------------------------------------------------------
_POOL_OPS = (0, 1)  # GGML_OP_POOL_MAX, GGML_OP_POOL_AVG; the kernels abort on any other value


def _pool_op(op: str, value) -> int:
    v = integer(f"{op}: op", value)
    if v not in _POOL_OPS:
        raise ValueError(f"{op}: op must be 0 (max) or 1 (avg), got {v}")
    return v


def pool_1d(ctx, a: Tensor, op: int, k0: int, s0: int, p0: int):
    """Max (op 0) or average (op 1, over the window's elements inside a) of windows of a's rows."""
    o = _pool_op("pool_1d", op)
    k, s = _ints("pool_1d", 1, k0=k0, s0=s0)
    (p,) = _ints("pool_1d", 0, p0=p0)
    if p >= k:  # a window of padding only: max would be -FLT_MAX
        raise ValueError(f"pool_1d: p0 ({p}) must be smaller than k0 ({k})")
    return _call("pool_1d", "pool_1d", ctx, dict(a=a), o, k, s, p)


def pool_2d(ctx, a: Tensor, op: int, k0: int, k1: int, s0: int, s1: int, p0: int, p1: int):
    """Max (op 0) or average (op 1, over the whole k0*k1 window, padding counted) over dims 0 and 1."""
    o = _pool_op("pool_2d", op)
    k0, k1, s0, s1 = _ints("pool_2d", 1, k0=k0, k1=k1, s0=s0, s1=s1)
    # ggml takes float paddings but stores them as ints in op_params: only whole paddings mean what they say
    p0, p1 = _ints("pool_2d", 0, p0=p0, p1=p1)
    if p0 >= k0 or p1 >= k1:  # a window of padding only
        raise ValueError(f"pool_2d: paddings ({p0}, {p1}) must be smaller than the kernel ({k0}, {k1})")
    return _call("pool_2d", "pool_2d", ctx, dict(a=a), o, k0, k1, s0, s1, float(p0), float(p1))


# --- resampling and padding ---------------------------------------------------------------------------------------
def pad_reflect_1d(ctx, a: Tensor, p0: int, p1: int):
    """Reflect-pad dim 0 by p0 before and p1 after (each < ne[0])."""
    return _call("pad_reflect_1d", "pad_reflect_1d", ctx, dict(a=a), *_ints("pad_reflect_1d", 0, p0=p0, p1=p1))


_SCALE_MODES = 3  # nearest, bilinear, bicubic (ggml asserts the mode byte; flags ride in the bits above)


def upscale(ctx, a: Tensor, scale_factor: int, mode: int = 0):
    """Scale dims 0 and 1 by an integer factor (> 1); mode GGML_SCALE_MODE_* [| GGML_SCALE_FLAG_*]."""
    f = _ints("upscale", 2, scale_factor=scale_factor)
    (m,) = _ints("upscale", 0, mode=mode)
    return _call("upscale", "upscale", ctx, dict(a=a), *f, m)


def upscale_ext(ctx, a: Tensor, ne0: int, ne1: int, ne2: int, ne3: int, mode: int = 0):
    """Resample a to [ne0, ne1, ne2, ne3] (ggml's deprecated name of interpolate)."""
    ne = _shape_arg("upscale_ext", (ne0, ne1, ne2, ne3))
    (m,) = _ints("upscale_ext", 0, mode=mode)
    return _call("upscale_ext", "upscale_ext", ctx, dict(a=a), *_ints("upscale_ext", 1, ne0=ne[0], ne1=ne[1], ne2=ne[2],
                                                                       ne3=ne[3]), m)


def interpolate(ctx, a: Tensor, ne0: int, ne1: int, ne2: int, ne3: int, mode: int = 0):
    """Resample a to [ne0, ne1, ne2, ne3]: nearest for every dim, or bilinear/bicubic over dims 0 and 1
    (nearest over 2 and 3); GGML_SCALE_FLAG_ALIGN_CORNERS (256) maps corner to corner."""
    ne = _shape_arg("interpolate", (ne0, ne1, ne2, ne3))
    (m,) = _ints("interpolate", 0, mode=mode)
    if any(n > _I32_MAX for n in ne):  # the kernels index with int
        raise ValueError(f"interpolate: ne must fit in int32, got {ne}")
    return _call("interpolate", "interpolate", ctx, dict(a=a), *ne, m)


# the family's op wrappers, listed so that type checkers see them (tests/test_types.py keeps it exact)
__all__ = [
    "col2im_1d", "conv_1d", "conv_1d_dw", "conv_2d", "conv_2d_direct", "conv_2d_dw",
    "conv_2d_dw_direct", "conv_3d", "conv_3d_direct", "conv_transpose_1d", "conv_transpose_2d_p0",
    "im2col", "im2col_3d", "interpolate", "pad_reflect_1d", "pool_1d", "pool_2d", "upscale",
    "upscale_ext",
]
