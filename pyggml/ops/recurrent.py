"""Recurrent and state-space ops: Mamba's conv and scan, RWKV-6/7, gated linear attention, the
triangular solve and the gated delta net. Each op's result packs the per-token outputs followed by
the final recurrent state(s), as one F32 tensor."""

from __future__ import annotations

from types import SimpleNamespace

from pyggml.ops._common import BinaryWrapper
from pyggml.ops.declared import Check, all_of, declared
from pyggml.ops.elementwise import _finite
from pyggml.tensor import Tensor

ssm_conv: BinaryWrapper = declared(
    "ssm_conv",
    """ggml_ssm_conv: Mamba's causal depthwise conv1d over each sequence's window:
out[i, t, s] = sum_k sx[t + k, i, s] * c[k, i], in ggml's ne order.

sx: F32 ne [d_conv - 1 + n_t, d_inner, n_s] (NumPy shape (n_s, d_inner, d_conv - 1 + n_t)): each
   channel's last d_conv - 1 inputs followed by its n_t new ones.
c: F32 ne [d_conv, d_inner], the conv weights of each channel.
Result: F32 ne [d_inner, n_t, n_s]. Precision: F32 (within NMSE 1e-7).""",
)

_INT32_MAX = 2**31 - 1


def _tensors(x: SimpleNamespace, *names: str) -> list[Tensor] | None:
    """The named tensor arguments, or None when one is not a Tensor (the call then names it): a check reads
    their shapes only when all are."""
    ts = [getattr(x, n) for n in names]
    return ts if all(isinstance(t, Tensor) for t in ts) else None


def _divides(d: int, n: int) -> bool:
    return d > 0 and n % d == 0


def _slots(op: str) -> Check:
    """A check of K, the snapshot slots: ggml stores K in an int32 op parameter; the kernels loop over K slots."""

    def check(x: SimpleNamespace) -> None:
        if not 1 <= x.K <= _INT32_MAX:
            raise ValueError(f"{op}: K (snapshot slots) must be in 1..{_INT32_MAX}, got {x.K}")

    return check


def _scan_groups(x: SimpleNamespace) -> None:
    """ssm_scan's heads share B and C by groups (head h reads group h // (n_head / n_group)); ggml.c does not
    check that the groups divide the heads, the CPU kernel asserts it on a worker thread."""
    if _tensors(x, "x", "B"):
        n_head, n_group = x.x.ptr.ne[1], x.B.ptr.ne[1]
        if not _divides(n_group, n_head):
            raise ValueError(f"ssm_scan: B's groups (ne[1] = {n_group}) must divide x's heads (ne[1] = {n_head})")


ssm_scan = declared(
    "ssm_scan",
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
    """,
    defaults={"K": 1},
    check=all_of(_slots("ssm_scan"), _scan_groups),
)


def _rwkv_shapes(op: str, *tokens: str) -> Check:
    """A check of what ggml.c leaves unchecked in the RWKV-style ops: the kernels read each input (the named
    tokens) as [S, H, n_tokens] (a 4th dim would be silently ignored), the state as one row of S*S*H per
    sequence, and split the tokens evenly over the sequences (fewer tokens than sequences divides by zero)."""

    def check(x: SimpleNamespace) -> None:
        ts = _tensors(x, *tokens, "state")
        if ts is None:
            return
        for name, t in zip(tokens, ts):
            if t.ptr.ne[3] != 1:
                raise ValueError(f"{op}: {name} must be [S, H, n_tokens] (3-d), got ne {tuple(t.ptr.ne)}")
        ne = x.state.ptr.ne
        if ne[2] != 1 or ne[3] != 1:
            raise ValueError(f"{op}: state must be [S*S*H, n_seqs] (2-d), got ne {tuple(ne)}")
        n_tokens, n_seqs = ts[0].ptr.ne[2], ne[1]
        if not _divides(n_seqs, n_tokens):
            raise ValueError(
                f"{op}: n_tokens ({n_tokens}) must be a positive multiple of n_seqs ({n_seqs}, state's ne[1])"
            )

    return check


def _time_first(x: SimpleNamespace) -> None:
    """rwkv_wkv6's tf holds S*H values: the kernel reads S*H of it."""
    if _tensors(x, "k", "tf"):
        S, H = x.k.ptr.ne[0], x.k.ptr.ne[1]
        tf = x.tf.ptr.ne
        if tf[0] * tf[1] * tf[2] * tf[3] != S * H:
            raise ValueError(f"rwkv_wkv6: tf must hold S*H = {S * H} values ([S, H]), got ne {tuple(tf)}")


_wkv6_checks = all_of(_rwkv_shapes("rwkv_wkv6", "k", "v", "r", "td"), _time_first)
_wkv7_checks = _rwkv_shapes("rwkv_wkv7", "r", "w", "k", "v", "a", "b")


rwkv_wkv6 = declared(
    "rwkv_wkv6",
    """ggml_rwkv_wkv6: RWKV-6 time mixing. Per head, with W[i, j] the state (i key, j value), per token:
        kv = outer(k, v);  out[j] = sum_i r[i] * (tf[i] * kv[i, j] + W[i, j]);  W = W * td[i] + kv

    k, v, r, td: F32 [S, H, n_tokens] (ggml ne order; NumPy shape reversed); tf: F32 [S, H] (time_first);
    state: F32 [S*S*H, n_seqs]; the tokens split evenly over the sequences (n_seqs divides n_tokens).
    Result: F32 [S*H, n_tokens + S*n_seqs]: the outputs, then the final states.
    Precision: F32 (within NMSE 1e-7).
    """,
    check=_wkv6_checks,
)


gated_linear_attn = declared(
    "gated_linear_attn",
    """ggml_gated_linear_attn: gated linear attention. Per head, with W[i, j] the state, per token:
        W = W * g[i] + outer(k, v);  out[j] = scale * sum_i q[i] * W[i, j]

    k, v, q, g: F32 [S, H, n_tokens] (ggml ne order; NumPy shape reversed); state: F32 [S*S*H, n_seqs];
    the tokens split evenly over the sequences.
    scale: multiplies the outputs, finite.
    Result: F32 [S*H, n_tokens + S*n_seqs]: the outputs, then the final states. Precision: F32.
    """,
    defaults={"scale": 1.0},
    # a non-finite scale would poison every output
    check=all_of(_finite("gated_linear_attn", "scale"), _rwkv_shapes("gated_linear_attn", "k", "v", "q", "g")),
)


rwkv_wkv7 = declared(
    "rwkv_wkv7",
    """ggml_rwkv_wkv7: RWKV-7 time mixing. Per head, with W[i, j] the state (i value, j key), per token:
        W = W * w[j] + outer(v, k) + outer(W @ a, b);  out = W @ r   (W @ a with the W before the update)

    r, w, k, v, a, b: F32 [S, H, n_tokens] (ggml ne order; NumPy shape reversed); state: F32 [S*S*H, n_seqs];
    the tokens split evenly over the sequences.
    Result: F32 [S*H, n_tokens + S*n_seqs]: the outputs, then the final states. Precision: F32.
    """,
    check=_wkv7_checks,
)


solve_tri = declared(
    "solve_tri",
    """ggml_solve_tri: the triangular solve X with A X = B, per matrix (np.linalg.solve for a triangular A).

    a: A, F32 ne [n, n, ne2, ne3] (ggml order; NumPy shape (ne3, ne2, n, n)); only its lower triangle is
       read.
    b: B, F32 ne [m, n, ne2, ne3] (NumPy shape (ne3, ne2, n, m)).
    left, lower, uni: ggml implements only left=True (A X = B), lower=True (A lower triangular) and
       uni=False (the diagonal read, not taken as ones); other values raise.
    Result: X, F32 of b's shape. Precision: F32 forward substitution (error grows with A's condition).
    """,
    defaults={"left": True, "lower": True, "uni": False},
)


def _delta_net_shapes(x: SimpleNamespace) -> None:
    """ggml.c checks v against the state only; the kernel reads S values of each q/k row, q/k heads and
    sequences by broadcasting (a q with more sequences than v divides by zero), and g/beta at v's head,
    token and sequence."""
    if not _tensors(x, "q", "k", "v", "g", "beta"):
        return
    S, H, T, N = x.v.ptr.ne
    for name in ("q", "k"):
        ne = getattr(x, name).ptr.ne
        if ne[0] != S or ne[2] != T or not _divides(ne[1], H) or not _divides(ne[3], N):
            raise ValueError(
                f"gated_delta_net: {name} must be [{S}, H_k, {T}, n_seqs_qk] with H_k dividing {H} "
                f"and n_seqs_qk dividing {N} (v is [{S}, {H}, {T}, {N}]), got ne {tuple(ne)}"
            )
    for name in ("g", "beta"):
        ne = getattr(x, name).ptr.ne
        if tuple(ne)[1:] != (H, T, N):
            raise ValueError(
                f"gated_delta_net: {name} must be [{ne[0]}, {H}, {T}, {N}] (v's heads, tokens, "
                f"sequences), got ne {tuple(ne)}"
            )


gated_delta_net = declared(
    "gated_delta_net",
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
    """,
    defaults={"K": 1},
    check=all_of(_slots("gated_delta_net"), _delta_net_shapes),
)


__all__ = [  # generated by tools/gen_methods.py
    "gated_delta_net",
    "gated_linear_attn",
    "rwkv_wkv6",
    "rwkv_wkv7",
    "solve_tri",
    "ssm_conv",
    "ssm_scan",
]
