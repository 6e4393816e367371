"""Graph: a ggml_cgraph built in a Context."""

from __future__ import annotations

from collections import Counter

from pyggml._native import ffi, lib
from pyggml.tensor import Tensor
from pyggml.types import Op


def _addr(ptr) -> int:
    return int(ffi.cast("uintptr_t", ptr))


class Graph:
    def __init__(self, ctx, size: int = lib.GGML_DEFAULT_GRAPH_SIZE):
        need = lib.ggml_graph_overhead_custom(size, False)
        if ctx.mem_size - ctx.used_mem < need:
            raise MemoryError(f"context is full: a graph of size {size} needs {need} bytes, "
                              f"{ctx.mem_size - ctx.used_mem} left")
        self.ctx = ctx
        self.size = size
        self.ptr = lib.ggml_new_graph_custom(ctx.ptr, size, False)

    def build_forward_expand(self, *tensors: Tensor) -> "Graph":
        """Add the tensors and everything they depend on (ggml_build_forward_expand)."""
        for t in tensors:
            if not isinstance(t, Tensor):
                raise TypeError(f"build_forward_expand: expected a Tensor, got {type(t).__name__}")
            if self.n_nodes + self._n_new_upper_bound(t) > self.size:
                missing = self._count_new(t)
                if self.n_nodes + missing > self.size:
                    raise ValueError(f"graph is full: {self.n_nodes} nodes + {missing} new exceed its size "
                                     f"{self.size} (create the Graph with a larger size)")
            lib.ggml_build_forward_expand(self.ptr, t.ptr)
        return self

    expand = build_forward_expand

    def _n_new_upper_bound(self, t: Tensor) -> int:
        # every tensor of the context could become a node: a cheap bound, walked only when it is too big
        return t.ctx.max_tensor_count() if t.ctx is self.ctx else self.size + 1

    def _count_new(self, t: Tensor) -> int:
        """Nodes ggml_build_forward_expand would add for t (ggml asserts the graph has room for them)."""
        in_graph = {_addr(lib.ggml_graph_node(self.ptr, i)) for i in range(self.n_nodes)}
        seen, stack, count = set(), [t.ptr], 0
        while stack:
            p = stack.pop()
            key = _addr(p)
            if key in seen or key in in_graph:
                continue
            seen.add(key)
            if p.op != lib.GGML_OP_NONE or p.flags & lib.GGML_TENSOR_FLAG_PARAM:
                count += 1
            stack.extend(s for s in p.src if s != ffi.NULL)
        return count

    @property
    def n_nodes(self) -> int:
        return lib.ggml_graph_n_nodes(self.ptr)

    def node(self, i: int) -> Tensor:
        n = self.n_nodes
        if not -n <= i < n:
            raise IndexError(f"graph has {n} nodes, no node {i}")
        return Tensor(lib.ggml_graph_node(self.ptr, i), self.ctx)

    @property
    def nodes(self) -> list[Tensor]:
        return [self.node(i) for i in range(self.n_nodes)]

    def leafs(self) -> list[Tensor]:
        """Tensors the nodes read that are not computed by the graph (weights, inputs, caches)."""
        nodes = {_addr(n.ptr) for n in self.nodes}
        out, seen = [], set()
        for n in self.nodes:
            for s in n.ptr.src:
                if s != ffi.NULL and _addr(s) not in nodes and _addr(s) not in seen:
                    seen.add(_addr(s))
                    out.append(Tensor(s, self.ctx))
        return out

    def op_counts(self) -> Counter:
        """How many nodes of each op (Op name -> count)."""
        return Counter(Op(n.op).name for n in (lib.ggml_graph_node(self.ptr, i) for i in range(self.n_nodes)))

    def get_tensor(self, name: str) -> Tensor | None:
        p = lib.ggml_graph_get_tensor(self.ptr, name.encode())
        return Tensor(p, self.ctx) if p != ffi.NULL else None

    def inputs(self) -> list[Tensor]:
        """Every tensor of the graph (node or leaf) flagged as an input."""
        return [t for t in self.leafs() + self.nodes if t.is_input]
