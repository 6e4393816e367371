"""Per-node times of a graph on a Runner's backends (`Runner.profile`).

    prof = runner.profile(graph, {x: X}, repeats=5)
    print(prof.table(top=10))          # the slowest nodes, with the graph's whole time
    prof.plot(top=15)                  # a matplotlib bar chart
    graph.to_dot(placement=runner, profile=prof)   # times in the graph's picture

How nodes are timed: through the scheduler's eval callback (ggml_backend_sched_set_eval_callback), asking
to see every node. The scheduler then computes each node on its own (a graph view of one node:
ggml_backend_graph_compute_async, then ggml_backend_synchronize) between the callback's question about
the node (ask=True) and its report (ask=False); a node's time is the time between the two. This ggml has
no per-node timer of its own for any backend, the CPU included (no perf counters in its CPU backend), so
the callback is the one way that works on every backend alike.

What that costs: the graph is computed one node at a time, serialized, never as one submission or one
thread pool run, and every node adds two calls into Python. The times are those of each node computed
alone: a GPU backend loses its overlap of consecutive nodes and its fusions, the CPU starts its threads
for every node. `Profile.wall_us` (the profiled computes) against `Profile.plain_us` (the same graph
computed without the callback, same repeats) shows the price; `Profile.overhead` is their ratio.
It costs most on a graph of small nodes and where the CPU starts several threads per node, little once a
node takes tens of microseconds (bench/profile_overhead.py; figures in bench/README.md). Use repeats
(medians) on a busy machine.

A meta device computes its split node by node for the callback too (ggml patch 0032), every device
synchronized after each node; a node whose partial sums the meta backend reduces is timed with that
reduction. Nodes asked about together and reported together (a backend that computes them as one) are one
row covering them all (`ProfileRow.indices`), from the last question to the first report. The scheduler's
copies of a split's inputs from another backend happen before the split's first question: they are in
`wall_us`, not in any row.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyggml._args import integer
from pyggml._native import cstr, ffi, lib
from pyggml.tensor import Tensor

if TYPE_CHECKING:
    from pyggml.graph import Graph
    from pyggml.runner import Runner

MAX_REPEATS = 100_000


def _addr(p: Any) -> int:
    return int(ffi.cast("uintptr_t", p))


@dataclass(frozen=True)
class ProfileRow:
    """One timed unit of a profile: a node, or nodes a backend computed as one.

    Attributes:
        index: the graph's compute-order index of the (last) node timed.
        name: the node's name, for several nodes 'first .. last' (their names).
        op: ggml_op_desc of the node (MUL_MAT, SILU, VIEW, ...), for several their distinct ops in order,
            comma-separated.
        shape: the (last) node's shape, NumPy order.
        ne: the (last) node's ne, ggml order.
        type: the (last) node's type name (ggml_type_name: 'f32', 'q8_0', ...).
        backend: the name of the backend that computed it (ggml_backend_name: 'CPU', 'Vulkan0', a meta
            device's name, 'RPC0[...]').
        times_us: its time in each repeat, microseconds.
        indices: the compute-order indices of every node the time covers (one, or those computed as one).
        names: their names, in the same order.
    """

    index: int
    name: str
    op: str
    shape: tuple[int, ...]
    ne: tuple[int, ...]
    type: str
    backend: str
    times_us: tuple[float, ...]
    indices: tuple[int, ...]
    names: tuple[str, ...]

    @property
    def time_us(self) -> float:
        """The median of times_us: the row's time in microseconds."""
        return statistics.median(self.times_us)

    @property
    def repeats(self) -> int:
        """How many timed computes the row's times come from (len(times_us))."""
        return len(self.times_us)

    @property
    def together(self) -> bool:
        """Whether the time covers several nodes computed as one."""
        return len(self.indices) > 1


@dataclass(frozen=True)
class Profile:
    """Per-node times of one graph on one Runner (`Runner.profile`).

    Attributes:
        rows: the timed units in compute order (`ProfileRow`: one per node, or per nodes computed as one).
        runner: the Runner's name ('cpu', 'vulkan0', 'meta:vulkan0,vulkan1', ...).
        n_nodes: the graph's node count.
        warmup: computes made before timing, with and without the callback each.
        wall_us: the whole time of each profiled compute (the callback asking for every node),
            microseconds, one per repeat.
        plain_us: the whole time of each compute of the same graph without the callback (ggml's normal
            path), microseconds, one per repeat.
    """

    rows: tuple[ProfileRow, ...]
    runner: str
    n_nodes: int
    warmup: int
    wall_us: tuple[float, ...]
    plain_us: tuple[float, ...]
    _by_addr: dict[int, ProfileRow] = field(default_factory=dict, repr=False, compare=False)

    @property
    def repeats(self) -> int:
        """How many timed computes each number comes from."""
        return len(self.wall_us)

    @property
    def total_us(self) -> float:
        """The sum of the rows' medians: the graph's time as the sum of its nodes', microseconds."""
        return sum(r.time_us for r in self.rows)

    @property
    def overhead(self) -> float:
        """The median profiled compute's time over the median plain compute's (1.0: no overhead): what
        computing node by node with the callback costs this graph on this backend."""
        plain = statistics.median(self.plain_us)
        return statistics.median(self.wall_us) / plain if plain > 0 else float("inf")

    def row_of(self, node: Tensor | str | int) -> ProfileRow:
        """The row whose time covers node.

        Args:
            node: a Tensor of the graph, a node's name (its first match) or its compute-order index.

        Returns:
            The `ProfileRow` that covers it.

        Raises:
            KeyError: no row covers it.
            TypeError: node is another kind of key (a bool included).
        """
        if isinstance(node, bool) or not isinstance(node, (Tensor, str, int)):
            raise TypeError(f"row_of: node must be a Tensor, a name or an index, got {type(node).__name__}")
        for r in self.rows:
            if isinstance(node, int) and node in r.indices:
                return r
        if isinstance(node, int):
            raise KeyError(f"no row covers node {node} (the graph had {self.n_nodes} nodes)")
        name = node.name if isinstance(node, Tensor) else node
        for r in self.rows:
            if name in r.names:
                return r
        raise KeyError(f"no row covers a node named {name!r}")

    def time_of(self, p: Any) -> str | None:
        """The time `Graph.to_dot(profile=...)` shows for a tensor.

        Args:
            p: a Tensor or its C pointer.

        Returns:
            Its row's median ('12.3 us'), 'T us in a split of N nodes' for a node timed with others, None
            for a tensor no row covers (a leaf, or a tensor of another graph).
        """
        if isinstance(p, Tensor):
            p = p.ptr
        r = self._by_addr.get(_addr(p))
        if r is None:
            return None
        if r.together:
            return f"{r.time_us:.1f} us in a split of {len(r.indices)} nodes"
        return f"{r.time_us:.1f} us"

    def table(self, top: int | None = None, sort: str = "time") -> str:
        """The rows as a text table.

        Index, name, op, shape, backend, median/min/max us, share of the sum, then the sum, the profiled
        and the plain compute's medians and the overhead.

        Args:
            top: only the first top rows (after sorting; None: all).
            sort: 'time' (slowest first) or 'order' (compute order).

        Returns:
            The text.

        Raises:
            ValueError: another sort, or a top below 1.
            TypeError: top is not an integer (nor None).
        """
        if sort not in ("time", "order"):
            raise ValueError(f"table: sort must be 'time' or 'order', got {sort!r}")
        rows = sorted(self.rows, key=lambda r: -r.time_us) if sort == "time" else list(self.rows)
        if top is not None:
            rows = rows[: integer("table: top", top, 1)]
        total = self.total_us or 1.0
        head = ("#", "name", "op", "shape", "backend", "median us", "min us", "max us", "share")
        body = []
        for r in rows:
            idx = f"{r.indices[0]}-{r.indices[-1]}" if r.together else str(r.index)
            body.append(
                (
                    idx,
                    _clip(r.name, 32),
                    _clip(r.op, 28),
                    str(r.shape),
                    _clip(r.backend, 24),
                    f"{r.time_us:.1f}",
                    f"{min(r.times_us):.1f}",
                    f"{max(r.times_us):.1f}",
                    f"{100 * r.time_us / total:.1f}%",
                )
            )
        widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(head)]
        right = {0, 5, 6, 7, 8}

        def line(cells: Sequence[str]) -> str:
            return "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))

        out = [line(head), line(["-" * w for w in widths])]
        out += [line(b) for b in body]
        shown = f"{len(rows)} of {len(self.rows)} rows" if len(rows) < len(self.rows) else f"{len(self.rows)} rows"
        out.append(
            f"{shown}, {self.n_nodes} nodes on {self.runner}, median of {self.repeats} (after {self.warmup} warm-up): "
            f"sum {self.total_us:.1f} us; profiled compute {statistics.median(self.wall_us):.1f} us, "
            f"plain compute {statistics.median(self.plain_us):.1f} us (overhead x{self.overhead:.2f})"
        )
        return "\n".join(out)

    def plot(self, top: int = 20, ax: Any = None) -> Any:
        """A horizontal bar chart of the top slowest rows (median, with min-max whiskers).

        Bars are colored by backend, slowest on top. Needs matplotlib (the test and notebook extras).

        Args:
            top: how many rows (>= 1).
            ax: a matplotlib Axes to draw in (None: a new figure).

        Returns:
            The Axes.

        Raises:
            ValueError: top below 1.
            TypeError: top is not an integer.
            ImportError: matplotlib is not installed.
        """
        import matplotlib.pyplot as plt

        top = integer("plot: top", top, 1)
        rows = sorted(self.rows, key=lambda r: -r.time_us)[:top][::-1]
        if ax is None:
            _, ax = plt.subplots(figsize=(8.0, 0.8 + 0.28 * max(1, len(rows))))
        backends = list(dict.fromkeys(r.backend for r in self.rows))
        colors = plt.get_cmap("tab10")
        med = [r.time_us for r in rows]
        lo = [r.time_us - min(r.times_us) for r in rows]
        hi = [max(r.times_us) - r.time_us for r in rows]
        ax.barh(
            range(len(rows)),
            med,
            xerr=[lo, hi],
            color=[colors(backends.index(r.backend) % 10) for r in rows],
            error_kw={"elinewidth": 0.8, "capsize": 2},
        )
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels([f"{_clip(r.name, 28)} ({_clip(r.op, 18)})" for r in rows], fontsize=8)
        ax.set_xlabel(f"us (median of {self.repeats})")
        ax.set_title(f"slowest {len(rows)} of {len(self.rows)} on {self.runner}", fontsize=10)
        handles = [plt.Rectangle((0, 0), 1, 1, color=colors(i % 10)) for i in range(len(backends))]
        ax.legend(handles, backends, fontsize=8, loc="lower right")
        return ax


def _clip(s: str, n: int) -> str:
    return s if len(s) <= n else s[: n - 1] + "~"


class _Recorder:
    """The eval callback: asks for every node, notes (ask, node address, time) for each call."""

    def __init__(self) -> None:
        self.events: list[tuple[bool, int, int]] = []

    def __call__(self, t: Tensor, ask: bool) -> bool:
        self.events.append((ask, int(ffi.cast("uintptr_t", t.ptr)), time.perf_counter_ns()))
        return True


def _units(events: list[tuple[bool, int, int]]) -> list[tuple[tuple[int, ...], float]]:
    """The timed units of one compute: (node addresses asked, us from the last question to the first
    report). ggml asks about the nodes of a unit, computes them, then reports each."""
    out: list[tuple[tuple[int, ...], float]] = []
    asked: list[int] = []
    last_ask = 0
    reported = False
    for ask, a, t in events:
        if ask:
            if reported:
                asked, reported = [], False
            asked.append(a)
            last_ask = t
        elif not reported:
            out.append((tuple(asked), (t - last_ask) / 1000.0))
            reported = True
    return out


def profile(runner: Runner, graph: Graph, inputs: dict[Tensor, Any], repeats: int = 5, warmup: int = 1) -> Profile:
    """The body of `Runner.profile`: `runner.profile(graph, ...)` is `profile(runner, graph, ...)`.

    Args:
        runner: the Runner that computes the graph.
        graph: the graph to profile.
        inputs: `{tensor: values}` for every input, as for `Runner.run`.
        repeats: timed computes, 1 to 100000 (each row's time is their median).
        warmup: computes made first and not timed, 0 to 100000.

    Returns:
        The `Profile`.

    Raises:
        TypeError: graph not a Graph, repeats or warmup not an integer, and what `Runner.run` raises for
            the graph and inputs.
        ValueError: repeats or warmup out of range, and what `Runner.run` raises.
        GraphError: a missing input, and the errors of `Runner.allocate` and `Runner.compute`.
        Unsupported: the device cannot compute some nodes.
        GGMLError: the memory cannot be had, or ggml reports a failed compute.
        RuntimeError: ggml did not report every node of the graph, reported tensors that are not its
            nodes, or computed it in other pieces in one repeat than in the first.
    """
    from pyggml.graph import Graph

    if not isinstance(graph, Graph):
        raise TypeError(f"profile: expected a Graph, got {type(graph).__name__}")
    repeats = integer("profile: repeats", repeats, 1, MAX_REPEATS)
    warmup = integer("profile: warmup", warmup, 0, MAX_REPEATS)
    runner._load("profile", graph, inputs, ())
    sched = runner.sched
    before = sched._observer  # an observer of the caller's: off while profiling, back afterwards
    rec = _Recorder()
    plain: list[float] = []
    wall: list[float] = []
    runs: list[list[tuple[tuple[int, ...], float]]] = []
    try:
        sched.observe(None)
        for k in range(warmup + repeats):
            t0 = time.perf_counter_ns()
            runner.compute(graph)
            if k >= warmup:
                plain.append((time.perf_counter_ns() - t0) / 1000.0)
        sched.observe(rec)
        for k in range(warmup + repeats):
            rec.events = []
            t0 = time.perf_counter_ns()
            runner.compute(graph)
            t1 = time.perf_counter_ns()
            if k >= warmup:
                wall.append((t1 - t0) / 1000.0)
                runs.append(_units(rec.events))
    finally:
        sched.observe(before.fn if before is not None else None)
    return _build(runner, graph, runs, warmup, wall, plain)


def _build(
    runner: Runner,
    graph: Graph,
    runs: list[list[tuple[tuple[int, ...], float]]],
    warmup: int,
    wall: list[float],
    plain: list[float],
) -> Profile:
    nodes = [lib.ggml_graph_node(graph.ptr, i) for i in range(graph.n_nodes)]
    index = {_addr(p): i for i, p in enumerate(nodes)}
    first = runs[0]
    keys = [u for u, _ in first]
    for k, run in enumerate(runs[1:], 1):
        if [u for u, _ in run] != keys:
            raise RuntimeError(f"profile: ggml computed the graph in other pieces in repeat {k} than in the first")
    unknown = [a for u in keys for a in u if a not in index]
    if unknown:
        raise RuntimeError(f"profile: the scheduler reported {len(unknown)} tensors that are not nodes of the graph")
    covered = sorted(index[a] for u in keys for a in u)
    if covered != list(range(len(nodes))):
        missing = sorted(set(range(len(nodes))) - set(covered))
        raise RuntimeError(f"profile: the scheduler did not report nodes {missing[:10]} (of {len(nodes)})")
    rows: list[ProfileRow] = []
    addrs: dict[int, ProfileRow] = {}
    for j, u in enumerate(keys):
        idx = tuple(index[a] for a in u)
        last = nodes[idx[-1]]
        t = Tensor(last, None)
        b = lib.ggml_backend_sched_get_tensor_backend(runner.sched.ptr, last)
        backend = cstr(lib.ggml_backend_name(b)) if b != ffi.NULL else runner.backend.name
        node_names = tuple(cstr(lib.ggml_get_name(nodes[i])) for i in idx)
        ops = list(dict.fromkeys(cstr(lib.ggml_op_desc(nodes[i])) for i in idx))
        name = node_names[0] if len(idx) == 1 else f"{node_names[0] or '(unnamed)'} .. {node_names[-1] or '(unnamed)'}"
        row = ProfileRow(
            index=idx[-1],
            name=name,
            op=", ".join(ops),
            shape=t.shape,
            ne=t.ne,
            type=cstr(lib.ggml_type_name(last.type)),
            backend=backend,
            times_us=tuple(run[j][1] for run in runs),
            indices=idx,
            names=node_names,
        )
        rows.append(row)
        for a in u:
            addrs[a] = row
    return Profile(tuple(rows), runner.name, len(nodes), warmup, tuple(wall), tuple(plain), addrs)
