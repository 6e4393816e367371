"""What ggml's meta backend cannot split, or would split wrongly, refused before it computes.

ggml derives every computed tensor's split from the static tensors' (as allocated, so allocate
static tensors first); where it cannot, it aborts at allocation or compute and the process dies.
ggml_backend_meta_graph_check (patch 0009) runs the same derivation and reports instead; with the
split states it derives (patch 0022), views that ggml would map onto the devices' shares wrongly are
refused too (check_views). `meta` below is a pyggml.meta.MetaDevice.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from pyggml import transport
from pyggml._native import cstr, ffi, has, lib
from pyggml.errors import Unsplittable
from pyggml.preflight.core import Rule
from pyggml.target import Buffer
from pyggml.tensor import MAX_DIMS, Tensor

MAX_SRC = lib.GGML_MAX_SRC


def check_graph(meta: Any, graph: Any) -> None:
    """Raise Unsplittable, with ggml's reason, if ggml's meta code cannot split some node of graph.
    Runs once per graph, node count and policy (graph.state.split_checked): a reused graph costs one lookup."""
    key = (graph.n_nodes, meta.policy_version)
    done = graph.state.split_checked.get(meta)
    if done is not None and key in done:
        return
    if not has("ggml_backend_meta_graph_split_states"):
        # a ggml without patch 0022 (a user's tree): nothing to ask before the compute, which then shows
        # what the tree's meta backend does (a case runs in a worker process; an abort is its error record)
        return
    reason = ffi.new("char[]", 1024)
    states = ffi.new("struct ggml_backend_meta_split_state[]", max(1, graph.n_nodes))
    ok = lib.ggml_backend_meta_graph_split_states(meta.device.ptr, graph.ptr, states, reason, len(reason))
    meta.raise_pending()
    # the check allocates a throwaway buffer on every device: a device on an RPC server that failed
    # gives none (patch 0024), which is the server's failure (RpcError), not an unsplittable graph
    transport.after_device_call([meta.device.ptr])
    if not ok:
        why = ffi.string(reason).decode(errors="replace")
        raise Unsplittable(f"{meta.name} cannot split this graph: {why}{_refused_node_layouts(meta, graph, states)}")
    check_layouts(meta, graph, states)  # a tree without patch 0039 computes these wrongly
    check_views(meta, graph, states)  # what ggml's check passes but computes wrongly
    graph.state.split_checked.setdefault(meta, set()).add(key)


def _root_state(meta: Any, root: Any, states: Any, index: dict[int, int]) -> "_State | None":
    """The split state ggml gives a view's source: a node's as ggml derived it, a static tensor's
    from the policy; None for anything that reaches the meta device mirrored (an input, a node
    computed elsewhere)."""
    i = index.get(int(ffi.cast("uintptr_t", root)))
    if i is not None:
        return _State.of(states[i], meta.n_devices)
    buf = root.buffer
    if (
        buf != ffi.NULL
        and lib.ggml_backend_buffer_get_usage(buf) != lib.GGML_BACKEND_BUFFER_USAGE_COMPUTE
        and lib.ggml_backend_buft_get_device(lib.ggml_backend_buffer_get_type(buf)) == meta.device.ptr
    ):
        out = ffi.new("struct ggml_backend_meta_split_state *")
        meta.split_of(Tensor(root, None)).to_c(out)
        return _State.of(out[0], meta.n_devices)
    return None


def check_views(meta: Any, graph: Any, states: Any) -> None:
    """Refuse a view that ggml's meta code would map onto the devices' shares wrongly.

    ggml gives a view of a split tensor, on each device, the same view of that device's share,
    scaled by the share's proportion (handle_view in ggml_backend_meta_get_split_state, and
    ggml_backend_meta_buffer_init_tensor_impl: the extent along the split dim, the strides above it,
    the offset unless ggml deems it internal). That is the single-device answer only when it maps
    each device's part of the view onto the elements of the source it names: a view that takes part
    of the split axis (fused q/k/v views of a product split in one segment) or an offset with parts
    above and below the split dim reads the wrong elements, silently. Each view is mapped here as
    ggml maps it, device by device, onto the source's elements, and compared with the view itmeta.
    """
    n = lib.ggml_graph_n_nodes(graph.ptr)
    nodes = [lib.ggml_graph_node(graph.ptr, i) for i in range(n)]
    index = {int(ffi.cast("uintptr_t", t)): i for i, t in enumerate(nodes)}
    for i, v in enumerate(nodes):
        if v.view_src == ffi.NULL or lib.ggml_nelements(v) == 0 or not _view_chain(v):
            continue
        vs = _State.of(states[i], meta.n_devices)
        if vs is None and states[i].axis == lib.GGML_BACKEND_SPLIT_AXIS_UNKNOWN:
            continue  # not computed on the meta device
        rs = _root_state(meta, v.view_src, states, index)
        if rs is None or rs.segmented() or v.view_src.op == lib.GGML_OP_GATED_DELTA_NET:
            # ggml maps these views exactly and refuses the wrong ones itself (patch 0026): a root split into
            # several ranges per device, and gated_delta_net's result, whose states are not rows of its output
            continue
        problem = _mismatch_of(v, vs, v.view_src, rs)
        if problem is None:
            continue
        name = ffi.string(v.name).decode(errors="replace") or "(unnamed)"
        root = ffi.string(v.view_src.name).decode(errors="replace") or "(unnamed)"
        op = ffi.string(lib.ggml_op_desc(v)).decode()
        shares = "/".join(str(x) for x in rs.totals())
        raise Unsplittable(
            f"{meta.name} cannot split this graph: the {op} '{name}' (ne={tuple(v.ne)}, nb={tuple(v.nb)}, offset "
            f"{v.view_offs}) of '{root}' (ne={tuple(v.view_src.ne)}, split along axis {rs.axis} in shares "
            f"{shares}) {problem}; ggml's meta backend gives each device the same view of its own share, "
            f"scaled by the share, so it would read the wrong elements. Make the view line up with the split: "
            f"keep the split axis whole in every view (lay fused rows out in groups, [q k v] of one group "
            f"together and whole groups on each device, and take each part with a view strided across the "
            f"groups, as pyggml.models.delta_net does), split separate tensors instead of one fused one, or mirror "
            f"{root}"
        )


# a view's verdict is a function of its geometry and its source's (types, extents, strides, offset, split states),
# the same in every graph that has it: a model's layers repeat their views, a suite's graphs their shapes. Mapping
# a view is NumPy work (a grid of its sampled elements per device); remembered, a graph's views cost a lookup each
# (the delta_net cases on meta:cpu,cpu spent 3 of every 4 seconds here).
_MISMATCHES: dict[tuple, str | None] = {}
_MISMATCHES_KEPT = 1 << 14


def _mismatch_of(v: Any, vs: "_State | None", root: Any, rs: "_State") -> str | None:
    """`_view_mismatch`, remembered by the geometry it reads."""
    key = (
        int(v.type),
        tuple(int(x) for x in v.ne),
        tuple(int(x) for x in v.nb),
        int(v.view_offs),
        vs,
        int(root.type),
        tuple(int(x) for x in root.ne),
        tuple(int(x) for x in root.nb),
        rs,
    )
    if key not in _MISMATCHES:
        if len(_MISMATCHES) >= _MISMATCHES_KEPT:
            _MISMATCHES.clear()
        _MISMATCHES[key] = _view_mismatch(v, vs, root, rs)
    return _MISMATCHES[key]


_VIEW_OPS = (lib.GGML_OP_VIEW, lib.GGML_OP_RESHAPE, lib.GGML_OP_PERMUTE, lib.GGML_OP_TRANSPOSE)


def _view_chain(v: Any) -> bool:
    """v is a view of its view_src through view ops only, so ggml derives its split state from that
    source's. The result of an op that writes into another tensor (cpy, set_rows, ...) is a view of
    its destination whose state ggml derives from what is written: not a view to check here."""
    root = v.view_src
    while v.op in _VIEW_OPS and v.src[0] != ffi.NULL:
        if v.src[0] == root:
            return True
        v = v.src[0]
        if v.view_src != root:
            return False
    return False


_SAMPLE = 64  # a view dim up to this long is mapped whole; a longer one at its ends, share edges and a spread


@dataclass(frozen=True)
class _State:
    """A split along axis 0..3: ne[s][j] for segment s and device j, nr[s] repeats of segment s."""

    axis: int
    ne: tuple
    nr: tuple

    @staticmethod
    def of(c: Any, n_devices: int) -> "_State | None":
        if not 0 <= c.axis < MAX_DIMS:
            return None
        segs = tuple(tuple(int(c.ne[s * n_devices + j]) for j in range(n_devices)) for s in range(c.n_segments))
        return _State(int(c.axis), segs, tuple(int(c.nr[s]) for s in range(c.n_segments)))

    def segmented(self) -> bool:
        """Some device holds more than one range of the axis."""
        return any((np.diff(self.local_to_global(j)) != 1).any() for j in range(len(self.ne[0])))

    def totals(self) -> list[int]:
        return [sum(seg[j] * r for seg, r in zip(self.ne, self.nr)) for j in range(len(self.ne[0]))]

    def local_to_global(self, j: int) -> np.ndarray:
        """Device j's local indices along the axis, as indices of the whole tensor (ggml's layout:
        segments, each repeated, each repeat split over the devices in order)."""
        parts, pos = [], 0
        for seg, r in zip(self.ne, self.nr):
            for _ in range(r):
                for k, size in enumerate(seg):
                    if k == j:
                        parts.append(np.arange(pos, pos + size, dtype=np.int64))
                    pos += size
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def _sample(ne: int, edges: Any = ()) -> np.ndarray:
    if ne <= _SAMPLE:
        return np.arange(ne, dtype=np.int64)
    picks = {0, 1, ne - 2, ne - 1, *np.linspace(0, ne - 1, 16, dtype=np.int64).tolist()}
    for e in edges:
        picks.update(x for x in (e - 1, e, e + 1) if 0 <= x < ne)
    return np.array(sorted(picks), dtype=np.int64)


def _addresses(
    ne: Any, nb: Any, offs: int, edges_dim: int | None = None, edges: Any = ()
) -> tuple[list[np.ndarray], np.ndarray]:
    """The (sampled) index of every element along each dim, and the byte address of each element."""
    idx = [_sample(int(ne[k]), edges if k == edges_dim else ()) for k in range(MAX_DIMS)]
    grid = np.meshgrid(*idx, indexing="ij")
    return idx, offs + sum(g * int(nb[k]) for k, g in enumerate(grid))


def _view_mismatch(v: Any, vs: "_State | None", root: Any, rs: _State) -> str | None:
    """Map the view v, as ggml makes it on each device, onto the source root's elements and compare
    with v itself; None when they agree, else what goes wrong."""
    blck = lib.ggml_blck_size(v.type)
    tsize = lib.ggml_type_size(v.type)
    n_dev = len(rs.ne[0])
    rne = [int(root.ne[k]) // (blck if k == 0 else 1) for k in range(MAX_DIMS)]
    vne = [int(v.ne[k]) // (blck if k == 0 else 1) for k in range(MAX_DIMS)]
    rnb = [int(root.nb[k]) for k in range(MAX_DIMS)]
    vnb = [int(v.nb[k]) for k in range(MAX_DIMS)]
    a, r_tot = rs.axis, rs.totals()
    permuted = vnb[0] > vnb[1] or vnb[1] > vnb[2] or vnb[2] > vnb[3]
    offs = int(v.view_offs)
    for j in range(n_dev):
        # device j's share of the source, as ggml_backend_meta_buffer_init_tensor_impl makes it
        r_loc_ne = list(rne)
        r_loc_ne[a] = r_tot[j] // (blck if a == 0 else 1)
        r_loc_nb = [rnb[k] * r_tot[j] // int(root.ne[a]) if rnb[k] > rnb[a] else rnb[k] for k in range(MAX_DIMS)]
        r_l2g = rs.local_to_global(j)
        if a == 0:  # along axis 0 in blocks (shares hold whole blocks: Split.validate)
            r_l2g = r_l2g[::blck] // blck
        # device j's view: ggml's extent, strides and offset
        l_ne, l_nb, l_offs = list(vne), list(vnb), offs
        d, v_l2g = None, None  # a view ggml does not split: the whole view on every device
        if vs is not None:
            d, v_l2g, v_tot = vs.axis, vs.local_to_global(j), vs.totals()[j]
            if d == 0 and v_tot % blck:
                return _what(v, root, rs, j, f"gets {v_tot} elements, not whole blocks of {blck}")
            if d == 0:
                v_l2g = v_l2g[::blck] // blck
            l_ne[d] = v_tot // (blck if d == 0 else 1)
            l_nb = [vnb[k] * v_tot // int(v.ne[d]) if vnb[k] > vnb[d] else vnb[k] for k in range(MAX_DIMS)]
            if offs > 0:
                internal = offs <= rnb[a] or (not permuted and offs < vnb[d])
                internal = internal or any(offs <= int(v.ne[k]) * vnb[k] < vnb[d] for k in range(MAX_DIMS))
                if not internal:
                    l_offs = offs * v_tot // int(v.ne[d])
        if 0 in l_ne:
            continue
        if r_tot[j] == 0:
            return _what(v, root, rs, j, "reads from an empty share")
        edges = np.flatnonzero(np.diff(v_l2g) != 1) + 1 if v_l2g is not None else ()
        idx, local = _addresses(l_ne, l_nb, l_offs, d, edges)
        # what device j reads: local addresses in its share -> the source's elements (global addresses)
        r_size = r_loc_nb[MAX_DIMS - 1] * r_loc_ne[MAX_DIMS - 1]
        if (local % tsize).any() or (local < 0).any() or (local + tsize > r_size).any():
            return _what(v, root, rs, j, "reads outside its device's share or between elements")
        order = sorted((k for k in range(MAX_DIMS) if r_loc_ne[k] > 1), key=lambda k: -r_loc_nb[k])  # contiguous
        rest, got = local.copy(), np.zeros_like(local)
        if a not in order:  # one index of the split axis on this device
            got += r_l2g[0] * rnb[a]
        for k in order:
            c = rest // r_loc_nb[k]
            rest -= c * r_loc_nb[k]
            if (c >= r_loc_ne[k]).any():
                return _what(v, root, rs, j, "reads outside its device's share")
            got += (r_l2g[c] if k == a else c) * rnb[k]
        # what it should read: device j's part of the view, as elements of the whole view
        g_idx = [v_l2g[i] if k == d and v_l2g is not None else i for k, i in enumerate(idx)]
        grid = np.meshgrid(*g_idx, indexing="ij")
        want = offs + sum(g * vnb[k] for k, g in enumerate(grid))
        if not np.array_equal(got, want):
            return _what(v, root, rs, j, "would read other elements")
    return None


def _what(v: Any, root: Any, rs: _State, j: int, how: str) -> str:
    """Say why a view goes wrong: the part of the split axis it takes, or its offset."""
    a = rs.axis
    row = int(root.nb[a + 1]) if a < MAX_DIMS - 1 else None
    offs = np.array([int(v.view_offs) % row if row else int(v.view_offs)], dtype=np.int64)
    for k in range(MAX_DIMS):
        if v.ne[k] > 1 and (row is None or v.nb[k] < row):
            offs = np.unique(
                np.add.outer(offs, np.arange(min(int(v.ne[k]), 1 << 12), dtype=np.int64) * int(v.nb[k])).ravel()
            )
    coords = np.unique((offs % row if row else offs) // int(root.nb[a]))
    if coords.size != int(root.ne[a]) or coords[0] != 0:
        return (
            f"takes part of its split axis {a} (indices {coords[0]}..{coords[-1]} of {int(root.ne[a])}): "
            f"device {j} {how}"
        )
    return (
        f"keeps the split axis {a} whole, but ggml maps its offset {int(v.view_offs)} (a part above and one "
        f"below the split axis) wrongly: device {j} {how}"
    )


GRAPH_RULES = [
    Rule(
        (),
        check_graph,
        "ggml's meta backend asserts on a node it cannot split (the process ends)",
        "tests/test_meta.py::test_an_unsplittable_graph_is_refused_in_process_with_ggml_reason",
    ),
    Rule(
        (), check_views, "docs/findings.md 28", "tests/test_meta.py::test_a_view_of_part_of_the_split_axis_is_refused"
    ),
]


# --- the layouts of a refused node's sources, and what would work -------------------------------------------------


def _name(t: Any) -> str:
    return ffi.string(t.name).decode(errors="replace") or "(unnamed)"


def _source_state(meta: Any, t: Any, states: Any, index: dict[int, int]) -> Any:
    """A source's state as ggml's meta code sees it: a `_State` (split), "mirrored" or "partial"."""
    i = index.get(int(ffi.cast("uintptr_t", t)))
    if i is not None:
        c = states[i]
    else:
        buf = t.buffer
        if (
            buf == ffi.NULL
            or lib.ggml_backend_buffer_get_usage(buf) == lib.GGML_BACKEND_BUFFER_USAGE_COMPUTE
            or lib.ggml_backend_buft_get_device(lib.ggml_backend_buffer_get_type(buf)) != meta.device.ptr
        ):
            return "mirrored"  # an input, or a tensor the meta device gets as the scheduler's copy
        c = ffi.new("struct ggml_backend_meta_split_state *")
        meta.split_of(Tensor(t, None)).to_c(c)
        c = c[0]
    if c.axis == lib.GGML_BACKEND_SPLIT_AXIS_PARTIAL:
        return "partial"
    st = _State.of(c, meta.n_devices)
    return st if st is not None else "mirrored"


def _split_text(st: "_State") -> str:
    """The state as the Split that gives it."""
    if len(st.ne) == 1 and st.nr == (1,):
        return f"Split({st.axis}, {st.ne[0]})"
    return f"Split({st.axis}, {st.ne}, {st.nr})"


def _layout_text(state: Any) -> str:
    if isinstance(state, _State):
        return f"split along axis {state.axis} as {_split_text(state)}"
    return "mirrored" if state == "mirrored" else "partial (each device holds a part of a sum)"


def _advice(node: Any, srcs: list[tuple[str, Any]]) -> str:
    """What would work for a node whose sources are laid out so: the same split for all, or mirrored."""
    ref = next(((n, st) for n, st in srcs if isinstance(st, _State)), None)
    partial = [n for n, st in srcs if st == "partial"]
    tips = []
    if partial:
        tips.append(" or ".join(f"mirror {n}" for n in partial) + " (a partial sum goes only through ops linear in it)")
    if ref is not None:
        others = [n for n, st in srcs if n != ref[0] and st != ref[1]]
        if others:
            tips.append(" and ".join(f"split {n} the same way: {_split_text(ref[1])}" for n in others))
        tips.append(f"mirror {ref[0]}")
    return "; ".join(tips) if tips else "mirror the split sources"


def _describe_node(meta: Any, node: Any, states: Any, index: dict[int, int]) -> str:
    srcs: list[tuple[str, Any]] = []
    for k in range(MAX_SRC):
        src = node.src[k]
        if src != ffi.NULL and src != node and _name(src) not in [n for n, _ in srcs]:
            srcs.append((_name(src), _source_state(meta, src, states, index)))
    op = ffi.string(lib.ggml_op_desc(node)).decode()
    layouts = "; ".join(f"{n}: {_layout_text(st)}" for n, st in srcs)
    return f"node '{_name(node)}' ({op}), sources {layouts}. What would work: {_advice(node, srcs)}"


def _refused_node_layouts(meta: Any, graph: Any, states: Any) -> str:
    """ggml fills the states of the nodes before the one it refuses: that node's sources' layouts and a way out."""
    n = lib.ggml_graph_n_nodes(graph.ptr)
    nodes = [lib.ggml_graph_node(graph.ptr, i) for i in range(n)]
    index = {int(ffi.cast("uintptr_t", t)): i for i, t in enumerate(nodes)}
    for i, node in enumerate(nodes):
        if (
            states[i].axis == lib.GGML_BACKEND_SPLIT_AXIS_UNKNOWN
            and lib.ggml_nelements(node) > 0
            and lib.ggml_backend_dev_supports_op(meta.device.ptr, node)
            and not _writes_into_input(node)
        ):
            try:
                return ". The " + _describe_node(meta, node, states, index)
            except Exception:  # noqa: BLE001 - the description is a courtesy; ggml's reason stands alone
                return ""
    return ""


def _writes_into_input(node: Any) -> bool:
    """A copy (or other in-place op) into a graph input: the scheduler runs it where the input is (patch 0040)."""
    vs = node.view_src
    return (
        vs != ffi.NULL
        and node.op not in _VIEW_OPS
        and bool(vs.flags & lib.GGML_TENSOR_FLAG_INPUT)
        and (vs.buffer == ffi.NULL or Buffer.parse(cstr(lib.ggml_backend_buffer_name(vs.buffer))).family != "meta")
    )


# ops linear in a partial source: the devices' results summed are the op of the sum (patch 0039)
_LINEAR_IN_PARTIAL = {
    getattr(lib, f"GGML_OP_{o}")
    for o in (
        "ADD SUB ADD1 ACC SUM SUM_ROWS MEAN REPEAT CONCAT DUP CPY CONT RESHAPE VIEW PERMUTE TRANSPOSE "
        "GET_ROWS SET SET_ROWS ROPE PAD"
    ).split()
}


def _whole_on_one_device(src: "_State", dst: Any, node: Any) -> bool:
    """A copy where each device holds all of both tensors or none of either (llama.cpp puts a layer whole on one
    device: every split of it gives the others extents of 0): the devices' copies are the tensor's, whatever the
    axes."""
    if not isinstance(dst, _State):
        return False
    ext_s, ext_d = int(node.src[0].ne[src.axis]), int(node.src[1].ne[dst.axis])
    return all(
        (a == 0 and b == 0) or (a == ext_s and b == ext_d) for a, b in zip(src.totals(), dst.totals(), strict=True)
    )


def check_layouts(meta: Any, graph: Any, states: Any) -> None:
    """Refuse what ggml's meta code without patch 0039 passes and computes wrongly: a concat of a split source with
    a mirrored one that does not broadcast along the split axis, a copy into a destination laid out otherwise, and
    a partial sum through an op not linear in it (the node's state partial)."""
    n = lib.ggml_graph_n_nodes(graph.ptr)
    nodes = [lib.ggml_graph_node(graph.ptr, i) for i in range(n)]
    index = {int(ffi.cast("uintptr_t", t)): i for i, t in enumerate(nodes)}
    for i, node in enumerate(nodes):
        if states[i].axis == lib.GGML_BACKEND_SPLIT_AXIS_UNKNOWN or _writes_into_input(node):
            continue
        problem = None
        if node.op == lib.GGML_OP_CONCAT:
            s0, s1 = (_source_state(meta, node.src[k], states, index) for k in (0, 1))
            for split, other, k in ((s0, s1, 1), (s1, s0, 0)):
                if isinstance(split, _State) and other == "mirrored" and node.src[k].ne[split.axis] != 1:
                    problem = "a concat of a split source with a mirrored one: each device would read the mirrored one's first indices"
        elif node.op == lib.GGML_OP_CPY:
            s0, s1 = (_source_state(meta, node.src[k], states, index) for k in (0, 1))
            mine = _State.of(states[i], meta.n_devices)
            if (
                isinstance(s0, _State)
                and (not isinstance(s1, _State) or mine is None or s1.axis != mine.axis or s1.totals() != mine.totals())
                and not _whole_on_one_device(s0, s1, node)
            ):
                problem = "a copy into a destination laid out otherwise: each device writes its part into its own copy"
        elif states[i].axis == lib.GGML_BACKEND_SPLIT_AXIS_PARTIAL and node.op not in _LINEAR_IN_PARTIAL:
            scale_ok = node.op == lib.GGML_OP_SCALE and ffi.cast("float *", node.op_params)[1] == 0.0
            neg_ok = node.op == lib.GGML_OP_UNARY and lib.ggml_get_unary_op(node) == lib.GGML_UNARY_OP_NEG
            partial = any(
                node.src[k] != ffi.NULL and _source_state(meta, node.src[k], states, index) == "partial"
                for k in range(MAX_SRC)
            )
            if partial and not (scale_ok or neg_ok):
                problem = "an op not linear in a partial sum: the sum of the devices' results is not the op of the sum"
        if problem is not None:
            raise Unsplittable(
                f"{meta.name} cannot split this graph: {problem}. The {_describe_node(meta, node, states, index)}"
            )
