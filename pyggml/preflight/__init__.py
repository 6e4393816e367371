"""The one check every compute entry point runs before ggml sees a graph.

`Runner`, `Backend.compute` and `Scheduler.compute` call `check(graph, ...)`; it raises
`GraphError` (or its subclass `Unsupported`) naming the node and the reason. It covers what
the op wrappers cannot know when a node is built, because it depends on where and with what
the graph runs. Every check is a `Rule` (core.py): the op(s) it applies to, or () for the whole
graph, the check, why it exists (a docs/findings.md number or a reason) and the test that covers it.

- core: memory that is there and current (an allocator that since gave its memory to another graph
  makes this one stale), a graph whose expand failed half-way, empty (zero-element) nodes, which
  ggml's kernels do not handle, row-index values of get_rows/set_rows (and the other index-reading
  ops) that are graph inputs (read at every compute: they change between runs), inputs not written
  since an allocator lent them memory, and what a scheduler or a runner checks before it allocates;
- cpu: the CPU kernels' own rules (types, row strides), where a CPU device computes the node;
- vulkan: what ggml-vulkan computes wrongly or aborts on though its supports_op says yes;
- meta: what ggml's meta backend cannot split, or would split wrongly;
- rpc: devices whose RPC server failed.

The structural part runs once per graph, compute path and node count (a reused graph pays it
once; the state lives on the graph: graph.state, pyggml.lifetime.GraphState); the index values
and the inputs' writes are checked at every compute.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from pyggml import backend_kinds
from pyggml.preflight import core, cpu, meta, rpc, vulkan
from pyggml.preflight.core import (
    Rule,
    RuleTable,
    check_buffers_usable,
    check_device_supports,
    check_placeable,
    check_size,
    check_view_leaves,
    index_inputs,
    leaf_count,
    once,
)
from pyggml.preflight.cpu import CPU_RULES
from pyggml.preflight.vulkan import VULKAN_RULES

__all__ = [
    "Rule",
    "RuleTable",
    "CPU_RULES",
    "VULKAN_RULES",
    "GRAPH_RULES",
    "check",
    "check_allocatable",
    "check_buffers_usable",
    "check_device_supports",
    "check_placeable",
    "check_size",
    "check_view_leaves",
    "index_inputs",
    "leaf_count",
    "once",
    "core",
    "cpu",
    "meta",
    "rpc",
    "vulkan",
]

# every graph rule, as data (the node rules are in the tables CPU_RULES and VULKAN_RULES)
GRAPH_RULES: list[Rule] = [*core.GRAPH_RULES, *vulkan.GRAPH_RULES, *meta.GRAPH_RULES, *rpc.GRAPH_RULES]


def _kind_rules(family: str) -> Any:
    """The preflight module of a backend kind (`BackendKind.preflight` in pyggml.backend_kinds), None if it has
    none. Such a module may define `structure(nodes)`, checked once per graph structure, and `memory(nodes)`,
    checked at each allocation, each given the nodes a device of that kind computes."""
    if family not in _RULES_OF:
        k = backend_kinds.kind(family)
        _RULES_OF[family] = importlib.import_module(k.preflight) if k is not None and k.preflight else None
    return _RULES_OF[family]


_RULES_OF: dict[str, Any] = {}


def _by_kind(ns: list, kinds_at: tuple[str, ...] | Callable[[Any], tuple[str, ...]], hook: str) -> None:
    """Run each kind's `hook` (structure or memory) over the nodes its devices compute, in node order."""
    groups: dict[str, list] = {}
    for p in ns:
        for family in kinds_at if isinstance(kinds_at, tuple) else kinds_at(p):
            groups.setdefault(family, []).append(p)
    for family, nodes in groups.items():
        check_nodes = getattr(_kind_rules(family), hook, None)
        if check_nodes is not None:
            check_nodes(nodes)


def check_allocatable(graph: Any) -> None:
    """What must hold before an allocator sees the graph (ggml's allocators assert on empty tensors)."""
    core.check_broken(graph, "the graph must not be allocated or computed")
    core.check_has_nodes(graph)
    once(graph, "allocatable", lambda: core.check_empty(core.nodes(graph)))


def check(
    graph: Any,
    *,
    kinds_at: tuple[str, ...] | Callable[[Any], tuple[str, ...]],
    path: object,
    version: Any = None,
    backend: Any = None,
) -> None:
    """Raise GraphError unless `graph` can be computed now. kinds_at: the backend kinds (families of
    pyggml.backend_kinds, "cpu", "vulkan") whose rules hold for every node, or a function of the node
    that says them for each (a scheduler's nodes are on several devices). `path`: the object that
    computes (a Backend, a Scheduler): the structural check is kept per path (held weakly), `version`
    and node count. `backend`: the one backend that computes every node (Backend.compute), whose
    supports_op is asked with the structure."""
    st = graph.state
    n = graph.n_nodes
    ns = None
    core.check_broken(graph, "compute: the graph must not be computed")
    if st.paths.get(path) != (version, n):  # one entry per compute path: constant memory over reruns
        ns = core.nodes(graph)
        core.check_empty(ns)
        _by_kind(ns, kinds_at, "structure")
        if backend is not None:
            core.check_supported(ns, backend)
        st.found_index_inputs = core.find_index_inputs(ns)
        st.memory = None
        st.paths[path] = (version, n)
    core.check_current(graph)
    alloc = st.allocation
    if st.memory != (alloc, n):
        ns = ns if ns is not None else core.nodes(graph)
        core.check_memory(ns)
        if backend is not None:  # a backend computing alone reads every tensor's memory itself
            core.check_buffers_usable(graph, [backend], "compute")
        _by_kind(ns, kinds_at, "memory")
        st.memory = (alloc, n)
    core.check_written(graph)
    recorded = st.index_inputs
    core.check_index_values(recorded if recorded is not None else st.found_index_inputs)
