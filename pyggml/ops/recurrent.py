"""Recurrent and state-space ops: Mamba's conv and scan, RWKV-6/7, gated linear attention, the
triangular solve and the gated delta net. Each op's result packs the per-token outputs followed by
the final recurrent state(s), as one F32 tensor."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from pyggml._args import integer
from pyggml.ops._common import (
    _ARG_ERRORS,
    BinaryWrapper,
    _bad_arguments,
    _guarded,
    _make_binary,
    _result,
    _scalar,
)
from pyggml.tensor import Tensor

if TYPE_CHECKING:
    from pyggml.context import Context

ssm_conv: BinaryWrapper = _make_binary(
    "ssm_conv",
    ("sx", "c"),
    doc="""ggml_ssm_conv: Mamba's causal depthwise conv1d over each sequence's window:
out[i, t, s] = sum_k a[t + k, i, s] * b[k, i], in ggml's ne order.

a: sx, F32 ne [d_conv - 1 + n_t, d_inner, n_s] (NumPy shape (n_s, d_inner, d_conv - 1 + n_t)): each
   channel's last d_conv - 1 inputs followed by its n_t new ones.
b: c, F32 ne [d_conv, d_inner], the conv weights of each channel.
Result: F32 ne [d_inner, n_t, n_s]. Precision: F32 (within NMSE 1e-7).""",
)

_INT32_MAX = 2**31 - 1


def _tensors(op: str, ctx, **args) -> None:
    """Every tensor argument a Tensor (checked before any of them is read)."""
    for name, value in args.items():
        if not isinstance(value, Tensor):
            raise _bad_arguments(op, TypeError(name), ctx, **args)


def _call(op: str, ctx, tensors: dict, *scalars) -> Tensor:
    try:
        r = _guarded(op)(ctx.ptr, *(t.ptr for t in tensors.values()), *scalars)
    except _ARG_ERRORS as e:
        raise _bad_arguments(op, e, ctx, **tensors) from None
    return _result(ctx, r, op, *tensors.values())


def _divides(d: int, n: int) -> bool:
    return d > 0 and n % d == 0


def _slots(op: str, K) -> int:
    K = integer(f"{op}: K", K)
    # ggml stores K in an int32 op parameter; the kernels loop over K slots
    if not 1 <= K <= _INT32_MAX:
        raise ValueError(f"{op}: K (snapshot slots) must be in 1..{_INT32_MAX}, got {K}")
    return K


def ssm_scan(
    ctx: Context, s: Tensor, x: Tensor, dt: Tensor, A: Tensor, B: Tensor, C: Tensor, ids: Tensor, K: int = 1
) -> Tensor:
    """ggml_ssm_scan: Mamba's selective scan (Mamba-1 when A is [d_state, n_head], Mamba-2 when A is
    [1, n_head]). Per sequence, token and head h (group g = h // (n_head / n_group)):
        d = softplus(dt[h]);  S[h] = S[h] * exp(d * A[h]) + d * outer(x[h], B[g]);  y[h] = S[h] @ C[g]

    Shapes in ggml's ne order (NumPy shapes reversed), all F32:
    s: [d_state, head_dim, n_head, >= n_seqs], the states to start from.
    x: [head_dim, n_head, n_tokens, n_seqs]. dt: [n_head, n_tokens, n_seqs].
    A: [d_state, n_head] or [1, n_head]. B, C: [d_state, n_group, n_tokens, n_seqs] (n_group divides n_head).
    ids: I32 [n_seqs], the row of s each sequence starts from.
    K: how many state snapshots to keep, >= 1.
    Result (1-d F32): y [head_dim, n_head, n_tokens, n_seqs], then K state slots [d_state, head_dim,
    n_head, n_seqs], slot i the state i tokens before the last; slots >= n_tokens are not written.
    Precision: F32 on every backend (within NMSE 1e-7 of a float64 scan).
    """
    _tensors("ssm_scan", ctx, s=s, x=x, dt=dt, A=A, B=B, C=C, ids=ids)
    K = _slots("ssm_scan", K)
    out = _call("ssm_scan", ctx, {"s": s, "x": x, "dt": dt, "A": A, "B": B, "C": C, "ids": ids}, K)
    # heads share B and C by groups (head h reads group h // (n_head / n_group)); ggml.c does not
    # check that the groups divide the heads, the CPU kernel asserts it on a worker thread
    n_head, n_group = x.ptr.ne[1], B.ptr.ne[1]
    if not _divides(n_group, n_head):
        raise ValueError(f"ssm_scan: B's groups (ne[1] = {n_group}) must divide x's heads (ne[1] = {n_head})")
    return out


def _rwkv_shapes(op: str, tokens: dict, state: Tensor) -> None:
    """What ggml.c leaves unchecked in the RWKV-style ops: the kernels read each input as [S, H, n_tokens]
    (a 4th dim would be silently ignored), the state as one row of S*S*H per sequence, and split the
    tokens evenly over the sequences (fewer tokens than sequences divides by zero)."""
    for name, t in tokens.items():
        if t.ptr.ne[3] != 1:
            raise ValueError(f"{op}: {name} must be [S, H, n_tokens] (3-d), got ne {tuple(t.ptr.ne)}")
    ne = state.ptr.ne
    if ne[2] != 1 or ne[3] != 1:
        raise ValueError(f"{op}: state must be [S*S*H, n_seqs] (2-d), got ne {tuple(ne)}")
    n_tokens, n_seqs = next(iter(tokens.values())).ptr.ne[2], ne[1]
    if not _divides(n_seqs, n_tokens):
        raise ValueError(f"{op}: n_tokens ({n_tokens}) must be a positive multiple of n_seqs ({n_seqs}, state's ne[1])")


def rwkv_wkv6(ctx: Context, k: Tensor, v: Tensor, r: Tensor, tf: Tensor, td: Tensor, state: Tensor) -> Tensor:
    """ggml_rwkv_wkv6: RWKV-6 time mixing. Per head, with W[i, j] the state (i key, j value), per token:
        kv = outer(k, v);  out[j] = sum_i r[i] * (tf[i] * kv[i, j] + W[i, j]);  W = W * td[i] + kv

    k, v, r, td: F32 [S, H, n_tokens] (ggml ne order; NumPy shape reversed); tf: F32 [S, H] (time_first);
    state: F32 [S*S*H, n_seqs]; the tokens split evenly over the sequences (n_seqs divides n_tokens).
    Result: F32 [S*H, n_tokens + S*n_seqs]: the outputs, then the final states.
    Precision: F32 (within NMSE 1e-7).
    """
    _tensors("rwkv_wkv6", ctx, k=k, v=v, r=r, tf=tf, td=td, state=state)
    out = _call("rwkv_wkv6", ctx, {"k": k, "v": v, "r": r, "tf": tf, "td": td, "state": state})
    _rwkv_shapes("rwkv_wkv6", {"k": k, "v": v, "r": r, "td": td}, state)
    S, H = k.ptr.ne[0], k.ptr.ne[1]
    if tf.ptr.ne[0] * tf.ptr.ne[1] * tf.ptr.ne[2] * tf.ptr.ne[3] != S * H:  # the kernel reads S*H of it
        raise ValueError(f"rwkv_wkv6: tf must hold S*H = {S * H} values ([S, H]), got ne {tuple(tf.ptr.ne)}")
    return out


def gated_linear_attn(
    ctx: Context, k: Tensor, v: Tensor, q: Tensor, g: Tensor, state: Tensor, scale: float = 1.0
) -> Tensor:
    """ggml_gated_linear_attn: gated linear attention. Per head, with W[i, j] the state, per token:
        W = W * g[i] + outer(k, v);  out[j] = scale * sum_i q[i] * W[i, j]

    k, v, q, g: F32 [S, H, n_tokens] (ggml ne order; NumPy shape reversed); state: F32 [S*S*H, n_seqs];
    the tokens split evenly over the sequences.
    scale: multiplies the outputs, finite.
    Result: F32 [S*H, n_tokens + S*n_seqs]: the outputs, then the final states. Precision: F32.
    """
    _tensors("gated_linear_attn", ctx, k=k, v=v, q=q, g=g, state=state)
    scale = _scalar("gated_linear_attn", "scale", scale)
    if not math.isfinite(scale):  # would poison every output
        raise ValueError(f"gated_linear_attn: scale must be finite, got {scale}")
    out = _call("gated_linear_attn", ctx, {"k": k, "v": v, "q": q, "g": g, "state": state}, scale)
    _rwkv_shapes("gated_linear_attn", {"k": k, "v": v, "q": q, "g": g}, state)
    return out


def rwkv_wkv7(ctx: Context, r: Tensor, w: Tensor, k: Tensor, v: Tensor, a: Tensor, b: Tensor, state: Tensor) -> Tensor:
    """ggml_rwkv_wkv7: RWKV-7 time mixing. Per head, with W[i, j] the state (i value, j key), per token:
        W = W * w[j] + outer(v, k) + outer(W @ a, b);  out = W @ r   (W @ a with the W before the update)

    r, w, k, v, a, b: F32 [S, H, n_tokens] (ggml ne order; NumPy shape reversed); state: F32 [S*S*H, n_seqs];
    the tokens split evenly over the sequences.
    Result: F32 [S*H, n_tokens + S*n_seqs]: the outputs, then the final states. Precision: F32.
    """
    _tensors("rwkv_wkv7", ctx, r=r, w=w, k=k, v=v, a=a, b=b, state=state)
    out = _call("rwkv_wkv7", ctx, {"r": r, "w": w, "k": k, "v": v, "a": a, "b": b, "state": state})
    _rwkv_shapes("rwkv_wkv7", {"r": r, "w": w, "k": k, "v": v, "a": a, "b": b}, state)
    return out


def _flag(op: str, name: str, value) -> bool:
    if not isinstance(value, (bool, int)) or value not in (0, 1):
        raise TypeError(f"solve_tri: {name} must be a bool, got {type(value).__name__} {value!r}")
    return bool(value)


def solve_tri(ctx: Context, a: Tensor, b: Tensor, left: bool = True, lower: bool = True, uni: bool = False) -> Tensor:
    """ggml_solve_tri: the triangular solve X with A X = B, per matrix (np.linalg.solve for a triangular A).

    a: A, F32 ne [n, n, ne2, ne3] (ggml order; NumPy shape (ne3, ne2, n, n)); only its lower triangle is
       read.
    b: B, F32 ne [m, n, ne2, ne3] (NumPy shape (ne3, ne2, n, m)).
    left, lower, uni: ggml implements only left=True (A X = B), lower=True (A lower triangular) and
       uni=False (the diagonal read, not taken as ones); other values raise.
    Result: X, F32 of b's shape. Precision: F32 forward substitution (error grows with A's condition).
    """
    _tensors("solve_tri", ctx, a=a, b=b)
    flags = [_flag("solve_tri", n, v) for n, v in (("left", left), ("lower", lower), ("uni", uni))]
    return _call("solve_tri", ctx, {"a": a, "b": b}, *flags)


def gated_delta_net(
    ctx: Context, q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, state: Tensor, K: int = 1
) -> Tensor:
    """ggml_gated_delta_net: the gated delta rule (Qwen3-Next, Kimi linear attention), token by token.
    Per sequence and head, with M the state (`M[i][j]`: key index i to value index j):
        M = M * exp(g);  M = M + outer(k, beta * (v - M^T k));  o = M^T q / sqrt(S)

    Shapes in ggml's ne order (NumPy shapes reversed):
    q, k: [S, H_k, n_tokens, n_seqs_qk] (H_k divides H: head h reads q/k head h % H_k; n_seqs_qk
          divides n_seqs); used as given (l2-normalise them first).
    v: [S, H, n_tokens, n_seqs]. g: [1 or S, H, n_tokens, n_seqs] (one gate per head, or per key row:
       KDA). beta: [1, H, n_tokens, n_seqs].
    state: [S, S, H, n_seqs], the state before the first token, stored transposed (element (i, j) at
           ne0 = i is `M[i][j]`).
    K: how many state snapshots to keep, >= 1.
    Result: F32 [S*H, n_tokens*n_seqs + K*S*n_seqs]: the outputs [S, H, n_tokens, n_seqs], then K
    snapshots of the state, slot i the state i tokens before the last (slot 0 the final state); slots
    >= n_tokens are not written. See pyggml.testing.engine.oracles.gated_delta_net for the recurrence.
    Precision: F32 on every backend (the suite: NMSE 1e-7 on the CPU; docs/findings.md entry 25 for a
    whole layer on Vulkan).
    """
    _tensors("gated_delta_net", ctx, q=q, k=k, v=v, g=g, beta=beta, state=state)
    K = _slots("gated_delta_net", K)
    out = _call("gated_delta_net", ctx, {"q": q, "k": k, "v": v, "g": g, "beta": beta, "state": state}, K)
    # ggml.c checks v against the state only; the kernel reads S values of each q/k row, q/k heads
    # and sequences by broadcasting (a q with more sequences than v divides by zero), and g/beta
    # at v's head, token and sequence
    S, H, T, N = v.ptr.ne
    for name, t in (("q", q), ("k", k)):
        ne = t.ptr.ne
        if ne[0] != S or ne[2] != T or not _divides(ne[1], H) or not _divides(ne[3], N):
            raise ValueError(
                f"gated_delta_net: {name} must be [{S}, H_k, {T}, n_seqs_qk] with H_k dividing {H} "
                f"and n_seqs_qk dividing {N} (v is [{S}, {H}, {T}, {N}]), got ne {tuple(ne)}"
            )
    for name, t in (("g", g), ("beta", beta)):
        if tuple(t.ptr.ne)[1:] != (H, T, N):
            raise ValueError(
                f"gated_delta_net: {name} must be [{t.ptr.ne[0]}, {H}, {T}, {N}] (v's heads, tokens, "
                f"sequences), got ne {tuple(t.ptr.ne)}"
            )
    return out


__all__ = [  # generated by tools/gen_methods.py
    "gated_delta_net",
    "gated_linear_attn",
    "rwkv_wkv6",
    "rwkv_wkv7",
    "solve_tri",
    "ssm_conv",
    "ssm_scan",
]
