"""NumPy model of the delta-net conv-state update, from the seed's rules (no ggml involved).

The cache of a layer is an array (mem_size*K, n_embd_r) in the cache dtype; row
`slot*mem_size + cell`, column `channel*(d_conv-1) + j` (ggml order: the window is innermost).
For each ubatch and layer:

- the state of sequence s is row `s_copy[s]`, seen as (channels, d_conv-1);
- `conv_input[s] = concat(state, qkv[s].T)` along time: (channels, d_conv-1+n);
- n_rs_seq == 0: window `conv_input[s][:, n:n+d_conv-1]` goes to slot 0 of cell kv_head+s;
- seed (host_index, device_index): Kw = min(n+1, K); window w (ascending time, starting at
  column n-(Kw-1)+w) goes to slot Kw-1-w; slots >= Kw keep their bytes;
- copies (before the seed): for t in 1..K the window starting at max(0, n-K+t) goes to slot K-t.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import DTypeLike


class ConvStateOracle:
    """The conv caches of every layer, updated ubatch by ubatch as the module docstring's rules say.

    Args:
        n_layer: how many layers (one cache each).
        d_conv: the convolution's width; a window holds d_conv - 1 tokens.
        channels: the conv channels.
        mem_size: the cells of the recurrent memory.
        n_rs_seq: rollback slots beyond the current one: K = n_rs_seq + 1 slots per cell (0: one slot, no
            rollback).
        dtype: the caches' dtype (what they store windows in).
        strategy: "host_index" or "device_index" (the seed's write), or "copies" (K windows, before the
            seed); any other name writes as the seed does.
        initial: each layer's cache to start from (copied, in `dtype`); None: zeros.

    Attributes:
        caches: each layer's cache, an array (mem_size * K, (d_conv - 1) * channels): row
            `slot * mem_size + cell`.
        K: the slots per cell, n_rs_seq + 1.
    """

    def __init__(
        self,
        n_layer: int,
        d_conv: int,
        channels: int,
        mem_size: int,
        n_rs_seq: int,
        dtype: DTypeLike = np.float32,
        strategy: str = "host_index",
        initial: list[np.ndarray] | None = None,
    ) -> None:
        self.d_conv, self.channels, self.mem_size = d_conv, channels, mem_size
        self.n_rs_seq, self.K, self.strategy = n_rs_seq, n_rs_seq + 1, strategy
        self.dtype = np.dtype(dtype)
        shape = (mem_size * self.K, (d_conv - 1) * channels)
        self.caches = [
            np.array(initial[il], dtype=self.dtype) if initial is not None else np.zeros(shape, self.dtype)
            for il in range(n_layer)
        ]

    def slots_written(self, n: int) -> list[tuple[int, int]]:
        """The windows a ubatch of n tokens writes, and where.

        Args:
            n: the ubatch's tokens per sequence.

        Returns:
            (window start column in conv_input, slot) pairs, in the order they are written.
        """
        if self.n_rs_seq == 0:
            return [(n, 0)]
        if self.strategy == "copies":
            return [(max(0, n - self.K + t), self.K - t) for t in range(1, self.K + 1)]
        kw = min(n + 1, self.K)
        return [(n - (kw - 1) + w, kw - 1 - w) for w in range(kw)]

    def step(self, qkv: list[np.ndarray], s_copy: list[int], kv_head: int) -> list[np.ndarray]:
        """One ubatch: each layer's conv input, and its windows written into the caches (in place).

        Args:
            qkv: per layer, the new tokens' values, (n_seqs, n, channels).
            s_copy: per sequence, the cache row its state is read from.
            kv_head: the first cell written: sequence s writes cell kv_head + s.

        Returns:
            Per layer, conv_input (n_seqs, channels, d_conv - 1 + n) in float32: the state read, then
            the new tokens.
        """
        d1 = self.d_conv - 1
        outputs = []
        for il, cache in enumerate(self.caches):
            x = np.asarray(qkv[il], dtype=np.float32)  # (n_seqs, n, channels)
            n_seqs, n, _ = x.shape
            states = cache[np.asarray(s_copy)].astype(np.float32).reshape(n_seqs, self.channels, d1)
            conv_input = np.concatenate([states, x.transpose(0, 2, 1)], axis=2)
            for start, slot in self.slots_written(n):
                window = conv_input[:, :, start : start + d1].reshape(n_seqs, -1)
                rows = slot * self.mem_size + kv_head + np.arange(n_seqs)
                cache[rows] = window.astype(self.dtype)
            outputs.append(conv_input)
        return outputs
