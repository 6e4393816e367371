"""llama.cpp's delta-net conv-state rollback (the seed change), rebuilt from Python.

With `n_rs_seq > 0` the recurrent memory keeps K = n_rs_seq + 1 rollback slots of every
sequence's conv window. Each layer's conv cache `conv_states_all` is
[n_embd_r = (d_conv-1)*channels, mem_size*K]: row `slot*mem_size + cell`.

`build_conv_state` mirrors `llm_build_delta_net_base::build_conv_state`: gather each
sequence's state (get_rows by `s_copy`), concat it with the new tokens, write the rollback
windows into the cache, return the conv input. The write has three strategies:

- `host_index` (the seed): one set_rows per layer into the permuted `slots` view, with the
  I32 index `rs_s_slot_rev` = {Kw-1, ..., 0}, Kw = min(n_seq_tokens+1, K), filled on the
  host, created once per graph by the first layer and shared by all; slots >= Kw unwritten;
- `device_index` (what the seed replaced): the same set_rows, the index computed on the
  device as argsort(arange(Kw), DESC);
- `copies` (before the seed): K copies, the window start clamped at 0, so when a ubatch has
  fewer than K-1 tokens the slots >= Kw receive the oldest window (the gathered state)
  instead of being left alone.

`n_rs_seq == 0` is a single copy into slot 0, for every strategy.

`DeltaNetConv` drives ubatches the way llama.cpp does: a graph built for one ubatch shape
(n_seq_tokens, n_seqs, kv_head) is reused for the next ubatch of that shape by setting its
inputs again, and rebuilt when the shape changes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from pyggml import types
from pyggml.backend import Backend
from pyggml.context import Context
from pyggml.graph import Graph
from pyggml.runner import Runner
from pyggml.tensor import Tensor
from pyggml.types import SortOrder, Type, TypeLike

if TYPE_CHECKING:
    from pyggml.meta import Split

STRATEGIES = ("host_index", "device_index", "copies")
SLOT_INDEX_NAME = "rs_s_slot_rev"


class RecurrentMemory:
    """The conv caches of every layer, allocated once in a buffer of `backend` and cleared to 0.

    Each layer's conv cache `cache_conv_l{il}` has ne `[n_embd_r, mem_size*K]` (ggml order; NumPy shape
    `(mem_size*K, n_embd_r)`), `n_embd_r = (d_conv-1)*channels`, K = n_rs_seq + 1: row `slot*mem_size +
    cell`. With `n_embd_s > 0`, the recurrent-state caches `cache_ssm_l{il}` `[n_embd_s, mem_size*K]` too,
    same rows.

    Args:
        backend: the backend whose buffer holds the caches.
        n_layer: layers (>= 1).
        d_conv: the convolution's width (>= 2); a window holds d_conv - 1 columns.
        channels: conv channels (>= 1).
        mem_size: cells, one per sequence (>= 1).
        n_rs_seq: rollback snapshots (>= 0): K = n_rs_seq + 1 slots per cell.
        type: the caches' type, F32 or F16.
        n_embd_s: the recurrent state's row size (0: no state caches).

    Attributes:
        conv_states_all: each layer's conv cache (Tensor).
        ssm_states_all: each layer's state cache (Tensor), or [].
        K: rollback slots per cell.
        n_embd_r: a conv cache row's size, (d_conv - 1) * channels.
        buffer: the Buffer holding them.

    Raises:
        ValueError: a size out of range.
        TypeError: a type other than F32 or F16.
        GGMLError: no memory for the caches.
    """

    def __init__(
        self,
        backend: Backend,
        n_layer: int,
        d_conv: int,
        channels: int,
        mem_size: int,
        n_rs_seq: int,
        type: TypeLike = "f32",
        n_embd_s: int = 0,
    ) -> None:
        if n_layer < 1 or d_conv < 2 or channels < 1 or mem_size < 1 or n_rs_seq < 0 or n_embd_s < 0:
            raise ValueError(
                "RecurrentMemory needs n_layer >= 1, d_conv >= 2, channels >= 1, "
                f"mem_size >= 1, n_rs_seq >= 0, n_embd_s >= 0 (got {n_layer}, {d_conv}, {channels}, "
                f"{mem_size}, {n_rs_seq}, {n_embd_s})"
            )
        self.type = types.as_type(type)
        if self.type not in (Type.F32, Type.F16):
            raise TypeError(f"conv cache type must be F32 or F16, got {self.type.name}")
        self.n_layer, self.d_conv, self.channels = n_layer, d_conv, channels
        self.mem_size, self.n_rs_seq = mem_size, n_rs_seq
        self.K = n_rs_seq + 1
        self.n_embd_r, self.n_embd_s = (d_conv - 1) * channels, n_embd_s
        self.ctx = Context(n_tensors=2 * n_layer + 1)
        self.conv_states_all = [
            self.ctx.new_tensor_2d(self.type, self.n_embd_r, mem_size * self.K, name=f"cache_conv_l{il}")
            for il in range(n_layer)
        ]
        self.ssm_states_all = (
            [
                self.ctx.new_tensor_2d(self.type, n_embd_s, mem_size * self.K, name=f"cache_ssm_l{il}")
                for il in range(n_layer)
            ]
            if n_embd_s
            else []
        )
        self.buffer = backend.alloc_tensors(self.ctx)
        self.buffer.clear(0)

    @property
    def n_rows(self) -> int:
        """Rows of each layer's conv cache: `mem_size` cells times K rollback slots."""
        return self.mem_size * self.K

    def read(self, il: int) -> np.ndarray:
        """Layer `il`'s conv cache as stored.

        Args:
            il: the layer.

        Returns:
            A copy of NumPy shape (mem_size*K, n_embd_r), of the cache's dtype.
        """
        return self.conv_states_all[il].numpy()

    def write(self, il: int, values: np.ndarray) -> None:
        """Overwrite layer `il`'s conv cache.

        Args:
            il: the layer.
            values: an array of NumPy shape (mem_size*K, n_embd_r).

        Raises:
            ValueError: values of another size, or that do not convert exactly (`Tensor.set`).
        """
        self.conv_states_all[il].set(values)


@dataclass
class Ubatch:
    """One ubatch: n_seqs sequences of n_seq_tokens new tokens each.

    Attributes:
        qkv: per layer, the new tokens' conv channels, NumPy shape (n_seqs, n_seq_tokens, channels)
            (ggml's qkv_mixed, ne `[channels, n_seq_tokens, n_seqs]`).
        s_copy: per sequence, the cache row its state is read from.
        kv_head: the first cell written: the windows go to cells kv_head .. kv_head+n_seqs-1.
    """

    qkv: list[np.ndarray]
    s_copy: list[int]
    kv_head: int

    @property
    def n_seqs(self) -> int:
        """How many sequences the ubatch holds."""
        return self.qkv[0].shape[0]

    @property
    def n_seq_tokens(self) -> int:
        """How many new tokens each sequence brings."""
        return self.qkv[0].shape[1]


@dataclass
class GraphInputs:
    """llama.cpp's `llm_graph_input_rs`: the per-ubatch inputs, and the slot index created by the first layer.

    Attributes:
        s_copy: I32 ne `[n_seqs]`: the cache row each sequence's state is read from.
        s_slot_rev: `host_index`'s I32 index `rs_s_slot_rev` `{Kw-1, ..., 0}`, filled on the host, shared
            by the layers; None until the first layer makes it.
        device_slot_rev: `device_index`'s index, argsort(arange(Kw), DESC) on the device, shared by the
            layers.
    """

    s_copy: Tensor
    s_slot_rev: Tensor | None = None
    device_slot_rev: Tensor | None = None  # device_index: argsort(arange), shared by the layers


def windows_written(n_seq_tokens: int, K: int) -> int:
    """Kw: how many rollback windows exist in a ubatch, `min(n_seq_tokens + 1, K)`.

    Args:
        n_seq_tokens: new tokens per sequence.
        K: rollback slots.

    Returns:
        Kw.
    """
    return min(n_seq_tokens + 1, K)


def build_conv_state(
    ctx: Context,
    graph: Graph,
    inp: GraphInputs,
    mem: RecurrentMemory,
    qkv_mixed: Tensor,
    kv_head: int,
    il: int,
    strategy: str,
) -> Tensor:
    """What llama.cpp's `llm_build_delta_net_base::build_conv_state` builds, for one layer.

    Gathers each sequence's state (get_rows by `s_copy`), concatenates it with the new tokens, writes the
    rollback windows into the cache (`build_conv_write`, added to `graph`) and returns the conv input.

    Args:
        ctx: the graph's context.
        graph: the graph the cache write is added to.
        inp: the graph's inputs (the slot index is made by the first layer).
        mem: the recurrent memory.
        qkv_mixed: ne `[channels, n_seq_tokens, n_seqs]` (ggml order): the new tokens.
        kv_head: the first cell written.
        il: the layer.
        strategy: "host_index" (the seed), "device_index" or "copies" (see the module's doc).

    Returns:
        The conv input, ne `[d_conv-1+n_seq_tokens, channels, n_seqs]`.

    Raises:
        ValueError: an unknown strategy, or cells outside `mem_size`.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    conv_states_all = mem.conv_states_all[il]
    d, C, n_seqs = mem.d_conv, mem.channels, qkv_mixed.ne[2]
    if kv_head < 0 or kv_head + n_seqs > mem.mem_size:
        raise ValueError(f"cells kv_head={kv_head} .. {kv_head + n_seqs - 1} must lie inside mem_size={mem.mem_size}")

    # build_rs: gather the states of this ubatch's sequences
    conv_states = ctx.get_rows(conv_states_all, inp.s_copy).set_name(f"conv_states-{il}")
    conv_states = ctx.reshape_3d(conv_states, d - 1, C, n_seqs)
    qkv_t = ctx.transpose(qkv_mixed)
    conv_input = ctx.concat(conv_states, qkv_t, 0).set_name(f"conv_input-{il}")

    build_conv_write(ctx, graph, inp, mem, conv_input, kv_head, il, strategy)
    return conv_input


def build_conv_write(
    ctx: Context,
    graph: Graph,
    inp: GraphInputs,
    mem: RecurrentMemory,
    conv_input: Tensor,
    kv_head: int,
    il: int,
    strategy: str,
) -> None:
    """The rollback write alone: the conv input's windows into layer `il`'s cache, added to `graph`.

    Args:
        ctx: the graph's context.
        graph: the graph the write is added to.
        inp: the graph's inputs (the slot index is made by the first layer).
        mem: the recurrent memory.
        conv_input: ne `[d_conv-1+n, channels, n_seqs]` (ggml order).
        kv_head: the first cell written.
        il: the layer.
        strategy: "host_index", "device_index" or "copies".
    """
    conv_states_all = mem.conv_states_all[il]
    d, C, n_seqs = mem.d_conv, mem.channels, conv_input.ne[2]
    row_count = (d - 1) * C
    row_size = types.row_size(conv_states_all.type, row_count)
    n = conv_input.ne[0] - (d - 1)  # n_seq_tokens
    K = mem.K

    def window_copy(s_idx: int, s_slot: int):
        last = ctx.view_3d(
            conv_input, d - 1, C, n_seqs, conv_input.nb[1], conv_input.nb[2], types.row_size(conv_input.type, s_idx)
        )
        update = ctx.view_2d(
            conv_states_all, row_count, n_seqs, conv_states_all.nb[1], (s_slot * mem.mem_size + kv_head) * row_size
        )
        graph.build_forward_expand(ctx.cpy(last, update))

    if mem.n_rs_seq == 0:
        window_copy(n, 0)
    elif strategy == "copies":
        for t in range(1, K + 1):
            window_copy(max(0, n - K + t), K - t)
    else:
        Kw = windows_written(n, K)
        if strategy == "host_index":
            if inp.s_slot_rev is None:
                inp.s_slot_rev = ctx.new_tensor_1d(Type.I32, Kw, name=SLOT_INDEX_NAME).set_input()
            index = inp.s_slot_rev
        else:
            if inp.device_slot_rev is None:
                inp.device_slot_rev = ctx.argsort(ctx.arange(0, Kw, 1), SortOrder.DESC).set_name("slot_rev_device")
            index = inp.device_slot_rev
        # window w starts at column n-(Kw-1)+w (ascending time) and is rollback slot Kw-1-w;
        # the windows overlap: [d-1, Kw, C, n_seqs] with a one-element stride between windows
        es = conv_input.element_size
        windows = ctx.view_nd(
            conv_input,
            [d - 1, Kw, C, n_seqs],
            [es, es, conv_input.nb[1], conv_input.nb[2]],
            types.row_size(conv_input.type, n - (Kw - 1)),
        )
        # [d-1, slot, channel, seq] view of this ubatch's cells
        slots = ctx.view_4d(
            conv_states_all,
            d - 1,
            K,
            C,
            n_seqs,
            mem.mem_size * row_size,
            types.row_size(conv_states_all.type, d - 1),
            conv_states_all.nb[1],
            kv_head * row_size,
        )
        graph.build_forward_expand(ctx.set_rows(slots, windows, index))


class QkvProjection:
    """Identity projection weights `w_qkv-{il}`, ne `[channels, channels]`, one per layer.

    In the model, qkv_mixed comes out of a projection whose weight is split by output channels over a meta
    device's devices, so qkv_mixed arrives split like the conv cache. With identity weights the projection
    is exact, so the NumPy model stays bit-exact.

    Args:
        backend: the backend whose buffer holds the weights.
        n_layer: layers.
        channels: conv channels.

    Attributes:
        w_qkv: the weights, one Tensor per layer.
        buffer: the Buffer holding them.
    """

    def __init__(self, backend: Backend, n_layer: int, channels: int) -> None:
        self.ctx = Context(n_tensors=n_layer + 1)
        self.w_qkv = [self.ctx.new_tensor_2d(Type.F32, channels, channels, name=f"w_qkv-{il}") for il in range(n_layer)]
        self.buffer = backend.alloc_tensors(self.ctx)
        for w in self.w_qkv:
            w.set(np.eye(channels, dtype=np.float32))


def split_policy(d_conv: int, n_devices: int) -> list[tuple[str, Callable[[Tensor], Split]]]:
    """A llama.cpp-like meta split of the seed's static tensors.

    The conv caches by channels (whole windows of d_conv-1 values) on axis 0, the qkv projections by output
    channel (axis 1).

    Args:
        d_conv: the convolution's width.
        n_devices: the meta device's device count.

    Returns:
        `(name pattern, rule)` pairs for `Runner.set_policy`.
    """
    from pyggml.meta import Split

    return [
        ("cache_conv_l*", lambda t: Split.even(0, t.ne[0], n_devices, d_conv - 1)),
        ("w_qkv-*", lambda t: Split.even(1, t.ne[1], n_devices)),
    ]


class ConvStateGraph:
    """The graph of one ubatch shape: every layer's `build_conv_state`, its inputs and outputs.

    qkv_mixed is an input per layer, or, with a QkvProjection, the projection of an input `x_mixed` (the
    values of the ubatch's qkv either way).

    Args:
        mem: the recurrent memory.
        n_seq_tokens: new tokens per sequence.
        n_seqs: sequences.
        kv_head: the first cell written.
        strategy: "host_index", "device_index" or "copies".
        projection: identity weights to project through, or None.

    Attributes:
        key: `(n_seq_tokens, n_seqs, kv_head)`: the shape the graph serves.
        graph: the Graph.
        inp: its GraphInputs.
        qkv: the per-layer input tensors.
        conv_input: the per-layer outputs.

    Raises:
        ValueError: an unknown strategy, or cells outside `mem_size`.
    """

    def __init__(
        self,
        mem: RecurrentMemory,
        n_seq_tokens: int,
        n_seqs: int,
        kv_head: int,
        strategy: str,
        projection: QkvProjection | None = None,
    ) -> None:
        self.key = (n_seq_tokens, n_seqs, kv_head)
        self.mem = mem
        self.ctx = Context(n_tensors=64 + mem.n_layer * (16 + 4 * mem.K))
        self.graph = Graph(self.ctx, size=max(256, mem.n_layer * (16 + 4 * mem.K)))
        self.inp = GraphInputs(self.ctx.new_tensor_1d(Type.I32, n_seqs, name="inp_s_copy").set_input())
        name = "x_mixed" if projection else "qkv_mixed"
        self.qkv = [
            self.ctx.new_tensor_3d(Type.F32, mem.channels, n_seq_tokens, n_seqs, name=f"{name}-{il}").set_input()
            for il in range(mem.n_layer)
        ]
        self.conv_input: list[Tensor] = []
        for il in range(mem.n_layer):
            qkv_mixed = self.qkv[il]
            if projection:
                qkv_mixed = self.ctx.mul_mat(projection.w_qkv[il], qkv_mixed).set_name(f"qkv_mixed-{il}")
            out = build_conv_state(self.ctx, self.graph, self.inp, mem, qkv_mixed, kv_head, il, strategy)
            self.graph.build_forward_expand(out)
            self.conv_input.append(out.set_output())

    def set_inputs(self, ub: Ubatch) -> None:
        """llama.cpp's `llm_graph_input_rs::set_input`: write s_copy, the layers' qkv, and `rs_s_slot_rev` on the host.

        Args:
            ub: the ubatch (of this graph's shape).

        Raises:
            RuntimeError: `rs_s_slot_rev` is not in host memory.
            ValueError: values that do not fit the inputs.
        """
        self.inp.s_copy.set(np.asarray(ub.s_copy, dtype=np.int32))
        for t, x in zip(self.qkv, ub.qkv):
            t.set(np.asarray(x, dtype=np.float32))
        s = self.inp.s_slot_rev
        if s is not None:
            if not s.is_host:
                raise RuntimeError(
                    f"{SLOT_INDEX_NAME} is not in host memory (buffer {s.buffer}); it must be filled on the host"
                )
            s.set(np.arange(s.ne[0] - 1, -1, -1, dtype=np.int32))


@dataclass
class DeltaNetConv:
    """Runs ubatches through the conv-state graphs with llama.cpp's graph reuse.

    A graph built for one ubatch shape (n_seq_tokens, n_seqs, kv_head) is reused for the next ubatch of
    that shape by setting its inputs again, and rebuilt when the shape changes.

    Attributes:
        mem: the recurrent memory.
        runner: the Runner that computes.
        strategy: "host_index", "device_index" or "copies".
        projection: identity weights to project through, or None.
        graph: the current ConvStateGraph.
        builds: graphs built so far.
        reuses: ubatches that reused the current graph.
    """

    mem: RecurrentMemory
    runner: Runner
    strategy: str = "host_index"
    projection: QkvProjection | None = None
    graph: ConvStateGraph | None = None
    builds: int = 0
    reuses: int = 0

    def step(self, ub: Ubatch) -> list[np.ndarray]:
        """Process one ubatch: write its rollback windows into the caches.

        Args:
            ub: the ubatch.

        Returns:
            Each layer's conv input, NumPy shape (n_seqs, channels, d_conv-1+n_seq_tokens).

        Raises:
            ValueError: qkv for another number of layers, or s_copy rows out of range.
            GraphError: the runner refuses the graph.
        """
        if len(ub.qkv) != self.mem.n_layer:
            raise ValueError(f"ubatch has qkv for {len(ub.qkv)} layers, memory has {self.mem.n_layer}")
        if len(ub.s_copy) != ub.n_seqs or not all(0 <= c < self.mem.n_rows for c in ub.s_copy):
            raise ValueError(f"s_copy must hold {ub.n_seqs} rows in 0..{self.mem.n_rows - 1}, got {ub.s_copy}")
        key = (ub.n_seq_tokens, ub.n_seqs, ub.kv_head)
        if self.graph is not None and self.graph.key == key:
            self.reuses += 1
        else:
            self.graph = ConvStateGraph(self.mem, *key, self.strategy, self.projection)
            self.runner.allocate(self.graph.graph, self.graph.conv_input)
            self.builds += 1
        self.graph.set_inputs(ub)
        self.runner.compute(self.graph.graph)
        return [t.numpy().reshape(ub.n_seqs, self.mem.channels, -1) for t in self.graph.conv_input]
