"""Cases of the recurrent and state-space ops.

Inputs are drawn so the recurrences stay well conditioned over the tokens of a case: decays in
(0, 1), keys short enough for the delta rule to contract, triangular systems with a dominant
diagonal. Where an op writes only some of its snapshot slots (n_tokens < K), the case compares the
written prefix of the result, a view."""

from __future__ import annotations

import numpy as np

from pyggml.testing import oracles
from pyggml.testing.cases import (
    op_case,
    permutation_rows,
    uniform,
)

op_case("ssm_conv/f32", {"sx": ("f32", (2, 6, 3 + 5)), "c": ("f32", (6, 4))}, lambda c, x: c.ssm_conv(x.sx, x.c),
        lambda x: oracles.ssm_conv(x.sx, x.c))
op_case("ssm_conv/f32/one_token", {"sx": ("f32", (3, 8, 4)), "c": ("f32", (8, 4))}, lambda c, x: c.ssm_conv(x.sx, x.c),
        lambda x: oracles.ssm_conv(x.sx, x.c))

# --- ssm_conv: odd sizes, a strided batch -------------------------------------------------------------------------------
for _ns, _d, _dc, _nt in ((1, 5, 3, 7), (3, 7, 4, 5), (2, 13, 5, 3), (1, 11, 2, 1), (5, 3, 4, 11)):
    op_case(f"ssm_conv/f32/s{_ns}_d{_d}_k{_dc}_t{_nt}", {"sx": ("f32", (_ns, _d, _dc - 1 + _nt)), "c": ("f32", (_d, _dc))},
            lambda c, x: c.ssm_conv(x.sx, x.c), lambda x: oracles.ssm_conv(x.sx, x.c))
# every other sequence of a batch: sx's rows packed, its sequences strided
op_case("ssm_conv/f32/strided_seqs", {"sx": ("f32", (6, 5, 3 + 6)), "c": ("f32", (5, 4))},
        lambda c, x: c.ssm_conv(c.view_3d(x.sx, 9, 5, 3, 9 * 4, 2 * 9 * 5 * 4), x.c),
        lambda x: oracles.ssm_conv(x.sx[::2], x.c))


# --- ssm_scan ----------------------------------------------------------------------------------------------------------
def _prefix_1d(c, out, n):
    return out if n == out.ne[0] else c.view_1d(out, n, 0)


def _scan_case(name, ds, hd, nh, ng, nt, ns, K=1, rows=None, mamba1=False, strided=False, dt=None, A=None):
    rows = rows or ns
    dt, A = dt or uniform(-2.0, 2.0), A or uniform(-2.0, -0.5)
    inputs = {
        "s": ("f32", (rows, nh, hd, ds)),
        # strided: x, B and C given as [n_tokens, n_seqs, ...] and permuted to [n_seqs, n_tokens, ...]
        "x": ("f32", (nt, ns, nh, hd) if strided else (ns, nt, nh, hd)),
        "dt": ("f32", (ns, nt, nh), dt),
        "A": ("f32", (nh, ds if mamba1 else 1), A),
        "B": ("f32", (nt, ns, ng, ds) if strided else (ns, nt, ng, ds)),
        "C": ("f32", (nt, ns, ng, ds) if strided else (ns, nt, ng, ds)),
        "ids": ("i32", (ns,), permutation_rows(rows)),
    }
    n_out = ns * nt * nh * hd + min(nt, K) * ns * nh * hd * ds

    def build(c, x):
        X, B, C = ((c.permute(t, 0, 1, 3, 2) for t in (x.x, x.B, x.C)) if strided else (x.x, x.B, x.C))
        return _prefix_1d(c, c.ssm_scan(x.s, X, x.dt, x.A, B, C, x.ids, K), n_out)

    def oracle(x):
        X, B, C = ((np.swapaxes(t, 0, 1) for t in (x.x, x.B, x.C)) if strided else (x.x, x.B, x.C))
        return oracles.ssm_scan(x.s, X, x.dt, x.A, B, C, x.ids, K, written_only=True)
    op_case(f"ssm_scan/f32/{name}", inputs, build, oracle)


# Mamba-2: one decay per head, groups of heads sharing B and C, snapshots
for _ds, _hd, _nh, _ng, _nt, _ns, _K in ((16, 4, 2, 1, 5, 1, 1), (5, 3, 3, 1, 7, 2, 1), (7, 5, 4, 2, 3, 3, 1),
                                         (13, 2, 6, 3, 4, 2, 1), (3, 1, 5, 5, 1, 1, 1), (16, 8, 2, 2, 2, 2, 1),
                                         (8, 4, 2, 1, 6, 2, 3), (5, 3, 4, 2, 5, 1, 4), (7, 2, 3, 1, 2, 2, 4),
                                         (4, 5, 2, 2, 1, 3, 2), (11, 3, 2, 1, 9, 1, 8), (6, 4, 3, 3, 8, 2, 8),
                                         (9, 2, 2, 1, 3, 2, 7), (33, 3, 2, 1, 4, 1, 2)):
    _scan_case(f"mamba2/ds{_ds}_hd{_hd}_h{_nh}_g{_ng}_t{_nt}_s{_ns}_K{_K}", _ds, _hd, _nh, _ng, _nt, _ns, _K)
# the sizes Vulkan's shader takes (d_state 128 or 256, head_dim a multiple of 16); d_state 256 with
# n_head * head_dim = 16 leaves the shader's last workgroup partly empty where subgroups are 8 wide
for _ds, _hd, _nh, _ng, _nt, _ns, _K in ((128, 16, 2, 1, 3, 1, 1), (128, 16, 3, 3, 4, 2, 3), (256, 16, 1, 1, 2, 1, 1),
                                         (128, 32, 1, 1, 2, 2, 4), (256, 16, 1, 1, 3, 2, 2)):
    _scan_case(f"mamba2/ds{_ds}_hd{_hd}_h{_nh}_g{_ng}_t{_nt}_s{_ns}_K{_K}", _ds, _hd, _nh, _ng, _nt, _ns, _K)
_scan_case("mamba2/state_rows", 5, 3, 2, 1, 4, 2, K=2, rows=5)  # sequences start from rows 0..4 of s, permuted
_scan_case("mamba2/strided", 7, 3, 2, 1, 5, 3, K=3, strided=True)
_scan_case("mamba2/strided_K_past_tokens", 6, 2, 4, 2, 3, 2, K=6, strided=True)
_scan_case("mamba2/dt_past_20", 5, 2, 3, 1, 4, 2, dt=uniform(15.0, 25.0), A=uniform(-0.2, -0.05))  # softplus(x) = x
# Mamba-1: one decay per state element (K must be 1); heads of one channel each, as Mamba-1 uses it
for _ds, _hd, _nh, _ng, _nt, _ns in ((16, 1, 5, 1, 4, 1), (5, 1, 7, 1, 3, 2), (7, 3, 2, 2, 5, 3), (13, 2, 3, 1, 2, 2)):
    _scan_case(f"mamba1/ds{_ds}_hd{_hd}_h{_nh}_g{_ng}_t{_nt}_s{_ns}", _ds, _hd, _nh, _ng, _nt, _ns, mamba1=True)
_scan_case("mamba1/strided_state_rows", 5, 1, 6, 3, 4, 2, rows=3, mamba1=True, strided=True)


# --- RWKV-6, gated linear attention, RWKV-7 ----------------------------------------------------------------------------
def _wkv_inputs(names, S, H, T, ns, special):
    inputs = {n: ("f32", (T, H, S), special.get(n, uniform())) for n in names}
    inputs["state"] = ("f32", (ns, S * S * H), uniform(-0.5, 0.5))
    return inputs


for _S, _H, _T, _ns in ((8, 2, 5, 1), (5, 3, 6, 2), (7, 1, 3, 3), (16, 2, 4, 2), (3, 4, 7, 1), (13, 1, 9, 3),
                        (64, 1, 2, 1), (11, 2, 1, 1), (64, 2, 4, 2), (64, 1, 3, 3)):  # Vulkan: S = 64 only
    op_case(f"rwkv_wkv6/f32/S{_S}_H{_H}_T{_T}_s{_ns}",
            {**_wkv_inputs(("k", "v", "r", "td"), _S, _H, _T, _ns, {"td": uniform(0.5, 1.0)}),
             "tf": ("f32", (_H, _S))},
            lambda c, x: c.rwkv_wkv6(x.k, x.v, x.r, x.tf, x.td, x.state),
            lambda x: oracles.rwkv_wkv6(x.k, x.v, x.r, x.tf, x.td, x.state))

for _S, _H, _T, _ns, _scale in ((8, 2, 5, 1, 1.0), (5, 3, 6, 2, 0.5), (7, 1, 3, 3, 1.0), (16, 2, 4, 2, 0.25),
                                (3, 4, 7, 1, 2.0), (13, 1, 9, 3, 13 ** -0.5), (64, 1, 2, 1, 0.125), (11, 2, 1, 1, 1.0),
                                (64, 2, 4, 2, 0.5), (64, 1, 5, 1, 1.0), (64, 1, 3, 3, 0.125)):  # Vulkan: S = 64 only
    op_case(f"gated_linear_attn/f32/S{_S}_H{_H}_T{_T}_s{_ns}_scale{_scale:.3g}",
            _wkv_inputs(("k", "v", "q", "g"), _S, _H, _T, _ns, {"g": uniform(0.5, 1.0)}),
            lambda c, x, _sc=_scale: c.gated_linear_attn(x.k, x.v, x.q, x.g, x.state, _sc),
            lambda x, _sc=_scale: oracles.gated_linear_attn(x.k, x.v, x.q, x.g, x.state, _sc))

# the CPU kernel steps 64 floats at a time on AVX-512 (32 on AVX2): head sizes of 64 and 128, as RWKV-7 uses
_WKV7 = {"w": uniform(0.5, 1.0), "a": uniform(-0.1, 0.1), "b": uniform(-0.1, 0.1), "k": uniform(-0.3, 0.3),
         "r": uniform(-0.3, 0.3)}
for _S, _H, _T, _ns in ((64, 1, 3, 1), (64, 2, 4, 2), (64, 1, 5, 1), (64, 3, 3, 3), (128, 1, 2, 1), (64, 1, 1, 1)):
    op_case(f"rwkv_wkv7/f32/S{_S}_H{_H}_T{_T}_s{_ns}",
            _wkv_inputs(("r", "w", "k", "v", "a", "b"), _S, _H, _T, _ns, _WKV7),
            lambda c, x: c.rwkv_wkv7(x.r, x.w, x.k, x.v, x.a, x.b, x.state),
            lambda x: oracles.rwkv_wkv7(x.r, x.w, x.k, x.v, x.a, x.b, x.state))


# --- solve_tri ------------------------------------------------------------------------------------------------------
def _triangular(n):
    """Lower triangle with |diagonal| in [1, 2) and small off-diagonal terms (condition number near 1);
    the upper triangle is noise the op must ignore."""
    def gen(rng, shape):
        a = rng.uniform(-1.0, 1.0, size=shape) / n
        d = rng.uniform(1.0, 2.0, size=shape[:-1]) * rng.choice([-1.0, 1.0], size=shape[:-1])
        a[..., np.arange(n), np.arange(n)] = d
        return (a + np.triu(rng.uniform(-5.0, 5.0, size=shape), 1)).astype(np.float32)
    return gen


for _batch, _n, _m in (((), 1, 1), ((), 3, 2), ((), 5, 7), ((2,), 7, 3), ((3,), 13, 1), ((2, 3), 4, 5),
                       ((), 16, 11), ((2,), 11, 13), ((), 32, 4), ((3, 1), 5, 1)):
    op_case(f"solve_tri/f32/{'x'.join(map(str, _batch)) or 'single'}_n{_n}_m{_m}",
            {"a": ("f32", (*_batch, _n, _n), _triangular(_n)), "b": ("f32", (*_batch, _n, _m))},
            lambda c, x: c.solve_tri(x.a, x.b), lambda x: oracles.solve_tri(x.a, x.b))


# --- gated_delta_net --------------------------------------------------------------------------------------------------
def _short_keys(S):
    """Keys of squared norm about 1/3: with beta < 1 each delta-rule step contracts the state."""
    return uniform(-(S ** -0.5), S ** -0.5)


def _gdn_inputs(S, H, T, ns, Hk, nsk, kda, qk_tokens_first=False):
    qk_shape = (T, nsk, Hk, S) if qk_tokens_first else (nsk, T, Hk, S)
    return {
        "q": ("f32", qk_shape), "k": ("f32", qk_shape, _short_keys(S)), "v": ("f32", (ns, T, H, S)),
        "g": ("f32", (ns, T, H, S if kda else 1), uniform(-1.0, 0.0)),
        "beta": ("f32", (ns, T, H, 1), uniform(0.1, 0.9)),
        "state": ("f32", (ns, H, S, S), uniform(-0.5, 0.5)),
    }


def _gdn_case(S, H, T, ns, K, Hk=None, nsk=None, kda=False, strided=False, tag=""):
    """strided: q and k given as [n_tokens, n_seqs, ...] and permuted (rows packed, other strides not)."""
    Hk, nsk = Hk or H, nsk or ns
    rows = T * ns + min(T, K) * S * ns

    def build(c, x):
        q, k = (c.permute(t, 0, 1, 3, 2) for t in (x.q, x.k)) if strided else (x.q, x.k)
        out = c.gated_delta_net(q, k, x.v, x.g, x.beta, x.state, K)
        return out if rows == out.ne[1] else c.view_2d(out, S * H, rows, out.nb[1], 0)

    def oracle(x):
        q, k = (np.swapaxes(t, 0, 1) for t in (x.q, x.k)) if strided else (x.q, x.k)
        return oracles.gated_delta_net(q, k, x.v, x.g, x.beta, x.state, K, written_only=True)
    name = f"S{S}_H{H}_T{T}_s{ns}_K{K}" + (f"_Hk{Hk}" if Hk != H else "") + (f"_sk{nsk}" if nsk != ns else "")
    name += "_kda" * kda + "_strided" * strided + tag
    op_case(f"gated_delta_net/f32/{name}", _gdn_inputs(S, H, T, ns, Hk, nsk, kda, strided), build, oracle)


# K = 1..8, n_tokens shorter than, equal to and longer than K
for _K in range(1, 9):
    for _T in sorted({1, max(1, _K - 1), _K, _K + 3}):
        _gdn_case(8 if _K % 2 else 5, 2, _T, 1 + _T % 2, _K)
# heads and sequences, q/k heads shared (tiled) and sequences broadcast, odd head sizes
for _S, _H, _T, _ns, _K, _Hk, _nsk in ((16, 4, 3, 2, 2, 2, 2), (7, 3, 5, 1, 3, 1, 1), (4, 6, 2, 3, 1, 3, 1),
                                       (13, 2, 4, 2, 5, 1, 2), (3, 5, 7, 1, 8, 5, 1), (32, 1, 3, 1, 2, 1, 1),
                                       (9, 4, 6, 4, 4, 2, 2), (1, 2, 3, 2, 2, 1, 1), (11, 2, 9, 1, 1, 2, 1)):
    _gdn_case(_S, _H, _T, _ns, _K, _Hk, _nsk)
# the head sizes Vulkan's shader takes (16, 32, 64, 128)
for _S, _H, _T, _ns, _K, _Hk, _nsk, _kda in ((16, 3, 5, 2, 1, 3, 2, False), (16, 2, 3, 1, 4, 1, 1, False),
                                             (32, 2, 6, 2, 3, 2, 1, False), (16, 4, 7, 1, 8, 2, 1, True),
                                             (32, 1, 1, 3, 2, 1, 3, True), (64, 1, 3, 1, 2, 1, 1, False),
                                             (16, 2, 9, 2, 5, 2, 2, True), (32, 2, 2, 2, 1, 1, 2, False)):
    _gdn_case(_S, _H, _T, _ns, _K, _Hk, _nsk, kda=_kda)
# a gate per key row (KDA)
for _S, _H, _T, _ns, _K in ((8, 2, 4, 1, 1), (5, 3, 3, 2, 2), (16, 1, 6, 2, 4), (7, 2, 2, 1, 5), (4, 4, 9, 3, 8)):
    _gdn_case(_S, _H, _T, _ns, _K, kda=True)
# q and k non-contiguous (permuted token and sequence dims)
for _S, _H, _T, _ns, _K, _Hk, _kda in ((8, 2, 5, 2, 3, 2, False), (5, 4, 3, 3, 6, 2, False),
                                       (7, 2, 4, 2, 1, 1, True), (16, 2, 2, 3, 2, 2, True)):
    _gdn_case(_S, _H, _T, _ns, _K, _Hk, kda=_kda, strided=True)


# rollback: run T tokens keeping K snapshots, drop the last `back` of them and continue from slot `back`
def _gdn_rollback(S, H, T1, T2, ns, K, back, kda=False):
    first = _gdn_inputs(S, H, T1, ns, H, ns, kda)
    second = {f"{n}2": spec for n, spec in _gdn_inputs(S, H, T2, ns, H, ns, kda).items() if n != "state"}
    state_rows = S * ns  # one snapshot slot, in the result's rows

    def build(c, x):
        out1 = c.gated_delta_net(x.q, x.k, x.v, x.g, x.beta, x.state, K)
        f = out1.nb[0]
        s0 = c.view_4d(out1, S, S, H, ns, S * f, S * S * f, S * S * H * f,
                       (T1 * ns + back * state_rows) * out1.nb[1])
        return c.gated_delta_net(x.q2, x.k2, x.v2, x.g2, x.beta2, s0, 1)

    def oracle(x):
        out1 = oracles.gated_delta_net(x.q, x.k, x.v, x.g, x.beta, x.state, K, written_only=True)
        s0 = out1[T1 * ns + back * state_rows:][:state_rows].reshape(ns, H, S, S)
        return oracles.gated_delta_net(x.q2, x.k2, x.v2, x.g2, x.beta2, s0, 1)
    op_case(f"gated_delta_net/f32/rollback_S{S}_H{H}_T{T1}+{T2}_s{ns}_K{K}_back{back}" + "_kda" * kda,
            {**first, **second}, build, oracle)


_gdn_rollback(8, 2, 6, 3, 1, 4, 2)
_gdn_rollback(5, 3, 4, 2, 2, 4, 3)
_gdn_rollback(7, 2, 5, 1, 3, 8, 0)
_gdn_rollback(4, 2, 3, 4, 2, 3, 1, kda=True)
_gdn_rollback(16, 2, 5, 2, 2, 4, 1)
_gdn_rollback(32, 1, 4, 3, 1, 6, 3, kda=True)
