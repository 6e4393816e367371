"""Convolution, pooling, resampling and padding ops."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyggml import types
from pyggml._args import integer
from pyggml.ops._common import (
    _ARG_ERRORS,
    _bad_arguments,
    _guarded,
    _result,
    _shape_arg,
)
from pyggml.tensor import Tensor
from pyggml.types import TypeLike

if TYPE_CHECKING:
    from pyggml.context import Context

_I32_MAX = 2**31 - 1


def _ints(op: str, lo: int, **values) -> list[int]:
    """C int arguments in lo..INT32_MAX (cffi would wrap or raise an unnamed error)."""
    return [integer(f"{op}: {name}", v, lo, _I32_MAX) for name, v in values.items()]


def _geometry(op: str, s, p, d) -> list[int]:
    """Strides, paddings, dilations. ggml divides by the stride when it sizes the result (a stride of 0
    kills the process with SIGFPE); its output-size formula is meant for paddings >= 0 and dilations >= 1."""
    return _ints(op, 1, **s) + _ints(op, 0, **p) + _ints(op, 1, **d)


def _fits(op: str, a, b, s, p, d) -> None:
    """CONV_2D, CONV_2D_DW and CONV_3D size their result without checking it: a kernel wider than the padded data
    would make a tensor of negative extent."""
    if isinstance(a, Tensor) and isinstance(b, Tensor):
        for i in range(len(s)):
            k, n = a.ptr.ne[i], b.ptr.ne[i]
            span = n + 2 * p[i] - d[i] * (k - 1) - 1
            if (-(-span // s[i]) if span < 0 else span // s[i]) + 1 <= 0:  # ggml's C division rounds toward 0
                raise ValueError(
                    f"{op}: b too small compared to a: dim {i} has {n} elements (padding {p[i]} "
                    f"each side) for a kernel of {k} (dilation {d[i]})"
                )


def _call(op: str, c_name: str, ctx, tensors: dict, *args) -> Tensor:
    try:
        r = _guarded(c_name)(ctx.ptr, *(t.ptr for t in tensors.values()), *args)
    except _ARG_ERRORS as e:
        raise _bad_arguments(op, e, ctx, **tensors) from None
    return _result(ctx, r, op, *tensors.values())


# --- im2col and the convolutions built on it ------------------------------------------------------------------
def im2col(
    ctx: Context,
    a: Tensor,
    b: Tensor,
    s0: int,
    s1: int,
    p0: int,
    p1: int,
    d0: int,
    d1: int,
    is_2D: bool,
    dst_type: TypeLike = types.Type.F32,
) -> Tensor:
    """ggml_im2col: the patches of b a convolution with kernel a reads, one column per output position
    (convolution = im2col + mul_mat).

    Shapes in ggml's ne order (NumPy's reversed):
    a: the kernel, [KW, KH, IC, OC] (2-D) or [K, IC, OC] (1-D); only its shape is read.
    b: the data, [W, H, IC, N] (2-D) or [W, IC, N] (1-D).
    s0, s1: strides along W and H, >= 1. p0, p1: zero padding on each side, >= 0. d0, d1: dilations,
        >= 1 (the *1 values are ignored when 1-D).
    is_2D: True for a 2-D convolution's patches, False for 1-D.
    dst_type: the result's type, F32 (default) or F16.
    Result: [IC*KH*KW, OW, OH, N] (2-D) or [IC*K, OW, N] (1-D), OW = (W + 2*p0 - d0*(KW-1) - 1)//s0 + 1.
    Precision: exact copies (rounded to F16 when dst_type is F16).
    """
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


def im2col_3d(
    ctx: Context,
    a: Tensor,
    b: Tensor,
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
    dst_type: TypeLike = types.Type.F32,
) -> Tensor:
    """ggml_im2col_3d: the 3-D patches of b a conv_3d with kernel a reads.

    a: the kernel, [KW, KH, KD, IC*OC] (ggml ne order); only its shape is read.
    b: the data, [W, H, D, IC*N].
    IC: input channels (divides a's and b's ne3).
    s0, s1, s2: strides along W, H, D, >= 1. p0, p1, p2: zero padding, >= 0. d0, d1, d2: dilations, >= 1.
    dst_type: the result's type, F32 (default) or F16.
    Result: [IC*KD*KH*KW, OW, OH, OD*N]. Exact (or rounded to F16).
    """
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


def conv_3d(
    ctx: Context,
    a: Tensor,
    b: Tensor,
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
) -> Tensor:
    """ggml_conv_3d: 3-D convolution (cross-correlation, as PyTorch's conv3d), by im2col_3d + mul_mat.

    a: the kernel, [KW, KH, KD, IC*OC] (ggml ne order; NumPy (OC*IC, KD, KH, KW)), F32 or F16.
    b: the data, [W, H, D, IC*N] (NumPy (N*IC, D, H, W)), F32.
    IC: input channels. s0, s1, s2: strides, >= 1. p0, p1, p2: zero padding, >= 0. d0, d1, d2: dilations.
    Result: F32 [OW, OH, OD, OC*N].
    Precision: as mul_mat; the patches are of a's type (an F16 kernel rounds b to F16).
    """
    (ic,) = _ints("conv_3d", 1, IC=IC)
    g = _geometry("conv_3d", dict(s0=s0, s1=s1, s2=s2), dict(p0=p0, p1=p1, p2=p2), dict(d0=d0, d1=d1, d2=d2))
    _channels("conv_3d", a, b, ic)
    return _call("conv_3d", "conv_3d", ctx, dict(a=a, b=b), ic, *g)


def conv_3d_direct(
    ctx: Context,
    a: Tensor,
    b: Tensor,
    s0: int,
    s1: int,
    s2: int,
    p0: int,
    p1: int,
    p2: int,
    d0: int,
    d1: int,
    d2: int,
    c: int,
    n: int,
    oc: int,
) -> Tensor:
    """ggml_conv_3d_direct: 3-D convolution by ggml's direct CONV_3D kernel (no im2col buffer).

    a: the kernel, [KW, KH, KD, c*oc] (ggml ne order). b: the data, [W, H, D, c*n].
    s0, s1, s2: strides, >= 1. p0, p1, p2: zero padding, >= 0. d0, d1, d2: dilations, >= 1.
    c: input channels, n: batch size, oc: output channels.
    Result: F32 [OW, OH, OD, oc*n]. Precision: F32 accumulation (F16 a: products of F16 values).
    """
    cno = _ints("conv_3d_direct", 1, c=c, n=n, oc=oc)
    g = _geometry("conv_3d_direct", dict(s0=s0, s1=s1, s2=s2), dict(p0=p0, p1=p1, p2=p2), dict(d0=d0, d1=d1, d2=d2))
    _fits("conv_3d_direct", a, b, g[0:3], g[3:6], g[6:9])
    return _call("conv_3d_direct", "conv_3d_direct", ctx, dict(a=a, b=b), *g, *cno)


def conv_1d(ctx: Context, a: Tensor, b: Tensor, s0: int, p0: int, d0: int) -> Tensor:
    """ggml_conv_1d: 1-D convolution (cross-correlation, as PyTorch's conv1d), by im2col + mul_mat.

    a: the kernel, [K, IC, OC] (ggml ne order; NumPy (OC, IC, K)), F32 or F16.
    b: the data, [W, IC, 1] (one sequence: ggml's conv_1d mixes the batches of more, findings entry 24).
    s0: stride, >= 1. p0: zero padding on each side, >= 0. d0: dilation, >= 1.
    Result: F32 [OW, OC, 1], OW = (W + 2*p0 - d0*(K-1) - 1)//s0 + 1.
    Precision: as mul_mat; an F16 kernel rounds the patches of b to F16.
    """
    # ggml_conv_1d's last reshape reads the product [OW*N, OC] as [OW, OC, N]: for N > 1 batches and
    # channels come out interleaved, on every backend (docs/findings.md)
    if isinstance(b, Tensor) and b.ptr.ne[2] * b.ptr.ne[3] > 1:
        raise ValueError(
            f"conv_1d: b must hold one sequence (ne[2] == ne[3] == 1), got ne={b.ne}: ggml's conv_1d "
            "mixes the batches of more"
        )
    return _call(
        "conv_1d", "conv_1d", ctx, dict(a=a, b=b), *_geometry("conv_1d", dict(s0=s0), dict(p0=p0), dict(d0=d0))
    )


def conv_1d_dw(ctx: Context, a: Tensor, b: Tensor, s0: int, p0: int, d0: int) -> Tensor:
    """ggml_conv_1d_dw: depthwise 1-D convolution: channel c convolved with kernel c only.

    a: the kernels, [K, 1, C] (ggml ne order). b: the data, [W, C, N].
    s0: stride, >= 1. p0: zero padding on each side, >= 0. d0: dilation, >= 1.
    Result: [OW, C, N]. Precision: as mul_mat (an F16 kernel rounds b to F16).
    """
    return _call(
        "conv_1d_dw", "conv_1d_dw", ctx, dict(a=a, b=b), *_geometry("conv_1d_dw", dict(s0=s0), dict(p0=p0), dict(d0=d0))
    )


def conv_2d(ctx: Context, a: Tensor, b: Tensor, s0: int, s1: int, p0: int, p1: int, d0: int, d1: int) -> Tensor:
    """ggml_conv_2d: 2-D convolution (cross-correlation, as PyTorch's conv2d), by im2col + mul_mat.

    a: the kernel, [KW, KH, IC, OC] (ggml ne order; NumPy (OC, IC, KH, KW)), F32 or F16.
    b: the data, [W, H, IC, N] (NumPy (N, IC, H, W)), F32.
    s0, s1: strides along W and H, >= 1. p0, p1: zero padding on each side, >= 0. d0, d1: dilations.
    Result: F32 [OW, OH, OC, N] (NumPy (N, OC, OH, OW)).
    Precision: as mul_mat; an F16 kernel makes F16 patches (b rounded to F16, bound NMSE 1e-5).
    """
    return _call(
        "conv_2d",
        "conv_2d",
        ctx,
        dict(a=a, b=b),
        *_geometry("conv_2d", dict(s0=s0, s1=s1), dict(p0=p0, p1=p1), dict(d0=d0, d1=d1)),
    )


def conv_2d_dw(ctx: Context, a: Tensor, b: Tensor, s0: int, s1: int, p0: int, p1: int, d0: int, d1: int) -> Tensor:
    """ggml_conv_2d_dw: depthwise 2-D convolution (im2col based): channel c with kernel c only.

    a: the kernels, [KW, KH, 1, C] (ggml ne order). b: the data, [W, H, C, N].
    s0, s1: strides, >= 1. p0, p1: zero padding on each side, >= 0. d0, d1: dilations, >= 1.
    Result: [OW, OH, C, N]. Precision: as mul_mat (an F16 kernel rounds b to F16).
    """
    return _call(
        "conv_2d_dw",
        "conv_2d_dw",
        ctx,
        dict(a=a, b=b),
        *_geometry("conv_2d_dw", dict(s0=s0, s1=s1), dict(p0=p0, p1=p1), dict(d0=d0, d1=d1)),
    )


def conv_2d_direct(ctx: Context, a: Tensor, b: Tensor, s0: int, s1: int, p0: int, p1: int, d0: int, d1: int) -> Tensor:
    """ggml_conv_2d_direct: 2-D convolution by ggml's direct CONV_2D kernel (no im2col buffer).

    a: the kernel, [KW, KH, IC, OC] (ggml ne order). b: the data, [W, H, IC, N].
    s0, s1: strides, >= 1. p0, p1: zero padding on each side, >= 0. d0, d1: dilations, >= 1.
    Result: [OW, OH, OC, N], of b's type. Precision: F32 accumulation (within NMSE 1e-7 for F32).
    """
    g = _geometry("conv_2d_direct", dict(s0=s0, s1=s1), dict(p0=p0, p1=p1), dict(d0=d0, d1=d1))
    _fits("conv_2d_direct", a, b, g[0:2], g[2:4], g[4:6])
    return _call("conv_2d_direct", "conv_2d_direct", ctx, dict(a=a, b=b), *g)


def conv_2d_dw_direct(
    ctx: Context, a: Tensor, b: Tensor, stride0: int, stride1: int, pad0: int, pad1: int, dilation0: int, dilation1: int
) -> Tensor:
    """ggml_conv_2d_dw_direct: depthwise 2-D convolution by ggml's direct CONV_2D_DW kernel.

    a: the kernels, [KW, KH, 1, C] (ggml ne order). b: the data, [W, H, C, N].
    stride0, stride1: strides along W and H, >= 1. pad0, pad1: zero padding on each side, >= 0.
    dilation0, dilation1: dilations, >= 1.
    Result: [OW, OH, C, N]. Precision: F32 accumulation.
    """
    g = _geometry(
        "conv_2d_dw_direct",
        dict(stride0=stride0, stride1=stride1),
        dict(pad0=pad0, pad1=pad1),
        dict(dilation0=dilation0, dilation1=dilation1),
    )
    _fits("conv_2d_dw_direct", a, b, g[0:2], g[2:4], g[4:6])
    return _call("conv_2d_dw_direct", "conv_2d_dw_direct", ctx, dict(a=a, b=b), *g)


def conv_transpose_1d(ctx: Context, a: Tensor, b: Tensor, s0: int, p0: int = 0, d0: int = 1) -> Tensor:
    """ggml_conv_transpose_1d: transposed 1-D convolution: every input position x adds a[:, oc, ic]
    at output positions x*s0 + k.

    a: the kernel, [K, OC, IC] (ggml ne order; NumPy (IC, OC, K)), F32 or F16.
    b: the data, [W, IC] (ggml order), F32.
    s0: stride, >= 1. p0, d0: ggml takes only p0 = 0 and d0 = 1.
    Result: F32 [(W-1)*s0 + K, OC]. Precision: F32 accumulation (an F16 kernel rounds b to F16).
    """
    return _call(
        "conv_transpose_1d",
        "conv_transpose_1d",
        ctx,
        dict(a=a, b=b),
        *_geometry("conv_transpose_1d", dict(s0=s0), dict(p0=p0), dict(d0=d0)),
    )


def conv_transpose_2d_p0(ctx: Context, a: Tensor, b: Tensor, stride: int) -> Tensor:
    """ggml_conv_transpose_2d_p0: transposed 2-D convolution without padding.

    a: the kernel, [KW, KH, OC, IC] (ggml ne order), F32 or F16. b: the data, [W, H, IC, N], F32.
    stride: the stride of both dims, >= 1.
    Result: F32 [(W-1)*stride + KW, (H-1)*stride + KH, OC, N]. Precision: F32 accumulation (an F16
    kernel rounds b to F16).
    """
    return _call(
        "conv_transpose_2d_p0",
        "conv_transpose_2d_p0",
        ctx,
        dict(a=a, b=b),
        *_ints("conv_transpose_2d_p0", 1, stride=stride),
    )


def col2im_1d(ctx: Context, a: Tensor, s0: int, oc: int, p0: int) -> Tensor:
    """ggml_col2im_1d: overlap-add of columns (the adjoint of im2col 1-D): column t's entry oc*K + k
    is added at output position t*s0 + k - p0.

    a: the columns, [K*OC, T_in] (ggml ne order).
    s0: stride, >= 0. oc: output channels (K = a.ne[0] / oc). p0: padding cut from each side, >= 0.
    Result: [(T_in-1)*s0 + K - 2*p0, OC]. Precision: F32 sums.
    """
    return _call("col2im_1d", "col2im_1d", ctx, dict(a=a), *_ints("col2im_1d", 0, s0=s0, oc=oc, p0=p0))


# --- pooling -------------------------------------------------------------------------------------------------------
_POOL_OPS = (0, 1)  # GGML_OP_POOL_MAX, GGML_OP_POOL_AVG; the kernels abort on any other value


def _pool_op(op: str, value) -> int:
    v = integer(f"{op}: op", value)
    if v not in _POOL_OPS:
        raise ValueError(f"{op}: op must be 0 (max) or 1 (avg), got {v}")
    return v


def pool_1d(ctx: Context, a: Tensor, op: int, k0: int, s0: int, p0: int) -> Tensor:
    """ggml_pool_1d: max or average pooling along each row (ne0).

    a: any ne (NumPy shape reversed), F32.
    op: 0 max, 1 average (over the window's elements inside a: padding not counted).
    k0: window, >= 1. s0: stride, >= 1. p0: padding on each side, 0 <= p0 < k0.
    Result: ne [(ne0 + 2*p0 - k0)//s0 + 1, ne1, ne2, ne3]. Exact (average: F32 division).
    """
    o = _pool_op("pool_1d", op)
    k, s = _ints("pool_1d", 1, k0=k0, s0=s0)
    (p,) = _ints("pool_1d", 0, p0=p0)
    if p >= k:  # a window of padding only: max would be -FLT_MAX
        raise ValueError(f"pool_1d: p0 ({p}) must be smaller than k0 ({k})")
    return _call("pool_1d", "pool_1d", ctx, dict(a=a), o, k, s, p)


def pool_2d(ctx: Context, a: Tensor, op: int, k0: int, k1: int, s0: int, s1: int, p0: int, p1: int) -> Tensor:
    """ggml_pool_2d: max or average pooling over dims 0 and 1 (W and H; NumPy's last two axes).

    a: ne [W, H, C, N], F32.
    op: 0 max (over the window's elements inside a), 1 average (the sum over the whole k0*k1 window,
        padding counted as 0, divided by k0*k1).
    k0, k1: window along W and H, >= 1. s0, s1: strides, >= 1. p0, p1: padding on each side, < k.
    Result: F32 ne [(W + 2*p0 - k0)//s0 + 1, (H + 2*p1 - k1)//s1 + 1, C, N].
    """
    o = _pool_op("pool_2d", op)
    k0, k1, s0, s1 = _ints("pool_2d", 1, k0=k0, k1=k1, s0=s0, s1=s1)
    # ggml takes float paddings but stores them as ints in op_params: only whole paddings mean what they say
    p0, p1 = _ints("pool_2d", 0, p0=p0, p1=p1)
    if p0 >= k0 or p1 >= k1:  # a window of padding only
        raise ValueError(f"pool_2d: paddings ({p0}, {p1}) must be smaller than the kernel ({k0}, {k1})")
    return _call("pool_2d", "pool_2d", ctx, dict(a=a), o, k0, k1, s0, s1, float(p0), float(p1))


# --- resampling and padding ---------------------------------------------------------------------------------------
def pad_reflect_1d(ctx: Context, a: Tensor, p0: int, p1: int) -> Tensor:
    """ggml_pad_reflect_1d: reflection padding of dim 0 (np.pad(a, ..., mode="reflect") on the last axis).

    a: any ne (NumPy shape reversed), F32.
    p0: elements added before, p1 after, each < ne0 (the edge itself is not repeated).
    Result: ne [ne0 + p0 + p1, ne1, ne2, ne3]. Exact.
    """
    return _call("pad_reflect_1d", "pad_reflect_1d", ctx, dict(a=a), *_ints("pad_reflect_1d", 0, p0=p0, p1=p1))


_SCALE_MODES = 3  # nearest, bilinear, bicubic (ggml asserts the mode byte; flags ride in the bits above)


def upscale(ctx: Context, a: Tensor, scale_factor: int, mode: int = 0) -> Tensor:
    """ggml_upscale: dims 0 and 1 (W and H) scaled by an integer factor.

    a: ne [W, H, C, N] (NumPy shape reversed), F32.
    scale_factor: the factor, >= 2.
    mode: GGML_SCALE_MODE_NEAREST (0), BILINEAR (1) or BICUBIC (2), optionally | GGML_SCALE_FLAG_* bits.
    Result: ne [W*scale_factor, H*scale_factor, C, N]. Precision: nearest exact; others F32.
    """
    f = _ints("upscale", 2, scale_factor=scale_factor)
    (m,) = _ints("upscale", 0, mode=mode)
    return _call("upscale", "upscale", ctx, dict(a=a), *f, m)


def upscale_ext(ctx: Context, a: Tensor, ne0: int, ne1: int, ne2: int, ne3: int, mode: int = 0) -> Tensor:
    """ggml_upscale_ext: a resampled to ne [ne0, ne1, ne2, ne3] (ggml's deprecated name of interpolate).

    a: any ne (NumPy shape reversed), F32.
    ne0, ne1, ne2, ne3: the result's extents in ggml order (ne0 innermost).
    mode: as interpolate's.
    Result: ne [ne0, ne1, ne2, ne3]. Precision: as interpolate.
    """
    ne = _shape_arg("upscale_ext", (ne0, ne1, ne2, ne3))
    (m,) = _ints("upscale_ext", 0, mode=mode)
    return _call(
        "upscale_ext",
        "upscale_ext",
        ctx,
        dict(a=a),
        *_ints("upscale_ext", 1, ne0=ne[0], ne1=ne[1], ne2=ne[2], ne3=ne[3]),
        m,
    )


def interpolate(ctx: Context, a: Tensor, ne0: int, ne1: int, ne2: int, ne3: int, mode: int = 0) -> Tensor:
    """ggml_interpolate: a resampled to ne [ne0, ne1, ne2, ne3]: nearest in every dim, or bilinear or
    bicubic over dims 0 and 1 (W and H) and nearest over 2 and 3.

    a: any ne (NumPy shape reversed), F32.
    ne0, ne1, ne2, ne3: the result's extents in ggml order (ne0 innermost: NumPy's last axis).
    mode: GGML_SCALE_MODE_NEAREST (0), BILINEAR (1) or BICUBIC (2), with half-pixel centres; |
        GGML_SCALE_FLAG_ALIGN_CORNERS (256) maps corner to corner.
    Result: F32 ne [ne0, ne1, ne2, ne3]. Precision: nearest exact; bilinear/bicubic F32 weights.
    """
    ne = _shape_arg("interpolate", (ne0, ne1, ne2, ne3))
    (m,) = _ints("interpolate", 0, mode=mode)
    if any(n > _I32_MAX for n in ne):  # the kernels index with int
        raise ValueError(f"interpolate: ne must fit in int32, got {ne}")
    return _call("interpolate", "interpolate", ctx, dict(a=a), *ne, m)


__all__ = [  # generated by tools/gen_methods.py
    "col2im_1d",
    "conv_1d",
    "conv_1d_dw",
    "conv_2d",
    "conv_2d_direct",
    "conv_2d_dw",
    "conv_2d_dw_direct",
    "conv_3d",
    "conv_3d_direct",
    "conv_transpose_1d",
    "conv_transpose_2d_p0",
    "im2col",
    "im2col_3d",
    "interpolate",
    "pad_reflect_1d",
    "pool_1d",
    "pool_2d",
    "upscale",
    "upscale_ext",
]
