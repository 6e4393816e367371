"""Bad calls of the backward ops, losses and optimizer steps (loaded by tests/test_bad_input.py)."""

from __future__ import annotations

import numpy as np

from pyggml import lib, ops
from pyggml.errors import GraphError, OpError


def _param(t):
    lib.ggml_set_param(t.ptr)
    return t


def _cols(c, t, n):
    return ops.view_2d(c, t, n, t.ne[1], t.nb[1], 0)


BAD = [
    ("silu_back", lambda c, t: ops.silu_back(c, t("f32", (3, 8)), t("f32", (4, 8))), ValueError, "same shape"),
    ("silu_back", lambda c, t: ops.silu_back(c, t("f32", (3, 8)), np.zeros((3, 8))), TypeError, "b must be a Tensor"),
    ("silu_back", lambda c, t: ops.silu_back(c, t("f16", (3, 8)), t("f32", (3, 8))), GraphError, "gradient's type"),
    ("silu_back", lambda c, t: ops.silu_back(c, t("bf16", (3, 8)), t("bf16", (3, 8))), GraphError, "F32/F16"),
    ("silu_back", lambda c, t: ops.silu_back(c, ops.transpose(c, t("f32", (3, 8))), t("f32", (8, 3))),
     GraphError, "with contiguous rows"),
    ("rms_norm_back", lambda c, t: ops.rms_norm_back(c, t("f32", (3, 8)), t("f32", (3, 8)), -1.0), ValueError,
     "eps must be finite and >= 0"),
    ("rms_norm_back", lambda c, t: ops.rms_norm_back(c, t("f32", (3, 8)), t("f32", (3, 7))), ValueError, "same shape"),
    ("rms_norm_back", lambda c, t: ops.rms_norm_back(c, t("f16", (3, 8)), t("f16", (3, 8))), GraphError, "takes F32"),
    ("repeat_back", lambda c, t: ops.repeat_back(c, t("f32", (3, 8)), t("f32", (2, 8))), OpError, "ggml_can_repeat"),
    ("repeat_back", lambda c, t: ops.repeat_back(c, t("f16", (4, 8)), t("f16", (2, 8))), GraphError, "takes F32"),
    ("get_rows_back", lambda c, t: ops.get_rows_back(c, t("f32", (4, 8)), t("i32", (3,)), t("f32", (5, 8))),
     ValueError, "one index per row of a"),
    ("get_rows_back", lambda c, t: ops.get_rows_back(c, t("f32", (4, 8)), t("i32", (4,)), t("f32", (5, 7))),
     OpError, "a->ne[0] == c->ne[0]"),
    ("get_rows_back", lambda c, t: ops.get_rows_back(c, t("f32", (4, 8)), ops.view_nd(c, t("i32", (8,)), [4, 1, 1, 1], [8, 32, 32, 32]),
                                                     t("f32", (5, 8))), GraphError, "src1 contiguous"),
    ("get_rows_back", lambda c, t: ops.get_rows_back(c, t("f32", (4, 8)), t("i32", (4,)), "c"), TypeError,
     "c must be a Tensor"),
    ("soft_max_ext_back", lambda c, t: ops.soft_max_ext_back(c, t("f32", (3, 8)), t("f32", (3, 9))), ValueError,
     "same shape"),
    ("soft_max_ext_back", lambda c, t: ops.soft_max_ext_back(c, t("f32", (3, 8)), t("f32", (3, 8)), float("inf")),
     ValueError, "scale must be finite"),
    ("soft_max_ext_back", lambda c, t: ops.soft_max_ext_back(c, ops.transpose(c, t("f32", (8, 8))), t("f32", (8, 8))),
     GraphError, "contiguous"),
    ("rope_ext_back", lambda c, t: ops.rope_ext_back(c, t("f32", (5, 2, 16)), t("i32", (5,)), n_dims=16, mode=8),
     ValueError, "mode must be 0 (normal) or 2 (neox)"),
    ("rope_ext_back", lambda c, t: ops.rope_ext_back(c, t("f32", (5, 2, 16)), t("i32", (5,)), n_dims=7),
     ValueError, "must be even and positive"),
    ("rope_ext_back", lambda c, t: ops.rope_ext_back(c, t("f32", (5, 2, 16)), t("i32", (4,)), n_dims=16),
     OpError, "a->ne[2] == b->ne[0]"),
    ("rope_ext_back", lambda c, t: ops.rope_ext_back(c, t("f32", (5, 2, 16)), t("i32", (5,)), n_dims=32),
     GraphError, "must not exceed"),
    ("im2col_back", lambda c, t: ops.im2col_back(c, t("f32", (5, 3)), t("f32", (1, 3)), [7, 1, 1, 2],
                                                 1, 0, 0, 0, 1, 0, False), ValueError, "a 1D input has 3 dims"),
    ("im2col_back", lambda c, t: ops.im2col_back(c, t("f32", (1, 4, 5, 9)), t("f32", (1, 1, 3, 3)), [7, 7, 1, 1],
                                                 1, 1, 0, 0, 1, 1, True), ValueError, "gradient of im2col's output"),
    ("im2col_back", lambda c, t: ops.im2col_back(c, t("f32", (1, 5, 5, 9)), t("f32", (1, 1, 3, 3)), [7, 7, 1, 1],
                                                 0, 1, 0, 0, 1, 1, True), ValueError, "strides and dilations must be positive"),
    ("im2col_back", lambda c, t: ops.im2col_back(c, ops.permute(c, t("f32", (5, 9, 5)), 1, 0, 2, 3), t("f32", (3, 3)),
                                                 [7, 7, 1, 1], 1, 1, 0, 0, 1, 1, True), GraphError, "src0 contiguous"),
    ("pool_2d_back", lambda c, t: ops.pool_2d_back(c, t("f32", (3, 4)), t("f32", (6, 8)), 2, 2, 2, 2, 2),
     ValueError, "op must be"),
    ("pool_2d_back", lambda c, t: ops.pool_2d_back(c, t("f32", (3, 3)), t("f32", (6, 8)), 0, 2, 2, 2, 2),
     ValueError, "shape of pool_2d's output"),
    ("pool_2d_back", lambda c, t: ops.pool_2d_back(c, t("f32", (3, 4)), t("f32", (6, 8)), 0, 2, 2, 2, 2, 0.5),
     ValueError, "whole numbers"),
    ("pool_2d_back", lambda c, t: ops.pool_2d_back(c, t("f32", (3, 4)), t("f16", (6, 8)), 1, 2, 2, 2, 2),
     GraphError, "takes F32 src1"),
    ("cross_entropy_loss", lambda c, t: ops.cross_entropy_loss(c, t("f32", (3, 8)), t("f32", (3, 7))), OpError,
     "ggml_are_same_shape(a, b)"),
    ("cross_entropy_loss", lambda c, t: ops.cross_entropy_loss(c, t("f16", (3, 8)), t("f16", (3, 8))), GraphError,
     "takes F32"),
    ("cross_entropy_loss", lambda c, t: ops.cross_entropy_loss(c, ops.transpose(c, t("f32", (8, 8))), t("f32", (8, 8))),
     GraphError, "contiguous rows"),
    ("cross_entropy_loss_back", lambda c, t: ops.cross_entropy_loss_back(c, t("f32", (2,)), t("f32", (3, 8)),
                                                                         t("f32", (3, 8))), OpError, "ggml_is_scalar(a)"),
    ("cross_entropy_loss_back", lambda c, t: ops.cross_entropy_loss_back(c, t("f32", (1,)), t("f32", (3, 8)),
                                                                         t("f16", (3, 8))), GraphError, "takes F32 src2"),
    ("cross_entropy_loss_back", lambda c, t: ops.cross_entropy_loss_back(c, t("f32", (1,)), _cols(c, t("f32", (3, 9)), 8),
                                                                         t("f32", (3, 8))), GraphError, "contiguous"),
    ("opt_step_adamw", lambda c, t: ops.opt_step_adamw(c, t("f32", (3, 8)), t("f32", (3, 8)), t("f32", (3, 8)),
                                                       t("f32", (3, 8)), t("f32", (7,))), OpError, "GGML_TENSOR_FLAG_PARAM"),
    ("opt_step_adamw", lambda c, t: ops.opt_step_adamw(c, _param(t("f32", (3, 8))), t("f32", (3, 8)), t("f32", (3, 8)),
                                                       t("f32", (3, 8)), t("f32", (6,))), OpError, "== 7"),
    ("opt_step_adamw", lambda c, t: ops.opt_step_adamw(c, _param(t("f32", (3, 8))), t("f32", (3, 8)), t("f16", (3, 8)),
                                                       t("f32", (3, 8)), t("f32", (7,))), GraphError, "takes F32 src2"),
    ("opt_step_adamw", lambda c, t: ops.opt_step_adamw(c, _param(t("f32", (8, 8))), _cols(c, t("f32", (8, 9)), 8),
                                                       t("f32", (8, 8)), t("f32", (8, 8)), t("f32", (7,))),
     GraphError, "with the parameter's strides"),
    ("opt_step_sgd", lambda c, t: ops.opt_step_sgd(c, t("f32", (3, 8)), t("f32", (3, 8)), t("f32", (2,))), OpError,
     "GGML_TENSOR_FLAG_PARAM"),
    ("opt_step_sgd", lambda c, t: ops.opt_step_sgd(c, _param(t("f16", (3, 8))), t("f16", (3, 8)), t("f32", (2,))),
     GraphError, "takes F32"),
    ("opt_step_sgd", lambda c, t: ops.opt_step_sgd(c, _param(t("f32", (3, 8))), t("f32", (3, 8)), None), TypeError,
     "sgd_params must be a Tensor"),
    # scalar arguments (issue 19)
    ("rope_ext_back", lambda c, t: ops.rope_ext_back(c, t("f32", (4, 2, 8)), t("i32", (4,)), mode=True), TypeError,
     "mode must be an integer, got bool"),
    ("rope_ext_back", lambda c, t: ops.rope_ext_back(c, t("f32", (4, 2, 8)), t("i32", (4,)), attn_factor="1"),
     TypeError, "attn_factor must be a number, got str"),
    ("rms_norm_back", lambda c, t: ops.rms_norm_back(c, t("f32", (3, 8)), t("f32", (3, 8)), "1e-6"), TypeError,
     "eps must be a number"),
]
