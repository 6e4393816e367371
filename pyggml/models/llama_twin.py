"""The seed's layer in Python (pyggml.models.delta_net) against llama.cpp's own, on the same model file.

`load_twin(path)` reads a qwen3next or qwen35 GGUF file as llama.cpp's loader does: the sizes from its
metadata (`<arch>.embedding_length`, `<arch>.ssm.conv_kernel`, `.ssm.state_size` (the head size),
`.ssm.group_count` (key heads), `.ssm.time_step_rank` (value heads), `.ssm.inner_size`,
`.attention.layer_norm_rms_epsilon`), which layers are recurrent (`<arch>.attention.recurrent_layers`,
else every layer but each `full_attention_interval`-th, 4 by default), and each recurrent layer's
weights by llama.cpp's tensor names (`blk.<il>.attn_qkv.weight`, `ssm_ba.weight` or
`ssm_beta.weight` + `ssm_alpha.weight`, `ssm_dt.bias`, `ssm_a`, ...). The layer's config takes the
file's layout: llama.cpp's [q | k | v] channel order and the architecture's value-head broadcast
(delta_net's docstring).

The comparison with llama.cpp's own layer is pyggml.testing.engine.twin_check's (`compare_with_llama`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from pyggml import gguf, types
from pyggml.models.delta_net import DeltaNetConfig

if TYPE_CHECKING:
    pass

# llama.cpp's architectures whose recurrent layers are this layer, and the layout of each
LAYOUTS = {"qwen3next": "qwen3next", "qwen35": "qwen35", "qwen35moe": "qwen35"}

# the twin's weight names -> llama.cpp's tensor names within blk.<il>.
TENSOR_NAMES = {
    "attn_norm": "attn_norm.weight",
    "attn_qkv": "attn_qkv.weight",
    "attn_gate": "attn_gate.weight",
    "ssm_ba": "ssm_ba.weight",
    "ssm_beta": "ssm_beta.weight",
    "ssm_alpha": "ssm_alpha.weight",
    "ssm_dt": "ssm_dt.bias",
    "ssm_a": "ssm_a",
    "ssm_conv1d": "ssm_conv1d.weight",
    "ssm_norm": "ssm_norm.weight",
    "ssm_out": "ssm_out.weight",
}


@dataclass
class TwinFile:
    """What the twin takes from a model file.

    Attributes:
        path: the file.
        arch: its architecture (qwen3next, qwen35, qwen35moe).
        config: the layer's config (one layer, the file's layout).
        layers: llama.cpp's recurrent layers.
        weights: each recurrent layer's weights under the twin's names, float32, NumPy shapes.
    """

    path: str
    arch: str
    config: DeltaNetConfig
    layers: list[int]
    weights: dict[int, dict[str, np.ndarray]] = field(default_factory=dict)


def _meta_int(meta: dict, key: str, path: str) -> int:
    if key not in meta:
        raise ValueError(f"{path}: no metadata key {key!r}, which llama.cpp's loader needs for this layer")
    return int(meta[key])


def recurrent_layers(meta: dict, arch: str) -> list[int]:
    """llama.cpp's `is_recr` per layer (qwen3next.cpp / qwen35.cpp `load_arch_hparams`).

    The `attention.recurrent_layers` array, else every layer but each `full_attention_interval`-th (4 by
    default); MTP layers (`nextn_predict_layers`) are never run in the main pass.

    Args:
        meta: the file's metadata (`GGUFFile.metadata`).
        arch: its architecture.

    Returns:
        The indices of the recurrent layers.

    Raises:
        KeyError: no `<arch>.block_count`.
    """
    n_all = int(meta[f"{arch}.block_count"])
    n_layer = n_all - int(meta.get(f"{arch}.nextn_predict_layers", 0))
    given = meta.get(f"{arch}.attention.recurrent_layers")
    if given is not None:
        if isinstance(given, (int, bool)):
            given = [given] * n_all
        return [i for i in range(n_layer) if given[i]]
    interval = int(meta.get(f"{arch}.full_attention_interval", 4))
    return [i for i in range(n_layer) if (i + 1) % interval != 0]


def load_twin(path: str | os.PathLike[str]) -> TwinFile:
    """Read a qwen3next / qwen35 / qwen35moe file's delta-net layers for the twin (see the module's doc).

    Args:
        path: the GGUF file.

    Returns:
        The TwinFile.

    Raises:
        ValueError: naming the file and what is missing: another architecture, a metadata key llama.cpp
            needs, a layer without llama.cpp's tensors (a legacy `ssm_in` Qwen3-Next file), sizes the twin
            cannot take (value head size != key head size).
        GGUFError: a file ggml cannot read.
        OSError: the file is missing or unreadable.
    """
    path = os.fspath(path)
    info = gguf.read_info(path)
    meta = info.metadata
    arch = str(meta.get("general.architecture", ""))
    if arch not in LAYOUTS:
        raise ValueError(f"{path}: architecture {arch!r} has no gated delta-net layer (one of {sorted(LAYOUTS)})")
    S = _meta_int(meta, f"{arch}.ssm.state_size", path)
    n_v = _meta_int(meta, f"{arch}.ssm.time_step_rank", path)
    d_inner = _meta_int(meta, f"{arch}.ssm.inner_size", path)
    if d_inner != S * n_v:
        raise ValueError(
            f"{path}: ssm.inner_size {d_inner} is not ssm.state_size {S} x ssm.time_step_rank {n_v}: a value "
            "head size other than the key head size, which ggml_gated_delta_net does not take"
        )
    config = DeltaNetConfig(
        n_embd=_meta_int(meta, f"{arch}.embedding_length", path),
        n_layer=1,
        head_dim=S,
        n_k_heads=_meta_int(meta, f"{arch}.ssm.group_count", path),
        n_v_heads=n_v,
        d_conv=_meta_int(meta, f"{arch}.ssm.conv_kernel", path),
        eps=float(meta.get(f"{arch}.attention.layer_norm_rms_epsilon", 1e-6)),
        layout=LAYOUTS[arch],
    )
    twin = TwinFile(path, arch, config, recurrent_layers(meta, arch))
    shapes = config.weight_shapes()
    with open(path, "rb") as f:
        for il in twin.layers:
            layer = {}
            for name, shape in shapes.items():
                full = f"blk.{il}.{TENSOR_NAMES[name]}"
                t = info.tensor_info.get(full)
                if t is None:
                    legacy = f" (a legacy file with blk.{il}.ssm_in: convert it again)" if name == "attn_qkv" else ""
                    raise ValueError(f"{path}: no tensor {full!r}{legacy}")
                f.seek(info.data_offset + t.offset)
                raw = np.frombuffer(f.read(t.nbytes), dtype=np.uint8)
                v = types.decode(t.type, raw, t.shape).astype(np.float32)
                if v.size != int(np.prod(shape)):
                    raise ValueError(f"{path}: {full} has shape {t.shape}, this layer needs {shape}")
                layer[name] = v.reshape(shape)
            twin.weights[il] = layer
    return twin
