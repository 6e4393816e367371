"""Oracles of the recurrent and state-space ops, written from their definitions (ggml.h and the CPU
reference where ggml.h is silent). NumPy order throughout: ggml's ne reversed. The packed results
(outputs, then states) are returned in ggml's layout, as the op's tensor holds them."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from pyggml.testing.engine.oracles._common import _as4, _lead


def ssm_conv(sx: np.ndarray, c: np.ndarray) -> np.ndarray:
    """ggml_ssm_conv: sx [n_s, d_inner, d_conv-1+n_t], c [d_inner, d_conv] -> [n_s, n_t, d_inner];
    out[s, t, i] = sum_k sx[s, i, t+k] * c[i, k]."""
    sx4, c4 = _as4(_f64(sx)), _as4(_f64(c))
    if sx4.shape[0] != 1 or c4.shape[:2] != (1, 1):
        raise ValueError("ssm_conv oracle: sx is 3-d and c 2-d in ggml_ssm_conv")
    sx, c = sx4[0], c4[0, 0]
    d_conv = c.shape[-1]
    n_t = sx.shape[-1] - d_conv + 1
    # a sum over the d_conv shifts of the window (a real-size model's 6144 channels: einsum over a stack of windows
    # took twice as long)
    out = sum(sx[:, :, k : k + n_t] * c[:, k : k + 1] for k in range(d_conv))  # [n_s, d_inner, n_t]
    return _lead(np.swapaxes(out, 1, 2).astype(np.float32))


def _f64(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def _written(op: str, n_tokens: int, K: int, written_only: bool) -> int:
    """The snapshot slots the op writes: min(n_tokens, K). The others hold whatever the memory held,
    which no oracle can predict: ask for the written prefix explicitly."""
    if K > n_tokens and not written_only:
        raise ValueError(
            f"{op} oracle: slots {n_tokens}..{K - 1} of K={K} are not written for {n_tokens} "
            "token(s); pass written_only=True for the written prefix"
        )
    return min(n_tokens, K)


def _softplus(x):
    return np.where(x > 20.0, x, np.log1p(np.exp(np.minimum(x, 20.0))))


def ssm_scan(
    s: np.ndarray,
    x: ArrayLike,
    dt: ArrayLike,
    A: ArrayLike,
    B: ArrayLike,
    C: ArrayLike,
    ids: np.ndarray,
    K: int = 1,
    *,
    written_only: bool = False,
) -> np.ndarray:
    """Selective scan (Mamba). NumPy shapes: s [>= n_seqs, n_head, head_dim, d_state], x [n_seqs, n_tokens,
    n_head, head_dim], dt [n_seqs, n_tokens, n_head], A [n_head, d_state] (Mamba-1) or [n_head, 1]
    (Mamba-2), B, C [n_seqs, n_tokens, n_group, d_state], ids [n_seqs].
    Sequence q starts from state s[ids[q]]; per token, head h (group g = h // (n_head / n_group)):
        d = softplus(dt[h]);  S[h] = S[h] * exp(d * A[h]) + d * outer(x[h], B[g]);  y[h] = S[h] @ C[g]
    Returns 1-d: y, then K slots of the states [n_seqs, n_head, head_dim, d_state]; slot i is the state
    after token n_tokens-1-i. With written_only, only the slots the op writes (min(n_tokens, K))."""
    x4, B4, C4 = _as4(_f64(x)), _as4(_f64(B)), _as4(_f64(C))
    ns, nt, nh, hd = x4.shape
    s4 = _as4(_f64(s))
    dt3 = _f64(dt).reshape(ns, nt, nh)
    A2 = _f64(A).reshape(nh, -1)
    ids = np.asarray(ids).reshape(ns)
    if ((ids < 0) | (ids >= s4.shape[0])).any():
        raise ValueError(f"ssm_scan oracle: ids {ids.tolist()} outside s's {s4.shape[0]} rows")
    ng = B4.shape[2]
    group = np.arange(nh) // (nh // ng)
    n_slots = _written("ssm_scan", nt, K, written_only)
    y = np.zeros((ns, nt, nh, hd))
    slots = np.zeros((n_slots, ns) + s4.shape[1:])
    for q in range(ns):
        st = s4[ids[q]].copy()  # [nh, hd, ds]
        for t in range(nt):
            d = _softplus(dt3[q, t])  # [nh]
            Bg, Cg = B4[q, t, group], C4[q, t, group]  # [nh, ds]
            st = st * np.exp(d[:, None] * A2)[:, None, :] + (d[:, None] * x4[q, t])[:, :, None] * Bg[:, None, :]
            y[q, t] = np.einsum("hrs,hs->hr", st, Cg)
            if nt - 1 - t < n_slots:
                slots[nt - 1 - t, q] = st
    return np.concatenate([y.ravel(), slots.ravel()]).astype(np.float32)


def _wkv_inputs(tokens, state, S_from):
    """[n_tokens, H, S] views of the token inputs, the state as [n_seqs, H, S, S] and the sizes."""
    T, H, S = _as4(_f64(S_from)).shape[1:]
    arrs = [_f64(t).reshape(T, H, S) for t in tokens]
    st = _as4(_f64(state))
    n_seqs = st.shape[2]
    return arrs, st.reshape(n_seqs, H, S, S), T, H, S, n_seqs


def _packed(out, st, T, H, S):
    return np.concatenate([out.reshape(T, H * S), st.reshape(-1, H * S)]).astype(np.float32)


def rwkv_wkv6(
    k: np.ndarray, v: np.ndarray, r: np.ndarray, tf: np.ndarray, td: np.ndarray, state: np.ndarray
) -> np.ndarray:
    """RWKV-6 time mixing. k, v, r, td [n_tokens, H, S], tf [H, S], state [n_seqs, S*S*H] holding per head
    W[i, j] (i the key index, j the value index); the tokens split evenly over the sequences. Per token:
        kv = outer(k, v);  out[j] = sum_i r[i] * (tf[i] * kv[i, j] + W[i, j]);  W = W * td[i] + kv
    Returns [n_tokens + S*n_seqs, S*H]: the outputs, then the final states."""
    (k, v, r, td), W, T, H, S, ns = _wkv_inputs((k, v, r, td), state, k)
    tf = _f64(tf).reshape(H, S)
    out = np.zeros((T, H, S))
    W = W.copy()
    per = T // ns
    for t in range(T):
        q = t // per
        kv = k[t][:, :, None] * v[t][:, None, :]
        out[t] = np.einsum("hi,hij->hj", r[t], tf[:, :, None] * kv + W[q])
        W[q] = W[q] * td[t][:, :, None] + kv
    return _packed(out, W, T, H, S)


def gated_linear_attn(
    k: np.ndarray, v: np.ndarray, q: np.ndarray, g: np.ndarray, state: np.ndarray, scale: float = 1.0
) -> np.ndarray:
    """Gated linear attention. k, v, q, g [n_tokens, H, S], state [n_seqs, S*S*H] holding per head W[i, j]
    (i the key index, j the value index); the tokens split evenly over the sequences. Per token:
        W = W * g[i] + outer(k, v);  out[j] = scale * sum_i q[i] * W[i, j]
    Returns [n_tokens + S*n_seqs, S*H]: the outputs, then the final states."""
    (k, v, q, g), W, T, H, S, ns = _wkv_inputs((k, v, q, g), state, k)
    out = np.zeros((T, H, S))
    W = W.copy()
    per = T // ns
    for t in range(T):
        s = t // per
        W[s] = W[s] * g[t][:, :, None] + k[t][:, :, None] * v[t][:, None, :]
        out[t] = scale * np.einsum("hi,hij->hj", q[t], W[s])
    return _packed(out, W, T, H, S)


def rwkv_wkv7(
    r: np.ndarray, w: np.ndarray, k: np.ndarray, v: np.ndarray, a: np.ndarray, b: np.ndarray, state: np.ndarray
) -> np.ndarray:
    """RWKV-7 time mixing. r, w, k, v, a, b [n_tokens, H, S], state [n_seqs, S*S*H] holding per head W[i, j]
    (i the value index, j the key index); the tokens split evenly over the sequences. Per token:
        W = W * w[j] + outer(v, k) + outer(W @ a, b);  out = W @ r   (W @ a with the W before the update)
    Returns [n_tokens + S*n_seqs, S*H]: the outputs, then the final states."""
    (r, w, k, v, a, b), W, T, H, S, ns = _wkv_inputs((r, w, k, v, a, b), state, k)
    out = np.zeros((T, H, S))
    W = W.copy()
    per = T // ns
    for t in range(T):
        s = t // per
        sa = np.einsum("hij,hj->hi", W[s], a[t])
        W[s] = W[s] * w[t][:, None, :] + v[t][:, :, None] * k[t][:, None, :] + sa[:, :, None] * b[t][:, None, :]
        out[t] = np.einsum("hij,hj->hi", W[s], r[t])
    return _packed(out, W, T, H, S)


def solve_tri(a: np.ndarray, b: np.ndarray, left: bool = True, lower: bool = True, uni: bool = False) -> np.ndarray:
    """X with A X = B (left) or X A = B; A [..., n, n] from a's lower (or upper) triangle, its diagonal
    taken as ones when uni; B [..., n, m] (left) or [..., m, n]."""
    a, b = _f64(a), _f64(b)
    A = np.tril(a) if lower else np.triu(a)
    if uni:
        n = A.shape[-1]
        A = A.copy()
        A[..., np.arange(n), np.arange(n)] = 1.0
    if left:
        x = np.linalg.solve(A, b)
    else:  # X A = B  <=>  A^T X^T = B^T
        x = np.swapaxes(np.linalg.solve(np.swapaxes(A, -1, -2), np.swapaxes(b, -1, -2)), -1, -2)
    return _lead(x.astype(np.float32))


def gated_delta_net(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    g: ArrayLike,
    beta: ArrayLike,
    state: ArrayLike,
    K: int = 1,
    *,
    written_only: bool = False,
) -> np.ndarray:
    """The gated delta rule (Qwen3-Next / Kimi linear attention), token by token, as ggml_gated_delta_net.

    NumPy shapes (ggml's ne reversed): q, k [n_seqs_qk, n_tokens, H_k, S]; v [n_seqs, n_tokens, H, S];
    g [n_seqs, n_tokens, H, 1] (one gate per head) or [..., H, S] (one per key row, KDA); beta
    [n_seqs, n_tokens, H, 1]; state [n_seqs, H, S, S] with state[s, h, j, i] = M[i, j], the memory of
    head h mapping key index i to value index j (ggml stores it transposed). Head h reads q/k head
    h % H_k; sequence s reads q/k sequence s // (n_seqs / n_seqs_qk). q and k are used as given (no
    normalisation here: the layer l2-normalises them before the op).

    Per sequence and head, for each token t, with M the state carried over from the previous token:
        M = M * exp(g)                       (KDA: row i of M times exp(g[i]))
        delta = beta * (v - M^T k)           (the value the memory misses for this key)
        M = M + outer(k, delta)
        o = M^T q / sqrt(S)
    Returns ggml's packed result, NumPy shape [n_tokens*n_seqs + K*S*n_seqs, S*H]: the outputs o
    [n_seqs, n_tokens, H, S], then K snapshot slots, each a state [n_seqs, H, S, S] in the input's
    (transposed) layout; slot i is the state after token n_tokens-1-i, so slot 0 is the final state
    (the next call's `state`), and slot i the state to roll back to when the last i tokens are dropped.
    When n_tokens < K the op writes only slots 0..n_tokens-1: pass written_only=True for that prefix.

    Computed a chunk of tokens at a time (`_gdn_chunk`), in float64: the recurrence's values, not its order."""
    q4, k4, v4 = _as4(_f64(q)), _as4(_f64(k)), _as4(_f64(v))
    ns, nt, H, S = v4.shape
    g4 = _f64(g).reshape(ns, nt, H, -1)
    b4 = _f64(beta).reshape(ns, nt, H)
    st = _f64(state).reshape(ns, H, S, S)
    n_slots = _written("gated_delta_net", nt, K, written_only)
    hq, hk = np.arange(H) % q4.shape[2], np.arange(H) % k4.shape[2]
    out = np.zeros((ns, nt, H, S))
    slots = np.zeros((n_slots, ns, H, S, S))
    # a chunk ends at every token whose state is a snapshot slot (slot i: the state after nt - i tokens); with a NaN
    # or inf among the inputs, a token at a time: the chunk's sums regroup the recurrence's, and inf - inf is NaN
    # where the recurrence keeps an inf (the verdict wants both in ggml's places)
    finite = all(np.isfinite(x).all() for x in (q4, k4, v4, g4, b4, st))
    width = 1 if not finite else _GDN_CHUNK if g4.shape[-1] == 1 else _GDN_CHUNK_PER_ROW
    ends = sorted({*range(width, nt, width), *(nt - i for i in range(n_slots)), nt})
    for s in range(ns):
        qs, ks = q4[s // (ns // q4.shape[0])][:, hq], k4[s // (ns // k4.shape[0])][:, hk]  # [nt, H, S]
        M = np.swapaxes(st[s], -1, -2).copy()  # [H, i, j]
        t0 = 0
        for t1 in ends:
            sl = slice(t0, t1)
            M, out[s, sl] = _gdn_chunk(M, qs[sl], ks[sl], v4[s, sl], g4[s, sl], b4[s, sl], S)
            if nt - t1 < n_slots:
                slots[nt - t1, s] = np.swapaxes(M, -1, -2)
            t0 = t1
    packed = np.concatenate([out.ravel(), slots.ravel()]).reshape(-1, S * H)
    return packed.astype(np.float32)


# Tokens per chunk of the gated delta rule: a per-row gate holds a [H, C, C, S] table of decays
_GDN_CHUNK, _GDN_CHUNK_PER_ROW = 64, 16


def _gdn_chunk(M, q, k, v, g, beta, S):
    """The gated delta rule over one chunk of C tokens at once (the chunked form of Yang et al., "Gated Delta
    Networks", 2024), the same values as the token-by-token recurrence in float64. M [H, i, j] the memory before
    the chunk, updated in place; q, k, v [C, H, S]; g [C, H, 1 or S]; beta [C, H]. Returns (M, o [C, H, S]).

    With G_t the gates summed over the chunk's tokens up to t and E(t, i) = exp(G_t - G_i) (the decay from token
    i to t, per key row for a per-row gate), the recurrence's misses delta_t solve the unit lower-triangular
        delta_t + beta_t sum_{i<t} (k_t . E(t, i) k_i) delta_i = beta_t (v_t - M^T (exp(G_t) k_t))
    and o_t = (M^T (exp(G_t) q_t) + sum_{i<=t} (q_t . E(t, i) k_i) delta_i) / sqrt(S),
    M' = exp(G_C) M + sum_i (E(C, i) k_i) outer delta_i. One pass of a few products over M per chunk, where the
    recurrence made several per token (a real-size model's states are 2 MB a sequence: the token-by-token
    oracle was 0.6 s of a check)."""
    q, k, v = (np.ascontiguousarray(np.swapaxes(x, 0, 1)) for x in (q, k, v))  # [H, C, S], for BLAS
    G = np.cumsum(np.swapaxes(g, 0, 1), axis=1)  # [H, C, 1 or S]
    b = beta.T[:, :, None]  # [H, C, 1]
    C = q.shape[1]
    if C == 1:  # one token: the recurrence itself, in its order (a generation step's, and any with a NaN or inf)
        M *= np.exp(G[:, 0])[:, :, None]
        delta = b[:, 0] * (v[:, 0] - (k @ M)[:, 0])
        M += k[:, 0, :, None] * delta[:, None, :]
        return M, np.swapaxes(q @ M, 0, 1) / np.sqrt(S)
    seen = np.tril(np.ones((C, C), dtype=bool))  # token t sees i <= t
    if G.shape[-1] == 1:
        E = np.exp(np.where(seen, G[:, :, None, 0] - G[:, None, :, 0], -np.inf))  # [H, t, i]
        kk, qk = (k @ np.swapaxes(k, 1, 2)) * E, (q @ np.swapaxes(k, 1, 2)) * E
    else:
        E = np.exp(np.where(seen[:, :, None], G[:, :, None, :] - G[:, None, :, :], -np.inf))  # [H, t, i, S]
        kk, qk = np.einsum("htc,hic,htic->hti", k, k, E), np.einsum("htc,hic,htic->hti", q, k, E)
    decay = np.exp(G)
    # a token's terms are those of the tokens up to it only: tril, not the zeros of E, drops the others (a NaN or
    # inf of a later token times 0 is NaN, where the recurrence leaves the earlier tokens finite)
    A, qk = b * np.tril(kk, -1), np.tril(qk)
    delta, o = b * (v - (k * decay) @ M), (q * decay) @ M
    # forward substitution, row by row as the recurrence depends: LU's pivoting would reorder the rows of a
    # system whose entries grow past 1 (keys of norm > 1) and lose the values an exploding recurrence keeps
    for t in range(C):
        if t:
            delta[:, t] -= (A[:, t : t + 1, :t] @ delta[:, :t])[:, 0]
        o[:, t] += (qk[:, t : t + 1, : t + 1] @ delta[:, : t + 1])[:, 0]
    o /= np.sqrt(S)
    M *= decay[:, -1][:, :, None]  # in place: 2 MB a sequence for a real-size model
    M += np.swapaxes(k * np.exp(G[:, -1:] - G), 1, 2) @ delta
    return M, np.swapaxes(o, 0, 1)
