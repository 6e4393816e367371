"""conv_state cases for `check`: the seed's delta-net conv-state rollback on every backend.

Each case runs a sequence of ubatches (varying token counts, shorter and longer than K-1,
several sequences, kv_head != 0, mem_size > n_seqs, two layers, a repeated shape so the
graph is reused) and compares every conv input and the whole final cache of every layer
with the NumPy model, bit for bit: the writes are copies.

On a meta backend ("meta:cpu,cpu", "meta:vulkan0,vulkan1") the case uses the seed's split
policy (conv caches by channels) and computes qkv_mixed with a projection split by output
channel, as the model does; the projection is the identity and the new tokens' values are
exact in F16, so every backend's matmul reproduces them exactly.
"""

from __future__ import annotations

import numpy as np

from pyggml.models.conv_state import (
    STRATEGIES,
    DeltaNetConv,
    QkvProjection,
    RecurrentMemory,
    Ubatch,
    split_policy,
)
from pyggml.runner import Runner
from pyggml.testing.engine.cases import Case, register
from pyggml.testing.engine.oracles.conv_state import ConvStateOracle

N_LAYER, D_CONV, CHANNELS, MEM_SIZE = 2, 4, 6, 7


class ConvStateCase(Case):
    def __init__(self, strategy: str, dtype: str, K: int, name_prefix: str = "conv_state") -> None:
        self.strategy, self.dtype, self.K = strategy, dtype, K
        self.name = f"{name_prefix}/{strategy}/{dtype}/K{K}"
        self.op, self.types, self.variant = name_prefix, frozenset({dtype}), f"{strategy}/K{K}"
        self.params = {"op": "conv_state", "strategy": strategy, "type": dtype, "K": K}
        self.nmse_bound = 0.0  # exact

    @property
    def np_dtype(self) -> type[np.float16] | type[np.float32]:
        return np.float16 if self.dtype == "f16" else np.float32

    def scenario(self) -> tuple[list[np.ndarray], list[tuple[list[np.ndarray], list[int], int]]]:
        """Initial caches and the ubatches: (qkv per layer, s_copy, kv_head)."""
        rng = self.rng()
        rows = MEM_SIZE * self.K
        initial = [rng.standard_normal((rows, (D_CONV - 1) * CHANNELS)).astype(self.np_dtype) for _ in range(N_LAYER)]
        shapes = [(1, 3, 2), (3, 3, 2), (3, 3, 2), (self.K + 2, 2, 4), (max(self.K - 2, 1), 4, 0), (1, 3, 2)]
        ubatches = []
        for n, n_seqs, kv_head in shapes:
            qkv = [
                rng.standard_normal((n_seqs, n, CHANNELS)).astype(np.float16).astype(np.float32) for _ in range(N_LAYER)
            ]
            s_copy = [int(c) for c in rng.integers(0, rows, n_seqs)]
            ubatches.append((qkv, s_copy, kv_head))
        return initial, ubatches

    def execute(self, runner: Runner) -> list[np.ndarray]:
        initial, ubatches = self.scenario()
        if runner.meta is not None:  # before the static tensors are allocated
            runner.set_policy(split_policy(D_CONV, runner.n_devices))
        mem = RecurrentMemory(runner.backend, N_LAYER, D_CONV, CHANNELS, MEM_SIZE, self.K - 1, self.dtype)
        for il, values in enumerate(initial):
            mem.write(il, values)
        projection = None
        if runner.meta is not None:
            projection = QkvProjection(runner.backend, N_LAYER, CHANNELS)
        model = DeltaNetConv(mem, runner, self.strategy, projection)
        out = []
        for qkv, s_copy, kv_head in ubatches:
            out.extend(model.step(Ubatch(qkv, s_copy, kv_head)))
        out.extend(mem.read(il).astype(np.float32) for il in range(N_LAYER))
        return out

    def expected(self) -> list[np.ndarray]:
        initial, ubatches = self.scenario()
        oracle = ConvStateOracle(N_LAYER, D_CONV, CHANNELS, MEM_SIZE, self.K - 1, self.np_dtype, self.strategy, initial)
        out = []
        for qkv, s_copy, kv_head in ubatches:
            out.extend(oracle.step(qkv, s_copy, kv_head))
        out.extend(c.astype(np.float32) for c in oracle.caches)
        return out


for _strategy in STRATEGIES:
    for _dtype in ("f32", "f16"):
        for _K in (1, 2, 4, 8):
            register(ConvStateCase(_strategy, _dtype, _K))
