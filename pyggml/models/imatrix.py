"""Importance matrices for llama.cpp's quantizer, computed by decoding the model with pyggml watching.

llama.cpp's IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S and IQ3_XXS (and the files types built on them) refuse to
quantize without an importance matrix: per weight, the mean of the squared activations that enter each of
its columns (llama.cpp's `llama-imatrix`: the sum over tokens of x_j^2 divided by the count, per expert for
a mixture of experts). Here the model is decoded on the CPU and every MUL_MAT and MUL_MAT_ID node whose first
source is one of the model's weights is shown to an observer (llama.cpp's eval callback) after it ran, which
adds up its activations.

    from pyggml.models import imatrix
    m = imatrix.compute("model-f32.gguf", n_tokens=64)           # {"blk.0.attn_q.weight": array, ...}
    pyggml.llama.quantize("model-f32.gguf", "model-iq2_xs.gguf", "iq2_xs", imatrix=m)
"""

from __future__ import annotations

import os

import numpy as np

from pyggml._native import ffi
from pyggml.tensor import Tensor

PRODUCTS = ("MUL_MAT", "MUL_MAT_ID")
# the file types some of whose tensors llama.cpp quantizes to a type that requires an importance matrix
# (llama-quant.cpp's tensor_requires_imatrix: IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, and Q2_K in Q2_K_S)
NEEDED_BY = ("iq1_s", "iq1_m", "iq2_xxs", "iq2_xs", "iq2_s", "iq2_m", "iq3_xxs", "iq3_xs", "q2_k_s")


class _Collector:
    """The eval callback's observer: asks to see every product of a weight, and sums its squared inputs."""

    def __init__(self, weights: set[str]) -> None:
        self.weights = weights
        self.sums: dict[str, np.ndarray] = {}
        self.counts: dict[str, np.ndarray] = {}

    def _weight(self, t: Tensor) -> str | None:
        src0 = t.ptr.src[0]
        if t.op.name not in PRODUCTS or src0 == ffi.NULL:
            return None
        while src0.view_src != ffi.NULL:  # a reshape or view of the weight (qwen3next's ssm_in): the weight's
            src0 = src0.view_src
        name = ffi.string(src0.name).decode()
        return name if name in self.weights else None

    def __call__(self, t: Tensor, ask: bool) -> bool:
        name = self._weight(t)
        if name is None:
            return False
        if ask:
            return True
        x = Tensor(t.ptr.src[1], t.ctx).numpy().astype(np.float64)  # NumPy order: [..., tokens, K]
        k = x.shape[-1]
        if t.op.name == "MUL_MAT":
            rows = x.reshape(-1, k)
            self._add(name, 1, 0, (rows * rows).sum(axis=0), len(rows))
            return True
        # MUL_MAT_ID: b [tokens, n_b, K], ids [tokens, n_used]: token t's slot e went through expert ids[t, e]
        n_expert = int(t.ptr.src[0].ne[2])
        ids = Tensor(t.ptr.src[2], t.ctx).numpy().reshape(-1, int(t.ptr.src[2].ne[0]))
        x3 = x.reshape(ids.shape[0], -1, k)
        for tok in range(ids.shape[0]):
            for slot in range(ids.shape[1]):
                row = x3[tok, slot % x3.shape[1]]
                self._add(name, n_expert, int(ids[tok, slot]), row * row, 1)
        return True

    def _add(self, name: str, n_expert: int, expert: int, squares: np.ndarray, count: int) -> None:
        k = squares.shape[0]
        if name not in self.sums:
            self.sums[name] = np.zeros(n_expert * k)
            self.counts[name] = np.zeros(n_expert)
        self.sums[name][expert * k : (expert + 1) * k] += squares
        self.counts[name][expert] += count

    def result(self) -> dict[str, np.ndarray]:
        out = {}
        for name, sums in self.sums.items():
            counts = self.counts[name]
            k = sums.shape[0] // counts.shape[0]
            # an expert no token reached: weight its columns alike (llama.cpp's tool leaves it out and refuses)
            per = np.where(counts[:, None] > 0, sums.reshape(-1, k) / np.maximum(counts, 1)[:, None], 1.0)
            out[name] = per.reshape(-1).astype(np.float32)
        return out


def compute(path: str | os.PathLike[str], n_tokens: int = 64, seed: int = 0) -> dict[str, np.ndarray]:
    """The importance matrix of a model file: decode `n_tokens` tokens on the CPU and average the squared
    activations entering each weight's columns.

    Args:
        path: the GGUF model (F32, F16 or BF16 weights: the file llama.cpp's quantizer then reads).
        n_tokens: tokens to decode (random ones of the vocabulary, from `seed`).
        seed: the tokens' seed.

    Returns:
        weight name -> float32 values: K per weight, K times the experts for a mixture-of-experts weight, as
        `pyggml.llama.quantize(..., imatrix=)` takes it.

    Raises:
        ValueError: n_tokens is not a positive int.
        FileNotFoundError: no such file.
        pyggml.llama.LlamaError: llama.cpp could not load or decode the model.
    """
    from pyggml import gguf, llama

    if isinstance(n_tokens, bool) or not isinstance(n_tokens, int) or n_tokens < 1:
        raise ValueError(f"n_tokens must be a positive int, got {n_tokens!r}")
    infos = gguf.read_info(path).tensor_info
    model = llama.Model.load(path, n_gpu_layers=0, devices=[], use_extra_bufts=False)  # the CPU alone: no op offload
    collector = _Collector(set(infos))
    ctx = llama.Context(model, n_ctx=max(64, n_tokens), n_batch=n_tokens, n_ubatch=n_tokens, observe=collector)
    tokens = np.random.default_rng(seed).integers(0, model.n_vocab, n_tokens).tolist()
    ctx.decode(tokens)
    out = collector.result()
    # a weight of the file that no product of this graph reads (llama.cpp's qwen3next keeps an ssm_in it does
    # not use): its columns weighted alike, so that the quantizer, which wants an entry for every weight it
    # makes an IQ1/IQ2 type of, gets one
    for name, info in infos.items():
        if name not in out and name.endswith(".weight") and sum(n > 1 for n in info.ne) >= 2:
            out[name] = np.ones(info.ne[0] * (info.ne[2] if info.ne[2] > 1 else 1), np.float32)
    return out
