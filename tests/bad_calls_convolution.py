"""Bad calls of the convolution, pooling, resampling and padding ops (loaded by test_bad_input.py): (op, call(ctx, t),
exception, words); t(type, NumPy shape) makes a tensor in ctx."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyggml import ops
from pyggml.errors import GraphError, OpError

BAD: list[tuple[str, Callable[..., Any], type[Exception], str]] = []


def _bad(op, fn, exc, words):
    BAD.append((op, fn, exc, words))


def _k2(t, type="f32"):
    return t(type, (2, 3, 3, 3))  # kernel [KW 3, KH 3, IC 3, OC 2]


def _x2(t, type="f32"):
    return t(type, (1, 3, 7, 9))  # data [W 9, H 7, IC 3, N 1]


# --- im2col -------------------------------------------------------------------------------------------------------
_bad("im2col", lambda c, t: ops.im2col(c, _k2(t), _x2(t), 0, 1, 0, 0, 1, 1, True), ValueError, "s0 must be in 1..")
_bad("im2col", lambda c, t: ops.im2col(c, t("f32", (2, 3, 9, 9)), _x2(t), 1, 1, 0, 0, 1, 1, True), OpError,
     "b too small")
_bad("im2col", lambda c, t: ops.im2col(c, t("f32", (2, 4, 3, 3)), _x2(t), 1, 1, 0, 0, 1, 1, True), OpError,
     "a->ne[2] == b->ne[2]")
_bad("im2col", lambda c, t: ops.im2col(c, _k2(t), _x2(t), 1, 1, -1, 0, 1, 1, True), ValueError, "p0 must be in 0..")
_bad("im2col", lambda c, t: ops.im2col(c, _k2(t), _x2(t), 1, 1, 0, 0, 1, 1, 1), TypeError, "is_2D must be a bool")
_bad("im2col", lambda c, t: ops.im2col(c, _k2(t), [1], 1, 1, 0, 0, 1, 1, True), TypeError, "b must be a Tensor")
_bad("im2col", lambda c, t: ops.im2col(c, _k2(t), _x2(t), 1, 1, 0, 0, 1, 1, True, "bf16"), GraphError,
     "F32 or F16 columns")
_bad("im2col", lambda c, t: ops.im2col(c, _k2(t), _x2(t, "f16"), 1, 1, 0, 0, 1, 1, True, "f32"), GraphError,
     "takes F32 src1, got F16")
_bad("im2col", lambda c, t: ops.im2col(c, _k2(t), ops.transpose(c, _x2(t)), 1, 1, 0, 0, 1, 1, True), GraphError,
     "contiguous rows")

# --- convolutions ----------------------------------------------------------------------------------------------------
_bad("conv_1d", lambda c, t: ops.conv_1d(c, t("f32", (2, 3, 3)), t("f32", (1, 3, 9)), 0, 0, 1), ValueError,
     "s0 must be in 1..")
_bad("conv_1d", lambda c, t: ops.conv_1d(c, t("f32", (2, 3, 13)), t("f32", (1, 3, 9)), 1, 1, 1), OpError, "b too small")
_bad("conv_1d_dw", lambda c, t: ops.conv_1d_dw(c, t("f32", (3, 1, 3)), t("f32", (1, 3, 9)), 1, 0, 0), ValueError,
     "d0 must be in 1..")
_bad("conv_2d", lambda c, t: ops.conv_2d(c, _k2(t), _x2(t), 1, 1, 0, 0, 1, 1.5), TypeError, "d1 must be an integer")
_bad("conv_2d", lambda c, t: ops.conv_2d(c, t("f32", (2, 4, 3, 3)), _x2(t), 1, 1, 0, 0, 1, 1), OpError, "a->ne[2] == b->ne[2]")
_bad("conv_2d_dw", lambda c, t: ops.conv_2d_dw(c, t("f16", (3, 1, 3, 3)), _x2(t), 1, 0, 0, 0, 1, 1), ValueError,
     "s1 must be in 1..")
_bad("conv_2d_direct", lambda c, t: ops.conv_2d_direct(c, _k2(t), _x2(t), 1, 1, 0, 0, 0, 1), ValueError,
     "d0 must be in 1..")
_bad("conv_2d_direct", lambda c, t: ops.conv_2d_direct(c, t("f32", (2, 3, 9, 3)), _x2(t), 1, 1, 0, 0, 1, 1), ValueError,
     "b too small")
_bad("conv_2d_dw_direct", lambda c, t: ops.conv_2d_dw_direct(c, t("f32", (3, 1, 3, 3)), _x2(t), 1, 1, 0, 0, 5, 1),
     ValueError, "b too small")
_bad("conv_2d_direct", lambda c, t: ops.conv_2d_direct(c, _k2(t, "bf16"), _x2(t), 1, 1, 0, 0, 1, 1), GraphError,
     "takes F32/F16 src0, got BF16")
_bad("conv_2d_dw_direct", lambda c, t: ops.conv_2d_dw_direct(c, t("f32", (3, 1, 3, 3)), _x2(t), 0, 1, 0, 0, 1, 1),
     ValueError, "stride0 must be in 1..")
_bad("conv_2d_dw_direct", lambda c, t: ops.conv_2d_dw_direct(c, t("f32", (4, 1, 3, 3)), _x2(t), 1, 1, 0, 0, 1, 1),
     OpError, "a->ne[3] == b->ne[2]")
_bad("conv_2d_dw_direct", lambda c, t: ops.conv_2d_dw_direct(c, t("f32", (3, 1, 3, 3)), ops.transpose(c, _x2(t)),
                                                             1, 1, 0, 0, 1, 1), GraphError, "contiguous data, or channels")
_bad("conv_transpose_1d", lambda c, t: ops.conv_transpose_1d(c, t("f32", (3, 2, 3)), t("f32", (3, 9)), 1, 1, 1), OpError,
     "p0 == 0")
_bad("conv_transpose_1d", lambda c, t: ops.conv_transpose_1d(c, t("f32", (3, 2, 3)), t("f32", (3, 9)), 0), ValueError,
     "s0 must be in 1..")
_bad("conv_transpose_2d_p0", lambda c, t: ops.conv_transpose_2d_p0(c, t("f32", (3, 2, 3, 3)), _x2(t), 0), ValueError,
     "stride must be in 1..")
_bad("conv_transpose_2d_p0", lambda c, t: ops.conv_transpose_2d_p0(c, t("f32", (4, 2, 3, 3)), _x2(t), 1), OpError,
     "a->ne[3] == b->ne[2]")

# --- pooling ---------------------------------------------------------------------------------------------------------
_bad("pool_1d", lambda c, t: ops.pool_1d(c, t("f32", (3, 9)), 2, 3, 1, 0), ValueError, "op must be 0 (max) or 1 (avg)")
_bad("pool_1d", lambda c, t: ops.pool_1d(c, t("f32", (3, 9)), 0, 3, 0, 0), ValueError, "s0 must be in 1..")
_bad("pool_1d", lambda c, t: ops.pool_1d(c, t("f32", (3, 9)), 0, 3, 1, 3), ValueError, "must be smaller than k0")
_bad("pool_1d", lambda c, t: ops.pool_1d(c, t("f32", (3, 2)), 0, 3, 1, 0), OpError, "ne[0] > 0")
_bad("pool_1d", lambda c, t: ops.pool_1d(c, t("i32", (3, 9)), 0, 3, 1, 0), GraphError, "takes F32/F16 src0, got I32")
_bad("pool_2d", lambda c, t: ops.pool_2d(c, t("f32", (3, 9)), -1, 3, 3, 1, 1, 0, 0), ValueError, "op must be 0")
_bad("pool_2d", lambda c, t: ops.pool_2d(c, t("f32", (3, 9)), 0, 3, 3, 1, 1, 0.5, 0), TypeError, "p0 must be an integer")
_bad("pool_2d", lambda c, t: ops.pool_2d(c, t("f32", (2, 9)), 0, 3, 3, 1, 1, 0, 0), OpError, "ne[1] > 0")
_bad("pool_2d", lambda c, t: ops.pool_2d(c, ops.transpose(c, t("f32", (5, 9))), 1, 3, 3, 1, 1, 0, 0), GraphError,
     "contiguous")

# --- padding ---------------------------------------------------------------------------------------------------------
_bad("pad_reflect_1d", lambda c, t: ops.pad_reflect_1d(c, t("f32", (3, 5)), 5, 0), OpError, "p0 < a->ne[0]")
_bad("pad_reflect_1d", lambda c, t: ops.pad_reflect_1d(c, t("f32", (3, 5)), -1, 0), ValueError, "p0 must be in 0..")
_bad("pad_reflect_1d", lambda c, t: ops.pad_reflect_1d(c, t("f16", (3, 5)), 1, 1), OpError, "GGML_TYPE_F32")

# --- 3-D ----------------------------------------------------------------------------------------------------------
_bad("im2col_3d", lambda c, t: ops.im2col_3d(c, t("f32", (6, 3, 3, 3)), t("f32", (6, 5, 7, 9)), 0, 1, 1, 1, 0, 0, 0,
                                             1, 1, 1), ValueError, "IC must be in 1..")
_bad("im2col_3d", lambda c, t: ops.im2col_3d(c, t("f32", (6, 3, 3, 3)), t("f32", (6, 5, 7, 9)), 3, 1, 0, 1, 0, 0, 0,
                                             1, 1, 1), ValueError, "s1 must be in 1..")

# --- col2im_1d, resampling -------------------------------------------------------------------------------------------
_bad("col2im_1d", lambda c, t: ops.col2im_1d(c, t("f32", (5, 6)), 0, 2, 0), OpError, "s0 > 0")
_bad("col2im_1d", lambda c, t: ops.col2im_1d(c, t("f32", (5, 7)), 1, 2, 0), OpError, "K_OC == K * oc")
_bad("col2im_1d", lambda c, t: ops.col2im_1d(c, t("f32", (5, 6)), 1, 2, -1), ValueError, "p0 must be in 0..")
_bad("upscale", lambda c, t: ops.upscale(c, t("f32", (3, 5)), 1), ValueError, "scale_factor must be in 2..")
_bad("upscale", lambda c, t: ops.upscale(c, t("f32", (3, 5)), 2, 7), OpError, "GGML_SCALE_MODE_COUNT")
_bad("upscale", lambda c, t: ops.upscale(c, t("f16", (3, 5)), 2, 0), OpError, "GGML_TYPE_F32")
_bad("upscale_ext", lambda c, t: ops.upscale_ext(c, t("f32", (3, 5)), 0, 3, 1, 1), ValueError, "ne must be positive")
_bad("interpolate", lambda c, t: ops.interpolate(c, t("f32", (3, 5)), 7, 3, 1, 1, 0 | 512), OpError, "ANTIALIAS")
_bad("interpolate", lambda c, t: ops.interpolate(c, t("f32", (3, 5)), 7, 3, 1, 1, -1), ValueError, "mode must be in 0..")
_bad("interpolate", lambda c, t: ops.interpolate(c, "x", 7, 3, 1, 1), TypeError, "a must be a Tensor")
_bad("im2col_3d", lambda c, t: ops.im2col_3d(c, t("f32", (6, 3, 3, 3)), t("f32", (5, 5, 7, 9)), 3, 1, 1, 1, 0, 0, 0,
                                             1, 1, 1), ValueError, "b's ne[3] (5) must be a multiple of IC (3)")
_bad("im2col_3d", lambda c, t: ops.im2col_3d(c, t("f32", (6, 3, 3, 3)), t("f32", (6, 5, 7, 9)), 3, 1, 1, 1, 0, 0, 0,
                                             1, 1, 1, "q8_0"), GraphError, "F32 or F16 columns")
_bad("conv_3d", lambda c, t: ops.conv_3d(c, t("f32", (6, 3, 3, 3)), t("f32", (6, 2, 7, 9)), 3, 1, 1, 1, 0, 0, 0,
                                         1, 1, 1), OpError, "b too small")
_bad("conv_3d", lambda c, t: ops.conv_3d(c, t("f32", (7, 3, 3, 3)), t("f32", (6, 5, 7, 9)), 3, 1, 1, 1, 0, 0, 0,
                                         1, 1, 1), ValueError, "a's ne[3] (7) must be a multiple of IC")
_bad("conv_3d_direct", lambda c, t: ops.conv_3d_direct(c, t("f32", (6, 3, 3, 3)), t("f32", (6, 5, 7, 9)), 1, 1, 1, 0, 0,
                                                       0, 1, 1, 1, 3, 2, 3), OpError, "a->ne[3] == (int64_t) c * oc")
_bad("conv_3d_direct", lambda c, t: ops.conv_3d_direct(c, t("f32", (6, 3, 3, 3)), t("f32", (6, 2, 7, 9)), 1, 1, 1, 0, 0,
                                                       0, 1, 1, 1, 3, 2, 2), ValueError, "b too small")
_bad("conv_3d_direct", lambda c, t: ops.conv_3d_direct(c, t("f32", (6, 3, 3, 3)), t("f16", (6, 5, 7, 9)), 1, 1, 1, 0, 0,
                                                       0, 1, 1, 1, 3, 2, 2), GraphError, "takes F32 src1, got F16")
# ggml's conv_1d mixes the batches of b (docs/findings.md): one sequence only
_bad("conv_1d", lambda c, t: ops.conv_1d(c, t("f32", (3, 2, 3)), t("f32", (2, 2, 11)), 1, 0, 1), ValueError,
     "must hold one sequence")

# scalar arguments (issue 19)
_bad("pool_2d", lambda c, t: ops.pool_2d(c, t("f32", (1, 1, 8, 8)), 0, "2", 2, 2, 2, 0, 0), TypeError,
     "k0 must be an integer, got str")
_bad("conv_2d", lambda c, t: ops.conv_2d(c, t("f32", (2, 1, 3, 3)), t("f32", (1, 1, 8, 8)), 1.0, 1, 0, 0, 1, 1),
     TypeError, "s0 must be an integer, got float")
