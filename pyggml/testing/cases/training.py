"""Cases of the backward ops, losses and optimizer steps. Backward ops get the forward op's input
(or output) as ggml's own backward pass passes it, and a random output gradient."""

from __future__ import annotations

import numpy as np

from pyggml._native import lib
from pyggml.testing import oracles
from pyggml.testing.cases import distinct, integers, op_case, uniform

O = oracles


def softmax_rows(spread=2.0):
    """Rows that are probability distributions (softmax outputs, cross-entropy labels)."""
    def gen(rng, shape):
        x = rng.uniform(-spread, spread, size=shape)
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)
    return gen


def one_hot(rng, shape):
    out = np.zeros(shape, dtype=np.float32)
    rows = out.reshape(-1, shape[-1])
    rows[np.arange(rows.shape[0]), rng.integers(0, shape[-1], rows.shape[0])] = 1.0
    return out


def _param(t):
    """opt_step ops update a tensor flagged as a trainable parameter (ggml_set_param)."""
    lib.ggml_set_param(t.ptr)
    return t


def _cols(c, t, n):
    """The first n columns of a 2-d tensor: rows not packed one after the other."""
    return c.view_2d(t, n, t.ne[1], t.nb[1], 0)


# --- silu_back ------------------------------------------------------------------------------------------
for _t, _shape in (("f32", (3, 5, 7)), ("f32", (13,)), ("f32", (2, 3, 5, 7)), ("f16", (4, 11)), ("f16", (3, 2, 9))):
    op_case(f"silu_back/{_t}/{'x'.join(map(str, _shape))}",
            {"g": (_t, _shape), "x": (_t, _shape, uniform(-5, 5))},
            lambda c, x: c.silu_back(x.g, x.x), lambda x: O.silu_back(x.g, x.x))
op_case("silu_back/f32/strided_rows", {"g": ("f32", (5, 9)), "x": ("f32", (5, 9), uniform(-4, 4))},
        lambda c, x: c.silu_back(_cols(c, x.g, 7), _cols(c, x.x, 7)),
        lambda x: O.silu_back(x.g[:, :7], x.x[:, :7]))
op_case("silu_back/f16/strided_rows", {"g": ("f16", (3, 13)), "x": ("f16", (3, 13), uniform(-4, 4))},
        lambda c, x: c.silu_back(_cols(c, x.g, 11), _cols(c, x.x, 11)),
        lambda x: O.silu_back(x.g[:, :11], x.x[:, :11]))
op_case("silu_back/f32/large_x", {"g": ("f32", (7, 5)), "x": ("f32", (7, 5), uniform(-20, 20))},
        lambda c, x: c.silu_back(x.g, x.x), lambda x: O.silu_back(x.g, x.x))

# --- rms_norm_back --------------------------------------------------------------------------------------
for _shape, _eps in (((3, 16), 1e-6), ((2, 3, 13), 1e-5), ((5, 7), 1e-3), ((11,), 0.0), ((2, 2, 3, 5), 0.1)):
    op_case(f"rms_norm_back/f32/{'x'.join(map(str, _shape))}/eps{_eps:g}",
            {"g": ("f32", _shape), "x": ("f32", _shape, uniform(-2, 2))},
            lambda c, x, _e=_eps: c.rms_norm_back(x.g, x.x, _e), lambda x, _e=_eps: O.rms_norm_back(x.g, x.x, _e))
op_case("rms_norm_back/f32/permuted", {"g": ("f32", (5, 3, 7)), "x": ("f32", (5, 3, 7), uniform(-2, 2))},
        lambda c, x: c.rms_norm_back(c.permute(x.g, 0, 2, 1, 3), c.permute(x.x, 0, 2, 1, 3), 1e-6),
        lambda x: O.rms_norm_back(x.g.transpose(1, 0, 2), x.x.transpose(1, 0, 2), 1e-6))
op_case("rms_norm_back/f32/strided_rows", {"g": ("f32", (5, 9)), "x": ("f32", (5, 9), uniform(-2, 2))},
        lambda c, x: c.rms_norm_back(_cols(c, x.g, 7), _cols(c, x.x, 7), 1e-5),
        lambda x: O.rms_norm_back(x.g[:, :7], x.x[:, :7], 1e-5))

# --- repeat_back: a of the repeat's shape, b of the repeated tensor's (only its shape: not in the graph) ---
for _name, _a, _b in (("tile2x2", (6, 10), (3, 5)), ("4d", (2, 6, 3, 14), (1, 3, 1, 7)), ("same", (3, 7), (3, 7)),
                      ("1d", (15,), (5,)), ("rows", (4, 5, 7), (1, 5, 7)), ("cols", (5, 21), (5, 1))):
    op_case(f"repeat_back/f32/{_name}", {"a": ("f32", _a)},
            lambda c, x, _b=_b: c.repeat_back(x.a, c.tensor("f32", _b)),
            lambda x, _b=_b: O.repeat_back(x.a, np.zeros(_b)))
op_case("repeat_back/f32/permuted", {"a": ("f32", (3, 10, 6))},
        lambda c, x: c.repeat_back(c.permute(x.a, 0, 2, 1, 3), c.tensor("f32", (5, 3, 2))),
        lambda x: O.repeat_back(x.a.transpose(1, 0, 2), np.zeros((5, 3, 2))))

# --- get_rows_back: a = gradient of get_rows' output [n, ne0], b = its indices, c = the matrix read (shape) --
for _name, _t, _n, _rows, _cols_n in (("f32", "f32", 5, 9, 7), ("f32/repeats", "f32", 13, 4, 5),
                                       ("f32/one", "f32", 1, 3, 11), ("f16", "f16", 7, 6, 13),
                                       ("f16/repeats", "f16", 11, 3, 4)):
    op_case(f"get_rows_back/{_name}",
            {"a": (_t, (_n, _cols_n)), "b": ("i32", (_n,), integers(0, _rows))},
            lambda c, x, _s=(_rows, _cols_n): c.get_rows_back(x.a, x.b, c.tensor("f32", _s)),
            lambda x, _s=(_rows, _cols_n): O.get_rows_back(x.a, x.b, np.zeros(_s)))
op_case("get_rows_back/f32/strided_rows",
        {"a": ("f32", (6, 9)), "b": ("i32", (6,), integers(0, 5))},
        lambda c, x: c.get_rows_back(_cols(c, x.a, 7), x.b, c.tensor("f16", (5, 7))),
        lambda x: O.get_rows_back(x.a[:, :7], x.b, np.zeros((5, 7))))
op_case("get_rows_back/f32/with_get_rows",
        {"w": ("f32", (6, 5)), "b": ("i32", (4,), integers(0, 6)), "g": ("f32", (4, 5))},
        lambda c, x: c.get_rows_back(c.mul(c.get_rows(x.w, x.b), x.g), x.b, x.w),
        lambda x: O.get_rows_back(x.w[x.b] * x.g, x.b, x.w))

# --- soft_max_ext_back: a = gradient of the softmax's output, b = the output --------------------------------
for _shape, _scale in (((3, 16), 1.0), ((2, 3, 13), 0.5), ((5, 7), 2.5), ((2, 2, 3, 5), 1.0), ((1, 31), 0.125)):
    op_case(f"soft_max_ext_back/f32/{'x'.join(map(str, _shape))}/scale{_scale:g}",
            {"g": ("f32", _shape), "y": ("f32", _shape, softmax_rows())},
            lambda c, x, _s=_scale: c.soft_max_ext_back(x.g, x.y, _s),
            lambda x, _s=_scale: O.soft_max_ext_back(x.g, x.y, _s))
op_case("soft_max_ext_back/f32/peaked", {"g": ("f32", (4, 9)), "y": ("f32", (4, 9), softmax_rows(8.0))},
        lambda c, x: c.soft_max_ext_back(x.g, x.y, 1.0), lambda x: O.soft_max_ext_back(x.g, x.y, 1.0))
# a a view: the allocator then computes the op in b's memory unless b is kept (see the wrapper)
op_case("soft_max_ext_back/f32/view_gradient", {"g": ("f32", (4, 9)), "y": ("f32", (9,), softmax_rows())},
        lambda c, x: c.soft_max_ext_back(c.view_1d(x.g, 9, 36), x.y, 0.8),
        lambda x: O.soft_max_ext_back(x.g[1], x.y, 0.8))
op_case("soft_max_ext_back/f32/of_soft_max", {"g": ("f32", (3, 11)), "x": ("f32", (3, 11), uniform(-3, 3))},
        lambda c, x: c.soft_max_ext_back(x.g, c.soft_max_ext(x.x, None, 0.7), 0.7),
        lambda x: O.soft_max_ext_back(x.g, O.soft_max_ext(x.x, None, 0.7), 0.7))

# --- rope_ext_back: a NumPy [batch, tokens, heads, head_dim], pos one position per token ------------------------
for _mode, _mname in ((0, "normal"), (2, "neox")):
    for _t in ("f32", "f16"):
        op_case(f"rope_ext_back/{_t}/{_mname}", {"a": (_t, (5, 3, 16)), "pos": ("i32", (5,), integers(0, 200))},
                lambda c, x, _m=_mode: c.rope_ext_back(x.a, x.pos, n_dims=16, mode=_m),
                lambda x, _m=_mode: O.rope_ext_back(x.a, x.pos, n_dims=16, mode=_m))
    op_case(f"rope_ext_back/f32/{_mname}/partial",
            {"a": ("f32", (2, 7, 3, 12)), "pos": ("i32", (7,), integers(0, 100))},
            lambda c, x, _m=_mode: c.rope_ext_back(x.a, x.pos, n_dims=6, mode=_m, freq_base=500.0, freq_scale=0.5,
                                                   attn_factor=1.5),
            lambda x, _m=_mode: O.rope_ext_back(x.a, x.pos, n_dims=6, mode=_m, freq_base=500.0, freq_scale=0.5,
                                                attn_factor=1.5))
    op_case(f"rope_ext_back/f32/{_mname}/freq_factors",
            {"a": ("f32", (3, 5, 10)), "pos": ("i32", (3,), integers(0, 50)), "ff": ("f32", (5,), uniform(0.5, 4.0))},
            lambda c, x, _m=_mode: c.rope_ext_back(x.a, x.pos, x.ff, n_dims=10, mode=_m),
            lambda x, _m=_mode: O.rope_ext_back(x.a, x.pos, x.ff, n_dims=10, mode=_m))
    op_case(f"rope_ext_back/f32/{_mname}/permuted",
            {"a": ("f32", (3, 5, 8)), "pos": ("i32", (5,), integers(0, 50))},
            lambda c, x, _m=_mode: c.rope_ext_back(c.permute(x.a, 0, 2, 1, 3), x.pos, n_dims=8, mode=_m),
            lambda x, _m=_mode: O.rope_ext_back(x.a.transpose(1, 0, 2), x.pos, n_dims=8, mode=_m))
op_case("rope_ext_back/f32/inverts_rope",
        {"a": ("f32", (4, 2, 8)), "pos": ("i32", (4,), integers(0, 60))},
        lambda c, x: c.rope_ext_back(c.rope_ext(x.a, x.pos, n_dims=8, mode=2), x.pos, n_dims=8, mode=2),
        lambda x: x.a)

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
_gshape: tuple[int, ...]
_args: tuple[object, ...]  # the parameters after the tensors, of the ops below
for _name, _ne, _kne, _s0, _s1, _p0, _p1, _d0, _d1, _2d, _kt in _IM2COL:
    if _2d:
        _ow = (_ne[0] + 2 * _p0 - _d0 * (_kne[0] - 1) - 1) // _s0 + 1
        _oh = (_ne[1] + 2 * _p1 - _d1 * (_kne[1] - 1) - 1) // _s1 + 1
        _gshape = (_ne[3], _oh, _ow, _ne[2] * _kne[0] * _kne[1])
    else:
        _ow = (_ne[0] + 2 * _p0 - _d0 * (_kne[0] - 1) - 1) // _s0 + 1
        _gshape = (_ne[2], _ow, _ne[1] * _kne[0])
    _args = (_ne, _s0, _s1, _p0, _p1, _d0, _d1, _2d)
    op_case(f"im2col_back/f32/{_name}", {"g": ("f32", _gshape), "k": (_kt, tuple(reversed(_kne)))},
            lambda c, x, _a=_args: c.im2col_back(x.g, x.k, *_a), lambda x, _a=_args: O.im2col_back(x.g, x.k, *_a))

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
for _name, _shape, _op, _k0, _k1, _s0, _s1, _p0, _p1 in _POOL:
    _oh = (_shape[-2] + 2 * _p1 - _k1) // _s1 + 1
    _ow = (_shape[-1] + 2 * _p0 - _k0) // _s0 + 1
    _args = (_op, _k0, _k1, _s0, _s1, float(_p0), float(_p1))
    op_case(f"pool_2d_back/f32/{_name}",
            {"g": ("f32", _shape[:-2] + (_oh, _ow)), "af": ("f32", _shape, distinct(-2, 2))},
            lambda c, x, _a=_args: c.pool_2d_back(x.g, x.af, *_a), lambda x, _a=_args: O.pool_2d_back(x.g, x.af, *_a))

# --- cross_entropy_loss: a logits, b labels ------------------------------------------------------------------
for _name, _shape, _labels in (("soft", (3, 16), softmax_rows()), ("one_hot", (5, 7), one_hot),
                               ("3d", (2, 3, 13), softmax_rows(1.0)), ("one_row", (1, 31), one_hot),
                               ("4d", (2, 2, 3, 5), softmax_rows(3.0))):
    op_case(f"cross_entropy_loss/f32/{_name}", {"a": ("f32", _shape, uniform(-3, 3)), "b": ("f32", _shape, _labels)},
            lambda c, x: c.cross_entropy_loss(x.a, x.b), lambda x: O.cross_entropy_loss(x.a, x.b))
op_case("cross_entropy_loss/f32/strided_rows", {"a": ("f32", (5, 9), uniform(-3, 3)), "b": ("f32", (5, 7), one_hot)},
        lambda c, x: c.cross_entropy_loss(_cols(c, x.a, 7), x.b), lambda x: O.cross_entropy_loss(x.a[:, :7], x.b))

# --- cross_entropy_loss_back: a the loss's gradient, b logits, c labels ---------------------------------------
for _name, _shape, _labels, _g in (("soft", (3, 16), softmax_rows(), (0.5, 2)), ("one_hot", (5, 7), one_hot, (1, 1.001)),
                                   ("3d", (2, 3, 13), softmax_rows(1.0), (-2, -0.5)),
                                   ("4d", (2, 2, 3, 5), one_hot, (0.5, 2)), ("one_row", (1, 11), softmax_rows(4.0), (1, 3))):
    op_case(f"cross_entropy_loss_back/f32/{_name}",
            {"d": ("f32", (1,), uniform(*_g)), "a": ("f32", _shape, uniform(-3, 3)), "b": ("f32", _shape, _labels)},
            lambda c, x: c.cross_entropy_loss_back(x.d, x.a, x.b), lambda x: O.cross_entropy_loss_back(x.d, x.a, x.b))


# --- optimizer steps: the result is the updated parameter ---------------------------------------------------
def _adamw_params(alpha, beta1, beta2, eps, wd, t):
    """ggml's 7 AdamW values at step t (beta1h, beta2h: the bias corrections)."""
    p = np.array([alpha, beta1, beta2, eps, wd, 1 / (1 - beta1 ** t), 1 / (1 - beta2 ** t)], dtype=np.float32)
    return lambda rng, shape: p.reshape(shape)


_hp: tuple[float, ...]  # hyperparameters: AdamW's (then SGD's below)
for _name, _shape, _hp in (("step1", (3, 5), (1e-3, 0.9, 0.999, 1e-8, 0.0, 1)),
                           ("step10_wd", (2, 3, 7), (1e-2, 0.9, 0.999, 1e-8, 0.1, 10)),
                           ("large_lr", (13,), (0.5, 0.8, 0.99, 1e-6, 0.01, 3)),
                           ("4d", (2, 2, 3, 5), (3e-2, 0.5, 0.9, 1e-4, 0.5, 100)),
                           ("eps_large", (5, 7), (1e-1, 0.9, 0.999, 1e-1, 0.0, 2))):
    op_case(f"opt_step_adamw/f32/{_name}",
            {"w": ("f32", _shape), "g": ("f32", _shape), "m": ("f32", _shape, uniform(-0.5, 0.5)),
             "v": ("f32", _shape, uniform(0.01, 1.0)), "p": ("f32", (7,), _adamw_params(*_hp))},
            lambda c, x: c.opt_step_adamw(_param(x.w), x.g, x.m, x.v, x.p),
            lambda x: O.opt_step_adamw(x.w, x.g, x.m, x.v, x.p))
op_case("opt_step_adamw/f32/from_zero_moments",
        {"w": ("f32", (4, 9)), "g": ("f32", (4, 9)), "m": ("f32", (4, 9), uniform(0, 0)),
         "v": ("f32", (4, 9), uniform(0, 0)), "p": ("f32", (7,), _adamw_params(1e-2, 0.9, 0.999, 1e-8, 0.0, 1))},
        lambda c, x: c.opt_step_adamw(_param(x.w), x.g, x.m, x.v, x.p),
        lambda x: O.opt_step_adamw(x.w, x.g, x.m, x.v, x.p))

for _name, _shape, _hp in (("plain", (3, 5), (0.1, 0.0)), ("wd", (2, 3, 7), (0.05, 0.5)), ("1d", (13,), (1.0, 0.01)),
                           ("4d", (2, 2, 3, 5), (0.3, 0.2)), ("tiny_lr", (5, 11), (1e-3, 1.0))):
    _p = np.array(_hp, dtype=np.float32)
    op_case(f"opt_step_sgd/f32/{_name}",
            {"w": ("f32", _shape), "g": ("f32", _shape), "p": ("f32", (2,), lambda rng, shape, _p=_p: _p)},
            lambda c, x: c.opt_step_sgd(_param(x.w), x.g, x.p), lambda x: O.opt_step_sgd(x.w, x.g, x.p))
