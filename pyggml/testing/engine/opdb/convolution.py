"""Specs of convolution, pooling, resampling and padding: odd sizes, strides 1-3, paddings 0-2,
dilations 1-2, several channels and batches, F16 where the op takes it, permuted inputs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyggml import ops
from pyggml.errors import GraphError, OpError
from pyggml.tensor import Tensor
from pyggml.testing.engine import oracles
from pyggml.testing.engine.opdb import *  # noqa: F403 - the database's vocabulary, opdb.__all__

# the composite convolutions (conv_1d/_2d/_dw) store the data as F16 columns (im2col's dst type) before
# the mul_mat: their error is F16 rounding of the data even with F32 inputs
_F16_COLUMNS = [Bound(NMSE_F16)]
# an F16 result (im2col's F16 columns) or an F16 kernel that rounds b to F16
_F16_OUT = [Bound(NMSE_F16)]


def _f16_if(cond: bool) -> list[Bound]:
    return _F16_OUT if cond else []


# --- bad calls (moved from tests/bad_calls_convolution.py): op -> Bad ----------------------------------------------


def _k2(t: Callable[..., Tensor], type: str = "f32") -> Tensor:
    return t(type, (2, 3, 3, 3))  # kernel [KW 3, KH 3, IC 3, OC 2]


def _x2(t: Callable[..., Tensor], type: str = "f32") -> Tensor:
    return t(type, (1, 3, 7, 9))  # data [W 9, H 7, IC 3, N 1]


# --- im2col -------------------------------------------------------------------------------------------------------
bad("im2col", lambda c, t: ops.im2col(c, _k2(t), _x2(t), 0, 1, 0, 0, 1, 1, True), ValueError, "s0 must be in 1..")
bad(
    "im2col", lambda c, t: ops.im2col(c, t("f32", (2, 3, 9, 9)), _x2(t), 1, 1, 0, 0, 1, 1, True), OpError, "b too small"
)
bad(
    "im2col",
    lambda c, t: ops.im2col(c, t("f32", (2, 4, 3, 3)), _x2(t), 1, 1, 0, 0, 1, 1, True),
    OpError,
    "a->ne[2] == b->ne[2]",
)
bad("im2col", lambda c, t: ops.im2col(c, _k2(t), _x2(t), 1, 1, -1, 0, 1, 1, True), ValueError, "p0 must be in 0..")
bad("im2col", lambda c, t: ops.im2col(c, _k2(t), _x2(t), 1, 1, 0, 0, 1, 1, 1), TypeError, "is_2D must be a bool")
bad("im2col", lambda c, t: ops.im2col(c, _k2(t), [1], 1, 1, 0, 0, 1, 1, True), TypeError, "b must be a Tensor")
bad(
    "im2col",
    lambda c, t: ops.im2col(c, _k2(t), _x2(t), 1, 1, 0, 0, 1, 1, True, "bf16"),
    GraphError,
    "F32 or F16 columns",
)
bad(
    "im2col",
    lambda c, t: ops.im2col(c, _k2(t), _x2(t, "f16"), 1, 1, 0, 0, 1, 1, True, "f32"),
    GraphError,
    "takes F32 src1, got F16",
)
bad(
    "im2col",
    lambda c, t: ops.im2col(c, _k2(t), ops.transpose(c, _x2(t)), 1, 1, 0, 0, 1, 1, True),
    GraphError,
    "contiguous rows",
)

# --- convolutions ----------------------------------------------------------------------------------------------------
bad(
    "conv_1d",
    lambda c, t: ops.conv_1d(c, t("f32", (2, 3, 3)), t("f32", (1, 3, 9)), 0, 0, 1),
    ValueError,
    "s0 must be in 1..",
)
bad("conv_1d", lambda c, t: ops.conv_1d(c, t("f32", (2, 3, 13)), t("f32", (1, 3, 9)), 1, 1, 1), OpError, "b too small")
bad(
    "conv_1d_dw",
    lambda c, t: ops.conv_1d_dw(c, t("f32", (3, 1, 3)), t("f32", (1, 3, 9)), 1, 0, 0),
    ValueError,
    "d0 must be in 1..",
)
bad("conv_2d", lambda c, t: ops.conv_2d(c, _k2(t), _x2(t), 1, 1, 0, 0, 1, 1.5), TypeError, "d1 must be an integer")
bad(
    "conv_2d",
    lambda c, t: ops.conv_2d(c, t("f32", (2, 4, 3, 3)), _x2(t), 1, 1, 0, 0, 1, 1),
    OpError,
    "a->ne[2] == b->ne[2]",
)
bad(
    "conv_2d_dw",
    lambda c, t: ops.conv_2d_dw(c, t("f16", (3, 1, 3, 3)), _x2(t), 1, 0, 0, 0, 1, 1),
    ValueError,
    "s1 must be in 1..",
)
bad(
    "conv_2d_direct",
    lambda c, t: ops.conv_2d_direct(c, _k2(t), _x2(t), 1, 1, 0, 0, 0, 1),
    ValueError,
    "d0 must be in 1..",
)
bad(
    "conv_2d_direct",
    lambda c, t: ops.conv_2d_direct(c, t("f32", (2, 3, 9, 3)), _x2(t), 1, 1, 0, 0, 1, 1),
    ValueError,
    "b too small",
)
bad(
    "conv_2d_dw_direct",
    lambda c, t: ops.conv_2d_dw_direct(c, t("f32", (3, 1, 3, 3)), _x2(t), 1, 1, 0, 0, 5, 1),
    ValueError,
    "b too small",
)
bad(
    "conv_2d_direct",
    lambda c, t: ops.conv_2d_direct(c, _k2(t, "bf16"), _x2(t), 1, 1, 0, 0, 1, 1),
    GraphError,
    "takes F32/F16 src0, got BF16",
)
bad(
    "conv_2d_dw_direct",
    lambda c, t: ops.conv_2d_dw_direct(c, t("f32", (3, 1, 3, 3)), _x2(t), 0, 1, 0, 0, 1, 1),
    ValueError,
    "stride0 must be in 1..",
)
bad(
    "conv_2d_dw_direct",
    lambda c, t: ops.conv_2d_dw_direct(c, t("f32", (4, 1, 3, 3)), _x2(t), 1, 1, 0, 0, 1, 1),
    OpError,
    "a->ne[3] == b->ne[2]",
)
bad(
    "conv_2d_dw_direct",
    lambda c, t: ops.conv_2d_dw_direct(c, t("f32", (3, 1, 3, 3)), ops.transpose(c, _x2(t)), 1, 1, 0, 0, 1, 1),
    GraphError,
    "contiguous data, or channels",
)
bad(
    "conv_transpose_1d",
    lambda c, t: ops.conv_transpose_1d(c, t("f32", (3, 2, 3)), t("f32", (3, 9)), 1, 1, 1),
    OpError,
    "p0 == 0",
)
bad(
    "conv_transpose_1d",
    lambda c, t: ops.conv_transpose_1d(c, t("f32", (3, 2, 3)), t("f32", (3, 9)), 0),
    ValueError,
    "s0 must be in 1..",
)
bad(
    "conv_transpose_2d_p0",
    lambda c, t: ops.conv_transpose_2d_p0(c, t("f32", (3, 2, 3, 3)), _x2(t), 0),
    ValueError,
    "stride must be in 1..",
)
bad(
    "conv_transpose_2d_p0",
    lambda c, t: ops.conv_transpose_2d_p0(c, t("f32", (4, 2, 3, 3)), _x2(t), 1),
    OpError,
    "a->ne[3] == b->ne[2]",
)

# --- pooling ---------------------------------------------------------------------------------------------------------
bad("pool_1d", lambda c, t: ops.pool_1d(c, t("f32", (3, 9)), 2, 3, 1, 0), ValueError, "op must be 0 (max) or 1 (avg)")
bad("pool_1d", lambda c, t: ops.pool_1d(c, t("f32", (3, 9)), 0, 3, 0, 0), ValueError, "s0 must be in 1..")
bad("pool_1d", lambda c, t: ops.pool_1d(c, t("f32", (3, 9)), 0, 3, 1, 3), ValueError, "must be smaller than k0")
bad("pool_1d", lambda c, t: ops.pool_1d(c, t("f32", (3, 2)), 0, 3, 1, 0), OpError, "ne[0] > 0")
bad("pool_1d", lambda c, t: ops.pool_1d(c, t("i32", (3, 9)), 0, 3, 1, 0), GraphError, "takes F32/F16 src0, got I32")
bad("pool_2d", lambda c, t: ops.pool_2d(c, t("f32", (3, 9)), -1, 3, 3, 1, 1, 0, 0), ValueError, "op must be 0")
bad("pool_2d", lambda c, t: ops.pool_2d(c, t("f32", (3, 9)), 0, 3, 3, 1, 1, 0.5, 0), TypeError, "p0 must be an integer")
bad("pool_2d", lambda c, t: ops.pool_2d(c, t("f32", (2, 9)), 0, 3, 3, 1, 1, 0, 0), OpError, "ne[1] > 0")
bad(
    "pool_2d",
    lambda c, t: ops.pool_2d(c, ops.transpose(c, t("f32", (5, 9))), 1, 3, 3, 1, 1, 0, 0),
    GraphError,
    "contiguous",
)

# --- padding ---------------------------------------------------------------------------------------------------------
bad("pad_reflect_1d", lambda c, t: ops.pad_reflect_1d(c, t("f32", (3, 5)), 5, 0), OpError, "p0 < a->ne[0]")
bad("pad_reflect_1d", lambda c, t: ops.pad_reflect_1d(c, t("f32", (3, 5)), -1, 0), ValueError, "p0 must be in 0..")
bad("pad_reflect_1d", lambda c, t: ops.pad_reflect_1d(c, t("f16", (3, 5)), 1, 1), OpError, "GGML_TYPE_F32")

# --- 3-D ----------------------------------------------------------------------------------------------------------
bad(
    "im2col_3d",
    lambda c, t: ops.im2col_3d(c, t("f32", (6, 3, 3, 3)), t("f32", (6, 5, 7, 9)), 0, 1, 1, 1, 0, 0, 0, 1, 1, 1),
    ValueError,
    "IC must be in 1..",
)
bad(
    "im2col_3d",
    lambda c, t: ops.im2col_3d(c, t("f32", (6, 3, 3, 3)), t("f32", (6, 5, 7, 9)), 3, 1, 0, 1, 0, 0, 0, 1, 1, 1),
    ValueError,
    "s1 must be in 1..",
)

# --- col2im_1d, resampling -------------------------------------------------------------------------------------------
bad("col2im_1d", lambda c, t: ops.col2im_1d(c, t("f32", (5, 6)), 0, 2, 0), OpError, "s0 > 0")
bad("col2im_1d", lambda c, t: ops.col2im_1d(c, t("f32", (5, 7)), 1, 2, 0), OpError, "K_OC == K * oc")
bad("col2im_1d", lambda c, t: ops.col2im_1d(c, t("f32", (5, 6)), 1, 2, -1), ValueError, "p0 must be in 0..")
bad("upscale", lambda c, t: ops.upscale(c, t("f32", (3, 5)), 1), ValueError, "scale_factor must be in 2..")
bad("upscale", lambda c, t: ops.upscale(c, t("f32", (3, 5)), 2, 7), OpError, "GGML_SCALE_MODE_COUNT")
bad("upscale", lambda c, t: ops.upscale(c, t("f16", (3, 5)), 2, 0), OpError, "GGML_TYPE_F32")
bad("upscale_ext", lambda c, t: ops.upscale_ext(c, t("f32", (3, 5)), 0, 3, 1, 1), ValueError, "ne must be positive")
bad("interpolate", lambda c, t: ops.interpolate(c, t("f32", (3, 5)), 7, 3, 1, 1, 0 | 512), OpError, "ANTIALIAS")
bad("interpolate", lambda c, t: ops.interpolate(c, t("f32", (3, 5)), 7, 3, 1, 1, -1), ValueError, "mode must be in 0..")
bad("interpolate", lambda c, t: ops.interpolate(c, "x", 7, 3, 1, 1), TypeError, "a must be a Tensor")
bad(
    "im2col_3d",
    lambda c, t: ops.im2col_3d(c, t("f32", (6, 3, 3, 3)), t("f32", (5, 5, 7, 9)), 3, 1, 1, 1, 0, 0, 0, 1, 1, 1),
    ValueError,
    "b's ne[3] (5) must be a multiple of IC (3)",
)
bad(
    "im2col_3d",
    lambda c, t: ops.im2col_3d(c, t("f32", (6, 3, 3, 3)), t("f32", (6, 5, 7, 9)), 3, 1, 1, 1, 0, 0, 0, 1, 1, 1, "q8_0"),
    GraphError,
    "F32 or F16 columns",
)
bad(
    "conv_3d",
    lambda c, t: ops.conv_3d(c, t("f32", (6, 3, 3, 3)), t("f32", (6, 2, 7, 9)), 3, 1, 1, 1, 0, 0, 0, 1, 1, 1),
    OpError,
    "b too small",
)
bad(
    "conv_3d",
    lambda c, t: ops.conv_3d(c, t("f32", (7, 3, 3, 3)), t("f32", (6, 5, 7, 9)), 3, 1, 1, 1, 0, 0, 0, 1, 1, 1),
    ValueError,
    "a's ne[3] (7) must be a multiple of IC",
)
bad(
    "conv_3d_direct",
    lambda c, t: ops.conv_3d_direct(
        c, t("f32", (6, 3, 3, 3)), t("f32", (6, 5, 7, 9)), 1, 1, 1, 0, 0, 0, 1, 1, 1, 3, 2, 3
    ),
    OpError,
    "a->ne[3] == (int64_t) c * oc",
)
bad(
    "conv_3d_direct",
    lambda c, t: ops.conv_3d_direct(
        c, t("f32", (6, 3, 3, 3)), t("f32", (6, 2, 7, 9)), 1, 1, 1, 0, 0, 0, 1, 1, 1, 3, 2, 2
    ),
    ValueError,
    "b too small",
)
bad(
    "conv_3d_direct",
    lambda c, t: ops.conv_3d_direct(
        c, t("f32", (6, 3, 3, 3)), t("f16", (6, 5, 7, 9)), 1, 1, 1, 0, 0, 0, 1, 1, 1, 3, 2, 2
    ),
    GraphError,
    "takes F32 src1, got F16",
)
# ggml's conv_1d mixes the batches of b (docs/findings.md): one sequence only
bad(
    "conv_1d",
    lambda c, t: ops.conv_1d(c, t("f32", (3, 2, 3)), t("f32", (2, 2, 11)), 1, 0, 1),
    ValueError,
    "must hold one sequence",
)

# scalar arguments (issue 19)
bad(
    "pool_2d",
    lambda c, t: ops.pool_2d(c, t("f32", (1, 1, 8, 8)), 0, "2", 2, 2, 2, 0, 0),
    TypeError,
    "k0 must be an integer, got str",
)
bad(
    "conv_2d",
    lambda c, t: ops.conv_2d(c, t("f32", (2, 1, 3, 3)), t("f32", (1, 1, 8, 8)), 1.0, 1, 0, 0, 1, 1),
    TypeError,
    "s0 must be an integer, got float",
)


# --- im2col -----------------------------------------------------------------------------------------------------
def _im2col_node(n: Node) -> Any:
    return oracles.im2col(n.arg(0), n.arg(1), *n.scalars()[:7])


# 2-D: (kernel KH, KW), (IC, H, W), N, s0, s1, p0, p1, d0, d1
_IM2COL_2D = [
    ((3, 3), (2, 7, 9), 1, 1, 1, 0, 0, 1, 1),
    ((3, 3), (3, 11, 7), 2, 2, 1, 1, 1, 1, 1),
    ((2, 5), (1, 9, 13), 1, 3, 2, 2, 0, 1, 2),
    ((3, 2), (2, 13, 11), 2, 1, 3, 0, 2, 2, 1),
    ((1, 1), (4, 5, 5), 3, 1, 1, 0, 0, 1, 1),
    ((5, 3), (2, 9, 7), 1, 2, 2, 2, 1, 2, 2),
]
# 1-D: K, (IC, W), N, s0, p0, d0
_IM2COL_1D = [(3, (2, 11), 1, 1, 0, 1), (5, (3, 13), 2, 2, 2, 1), (3, (1, 17), 3, 3, 1, 2), (2, (4, 7), 2, 1, 1, 2)]
_im2col_samples: list[Sample] = []
for _i, (_kk, (_ic, _h, _w), _n, *_g2) in enumerate(_IM2COL_2D):
    for _dst in ("f32", "f16"):
        _im2col_samples.append(
            Sample(
                {"a": ("f32", (2, _ic) + _kk), "b": ("f32", (_n, _ic, _h, _w))},
                (*_g2, True, _dst),
                variant=f"2d_{_dst}_{_i}",
                bounds=_f16_if(_dst == "f16"),
            )
        )
    _im2col_samples.append(
        Sample({"a": ("f16", (2, _ic) + _kk), "b": ("f16", (_n, _ic, _h, _w))}, (*_g2, True, "f16"), variant=f"2d_{_i}")
    )
for _i, (_k, (_ic, _w), _n, _s0, _p0, _d0) in enumerate(_IM2COL_1D):
    for _dst in ("f32", "f16"):
        _im2col_samples.append(
            Sample(
                {"a": ("f32", (3, _ic, _k)), "b": ("f32", (_n, _ic, _w))},
                (_s0, 0, _p0, 0, _d0, 0, False, _dst),
                variant=f"1d_{_dst}_{_i}",
                bounds=_f16_if(_dst == "f16"),
            )
        )
# permuted data: channels and batches swapped in memory (the kernel reads whole rows, any plane strides)
_im2col_samples += [
    Sample(
        {"a": ("f32", (2, 3, 3, 3)), "b": In("f32", (3, 2, 7, 9), layout=Permuted((0, 1, 3, 2)))},
        (2, 1, 1, 0, 1, 2, True, "f32"),
        variant="2d_permuted",
    ),
    Sample(
        {"a": ("f32", (2, 3, 3)), "b": In("f32", (3, 2, 11), layout=Permuted((0, 2, 1, 3)))},
        (1, 0, 1, 0, 1, 0, False, "f32"),
        variant="1d_permuted",
    ),
]
spec(
    "im2col",
    samples=_im2col_samples,
    reads=("IM2COL",),
    from_node=_im2col_node,
)

# --- conv_1d / conv_2d (im2col + mul_mat) ---------------------------------------------------------------------------
# conv_1d of one sequence only: ggml_conv_1d mixes batches and channels when N > 1 (its final reshape_3d
# ignores the mul_mat layout [OW*N, OC]) on every backend, and the wrapper refuses it (docs/findings.md)
# conv_1d: K, IC, OC, W, s0, p0, d0
spec(
    "conv_1d",
    samples=[
        Sample({"a": (_t, (_oc, _ic, _k)), "b": ("f32", (1, _ic, _w))}, (_s, _p, _d), variant=str(_i), tag=_t)
        for _i, (_k, _ic, _oc, _w, _s, _p, _d) in enumerate(
            [(3, 2, 3, 11, 1, 0, 1), (5, 3, 2, 13, 2, 2, 1), (3, 1, 4, 17, 3, 1, 2), (2, 4, 3, 9, 1, 1, 2)]
        )
        for _t in ("f32", "f16")
    ],
    bounds=_F16_COLUMNS,
)

# conv_2d / conv_2d_direct: (KH, KW), IC, OC, (H, W), N, s0, s1, p0, p1, d0, d1
_CONV_2D = [
    ((3, 3), 2, 3, (7, 9), 1, 1, 1, 0, 0, 1, 1),
    ((3, 3), 3, 2, (11, 7), 2, 2, 2, 1, 1, 1, 1),
    ((2, 5), 1, 4, (9, 13), 1, 1, 3, 2, 0, 1, 2),
    ((3, 2), 2, 3, (13, 11), 2, 3, 1, 0, 2, 2, 1),
    ((1, 1), 4, 3, (5, 7), 1, 1, 1, 0, 0, 1, 1),
    ((5, 3), 2, 2, (9, 7), 1, 2, 1, 1, 2, 2, 2),
]


def _conv_2d_samples() -> list[Sample]:
    return [
        Sample({"a": (t, (oc, ic) + kk), "b": ("f32", (n, ic) + hw)}, tuple(g), variant=str(i), tag=t)
        for i, (kk, ic, oc, hw, n, *g) in enumerate(_CONV_2D)
        for t in ("f32", "f16")
    ]


spec(
    "conv_2d",
    samples=_conv_2d_samples(),
    bounds=_F16_COLUMNS,
)
# Two convolutions of ggml.h with no wrapper written: the wrapper is made from their declaration (pyggml.ops.declared),
# so each op is its spec and its reference alone. a NumPy (OC, IC, KH, KW), b (N, IC, H, W).
spec(
    "conv_2d_sk_p0",  # stride = the kernel, no padding: the patches of a ViT's patch embedding
    ref=lambda a, b: oracles.conv_2d(a, b, a.shape[-1], a.shape[-2], 0, 0, 1, 1),
    samples=[
        Sample({"a": (t, (3, 2, kh, kw)), "b": ("f32", (n, 2, h, w))}, variant=str(i), tag=t)
        for i, (kh, kw, h, w, n) in enumerate([(2, 2, 8, 6, 1), (3, 2, 9, 8, 2)])
        for t in ("f32", "f16")
    ],
    bounds=_F16_COLUMNS,
)
spec(
    "conv_2d_s1_ph",  # stride 1, half padding: a same-size output for an odd kernel
    ref=lambda a, b: oracles.conv_2d(a, b, 1, 1, a.shape[-1] // 2, a.shape[-2] // 2, 1, 1),
    samples=[
        Sample({"a": (t, (2, 3, kh, kw)), "b": ("f32", (1, 3, h, w))}, variant=str(i), tag=t)
        for i, (kh, kw, h, w) in enumerate([(3, 3, 7, 9), (5, 3, 8, 6)])
        for t in ("f32", "f16")
    ],
    bounds=_F16_COLUMNS,
)
spec(
    "conv_2d_direct",
    samples=_conv_2d_samples(),
    reads=("CONV_2D",),
    from_node=lambda n: oracles.conv_2d_direct(n.arg(0), n.arg(1), *n.scalars()),
)

# --- depthwise ----------------------------------------------------------------------------------------------------------
spec(
    "conv_1d_dw",
    samples=[
        Sample({"a": ("f32", (_ch, 1, _k)), "b": ("f32", (1, _ch, _w))}, (_s, _p, _d), variant=str(_i))
        for _i, (_k, _ch, _w, _s, _p, _d) in enumerate([(3, 2, 11, 1, 0, 1), (5, 3, 13, 2, 2, 1), (3, 4, 17, 3, 1, 2)])
    ],
    bounds=_F16_COLUMNS,
)
# with an F32 kernel the graph multiplies F32 by F16 columns, which the CPU mul_mat does not take
spec(
    "conv_2d_dw",
    samples=[
        Sample({"a": (_t, (_ic, 1) + _kk), "b": ("f32", (_n, _ic) + _hw)}, tuple(_gs), variant=str(_i), tag=_t)
        for _i, (_kk, _ic, _oc, _hw, _n, *_gs) in enumerate(_CONV_2D)
        for _t in ("f32", "f16")
    ],
    bounds=_F16_COLUMNS,
)
spec(
    "conv_2d_dw_direct",
    samples=[
        *(
            Sample({"a": (_t, (_ic, 1) + _kk), "b": ("f32", (_n, _ic) + _hw)}, tuple(_gs), variant=str(_i), tag=_t)
            for _i, (_kk, _ic, _oc, _hw, _n, *_gs) in enumerate(_CONV_2D)
            for _t in ("f16", "f32")
        ),
        # channels innermost in memory (ggml_is_contiguous_channels: the CWHN layout and result); the result
        # is CWHN too (not contiguous): cont() so a device result can be read back
        Sample(
            {
                "a": In("f32", (3, 3, 3, 1), layout=Permuted((2, 3, 0, 1))),
                "b": In("f32", (2, 7, 9, 3), layout=Permuted((2, 0, 1, 3))),
            },
            (1, 2, 1, 1, 1, 1),
            variant="cwhn",
            call=lambda xp, x, *g: xp.cont(xp.conv_2d_dw_direct(x.a, x.b, *g)),
        ),
    ],
    reads=("CONV_2D_DW",),
    from_node=lambda n: oracles.conv_2d_dw_direct(n.arg(0), n.arg(1), *n.scalars()),
)

# --- transposed ---------------------------------------------------------------------------------------------------------
# an F16 kernel rounds b to F16
spec(
    "conv_transpose_1d",
    samples=[
        Sample(
            {"a": (_t, (_ic, _oc, _k)), "b": ("f32", (_ic, _w))},
            (_s, 0, 1),
            variant=str(_i),
            tag=_t,
            bounds=_f16_if(_t == "f16"),
        )
        for _i, (_k, _ic, _oc, _w, _s) in enumerate(
            [(3, 2, 3, 7, 1), (5, 3, 2, 9, 2), (2, 1, 4, 11, 3), (4, 4, 3, 5, 2)]
        )
        for _t in ("f32", "f16")
    ],
    reads=("CONV_TRANSPOSE_1D",),
    from_node=lambda n: oracles.conv_transpose_1d(n.arg(0), n.arg(1), *n.scalars()),
)
spec(
    "conv_transpose_2d_p0",
    samples=[
        Sample(
            {"a": (_t, (_ic, _oc) + _kk), "b": ("f32", (_n, _ic) + _hw)},
            (_s,),
            variant=str(_i),
            tag=_t,
            bounds=_f16_if(_t == "f16"),
        )
        for _i, (_kk, _ic, _oc, _hw, _n, _s) in enumerate(
            [((3, 3), 2, 3, (5, 7), 1, 1), ((2, 3), 3, 2, (7, 5), 2, 2), ((3, 2), 1, 2, (5, 5), 1, 3)]
        )
        for _t in ("f32", "f16")
    ],
    reads=("CONV_TRANSPOSE_2D",),
    from_node=lambda n: oracles.conv_transpose_2d_p0(n.arg(0), n.arg(1), n.param("stride")),
)

# --- pooling (distinct values: max has no ties) ----------------------------------------------------------------------
spec(
    "pool_1d",
    samples=[
        Sample({"a": (_t, _shape, distinct())}, (_op, _k, _s, _p), variant=f"{'max' if _op == 0 else 'avg'}_{_i}")
        for _i, (_shape, _k, _s, _p) in enumerate(
            [((3, 11), 3, 1, 0), ((2, 3, 13), 5, 2, 2), ((17,), 3, 3, 1), ((2, 9), 2, 2, 1)]
        )
        for _op in (0, 1)
        for _t in ("f32", "f16")
    ],
    reads=("POOL_1D",),
    from_node=lambda n: oracles.pool_1d(n.arg(0), *n.scalars()),
)
spec(
    "pool_2d",
    params=("op", "k0", "k1", "s0", "s1", "p0", "p1"),
    samples=[
        Sample({"a": (_t, _shape, distinct())}, (_op, *_g7), variant=f"{'max' if _op == 0 else 'avg'}_{_i}")
        for _i, (_shape, *_g7) in enumerate(
            [
                ((2, 7, 9), 3, 3, 1, 1, 0, 0),
                ((3, 11, 7), 3, 2, 2, 3, 1, 1),
                ((1, 2, 9, 13), 5, 3, 3, 2, 2, 0),
                ((5, 5), 2, 2, 2, 2, 1, 1),
            ]
        )
        for _op in (0, 1)
        for _t in ("f32", "f16")
    ],
    reads=("POOL_2D",),
    from_node=lambda n: oracles.pool_2d(n.arg(0), *n.scalars()),
)

# --- padding ------------------------------------------------------------------------------------------------------------
spec(
    "pad_reflect_1d",
    samples=[
        Sample({"a": ("f32", _shape)}, (_p0, _p1), variant=str(_i))
        for _i, (_shape, _p0, _p1) in enumerate(
            [((3, 7), 2, 3), ((2, 3, 11), 0, 5), ((13,), 4, 0), ((2, 2, 2, 5), 1, 1)]
        )
    ],
    exact=True,
    reads=("PAD_REFLECT_1D",),
    from_node=lambda n: oracles.pad_reflect_1d(n.arg(0), *n.scalars()),
)

# --- col2im_1d: a [T_in, K*OC] ------------------------------------------------------------------------------------------
spec(
    "col2im_1d",
    samples=[
        Sample({"a": (_t, (_t_in, _k * _oc))}, (_s, _oc, _p), variant=str(_i))
        for _i, (_t_in, _k, _oc, _s, _p) in enumerate(
            [(5, 3, 2, 1, 0), (7, 4, 3, 2, 1), (4, 5, 1, 3, 2), (9, 2, 4, 2, 0)]
        )
        for _t in ("f32", "f16", "bf16")
    ],
    reads=("COL2IM_1D",),
    from_node=lambda n: oracles.col2im_1d(n.arg(0), *n.scalars()),
)

# --- resampling: modes nearest 0, bilinear 1, | 256 align corners (nearest is exact) -----------------------------------
spec(
    "upscale",
    samples=[
        Sample({"a": ("f32", _shape)}, (_f, _m), variant=f"{_m}_{_i}", exact=True if _m == 0 else None)
        for _i, (_shape, _f) in enumerate([((2, 5, 7), 2), ((3, 1, 3, 5), 3), ((7, 9), 2)])
        for _m in (0, 1, 257)
    ],
)
# (ggml order ne of the input, of the result)
_RESAMPLE = [
    ((5, 7, 2, 1), (11, 13, 2, 1)),
    ((9, 7, 3, 1), (4, 5, 3, 1)),
    ((5, 5, 1, 1), (7, 3, 1, 1)),
    ((6, 3, 2, 2), (12, 9, 4, 2)),
    ((7, 5, 3, 1), (7, 5, 3, 1)),
]


def _resample_samples() -> list[Sample]:
    return [
        Sample({"a": ("f32", ne_in[::-1])}, (*ne_out, m), variant=f"{m}_{i}", exact=True if m == 0 else None)
        for i, (ne_in, ne_out) in enumerate(_RESAMPLE)
        for m in (0, 1, 257)
    ]


spec("upscale_ext", samples=_resample_samples())
# upscale, upscale_ext and interpolate all make UPSCALE nodes: the result's ne and the mode (op_params[0])
spec(
    "interpolate",
    params=("mode",),
    samples=[
        *_resample_samples(),
        # a transposed input: the kernels read through the strides
        Sample({"a": In("f32", (2, 7, 5), layout=Transposed())}, (11, 9, 2, 1, 1), variant="transposed"),
    ],
    reads=("UPSCALE",),
    from_node=lambda n: oracles.interpolate(n.arg(0), *n.ne, n.param("mode")),
)

# --- 3-D: (KD, KH, KW), IC, OC, (D, H, W), N, s0, s1, s2, p0, p1, p2, d0, d1, d2 ------------------------------------------
_CONV_3D = [
    ((3, 3, 3), 2, 3, (5, 7, 9), 1, 1, 1, 1, 0, 0, 0, 1, 1, 1),
    ((2, 3, 2), 3, 2, (5, 5, 7), 2, 2, 1, 3, 1, 1, 2, 1, 2, 1),
    ((1, 2, 3), 1, 4, (3, 9, 7), 1, 1, 2, 1, 0, 2, 1, 2, 1, 1),
    ((3, 1, 2), 2, 2, (7, 3, 5), 2, 1, 1, 2, 1, 0, 0, 1, 1, 2),
]


def _im2col_3d_node(n: Node) -> Any:
    *geometry, ic = n.scalars()  # s0, s1, s2, p0, p1, p2, d0, d1, d2, IC
    return oracles.im2col_3d(n.arg(0), n.arg(1), ic, *geometry)


spec(
    "im2col_3d",
    params=("s0", "s1", "s2", "p0", "p1", "p2", "d0", "d1", "d2", "IC"),
    samples=[
        *(
            Sample(
                {"a": ("f32", (_oc * _ic,) + _kk), "b": ("f32", (_n * _ic,) + _dhw)},
                (_ic, *_gs, _dst),
                variant=f"{_dst}_{_i}",
                bounds=_f16_if(_dst == "f16"),
            )
            for _i, (_kk, _ic, _oc, _dhw, _n, *_gs) in enumerate(_CONV_3D)
            for _dst in ("f32", "f16")
        ),
        # a permuted input (depth and height swapped in memory): the kernels read through the strides
        Sample(
            {"a": ("f32", (4, 3, 3, 3)), "b": In("f32", (2, 7, 5, 9), layout=Permuted((0, 2, 1, 3)))},
            (2, 1, 1, 1, 1, 1, 1, 1, 1, 1, "f32"),
            variant="permuted",
        ),
    ],
    reads=("IM2COL_3D",),
    from_node=_im2col_3d_node,
)
spec(
    "conv_3d",
    samples=[
        Sample({"a": (_t, (_oc * _ic,) + _kk), "b": ("f32", (_n * _ic,) + _dhw)}, (_ic, *_gs), variant=str(_i), tag=_t)
        for _i, (_kk, _ic, _oc, _dhw, _n, *_gs) in enumerate(_CONV_3D)
        for _t in ("f32", "f16")
    ],
    bounds=_F16_COLUMNS,
)
# an F16 kernel: the patches are stored as F16
spec(
    "conv_3d_direct",
    samples=[
        *(
            Sample(
                {"a": (_t, (_oc * _ic,) + _kk), "b": ("f32", (_n * _ic,) + _dhw)},
                (*_gs, _ic, _n, _oc),
                variant=str(_i),
                tag=_t,
                bounds=_f16_if(_t == "f16"),
            )
            for _i, (_kk, _ic, _oc, _dhw, _n, *_gs) in enumerate(_CONV_3D)
            for _t in ("f32", "f16")
        ),
        Sample(
            {"a": ("f32", (4, 3, 3, 3)), "b": In("f32", (2, 7, 5, 9), layout=Permuted((0, 2, 1, 3)))},
            (1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 1, 2),
            variant="permuted",
        ),
    ],
    reads=("CONV_3D",),
    from_node=lambda n: oracles.conv_3d_direct(n.arg(0), n.arg(1), *n.scalars()),
)
