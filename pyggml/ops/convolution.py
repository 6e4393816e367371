"""Convolution, pooling, resampling and padding ops."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyggml import types
from pyggml._args import integer
from pyggml.ops._common import _shape_arg
from pyggml.ops.declared import all_of, declared
from pyggml.tensor import Tensor

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


def _channels(op: str, a, b, IC: int) -> None:
    """ggml splits a's and b's dim 3 into IC channels without checking they divide it: the rest would be
    silently dropped."""
    for name, t in (("a", a), ("b", b)):
        if isinstance(t, Tensor) and t.ptr.ne[3] % IC:
            raise ValueError(f"{op}: {name}'s ne[3] ({t.ptr.ne[3]}) must be a multiple of IC ({IC})")


# --- checks of the declared wrappers (pyggml.ops.declared): each sees the converted arguments by name -----------
def _at_least(op: str, lo: int, *names: str):
    """The check of C int arguments in lo..INT32_MAX (_ints), by name."""

    def check(x) -> None:
        _ints(op, lo, **{n: getattr(x, n) for n in names})

    return check


def _conv(op: str, dims: int, *, IC: bool = False, fits: bool = False, names: tuple[str, str, str] = ("s", "p", "d")):
    """The check of a convolution over `dims` dims: its strides s0.. and dilations d0.. >= 1 and paddings p0.. >= 0
    (_geometry; `names` where ggml.h names them otherwise); IC: IC >= 1 dividing a's and b's ne[3] (_channels);
    fits: the kernel no wider than the padded data (_fits)."""
    s, p, d = ([f"{n}{i}" for i in range(dims)] for n in names)

    def check(x) -> None:
        ic = _ints(op, 1, IC=x.IC) if IC else []
        g = _geometry(op, *({n: getattr(x, n) for n in group} for group in (s, p, d)))
        if ic:
            _channels(op, x.a, x.b, ic[0])
        if fits:
            _fits(op, x.a, x.b, g[:dims], g[dims : 2 * dims], g[2 * dims :])

    return check


# --- im2col and the convolutions built on it ------------------------------------------------------------------
# 1-D: dim 1's geometry is not read (ggml's own conv_1d passes zeros)
_IM2COL = {True: _conv("im2col", 2), False: all_of(_conv("im2col", 1), _at_least("im2col", 0, "s1", "p1", "d1"))}
im2col = declared(
    "im2col",
    """ggml_im2col: the patches of b a convolution with kernel a reads, one column per output position
    (convolution = im2col + mul_mat).

    Shapes in ggml's ne order (NumPy's reversed):
    a: the kernel, [KW, KH, IC, OC] (2-D) or [K, IC, OC] (1-D); only its shape is read.
    b: the data, [W, H, IC, N] (2-D) or [W, IC, N] (1-D).
    s0, s1: strides along W and H, >= 1. p0, p1: zero padding on each side, >= 0. d0, d1: dilations,
        >= 1 (the *1 values are ignored when 1-D).
    is_2D: True for a 2-D convolution's patches, False for 1-D.
    dst_type: the result's type, F32 (default) or F16.
    Result: [IC*KH*KW, OW, OH, N] (2-D) or [IC*K, OW, N] (1-D),
        OW = (W + 2*p0 - d0*(KW-1) - 1)//s0 + 1.
    Precision: exact copies (rounded to F16 when dst_type is F16).
    """,
    defaults={"dst_type": types.Type.F32},
    check=lambda x: _IM2COL[x.is_2D](x),
)
im2col_3d = declared(
    "im2col_3d",
    """ggml_im2col_3d: the 3-D patches of b a conv_3d with kernel a reads.

    a: the kernel, [KW, KH, KD, IC*OC] (ggml ne order); only its shape is read.
    b: the data, [W, H, D, IC*N].
    IC: input channels (divides a's and b's ne3).
    s0, s1, s2: strides along W, H, D, >= 1. p0, p1, p2: zero padding, >= 0. d0, d1, d2: dilations,
        >= 1.
    dst_type: the result's type, F32 (default) or F16.
    Result: [IC*KD*KH*KW, OW, OH, OD*N]. Exact (or rounded to F16).
    """,
    defaults={"dst_type": types.Type.F32},
    check=_conv("im2col_3d", 3, IC=True),
)
conv_3d = declared(
    "conv_3d",
    """ggml_conv_3d: 3-D convolution (cross-correlation, as PyTorch's conv3d), by im2col_3d + mul_mat.

    a: the kernel, [KW, KH, KD, IC*OC] (ggml ne order; NumPy (OC*IC, KD, KH, KW)), F32 or F16.
    b: the data, [W, H, D, IC*N] (NumPy (N*IC, D, H, W)), F32.
    IC: input channels. s0, s1, s2: strides, >= 1. p0, p1, p2: zero padding, >= 0. d0, d1, d2:
        dilations.
    Result: F32 [OW, OH, OD, OC*N].
    Precision: as mul_mat; the patches are of a's type (an F16 kernel rounds b to F16).
    """,
    check=_conv("conv_3d", 3, IC=True),
)
conv_3d_direct = declared(
    "conv_3d_direct",
    """ggml_conv_3d_direct: 3-D convolution by ggml's direct CONV_3D kernel (no im2col buffer).

    a: the kernel, [KW, KH, KD, n_channels*n_channels_out] (ggml ne order).
    b: the data, [W, H, D, n_channels*n_batch].
    s0, s1, s2: strides, >= 1. p0, p1, p2: zero padding, >= 0. d0, d1, d2: dilations, >= 1.
    n_channels: input channels, n_batch: batch size, n_channels_out: output channels.
    Result: F32 [OW, OH, OD, n_channels_out*n_batch].
    Precision: F32 accumulation (F16 a: products of F16 values).
    """,
    check=all_of(
        _at_least("conv_3d_direct", 1, "n_channels", "n_batch", "n_channels_out"),
        _conv("conv_3d_direct", 3, fits=True),
    ),
)


def _one_sequence(x) -> None:
    # ggml_conv_1d's last reshape reads the product [OW*N, OC] as [OW, OC, N]: for N > 1 batches and
    # channels come out interleaved, on every backend (docs/findings.md)
    if isinstance(x.b, Tensor) and x.b.ptr.ne[2] * x.b.ptr.ne[3] > 1:
        raise ValueError(
            f"conv_1d: b must hold one sequence (ne[2] == ne[3] == 1), got ne={x.b.ne}: ggml's conv_1d "
            "mixes the batches of more"
        )


conv_1d = declared(
    "conv_1d",
    """ggml_conv_1d: 1-D convolution (cross-correlation, as PyTorch's conv1d), by im2col + mul_mat.

    a: the kernel, [K, IC, OC] (ggml ne order; NumPy (OC, IC, K)), F32 or F16.
    b: the data, [W, IC, 1] (one sequence: ggml's conv_1d mixes the batches of more, findings
        entry 24).
    s0: stride, >= 1. p0: zero padding on each side, >= 0. d0: dilation, >= 1.
    Result: F32 [OW, OC, 1], OW = (W + 2*p0 - d0*(K-1) - 1)//s0 + 1.
    Precision: as mul_mat; an F16 kernel rounds the patches of b to F16.
    """,
    check=all_of(_one_sequence, _conv("conv_1d", 1)),
)
conv_1d_dw = declared(
    "conv_1d_dw",
    """ggml_conv_1d_dw: depthwise 1-D convolution: channel c convolved with kernel c only.

    a: the kernels, [K, 1, C] (ggml ne order). b: the data, [W, C, N].
    s0: stride, >= 1. p0: zero padding on each side, >= 0. d0: dilation, >= 1.
    Result: [OW, C, N]. Precision: as mul_mat (an F16 kernel rounds b to F16).
    """,
    check=_conv("conv_1d_dw", 1),
)
conv_2d = declared(
    "conv_2d",
    """ggml_conv_2d: 2-D convolution (cross-correlation, as PyTorch's conv2d), by im2col + mul_mat.

    a: the kernel, [KW, KH, IC, OC] (ggml ne order; NumPy (OC, IC, KH, KW)), F32 or F16.
    b: the data, [W, H, IC, N] (NumPy (N, IC, H, W)), F32.
    s0, s1: strides along W and H, >= 1. p0, p1: zero padding on each side, >= 0. d0, d1: dilations.
    Result: F32 [OW, OH, OC, N] (NumPy (N, OC, OH, OW)).
    Precision: as mul_mat; an F16 kernel makes F16 patches (b rounded to F16, bound NMSE 1e-5).
    """,
    check=_conv("conv_2d", 2),
)
conv_2d_dw = declared(
    "conv_2d_dw",
    """ggml_conv_2d_dw: depthwise 2-D convolution (im2col based): channel c with kernel c only.

    a: the kernels, [KW, KH, 1, C] (ggml ne order). b: the data, [W, H, C, N].
    s0, s1: strides, >= 1. p0, p1: zero padding on each side, >= 0. d0, d1: dilations, >= 1.
    Result: [OW, OH, C, N]. Precision: as mul_mat (an F16 kernel rounds b to F16).
    """,
    check=_conv("conv_2d_dw", 2),
)
conv_2d_direct = declared(
    "conv_2d_direct",
    """ggml_conv_2d_direct: 2-D convolution by ggml's direct CONV_2D kernel (no im2col buffer).

    a: the kernel, [KW, KH, IC, OC] (ggml ne order). b: the data, [W, H, IC, N].
    s0, s1: strides, >= 1. p0, p1: zero padding on each side, >= 0. d0, d1: dilations, >= 1.
    Result: [OW, OH, OC, N], of b's type. Precision: F32 accumulation (within NMSE 1e-7 for F32).
    """,
    check=_conv("conv_2d_direct", 2, fits=True),
)
conv_2d_dw_direct = declared(
    "conv_2d_dw_direct",
    """ggml_conv_2d_dw_direct: depthwise 2-D convolution by ggml's direct CONV_2D_DW kernel.

    a: the kernels, [KW, KH, 1, C] (ggml ne order). b: the data, [W, H, C, N].
    stride0, stride1: strides along W and H, >= 1. pad0, pad1: zero padding on each side, >= 0.
    dilation0, dilation1: dilations, >= 1.
    Result: [OW, OH, C, N]. Precision: F32 accumulation.
    """,
    check=_conv("conv_2d_dw_direct", 2, fits=True, names=("stride", "pad", "dilation")),
)
conv_transpose_1d = declared(
    "conv_transpose_1d",
    """ggml_conv_transpose_1d: transposed 1-D convolution: every input position x adds a[:, oc, ic]
    at output positions x*s0 + k.

    a: the kernel, [K, OC, IC] (ggml ne order; NumPy (IC, OC, K)), F32 or F16.
    b: the data, [W, IC] (ggml order), F32.
    s0: stride, >= 1. p0, d0: ggml takes only p0 = 0 and d0 = 1.
    Result: F32 [(W-1)*s0 + K, OC]. Precision: F32 accumulation (an F16 kernel rounds b to F16).
    """,
    defaults={"p0": 0, "d0": 1},
    check=_conv("conv_transpose_1d", 1),
)
conv_transpose_2d_p0 = declared(
    "conv_transpose_2d_p0",
    """ggml_conv_transpose_2d_p0: transposed 2-D convolution without padding.

    a: the kernel, [KW, KH, OC, IC] (ggml ne order), F32 or F16. b: the data, [W, H, IC, N], F32.
    stride: the stride of both dims, >= 1.
    Result: F32 [(W-1)*stride + KW, (H-1)*stride + KH, OC, N]. Precision: F32 accumulation (an F16
    kernel rounds b to F16).
    """,
    check=_at_least("conv_transpose_2d_p0", 1, "stride"),
)
col2im_1d = declared(
    "col2im_1d",
    """ggml_col2im_1d: overlap-add of columns (the adjoint of im2col 1-D): column t's entry oc*K + k
    is added at output position t*s0 + k - p0.

    a: the columns, [K*OC, T_in] (ggml ne order).
    s0: stride, >= 0. oc: output channels (K = a.ne[0] / oc). p0: padding cut from each side, >= 0.
    Result: [(T_in-1)*s0 + K - 2*p0, OC]. Precision: F32 sums.
    """,
    check=_at_least("col2im_1d", 0, "s0", "oc", "p0"),
)


# --- pooling -------------------------------------------------------------------------------------------------------
_POOL_OPS = (0, 1)  # GGML_OP_POOL_MAX, GGML_OP_POOL_AVG; the kernels abort on any other value


def _pool_op(op: str, value) -> int:
    v = integer(f"{op}: op", value)
    if v not in _POOL_OPS:
        raise ValueError(f"{op}: op must be 0 (max) or 1 (avg), got {v}")
    return v


def _pool_1d(x) -> None:
    _pool_op("pool_1d", x.op)
    k, s = _ints("pool_1d", 1, k0=x.k0, s0=x.s0)
    (p,) = _ints("pool_1d", 0, p0=x.p0)
    if p >= k:  # a window of padding only: max would be -FLT_MAX
        raise ValueError(f"pool_1d: p0 ({p}) must be smaller than k0 ({k})")


pool_1d = declared(
    "pool_1d",
    """ggml_pool_1d: max or average pooling along each row (ne0).

    a: any ne (NumPy shape reversed), F32.
    op: 0 max, 1 average (over the window's elements inside a: padding not counted).
    k0: window, >= 1. s0: stride, >= 1. p0: padding on each side, 0 <= p0 < k0.
    Result: ne [(ne0 + 2*p0 - k0)//s0 + 1, ne1, ne2, ne3]. Exact (average: F32 division).
    """,
    check=_pool_1d,
)


# hand-written: it takes whole paddings (ints) and passes them as the floats ggml_pool_2d declares (to _pool_2d,
# the wrapper ggml.h's declaration makes)
_pool_2d = declared("pool_2d")


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
    return _pool_2d(ctx, a, o, k0, k1, s0, s1, float(p0), float(p1))


# --- resampling and padding ---------------------------------------------------------------------------------------
pad_reflect_1d = declared(
    "pad_reflect_1d",
    """ggml_pad_reflect_1d: reflection padding of dim 0 (np.pad(a, ..., mode="reflect") on the last axis).

    a: any ne (NumPy shape reversed), F32.
    p0: elements added before, p1 after, each < ne0 (the edge itself is not repeated).
    Result: ne [ne0 + p0 + p1, ne1, ne2, ne3]. Exact.
    """,
    check=_at_least("pad_reflect_1d", 0, "p0", "p1"),
)

_SCALE_MODES = 3  # nearest, bilinear, bicubic (ggml asserts the mode byte; flags ride in the bits above)

upscale = declared(
    "upscale",
    """ggml_upscale: dims 0 and 1 (W and H) scaled by an integer factor.

    a: ne [W, H, C, N] (NumPy shape reversed), F32.
    scale_factor: the factor, >= 2.
    mode: GGML_SCALE_MODE_NEAREST (0), BILINEAR (1) or BICUBIC (2), optionally | GGML_SCALE_FLAG_*
        bits.
    Result: ne [W*scale_factor, H*scale_factor, C, N]. Precision: nearest exact; others F32.
    """,
    defaults={"mode": 0},
    check=all_of(_at_least("upscale", 2, "scale_factor"), _at_least("upscale", 0, "mode")),
)


def _extents(op: str):
    """The check of a resampling's result: ne0..ne3 positive (ggml does not handle empty tensors) and within
    int32, mode >= 0."""

    def check(x) -> None:
        ne = _shape_arg(op, (x.ne0, x.ne1, x.ne2, x.ne3))
        _ints(op, 0, mode=x.mode)
        if op == "upscale_ext":  # ggml.h declares ints
            _ints(op, 1, ne0=ne[0], ne1=ne[1], ne2=ne[2], ne3=ne[3])
        elif any(n > _I32_MAX for n in ne):  # int64_t in ggml.h, but the kernels index with int
            raise ValueError(f"{op}: ne must fit in int32, got {ne}")

    return check


upscale_ext = declared(
    "upscale_ext",
    """ggml_upscale_ext: a resampled to ne [ne0, ne1, ne2, ne3] (ggml's deprecated name of interpolate).

    a: any ne (NumPy shape reversed), F32.
    ne0, ne1, ne2, ne3: the result's extents in ggml order (ne0 innermost).
    mode: as interpolate's.
    Result: ne [ne0, ne1, ne2, ne3]. Precision: as interpolate.
    """,
    defaults={"mode": 0},
    check=_extents("upscale_ext"),
)
interpolate = declared(
    "interpolate",
    """ggml_interpolate: a resampled to ne [ne0, ne1, ne2, ne3]: nearest in every dim, or bilinear or
    bicubic over dims 0 and 1 (W and H) and nearest over 2 and 3.

    a: any ne (NumPy shape reversed), F32.
    ne0, ne1, ne2, ne3: the result's extents in ggml order (ne0 innermost: NumPy's last axis).
    mode: GGML_SCALE_MODE_NEAREST (0), BILINEAR (1) or BICUBIC (2), with half-pixel centres; |
        GGML_SCALE_FLAG_ALIGN_CORNERS (256) maps corner to corner.
    Result: F32 ne [ne0, ne1, ne2, ne3]. Precision: nearest exact; bilinear/bicubic F32 weights.
    """,
    defaults={"mode": 0},
    check=_extents("interpolate"),
)


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
