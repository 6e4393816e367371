"""The seed's layer in Python against llama.cpp's own on the same model file: the twin
(`pyggml.models.llama_twin.load_twin`) stepped through the inputs llama.cpp's layer received.

`compare_with_llama(path, backend, chunks)` decodes tokens with llama.cpp, one decode per chunk, and
captures through the eval callback, for every recurrent layer, the layer's input (the residual's
source), its output (`attn_residual-<il>`: the layer's mixer plus the residual, what
`delta_net.build_layer` returns) and both caches once the layer has written them (`cache_r_l<il>`,
`cache_s_l<il>`). The twin (`DeltaNet`, one layer, on the same backend) steps through the same inputs
from zero states; each step's output and both states are compared with llama.cpp's.

Where the twin differs from llama.cpp's graph, and why it does not change the values:
- the twin always calls ggml_gated_delta_net with its snapshot count K (1 here), llama.cpp's fused
  path calls it with K=1 too; llama.cpp's unfused paths (autoregressive, chunked) are used only when a
  backend lacks the fused op, and compute the same recurrence in another order (not compared here);
- qwen35: the twin hands q and k to the op with n_k_heads heads (the op broadcasts h % n_k_heads), as
  llama.cpp's fused path does; its unfused path tiles them first with ggml_repeat_4d, the same values;
- the twin's conv-state write is the seed's (`conv_state.build_conv_state`, ggml_set_rows with a
  host-filled slot index); llama.cpp without rollback (n_rs_seq = 0, as here) copies the last window
  with one ggml_cpy: the same bytes;
- llama.cpp puts the layer's input norm (`attn_norm-<il>`) outside `build_layer_attn_linear` and adds
  the residual after it; the twin's layer holds both, so its output is llama.cpp's `attn_residual-<il>`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from pyggml._native import ffi
from pyggml.models.delta_net import DeltaNet
from pyggml.models.llama_twin import TwinFile, load_twin
from pyggml.runner import Runner
from pyggml.target import Target
from pyggml.tensor import Tensor
from pyggml.testing.engine import verdict
from pyggml.testing.engine.nodes import values
from pyggml.testing.engine.verdict import nmse

if TYPE_CHECKING:
    from pyggml._pyggml_cffi import CData


# NMSE the twin may show against llama.cpp per backend kind. Measured on the tiny qwen3next and qwen35
# files of `make-model`, decodes of 5, 3, 1 and of 12, 4, 9 tokens: bit-exact on the CPU and on
# lavapipe (vulkan0), both computing the same ops on the same values in the same order, so any
# difference there is a bug.
# Split over a meta device with llama.cpp's own policy (several segments), against llama.cpp's layer on the
# CPU: measured 0 over two CPUs and up to 1.6e-13 over two lavapipe devices (stated with room).
TWIN_NMSE = {"cpu": 0.0, "vulkan": 0.0, "meta:cpu": 1e-12, "meta:vulkan": 1e-10}


TWIN_NMSE_OTHER = 1e-5  # backends not measured here (CUDA, RPC): the Vulkan matrix shader's F16 bound


def twin_bound(backend: str) -> float:
    """The NMSE the twin may show against llama.cpp on a backend: its kind's bound in `TWIN_NMSE`.

    Args:
        backend: a device name ('cpu', 'vulkan0', 'meta:cpu,cpu', ...).

    Returns:
        The bound; `TWIN_NMSE_OTHER` for kinds not measured here (CUDA, RPC).
    """
    target = Target.parse(backend)
    return next((b for kind, b in TWIN_NMSE.items() if target.matches(kind)), TWIN_NMSE_OTHER)


@dataclass
class LayerValues:
    """One recurrent layer of one decode, as llama.cpp computed it.

    Attributes:
        x: the layer's input, (n_tokens, n_embd).
        y: its output (`attn_residual-<il>`), (n_tokens, n_embd).
        conv: the whole conv cache after the layer wrote it, (rows, row size).
        ssm: the whole recurrent-state cache after the layer wrote it, (rows, row size).
    """

    x: np.ndarray
    y: np.ndarray
    conv: np.ndarray
    ssm: np.ndarray


class LayerCapture:
    """An observer for `pyggml.llama.Context(observe=...)` that captures recurrent layers' values.

    For each of `layers` and each decode, a LayerValues in `taken[il]` (one per ubatch, in order).

    Args:
        layers: the recurrent layers to capture.

    Attributes:
        taken: layer -> its LayerValues, one per ubatch.
        caches: llama.cpp's cache tensors (`cache_r_l<il>`, `cache_s_l<il>`) by name, as seen.
    """

    def __init__(self, layers: list[int]) -> None:
        self.layers = set(layers)
        self.caches: dict[str, CData] = {}  # cache_r_l<il> / cache_s_l<il> as llama.cpp's graph names them
        self.taken: dict[int, list[LayerValues]] = {il: [] for il in layers}
        self._pending: tuple[np.ndarray, np.ndarray, np.ndarray] = (np.empty(0), np.empty(0), np.empty(0))

    def _note_caches(self, t: Tensor) -> None:
        for p in [t.ptr, *t.ptr.src]:
            if p == ffi.NULL:
                continue
            base = p.view_src if p.view_src != ffi.NULL else p
            name = ffi.string(base.name).decode()
            if name.startswith(("cache_r_l", "cache_s_l")):
                self.caches[name] = base

    def __call__(self, t: Tensor, ask: bool) -> bool:
        name = t.name
        il = int(name.rsplit("-", 1)[1]) if name.startswith("attn_residual-") else -1
        if ask:
            self._note_caches(t)
            if il not in self.layers:
                return True  # computed on its own: ggml computes a node not asked for with the next one asked
            # before the add: ggml's allocator may compute it in place over the input; the layer's copies
            # into both caches come earlier in the graph, so they are done
            x = values(Tensor(t.ptr.src[1], None))
            conv, ssm = (values(Tensor(self.caches[f"cache_{c}_l{il}"], None)) for c in "rs")
            self._pending = (x.reshape(-1, x.shape[-1]), conv, ssm)
            return True
        if il not in self.layers:
            return True
        x, conv, ssm = self._pending
        self.taken[il].append(LayerValues(x, values(t).reshape(x.shape), conv, ssm))
        return True


@dataclass
class TwinRecord:
    """The twin against llama.cpp for one layer and one decode.

    Attributes:
        layer: the layer.
        step: the decode's index.
        n_tokens: its tokens.
        output: NMSE of the layer's output.
        conv: NMSE of the conv state.
        ssm: NMSE of the recurrent state.
        bound: the NMSE allowed (`twin_bound`).
    """

    layer: int
    step: int
    n_tokens: int
    output: float
    conv: float
    ssm: float
    bound: float

    @property
    def ok(self) -> bool:
        """Whether the output and both states are within the backend's bound (verdict.within, the judge's
        comparison of a figure that is already an error)."""
        return all(verdict.within(x, self.bound, "NMSE").ok for x in (self.output, self.conv, self.ssm))


def compare_with_llama(
    path: str | os.PathLike[str],
    backend: str = "cpu",
    chunks: tuple[int, ...] = (5, 3, 1),
    seed: int = 0,
    twin: TwinFile | None = None,
    twin_backend: str | None = None,
) -> list[TwinRecord]:
    """The seed's layer in Python against llama.cpp's own, decode by decode.

    Decodes sum(chunks) tokens of one sequence with llama.cpp on `backend` (one decode per chunk), and
    steps the twin of every recurrent layer over the inputs llama.cpp's layer received (see the module's
    doc).

    Args:
        path: a qwen3next / qwen35 / qwen35moe GGUF file.
        backend: the device llama.cpp runs on.
        chunks: the tokens of each decode, each >= 1.
        seed: the seed of the random tokens.
        twin: what `load_twin(path)` gives, or a changed copy of it (another layout, other weights) to see
            the comparison fail; None: load it.
        twin_backend: the device the twin runs on; None: the same backend. A meta device splits the twin
            with llama.cpp's own policy (`delta_net.llama_split_policy`).

    Returns:
        One TwinRecord per layer and decode.

    Raises:
        ValueError: bad chunks, or a file the twin cannot take (see `load_twin`).
        LlamaError: llama.cpp cannot load the file or decode.
    """
    from pyggml import llama
    from pyggml.testing.engine.model_check import tokens_for

    if not chunks or any(not isinstance(n, int) or n < 1 for n in chunks):
        raise ValueError(f"compare_with_llama: chunks must be token counts >= 1, got {chunks!r}")
    twin = twin if twin is not None else load_twin(path)
    if backend == "cpu":
        model = llama.Model.load(path, n_gpu_layers=0, devices=[])
    else:
        model = llama.Model.load(path, devices=[backend], split_mode="none")
    capture = LayerCapture(twin.layers)
    n_total, widest = sum(chunks), max(chunks)
    ctx = llama.Context(model, n_ctx=max(64, 2 * n_total), n_batch=widest, n_ubatch=widest, observe=capture)
    twin_backend = twin_backend or backend
    runner = Runner(twin_backend, fallback=False)
    nets = {il: DeltaNet(runner, twin.config, K=1, mem_size=1, weights=[twin.weights[il]]) for il in twin.layers}
    tokens = tokens_for(model.n_vocab, n_total, seed)
    c, out = twin.config, []
    bound = max(twin_bound(backend), twin_bound(twin_backend))
    at = 0
    for step, n in enumerate(chunks):
        ctx.decode(tokens[at : at + n])
        at += n
        for il in twin.layers:
            got = capture.taken[il][step]
            y = nets[il].step(got.x.reshape(1, n, c.n_embd), [0], 0).reshape(n, c.n_embd)
            conv, ssm = nets[il].states(0, 0)
            llama_conv = got.conv.reshape(-1, c.n_embd_r)[0].reshape(conv.shape)
            llama_ssm = got.ssm.reshape(-1, c.n_embd_s)[0].reshape(ssm.shape)
            out.append(TwinRecord(il, step, n, nmse(y, got.y), nmse(conv, llama_conv), nmse(ssm, llama_ssm), bound))
    return out
