"""Specs of the backward ops, losses and optimizer steps. Backward ops get the forward op's input
(or output) as ggml's own backward pass passes it, and a random output gradient."""

from __future__ import annotations

from typing import Any

import numpy as np

from pyggml import ops
from pyggml._native import lib
from pyggml.context import Context
from pyggml.errors import GraphError, OpError
from pyggml.tensor import Tensor
from pyggml.testing.engine import oracles
from pyggml.testing.engine.opdb import *  # noqa: F403 - the database's vocabulary, opdb.__all__
from pyggml.testing.engine.opdb.attention import ROPE_PARAMS, rope_offset_node


def softmax_rows(spread: float = 2.0) -> Gen:
    """Rows that are probability distributions (softmax outputs, cross-entropy labels)."""

    def gen(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        x = rng.uniform(-spread, spread, size=shape)
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)

    return gen


def one_hot(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    out = np.zeros(shape, dtype=np.float32)
    rows = out.reshape(-1, shape[-1])
    rows[np.arange(rows.shape[0]), rng.integers(0, shape[-1], rows.shape[0])] = 1.0
    return out


def _grad_softmax_rows(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """The labels of the cross_entropy_loss grad case (as grad.py's mlp case draws them)."""
    e = np.exp(rng.uniform(-2, 2, size=shape))
    return (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)


def _param(t: Any) -> Any:
    """opt_step ops update a tensor flagged as a trainable parameter (ggml_set_param); a NumPy array (the
    oracle side of a call) passes unchanged."""
    if isinstance(t, Tensor):
        lib.ggml_set_param(t.ptr)
    return t


def _cols(c: Context, t: Tensor, n: int) -> Tensor:
    """The first n columns of a 2-d tensor: rows not packed one after the other (bad calls)."""
    return ops.view_2d(c, t, n, t.ne[1], t.nb[1], 0)


def _dims(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape))


# --- bad calls (moved from tests/bad_calls_training.py): (op, call(ctx, t), exception, words) -------------------------
bad("silu_back", lambda c, t: ops.silu_back(c, t("f32", (3, 8)), t("f32", (4, 8))), ValueError, "same shape")
bad("silu_back", lambda c, t: ops.silu_back(c, t("f32", (3, 8)), np.zeros((3, 8))), TypeError, "b must be a Tensor")
bad("silu_back", lambda c, t: ops.silu_back(c, t("f16", (3, 8)), t("f32", (3, 8))), GraphError, "gradient's type")
bad("silu_back", lambda c, t: ops.silu_back(c, t("bf16", (3, 8)), t("bf16", (3, 8))), GraphError, "F32/F16")
bad(
    "silu_back",
    lambda c, t: ops.silu_back(c, ops.transpose(c, t("f32", (3, 8))), t("f32", (8, 3))),
    GraphError,
    "with contiguous rows",
)
bad(
    "rms_norm_back",
    lambda c, t: ops.rms_norm_back(c, t("f32", (3, 8)), t("f32", (3, 8)), -1.0),
    ValueError,
    "eps must be finite and >= 0",
)
bad("rms_norm_back", lambda c, t: ops.rms_norm_back(c, t("f32", (3, 8)), t("f32", (3, 7))), ValueError, "same shape")
bad("rms_norm_back", lambda c, t: ops.rms_norm_back(c, t("f16", (3, 8)), t("f16", (3, 8))), GraphError, "takes F32")
bad("repeat_back", lambda c, t: ops.repeat_back(c, t("f32", (3, 8)), t("f32", (2, 8))), OpError, "ggml_can_repeat")
bad("repeat_back", lambda c, t: ops.repeat_back(c, t("f16", (4, 8)), t("f16", (2, 8))), GraphError, "takes F32")
bad(
    "get_rows_back",
    lambda c, t: ops.get_rows_back(c, t("f32", (4, 8)), t("i32", (3,)), t("f32", (5, 8))),
    ValueError,
    "one index per row of a",
)
bad(
    "get_rows_back",
    lambda c, t: ops.get_rows_back(c, t("f32", (4, 8)), t("i32", (4,)), t("f32", (5, 7))),
    OpError,
    "a->ne[0] == c->ne[0]",
)
bad(
    "get_rows_back",
    lambda c, t: ops.get_rows_back(
        c, t("f32", (4, 8)), ops.view_nd(c, t("i32", (8,)), [4, 1, 1, 1], [8, 32, 32, 32]), t("f32", (5, 8))
    ),
    GraphError,
    "src1 contiguous",
)
bad(
    "get_rows_back",
    lambda c, t: ops.get_rows_back(c, t("f32", (4, 8)), t("i32", (4,)), "c"),
    TypeError,
    "c must be a Tensor",
)
bad(
    "soft_max_ext_back",
    lambda c, t: ops.soft_max_ext_back(c, t("f32", (3, 8)), t("f32", (3, 9))),
    ValueError,
    "same shape",
)
bad(
    "soft_max_ext_back",
    lambda c, t: ops.soft_max_ext_back(c, t("f32", (3, 8)), t("f32", (3, 8)), float("inf")),
    ValueError,
    "scale must be finite",
)
bad(
    "soft_max_ext_back",
    lambda c, t: ops.soft_max_ext_back(c, ops.transpose(c, t("f32", (8, 8))), t("f32", (8, 8))),
    GraphError,
    "contiguous",
)
bad(
    "rope_ext_back",
    lambda c, t: ops.rope_ext_back(c, t("f32", (5, 2, 16)), t("i32", (5,)), n_dims=16, mode=8),
    ValueError,
    "mode must be 0 (normal) or 2 (neox)",
)
bad(
    "rope_ext_back",
    lambda c, t: ops.rope_ext_back(c, t("f32", (5, 2, 16)), t("i32", (5,)), n_dims=7),
    ValueError,
    "must be even and positive",
)
bad(
    "rope_ext_back",
    lambda c, t: ops.rope_ext_back(c, t("f32", (5, 2, 16)), t("i32", (4,)), n_dims=16),
    OpError,
    "a->ne[2] == b->ne[0]",
)
bad(
    "rope_ext_back",
    lambda c, t: ops.rope_ext_back(c, t("f32", (5, 2, 16)), t("i32", (5,)), n_dims=32),
    GraphError,
    "must not exceed",
)
bad(
    "im2col_back",
    lambda c, t: ops.im2col_back(c, t("f32", (5, 3)), t("f32", (1, 3)), [7, 1, 1, 2], 1, 0, 0, 0, 1, 0, False),
    ValueError,
    "a 1D input has 3 dims",
)
bad(
    "im2col_back",
    lambda c, t: ops.im2col_back(
        c, t("f32", (1, 4, 5, 9)), t("f32", (1, 1, 3, 3)), [7, 7, 1, 1], 1, 1, 0, 0, 1, 1, True
    ),
    ValueError,
    "gradient of im2col's output",
)
bad(
    "im2col_back",
    lambda c, t: ops.im2col_back(
        c, t("f32", (1, 5, 5, 9)), t("f32", (1, 1, 3, 3)), [7, 7, 1, 1], 0, 1, 0, 0, 1, 1, True
    ),
    ValueError,
    "strides and dilations must be positive",
)
bad(
    "im2col_back",
    lambda c, t: ops.im2col_back(
        c, ops.permute(c, t("f32", (5, 9, 5)), 1, 0, 2, 3), t("f32", (3, 3)), [7, 7, 1, 1], 1, 1, 0, 0, 1, 1, True
    ),
    GraphError,
    "src0 contiguous",
)
bad(
    "pool_2d_back",
    lambda c, t: ops.pool_2d_back(c, t("f32", (3, 4)), t("f32", (6, 8)), 2, 2, 2, 2, 2),
    ValueError,
    "op must be",
)
bad(
    "pool_2d_back",
    lambda c, t: ops.pool_2d_back(c, t("f32", (3, 3)), t("f32", (6, 8)), 0, 2, 2, 2, 2),
    ValueError,
    "shape of pool_2d's output",
)
bad(
    "pool_2d_back",
    lambda c, t: ops.pool_2d_back(c, t("f32", (3, 4)), t("f32", (6, 8)), 0, 2, 2, 2, 2, 0.5),
    ValueError,
    "whole numbers",
)
bad(
    "pool_2d_back",
    lambda c, t: ops.pool_2d_back(c, t("f32", (3, 4)), t("f16", (6, 8)), 1, 2, 2, 2, 2),
    GraphError,
    "takes F32 src1",
)
bad(
    "cross_entropy_loss",
    lambda c, t: ops.cross_entropy_loss(c, t("f32", (3, 8)), t("f32", (3, 7))),
    OpError,
    "ggml_are_same_shape(a, b)",
)
bad(
    "cross_entropy_loss",
    lambda c, t: ops.cross_entropy_loss(c, t("f16", (3, 8)), t("f16", (3, 8))),
    GraphError,
    "takes F32",
)
bad(
    "cross_entropy_loss",
    lambda c, t: ops.cross_entropy_loss(c, ops.transpose(c, t("f32", (8, 8))), t("f32", (8, 8))),
    GraphError,
    "contiguous rows",
)
bad(
    "cross_entropy_loss_back",
    lambda c, t: ops.cross_entropy_loss_back(c, t("f32", (2,)), t("f32", (3, 8)), t("f32", (3, 8))),
    OpError,
    "ggml_is_scalar(a)",
)
bad(
    "cross_entropy_loss_back",
    lambda c, t: ops.cross_entropy_loss_back(c, t("f32", (1,)), t("f32", (3, 8)), t("f16", (3, 8))),
    GraphError,
    "takes F32 src2",
)
bad(
    "cross_entropy_loss_back",
    lambda c, t: ops.cross_entropy_loss_back(c, t("f32", (1,)), _cols(c, t("f32", (3, 9)), 8), t("f32", (3, 8))),
    GraphError,
    "contiguous",
)
bad(
    "opt_step_adamw",
    lambda c, t: ops.opt_step_adamw(
        c, t("f32", (3, 8)), t("f32", (3, 8)), t("f32", (3, 8)), t("f32", (3, 8)), t("f32", (7,))
    ),
    OpError,
    "GGML_TENSOR_FLAG_PARAM",
)
bad(
    "opt_step_adamw",
    lambda c, t: ops.opt_step_adamw(
        c, _param(t("f32", (3, 8))), t("f32", (3, 8)), t("f32", (3, 8)), t("f32", (3, 8)), t("f32", (6,))
    ),
    OpError,
    "== 7",
)
bad(
    "opt_step_adamw",
    lambda c, t: ops.opt_step_adamw(
        c, _param(t("f32", (3, 8))), t("f32", (3, 8)), t("f16", (3, 8)), t("f32", (3, 8)), t("f32", (7,))
    ),
    GraphError,
    "takes F32 src2",
)
bad(
    "opt_step_adamw",
    lambda c, t: ops.opt_step_adamw(
        c,
        _param(t("f32", (8, 8))),
        _cols(c, t("f32", (8, 9)), 8),
        t("f32", (8, 8)),
        t("f32", (8, 8)),
        t("f32", (7,)),
    ),
    GraphError,
    "with the parameter's strides",
)
bad(
    "opt_step_sgd",
    lambda c, t: ops.opt_step_sgd(c, t("f32", (3, 8)), t("f32", (3, 8)), t("f32", (2,))),
    OpError,
    "GGML_TENSOR_FLAG_PARAM",
)
bad(
    "opt_step_sgd",
    lambda c, t: ops.opt_step_sgd(c, _param(t("f16", (3, 8))), t("f16", (3, 8)), t("f32", (2,))),
    GraphError,
    "takes F32",
)
bad(
    "opt_step_sgd",
    lambda c, t: ops.opt_step_sgd(c, _param(t("f32", (3, 8))), t("f32", (3, 8)), None),
    TypeError,
    "sgd_params must be a Tensor",
)
bad(
    "rope_ext_back",
    lambda c, t: ops.rope_ext_back(c, t("f32", (4, 2, 8)), t("i32", (4,)), mode=True),
    TypeError,
    "mode must be an integer, got bool",
)
bad(
    "rope_ext_back",
    lambda c, t: ops.rope_ext_back(c, t("f32", (4, 2, 8)), t("i32", (4,)), attn_factor="1"),
    TypeError,
    "attn_factor must be a number, got str",
)
bad(
    "rms_norm_back",
    lambda c, t: ops.rms_norm_back(c, t("f32", (3, 8)), t("f32", (3, 8)), "1e-6"),
    TypeError,
    "eps must be a number",
)


# --- silu_back ------------------------------------------------------------------------------------------
spec(
    "silu_back",
    samples=[
        *(
            Sample({"g": (_t, _shape), "x": (_t, _shape, uniform(-5, 5))}, variant=_dims(_shape))
            for _t, _shape in (
                ("f32", (3, 5, 7)),
                ("f32", (13,)),
                ("f32", (2, 3, 5, 7)),
                ("f16", (4, 11)),
                ("f16", (3, 2, 9)),
            )
        ),
        Sample(
            {"g": In("f32", (5, 9), None, Columns(0, 7)), "x": In("f32", (5, 9), uniform(-4, 4), Columns(0, 7))},
            variant="strided_rows",
        ),
        Sample(
            {"g": In("f16", (3, 13), None, Columns(0, 11)), "x": In("f16", (3, 13), uniform(-4, 4), Columns(0, 11))},
            variant="strided_rows",
        ),
        Sample({"g": ("f32", (7, 5)), "x": ("f32", (7, 5), uniform(-20, 20))}, variant="large_x"),
    ],
    reads=("SILU_BACK",),
    from_node=lambda n: oracles.silu_back(n.arg(0), n.arg(1)),
)

# --- rms_norm_back --------------------------------------------------------------------------------------
spec(
    "rms_norm_back",
    samples=[
        *(
            Sample(
                {"g": ("f32", _shape), "x": ("f32", _shape, uniform(-2, 2))},
                (_eps,),
                variant=f"{_dims(_shape)}/eps{_eps:g}",
            )
            for _shape, _eps in (((3, 16), 1e-6), ((2, 3, 13), 1e-5), ((5, 7), 1e-3), ((11,), 0.0), ((2, 2, 3, 5), 0.1))
        ),
        Sample(
            {
                "g": In("f32", (5, 3, 7), None, Permuted((0, 2, 1, 3))),
                "x": In("f32", (5, 3, 7), uniform(-2, 2), Permuted((0, 2, 1, 3))),
            },
            (1e-6,),
            variant="permuted",
        ),
        Sample(
            {"g": In("f32", (5, 9), None, Columns(0, 7)), "x": In("f32", (5, 9), uniform(-2, 2), Columns(0, 7))},
            (1e-5,),
            variant="strided_rows",
        ),
    ],
    reads=("RMS_NORM_BACK",),
    from_node=lambda n: oracles.rms_norm_back(n.arg(0), n.arg(1), n.param("eps")),
)

# --- repeat_back: a of the repeat's shape, b of the repeated tensor's (only its shape: not in the graph) ---
# b is read for its shape only: a new (unfilled) tensor on the ggml side, zeros of that shape for the oracle
spec(
    "repeat_back",
    lambda xp, x, b: xp.repeat_back(x.a, xp.tensor("f32", b)),
    [
        *(
            Sample({"a": ("f32", _a)}, (_b,), variant=_name)
            for _name, _a, _b in (
                ("tile2x2", (6, 10), (3, 5)),
                ("4d", (2, 6, 3, 14), (1, 3, 1, 7)),
                ("same", (3, 7), (3, 7)),
                ("1d", (15,), (5,)),
                ("rows", (4, 5, 7), (1, 5, 7)),
                ("cols", (5, 21), (5, 1)),
            )
        ),
        Sample({"a": In("f32", (3, 10, 6), layout=Permuted((0, 2, 1, 3)))}, ((5, 3, 2),), variant="permuted"),
    ],
    oracle=lambda x, b: oracles.repeat_back(x.a, np.zeros(b)),
    reads=("REPEAT_BACK",),
    from_node=lambda n: oracles.repeat_back(n.arg(0), np.zeros(n.ne[::-1])),
    grad=[Grad({"a": ("f32", (4, 6))}, ("a",), ((2, 3),))],
)

# --- get_rows_back: a = gradient of get_rows' output [n, ne0], b = its indices, c = the matrix read (shape) --
# c is read for its shape only: a new tensor of type ct on the ggml side, zeros of that shape for the oracle
spec(
    "get_rows_back",
    lambda xp, x, shape, ct: xp.get_rows_back(x.a, x.b, xp.tensor(ct, shape)),
    [
        *(
            Sample(
                {"a": (_t, (_n, _cols_n)), "b": ("i32", (_n,), integers(0, _rows))},
                ((_rows, _cols_n), "f32"),
                tag=_t,
                variant=_variant,
            )
            for _t, _variant, _n, _rows, _cols_n in (
                ("f32", "", 5, 9, 7),
                ("f32", "repeats", 13, 4, 5),
                ("f32", "one", 1, 3, 11),
                ("f16", "", 7, 6, 13),
                ("f16", "repeats", 11, 3, 4),
            )
        ),
        Sample(
            {"a": In("f32", (6, 9), None, Columns(0, 7)), "b": ("i32", (6,), integers(0, 5))},
            ((5, 7), "f16"),
            tag="f32",
            variant="strided_rows",
        ),
        # the gradient computed by get_rows and mul in the same graph, c the matrix read (a graph input here)
        Sample(
            {"w": ("f32", (6, 5)), "b": ("i32", (4,), integers(0, 6)), "g": ("f32", (4, 5))},
            tag="f32",
            variant="with_get_rows",
            call=lambda xp, x: xp.get_rows_back(xp.mul(xp.get_rows(x.w, x.b), x.g), x.b, x.w),
            oracle=lambda x: oracles.get_rows_back(x.w[x.b] * x.g, x.b, x.w),
        ),
    ],
    oracle=lambda x, shape, ct: oracles.get_rows_back(x.a, x.b, np.zeros(shape)),
    reads=("GET_ROWS_BACK",),
    from_node=lambda n: oracles.get_rows_back(n.arg(0), n.arg(1), np.zeros((n.ne[1], n.ne[0]))),
)

# --- soft_max_ext_back: a = gradient of the softmax's output, b = the output --------------------------------
spec(
    "soft_max_ext_back",
    samples=[
        *(
            Sample(
                {"g": ("f32", _shape), "y": ("f32", _shape, softmax_rows())},
                (_scale,),
                variant=f"{_dims(_shape)}/scale{_scale:g}",
            )
            for _shape, _scale in (
                ((3, 16), 1.0),
                ((2, 3, 13), 0.5),
                ((5, 7), 2.5),
                ((2, 2, 3, 5), 1.0),
                ((1, 31), 0.125),
            )
        ),
        Sample({"g": ("f32", (4, 9)), "y": ("f32", (4, 9), softmax_rows(8.0))}, (1.0,), variant="peaked"),
        # a a view: the allocator then computes the op in b's memory unless b is kept (see the wrapper); row 1 of g
        # by a byte offset on the ggml side, by index for the oracle
        Sample(
            {"g": ("f32", (4, 9)), "y": ("f32", (9,), softmax_rows())},
            (0.8,),
            variant="view_gradient",
            call=lambda xp, x, scale: xp.soft_max_ext_back(xp.view_1d(x.g, 9, 36), x.y, scale),
            oracle=lambda x, scale: oracles.soft_max_ext_back(x.g[1], x.y, scale),
        ),
        Sample(
            {"g": ("f32", (3, 11)), "x": ("f32", (3, 11), uniform(-3, 3))},
            (0.7,),
            variant="of_soft_max",
            call=lambda xp, x, scale: xp.soft_max_ext_back(x.g, xp.soft_max_ext(x.x, None, scale), scale),
        ),
    ],
    reads=("SOFT_MAX_BACK",),
    from_node=lambda n: oracles.soft_max_ext_back(n.arg(0), n.arg(1), *n.scalars()),
)


# --- rope_ext_back: a NumPy [batch, tokens, heads, head_dim], pos one position per token ------------------------
def _rope_back_node(n: Node) -> Any:
    """ROPE_BACK op_params: i32 [1] n_dims, [2] mode, [4] n_ctx_orig; f32 [5] freq_base, [6] freq_scale,
    [7] ext_factor, [8] attn_factor, [9] beta_fast, [10] beta_slow; src[2] the frequency factors."""
    ff = n.src[2] if len(n.src) > 2 else None
    return oracles.rope_ext_back(n.arg(0), n.arg(1), ff, *n.scalars()[:9])  # n_dims, mode, n_ctx_orig, the six floats


_ROPE_BACK: list[Sample] = []
for _mode, _mname in ((0, "normal"), (2, "neox")):
    _ROPE_BACK += [
        *(
            Sample(
                {"a": (_t, (5, 3, 16)), "pos": ("i32", (5,), integers(0, 200))},
                ({"n_dims": 16, "mode": _mode},),
                tag=_t,
                variant=_mname,
            )
            for _t in ("f32", "f16")
        ),
        Sample(
            {"a": ("f32", (2, 7, 3, 12)), "pos": ("i32", (7,), integers(0, 100))},
            ({"n_dims": 6, "mode": _mode, "freq_base": 500.0, "freq_scale": 0.5, "attn_factor": 1.5},),
            tag="f32",
            variant=f"{_mname}/partial",
        ),
        Sample(
            {"a": ("f32", (3, 5, 10)), "pos": ("i32", (3,), integers(0, 50)), "ff": ("f32", (5,), uniform(0.5, 4.0))},
            ({"n_dims": 10, "mode": _mode},),
            tag="f32",
            variant=f"{_mname}/freq_factors",
        ),
        Sample(
            {"a": In("f32", (3, 5, 8), layout=Permuted((0, 2, 1, 3))), "pos": ("i32", (5,), integers(0, 50))},
            ({"n_dims": 8, "mode": _mode},),
            tag="f32",
            variant=f"{_mname}/permuted",
        ),
    ]
# rope_ext_back undoes rope_ext: the oracle is the identity (a property, not the op's formula)
_ROPE_BACK.append(
    Sample(
        {"a": ("f32", (4, 2, 8)), "pos": ("i32", (4,), integers(0, 60))},
        tag="f32",
        variant="inverts_rope",
        oracle=lambda x: x.a,
        call=lambda xp, x: xp.rope_ext_back(xp.rope_ext(x.a, x.pos, n_dims=8, mode=2), x.pos, n_dims=8, mode=2),
    )
)
# the rope parameters go by keyword (a dict in args); the frequency factors are the optional input ff
spec(
    "rope_ext_back",
    lambda xp, x, kw: xp.rope_ext_back(x.a, x.pos, getattr(x, "ff", None), **kw),
    _ROPE_BACK,
    params=ROPE_PARAMS,
    reads=("ROPE_BACK",),
    from_node=lambda n: rope_offset_node(n, _rope_back_node),
)

# --- im2col_back: a = gradient of im2col's output, b = the kernel (its shape), ne = the input's shape -----------
# (name, input ne [IW, IH, IC, N] / [IW, IC, N], kernel ne, s0, s1, p0, p1, d0, d1, is_2D, kernel type)
_IM2COL = (
    ("2d", [7, 5, 1, 1], [3, 3, 1, 1], 1, 1, 0, 0, 1, 1, True, "f32"),
    ("2d/stride_pad", [9, 7, 2, 1], [3, 2, 2, 1], 2, 1, 1, 1, 1, 1, True, "f32"),
    ("2d/dilation", [11, 8, 3, 2], [3, 3, 3, 1], 1, 2, 2, 0, 2, 1, True, "f16"),
    ("2d/stride3", [13, 5, 1, 2], [2, 3, 1, 1], 3, 2, 0, 1, 1, 1, True, "f16"),
    ("1d", [13, 3, 1], [5, 3, 1], 1, 0, 0, 0, 1, 0, False, "f32"),
    ("1d/stride_pad", [11, 2, 3], [3, 2, 4], 2, 0, 1, 0, 1, 0, False, "f16"),
    ("1d/dilation", [17, 1, 2], [4, 1, 1], 1, 0, 2, 0, 3, 0, False, "f32"),
)


def _im2col_back_sample(
    name: str, ne: list[int], kne: list[int], s0: int, s1: int, p0: int, p1: int, d0: int, d1: int, is_2d: bool, kt: str
) -> Sample:
    ow = (ne[0] + 2 * p0 - d0 * (kne[0] - 1) - 1) // s0 + 1
    if is_2d:
        oh = (ne[1] + 2 * p1 - d1 * (kne[1] - 1) - 1) // s1 + 1
        gshape: tuple[int, ...] = (ne[3], oh, ow, ne[2] * kne[0] * kne[1])
    else:
        gshape = (ne[2], ow, ne[1] * kne[0])
    return Sample(
        {"g": ("f32", gshape), "k": (kt, tuple(reversed(kne)))},
        (ne, s0, s1, p0, p1, d0, d1, is_2d),
        tag="f32",
        variant=name,
    )


def _im2col_back_node(n: Node) -> Any:
    """IM2COL_BACK op_params: s0, s1, p0, p1, d0, d1, is_2D; the result has the input's shape (ne, 3 dims in 1-D)."""
    *geometry, is_2d = n.scalars()
    ne = list(n.ne) if is_2d else list(n.ne[:3])
    return oracles.im2col_back(n.arg(0), n.arg(1), ne, *geometry, is_2d)


spec(
    "im2col_back",
    params=("s0", "s1", "p0", "p1", "d0", "d1", "is_2D:bool"),
    samples=[_im2col_back_sample(*c) for c in _IM2COL],
    reads=("IM2COL_BACK",),
    from_node=_im2col_back_node,
)

# --- pool_2d_back: a = gradient of pool_2d's output, af = its input -----------------------------------------
# (name, af NumPy shape, op, k0, k1, s0, s1, p0, p1)
_POOL = (
    ("max/2x2", (2, 6, 8), 0, 2, 2, 2, 2, 0, 0),
    ("max/3x3_s1", (1, 7, 9), 0, 3, 3, 1, 1, 0, 0),
    ("max/3x2_pad", (3, 5, 7), 0, 3, 2, 2, 1, 1, 1),
    ("max/overlap_s2", (2, 2, 9, 11), 0, 3, 3, 2, 2, 1, 0),
    ("avg/2x2", (2, 6, 8), 1, 2, 2, 2, 2, 0, 0),
    ("avg/3x3_s1", (1, 7, 9), 1, 3, 3, 1, 1, 0, 0),
    ("avg/3x2_pad", (3, 5, 7), 1, 3, 2, 2, 1, 1, 1),
    ("avg/5x1", (2, 1, 4, 13), 1, 5, 1, 3, 1, 2, 0),
)
spec(
    "pool_2d_back",
    params=("op", "k0", "k1", "s0", "s1", "p0", "p1"),
    samples=[
        Sample(
            {
                "g": (
                    "f32",
                    _shape[:-2] + ((_shape[-2] + 2 * _p1 - _k1) // _s1 + 1, (_shape[-1] + 2 * _p0 - _k0) // _s0 + 1),
                ),
                "af": ("f32", _shape, distinct(-2, 2)),
            },
            (_op, _k0, _k1, _s0, _s1, float(_p0), float(_p1)),
            variant=_name,
        )
        for _name, _shape, _op, _k0, _k1, _s0, _s1, _p0, _p1 in _POOL
    ],
    reads=("POOL_2D_BACK",),
    from_node=lambda n: oracles.pool_2d_back(n.arg(0), n.arg(1), *n.scalars()),
)

# --- cross_entropy_loss: a logits, b labels ------------------------------------------------------------------
spec(
    "cross_entropy_loss",
    samples=[
        *(
            Sample({"a": ("f32", _shape, uniform(-3, 3)), "b": ("f32", _shape, _labels)}, variant=_name)
            for _name, _shape, _labels in (
                ("soft", (3, 16), softmax_rows()),
                ("one_hot", (5, 7), one_hot),
                ("3d", (2, 3, 13), softmax_rows(1.0)),
                ("one_row", (1, 31), one_hot),
                ("4d", (2, 2, 3, 5), softmax_rows(3.0)),
            )
        ),
        Sample(
            {"a": In("f32", (5, 9), uniform(-3, 3), Columns(0, 7)), "b": ("f32", (5, 7), one_hot)},
            variant="strided_rows",
        ),
    ],
    reads=("CROSS_ENTROPY_LOSS",),
    from_node=lambda n: oracles.cross_entropy_loss(n.arg(0), n.arg(1)),
    grad=[Grad({"a": ("f32", (3, 7), uniform(-2, 2)), "b": ("f32", (3, 7), _grad_softmax_rows)}, ("a",))],
)

# --- cross_entropy_loss_back: a the loss's gradient, b logits, c labels ---------------------------------------
spec(
    "cross_entropy_loss_back",
    samples=[
        Sample(
            {"d": ("f32", (1,), uniform(*_g)), "a": ("f32", _shape, uniform(-3, 3)), "b": ("f32", _shape, _labels)},
            variant=_name,
        )
        for _name, _shape, _labels, _g in (
            ("soft", (3, 16), softmax_rows(), (0.5, 2)),
            ("one_hot", (5, 7), one_hot, (1, 1.001)),
            ("3d", (2, 3, 13), softmax_rows(1.0), (-2, -0.5)),
            ("4d", (2, 2, 3, 5), one_hot, (0.5, 2)),
            ("one_row", (1, 11), softmax_rows(4.0), (1, 3)),
        )
    ],
    reads=("CROSS_ENTROPY_LOSS_BACK",),
    from_node=lambda n: oracles.cross_entropy_loss_back(n.arg(0), n.arg(1), n.arg(2)),
)


# --- optimizer steps: the result is the updated parameter ---------------------------------------------------
def _adamw_params(alpha: float, beta1: float, beta2: float, eps: float, wd: float, t: int) -> Gen:
    """ggml's 7 AdamW values at step t (beta1h, beta2h: the bias corrections)."""
    p = np.array([alpha, beta1, beta2, eps, wd, 1 / (1 - beta1**t), 1 / (1 - beta2**t)], dtype=np.float32)
    return lambda rng, shape: p.reshape(shape)


def _sgd_params(hp: tuple[float, float]) -> Gen:
    p = np.array(hp, dtype=np.float32)
    return lambda rng, shape: p


def _adamw(name: str, shape: tuple[int, ...], hp: tuple[float, ...], zero_moments: bool = False) -> Sample:
    m, v = (uniform(0, 0), uniform(0, 0)) if zero_moments else (uniform(-0.5, 0.5), uniform(0.01, 1.0))
    return Sample(
        {
            "w": ("f32", shape),
            "g": ("f32", shape),
            "m": ("f32", shape, m),
            "v": ("f32", shape, v),
            "p": ("f32", (7,), _adamw_params(*hp)),
        },
        variant=name,
    )


spec(
    "opt_step_adamw",
    lambda xp, x: xp.opt_step_adamw(_param(x.w), x.g, x.m, x.v, x.p),
    [
        _adamw("step1", (3, 5), (1e-3, 0.9, 0.999, 1e-8, 0.0, 1)),
        _adamw("step10_wd", (2, 3, 7), (1e-2, 0.9, 0.999, 1e-8, 0.1, 10)),
        _adamw("large_lr", (13,), (0.5, 0.8, 0.99, 1e-6, 0.01, 3)),
        _adamw("4d", (2, 2, 3, 5), (3e-2, 0.5, 0.9, 1e-4, 0.5, 100)),
        _adamw("eps_large", (5, 7), (1e-1, 0.9, 0.999, 1e-1, 0.0, 2)),
        _adamw("from_zero_moments", (4, 9), (1e-2, 0.9, 0.999, 1e-8, 0.0, 1), zero_moments=True),
    ],
    reads=("OPT_STEP_ADAMW",),
    from_node=lambda n: oracles.opt_step_adamw(*n.src[:5]),
)
spec(
    "opt_step_sgd",
    lambda xp, x: xp.opt_step_sgd(_param(x.w), x.g, x.p),
    [
        Sample({"w": ("f32", _shape), "g": ("f32", _shape), "p": ("f32", (2,), _sgd_params(_hp))}, variant=_name)
        for _name, _shape, _hp in (
            ("plain", (3, 5), (0.1, 0.0)),
            ("wd", (2, 3, 7), (0.05, 0.5)),
            ("1d", (13,), (1.0, 0.01)),
            ("4d", (2, 2, 3, 5), (0.3, 0.2)),
            ("tiny_lr", (5, 11), (1e-3, 1.0)),
        )
    ],
    reads=("OPT_STEP_SGD",),
    from_node=lambda n: oracles.opt_step_sgd(*n.src[:3]),
)
