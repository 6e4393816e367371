"""Specs of the recurrent and state-space ops.

Inputs are drawn so the recurrences stay well conditioned over the tokens of a case: decays in
(0, 1), keys short enough for the delta rule to contract, triangular systems with a dominant
diagonal. Where an op writes only some of its snapshot slots (n_tokens < K), the case compares the
written prefix of the result, a view."""

from __future__ import annotations

from typing import Any

import numpy as np

from pyggml import ops
from pyggml.context import Context
from pyggml.errors import GraphError
from pyggml.tensor import Tensor
from pyggml.testing.engine import oracles
from pyggml.testing.engine.opdb import *  # noqa: F403 - the database's vocabulary, opdb.__all__
from pyggml.testing.engine.opdb import hints

# --- bad calls (moved from tests/bad_calls_recurrent.py and tests/test_bad_input.py): op -> Bad -----------------------


def _with_unwritten(n: Node, want: np.ndarray) -> np.ndarray:
    """The node's result where the oracle gives only the written prefix (snapshot slots past n_tokens hold
    whatever the memory held): the oracle's values, then the node's own values in the unwritten slots."""
    got = n.value()
    out = got.reshape(-1).copy()
    out[: want.size] = np.asarray(want).reshape(-1)
    return out.reshape(got.shape)


bad("ssm_conv", lambda c, t: ops.ssm_conv(c, t("f32", (2, 5, 8)), t("f32", (6, 4))), ValueError, "sx->ne[1] == d_inner")
bad("ssm_conv", lambda c, t: ops.ssm_conv(c, t("f32", (2, 6, 2)), t("f32", (6, 4))), ValueError, "n_t >= 0")
bad(
    "ssm_conv",
    lambda c, t: ops.ssm_conv(c, t("f32", (1, 3, 4)), ops.transpose(c, t("f32", (2, 3)))),
    ValueError,
    "a contiguous c",
)
bad(
    "ssm_conv",
    lambda c, t: ops.ssm_conv(c, ops.view_3d(c, t("f32", (1, 3, 8)), 4, 3, 1, 32, 96, 0), t("f32", (3, 2))),
    ValueError,
    "sx with packed rows",
)


# --- ssm_scan: s [1, heads 2, head_dim 3, d_state 4], 2 tokens, 1 sequence ------------------------------------------
def _scan(c, t, *, x="f32", A=(2, 1), groups=1, ids=None, K=1):
    return ops.ssm_scan(
        c,
        t("f32", (1, 2, 3, 4)),
        t(x, (1, 2, 2, 3)),
        t("f32", (1, 2, 2)),
        t("f32", A),
        t("f32", (1, 2, groups, 4)),
        t("f32", (1, 2, groups, 4)),
        t("i32", (1,)) if ids is None else ids(c, t),
        K,
    )


bad("ssm_scan", lambda c, t: _scan(c, t, A=(2, 4), K=2), ValueError, "K == 1")  # Mamba-1 keeps no snapshots
bad("ssm_scan", lambda c, t: _scan(c, t, K=0), ValueError, "K (snapshot slots) must be in 1..")
bad("ssm_scan", lambda c, t: _scan(c, t, K=2.0), TypeError, "K must be an integer")
bad("ssm_scan", lambda c, t: _scan(c, t, groups=3), ValueError, "B's groups (ne[1] = 3) must divide x's heads")
bad("ssm_scan", lambda c, t: _scan(c, t, ids=lambda c, t: t("i64", (1,))), ValueError, "ids->type == GGML_TYPE_I32")
bad("ssm_scan", lambda c, t: _scan(c, t, ids=lambda c, t: [0]), TypeError, "ids must be a Tensor")
bad("ssm_scan", lambda c, t: _scan(c, t, x="f16"), GraphError, "takes F32 s, x, dt, A, B and C, got F16")
bad(
    "ssm_scan",
    lambda c, t: _scan(c, t, ids=lambda c, t: ops.view_nd(c, t("i32", (4,)), [1, 1, 1, 1], [8, 8, 8, 8])),
    GraphError,
    "packed ids",
)


# --- rwkv_wkv6, gated_linear_attn: S 4, H 2, T tokens ---------------------------------------------------------------------
def _tok(t, T=4, S=4, H=2, type="f32"):
    return t(type, (T, H, S))


def _wkv6(c, t, T=4, seqs=1, tf=(2, 4), v="f32", shape=None):
    shape = shape or (T, 2, 4)
    return ops.rwkv_wkv6(
        c, t("f32", shape), t(v, shape), t("f32", shape), t("f32", tf), t("f32", shape), t("f32", (seqs, 32))
    )


bad(
    "rwkv_wkv6",
    lambda c, t: _wkv6(c, t, T=5, seqs=2),
    ValueError,
    "n_tokens (5) must be a positive multiple of n_seqs (2",
)
bad("rwkv_wkv6", lambda c, t: _wkv6(c, t, tf=(3, 4)), ValueError, "tf must hold S*H = 8 values")
bad("rwkv_wkv6", lambda c, t: _wkv6(c, t, v="f16"), GraphError, "the CPU kernel takes F32 inputs, got F16")
bad("rwkv_wkv6", lambda c, t: _wkv6(c, t, shape=(2, 2, 2, 4)), ValueError, "must be [S, H, n_tokens] (3-d)")
bad(
    "rwkv_wkv6",
    lambda c, t: ops.rwkv_wkv6(c, _tok(t), _tok(t, S=3), _tok(t), t("f32", (2, 4)), _tok(t), t("f32", (1, 32))),
    ValueError,
    "v->ne[0] == S",
)
bad(
    "rwkv_wkv6",
    lambda c, t: ops.rwkv_wkv6(c, _tok(t), _tok(t), _tok(t), t("f32", (2, 4)), _tok(t), None),
    TypeError,
    "state must be a Tensor",
)


def _gla(c, t, T=4, seqs=1, scale=1.0, q="f32", state=32):
    return ops.gated_linear_attn(
        c, _tok(t, T), _tok(t, T), _tok(t, T, type=q), _tok(t, T), t("f32", (seqs, state)), scale
    )


bad("gated_linear_attn", lambda c, t: _gla(c, t, scale=float("nan")), ValueError, "scale must be finite")
bad("gated_linear_attn", lambda c, t: _gla(c, t, scale=[1.0]), TypeError, "scale must be a number")
bad("gated_linear_attn", lambda c, t: _gla(c, t, T=1, seqs=2), ValueError, "must be a positive multiple of n_seqs")
bad("gated_linear_attn", lambda c, t: _gla(c, t, q="f16"), GraphError, "the CPU kernel takes F32 inputs, got F16")
bad("gated_linear_attn", lambda c, t: _gla(c, t, state=31), ValueError, "ggml_nelements(state) == S * S * H * n_seqs")


# --- rwkv_wkv7: S 64 (the CPU's SIMD step divides it), H 1 ---------------------------------------------------------------------
def _wkv7(c, t, S=64, T=2, r="f32", state=None):
    return ops.rwkv_wkv7(
        c, _tok(t, T, S, 1, r), *(_tok(t, T, S, 1) for _ in range(5)), t("f32", (1, S * S if state is None else state))
    )


bad("rwkv_wkv7", lambda c, t: _wkv7(c, t, S=8), GraphError, "head size (S = 8) that is a multiple of")
bad("rwkv_wkv7", lambda c, t: _wkv7(c, t, r="f16"), GraphError, "the CPU kernel takes F32 inputs, got F16")
bad("rwkv_wkv7", lambda c, t: _wkv7(c, t, state=64), ValueError, "ggml_nelements(state) == S * S * H * n_seqs")
bad(
    "rwkv_wkv7",
    lambda c, t: ops.rwkv_wkv7(c, *(_tok(t) for _ in range(6)), "state"),
    TypeError,
    "state must be a Tensor",
)

# --- solve_tri ----------------------------------------------------------------------------------------------------------
bad(
    "solve_tri",
    lambda c, t: ops.solve_tri(c, t("f32", (5, 5)), t("f32", (5, 3)), lower=False),
    ValueError,
    "lower && left && !uni",
)
bad(
    "solve_tri",
    lambda c, t: ops.solve_tri(c, t("f32", (5, 5)), t("f32", (5, 3)), left=False),
    ValueError,
    "lower && left && !uni",
)
bad(
    "solve_tri",
    lambda c, t: ops.solve_tri(c, t("f32", (5, 5)), t("f32", (5, 3)), uni=True),
    ValueError,
    "lower && left && !uni",
)
bad(
    "solve_tri",
    lambda c, t: ops.solve_tri(c, t("f32", (5, 5)), t("f32", (5, 3)), left="yes"),
    TypeError,
    "left must be a bool",
)
bad(
    "solve_tri",
    lambda c, t: ops.solve_tri(c, t("f16", (5, 5)), t("f32", (5, 3))),
    ValueError,
    "a->type == GGML_TYPE_F32",
)
bad("solve_tri", lambda c, t: ops.solve_tri(c, t("f32", (5, 4)), t("f32", (5, 3))), ValueError, "a->ne[0] == a->ne[1]")
bad(
    "solve_tri",
    lambda c, t: ops.solve_tri(c, t("f32", (5, 5)), ops.transpose(c, t("f32", (3, 5)))),
    ValueError,
    "ggml_is_contiguous(b)",
)
bad(
    "solve_tri",
    lambda c, t: ops.solve_tri(c, t("f32", (2, 5, 5)), t("f32", (3, 5, 3))),
    ValueError,
    "a->ne[2] == b->ne[2]",
)


# --- gated_delta_net: S 4, H 2, 3 tokens, 1 sequence ------------------------------------------------------------------------
def _gdn(c, t, q=(1, 3, 2, 4), k=(1, 3, 2, 4), g=(1, 3, 2, 1), beta=(1, 3, 2, 1), state="f32", K=1, qv=None):
    return ops.gated_delta_net(
        c,
        qv(c, t) if qv else t("f32", q),
        t("f32", k),
        t("f32", (1, 3, 2, 4)),
        t("f32", g),
        t("f32", beta),
        t(state, (1, 2, 4, 4)),
        K,
    )


bad("gated_delta_net", lambda c, t: _gdn(c, t, q=(1, 3, 2, 3)), ValueError, "q must be [4, H_k, 3, n_seqs_qk]")
bad("gated_delta_net", lambda c, t: _gdn(c, t, k=(1, 3, 3, 4)), ValueError, "with H_k dividing 2")
bad("gated_delta_net", lambda c, t: _gdn(c, t, q=(2, 3, 2, 4)), ValueError, "n_seqs_qk dividing 1")  # would divide by 0
bad("gated_delta_net", lambda c, t: _gdn(c, t, k=(1, 2, 2, 4)), ValueError, "k must be [4, H_k, 3, n_seqs_qk]")
bad("gated_delta_net", lambda c, t: _gdn(c, t, g=(1, 3, 1, 1)), ValueError, "g must be [1, 2, 3, 1]")
bad("gated_delta_net", lambda c, t: _gdn(c, t, beta=(1, 2, 2, 1)), ValueError, "beta must be [1, 2, 3, 1]")
bad("gated_delta_net", lambda c, t: _gdn(c, t, g=(1, 3, 2, 3)), ValueError, "g->ne[0] == 1 || g->ne[0] == S_v")
bad("gated_delta_net", lambda c, t: _gdn(c, t, beta=(1, 3, 2, 4)), ValueError, "beta->ne[0] == 1")
bad("gated_delta_net", lambda c, t: _gdn(c, t, state="f16"), ValueError, "state->type == GGML_TYPE_F32")
bad("gated_delta_net", lambda c, t: _gdn(c, t, K=0), ValueError, "K (snapshot slots) must be in 1..")
bad("gated_delta_net", lambda c, t: _gdn(c, t, K=2**31), ValueError, "K (snapshot slots) must be in 1..")
bad("gated_delta_net", lambda c, t: _gdn(c, t, K=1.5), TypeError, "K must be an integer")
bad(
    "gated_delta_net",
    lambda c, t: _gdn(c, t, qv=lambda c, t: ops.permute(c, t("f32", (1, 3, 4, 2)), 1, 0, 2, 3)),
    ValueError,
    "ggml_is_contiguous_rows(q)",
)
bad(
    "gated_delta_net",
    lambda c, t: ops.gated_delta_net(
        c,
        t("f32", (1, 3, 2, 4)),
        None,
        t("f32", (1, 3, 2, 4)),
        t("f32", (1, 3, 2, 1)),
        t("f32", (1, 3, 2, 1)),
        t("f32", (1, 2, 4, 4)),
    ),
    TypeError,
    "k must be a Tensor",
)

# scalar arguments (issue 19)
bad(
    "gated_linear_attn",
    lambda c, t: ops.gated_linear_attn(
        c, t("f32", (4, 2, 8)), t("f32", (4, 2, 8)), t("f32", (4, 2, 8)), t("f32", (4, 2, 8)), t("f32", (1, 128)), "0.5"
    ),
    TypeError,
    "scale must be a number, got str",
)
bad(
    "ssm_scan",
    lambda c, t: ops.ssm_scan(
        c,
        t("f32", (1, 2, 2, 4)),
        t("f32", (1, 2, 2, 4)),
        t("f32", (1, 2, 2)),
        t("f32", (2, 4)),
        t("f32", (1, 2, 1, 4)),
        t("f32", (1, 2, 1, 4)),
        t("i32", (1,)),
        K=2.0,
    ),
    TypeError,
    "K must be an integer, got float",
)


# --- ssm_conv: odd sizes, a strided batch -------------------------------------------------------------------------------
spec(
    "ssm_conv",
    hints={"sx": hints.ssm_conv_sx, "c": hints.ssm_conv_c},
    samples=[
        Sample({"sx": ("f32", (2, 6, 3 + 5)), "c": ("f32", (6, 4))}),
        Sample({"sx": ("f32", (3, 8, 4)), "c": ("f32", (8, 4))}, variant="one_token"),
        *(
            Sample(
                {"sx": ("f32", (_ns, _d, _dc - 1 + _nt)), "c": ("f32", (_d, _dc))},
                variant=f"s{_ns}_d{_d}_k{_dc}_t{_nt}",
            )
            for _ns, _d, _dc, _nt in ((1, 5, 3, 7), (3, 7, 4, 5), (2, 13, 5, 3), (1, 11, 2, 1), (5, 3, 4, 11))
        ),
        # every other sequence of a batch: sx's rows packed, its sequences strided (a view no layout gives:
        # the ggml side takes a view_3d with doubled sequence stride, the oracle every other sequence)
        Sample(
            {"sx": ("f32", (6, 5, 3 + 6)), "c": ("f32", (5, 4))},
            variant="strided_seqs",
            call=lambda xp, x: xp.ssm_conv(xp.view_3d(x.sx, 9, 5, 3, 9 * 4, 2 * 9 * 5 * 4), x.c),
            oracle=lambda x: oracles.ssm_conv(x.sx[::2], x.c),
        ),
    ],
    reads=("SSM_CONV",),
    from_node=lambda n: oracles.ssm_conv(n.arg(0), n.arg(1)),
)


# --- ssm_scan ----------------------------------------------------------------------------------------------------------
def _prefix_1d(c: Context, out: Tensor, n: int) -> Tensor:
    return out if n == out.ne[0] else c.view_1d(out, n, 0)


def _scan_sample(
    name: str,
    ds: int,
    hd: int,
    nh: int,
    ng: int,
    nt: int,
    ns: int,
    K: int = 1,
    rows: int | None = None,
    mamba1: bool = False,
    strided: bool = False,
    dt: Gen | None = None,
    A: Gen | None = None,
) -> Sample:
    """strided: x, B and C given as [n_tokens, n_seqs, ...] and permuted to [n_seqs, n_tokens, ...]."""
    rows = rows or ns
    dt, A = dt or uniform(-2.0, 2.0), A or uniform(-2.0, -0.5)
    lay = Permuted((0, 1, 3, 2)) if strided else None
    inputs: dict[str, InputSpec] = {
        "s": ("f32", (rows, nh, hd, ds)),
        "x": In("f32", (nt, ns, nh, hd) if strided else (ns, nt, nh, hd), layout=lay),
        "dt": ("f32", (ns, nt, nh), dt),
        "A": ("f32", (nh, ds if mamba1 else 1), A),
        "B": In("f32", (nt, ns, ng, ds) if strided else (ns, nt, ng, ds), layout=lay),
        "C": In("f32", (nt, ns, ng, ds) if strided else (ns, nt, ng, ds), layout=lay),
        "ids": ("i32", (ns,), permutation_rows(rows)),
    }
    n_out = ns * nt * nh * hd + min(nt, K) * ns * nh * hd * ds
    return Sample(inputs, (K, n_out), variant=name, tag="f32")


_SCAN: list[Sample] = []
# Mamba-2: one decay per head, groups of heads sharing B and C, snapshots
for _ds, _hd, _nh, _ng, _nt, _ns, _K in (
    (16, 4, 2, 1, 5, 1, 1),
    (5, 3, 3, 1, 7, 2, 1),
    (7, 5, 4, 2, 3, 3, 1),
    (13, 2, 6, 3, 4, 2, 1),
    (3, 1, 5, 5, 1, 1, 1),
    (16, 8, 2, 2, 2, 2, 1),
    (8, 4, 2, 1, 6, 2, 3),
    (5, 3, 4, 2, 5, 1, 4),
    (7, 2, 3, 1, 2, 2, 4),
    (4, 5, 2, 2, 1, 3, 2),
    (11, 3, 2, 1, 9, 1, 8),
    (6, 4, 3, 3, 8, 2, 8),
    (9, 2, 2, 1, 3, 2, 7),
    (33, 3, 2, 1, 4, 1, 2),
    # the sizes Vulkan's shader takes (d_state 128 or 256, head_dim a multiple
    # of 16); d_state 256 with n_head * head_dim = 16 leaves the shader's last
    # workgroup partly empty where subgroups are 8 wide
    (128, 16, 2, 1, 3, 1, 1),
    (128, 16, 3, 3, 4, 2, 3),
    (256, 16, 1, 1, 2, 1, 1),
    (128, 32, 1, 1, 2, 2, 4),
    (256, 16, 1, 1, 3, 2, 2),
):
    _SCAN.append(
        _scan_sample(f"mamba2/ds{_ds}_hd{_hd}_h{_nh}_g{_ng}_t{_nt}_s{_ns}_K{_K}", _ds, _hd, _nh, _ng, _nt, _ns, _K)
    )
_SCAN += [
    _scan_sample("mamba2/state_rows", 5, 3, 2, 1, 4, 2, K=2, rows=5),  # sequences start from rows 0..4 of s, permuted
    _scan_sample("mamba2/strided", 7, 3, 2, 1, 5, 3, K=3, strided=True),
    _scan_sample("mamba2/strided_K_past_tokens", 6, 2, 4, 2, 3, 2, K=6, strided=True),
    _scan_sample("mamba2/dt_past_20", 5, 2, 3, 1, 4, 2, dt=uniform(15.0, 25.0), A=uniform(-0.2, -0.05)),  # softplus = x
]
# Mamba-1: one decay per state element (K must be 1); heads of one channel each, as Mamba-1 uses it
for _ds, _hd, _nh, _ng, _nt, _ns in ((16, 1, 5, 1, 4, 1), (5, 1, 7, 1, 3, 2), (7, 3, 2, 2, 5, 3), (13, 2, 3, 1, 2, 2)):
    _SCAN.append(
        _scan_sample(f"mamba1/ds{_ds}_hd{_hd}_h{_nh}_g{_ng}_t{_nt}_s{_ns}", _ds, _hd, _nh, _ng, _nt, _ns, mamba1=True)
    )
_SCAN.append(_scan_sample("mamba1/strided_state_rows", 5, 1, 6, 3, 4, 2, rows=3, mamba1=True, strided=True))


# the op leaves the snapshot slots past n_tokens unwritten: the ggml side reads the written prefix (a view of
# n_out floats), the oracle returns only that prefix (written_only), so the two sides differ
def _ssm_scan_node(n: Node) -> np.ndarray:
    """SSM_SCAN: sources s, x, dt, A, B, C, ids; op_params K."""
    s, x, dt, A, B, C, ids = n.src[:7]
    return oracles.ssm_scan(s, x, dt, A, B, C, ids, n.param("K"), written_only=True)


def _gdn_node(n: Node) -> np.ndarray:
    """GATED_DELTA_NET: sources q, k, v, g, beta, state; op_params K."""
    q, k, v, g, beta, state = n.src[:6]
    return oracles.gated_delta_net(q, k, v, g, beta, state, n.param("K"), written_only=True)


spec(
    "ssm_scan",
    lambda xp, x, K, n_out: _prefix_1d(xp, xp.ssm_scan(x.s, x.x, x.dt, x.A, x.B, x.C, x.ids, K), n_out),
    _SCAN,
    params=("K",),
    hints=hints.SSM_SCAN,
    oracle=lambda x, K, n_out: oracles.ssm_scan(x.s, x.x, x.dt, x.A, x.B, x.C, x.ids, K, written_only=True),
    reads=("SSM_SCAN",),
    from_node=lambda n: _with_unwritten(n, _ssm_scan_node(n)),
)


# --- RWKV-6, gated linear attention, RWKV-7 ----------------------------------------------------------------------------
def _wkv_inputs(
    names: tuple[str, ...], S: int, H: int, T: int, ns: int, special: dict[str, Gen]
) -> dict[str, InputSpec]:
    inputs: dict[str, InputSpec] = {n: ("f32", (T, H, S), special.get(n, uniform())) for n in names}
    inputs["state"] = ("f32", (ns, S * S * H), uniform(-0.5, 0.5))
    return inputs


spec(
    "rwkv_wkv6",
    lambda xp, x: xp.rwkv_wkv6(x.k, x.v, x.r, x.tf, x.td, x.state),
    hints=hints.token_ops(["k", "v", "r", "tf", "td", "state"]),
    samples=[
        Sample(
            {**_wkv_inputs(("k", "v", "r", "td"), _S, _H, _T, _ns, {"td": uniform(0.5, 1.0)}), "tf": ("f32", (_H, _S))},
            variant=f"S{_S}_H{_H}_T{_T}_s{_ns}",
        )
        for _S, _H, _T, _ns in (
            (8, 2, 5, 1),
            (5, 3, 6, 2),
            (7, 1, 3, 3),
            (16, 2, 4, 2),
            (3, 4, 7, 1),
            (13, 1, 9, 3),
            (64, 1, 2, 1),
            (11, 2, 1, 1),
            (64, 2, 4, 2),
            (64, 1, 3, 3),
        )  # Vulkan: S = 64 only
    ],
    reads=("RWKV_WKV6",),
    from_node=lambda n: oracles.rwkv_wkv6(*n.src[:6]),
)
spec(
    "gated_linear_attn",
    hints=hints.token_ops(["k", "v", "q", "g", "state"]),
    samples=[
        Sample(
            _wkv_inputs(("k", "v", "q", "g"), _S, _H, _T, _ns, {"g": uniform(0.5, 1.0)}),
            (_scale,),
            variant=f"S{_S}_H{_H}_T{_T}_s{_ns}_scale{_scale:.3g}",
        )
        for _S, _H, _T, _ns, _scale in (
            (8, 2, 5, 1, 1.0),
            (5, 3, 6, 2, 0.5),
            (7, 1, 3, 3, 1.0),
            (16, 2, 4, 2, 0.25),
            (3, 4, 7, 1, 2.0),
            (13, 1, 9, 3, 13**-0.5),
            (64, 1, 2, 1, 0.125),
            (11, 2, 1, 1, 1.0),
            (64, 2, 4, 2, 0.5),
            (64, 1, 5, 1, 1.0),
            (64, 1, 3, 3, 0.125),
        )  # Vulkan: S = 64 only
    ],
    reads=("GATED_LINEAR_ATTN",),
    from_node=lambda n: oracles.gated_linear_attn(*n.src[:5], n.param("scale")),
)
# the CPU kernel steps 64 floats at a time on AVX-512 (32 on AVX2): head sizes of 64 and 128, as RWKV-7 uses
_WKV7 = {
    "w": uniform(0.5, 1.0),
    "a": uniform(-0.1, 0.1),
    "b": uniform(-0.1, 0.1),
    "k": uniform(-0.3, 0.3),
    "r": uniform(-0.3, 0.3),
}
spec(
    "rwkv_wkv7",
    hints=hints.token_ops(["r", "w", "k", "v", "a", "b", "state"]),
    samples=[
        Sample(_wkv_inputs(("r", "w", "k", "v", "a", "b"), _S, _H, _T, _ns, _WKV7), variant=f"S{_S}_H{_H}_T{_T}_s{_ns}")
        for _S, _H, _T, _ns in (
            (64, 1, 3, 1),
            (64, 2, 4, 2),
            (64, 1, 5, 1),
            (64, 3, 3, 3),
            (128, 1, 2, 1),
            (64, 1, 1, 1),
        )
    ],
    reads=("RWKV_WKV7",),
    from_node=lambda n: oracles.rwkv_wkv7(*n.src[:7]),
)


# --- solve_tri ------------------------------------------------------------------------------------------------------
def _triangular(n: int) -> Gen:
    """Lower triangle with |diagonal| in [1, 2) and small off-diagonal terms (condition number near 1);
    the upper triangle is noise the op must ignore."""

    def gen(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        a = rng.uniform(-1.0, 1.0, size=shape) / n
        d = rng.uniform(1.0, 2.0, size=shape[:-1]) * rng.choice([-1.0, 1.0], size=shape[:-1])
        a[..., np.arange(n), np.arange(n)] = d
        return (a + np.triu(rng.uniform(-5.0, 5.0, size=shape), 1)).astype(np.float32)

    return gen


# ggml_solve_tri keeps no op_params: it implements left, lower, not uni only (the oracle's defaults)
spec(
    "solve_tri",
    params=(),
    hints=hints.SOLVE_TRI,
    samples=[
        Sample(
            {"a": ("f32", (*_batch, _n, _n), _triangular(_n)), "b": ("f32", (*_batch, _n, _m))},
            variant=f"{'x'.join(map(str, _batch)) or 'single'}_n{_n}_m{_m}",
        )
        for _batch, _n, _m in (
            ((), 1, 1),
            ((), 3, 2),
            ((), 5, 7),
            ((2,), 7, 3),
            ((3,), 13, 1),
            ((2, 3), 4, 5),
            ((), 16, 11),
            ((2,), 11, 13),
            ((), 32, 4),
            ((3, 1), 5, 1),
        )
    ],
    reads=("SOLVE_TRI",),
    from_node=lambda n: oracles.solve_tri(n.arg(0), n.arg(1)),
)


# --- gated_delta_net --------------------------------------------------------------------------------------------------
def _short_keys(S: int) -> Gen:
    """Keys of squared norm about 1/3: with beta < 1 each delta-rule step contracts the state."""
    return uniform(-(S**-0.5), S**-0.5)


def _gdn_inputs(
    S: int, H: int, T: int, ns: int, Hk: int, nsk: int, kda: bool, qk_tokens_first: bool = False
) -> dict[str, InputSpec]:
    """qk_tokens_first: q and k given as [n_tokens, n_seqs, ...] and permuted (rows packed, other strides not)."""
    qk_shape = (T, nsk, Hk, S) if qk_tokens_first else (nsk, T, Hk, S)
    lay = Permuted((0, 1, 3, 2)) if qk_tokens_first else None
    return {
        "q": In("f32", qk_shape, None, lay),
        "k": In("f32", qk_shape, _short_keys(S), lay),
        "v": ("f32", (ns, T, H, S)),
        "g": ("f32", (ns, T, H, S if kda else 1), uniform(-1.0, 0.0)),
        "beta": ("f32", (ns, T, H, 1), uniform(0.1, 0.9)),
        "state": ("f32", (ns, H, S, S), uniform(-0.5, 0.5)),
    }


def _gdn_prefix(c: Context, out: Tensor, S: int, H: int, rows: int) -> Tensor:
    """The written rows of the result (outputs, then the min(T, K) snapshot slots written)."""
    return out if rows == out.ne[1] else c.view_2d(out, S * H, rows, out.nb[1], 0)


def _gdn_sample(
    S: int,
    H: int,
    T: int,
    ns: int,
    K: int,
    Hk: int | None = None,
    nsk: int | None = None,
    kda: bool = False,
    strided: bool = False,
) -> Sample:
    Hk, nsk = Hk or H, nsk or ns
    rows = T * ns + min(T, K) * S * ns
    name = f"S{S}_H{H}_T{T}_s{ns}_K{K}" + (f"_Hk{Hk}" if Hk != H else "") + (f"_sk{nsk}" if nsk != ns else "")
    name += "_kda" * kda + "_strided" * strided
    return Sample(_gdn_inputs(S, H, T, ns, Hk, nsk, kda, strided), (K, S, H, rows), variant=name)


# rollback: run T tokens keeping K snapshots, drop the last `back` of them and continue from slot `back`
def _gdn_rollback(S: int, H: int, T1: int, T2: int, ns: int, K: int, back: int, kda: bool = False) -> Sample:
    first = _gdn_inputs(S, H, T1, ns, H, ns, kda)
    second = {f"{n}2": v for n, v in _gdn_inputs(S, H, T2, ns, H, ns, kda).items() if n != "state"}
    state_rows = S * ns  # one snapshot slot, in the result's rows

    def build(c: Context, x: Any) -> Tensor:
        out1 = c.gated_delta_net(x.q, x.k, x.v, x.g, x.beta, x.state, K)
        f = out1.nb[0]
        s0 = c.view_4d(out1, S, S, H, ns, S * f, S * S * f, S * S * H * f, (T1 * ns + back * state_rows) * out1.nb[1])
        return c.gated_delta_net(x.q2, x.k2, x.v2, x.g2, x.beta2, s0, 1)

    def oracle(x: Any) -> np.ndarray:
        out1 = oracles.gated_delta_net(x.q, x.k, x.v, x.g, x.beta, x.state, K, written_only=True)
        s0 = out1[T1 * ns + back * state_rows :][:state_rows].reshape(ns, H, S, S)
        return oracles.gated_delta_net(x.q2, x.k2, x.v2, x.g2, x.beta2, s0, 1)

    # a two-op scenario: the ggml side views a snapshot slot of the first result (view_4d by byte offsets),
    # the oracle slices the same rows of its packed result
    return Sample(
        {**first, **second},
        variant=f"rollback_S{S}_H{H}_T{T1}+{T2}_s{ns}_K{K}_back{back}" + "_kda" * kda,
        call=lambda xp, x: build(xp, x),
        oracle=oracle,
    )


_GDN: list[Sample] = []
# K = 1..8, n_tokens shorter than, equal to and longer than K
for _K in range(1, 9):
    for _T in sorted({1, max(1, _K - 1), _K, _K + 3}):
        _GDN.append(_gdn_sample(8 if _K % 2 else 5, 2, _T, 1 + _T % 2, _K))
# heads and sequences, q/k heads shared (tiled) and sequences broadcast, odd head sizes
for _S, _H, _T, _ns, _K, _Hk, _nsk in (
    (16, 4, 3, 2, 2, 2, 2),
    (7, 3, 5, 1, 3, 1, 1),
    (4, 6, 2, 3, 1, 3, 1),
    (13, 2, 4, 2, 5, 1, 2),
    (3, 5, 7, 1, 8, 5, 1),
    (32, 1, 3, 1, 2, 1, 1),
    (9, 4, 6, 4, 4, 2, 2),
    (1, 2, 3, 2, 2, 1, 1),
    (11, 2, 9, 1, 1, 2, 1),
):
    _GDN.append(_gdn_sample(_S, _H, _T, _ns, _K, _Hk, _nsk))
# the head sizes Vulkan's shader takes (16, 32, 64, 128)
for _S, _H, _T, _ns, _K, _Hk, _nsk, _kda in (
    (16, 3, 5, 2, 1, 3, 2, False),
    (16, 2, 3, 1, 4, 1, 1, False),
    (32, 2, 6, 2, 3, 2, 1, False),
    (16, 4, 7, 1, 8, 2, 1, True),
    (32, 1, 1, 3, 2, 1, 3, True),
    (64, 1, 3, 1, 2, 1, 1, False),
    (16, 2, 9, 2, 5, 2, 2, True),
    (32, 2, 2, 2, 1, 1, 2, False),
):
    _GDN.append(_gdn_sample(_S, _H, _T, _ns, _K, _Hk, _nsk, kda=_kda))
# a gate per key row (KDA)
for _S, _H, _T, _ns, _K in ((8, 2, 4, 1, 1), (5, 3, 3, 2, 2), (16, 1, 6, 2, 4), (7, 2, 2, 1, 5), (4, 4, 9, 3, 8)):
    _GDN.append(_gdn_sample(_S, _H, _T, _ns, _K, kda=True))
# q and k non-contiguous (permuted token and sequence dims)
for _S, _H, _T, _ns, _K, _Hk, _kda in (
    (8, 2, 5, 2, 3, 2, False),
    (5, 4, 3, 3, 6, 2, False),
    (7, 2, 4, 2, 1, 1, True),
    (16, 2, 2, 3, 2, 2, True),
):
    _GDN.append(_gdn_sample(_S, _H, _T, _ns, _K, _Hk, kda=_kda, strided=True))
_GDN += [
    _gdn_rollback(8, 2, 6, 3, 1, 4, 2),
    _gdn_rollback(5, 3, 4, 2, 2, 4, 3),
    _gdn_rollback(7, 2, 5, 1, 3, 8, 0),
    _gdn_rollback(4, 2, 3, 4, 2, 3, 1, kda=True),
    _gdn_rollback(16, 2, 5, 2, 2, 4, 1),
    _gdn_rollback(32, 1, 4, 3, 1, 6, 3, kda=True),
]
# as ssm_scan: the ggml side reads the written rows (a view), the oracle returns only those (written_only)
spec(
    "gated_delta_net",
    lambda xp, x, K, S, H, rows: _gdn_prefix(
        xp, xp.gated_delta_net(x.q, x.k, x.v, x.g, x.beta, x.state, K), S, H, rows
    ),
    _GDN,
    params=("K",),
    hints=hints.GATED_DELTA_NET,
    oracle=lambda x, K, S, H, rows: oracles.gated_delta_net(x.q, x.k, x.v, x.g, x.beta, x.state, K, written_only=True),
    reads=("GATED_DELTA_NET",),
    from_node=lambda n: _with_unwritten(n, _gdn_node(n)),
)
