"""Small random-weight GGUF models that llama.cpp loads and decodes (`python -m pyggml make-model`).

Each architecture is a table: the hyperparameters llama.cpp's loader reads for it (the keys under
`ARCH.`) and the tensors its `load_arch_tensors` requires, with their shapes in llama.cpp's order
(`ne`: the fastest dimension first, as `create_tensor` writes them). The tables follow the llama.cpp
that pyggml pins (`src/models/ARCH.cpp`, `src/llama-arch.cpp`, `src/llama-model.cpp`); the files they
make were checked against the ones `tests/test-llama-archs.cpp -o DIR` saves, and loaded and decoded by
llama.cpp (docs/make_model.md).

The vocabulary is llama.cpp's test tokenizer (`tokenizer.ggml.model = "test"`, tokens `tok_0`...,
as in `test-llama-archs.cpp`): llama.cpp tokenizes any text into ids with it, and detokenizes an id as
its hex value. The weights are normal with standard deviation 0.1 (`ssm_a` negative, as Mamba's state
decay must be, as in `test-llama-archs.cpp`), drawn per tensor from the seed and the tensor's name,
so a file is the same for the same arguments, and a tensor does not change when others are added.

    from pyggml.models.make_model import make_model
    make_model("qwen3", "/tmp/qwen3.gguf", seed=0)     # returns what it wrote: a Model
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from pyggml import gguf
from pyggml._native import build_info

STDEV = 0.1  # as test-llama-archs.cpp's default


@dataclass(frozen=True)
class Dims:
    """The sizes a model is made with; `n_head_kv` < `n_head` gives grouped-query attention.

    Attributes:
        n_vocab: tokens in the vocabulary.
        n_ctx: the training context length the file states.
        n_embd: the embedding width.
        n_head: attention heads.
        n_head_kv: key/value heads.
        n_ff: the feed-forward length.
        n_layer: blocks.
        n_expert: experts (MoE architectures).
        n_expert_used: experts used per token.
        n_ff_exp: an expert's feed-forward length.
        n_ff_shexp: the shared expert's feed-forward length.
        rms_eps: the RMS norms' epsilon.
        n_embd_head: the attention heads' size (0: n_embd / n_head); another size is written as
            `attention.key_length` and `value_length`.
        tied_output: no output.weight (llama.cpp multiplies by token_embd instead), as small models ship.
        attention_interval: the hybrid architectures (qwen3next, qwen35): every this-many-th layer is attention.
        dn_state: a delta-net head's key and value size (`ssm.state_size`).
        dn_k_heads: delta-net key heads (`ssm.group_count`).
        dn_v_heads: delta-net value heads (`ssm.time_step_rank`).
        swa_pattern: gemma3: every this-many-th layer attends fully, the others in a sliding window.
        sliding_window: gemma3's window (0: n_ctx / 8).
    """

    n_vocab: int = 256
    n_ctx: int = 512  # the training context length the file states
    n_embd: int = 128
    n_head: int = 2
    n_head_kv: int = 1
    n_ff: int = 256
    n_layer: int = 2
    n_expert: int = 4
    n_expert_used: int = 2
    n_ff_exp: int = 64  # an expert's feed-forward length
    n_ff_shexp: int = 96  # the shared expert's
    rms_eps: float = 1e-6
    n_embd_head: int = 0
    tied_output: bool = False
    attention_interval: int = 2
    dn_state: int = 32
    dn_k_heads: int = 2
    dn_v_heads: int = 4
    swa_pattern: int = 2
    sliding_window: int = 0

    @property
    def head_dim(self) -> int:
        """The heads' size: `n_embd_head`, or `n_embd / n_head` (llama.cpp's default when the file gives no
        key_length)."""
        return self.n_embd_head or self.n_embd // self.n_head


@dataclass(frozen=True)
class TensorSpec:
    """One tensor of a model.

    Attributes:
        name: its name in the file.
        ne: its extents in llama.cpp's (ggml's) order, innermost first.
        type: its ggml type name ("f32", "f16").
    """

    name: str
    ne: tuple[int, ...]
    type: str = "f32"

    @property
    def shape(self) -> tuple[int, ...]:
        """The extents in NumPy's order (`ne` reversed), as `pyggml.gguf.save` writes arrays."""
        return tuple(reversed(self.ne))


@dataclass(frozen=True)
class Table:
    """An architecture's table.

    Attributes:
        hparams: the keys under `ARCH.` (value: a plain Python value, or a `pyggml.gguf.Value`).
        tensors: the tensors, in file order.
    """

    hparams: dict[str, Any]
    tensors: list[TensorSpec]


@dataclass
class Model:
    """What `make_model` wrote.

    Attributes:
        path: the file.
        arch: the architecture.
        metadata: the metadata written.
        tensors: name -> the array written (NumPy shape: `ne` reversed).
    """

    path: str
    arch: str
    metadata: dict[str, Any]
    tensors: dict[str, np.ndarray] = field(default_factory=dict)


# --- shared pieces ----------------------------------------------------------------------------------------
def _u32(v: int) -> gguf.Value:
    """A UINT32, as llama.cpp's converters write counts (its loader also takes other integer types)."""
    return gguf.Value("u32", v)


def _base_hparams(d: Dims, *, attention: bool = True) -> dict[str, Any]:
    """The keys every decoder reads (llama-model.cpp, `load_hparams`): context, width, depth,
    feed-forward length and heads (0 for the attention-free architectures, as their converters write)."""
    return {
        "vocab_size": _u32(d.n_vocab),
        "context_length": _u32(d.n_ctx),
        "embedding_length": _u32(d.n_embd),
        "block_count": _u32(d.n_layer),
        "feed_forward_length": _u32(d.n_ff if attention else 0),
        "attention.head_count": _u32(d.n_head if attention else 0),
        "attention.head_count_kv": _u32(d.n_head_kv if attention else 0),
        "attention.layer_norm_rms_epsilon": d.rms_eps,
        **(
            {"attention.key_length": _u32(d.head_dim), "attention.value_length": _u32(d.head_dim)}
            if attention and d.n_embd_head
            else {}
        ),
    }


def _ends(d: Dims, *, output: bool = True) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """token_embd (first) and output_norm, output (last; llama.cpp ties output to token_embd when absent)."""
    first = [TensorSpec("token_embd.weight", (d.n_embd, d.n_vocab))]
    last = [TensorSpec("output_norm.weight", (d.n_embd,))]
    if output and not d.tied_output:
        last.append(TensorSpec("output.weight", (d.n_embd, d.n_vocab)))
    return first, last


def _attention(i: int, d: Dims, *, q_mult: int = 1, qk_norm: bool = False) -> list[TensorSpec]:
    """attn_q/k/v/output (create_tensor_qkv, unfused); q_mult 2: the query carries a gate (qwen3next, qwen35)."""
    b = f"blk.{i}."
    t = [
        TensorSpec(b + "attn_q.weight", (d.n_embd, d.head_dim * d.n_head * q_mult)),
        TensorSpec(b + "attn_k.weight", (d.n_embd, d.head_dim * d.n_head_kv)),
        TensorSpec(b + "attn_v.weight", (d.n_embd, d.head_dim * d.n_head_kv)),
        TensorSpec(b + "attn_output.weight", (d.head_dim * d.n_head, d.n_embd)),
    ]
    if qk_norm:
        t += [TensorSpec(b + "attn_k_norm.weight", (d.head_dim,)), TensorSpec(b + "attn_q_norm.weight", (d.head_dim,))]
    return t


def _ffn(i: int, d: Dims) -> list[TensorSpec]:
    """A dense SwiGLU feed-forward: ffn_gate, ffn_down, ffn_up."""
    b = f"blk.{i}."
    return [
        TensorSpec(b + "ffn_gate.weight", (d.n_embd, d.n_ff)),
        TensorSpec(b + "ffn_down.weight", (d.n_ff, d.n_embd)),
        TensorSpec(b + "ffn_up.weight", (d.n_embd, d.n_ff)),
    ]


def _experts(i: int, d: Dims) -> list[TensorSpec]:
    """A mixture of experts: the router (ffn_gate_inp) and the stacked experts' gate, down, up."""
    b = f"blk.{i}."
    return [
        TensorSpec(b + "ffn_gate_inp.weight", (d.n_embd, d.n_expert)),
        TensorSpec(b + "ffn_gate_exps.weight", (d.n_embd, d.n_ff_exp, d.n_expert)),
        TensorSpec(b + "ffn_down_exps.weight", (d.n_ff_exp, d.n_embd, d.n_expert)),
        TensorSpec(b + "ffn_up_exps.weight", (d.n_embd, d.n_ff_exp, d.n_expert)),
    ]


def _moe_hparams(d: Dims) -> dict[str, Any]:
    return {
        "expert_count": _u32(d.n_expert),
        "expert_used_count": _u32(d.n_expert_used),
        "expert_feed_forward_length": _u32(d.n_ff_exp),
    }


# delta-net (qwen3next, qwen35): head_k_dim = head_v_dim = ssm.state_size (Dims.dn_state), ssm.group_count key
# heads, ssm.time_step_rank value heads, ssm.inner_size = value heads * head_v_dim; a convolution of 4
_DN_CONV = 4


def _delta_net_hparams(d: Dims) -> dict[str, Any]:
    return {
        "ssm.conv_kernel": _u32(_DN_CONV),
        "ssm.state_size": _u32(d.dn_state),
        "ssm.group_count": _u32(d.dn_k_heads),
        "ssm.time_step_rank": _u32(d.dn_v_heads),
        "ssm.inner_size": _u32(d.dn_state * d.dn_v_heads),
        # layer i is recurrent unless (i + 1) % interval == 0
        "full_attention_interval": _u32(d.attention_interval),
    }


def _delta_net(i: int, d: Dims, *, fused_ba: bool) -> list[TensorSpec]:
    """A gated delta-net layer's tensors (qwen3next.cpp, qwen35.cpp: the `is_recr` branch)."""
    b = f"blk.{i}."
    key_dim, value_dim = d.dn_state * d.dn_k_heads, d.dn_state * d.dn_v_heads
    t = [
        TensorSpec(b + "attn_qkv.weight", (d.n_embd, key_dim * 2 + value_dim)),
        TensorSpec(b + "attn_gate.weight", (d.n_embd, value_dim)),
        TensorSpec(b + "ssm_conv1d.weight", (_DN_CONV, key_dim * 2 + value_dim)),
        TensorSpec(b + "ssm_dt.bias", (d.dn_v_heads,)),
        TensorSpec(b + "ssm_a", (d.dn_v_heads,)),
    ]
    if fused_ba:
        t.append(TensorSpec(b + "ssm_ba.weight", (d.n_embd, d.dn_v_heads * 2)))
    else:
        t += [
            TensorSpec(b + "ssm_beta.weight", (d.n_embd, d.dn_v_heads)),
            TensorSpec(b + "ssm_alpha.weight", (d.n_embd, d.dn_v_heads)),
        ]
    t += [
        TensorSpec(b + "ssm_norm.weight", (d.dn_state,)),
        TensorSpec(b + "ssm_out.weight", (value_dim, d.n_embd)),
    ]
    return t


def _recurrent(i: int, interval: int) -> bool:
    """llama.cpp's default layer pattern for qwen3next/qwen35 (no `attention.recurrent_layers` key)."""
    return (i + 1) % interval != 0


# --- the architectures --------------------------------------------------------------------------------------
def _dense_layers(d: Dims, *, qk_norm: bool = False, moe: bool = False) -> list[TensorSpec]:
    """Layers of llama's shape: attn_norm, attention, ffn_norm, then a feed-forward (or its experts)."""
    layers = []
    for i in range(d.n_layer):
        layers += [TensorSpec(f"blk.{i}.attn_norm.weight", (d.n_embd,))]
        layers += _attention(i, d, qk_norm=qk_norm)
        layers += [TensorSpec(f"blk.{i}.ffn_norm.weight", (d.n_embd,))]
        layers += _experts(i, d) if moe else _ffn(i, d)
    return layers


def _llama(d: Dims) -> Table:
    """src/models/llama.cpp: attn_norm, q/k/v/output, ffn_norm, ffn_gate/down/up."""
    first, last = _ends(d)
    return Table({**_base_hparams(d), "rope.freq_base": 10000.0}, first + _dense_layers(d) + last)


def _qwen3(d: Dims) -> Table:
    """src/models/qwen3.cpp: llama's layer with per-head q and k RMS norms."""
    first, last = _ends(d)
    return Table({**_base_hparams(d), "rope.freq_base": 1000000.0}, first + _dense_layers(d, qk_norm=True) + last)


def _qwen3moe(d: Dims) -> Table:
    """src/models/qwen3moe.cpp: qwen3's attention, a mixture of experts for the feed-forward."""
    first, last = _ends(d)
    hparams = {**_base_hparams(d), **_moe_hparams(d), "rope.freq_base": 1000000.0}
    return Table(hparams, first + _dense_layers(d, qk_norm=True, moe=True) + last)


def _shared_expert(i: int, d: Dims) -> list[TensorSpec]:
    """Qwen3-Next's gated shared expert (qwen3next.cpp, qwen35moe.cpp)."""
    b = f"blk.{i}."
    return [
        TensorSpec(b + "ffn_gate_inp_shexp.weight", (d.n_embd,)),
        TensorSpec(b + "ffn_gate_shexp.weight", (d.n_embd, d.n_ff_shexp)),
        TensorSpec(b + "ffn_up_shexp.weight", (d.n_embd, d.n_ff_shexp)),
        TensorSpec(b + "ffn_down_shexp.weight", (d.n_ff_shexp, d.n_embd)),
    ]


def _hybrid_delta_net(d: Dims, *, fused_ba: bool, moe: bool) -> list[TensorSpec]:
    """Layers of the Qwen3-Next family: gated delta-net layers, every `attention_interval`-th layer gated
    attention, a post-attention norm; a dense feed-forward, or experts with a gated shared expert."""
    interval = d.attention_interval
    layers = []
    for i in range(d.n_layer):
        b = f"blk.{i}."
        layers += [
            TensorSpec(b + "attn_norm.weight", (d.n_embd,)),
            TensorSpec(b + "post_attention_norm.weight", (d.n_embd,)),
        ]
        if _recurrent(i, interval):
            layers += _delta_net(i, d, fused_ba=fused_ba)
        else:
            layers += _attention(i, d, q_mult=2, qk_norm=True)
        layers += _experts(i, d) + _shared_expert(i, d) if moe else _ffn(i, d)
    return layers


def _qwen3next_hparams(d: Dims) -> dict[str, Any]:
    """qwen3next's keys (qwen35moe's but for its rope sections): experts with a shared expert, delta-net."""
    return {
        **_base_hparams(d),
        **_moe_hparams(d),
        "expert_shared_feed_forward_length": _u32(d.n_ff_shexp),
        **_delta_net_hparams(d),
        "rope.freq_base": 10000000.0,
    }


def _qwen3next(d: Dims) -> Table:
    """src/models/qwen3next.cpp: gated delta-net layers, every 2nd layer gated attention; experts with a
    gated shared expert in every layer."""
    first, last = _ends(d)
    return Table(_qwen3next_hparams(d), first + _hybrid_delta_net(d, fused_ba=True, moe=True) + last)


def _rope_sections(d: Dims) -> dict[str, Any]:
    quarter = d.head_dim // 4
    return {"rope.dimension_sections": gguf.Value("u32", [quarter, quarter, quarter, quarter])}


def _qwen35(d: Dims) -> Table:
    """src/models/qwen35.cpp: qwen3next's layer pattern with separate ssm_beta/ssm_alpha, a dense
    feed-forward, and multi-section rope (`rope.dimension_sections`, required)."""
    first, last = _ends(d)
    hparams = {**_base_hparams(d), **_delta_net_hparams(d), "rope.freq_base": 10000000.0, **_rope_sections(d)}
    return Table(hparams, first + _hybrid_delta_net(d, fused_ba=False, moe=False) + last)


def _qwen35moe(d: Dims) -> Table:
    """src/models/qwen35moe.cpp: qwen35's layers (separate ssm_beta/ssm_alpha, multi-section rope) with
    qwen3next's experts and gated shared expert."""
    first, last = _ends(d)
    hparams = {**_qwen3next_hparams(d), **_rope_sections(d)}
    return Table(hparams, first + _hybrid_delta_net(d, fused_ba=False, moe=True) + last)


def _gemma3(d: Dims) -> Table:
    """src/models/gemma3.cpp: pre and post norms around attention and feed-forward, q/k norms, and
    sliding-window attention on every layer but each 2nd (`attention.sliding_window_pattern`)."""
    first, last = _ends(d)
    layers = []
    for i in range(d.n_layer):
        b = f"blk.{i}."
        layers += [TensorSpec(b + "attn_norm.weight", (d.n_embd,))]
        layers += _attention(i, d)
        layers += [
            TensorSpec(b + "post_attention_norm.weight", (d.n_embd,)),
            TensorSpec(b + "attn_k_norm.weight", (d.head_dim,)),
            TensorSpec(b + "attn_q_norm.weight", (d.head_dim,)),
            TensorSpec(b + "ffn_norm.weight", (d.n_embd,)),
            TensorSpec(b + "ffn_gate.weight", (d.n_embd, d.n_ff)),
            TensorSpec(b + "ffn_up.weight", (d.n_embd, d.n_ff)),
            TensorSpec(b + "ffn_down.weight", (d.n_ff, d.n_embd)),
            TensorSpec(b + "post_ffw_norm.weight", (d.n_embd,)),
        ]
    hparams = {
        **_base_hparams(d),
        "attention.key_length": _u32(d.head_dim),
        "attention.value_length": _u32(d.head_dim),
        "attention.sliding_window": _u32(d.sliding_window or d.n_ctx // 8),
        "attention.sliding_window_pattern": _u32(d.swa_pattern),
        "rope.freq_base": 1000000.0,
        "rope.freq_base_swa": 10000.0,
    }
    return Table(hparams, first + layers + last)


# mamba2: d_inner = 2 n_embd, heads of 32 (ssm.time_step_rank = d_inner / 32), 2 groups, state 16
_MAMBA_STATE, _MAMBA_GROUPS, _MAMBA_HEAD, _MAMBA_CONV = 16, 2, 32, 4


def _mamba2(d: Dims) -> Table:
    """src/models/mamba2.cpp: attention-free; ssm_in projects to z, x, B, C and dt at once."""
    d_inner = 2 * d.n_embd
    n_heads = d_inner // _MAMBA_HEAD
    conv_dim = d_inner + 2 * _MAMBA_GROUPS * _MAMBA_STATE
    first, last = _ends(d)
    layers = []
    for i in range(d.n_layer):
        b = f"blk.{i}."
        layers += [
            TensorSpec(b + "attn_norm.weight", (d.n_embd,)),
            TensorSpec(b + "ssm_in.weight", (d.n_embd, d_inner + conv_dim + n_heads)),
            TensorSpec(b + "ssm_conv1d.weight", (_MAMBA_CONV, conv_dim)),
            TensorSpec(b + "ssm_conv1d.bias", (conv_dim,)),
            TensorSpec(b + "ssm_dt.bias", (n_heads,)),
            TensorSpec(b + "ssm_a", (1, n_heads)),
            TensorSpec(b + "ssm_d", (1, n_heads)),
            TensorSpec(b + "ssm_norm.weight", (d_inner // _MAMBA_GROUPS, _MAMBA_GROUPS)),
            TensorSpec(b + "ssm_out.weight", (d_inner, d.n_embd)),
        ]
    hparams = {
        **_base_hparams(d, attention=False),
        "ssm.conv_kernel": _u32(_MAMBA_CONV),
        "ssm.inner_size": _u32(d_inner),
        "ssm.state_size": _u32(_MAMBA_STATE),
        "ssm.time_step_rank": _u32(n_heads),
        "ssm.group_count": _u32(_MAMBA_GROUPS),
    }
    return Table(hparams, first + layers + last)


# rwkv7: heads of 64 (wkv.head_size), the LoRA ranks of the decay, in-context learning rate,
# value residual mix and gate
_RWKV_HEAD, _RWKV_DECAY, _RWKV_ICLR, _RWKV_VMIX, _RWKV_GATE = 64, 32, 32, 16, 32


def _rwkv7(d: Dims) -> Table:
    """src/models/rwkv7.cpp: attention-free; layer norms with biases, time mix and channel mix."""
    e = d.n_embd
    first = [
        TensorSpec("token_embd.weight", (e, d.n_vocab)),
        TensorSpec("token_embd_norm.weight", (e,)),
        TensorSpec("token_embd_norm.bias", (e,)),
    ]
    last = [
        TensorSpec("output_norm.weight", (e,)),
        TensorSpec("output_norm.bias", (e,)),
        TensorSpec("output.weight", (e, d.n_vocab)),  # required: rwkv7 does not tie it
    ]
    layers = []
    for i in range(d.n_layer):
        b = f"blk.{i}."
        vmix = _RWKV_ICLR if i == 0 else _RWKV_VMIX  # layer 0's v1/v2 take the iclr rank
        layers += [
            TensorSpec(b + "attn_norm.weight", (e,)),
            TensorSpec(b + "attn_norm.bias", (e,)),
            TensorSpec(b + "attn_norm_2.weight", (e,)),
            TensorSpec(b + "attn_norm_2.bias", (e,)),
            TensorSpec(b + "time_mix_w0.weight", (e,)),
            TensorSpec(b + "time_mix_w1.weight", (e, _RWKV_DECAY)),
            TensorSpec(b + "time_mix_w2.weight", (_RWKV_DECAY, e)),
            TensorSpec(b + "time_mix_a0.weight", (e,)),
            TensorSpec(b + "time_mix_a1.weight", (e, _RWKV_ICLR)),
            TensorSpec(b + "time_mix_a2.weight", (_RWKV_ICLR, e)),
            TensorSpec(b + "time_mix_v0.weight", (e,)),
            TensorSpec(b + "time_mix_v1.weight", (e, vmix)),
            TensorSpec(b + "time_mix_v2.weight", (vmix, e)),
            TensorSpec(b + "time_mix_g1.weight", (e, _RWKV_GATE)),
            TensorSpec(b + "time_mix_g2.weight", (_RWKV_GATE, e)),
            TensorSpec(b + "time_mix_lerp_fused.weight", (e, 1, 1, 6)),
            TensorSpec(b + "time_mix_k_k.weight", (e,)),
            TensorSpec(b + "time_mix_k_a.weight", (e,)),
            TensorSpec(b + "time_mix_r_k.weight", (e,)),
            TensorSpec(b + "time_mix_key.weight", (e, e)),
            TensorSpec(b + "time_mix_value.weight", (e, e)),
            TensorSpec(b + "time_mix_receptance.weight", (e, e)),
            TensorSpec(b + "time_mix_ln.weight", (e,)),
            TensorSpec(b + "time_mix_ln.bias", (e,)),
            TensorSpec(b + "time_mix_output.weight", (e, e)),
            TensorSpec(b + "channel_mix_lerp_k.weight", (e, 1, 1)),
            TensorSpec(b + "channel_mix_key.weight", (e, d.n_ff)),
            TensorSpec(b + "channel_mix_value.weight", (d.n_ff, e)),
        ]
    hparams = {
        **_base_hparams(d, attention=False),
        "feed_forward_length": _u32(d.n_ff),
        "attention.layer_norm_epsilon": 1e-5,
        "wkv.head_size": _u32(_RWKV_HEAD),
        "attention.decay_lora_rank": _u32(_RWKV_DECAY),
        "attention.iclr_lora_rank": _u32(_RWKV_ICLR),
        "attention.value_residual_mix_lora_rank": _u32(_RWKV_VMIX),
        "attention.gate_lora_rank": _u32(_RWKV_GATE),
    }
    del hparams["attention.layer_norm_rms_epsilon"]
    return Table(hparams, first + layers + last)


# name -> (table, the sizes it is made with by default)
ARCHITECTURES: dict[str, tuple[Callable[[Dims], Table], Dims]] = {
    "llama": (_llama, Dims()),
    "qwen3": (_qwen3, Dims()),
    "qwen3moe": (_qwen3moe, Dims()),
    "qwen3next": (_qwen3next, Dims()),
    "qwen35": (_qwen35, Dims()),
    "qwen35moe": (_qwen35moe, Dims()),
    "gemma3": (_gemma3, Dims()),
    "mamba2": (_mamba2, Dims()),
    "rwkv7": (_rwkv7, Dims(n_ff=512)),
}


# Real-sized random models (`make-model ARCH FILE --like PRESET`): the configuration of a published model, so
# that llama.cpp sizes them as it does the real one (`src/models/ARCH.cpp`'s size detection), with its real
# vocabulary. Random weights: they compute nothing meaningful, at the real cost.
PRESETS: dict[str, tuple[str, Dims]] = {
    # Llama 3.2 1B: 16 layers of 2048, 32 heads of 64 (8 KV heads), feed-forward 8192, tied embeddings
    "llama-1b": (
        "llama",
        Dims(
            n_vocab=128256,
            n_ctx=131072,
            n_embd=2048,
            n_head=32,
            n_head_kv=8,
            n_ff=8192,
            n_layer=16,
            rms_eps=1e-5,
            tied_output=True,
        ),
    ),
    # Qwen3-0.6B: 28 layers of 1024, 16 heads of 128 (8 KV heads), feed-forward 3072, tied embeddings
    "qwen3-0.6b": (
        "qwen3",
        Dims(
            n_vocab=151936,
            n_ctx=40960,
            n_embd=1024,
            n_head=16,
            n_head_kv=8,
            n_embd_head=128,
            n_ff=3072,
            n_layer=28,
            tied_output=True,
        ),
    ),
    # Gemma 3 1B: 26 layers of 1152, 4 heads of 256 (1 KV head), feed-forward 6912, a window of 512 on 5
    # layers of 6, tied embeddings
    "gemma3-1b": (
        "gemma3",
        Dims(
            n_vocab=262144,
            n_ctx=32768,
            n_embd=1152,
            n_head=4,
            n_head_kv=1,
            n_embd_head=256,
            n_ff=6912,
            n_layer=26,
            swa_pattern=6,
            sliding_window=512,
            tied_output=True,
        ),
    ),
    # Qwen3.5-0.8B: 24 layers of 1024 (llama.cpp's "0.8B"), attention on every 4th layer with 8 heads of 256
    # (2 KV heads), its vocabulary of 248,320, tied embeddings; the delta-net heads (16 of 128) and the
    # feed-forward (3584) are this preset's choice, not taken from the published configuration
    "qwen35-0.8b": (
        "qwen35",
        Dims(
            n_vocab=248320,
            n_ctx=262144,
            n_embd=1024,
            n_head=8,
            n_head_kv=2,
            n_embd_head=256,
            n_ff=3584,
            n_layer=24,
            attention_interval=4,
            dn_state=128,
            dn_k_heads=16,
            dn_v_heads=16,
            tied_output=True,
        ),
    ),
}


def architectures() -> list[str]:
    """The architectures `make_model` knows.

    Returns:
        Their names, sorted.
    """
    return sorted(ARCHITECTURES)


def table(arch: str, n_layer: int | None = None, like: str | None = None) -> tuple[Dims, Table]:
    """An architecture's sizes and table.

    Args:
        arch: the architecture (see `architectures()`).
        n_layer: blocks; None: the architecture's default (or the preset's).
        like: a real model's configuration (`PRESETS`), of this architecture; None: the small default.

    Returns:
        `(dims, table)`.

    Raises:
        ValueError: an unknown architecture or preset (the message lists the known ones), a preset of another
            architecture, or `n_layer` not a positive int.
    """
    if arch not in ARCHITECTURES:
        raise ValueError(f"unknown architecture {arch!r}; known: {', '.join(architectures())}")
    make, dims = ARCHITECTURES[arch]
    if like is not None:
        if like not in PRESETS:
            raise ValueError(f"unknown preset {like!r}; known: {', '.join(sorted(PRESETS))}")
        if PRESETS[like][0] != arch:
            raise ValueError(f"preset {like!r} is a {PRESETS[like][0]} model, not {arch}")
        dims = PRESETS[like][1]
    if n_layer is not None:
        if isinstance(n_layer, bool) or not isinstance(n_layer, int) or n_layer < 1:
            raise ValueError(f"layers must be a positive int, got {n_layer!r}")
        dims = replace(dims, n_layer=n_layer)
    return dims, make(dims)


def vocabulary(n_vocab: int) -> dict[str, Any]:
    """llama.cpp's test tokenizer (test-llama-archs.cpp) as metadata: tokens `tok_0`..., scores 0 (its RWKV
    tokenizer on a llama.cpp tree that has no test tokenizer).

    Args:
        n_vocab: the number of tokens.

    Returns:
        The `tokenizer.ggml.*` metadata.
    """
    # an older llama.cpp has no test tokenizer: its RWKV one reads the same tokens (the build records which)
    readable = (build_info().get("tree") or {}).get("llama_tokenizers") or ["test"]
    return {
        "tokenizer.ggml.model": "test" if "test" in readable else "rwkv",
        "tokenizer.ggml.tokens": [f"tok_{i}" for i in range(n_vocab)],
        "tokenizer.ggml.scores": gguf.Value("f32", [0.0] * n_vocab),
    }


def weights(spec: TensorSpec, seed: int) -> np.ndarray:
    """A tensor's random values: normal, standard deviation 0.1, from (seed, crc32 of the name); `ssm_a` (a state decay) negative.

    Args:
        spec: the tensor.
        seed: the model's seed.

    Returns:
        An array of the spec's NumPy shape, float32 (float16 for an "f16" tensor).
    """
    rng = np.random.default_rng([seed, zlib.crc32(spec.name.encode())])
    a = rng.normal(0.0, STDEV, size=spec.shape).astype(np.float32)
    if spec.name.endswith(".ssm_a"):
        a = -np.abs(a)
    return a if spec.type == "f32" else a.astype(np.float16)


def make_model(
    arch: str, path: str | os.PathLike[str], seed: int = 0, layers: int | None = None, like: str | None = None
) -> Model:
    """Write a small random-weight GGUF model of `arch` that llama.cpp loads and decodes.

    Args:
        arch: the architecture (see `architectures()`).
        path: the file to write.
        seed: the weights' seed, a non-negative int.
        layers: blocks; None: the architecture's default (2), or the preset's.
        like: a real model's configuration (`PRESETS`: "llama-1b", "qwen3-0.6b", "gemma3-1b", "qwen35-0.8b").

    Returns:
        What was written.

    Raises:
        ValueError: an unknown architecture (the message lists the known ones) or a bad argument.
        FileNotFoundError: the file's folder does not exist.
        IsADirectoryError: `path` is a folder.
        OSError: the file cannot be written.
    """
    dims, tab = table(arch, layers, like)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    path = os.fspath(path)
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise FileNotFoundError(f"cannot write {path}: no directory {parent}")
    if os.path.isdir(path):
        raise IsADirectoryError(f"cannot write {path}: it is a directory")
    metadata: dict[str, Any] = {
        "general.architecture": arch,
        "general.name": f"pyggml random {arch}",
        "pyggml.make_model.seed": _u32(seed),
        **{f"{arch}.{k}": v for k, v in tab.hparams.items()},
        **vocabulary(dims.n_vocab),
    }
    tensors = {t.name: weights(t, seed) for t in tab.tensors}
    try:
        gguf.save(path, metadata, tensors)
    except OSError as e:
        raise type(e)(e.errno, f"cannot write {path}: {e.strerror}") from e
    return Model(path, arch, metadata, tensors)
