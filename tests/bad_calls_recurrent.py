"""Bad calls of the recurrent and state-space ops (loaded by test_bad_input.py): (op, call(ctx, t), exception,
words); t(type, NumPy shape) makes a tensor in ctx."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyggml import ops
from pyggml.errors import GraphError

BAD: list[tuple[str, Callable[..., Any], type[Exception], str]] = []


def _bad(op, fn, exc, words):
    BAD.append((op, fn, exc, words))


# --- ssm_scan: s [1, heads 2, head_dim 3, d_state 4], 2 tokens, 1 sequence ------------------------------------------
def _scan(c, t, *, x="f32", A=(2, 1), groups=1, ids=None, K=1):
    return ops.ssm_scan(c, t("f32", (1, 2, 3, 4)), t(x, (1, 2, 2, 3)), t("f32", (1, 2, 2)), t("f32", A),
                        t("f32", (1, 2, groups, 4)), t("f32", (1, 2, groups, 4)),
                        t("i32", (1,)) if ids is None else ids(c, t), K)


_bad("ssm_scan", lambda c, t: _scan(c, t, A=(2, 4), K=2), ValueError, "K == 1")  # Mamba-1 keeps no snapshots
_bad("ssm_scan", lambda c, t: _scan(c, t, K=0), ValueError, "K (snapshot slots) must be in 1..")
_bad("ssm_scan", lambda c, t: _scan(c, t, K=2.0), TypeError, "K must be an integer")
_bad("ssm_scan", lambda c, t: _scan(c, t, groups=3), ValueError, "B's groups (ne[1] = 3) must divide x's heads")
_bad("ssm_scan", lambda c, t: _scan(c, t, ids=lambda c, t: t("i64", (1,))), ValueError, "ids->type == GGML_TYPE_I32")
_bad("ssm_scan", lambda c, t: _scan(c, t, ids=lambda c, t: [0]), TypeError, "ids must be a Tensor")
_bad("ssm_scan", lambda c, t: _scan(c, t, x="f16"), GraphError, "takes F32 s, x, dt, A, B and C, got F16")
_bad("ssm_scan", lambda c, t: _scan(c, t, ids=lambda c, t: ops.view_nd(c, t("i32", (4,)), [1, 1, 1, 1], [8, 8, 8, 8])),
     GraphError, "packed ids")


# --- rwkv_wkv6, gated_linear_attn: S 4, H 2, T tokens ---------------------------------------------------------------------
def _tok(t, T=4, S=4, H=2, type="f32"):
    return t(type, (T, H, S))


def _wkv6(c, t, T=4, seqs=1, tf=(2, 4), v="f32", shape=None):
    shape = shape or (T, 2, 4)
    return ops.rwkv_wkv6(c, t("f32", shape), t(v, shape), t("f32", shape), t("f32", tf), t("f32", shape),
                         t("f32", (seqs, 32)))


_bad("rwkv_wkv6", lambda c, t: _wkv6(c, t, T=5, seqs=2), ValueError, "n_tokens (5) must be a positive multiple of n_seqs (2")
_bad("rwkv_wkv6", lambda c, t: _wkv6(c, t, tf=(3, 4)), ValueError, "tf must hold S*H = 8 values")
_bad("rwkv_wkv6", lambda c, t: _wkv6(c, t, v="f16"), GraphError, "the CPU kernel takes F32 inputs, got F16")
_bad("rwkv_wkv6", lambda c, t: _wkv6(c, t, shape=(2, 2, 2, 4)), ValueError, "must be [S, H, n_tokens] (3-d)")
_bad("rwkv_wkv6", lambda c, t: ops.rwkv_wkv6(c, _tok(t), _tok(t, S=3), _tok(t), t("f32", (2, 4)), _tok(t),
                                             t("f32", (1, 32))), ValueError, "v->ne[0] == S")
_bad("rwkv_wkv6", lambda c, t: ops.rwkv_wkv6(c, _tok(t), _tok(t), _tok(t), t("f32", (2, 4)), _tok(t), None),
     TypeError, "state must be a Tensor")


def _gla(c, t, T=4, seqs=1, scale=1.0, q="f32", state=32):
    return ops.gated_linear_attn(c, _tok(t, T), _tok(t, T), _tok(t, T, type=q), _tok(t, T), t("f32", (seqs, state)), scale)


_bad("gated_linear_attn", lambda c, t: _gla(c, t, scale=float("nan")), ValueError, "scale must be finite")
_bad("gated_linear_attn", lambda c, t: _gla(c, t, scale=[1.0]), TypeError, "scale must be a number")
_bad("gated_linear_attn", lambda c, t: _gla(c, t, T=1, seqs=2), ValueError, "must be a positive multiple of n_seqs")
_bad("gated_linear_attn", lambda c, t: _gla(c, t, q="f16"), GraphError, "the CPU kernel takes F32 inputs, got F16")
_bad("gated_linear_attn", lambda c, t: _gla(c, t, state=31), ValueError, "ggml_nelements(state) == S * S * H * n_seqs")


# --- rwkv_wkv7: S 64 (the CPU's SIMD step divides it), H 1 ---------------------------------------------------------------------
def _wkv7(c, t, S=64, T=2, r="f32", state=None):
    return ops.rwkv_wkv7(c, _tok(t, T, S, 1, r), *(_tok(t, T, S, 1) for _ in range(5)),
                         t("f32", (1, S * S if state is None else state)))


_bad("rwkv_wkv7", lambda c, t: _wkv7(c, t, S=8), GraphError, "head size (S = 8) that is a multiple of")
_bad("rwkv_wkv7", lambda c, t: _wkv7(c, t, r="f16"), GraphError, "the CPU kernel takes F32 inputs, got F16")
_bad("rwkv_wkv7", lambda c, t: _wkv7(c, t, state=64), ValueError, "ggml_nelements(state) == S * S * H * n_seqs")
_bad("rwkv_wkv7", lambda c, t: ops.rwkv_wkv7(c, *(_tok(t) for _ in range(6)), "state"), TypeError,
     "state must be a Tensor")

# --- solve_tri ----------------------------------------------------------------------------------------------------------
_bad("solve_tri", lambda c, t: ops.solve_tri(c, t("f32", (5, 5)), t("f32", (5, 3)), lower=False), ValueError,
     "lower && left && !uni")
_bad("solve_tri", lambda c, t: ops.solve_tri(c, t("f32", (5, 5)), t("f32", (5, 3)), left=False), ValueError,
     "lower && left && !uni")
_bad("solve_tri", lambda c, t: ops.solve_tri(c, t("f32", (5, 5)), t("f32", (5, 3)), uni=True), ValueError,
     "lower && left && !uni")
_bad("solve_tri", lambda c, t: ops.solve_tri(c, t("f32", (5, 5)), t("f32", (5, 3)), left="yes"), TypeError,
     "left must be a bool")
_bad("solve_tri", lambda c, t: ops.solve_tri(c, t("f16", (5, 5)), t("f32", (5, 3))), ValueError,
     "a->type == GGML_TYPE_F32")
_bad("solve_tri", lambda c, t: ops.solve_tri(c, t("f32", (5, 4)), t("f32", (5, 3))), ValueError, "a->ne[0] == a->ne[1]")
_bad("solve_tri", lambda c, t: ops.solve_tri(c, t("f32", (5, 5)), ops.transpose(c, t("f32", (3, 5)))), ValueError,
     "ggml_is_contiguous(b)")
_bad("solve_tri", lambda c, t: ops.solve_tri(c, t("f32", (2, 5, 5)), t("f32", (3, 5, 3))), ValueError,
     "a->ne[2] == b->ne[2]")


# --- gated_delta_net: S 4, H 2, 3 tokens, 1 sequence ------------------------------------------------------------------------
def _gdn(c, t, q=(1, 3, 2, 4), k=(1, 3, 2, 4), g=(1, 3, 2, 1), beta=(1, 3, 2, 1), state="f32", K=1, qv=None):
    return ops.gated_delta_net(c, qv(c, t) if qv else t("f32", q), t("f32", k), t("f32", (1, 3, 2, 4)), t("f32", g),
                               t("f32", beta), t(state, (1, 2, 4, 4)), K)


_bad("gated_delta_net", lambda c, t: _gdn(c, t, q=(1, 3, 2, 3)), ValueError, "q must be [4, H_k, 3, n_seqs_qk]")
_bad("gated_delta_net", lambda c, t: _gdn(c, t, k=(1, 3, 3, 4)), ValueError, "with H_k dividing 2")
_bad("gated_delta_net", lambda c, t: _gdn(c, t, q=(2, 3, 2, 4)), ValueError, "n_seqs_qk dividing 1")  # would divide by 0
_bad("gated_delta_net", lambda c, t: _gdn(c, t, k=(1, 2, 2, 4)), ValueError, "k must be [4, H_k, 3, n_seqs_qk]")
_bad("gated_delta_net", lambda c, t: _gdn(c, t, g=(1, 3, 1, 1)), ValueError, "g must be [1, 2, 3, 1]")
_bad("gated_delta_net", lambda c, t: _gdn(c, t, beta=(1, 2, 2, 1)), ValueError, "beta must be [1, 2, 3, 1]")
_bad("gated_delta_net", lambda c, t: _gdn(c, t, g=(1, 3, 2, 3)), ValueError, "g->ne[0] == 1 || g->ne[0] == S_v")
_bad("gated_delta_net", lambda c, t: _gdn(c, t, beta=(1, 3, 2, 4)), ValueError, "beta->ne[0] == 1")
_bad("gated_delta_net", lambda c, t: _gdn(c, t, state="f16"), ValueError, "state->type == GGML_TYPE_F32")
_bad("gated_delta_net", lambda c, t: _gdn(c, t, K=0), ValueError, "K (snapshot slots) must be in 1..")
_bad("gated_delta_net", lambda c, t: _gdn(c, t, K=2**31), ValueError, "K (snapshot slots) must be in 1..")
_bad("gated_delta_net", lambda c, t: _gdn(c, t, K=1.5), TypeError, "K must be an integer")
_bad("gated_delta_net", lambda c, t: _gdn(c, t, qv=lambda c, t: ops.permute(c, t("f32", (1, 3, 4, 2)), 1, 0, 2, 3)),
     ValueError, "ggml_is_contiguous_rows(q)")
_bad("gated_delta_net", lambda c, t: ops.gated_delta_net(c, t("f32", (1, 3, 2, 4)), None, t("f32", (1, 3, 2, 4)),
                                                         t("f32", (1, 3, 2, 1)), t("f32", (1, 3, 2, 1)),
                                                         t("f32", (1, 2, 4, 4))), TypeError, "k must be a Tensor")

# scalar arguments (issue 19)
_bad("gated_linear_attn", lambda c, t: ops.gated_linear_attn(c, t("f32", (4, 2, 8)), t("f32", (4, 2, 8)),
                                                             t("f32", (4, 2, 8)), t("f32", (4, 2, 8)),
                                                             t("f32", (1, 128)), "0.5"), TypeError,
     "scale must be a number, got str")
_bad("ssm_scan", lambda c, t: ops.ssm_scan(c, t("f32", (1, 2, 2, 4)), t("f32", (1, 2, 2, 4)), t("f32", (1, 2, 2)),
                                           t("f32", (2, 4)), t("f32", (1, 2, 1, 4)), t("f32", (1, 2, 1, 4)),
                                           t("i32", (1,)), K=2.0), TypeError, "K must be an integer, got float")
