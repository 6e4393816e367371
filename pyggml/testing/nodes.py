"""Every node of a computed graph against its oracle, fed the data the node actually received.

The op database says, for each ggml op kind, how to read a node back into an oracle call
(`OpSpec.reads` and `from_node`). After a graph is computed with its nodes kept
(`keep_nodes` before allocation: an allocator otherwise reuses a node's or an input's memory
once its readers are done), `check_nodes` reads each node's sources and output from memory, calls the
oracle on the sources and compares. A wrong node is found where it is, not at the graph's
end, and with the values it was given, so an error upstream does not spread into it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from pyggml import types
from pyggml._native import ffi, lib
from pyggml.graph import Graph
from pyggml.runner import Runner
from pyggml.tensor import Tensor
from pyggml.testing import opdb
from pyggml.testing.opdb import Node
from pyggml.testing.verdict import Comparison, compare, default_max_error

if TYPE_CHECKING:
    from pyggml.testing.cases import OpCase

# nodes that compute nothing of their own: their value is their source's memory seen another way
VIEW_KINDS = {"NONE", "VIEW", "RESHAPE", "PERMUTE", "TRANSPOSE"}


@dataclass
class NodeVerdict:
    index: int
    kind: str
    name: str
    comparison: Comparison | None  # None: no reader for this kind
    nmse_bound: float = 0.0

    @property
    def ok(self) -> bool:
        return self.comparison is None or self.comparison.ok


def kind(t: Tensor) -> str:
    """The node's op kind as ggml names it (unary and GLU ops by their own names)."""
    return ffi.string(lib.ggml_op_desc(t.ptr)).decode()


def keep_nodes(graph: Graph) -> None:
    """Flag every node and leaf as an output, so that no allocator gives its memory to a later node
    (ggml-alloc frees an input too once its last reader has run)."""
    for n in [*graph.nodes, *graph.leafs()]:
        lib.ggml_set_output(n.ptr)


def node_bound(s: opdb.OpSpec, t: Tensor, srcs: list[Tensor]) -> float:
    """The NMSE a node of `s` may show on any backend: 0 for an exact spec; else the loosest of the spec's
    bounds that hold for every backend and match the node's types (its own and its sources'); else the
    bound its precision earns."""
    if s.exact:
        return 0.0
    node_types = {x.type.name.lower() for x in [t, *srcs]}
    rules = [b.nmse for b in s.bounds if not b.backend and (not b.types or node_types & set(b.types))]
    if rules:
        return max(rules)
    from pyggml.testing.cases import default_nmse
    return default_nmse(node_types)


def values(t: Tensor) -> np.ndarray:
    """t's values as `Tensor.numpy()` gives them, and also for a strided view of a type NumPy has no dtype
    for (BF16, quantized) or outside host memory, which numpy() refuses: the view's whole span is read
    (ggml_nbytes of a view covers it) and each row decoded from its own offset."""
    if lib.ggml_is_contiguous(t.ptr) or (types.has_raw_dtype(t.type) and t.is_host):
        return t.numpy()
    span = np.empty(lib.ggml_nbytes(t.ptr), dtype=np.uint8)
    if t.ptr.buffer == ffi.NULL:
        ffi.memmove(ffi.from_buffer(span), t.ptr.data, span.size)
    else:
        lib.ggml_backend_tensor_get(t.ptr, ffi.from_buffer(span), 0, span.size)
    ne, nb = t.ne, t.nb
    block = lib.ggml_blck_size(t.ptr.type)
    if block > 1 and nb[0] != lib.ggml_type_size(t.ptr.type):
        raise ValueError(f"{t.type.name} view whose blocks are not packed along ne0: no row to decode")
    row = lib.ggml_row_size(t.ptr.type, ne[0])
    out = np.empty((ne[3], ne[2], ne[1], ne[0]), dtype=np.float32 if not types.has_raw_dtype(t.type)
                   else types.host_dtype(t.type))
    for i3 in range(ne[3]):
        for i2 in range(ne[2]):
            for i1 in range(ne[1]):
                at = i1 * nb[1] + i2 * nb[2] + i3 * nb[3]
                if block > 1 or nb[0] == lib.ggml_type_size(t.ptr.type):
                    raw = span[at:at + row]
                else:  # elements apart from each other (a transposed view): gather them first
                    size = lib.ggml_type_size(t.ptr.type)
                    raw = np.concatenate([span[at + i0 * nb[0]:at + i0 * nb[0] + size] for i0 in range(ne[0])])
                out[i3, i2, i1] = types.decode(t.type, raw, (ne[0],))
    return out.reshape(t.shape)


def leaf_values(graph: Graph) -> dict[int, np.ndarray]:
    """The graph's leaves (inputs, weights, state) and the views of them, as they are before compute, by
    address: an in-place op (an optimizer step, a set_rows into a cache) changes its source, and its
    reader needs the values the node was given."""
    leafs = graph.leafs()
    at = {int(ffi.cast("uintptr_t", t.ptr)) for t in leafs}

    def root(p: object) -> int:
        while p.view_src != ffi.NULL:  # type: ignore[attr-defined]
            p = p.view_src  # type: ignore[attr-defined]
        return int(ffi.cast("uintptr_t", p))
    # NONE nodes are inputs too (ggml keeps a trainable parameter among the nodes); views of computed
    # nodes have no value yet
    inputs = [n for n in graph.nodes if kind(n) == "NONE" or (kind(n) in VIEW_KINDS and root(n.ptr) in at)]
    return {int(ffi.cast("uintptr_t", t.ptr)): values(t) for t in [*leafs, *inputs]}


def read_node(t: Tensor, before: dict[int, np.ndarray] | None = None) -> tuple[opdb.OpSpec, Node] | None:
    """The spec that reads `t`'s op kind and the node as its reader sees it (None: no reader). `before`:
    leaf values read before compute (leaf_values), used in place of what the leaves hold now."""
    s = opdb.READERS.get(kind(t))
    if s is None:
        return None
    ptrs = list(t.ptr.src)
    while ptrs and ptrs[-1] == ffi.NULL:
        ptrs.pop()
    # by position: a reader tells sources apart by their slot (soft_max_ext: src[1] mask, src[2] sinks)
    before = before or {}

    def value(p: object) -> np.ndarray | None:
        if p == ffi.NULL:
            return None
        at = int(ffi.cast("uintptr_t", p))
        return before[at] if at in before else values(Tensor(p, t.ctx))
    return s, Node(t, [value(p) for p in ptrs])


def check_nodes(graph: Graph, skip_views: bool = True, before: dict[int, np.ndarray] | None = None) -> list[NodeVerdict]:
    """Each node of a computed graph against its oracle (see the module docstring); `before`: the leaves'
    values read before compute (leaf_values), needed where an op updates its source in place."""
    opdb.load()
    out = []
    for i, t in enumerate(graph.nodes):
        k = kind(t)
        if skip_views and k in VIEW_KINDS:
            continue
        found = read_node(t, before)
        if found is None:
            out.append(NodeVerdict(i, k, t.name, None))
            continue
        s, node = found
        assert s.from_node is not None
        expected = np.asarray(s.from_node(node))
        bound = node_bound(s, t, t.src)
        max_err = 0.0 if bound == 0 else default_max_error(bound)
        out.append(NodeVerdict(i, k, t.name, compare(values(t), expected, bound, max_err), bound))
    return out


def check_case_nodes(case: "OpCase", runner: Runner) -> list[NodeVerdict]:
    """Run an op case's graph on `runner` with its nodes kept, then check every node."""
    _, x, out, graph = case.build()
    if graph.n_nodes == 0:  # a graph of views only (view_tensor of a leaf): no node computes anything
        return []
    keep_nodes(graph)
    before: dict[int, np.ndarray] = {}
    case.run_on(runner, x, out, graph, before_compute=lambda: before.update(leaf_values(graph)))
    return check_nodes(graph, before=before)
