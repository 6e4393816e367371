"""Bad calls of the matmul and attention families' newer wrappers (see test_bad_input.py): each raises
naming the op, from ggml's own assert, the wrapper's checks, or the CPU preflight ("compute:")."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyggml import ops
from pyggml.errors import GraphError

BAD: list[tuple[str, Callable[..., Any], type[Exception], str]] = []


def _bad(op, fn, exc, words):
    BAD.append((op, fn, exc, words))


def _fa(c, t, q=("f32", (7, 16)), k=("f16", (13, 16)), v=("f16", (13, 16)), mask=("f16", (7, 13)), **kw):
    return ops.flash_attn_ext(c, t(*q), t(*k), t(*v), None if mask is None else t(*mask), **kw)


# --- matrix products -------------------------------------------------------------------------------------------------------
_bad("mul_mat_id", lambda c, t: ops.mul_mat_id(c, t("f32", (3, 5, 16)), t("f32", (4, 1, 16)), t("f32", (4, 2))),
     ValueError, "ids->type == GGML_TYPE_I32")
_bad("mul_mat_id", lambda c, t: ops.mul_mat_id(c, t("f32", (2, 3, 5, 16)), t("f32", (4, 1, 16)), t("i32", (4, 2))),
     ValueError, "as->ne[3] == 1")
_bad("mul_mat_id", lambda c, t: ops.mul_mat_id(c, t("f32", (3, 5, 16)), t("f32", (4, 1, 8)), t("i32", (4, 2))),
     ValueError, "as->ne[0] == b->ne[0]")
_bad("mul_mat_id", lambda c, t: ops.mul_mat_id(c, "as", t("f32", (4, 1, 16)), t("i32", (4, 2))), TypeError,
     "as_ must be a Tensor")
_bad("mul_mat_id", lambda c, t: ops.mul_mat_id(c, t("f32", (3, 5, 16)), t("f16", (4, 1, 16)), t("i32", (4, 2))),
     GraphError, "takes b as F32")
_bad("mul_mat_id", lambda c, t: ops.mul_mat_id(c, t("q8_0", (3, 5, 32)), t("f16", (4, 1, 32)), t("i32", (4, 2))),
     GraphError, "takes b as F32 (or Q8_0)")
_bad("mul_mat_id", lambda c, t: ops.mul_mat_id(c, t("i32", (3, 5, 16)), t("f32", (4, 1, 16)), t("i32", (4, 2))),
     GraphError, "no dot product")
_bad("mul_mat_id", lambda c, t: ops.mul_mat_id(c, t("f32", (3, 5, 16)), ops.permute(c, t("f32", (16, 1, 4)), 2, 1, 0, 3),
                                               t("i32", (4, 2))), GraphError, "contiguous rows")
_bad("add_id", lambda c, t: ops.add_id(c, t("f32", (3, 4, 13)), t("f32", (5, 13)), t("i32", (3, 5))), ValueError,
     "a->ne[1] == ids->ne[0]")
_bad("add_id", lambda c, t: ops.add_id(c, t("f32", (3, 4, 13)), t("f32", (5, 12)), t("i32", (3, 4))), ValueError,
     "a->ne[0] == b->ne[0]")
_bad("add_id", lambda c, t: ops.add_id(c, t("f16", (3, 4, 13)), t("f32", (5, 13)), t("i32", (3, 4))), GraphError,
     "F32 a and b")
_bad("add_id", lambda c, t: ops.add_id(c, t("f32", (3, 4, 13)), None, t("i32", (3, 4))), TypeError, "b must be a Tensor")
_bad("out_prod", lambda c, t: ops.out_prod(c, t("f32", (13, 7)), t("f32", (12, 5))), ValueError, "ggml_can_out_prod(a, b)")
_bad("out_prod", lambda c, t: ops.out_prod(c, ops.transpose(c, t("f32", (7, 13))), t("f32", (13, 5))), ValueError,
     "!ggml_is_transposed(a)")
_bad("out_prod", lambda c, t: ops.out_prod(c, t("q8_1", (3, 32)), t("f32", (3, 5))), GraphError, "dequantizable type")
_bad("out_prod", lambda c, t: ops.out_prod(c, t("f32", (3, 32)), 1.5), TypeError, "b must be a Tensor")

# --- flash attention ---------------------------------------------------------------------------------------------------------
_bad("flash_attn_ext", lambda c, t: _fa(c, t, mask=("f32", (7, 13))), ValueError, "mask->type == GGML_TYPE_F16")
_bad("flash_attn_ext", lambda c, t: _fa(c, t, mask=("f16", (7, 16))), ValueError, "the mask must be [n_kv = 13")
_bad("flash_attn_ext", lambda c, t: _fa(c, t, mask=("f16", (5, 13))), ValueError, ">= n_q = 7")
_bad("flash_attn_ext", lambda c, t: _fa(c, t, v=("f16", (11, 16))), ValueError, "v must have k's 13 kv rows")
_bad("flash_attn_ext", lambda c, t: _fa(c, t, q=("f32", (4, 7, 16)), k=("f16", (3, 13, 16)), v=("f16", (2, 13, 16)),
                                        mask=None), ValueError, "ggml_can_mul_mat(k, q)")
_bad("flash_attn_ext", lambda c, t: _fa(c, t, q=("f32", (4, 7, 16)), k=("f16", (2, 13, 16)), v=("f16", (3, 13, 16)),
                                        mask=None), ValueError, "v's heads (3) must divide q's (4)")
_bad("flash_attn_ext", lambda c, t: _fa(c, t, scale=float("nan")), ValueError, "scale must be finite")
_bad("flash_attn_ext", lambda c, t: _fa(c, t, max_bias=-1.0), ValueError, "max_bias must be >= 0")
_bad("flash_attn_ext", lambda c, t: _fa(c, t, mask=None, max_bias=8.0), ValueError, "mask")
_bad("flash_attn_ext", lambda c, t: _fa(c, t, q=("f16", (7, 16))), GraphError, "takes q as F32")
_bad("flash_attn_ext", lambda c, t: _fa(c, t, k=("i32", (13, 16))), GraphError, "no dot product for k of type I32")
_bad("flash_attn_ext", lambda c, t: ops.flash_attn_ext(c, ops.transpose(c, t("f32", (16, 7))), t("f32", (13, 16)),
                                                       t("f32", (13, 16))), GraphError, "contiguous rows")
_bad("flash_attn_ext", lambda c, t: ops.flash_attn_ext(c, t("f32", (7, 16)), [1.0], t("f16", (13, 16))), TypeError,
     "k must be a Tensor")
_bad("flash_attn_ext_add_sinks", lambda c, t: ops.flash_attn_ext_add_sinks(c, t("f32", (3, 8)), t("f32", (1,))),
     ValueError, "a->op == GGML_OP_FLASH_ATTN_EXT")
_bad("flash_attn_ext_add_sinks", lambda c, t: ops.flash_attn_ext_add_sinks(c, _fa(c, t), t("f32", (2,))), ValueError,
     "a->src[0]->ne[2] == sinks->ne[0]")
_bad("flash_attn_ext_add_sinks", lambda c, t: ops.flash_attn_ext_add_sinks(c, _fa(c, t), t("f16", (1,))), ValueError,
     "sinks->type == GGML_TYPE_F32")
_bad("flash_attn_ext_add_sinks", lambda c, t: ops.flash_attn_ext_add_sinks(c, _fa(c, t), None), TypeError,
     "sinks must be a Tensor")
_bad("flash_attn_ext_add_sinks", lambda c, t: ops.flash_attn_ext_add_sinks(
    c, _fa(c, t, q=("f32", (4, 7, 16)), k=("f16", (2, 13, 16)), v=("f16", (2, 13, 16))),
    ops.transpose(c, ops.view_2d(c, t("f32", (4, 2)), 1, 4, 8, 0))),
    GraphError, "contiguous vector")
_bad("flash_attn_ext_set_prec", lambda c, t: ops.flash_attn_ext_set_prec(c, _fa(c, t), 7), ValueError, "prec must be one of")
_bad("flash_attn_ext_set_prec", lambda c, t: ops.flash_attn_ext_set_prec(c, _fa(c, t), "f32"), TypeError,
     "prec must be an integer")
_bad("flash_attn_ext_set_prec", lambda c, t: ops.flash_attn_ext_set_prec(c, t("f32", (3, 8)), 10), ValueError,
     "a->op == GGML_OP_FLASH_ATTN_EXT")
_bad("flash_attn_ext_set_prec", lambda c, t: ops.flash_attn_ext_set_prec(c, _fa(c, t), 20), GraphError,
     "default or F32 precision")

# --- rope ----------------------------------------------------------------------------------------------------------------------
_rm = {"n_dims": 8, "sections": (2, 1, 1, 0)}
_bad("rope_multi", lambda c, t: ops.rope_multi(c, t("f32", (5, 3, 8)), t("i32", (20,)), mode=2, **_rm), ValueError,
     "mode must be 8 (MROPE), 24 (VISION) or 40 (IMROPE)")
_bad("rope_multi", lambda c, t: ops.rope_multi(c, t("f32", (5, 3, 8)), t("i32", (20,)), n_dims=8, sections=(0, 0, 0, 4)),
     ValueError, "the first three not all 0")
_bad("rope_multi", lambda c, t: ops.rope_multi(c, t("f32", (5, 3, 8)), t("i32", (20,)), n_dims=8, sections=(4, -1, 0, 0)),
     ValueError, "non-negative")
_bad("rope_multi", lambda c, t: ops.rope_multi(c, t("f32", (5, 3, 8)), t("i32", (20,)), n_dims=8, sections="tyxe"),
     TypeError, "sections must be 4 integers")
_bad("rope_multi", lambda c, t: ops.rope_multi(c, t("f32", (5, 3, 8)), t("i32", (5,)), **_rm), ValueError,
     "a->ne[2] * 4 == b->ne[0]")
_bad("rope_multi", lambda c, t: ops.rope_multi(c, t("f32", (5, 3, 8)), t("i32", (20,)), n_dims=5, sections=(2, 1, 1, 0)),
     ValueError, "must be even")
_bad("rope_multi", lambda c, t: ops.rope_multi(c, t("f32", (5, 3, 8)), t("i32", (20,)), n_dims=8, sections=(4, 4, 2, 0)),
     GraphError, "must not add up to more than a.ne[0] (8)")
_bad("rope_multi", lambda c, t: ops.rope_multi(c, t("f32", (5, 3, 16)), t("i32", (20,)), n_dims=16, sections=(4, 4, 0, 0),
                                               mode=24), GraphError, "VISION rope needs n_dims == a.ne[0] / 2")
_bad("rope_multi", lambda c, t: ops.rope_multi(c, t("f32", (5, 3, 8)), t("f32", (20,)), **_rm), ValueError,
     "b->type == GGML_TYPE_I32")
_bad("rope_ext", lambda c, t: ops.rope_ext(c, t("f32", (4, 2, 7)), t("i32", (4,)), n_dims=6), GraphError,
     "even row length")

# --- SAM ------------------------------------------------------------------------------------------------------------------------
_bad("win_part", lambda c, t: ops.win_part(c, t("f32", (7, 5, 3)), 0), ValueError, "w must be >= 1")
_bad("win_part", lambda c, t: ops.win_part(c, t("f16", (7, 5, 3)), 2), ValueError, "a->type == GGML_TYPE_F32")
_bad("win_part", lambda c, t: ops.win_part(c, ops.permute(c, t("f32", (7, 5, 3)), 0, 2, 1, 3), 2), GraphError,
     "contiguous")
_bad("win_part", lambda c, t: ops.win_part(c, t("f32", (7, 5, 3)), 2.5), TypeError, "w must be an integer")
_bad("win_unpart", lambda c, t: ops.win_unpart(c, t("f32", (4, 3, 3, 2)), 5, 7, 3), ValueError, "a must hold 6 windows")
_bad("win_unpart", lambda c, t: ops.win_unpart(c, t("f32", (6, 2, 3, 2)), 5, 7, 3), ValueError, "a must hold")
_bad("win_unpart", lambda c, t: ops.win_unpart(c, t("f32", (6, 3, 3, 2)), 0, 7, 3), ValueError, "must be >= 1")
_bad("win_unpart", lambda c, t: ops.win_unpart(c, t("f16", (6, 3, 3, 2)), 5, 7, 3), ValueError, "a->type == GGML_TYPE_F32")
_bad("get_rel_pos", lambda c, t: ops.get_rel_pos(c, t("f16", (5, 4)), 3, 2), ValueError, "qh == kh")
_bad("get_rel_pos", lambda c, t: ops.get_rel_pos(c, t("f16", (6, 4)), 3, 3), ValueError, "2*MAX(qh, kh) - 1 == a->ne[1]")
_bad("get_rel_pos", lambda c, t: ops.get_rel_pos(c, t("bf16", (5, 4)), 3, 3), GraphError, "takes F16 input")
_bad("get_rel_pos", lambda c, t: ops.get_rel_pos(c, t("f32", (5, 4)), 3, 3), GraphError, "takes F16 input")
_bad("get_rel_pos", lambda c, t: ops.get_rel_pos(c, t("f16", (5, 4)), "3", 3), TypeError, "qh must be an integer")
_sam = {"a": ("f32", (2, 9, 9)), "pw": ("f32", (2, 3, 3, 3))}
_bad("add_rel_pos", lambda c, t: ops.add_rel_pos(c, t(*_sam["a"]), t(*_sam["pw"]), t("f16", (2, 3, 3, 3))), ValueError,
     "ph->type == GGML_TYPE_F32")
_bad("add_rel_pos", lambda c, t: ops.add_rel_pos(c, t(*_sam["a"]), t(*_sam["pw"]), t("f32", (2, 3, 3, 2))), ValueError,
     "ggml_are_same_shape(pw, ph)")
_bad("add_rel_pos", lambda c, t: ops.add_rel_pos(c, t("f32", (2, 9, 8)), t(*_sam["pw"]), t(*_sam["pw"])), ValueError,
     "pw->ne[0]*pw->ne[0] == a->ne[0]")
_bad("add_rel_pos", lambda c, t: ops.add_rel_pos(c, t("f16", (2, 9, 9)), t(*_sam["pw"]), t(*_sam["pw"])), GraphError,
     "takes F32 input")

# --- DeepSeek -------------------------------------------------------------------------------------------------------------------
_li = {"q": ("f32", (5, 3, 16)), "k": ("f32", (7, 1, 16)), "w": ("f32", (5, 3)), "m": ("f16", (5, 7))}


def _lix(c, t, **over):
    x = {**_li, **over}
    return ops.lightning_indexer(c, t(*x["q"]), t(*x["k"]), t(*x["w"]), t(*x["m"]))


_bad("lightning_indexer", lambda c, t: _lix(c, t, m=("f32", (5, 7))), ValueError, "mask->type == GGML_TYPE_F16")
_bad("lightning_indexer", lambda c, t: _lix(c, t, q=("f16", (5, 3, 16))), ValueError, "q->type == GGML_TYPE_F32")
_bad("lightning_indexer", lambda c, t: _lix(c, t, m=("f16", (5, 8))), ValueError, "mask->ne[0] == k->ne[2]")
_bad("lightning_indexer", lambda c, t: _lix(c, t, k=("f32", (7, 2, 16))), ValueError, "k->ne[1] == 1")
_bad("lightning_indexer", lambda c, t: _lix(c, t, k=("i32", (7, 1, 16))), GraphError, "cannot read k of type I32")
_bad("lightning_indexer", lambda c, t: ops.lightning_indexer(c, t(*_li["q"]), t(*_li["k"]), t(*_li["w"]), None), TypeError,
     "mask must be a Tensor")
_hc = {"mx": ("f32", (5, 24)), "sc": ("f32", (3,)), "b": ("f32", (24,))}
_bad("dsv4_hc_comb", lambda c, t: ops.dsv4_hc_comb(c, t("f32", (5, 15)), t(*_hc["sc"]), t("f32", (15,))), ValueError,
     "hc == 4")
_bad("dsv4_hc_comb", lambda c, t: ops.dsv4_hc_comb(c, t(*_hc["mx"]), t(*_hc["sc"]), t(*_hc["b"]), 1e-6, 0), ValueError,
     "n_iter > 0")
_bad("dsv4_hc_comb", lambda c, t: ops.dsv4_hc_comb(c, t(*_hc["mx"]), t("f32", (2,)), t(*_hc["b"])), ValueError,
     "scale->ne[0] >= 3")
_bad("dsv4_hc_comb", lambda c, t: ops.dsv4_hc_comb(c, t(*_hc["mx"]), t(*_hc["sc"]), t(*_hc["b"]), -1.0), ValueError,
     "eps must be >= 0")
_bad("dsv4_hc_comb", lambda c, t: ops.dsv4_hc_comb(c, t(*_hc["mx"]), t(*_hc["sc"]), t(*_hc["b"]), float("inf")),
     ValueError, "eps must be finite")
_bad("dsv4_hc_pre", lambda c, t: ops.dsv4_hc_pre(c, t("f32", (5, 4, 13)), t("f32", (5, 3))), ValueError,
     "weights->ne[0] == hc")
_bad("dsv4_hc_pre", lambda c, t: ops.dsv4_hc_pre(c, t("f16", (5, 4, 13)), t("f32", (5, 4))), ValueError,
     "x->type == GGML_TYPE_F32")
_bad("dsv4_hc_pre", lambda c, t: ops.dsv4_hc_pre(c, t("f32", (2, 5, 4, 13)), t("f32", (5, 4))), ValueError,
     "x->ne[3] == 1")
_bad("dsv4_hc_pre_gated", lambda c, t: ops.dsv4_hc_pre_gated(c, t("f32", (5, 4, 13)), t("f32", (5, 4, 12))), ValueError,
     "weights->ne[0] == n_embd")
_bad("dsv4_hc_pre_gated", lambda c, t: ops.dsv4_hc_pre_gated(c, t("f32", (5, 4, 13)), t("f32", (5, 4, 13)), float("nan")),
     ValueError, "scale must be finite")
_hp = {"x": ("f32", (5, 13)), "r": ("f32", (5, 4, 13)), "p": ("f32", (5, 4))}
_bad("dsv4_hc_post", lambda c, t: ops.dsv4_hc_post(c, t(*_hp["x"]), t(*_hp["r"]), t("f32", (5, 3))), ValueError,
     "post->ne[0] == hc")
_bad("dsv4_hc_post", lambda c, t: ops.dsv4_hc_post(c, t(*_hp["x"]), t(*_hp["r"]), t(*_hp["p"]), t("f32", (5, 4, 3))),
     ValueError, "comb->ne[0] == hc")
_bad("dsv4_hc_post", lambda c, t: ops.dsv4_hc_post(c, t(*_hp["x"]), t("f32", (5, 4, 12)), t(*_hp["p"])), ValueError,
     "residual->ne[0] == n_embd")
_bad("dsv4_hc_post", lambda c, t: ops.dsv4_hc_post(c, t(*_hp["x"]), t(*_hp["r"]), t(*_hp["p"]), "comb"), TypeError,
     "comb must be a Tensor")

# scalar arguments (issue 19): rope_ext's hot path hands its scalars to cffi, the slow path names the refused one
_rope_a = ("f32", (4, 2, 8))
_bad("rope_ext", lambda c, t: ops.rope_ext(c, t(*_rope_a), t("i32", (4,)), freq_base="1e4"), TypeError,
     "freq_base must be a number, got str")
_bad("rope_ext", lambda c, t: ops.rope_ext(c, t(*_rope_a), t("i32", (4,)), n_ctx_orig=2.5), TypeError,
     "n_ctx_orig must be an integer, got float")
_bad("rope_ext", lambda c, t: ops.rope_ext(c, t(*_rope_a), t("i32", (4,)), mode=False), TypeError,
     "mode must be an integer, got bool")
_bad("rope_ext", lambda c, t: ops.rope_ext(c, t(*_rope_a), t("i32", (4,)), n_dims=8.0), TypeError,
     "n_dims must be an integer, got float")
_bad("rope_multi", lambda c, t: ops.rope_multi(c, t("f32", (4, 2, 8)), t("i32", (16,)), None, None, (1, 1, 2, 0),
                                               freq_scale="1"), TypeError, "freq_scale must be a number")
_bad("soft_max_ext", lambda c, t: ops.soft_max_ext(c, t("f32", (3, 8)), None, "0.5"), TypeError,
     "scale must be a number, got str")
_bad("flash_attn_ext", lambda c, t: ops.flash_attn_ext(c, t("f32", (1, 4, 8)), t("f32", (1, 4, 8)),
                                                       t("f32", (1, 4, 8)), None, True), TypeError,
     "scale must be a number, got bool")
_bad("dsv4_hc_pre_gated", lambda c, t: ops.dsv4_hc_pre_gated(c, t("f32", (2, 4, 8)), t("f32", (2, 4, 8)), "2"),
     TypeError, "scale must be a number")
