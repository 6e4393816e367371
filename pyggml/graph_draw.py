"""Draw part of a ggml graph as ggml computed it: each node a box (its op and name), in rows by depth,
with arrows from its sources.

    rec = GraphRecorder()                                  # an observer: it records, computes nothing
    llama.Context(model, observe=rec).decode(tokens)       # or Scheduler.observe(rec) for pyggml's own graphs
    nodes = select(rec.nodes, lambda n: n.name.endswith("-0"))   # llama.cpp names a layer's nodes NAME-<layer>
    draw(nodes)                                            # a matplotlib Axes

The recorder keeps each node's sources by address, which holds within one graph: record one decode of one
batch (a context with n_ubatch >= the tokens), on one device (with several, the scheduler hands a node the
copies of its sources from another device, and the edge to the original is lost). `select` keeps the chosen
nodes and joins them through the nodes it leaves out: such an edge is drawn dashed. Drawing needs matplotlib
(pyggml's test and notebook extras).

A pyggml Graph needs no recording: `draw(graph_nodes(graph), groups=backends_of(graph, runner))` draws its
nodes colored by the backend that computes them, the matplotlib counterpart of `Graph.to_dot` (Graphviz) for
a machine without Graphviz's `dot` program.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyggml._native import ffi, lib
from pyggml.lifetime import built_sources
from pyggml.tensor import Tensor


@dataclass(frozen=True)
class GraphNode:
    """One node as the recorder saw it.

    Attributes:
        id: the tensor's address while its graph lives: what the sources of later nodes refer to.
        index: its place in compute order.
        kind: `ggml_op_desc`: MUL_MAT, RMS_NORM, SILU (unary and GLU ops by their own names), VIEW, ...
        name: the tensor's name.
        src: its sources' ids (recorded nodes, or leaves: weights, inputs).
        through: after `select`, the sources reached through nodes left out (drawn dashed).
    """

    id: int  # the tensor's address while its graph lives: what the sources of later nodes refer to
    index: int  # its place in compute order
    kind: str  # ggml_op_desc: MUL_MAT, RMS_NORM, SILU (unary and GLU ops by their own names), VIEW, ...
    name: str
    src: tuple[int, ...]  # its sources' ids (recorded nodes, or leaves: weights, inputs)
    through: frozenset[int] = frozenset()  # after `select`: the sources reached through nodes left out


def _addr(p: Any) -> int:
    return int(ffi.cast("uintptr_t", p))


class GraphRecorder:
    """An observer that records every node ggml computes, with its sources, in compute order.

    For `pyggml.backend.Scheduler.observe` or `pyggml.llama.Context(observe=)`. Views are included. It
    asks to see none computed, so ggml computes as it would without it.

    Attributes:
        nodes: the recorded `GraphNode`s.
    """

    def __init__(self) -> None:
        self.nodes: list[GraphNode] = []

    def __call__(self, t: Tensor, ask: bool) -> bool:
        if ask:
            kind = ffi.string(lib.ggml_op_desc(t.ptr)).decode()
            srcs = tuple(_addr(s) for s in t.ptr.src if s != ffi.NULL)
            self.nodes.append(GraphNode(_addr(t.ptr), len(self.nodes), kind, t.name, srcs))
        return False


def graph_nodes(graph: Any) -> list[GraphNode]:
    """Every node of a pyggml Graph as GraphNodes, ready for `select` and `draw`.

    Args:
        graph: the Graph.

    Returns:
        The nodes in compute order, with the sources each was built with among the nodes (leaves left
        out, each source once).

    Raises:
        TypeError: graph is not a Graph.
    """
    from pyggml.graph import Graph

    if not isinstance(graph, Graph):
        raise TypeError(f"graph_nodes: expected a Graph, got {type(graph).__name__}")
    ptrs = [lib.ggml_graph_node(graph.ptr, i) for i in range(graph.n_nodes)]
    nodes = {_addr(p) for p in ptrs}
    out = []
    for i, p in enumerate(ptrs):
        srcs = tuple(dict.fromkeys(_addr(s) for s in built_sources(graph, p) if s != ffi.NULL and _addr(s) in nodes))
        name = ffi.string(lib.ggml_get_name(p)).decode("utf-8", "replace")
        out.append(GraphNode(_addr(p), i, ffi.string(lib.ggml_op_desc(p)).decode(), name, srcs))
    return out


def backends_of(graph: Any, placement: Any) -> dict[int, str]:
    """The backend each node of a graph is computed on, by GraphNode id, for `draw(..., groups=)`.

    Args:
        graph: the Graph.
        placement: what `Graph.to_dot` takes: a Runner or Scheduler that allocated graph, a MetaDevice,
            or a mapping of Tensor or name -> label.

    Returns:
        `{node id: backend name}`.

    Raises:
        TypeError: a placement of the wrong kind.
        ValueError: what `Graph.to_dot` raises for the placement.
    """
    from pyggml.graph_dot import _collect, _resolve

    nodes, leaves, _ = _collect(graph)
    where = _resolve(graph, placement, nodes + leaves)
    if where is None:
        return {}
    return {_addr(p): where.backend[_addr(p)] for p in nodes if _addr(p) in where.backend}


def select(nodes: Sequence[GraphNode], keep: Callable[[GraphNode], bool]) -> list[GraphNode]:
    """The nodes `keep` chooses, their sources narrowed to chosen nodes.

    A source left out is followed up through its own sources to the chosen nodes it depends on (those
    edges are in `through`); leaves are dropped.

    Args:
        nodes: recorded nodes (`GraphRecorder.nodes`).
        keep: says which nodes to keep.

    Returns:
        The kept nodes, in their order.
    """
    by_id = {n.id: n for n in nodes}
    kept = {n.id for n in nodes if keep(n)}
    reach: dict[int, frozenset[int]] = {}  # a node left out -> the chosen nodes it depends on

    def chosen_under(i: int) -> frozenset[int]:
        if i not in reach:
            found: set[int] = set()
            for s in by_id[i].src:  # sources come before their node: the recursion ends at the leaves
                if s in kept:
                    found.add(s)
                elif s in by_id:
                    found |= chosen_under(s)
            reach[i] = frozenset(found)
        return reach[i]

    out = []
    for n in nodes:
        if n.id not in kept:
            continue
        direct = [s for s in n.src if s in kept]
        through = set().union(*(chosen_under(s) for s in n.src if s in by_id and s not in kept)) - set(direct)
        out.append(
            GraphNode(n.id, n.index, n.kind, n.name, tuple(dict.fromkeys([*direct, *through])), frozenset(through))
        )
    return out


def depths(nodes: Sequence[GraphNode]) -> dict[int, int]:
    """Each node's depth: 0 without a source among `nodes`, else one more than its deepest source's.

    Args:
        nodes: the nodes.

    Returns:
        node id -> depth.
    """
    out: dict[int, int] = {}
    for n in sorted(nodes, key=lambda n: n.index):
        out[n.id] = 1 + max((out[s] for s in n.src if s in out), default=-1)
    return out


def draw(
    nodes: Sequence[GraphNode], ax: Any = None, title: str | None = None, groups: Mapping[int, str] | None = None
) -> Any:
    """Draw the nodes (e.g. `select`'s) in rows by depth, top down, each row in compute order.

    A box per node with its op and name (`ax.texts`), an arrow from each source (`ax.patches`; dashed
    through nodes left out). Needs matplotlib.

    Args:
        nodes: the nodes to draw.
        ax: a matplotlib Axes to draw on; None: a new figure's.
        title: the Axes' title.
        groups: a label per node id (`backends_of`: the backend), which then colors the boxes, with a
            legend; None: colored by op.

    Returns:
        The matplotlib Axes.

    Raises:
        ImportError: matplotlib is not installed.
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch

    depth = depths(nodes)
    rows: dict[int, list[GraphNode]] = {}
    for n in sorted(nodes, key=lambda n: n.index):
        rows.setdefault(depth[n.id], []).append(n)
    width = max((len(r) for r in rows.values()), default=1)
    if ax is None:
        _, ax = plt.subplots(figsize=(max(6.0, 2.4 * width), max(3.0, 0.7 * len(rows))))
    where: dict[int, tuple[float, float]] = {}
    for d, row in rows.items():
        for i, n in enumerate(row):
            where[n.id] = (i - (len(row) - 1) / 2, -float(d))
    kinds = sorted({n.kind for n in nodes})
    labels = list(dict.fromkeys(groups[n.id] for n in nodes if n.id in groups)) if groups else []
    colors = plt.get_cmap("tab20")
    for n in nodes:
        for s in n.src:
            dashed = s in n.through
            arrow = FancyArrowPatch(
                where[s],
                where[n.id],
                arrowstyle="->",
                mutation_scale=10,
                color="0.55" if dashed else "0.2",
                linestyle="--" if dashed else "-",
                shrinkA=12,
                shrinkB=12,
            )
            ax.add_patch(arrow)
        x, y = where[n.id]
        if groups:
            fc = colors(2 * labels.index(groups[n.id]) % 20) if n.id in groups else "white"
        else:
            fc = colors(kinds.index(n.kind) % 20)
        box = {"boxstyle": "round,pad=0.3", "fc": fc, "alpha": 0.9}
        ax.text(x, y, f"{n.kind}\n{n.name}", ha="center", va="center", fontsize=7, bbox=box)
    ax.set_xlim(-width / 2 - 0.2, width / 2 - 0.3)
    ax.set_ylim(-len(rows) + 0.4, 0.6)
    ax.set_axis_off()
    if labels:
        from matplotlib.patches import Patch

        ax.legend(handles=[Patch(color=colors(2 * i % 20), label=b) for i, b in enumerate(labels)], fontsize=7)
    if title:
        ax.set_title(title)
    return ax
