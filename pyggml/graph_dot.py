"""A graph as Graphviz DOT text (`Graph.to_dot`), with where each node was computed.

    dot = graph.to_dot()                        # every node and leaf, edges from the sources
    runner.allocate(graph)                      # or runner.run(...): the scheduler assigns the nodes
    dot = graph.to_dot(placement=runner)        # ... each node colored by the backend that computes it
    graph.to_dot("graph.dot", placement=runner) # written to a file too
    png = render(dot, "png")                    # Graphviz's `dot` program, when installed (have_dot())

Each node is a box: its op (ggml_op_desc: MUL_MAT, SILU, ...), its name, its NumPy-order shape and
ggml's `ne`, its type; with a placement, the backend that computes it and, on a meta device, how the
meta backend splits it. Views (VIEW, RESHAPE, PERMUTE, TRANSPOSE) are dashed boxes, and their edge from
what they view dashed. Leaves (what the graph reads and does not compute) have shapes of their kind:
inputs (set_input) an inverted house, parameters (set_param) an octagon, weights and other tensors in
memory of their own a cylinder, anything else an ellipse; outputs (set_output) a double border. Without a
placement the fill tells the kind; with one it tells the backend (a legend lists them), and an edge whose
ends are on different backends (the scheduler copies the tensor across) is bold and red.

Names are escaped (quotes, backslashes, control characters), so any tensor name gives valid DOT.
`Graph.to_dot(native=True)` returns what ggml's own ggml_graph_dump_dot writes instead: nodes and
leafs in records, no backends, names as they are (a name with record syntax in it is refused).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pyggml import graph as _graph
from pyggml._native import cstr, ffi, lib
from pyggml.backend import Scheduler
from pyggml.graph import Graph
from pyggml.lifetime import built_sources
from pyggml.meta import MetaBackend, MetaDevice, Split
from pyggml.profile import Profile
from pyggml.runner import Runner
from pyggml.tensor import MAX_DIMS, Tensor

# fills by kind (no placement), and by backend in order of first use (with one)
KIND_FILL = {
    "node": "#ffffff",
    "view": "#f2f2f2",
    "input": "#cfe2ff",
    "param": "#fff2a8",
    "weight": "#f8d0d0",
    "leaf": "#e6e6e6",
}
KIND_SHAPE = {
    "node": "box",
    "view": "box",
    "input": "invhouse",
    "param": "octagon",
    "weight": "cylinder",
    "leaf": "ellipse",
}
BACKEND_FILLS = ("#8dd3c7", "#fdb462", "#bebada", "#fb8072", "#80b1d3", "#b3de69", "#fccde5", "#ffffb3", "#bc80bd")
CPU_FILL = "#d9d9d9"
UNPLACED_FILL = "#ffffff"
_VIEW_OPS = {lib.GGML_OP_VIEW, lib.GGML_OP_RESHAPE, lib.GGML_OP_PERMUTE, lib.GGML_OP_TRANSPOSE}
# ggml_graph_dump_dot writes names into record labels as they are: these characters break them
_RECORD_SYNTAX = set('"\\|{}<>\n\r')


def _addr(p: Any) -> int:
    return int(ffi.cast("uintptr_t", p))


def quote(s: str) -> str:
    """s as a DOT double-quoted string whose label shows s as it is.

    Backslashes and double quotes are escaped (Graphviz reads `\\n`, `\\l`, `\\N`, ... in a label as
    escapes, so a lone backslash must be doubled), and control characters are shown as `\\xNN`.

    Args:
        s: the text to quote.

    Returns:
        The quoted string, quotes included.

    Raises:
        TypeError: s is not a str.
    """
    if not isinstance(s, str):
        raise TypeError(f"quote: expected a str, got {type(s).__name__}")
    out = []
    for ch in s:
        if ch == "\\":
            out.append("\\\\")
        elif ch == '"':
            out.append('\\"')
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _label(lines: list[str]) -> str:
    """Lines joined with DOT's centered line break, each escaped."""
    return "\\n".join(quote(line)[1:-1] for line in lines)


@dataclass
class _Placement:
    """What a placement says: backend name per tensor address, backends in order, split text per address."""

    backend: dict[int, str]
    order: list[str]
    split: dict[int, str]
    note: str = ""

    def fill(self, name: str | None) -> str:
        if name is None:
            return UNPLACED_FILL
        if name.upper() == "CPU":
            return CPU_FILL
        others = [b for b in self.order if b.upper() != "CPU"]
        return BACKEND_FILLS[others.index(name) % len(BACKEND_FILLS)] if name in others else UNPLACED_FILL


def _kind(p: Any, is_node: bool) -> str:
    """node or view for what the graph computes; input, param, view, weight or leaf for the rest (a backward
    graph lists its parameters among its nodes, op NONE: they are classed as leaves are)."""
    if is_node and p.op != lib.GGML_OP_NONE:
        return "view" if p.op in _VIEW_OPS else "node"
    if p.flags & lib.GGML_TENSOR_FLAG_INPUT:
        return "input"
    if p.flags & lib.GGML_TENSOR_FLAG_PARAM:
        return "param"
    if p.view_src != ffi.NULL:
        return "view"
    buf = p.buffer
    if buf != ffi.NULL and lib.ggml_backend_buffer_get_usage(buf) != lib.GGML_BACKEND_BUFFER_USAGE_COMPUTE:
        return "weight"
    if buf == ffi.NULL and p.data != ffi.NULL:
        return "weight"  # a context holding its tensors' data itself
    return "leaf"


def split_text(state: Any, n_devices: int) -> str | None:
    """A meta split state (struct ggml_backend_meta_split_state) in words.

    'mirrored', 'partial sums', 'split ne[1]: 4|4' (each device's extent along ggml axis 1), with segments
    'split ne[0]: 2|2, 4|4' and repeats 'x2'.

    Args:
        state: the C struct (cdata).
        n_devices: the meta device's device count.

    Returns:
        The text, or None for a state ggml did not derive (a node the meta device does not compute).
    """
    axis = int(state.axis)
    if axis == lib.GGML_BACKEND_SPLIT_AXIS_MIRRORED:
        return "mirrored"
    if axis == lib.GGML_BACKEND_SPLIT_AXIS_PARTIAL:
        return "partial sums"
    if not 0 <= axis < MAX_DIMS:
        return None
    segs = []
    for s in range(int(state.n_segments)):
        sizes = "|".join(str(int(state.ne[s * n_devices + j])) for j in range(n_devices))
        r = int(state.nr[s])
        segs.append(sizes + (f" x{r}" if r != 1 else ""))
    return f"split ne[{axis}]: " + ", ".join(segs)


def _meta_splits(meta: Any, graph: Graph, tensors: list[Any]) -> tuple[dict[int, str], str]:
    """Split text per tensor address: computed nodes from ggml's own derivation
    (ggml_backend_meta_graph_split_states), static tensors on the meta device from the policy."""

    n = graph.n_nodes
    out: dict[int, str] = {}
    reason = ffi.new("char[]", 1024)
    states = ffi.new("struct ggml_backend_meta_split_state[]", max(1, n))
    ok = lib.ggml_backend_meta_graph_split_states(meta.device.ptr, graph.ptr, states, reason, len(reason))
    meta.raise_pending()
    note = "" if ok else f"{meta.name} cannot split this graph: {cstr(reason)}"
    for i in range(n):
        text = split_text(states[i], meta.n_devices)
        if text is not None:
            out[_addr(lib.ggml_graph_node(graph.ptr, i))] = text
    for p in tensors:
        a = _addr(p)
        if a in out or p.op != lib.GGML_OP_NONE or p.buffer == ffi.NULL:
            continue
        buf = p.buffer
        if (
            lib.ggml_backend_buffer_get_usage(buf) != lib.GGML_BACKEND_BUFFER_USAGE_COMPUTE
            and lib.ggml_backend_buft_get_device(lib.ggml_backend_buffer_get_type(buf)) == meta.device.ptr
        ):
            c = ffi.new("struct ggml_backend_meta_split_state *")
            split: Split = meta.split_of(Tensor(p, None))
            split.to_c(c)
            text = split_text(c[0], meta.n_devices)
            if text is not None:
                out[a] = text
    return out, note


def _resolve(graph: Graph, placement: Any, tensors: list[Any]) -> _Placement | None:
    """placement (a Runner, Scheduler, MetaDevice, MetaBackend or mapping) as backend and split text per
    tensor."""
    if placement is None:
        return None

    sched, meta = None, None
    if isinstance(placement, Runner):
        sched, meta = placement.sched, placement.meta
    elif isinstance(placement, Scheduler):
        sched = placement
        metas = [b.meta for b in placement.backends if isinstance(b, MetaBackend)]
        meta = metas[0] if metas else None
    elif isinstance(placement, MetaDevice):
        meta = placement
    elif isinstance(placement, MetaBackend):
        meta = placement.meta
    elif isinstance(placement, Mapping):
        return _from_mapping(graph, placement, tensors)
    else:
        raise TypeError(
            "to_dot: placement must be a Runner, a Scheduler, a MetaDevice or a mapping of Tensor or name -> "
            f"backend label, got {type(placement).__name__}"
        )
    backend: dict[int, str] = {}
    order: list[str] = []
    if sched is not None:
        alloc = graph.state.allocation
        if alloc is None or alloc[0] is not sched or alloc[1] != sched.generation:
            raise ValueError(
                "to_dot: the graph is not the one this scheduler allocated last, so it has assigned no backend "
                "to its nodes: allocate it first (runner.allocate(graph), or runner.run(...)), then draw it"
            )
        order = [b.name for b in sched.backends]
        for p in tensors:
            b = lib.ggml_backend_sched_get_tensor_backend(sched.ptr, p)
            if b != ffi.NULL:
                backend[_addr(p)] = cstr(lib.ggml_backend_name(b))
            elif p.buffer != ffi.NULL:  # a tensor the scheduler never assigned: where its memory is
                backend[_addr(p)] = cstr(lib.ggml_backend_buffer_name(p.buffer))
    splits, note = _meta_splits(meta, graph, tensors) if meta is not None else ({}, "")
    if sched is None and meta is not None:
        order = [meta.name]
        for a in splits:
            backend[a] = meta.name
    for name in backend.values():
        if name not in order:
            order.append(name)
    return _Placement(backend, order, splits, note)


def _from_mapping(graph: Graph, mapping: Mapping, tensors: list[Any]) -> _Placement:
    by_name: dict[str, str] = {}
    by_addr: dict[int, str] = {}
    for k, v in mapping.items():
        if not isinstance(v, str):
            raise TypeError(f"to_dot: placement labels must be str, got {type(v).__name__} for {k!r}")
        if isinstance(k, Tensor):
            by_addr[_addr(k.ptr)] = v
        elif isinstance(k, str):
            by_name[k] = v
        else:
            raise TypeError(f"to_dot: placement keys must be Tensors or names, got {type(k).__name__}")
    known = {cstr(lib.ggml_get_name(p)) for p in tensors}
    missing = sorted(set(by_name) - known)
    if missing:
        raise ValueError(f"to_dot: placement names tensors the graph does not have: {', '.join(map(repr, missing))}")
    backend: dict[int, str] = {}
    for p in tensors:
        a = _addr(p)
        label = by_addr.get(a, by_name.get(cstr(lib.ggml_get_name(p))))
        if label is not None:
            backend[a] = label
    order = list(dict.fromkeys(backend.values()))
    return _Placement(backend, order, {})


def _collect(graph: Graph) -> tuple[list[Any], list[Any], dict[int, tuple]]:
    """The graph's nodes, its leaves (what the nodes read or view and do not compute) in order of first
    use, and each node's sources as built."""
    nodes = [lib.ggml_graph_node(graph.ptr, i) for i in range(graph.n_nodes)]
    node_addrs = {_addr(p) for p in nodes}
    leaves: list[Any] = []
    seen: set[int] = set()
    sources: dict[int, tuple] = {}
    for p in nodes:
        srcs = built_sources(graph, p)
        sources[_addr(p)] = srcs
        for s in srcs:
            if s == ffi.NULL:
                continue
            a = _addr(s)
            if a not in node_addrs and a not in seen:
                seen.add(a)
                leaves.append(s)
    # a leaf that views another tensor: the viewed tensor is drawn too
    k = 0
    while k < len(leaves):
        v = leaves[k].view_src
        if v != ffi.NULL and _addr(v) not in node_addrs and _addr(v) not in seen:
            seen.add(_addr(v))
            leaves.append(v)
        k += 1
    return nodes, leaves, sources


def _shape(p: Any) -> tuple[int, ...]:
    return Tensor(p, None).shape


def _lines(p: Any, index: str, placement: _Placement | None, profile: Any) -> list[str]:
    """A tensor's label: 'OP  #i' for node i ('KIND  leaf k' for a leaf), its name, shapes and type, then
    what applies: permute axes, what it views, flags, backend, meta split, time."""
    name = cstr(lib.ggml_get_name(p))
    shape = _shape(p)
    ne = ", ".join(str(int(x)) for x in p.ne)
    lines = [f"{index}", name or "(unnamed)", f"shape {shape}  ne [{ne}]  {cstr(lib.ggml_type_name(p.type))}"]
    if p.op == lib.GGML_OP_PERMUTE:
        axes = ", ".join(str(int(p.op_params[i])) for i in range(MAX_DIMS))
        lines.append(f"permute axes ({axes})")
    if p.view_src != ffi.NULL:
        viewed = cstr(lib.ggml_get_name(p.view_src)) or "(unnamed)"
        lines.append(f"view of {viewed} at byte {int(p.view_offs)}")
    flags = [f for f, bit in (("input", 1), ("output", 2), ("param", 4), ("loss", 8)) if p.flags & bit]
    if flags:
        lines.append("flags: " + ", ".join(flags))
    if placement is not None:
        b = placement.backend.get(_addr(p))
        if b is not None:
            lines.append(f"on {b}")
        s = placement.split.get(_addr(p))
        if s is not None:
            lines.append(s)
    if profile is not None:
        t = profile.time_of(p)
        if t is not None:
            lines.append(f"time {t}")
    return lines


def graph_to_dot(
    graph: Graph,
    path: str | os.PathLike[str] | None = None,
    *,
    placement: Any = None,
    profile: Any = None,
    native: bool = False,
    title: str | None = None,
) -> str:
    """The body of `Graph.to_dot`: `graph.to_dot(...)` is `graph_to_dot(graph, ...)`.

    Args:
        graph: the Graph to draw.
        path: also write the text to this file (UTF-8); None: only return it.
        placement: where the graph is computed, to color each node by its backend: a Runner or a Scheduler
            that has allocated this graph, a MetaDevice or MetaBackend, or a mapping of Tensor or tensor
            name -> a label of your own (`Graph.to_dot` says more).
        profile: a `pyggml.profile.Profile` of this graph (`Runner.profile`), to show each node's time.
        native: return what ggml's own ggml_graph_dump_dot writes instead (`native_dot`).
        title: a title above the picture.

    Returns:
        The DOT text.

    Raises:
        TypeError: graph not a Graph, path not a str or os.PathLike, title not a str, profile not a
            Profile, a placement of another kind, or a mapping with keys other than Tensors or names or
            labels other than str.
        ValueError: a Runner or Scheduler that has not allocated this graph (or allocated another since),
            a mapping naming tensors the graph lacks, native=True with placement, profile or title, or
            (native) a name ggml would write unescaped into its record syntax.
        OSError: path cannot be written.
    """

    if not isinstance(graph, Graph):
        raise TypeError(f"to_dot: expected a Graph, got {type(graph).__name__}")
    if path is not None and not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"to_dot: path must be a str or os.PathLike, got {type(path).__name__}")
    if title is not None and not isinstance(title, str):
        raise TypeError(f"to_dot: title must be a str, got {type(title).__name__}")
    if native:
        if placement is not None or profile is not None or title is not None:
            raise ValueError(
                "to_dot: native=True writes what ggml_graph_dump_dot writes: no placement, profile or title"
            )
        text = native_dot(graph)
    else:
        if profile is not None and not isinstance(profile, Profile):
            raise TypeError(f"to_dot: profile must be a pyggml.profile.Profile, got {type(profile).__name__}")
        nodes, leaves, sources = _collect(graph)
        where = _resolve(graph, placement, nodes + leaves)
        text = _write(graph, nodes, leaves, sources, where, profile, title)
    if path is not None:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    return text


def _write(
    graph: Graph,
    nodes: list[Any],
    leaves: list[Any],
    sources: dict[int, tuple],
    where: _Placement | None,
    profile: Any,
    title: str | None,
) -> str:
    ids: dict[int, str] = {}
    for i, p in enumerate(nodes):
        ids[_addr(p)] = f"n{i}"
    for k, p in enumerate(leaves):
        ids[_addr(p)] = f"l{k}"
    out = ["digraph ggml {"]
    graph_label = [x for x in (title, where.note if where else "") if x]
    out.append(
        '  graph [rankdir=TB, fontname="Helvetica", fontsize=11, labelloc=t'
        + (f", label={quote(' / '.join(graph_label))}" if graph_label else "")
        + "];"
    )
    out.append('  node [fontname="Helvetica", fontsize=9, style=filled, penwidth=1];')
    out.append('  edge [fontname="Helvetica", fontsize=8, color="#555555", arrowsize=0.6];')

    def emit(p: Any, node_id: str, index: str, is_node: bool) -> None:
        kind = _kind(p, is_node)
        computed = is_node and p.op != lib.GGML_OP_NONE
        index = f"{cstr(lib.ggml_op_desc(p))}  {index}" if computed else f"{kind}  {index}"
        if where is not None:
            fill = where.fill(where.backend.get(_addr(p)))
        else:
            fill = KIND_FILL[kind]
        style = "filled,rounded" if kind == "node" else "filled,rounded,dashed" if kind == "view" else "filled"
        attrs = [
            f'label="{_label(_lines(p, index, where, profile))}"',
            f"shape={KIND_SHAPE[kind]}",
            f'style="{style}"',
            f'fillcolor="{fill}"',
            f'class="{kind}"',
        ]
        if p.flags & lib.GGML_TENSOR_FLAG_OUTPUT:
            attrs.append("peripheries=2")
        out.append(f"  {node_id} [{', '.join(attrs)}];")

    for k, p in enumerate(leaves):
        emit(p, f"l{k}", f"leaf {k}", False)
    for i, p in enumerate(nodes):
        emit(p, f"n{i}", f"#{i}", True)
    for i, p in enumerate(nodes):
        srcs = [(j, s) for j, s in enumerate(sources[_addr(p)]) if s != ffi.NULL]
        view = p.view_src
        for j, s in srcs:
            attrs = []
            if len(srcs) > 1:
                attrs.append(f'label="{j}"')
            if view != ffi.NULL and s == view:
                attrs.append("style=dashed")
            if where is not None:
                a, b = where.backend.get(_addr(s)), where.backend.get(_addr(p))
                if a is not None and b is not None and a != b:
                    attrs += ['color="#cc0000"', "penwidth=2"]
            out.append(f"  {ids[_addr(s)]} -> n{i}" + (f" [{', '.join(attrs)}]" if attrs else "") + ";")
    for k, p in enumerate(leaves):
        v = p.view_src
        if v != ffi.NULL:
            out.append(f'  {ids[_addr(v)]} -> l{k} [style=dashed, label="views"];')
    if where is not None and where.order:
        out.append("  subgraph cluster_legend {")
        out.append('    label="backends"; style=dashed; color="#999999";')
        for k, name in enumerate(where.order):
            out.append(f'    legend{k} [label={quote(name)}, shape=box, style=filled, fillcolor="{where.fill(name)}"];')
        out.append("  }")
    out.append("}")
    return "\n".join(out) + "\n"


def native_dot(graph: Graph) -> str:
    """What ggml's ggml_graph_dump_dot writes for graph: ggml's own picture, without backends.

    Nodes and leafs are records, with edges from the sources. ggml writes names into its record labels as
    they are, so a name with record syntax in it (`"`, `\\`, `|`, `{`, `}`, `<`, `>`, a line break) would
    give broken DOT: it is refused (the Python `to_dot` escapes them).

    Args:
        graph: the Graph to draw.

    Returns:
        The DOT text.

    Raises:
        TypeError: graph is not a Graph.
        ValueError: a tensor's name has record syntax in it (the message names it).
    """

    if not isinstance(graph, Graph):
        raise TypeError(f"native_dot: expected a Graph, got {type(graph).__name__}")
    nodes, leaves, _ = _collect(graph)
    for p in nodes + leaves:
        name = cstr(lib.ggml_get_name(p))
        if _RECORD_SYNTAX & set(name):
            raise ValueError(
                f"native_dot: ggml writes tensor names into its DOT records unescaped, and {name!r} has record "
                "syntax in it; use to_dot() (native=False), which escapes names"
            )
    fd, tmp = tempfile.mkstemp(suffix=".dot")
    os.close(fd)
    try:  # ggml opens the file itself (and asserts it could): a file of our own always opens
        lib.ggml_graph_dump_dot(graph.ptr, ffi.NULL, tmp.encode())
        with open(tmp, encoding="utf-8", errors="replace") as f:
            return f.read()
    finally:
        os.unlink(tmp)


def write_dot(graph: Graph, path: str | os.PathLike[str], **kwargs: Any) -> str:
    """Write graph's DOT text to path (UTF-8) and return it: `graph.to_dot(path, **kwargs)`.

    Args:
        graph: the Graph to draw.
        path: the file to write.
        **kwargs: placement, profile, native, title as for `Graph.to_dot`.

    Returns:
        The text written.

    Raises:
        TypeError: what `Graph.to_dot` raises for its arguments.
        ValueError: what `Graph.to_dot` raises for its arguments.
        OSError: the file cannot be written.
    """
    return graph_to_dot(graph, path, **kwargs)


def have_dot() -> bool:
    """Whether Graphviz's `dot` program is on PATH (Debian: `apt-get install graphviz`), which `render` needs.

    Returns:
        True when `dot` is found, else False.
    """
    return shutil.which("dot") is not None


def render(dot: str, format: str = "svg", path: str | os.PathLike[str] | None = None, timeout: float = 60.0) -> bytes:
    """Lay out and draw DOT text with Graphviz's `dot` program.

    Args:
        dot: DOT text (`Graph.to_dot()`).
        format: any output format dot knows ('svg', 'png', 'pdf', ...).
        path: also write the picture to this file; None: only return it.
        timeout: seconds before dot is stopped.

    Returns:
        The picture's bytes.

    Raises:
        FileNotFoundError: dot is not installed (`have_dot()`; without it, pyggml.graph_draw draws graphs
            with matplotlib).
        ValueError: dot rejects the text or the format (its message included).
        TypeError: dot is not a str, or format is not a str of letters and digits.
        subprocess.TimeoutExpired: dot ran longer than timeout.
        OSError: path cannot be written.
    """
    if not isinstance(dot, str):
        raise TypeError(f"render: dot must be DOT text (a str), got {type(dot).__name__}")
    if not isinstance(format, str) or not format.isalnum():
        raise TypeError(f"render: format must be a format name such as 'svg' or 'png', got {format!r}")
    exe = shutil.which("dot")
    if exe is None:
        raise FileNotFoundError(
            "render: Graphviz's dot program is not installed (Debian: apt-get install graphviz); "
            "pyggml.graph_draw draws graphs with matplotlib instead"
        )
    proc = subprocess.run([exe, f"-T{format}"], input=dot.encode(), capture_output=True, timeout=timeout)
    if proc.returncode != 0:
        raise ValueError(f"render: dot failed ({proc.returncode}): {proc.stderr.decode(errors='replace').strip()}")
    if path is not None:
        with open(path, "wb") as f:
            f.write(proc.stdout)
    return proc.stdout


@dataclass(frozen=True)
class Placed:
    """Where one tensor of a graph is, as `placements` (and the picture) tells it.

    Attributes:
        name: the tensor's name.
        op: ggml_op_desc, 'leaf' for what the graph reads and does not compute.
        node: its compute-order index, None for a leaf.
        backend: the backend that computes or holds it (None when the placement says nothing of it).
        split: a meta device's split of it in words (`split_text`), else None.
    """

    name: str
    op: str
    node: int | None
    backend: str | None
    split: str | None


def placements(graph: Graph, placement: Any) -> list[Placed]:
    """Where each leaf and node of graph is computed or held, and how a meta device splits it.

    The facts `Graph.to_dot(placement=...)` draws, as data.

    Args:
        graph: the Graph.
        placement: what to_dot takes (a Runner or Scheduler that allocated graph, a MetaDevice or
            MetaBackend, a mapping of Tensor or name -> label).

    Returns:
        One `Placed` per leaf (first) and node (in compute order).

    Raises:
        TypeError: graph is not a Graph, placement is None, or what to_dot raises for the placement.
        ValueError: what to_dot raises for the placement.
    """

    if not isinstance(graph, Graph):
        raise TypeError(f"placements: expected a Graph, got {type(graph).__name__}")
    if placement is None:
        raise TypeError("placements: placement must be a Runner, a Scheduler, a MetaDevice or a mapping, got None")
    nodes, leaves, _ = _collect(graph)
    where = _resolve(graph, placement, nodes + leaves)
    assert where is not None
    out = []
    for i, p in [(None, p) for p in leaves] + list(enumerate(nodes)):
        a = _addr(p)
        op = cstr(lib.ggml_op_desc(p)) if p.op != lib.GGML_OP_NONE else "leaf"
        out.append(Placed(cstr(lib.ggml_get_name(p)), op, i, where.backend.get(a), where.split.get(a)))
    return out


_graph._to_dot = graph_to_dot  # Graph.to_dot's renderer (pyggml.graph keeps the slot)
