"""NumPy reference of the gated delta-net layer (pyggml/models/delta_net.py), token by token, from the
definitions: no ggml, no chunking, float64 throughout, the caches stored in their dtype.

Per sequence and token t (x_t [n_embd]; weights in NumPy shapes, `W @ v` is ggml's mul_mat):

    h      = x_t / sqrt(mean(x_t^2) + eps) * attn_norm
    qkv    = attn_qkv @ h;  z = attn_gate @ h;  ba = ssm_ba @ h
    window = [conv state | qkv]  (channels, d_conv);  conv = silu(sum(window * ssm_conv1d, -1))
    conv state = window[:, 1:]
    layout "grouped", per key head g: q_g, k_g, v_g = conv[g*G : g*G+S], conv[g*G+S : g*G+2S], the next
    r*S (r heads); layouts "qwen3next" and "qwen35": q, k, v = conv[:nk*S], conv[nk*S:2*nk*S], the rest
    q, k   = each head / sqrt(sum^2 + eps), value head h reading key head h // r ("qwen35": h % nk)
    beta   = sigmoid(b), g = softplus(a + ssm_dt) * ssm_a   (ba per key head: [b (r) | a (r)];
             "qwen35": b = ssm_beta @ h, a = ssm_alpha @ h)
    per value head, memory M [S(key i), S(value j)]:
        M = M * exp(g);  M = M + outer(k, beta * (v - M^T k));  o = M^T q / sqrt(S)
    y_t    = x_t + ssm_out @ (o / sqrt(mean(o^2) + eps) * ssm_norm * silu(z)),  per value head

The caches have rows slot*mem_size + cell. A ubatch of n tokens writes, for cell kv_head+s: conv
slot j < min(n+1, K) <- the window after n-j tokens (slot n: the window it started from), and
recurrent slot j < min(n, K) <- M after n-j tokens (stored transposed, as ggml: [h, j, i]).
Every sequence reads its states before any is written (ggml gathers them first).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import DTypeLike

if TYPE_CHECKING:
    from pyggml.models.delta_net import DeltaNetConfig


def _rms(x, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)


def _silu(x):
    return x / (1 + np.exp(-x))


def _l2(x, eps):
    return x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True) + eps)


class DeltaNetReference:
    """The layers and their caches, computed ubatch by ubatch as the module docstring's rules say.

    Args:
        config: the layer's configuration (pyggml.models.delta_net.DeltaNetConfig).
        weights: per layer, each weight by its name (attn_norm, attn_qkv, attn_gate, ssm_conv1d, ssm_ba or
            ssm_beta and ssm_alpha, ssm_dt, ssm_a, ssm_norm, ssm_out), in NumPy shapes (held as float64).
        K: the slots per cell (n_rs_seq + 1: the current state and n_rs_seq to roll back to).
        mem_size: the cells of the recurrent memory.
        cache_dtype: the dtype the caches store their states in.

    Attributes:
        conv: each layer's conv cache, an array (mem_size * K, n_embd_r): row `slot * mem_size + cell`.
        ssm: each layer's recurrent cache, an array (mem_size * K, n_embd_s), rows as in `conv`.
    """

    def __init__(
        self,
        config: DeltaNetConfig,
        weights: list[dict[str, np.ndarray]],
        K: int,
        mem_size: int,
        cache_dtype: DTypeLike = np.float32,
    ) -> None:
        self.c, self.K, self.mem_size = config, K, mem_size
        self.w = [{k: np.asarray(v, dtype=np.float64) for k, v in layer.items()} for layer in weights]
        self.dtype = np.dtype(cache_dtype)
        rows = mem_size * K
        self.conv = [np.zeros((rows, config.n_embd_r), self.dtype) for _ in range(config.n_layer)]
        self.ssm = [np.zeros((rows, config.n_embd_s), self.dtype) for _ in range(config.n_layer)]

    def step(self, x: np.ndarray, s_copy: list[int], kv_head: int) -> np.ndarray:
        """One ubatch through every layer, its states written into the caches (in place).

        Args:
            x: the ubatch, (n_seqs, n_seq_tokens, n_embd).
            s_copy: per sequence, the cache row its states are read from.
            kv_head: the first cell written: sequence s writes cell kv_head + s.

        Returns:
            The last layer's output, (n_seqs, n_seq_tokens, n_embd), float64.
        """
        cur = np.asarray(x, dtype=np.float64)
        for il in range(self.c.n_layer):
            cur = self._layer(il, cur, s_copy, kv_head)
        return cur

    def states(self, il: int, row: int) -> tuple[np.ndarray, np.ndarray]:
        """One cache row of a layer: its conv and recurrent states, as float32.

        Args:
            il: the layer.
            row: the cache row (`slot * mem_size + cell`).

        Returns:
            (conv state (conv_channels, d_conv - 1), recurrent state (n_v_heads, head_dim, head_dim),
            stored transposed as ggml stores it: [h, j, i]).
        """
        c = self.c
        return (
            self.conv[il][row].astype(np.float32).reshape(c.conv_channels, c.d_conv - 1),
            self.ssm[il][row].astype(np.float32).reshape(c.n_v_heads, c.head_dim, c.head_dim),
        )

    def _layer(self, il, x, s_copy, kv_head):
        c, w = self.c, self.w[il]
        S, nk, nv, r, G, d1 = c.head_dim, c.n_k_heads, c.n_v_heads, c.ratio, c.group, c.d_conv - 1
        ns, nt, _ = x.shape
        conv0 = [self.conv[il][row].astype(np.float64).reshape(c.conv_channels, d1) for row in s_copy]
        ssm0 = [np.swapaxes(self.ssm[il][row].astype(np.float64).reshape(nv, S, S), 1, 2) for row in s_copy]
        out = np.empty_like(x)
        for s in range(ns):
            conv_state, M = conv0[s], ssm0[s]
            windows, memories = [conv_state], []
            for t in range(nt):
                h = _rms(x[s, t], c.eps) * w["attn_norm"]
                qkv, z = w["attn_qkv"] @ h, w["attn_gate"] @ h
                window = np.concatenate([conv_state, qkv[:, None]], axis=1)
                conv = _silu(np.sum(window * w["ssm_conv1d"], axis=1))
                conv_state = window[:, 1:]
                if c.layout == "grouped":  # [q_g | k_g | v_g] per key head g
                    grouped = conv.reshape(nk, G)
                    q, k, v = grouped[:, :S], grouped[:, S : 2 * S], grouped[:, 2 * S :].reshape(nv, S)
                else:  # [q | k | v]
                    q, k = conv[: nk * S].reshape(nk, S), conv[nk * S : 2 * nk * S].reshape(nk, S)
                    v = conv[2 * nk * S :].reshape(nv, S)
                q, k = _l2(q, c.eps), _l2(k, c.eps)
                if c.layout == "qwen35":  # value head h reads key head h % nk
                    q, k = np.tile(q, (r, 1)), np.tile(k, (r, 1))
                else:  # value head h reads key head h // r
                    q, k = np.repeat(q, r, axis=0), np.repeat(k, r, axis=0)
                if c.layout == "qwen35":
                    b, a = w["ssm_beta"] @ h, w["ssm_alpha"] @ h
                else:  # [beta_g | alpha_g] per key head g
                    ba = (w["ssm_ba"] @ h).reshape(nk, 2 * r)
                    b, a = ba[:, :r].ravel(), ba[:, r:].ravel()
                beta = 1 / (1 + np.exp(-b))
                gate = np.logaddexp(0, a + w["ssm_dt"]) * w["ssm_a"]
                M = M * np.exp(gate)[:, None, None]
                delta = beta[:, None] * (v - np.einsum("hij,hi->hj", M, k))
                M = M + k[:, :, None] * delta[:, None, :]
                o = np.einsum("hij,hi->hj", M, q) / np.sqrt(S)
                normed = _rms(o, c.eps) * w["ssm_norm"] * _silu(z.reshape(nv, S))
                out[s, t] = x[s, t] + w["ssm_out"] @ normed.ravel()
                windows.append(conv_state)
                memories.append(M)
            cell = kv_head + s
            for j in range(min(nt + 1, self.K)):
                self.conv[il][j * self.mem_size + cell] = windows[nt - j].ravel().astype(self.dtype)
            for j in range(min(nt, self.K)):
                self.ssm[il][j * self.mem_size + cell] = (
                    np.swapaxes(memories[nt - 1 - j], 1, 2).ravel().astype(self.dtype)
                )
        return out
