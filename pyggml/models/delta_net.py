"""The seed's layer whole: a Qwen3-Next-style gated delta-net layer whose two recurrent states
roll back together, built from Python with checked ops, llama.cpp's way.

One layer (llama.cpp's `build_layer_attn_linear` with `build_recurrent_attn`), for x of ubatch
shape [n_embd, n_seq_tokens, n_seqs]:

    h        = rms_norm(x) * attn_norm
    qkv      = attn_qkv @ h                  [conv channels]   (q, k, v of every key head)
    z        = attn_gate @ h                 [n_v_heads * S]
    beta     = sigmoid(b),  g = softplus(a + ssm_dt) * ssm_a   (b, a from ssm_ba @ h)
    conv     = silu(ssm_conv(conv state ++ qkv, ssm_conv1d))   (the seed's conv-state write)
    q, k     = l2_norm(q), l2_norm(k);  v
    o, snaps = gated_delta_net(q, k, v, g, beta, recurrent state, K)
    y        = x + ssm_out @ (rms_norm(o) * ssm_norm * silu(z))

Rollback (`n_rs_seq` = K-1 > 0): both caches keep K slots per cell, row `slot*mem_size + cell`.
A ubatch of n tokens writes the conv windows into slots 0..min(n+1, K)-1 (conv_state.py: the
seed's host-filled `rs_s_slot_rev`, or the other strategies) and the recurrent-state snapshots
gated_delta_net returns into slots 0..min(n, K)-1 (slot j: the state j tokens before the last,
one copy: the op's snapshot order is the cache's slot order). Dropping the last j tokens of a
sequence means reading row `j*mem_size + cell` of both caches in the next ubatch (`s_copy`).
Slot min(n, K) of the conv cache exists but the recurrent state's does not: `DeltaNet.step`
refuses a row whose slot the last ubatch at that cell did not write in both caches, so a
restored recurrent state never sits next to a conv history captured for another token.

Layouts (`DeltaNetConfig.layout`):
- "grouped", pyggml's own: the conv channels grouped by key head, [q_g | k_g | v_g] for each key head
  g (the order of Qwen3-Next's checkpoint `in_proj_qkvz`); value head h reads key head h // r. With this
  order a split by key-head groups is one contiguous range of every projection, of the conv cache and
  of the recurrent state, which is how a meta device splits the layer (`split_policy`): heads across
  devices, norms mirrored, ssm_out's partial sums reduced.
- "qwen3next", llama.cpp's Qwen3-Next (src/models/qwen3next.cpp): llama.cpp's converter regroups the
  channels into [q | k | v] (all key heads' q, then k, then every value head); `ssm_ba` keeps
  [beta_g | alpha_g] per key head; value head h reads key head h // r (llama.cpp repeat-interleaves q
  and k before the op).
- "qwen35", llama.cpp's Qwen3.5 (src/models/qwen35.cpp): [q | k | v] too, separate `ssm_beta` and
  `ssm_alpha` projections (one value per value head), and value head h reads key head h % n_k_heads:
  q and k go to the op with n_k_heads heads and ggml_gated_delta_net broadcasts them that way, as
  llama.cpp's fused path does (its unfused path tiles them with ggml_repeat_4d, the same values).
Value heads n_v_heads = r * n_k_heads. ggml's op needs S_k == S_v == S.
`pyggml.models.llama_twin` loads a layer's weights from a llama.cpp GGUF file and compares this layer
with llama.cpp's own.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from pyggml import types
from pyggml._args import integer
from pyggml.backend import Backend
from pyggml.context import Context
from pyggml.graph import Graph
from pyggml.models.conv_state import STRATEGIES, GraphInputs, RecurrentMemory, build_conv_state
from pyggml.runner import Runner
from pyggml.tensor import Tensor
from pyggml.types import Type, TypeLike

if TYPE_CHECKING:
    from pyggml.meta import Split


LAYOUTS = ("grouped", "qwen3next", "qwen35")


@dataclass(frozen=True)
class DeltaNetConfig:
    """The sizes and layout of a gated delta-net model.

    Frozen; checked when made.

    Attributes:
        n_embd: the embedding width.
        n_layer: layers.
        head_dim: S, the key and value head size (Vulkan computes S in {16, 32, 64, 128}).
        n_k_heads: key heads.
        n_v_heads: value heads, a multiple of n_k_heads.
        d_conv: the short convolution's width (>= 2).
        eps: the norms' epsilon, a float in (0, 1).
        layout: the channel order and head broadcast: one of `LAYOUTS` ("grouped", "qwen3next",
            "qwen35"; see the module's doc).

    Raises:
        ValueError: a size out of range, n_v_heads not a multiple of n_k_heads, a bad eps or layout.
        TypeError: a size that is not an integer.
    """

    n_embd: int = 32
    n_layer: int = 2
    head_dim: int = 16  # S: key and value head size (Vulkan computes S in {16, 32, 64, 128})
    n_k_heads: int = 2
    n_v_heads: int = 2  # a multiple of n_k_heads
    d_conv: int = 4
    eps: float = 1e-6
    layout: str = "grouped"  # the channel order and head broadcast: one of LAYOUTS (module docstring)

    def __post_init__(self):
        for name, lo in (
            ("n_embd", 1),
            ("n_layer", 1),
            ("head_dim", 1),
            ("n_k_heads", 1),
            ("n_v_heads", 1),
            ("d_conv", 2),
        ):
            integer(f"DeltaNetConfig: {name}", getattr(self, name), lo, 1 << 20)
        if self.n_v_heads % self.n_k_heads:
            raise ValueError(
                f"DeltaNetConfig: n_v_heads ({self.n_v_heads}) must be a multiple of n_k_heads ({self.n_k_heads})"
            )
        if not (isinstance(self.eps, float) and 0 < self.eps < 1):
            raise ValueError(f"DeltaNetConfig: eps must be a float in (0, 1), got {self.eps!r}")
        if self.layout not in LAYOUTS:
            raise ValueError(f"DeltaNetConfig: layout must be one of {LAYOUTS}, got {self.layout!r}")

    @property
    def ratio(self) -> int:
        """r: value heads per key head."""
        return self.n_v_heads // self.n_k_heads

    @property
    def group(self) -> int:
        """The conv channels of one key head: its q and k (S each) and its r value heads."""
        return (2 + self.ratio) * self.head_dim

    @property
    def conv_channels(self) -> int:
        """The channels the short conv runs over (the width of qkv_mixed): n_k_heads * group."""
        return self.n_k_heads * self.group

    @property
    def value_dim(self) -> int:
        """The values' width: n_v_heads * head_dim."""
        return self.n_v_heads * self.head_dim

    @property
    def n_embd_r(self) -> int:
        """One cell's conv state: (d_conv - 1) * conv_channels values (llama.cpp's n_embd_r)."""
        return (self.d_conv - 1) * self.conv_channels

    @property
    def n_embd_s(self) -> int:
        """One cell's recurrent state: head_dim * head_dim * n_v_heads values (llama.cpp's n_embd_s)."""
        return self.head_dim * self.head_dim * self.n_v_heads

    def weight_shapes(self) -> dict[str, tuple[int, ...]]:
        """Each layer's weights and their shapes.

        Returns:
            name -> NumPy shape (ggml's ne reversed), e.g. "attn_qkv": (conv_channels, n_embd).
        """
        E, C, V, nv = self.n_embd, self.conv_channels, self.value_dim, self.n_v_heads
        if self.layout == "qwen35":  # separate beta and alpha projections
            ba = {"ssm_beta": (nv, E), "ssm_alpha": (nv, E)}
        else:  # one, [beta_g | alpha_g] for each key head g
            ba = {"ssm_ba": (2 * nv, E)}
        return {
            "attn_norm": (E,),
            "attn_qkv": (C, E),
            "attn_gate": (V, E),
            **ba,
            "ssm_dt": (self.n_v_heads,),
            "ssm_a": (self.n_v_heads,),
            "ssm_conv1d": (C, self.d_conv),
            "ssm_norm": (self.head_dim,),
            "ssm_out": (E, V),
        }


def weight_name(il: int, name: str) -> str:
    """Layer `il`'s tensor name as GGUF files spell it: `blk.<il>.<name>`.

    Args:
        il: the layer.
        name: the weight's name, e.g. "attn_qkv".

    Returns:
        The tensor name.
    """
    return f"blk.{il}.{name}"


def random_weights(config: DeltaNetConfig, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """Random weights of every layer, F32, scaled so activations stay of order one (ssm_a < 0: a decay).

    Args:
        config: the model's config.
        seed: the NumPy generator's seed.

    Returns:
        One dict per layer: name -> array of `weight_shapes`' NumPy shape.
    """
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(config.n_layer):
        w = {}
        for name, shape in config.weight_shapes().items():
            if name in ("attn_norm", "ssm_norm"):
                v = 1 + 0.1 * rng.standard_normal(shape)
            elif name == "ssm_a":
                v = -np.exp(rng.uniform(-1.0, 0.5, shape))
            elif name == "ssm_dt":
                v = rng.uniform(-1.0, 1.0, shape)
            else:
                v = rng.standard_normal(shape) / np.sqrt(shape[-1])
            w[name] = v.astype(np.float32)
        out.append(w)
    return out


class DeltaNetWeights:
    """The layers' weights in a buffer of `backend`, named llama.cpp's way (blk.{il}.attn_qkv, ...).

    Args:
        backend: the backend whose buffer holds them (a meta backend splits them by its policy).
        config: the model's config.
        values: one dict per layer, name -> array of `weight_shapes`' NumPy shape.

    Attributes:
        layers: one dict per layer, name -> Tensor.
        buffer: the Buffer holding them.

    Raises:
        ValueError: values for another number of layers, other names, or other shapes.
    """

    def __init__(self, backend: Backend, config: DeltaNetConfig, values: list[dict[str, np.ndarray]]) -> None:
        if len(values) != config.n_layer:
            raise ValueError(f"weights for {len(values)} layers, the config has {config.n_layer}")
        shapes = config.weight_shapes()
        self.ctx = Context(n_tensors=len(shapes) * config.n_layer + 1)
        self.layers: list[dict[str, Tensor]] = []
        for il, layer in enumerate(values):
            if set(layer) != set(shapes):
                raise ValueError(f"layer {il}: weights must be {sorted(shapes)}, got {sorted(layer)}")
            self.layers.append({n: self.ctx.tensor(Type.F32, shapes[n], weight_name(il, n)) for n in shapes})
        self.buffer = backend.alloc_tensors(self.ctx)
        for il, layer in enumerate(values):
            for n, v in layer.items():
                v = np.asarray(v)
                if v.shape != shapes[n]:
                    raise ValueError(f"{weight_name(il, n)}: shape {v.shape}, expected {shapes[n]}")
                self.layers[il][n].set(v.astype(np.float32))


def split_policy(config: DeltaNetConfig, n_devices: int) -> list[tuple[str, Callable[[Tensor], Split]]]:
    """Tensor parallelism of the layer for a meta device.

    The "grouped" layout: key-head groups across devices (with their value heads) for the projections,
    the conv weights and cache, the recurrent-state cache; norms mirrored. llama.cpp's layouts: llama.cpp's
    own split (`llama_split_policy`).

    Args:
        config: the model's config.
        n_devices: the meta device's device count.

    Returns:
        `(name pattern, rule)` pairs for `Runner.set_policy`.

    Raises:
        ValueError: fewer key heads than devices ("grouped").
    """
    from pyggml.meta import Split

    if config.layout != "grouped":
        return llama_split_policy(config, n_devices)
    if config.n_k_heads < n_devices:
        raise ValueError(
            f"a split over {n_devices} devices needs at least one key head per device (n_k_heads={config.n_k_heads})"
        )
    c, S, r, nk = config, config.head_dim, config.ratio, config.n_k_heads

    def even(axis, per_group):
        return lambda t: Split.even(axis, nk * per_group, n_devices, per_group)

    return [
        ("blk.*.attn_qkv", even(1, c.group)),
        ("blk.*.ssm_conv1d", even(1, c.group)),
        ("blk.*.attn_gate", even(1, r * S)),
        ("blk.*.ssm_ba", even(1, 2 * r)),
        ("blk.*.ssm_dt", even(0, r)),
        ("blk.*.ssm_a", even(0, r)),
        ("blk.*.ssm_out", even(0, r * S)),
        ("cache_conv_l*", even(0, (c.d_conv - 1) * c.group)),
        ("cache_ssm_l*", even(0, S * S * r)),
    ]


def llama_shares(extent: int, granularity: int, n_devices: int, rotation: int) -> list[int]:
    """One segment's share of each device as llama.cpp cuts it (`llama_meta_device_get_split_state`, no tensor_split given).

    Device (j + rotation) % n gets up to extent * (j+1) / n, rounded down to the granularity, the last one
    the rest.

    Args:
        extent: the segment's extent.
        granularity: shares are multiples of it (but the last).
        n_devices: the device count.
        rotation: how far the shares are rotated over the devices.

    Returns:
        Each device's share, in device order.
    """
    sizes, low = [0] * n_devices, 0
    for j in range(n_devices - 1):
        high = extent * (j + 1) // n_devices
        high -= high % granularity
        sizes[(j + rotation) % n_devices] = high - low
        low = high
    sizes[(n_devices - 1 + rotation) % n_devices] = extent - low
    return sizes


def llama_split_table(config: DeltaNetConfig) -> dict[str, tuple[int, list[tuple[int, int]], int]]:
    """llama.cpp's split of one recurrent layer of Qwen3-Next ("qwen3next") or Qwen3.5 ("qwen35"), by pyggml's tensor names.

    llama.cpp's `cache_r_l*` is `cache_conv_l*` here, `cache_s_l*` is `cache_ssm_l*`. From
    src/llama-model.cpp: get_tensor_config (the axes), get_split_segments, get_split_granularity (F32
    weights: llama.cpp rounds shares to lcm(128, head_dim) channels).

    Args:
        config: the model's config, of layout "qwen3next" or "qwen35".

    Returns:
        name -> (axis in ggml's order, segments [(extent, repeats)], granularity of each segment's shares).

    Raises:
        ValueError: another layout.
    """
    c, S, nk, r, dm1 = config, config.head_dim, config.n_k_heads, config.ratio, config.d_conv - 1
    kd, vd, nv = nk * S, config.value_dim, config.n_v_heads
    g = math.lcm(128, S)
    if c.layout == "qwen3next":
        # Qwen 3 Next's value head h reads key head h // r: v split on its own, as one segment
        qkv = [(kd, 2), (vd, 1)]
        return {
            "attn_qkv": (1, qkv, g),
            "ssm_conv1d": (1, qkv, g),
            "attn_gate": (1, [(vd, 1)], g),
            "ssm_ba": (1, [(2 * nv, 1)], 2 * (g // S)),
            "ssm_dt": (0, [(nv, 1)], g // S),
            "ssm_a": (0, [(nv, 1)], g // S),
            "ssm_out": (0, [(vd, 1)], g),
            "cache_conv": (0, [(kd * dm1, 2), (vd * dm1, 1)], g * dm1),
            "cache_ssm": (0, [(S * S * nv, 1)], g * S),
        }
    if c.layout == "qwen35":
        # Qwen 3.5's value head h reads key head h % n_k_heads: v and everything per value head split as
        # r repetitions of the key heads' split
        return {
            "attn_qkv": (1, [(kd, 2 + r)], g),
            "ssm_conv1d": (1, [(kd, 2 + r)], g),
            "attn_gate": (1, [(kd, r)], g),
            "ssm_beta": (1, [(nk, r)], g // S),
            "ssm_alpha": (1, [(nk, r)], g // S),
            "ssm_dt": (0, [(nk, r)], g // S),
            "ssm_a": (0, [(nk, r)], g // S),
            "ssm_out": (0, [(kd, r)], g),
            "cache_conv": (0, [(kd * dm1, 2 + r)], g * dm1),
            "cache_ssm": (0, [(nk * S * S, r)], g * S),
        }
    raise ValueError(f"llama.cpp splits the qwen3next and qwen35 layouts, not {c.layout!r}")


def llama_split_policy(config: DeltaNetConfig, n_devices: int) -> list[tuple[str, Callable[[Tensor], Split]]]:
    """llama.cpp's tensor split of the layer (`llama_split_table`) as a pyggml policy.

    Layer il's shares are rotated by il % n_devices, as llama.cpp rotates them by the number of recurrent
    layers before il (all of this model's layers are recurrent); norms mirrored.

    Args:
        config: the model's config, of layout "qwen3next" or "qwen35".
        n_devices: the meta device's device count.

    Returns:
        `(name pattern, rule)` pairs for `Runner.set_policy`.

    Raises:
        ValueError: another layout.
    """
    from pyggml.meta import Split

    table = llama_split_table(config)

    def rule(name: str) -> Callable[[Tensor], Split]:
        axis, segments, granularity = table[name]

        def split(t: Tensor) -> Split:
            il = int(re.findall(r"\d+", t.name)[0])  # blk.<il>.* or cache_*_l<il>
            sizes = tuple(tuple(llama_shares(e, granularity, n_devices, il % n_devices)) for e, _ in segments)
            return Split(axis, sizes, tuple(nr for _, nr in segments))

        return split

    return [(f"blk.*.{n}", rule(n)) for n in table if not n.startswith("cache_")] + [
        ("cache_conv_l*", rule("cache_conv")),
        ("cache_ssm_l*", rule("cache_ssm")),
    ]


def l2_norm(ctx: Context, x: Tensor, eps: float) -> Tensor:
    """llama.cpp's `build_gdn_l2_norm`: x / sqrt(sum(x^2) + eps) along ne[0], as rms_norm(x, eps/n) / sqrt(n).

    Args:
        ctx: the graph's context.
        x: the tensor, normalized along ne[0] (NumPy's last axis).
        eps: the epsilon.

    Returns:
        The normalized tensor, x's shape.
    """
    n = x.ne[0]
    return ctx.scale(ctx.rms_norm(x, eps / n), 1.0 / float(np.sqrt(n)))


def build_layer(
    ctx: Context,
    graph: Graph,
    inp: GraphInputs,
    mem: RecurrentMemory,
    w: dict[str, Tensor],
    config: DeltaNetConfig,
    x: Tensor,
    kv_head: int,
    il: int,
    strategy: str,
) -> Tensor:
    """One gated delta-net layer with residual, added to `graph`.

    Writes both caches' rollback slots of cells kv_head .. kv_head+n_seqs-1.

    Args:
        ctx: the graph's context.
        graph: the graph the cache writes are added to.
        inp: the graph's inputs (`s_copy`, the slot index).
        mem: the recurrent memory (conv and state caches).
        w: the layer's weights, name -> Tensor.
        config: the model's config.
        x: ne `[n_embd, n_seq_tokens, n_seqs]` (ggml order): the layer's input.
        kv_head: the first cell written.
        il: the layer.
        strategy: the conv-state write's strategy (`pyggml.models.conv_state.STRATEGIES`).

    Returns:
        The layer's output, x's shape.
    """
    c = config
    S, nk, nv, r, G = c.head_dim, c.n_k_heads, c.n_v_heads, c.ratio, c.group
    nt, ns = x.ne[1], x.ne[2]
    h = ctx.mul(ctx.rms_norm(x, c.eps), w["attn_norm"])
    qkv_mixed = ctx.mul_mat(w["attn_qkv"], h).set_name(f"qkv_mixed-{il}")  # [C, nt, ns]
    z = ctx.reshape_4d(ctx.mul_mat(w["attn_gate"], h), S, nv, nt, ns)
    if c.layout == "qwen35":  # one beta and one alpha per value head, each its own projection
        beta = ctx.sigmoid(ctx.reshape_4d(ctx.mul_mat(w["ssm_beta"], h), 1, nv, nt, ns))
        alpha = ctx.reshape_3d(ctx.mul_mat(w["ssm_alpha"], h), nv, nt, ns)
    else:
        ba = ctx.reshape_4d(ctx.mul_mat(w["ssm_ba"], h), 2 * r, nk, nt, ns)  # [beta_g | alpha_g] per group
        fs = ba.element_size
        b = ctx.view_4d(ba, r, nk, nt, ns, ba.nb[1], ba.nb[2], ba.nb[3], 0)
        a = ctx.view_4d(ba, r, nk, nt, ns, ba.nb[1], ba.nb[2], ba.nb[3], r * fs)
        beta = ctx.reshape_4d(ctx.sigmoid(ctx.cont(b)), 1, nv, nt, ns)
        alpha = ctx.cont_3d(a, nv, nt, ns)
    gate = ctx.mul(ctx.softplus(ctx.add(alpha, w["ssm_dt"])), w["ssm_a"])
    gate = ctx.reshape_4d(gate, 1, nv, nt, ns)

    conv_input = build_conv_state(ctx, graph, inp, mem, qkv_mixed, kv_head, il, strategy)
    ssm_states_all = mem.ssm_states_all[il]
    state = ctx.get_rows(ssm_states_all, inp.s_copy).set_name(f"state-{il}")
    state = ctx.reshape_4d(state, S, S, nv, ns)

    conv = ctx.silu(ctx.ssm_conv(conv_input, w["ssm_conv1d"]))  # [C, nt, ns]
    cs = conv.element_size

    def heads(width, n, stride, offset):  # n heads of `width` channels, `stride` channels apart
        return ctx.view_4d(conv, width, n, nt, ns, stride * cs, conv.nb[1], conv.nb[2], offset * cs)

    if c.layout == "grouped":  # [q_g | k_g | v_g] for each key head g
        q, k, v = heads(S, nk, G, 0), heads(S, nk, G, S), heads(r * S, nk, G, 2 * S)
        if r > 1:
            v = ctx.reshape_4d(ctx.cont(v), S, nv, nt, ns)
    else:  # llama.cpp's [q | k | v]
        q, k, v = heads(S, nk, S, 0), heads(S, nk, S, nk * S), heads(S, nv, S, 2 * nk * S)
    q, k = l2_norm(ctx, q, c.eps), l2_norm(ctx, k, c.eps)
    if r > 1 and c.layout != "qwen35":  # qwen35: the op reads key head h % nk for value head h

        def repeat_interleave(t):  # value head h reads key head h // r
            t = ctx.reshape_4d(t, S, 1, nk, nt * ns)
            t = ctx.repeat_4d(t, S, r, nk, nt * ns)
            return ctx.reshape_4d(t, S, nv, nt, ns)

        q, k = repeat_interleave(q), repeat_interleave(k)

    K = mem.K
    out = ctx.gated_delta_net(q, k, v, gate, beta, state, K).set_name(f"gdn-{il}")
    fo = out.element_size
    o = ctx.view_4d(out, S, nv, nt, ns, S * fo, S * nv * fo, S * nv * nt * fo, 0)
    # the snapshots (slot j: the state j tokens before the last) into the cache's rollback slots
    D = c.n_embd_s
    n_written = min(nt, K)
    src = ctx.view_3d(out, D, ns, n_written, D * fo, D * ns * fo, S * nv * nt * ns * fo)
    row = types.row_size(ssm_states_all.type, D)
    dst = ctx.view_3d(ssm_states_all, D, ns, n_written, ssm_states_all.nb[1], mem.mem_size * row, kv_head * row)
    graph.build_forward_expand(ctx.cpy(src, dst))

    normed = ctx.mul(ctx.mul(ctx.rms_norm(o, c.eps), w["ssm_norm"]), ctx.silu(z))
    y = ctx.mul_mat(w["ssm_out"], ctx.reshape_3d(normed, nv * S, nt, ns))
    return ctx.add(x, y).set_name(f"layer_out-{il}")


class DeltaNetGraph:
    """The graph of one ubatch shape (n_seq_tokens, n_seqs, kv_head): every layer, input x, output.

    Args:
        config: the model's config.
        mem: the recurrent memory.
        weights: the layers' weights.
        n_seq_tokens: new tokens per sequence.
        n_seqs: sequences.
        kv_head: the first cell written.
        strategy: the conv-state write's strategy.

    Attributes:
        key: `(n_seq_tokens, n_seqs, kv_head)`.
        graph: the Graph.
        inp: its inputs (`s_copy`, the slot index).
        x: the input, ne `[n_embd, n_seq_tokens, n_seqs]`.
        out: the last layer's output, x's shape.
    """

    def __init__(
        self,
        config: DeltaNetConfig,
        mem: RecurrentMemory,
        weights: DeltaNetWeights,
        n_seq_tokens: int,
        n_seqs: int,
        kv_head: int,
        strategy: str,
    ) -> None:
        self.key = (n_seq_tokens, n_seqs, kv_head)
        per_layer = 96 + 4 * mem.K
        self.ctx = Context(n_tensors=64 + config.n_layer * per_layer)
        self.graph = Graph(self.ctx, size=max(512, 2 * config.n_layer * per_layer))
        self.inp = GraphInputs(self.ctx.new_tensor_1d(Type.I32, n_seqs, name="inp_s_copy").set_input())
        self.x = self.ctx.new_tensor_3d(Type.F32, config.n_embd, n_seq_tokens, n_seqs, name="inp_x").set_input()
        cur = self.x
        for il in range(config.n_layer):
            cur = build_layer(
                self.ctx, self.graph, self.inp, mem, weights.layers[il], config, cur, kv_head, il, strategy
            )
        self.out = cur.set_name("out").set_output()
        self.graph.build_forward_expand(self.out)

    def set_inputs(self, x: np.ndarray, s_copy: list[int]) -> None:
        """Fill the graph's inputs: x, s_copy, and the rollback slot index when the graph has one (Kw-1, ..., 0, on the host).

        Args:
            x: NumPy shape (n_seqs, n_seq_tokens, n_embd).
            s_copy: per sequence, the cache row its states are read from.

        Raises:
            ValueError: values that do not fit the inputs.
        """
        self.inp.s_copy.set(np.asarray(s_copy, dtype=np.int32))
        self.x.set(x)
        s = self.inp.s_slot_rev
        if s is not None:  # the seed's slot index, filled on the host
            s.set(np.arange(s.ne[0] - 1, -1, -1, dtype=np.int32))


class DeltaNet:
    """Layers of gated delta-net over a runner, with both caches and llama.cpp-style graph reuse.

    `step(x, s_copy, kv_head)`: x has NumPy shape (n_seqs, n_seq_tokens, n_embd); sequence s reads its
    states from row s_copy[s] of both caches (`row(cell, rollback)`) and writes them to cell kv_head+s. On
    a meta runner the split policy is set first (`split_policy`).

    Args:
        runner: the Runner to compute on.
        config: the model's config.
        K: rollback slots per cell, 1 to 64 (n_rs_seq + 1).
        mem_size: cells, 1 to 65536.
        cache_type: the caches' type, F32 or F16.
        strategy: the conv-state write's strategy (`pyggml.models.conv_state.STRATEGIES`).
        weights: one dict per layer, name -> array; None: `random_weights(config, seed)`.
        seed: the seed of the random weights.

    Attributes:
        config: the config.
        runner: the Runner.
        weights: the weights on the runner's device.
        weight_values: the weights as arrays.
        mem: the recurrent memory.
        K: rollback slots per cell.
        valid: per cell, how many slots hold a state in both caches.
        builds: graphs built so far.
        reuses: ubatches that reused the current graph.

    Raises:
        TypeError: `config` is not a DeltaNetConfig.
        ValueError: K, mem_size or strategy out of range, weights that do not fit.
    """

    def __init__(
        self,
        runner: Runner,
        config: DeltaNetConfig,
        K: int = 1,
        mem_size: int = 4,
        cache_type: TypeLike = "f32",
        strategy: str = "host_index",
        weights: list[dict[str, np.ndarray]] | None = None,
        seed: int = 0,
    ) -> None:
        if not isinstance(config, DeltaNetConfig):
            raise TypeError(f"DeltaNet: config must be a DeltaNetConfig, got {type(config).__name__}")
        K = integer("DeltaNet: K", K, 1, 64)
        mem_size = integer("DeltaNet: mem_size", mem_size, 1, 1 << 16)
        if strategy not in STRATEGIES:
            raise ValueError(f"DeltaNet: strategy must be one of {STRATEGIES}, got {strategy!r}")
        self.config, self.runner, self.strategy = config, runner, strategy
        if runner.meta is not None:  # before the static tensors are allocated
            runner.set_policy(split_policy(config, runner.n_devices))
        self.weight_values = weights if weights is not None else random_weights(config, seed)
        self.weights = DeltaNetWeights(runner.backend, config, self.weight_values)
        self.mem = RecurrentMemory(
            runner.backend,
            config.n_layer,
            config.d_conv,
            config.conv_channels,
            mem_size,
            K - 1,
            cache_type,
            n_embd_s=config.n_embd_s,
        )
        self.K = K
        self.valid = [1] * mem_size  # slots of each cell that hold a state in both caches (slot 0: zero at start)
        self.graph: DeltaNetGraph | None = None
        self.builds = self.reuses = 0

    @property
    def mem_size(self) -> int:
        """Cells of the recurrent memory (one per sequence it can hold)."""
        return self.mem.mem_size

    def row(self, cell: int, rollback: int = 0) -> int:
        """The cache row holding `cell`'s state with its last `rollback` tokens dropped.

        Args:
            cell: the cell, 0 .. mem_size - 1.
            rollback: tokens to drop, 0 .. K - 1.

        Returns:
            `rollback * mem_size + cell`.

        Raises:
            ValueError: an argument out of range, or a rollback deeper than the last ubatch at that cell wrote
                in both caches.
        """
        cell = integer("DeltaNet.row: cell", cell, 0, self.mem_size - 1)
        rollback = integer("DeltaNet.row: rollback", rollback, 0, self.K - 1)
        if rollback >= self.valid[cell]:
            raise ValueError(
                f"cell {cell} cannot roll back {rollback} token(s): the last ubatch there wrote "
                f"the states of its last {self.valid[cell]} token(s) (slots 0..{self.valid[cell] - 1} "
                f"of both caches, K={self.K})"
            )
        return rollback * self.mem_size + cell

    def step(self, x: np.ndarray, s_copy: list[int], kv_head: int) -> np.ndarray:
        """One ubatch through every layer.

        Args:
            x: NumPy shape (n_seqs, n_seq_tokens, n_embd).
            s_copy: per sequence, the cache row its states are read from (see `row`).
            kv_head: the first cell written.

        Returns:
            The last layer's output, NumPy shape (n_seqs, n_seq_tokens, n_embd).

        Raises:
            ValueError: x of another shape, kv_head or s_copy out of range, a row whose slot either cache lacks.
        """
        x = np.asarray(x, dtype=np.float32)
        if x.ndim != 3 or x.shape[2] != self.config.n_embd or 0 in x.shape:
            raise ValueError(f"DeltaNet.step: x must be (n_seqs, n_seq_tokens, {self.config.n_embd}), got {x.shape}")
        n_seqs, n_seq_tokens = x.shape[0], x.shape[1]
        kv_head = integer("DeltaNet.step: kv_head", kv_head, 0, self.mem_size - n_seqs)
        s_copy = [integer("DeltaNet.step: s_copy", r, 0, self.mem_size * self.K - 1) for r in s_copy]
        if len(s_copy) != n_seqs:
            raise ValueError(f"DeltaNet.step: s_copy needs one row per sequence ({n_seqs}), got {len(s_copy)}")
        for r in s_copy:
            self.row(r % self.mem_size, r // self.mem_size)  # raises for a slot either cache lacks
        key = (n_seq_tokens, n_seqs, kv_head)
        if self.graph is not None and self.graph.key == key:
            self.reuses += 1
        else:
            self.graph = DeltaNetGraph(self.config, self.mem, self.weights, *key, self.strategy)
            self.runner.allocate(self.graph.graph, [self.graph.out])
            self.builds += 1
        self.graph.set_inputs(x, s_copy)
        self.runner.compute(self.graph.graph)
        for cell in range(kv_head, kv_head + n_seqs):
            self.valid[cell] = min(n_seq_tokens, self.K)
        return self.graph.out.numpy().reshape(n_seqs, n_seq_tokens, self.config.n_embd)

    def states(self, il: int, row: int) -> tuple[np.ndarray, np.ndarray]:
        """Layer `il`'s states at a cache row, as float32.

        Args:
            il: the layer.
            row: the cache row (see `row`).

        Returns:
            `(conv, recurrent)`: conv of NumPy shape (conv_channels, d_conv-1) and recurrent (n_v_heads, S, S)
            in ggml's layout (element [h, j, i] is the memory's M[i, j]).

        Raises:
            ValueError: `row` out of range.
        """
        c = self.config
        row = integer("DeltaNet.states: row", row, 0, self.mem_size * self.K - 1)
        # numpy() drops trailing extents of 1: a one-row cache would come back one-dimensional
        conv = self.mem.read(il).reshape(-1, c.n_embd_r)[row].astype(np.float32)
        ssm = self.mem.ssm_states_all[il].numpy().reshape(-1, c.n_embd_s)[row].astype(np.float32)
        return conv.reshape(c.conv_channels, c.d_conv - 1), ssm.reshape(c.n_v_heads, c.head_dim, c.head_dim)
