"""ggml's meta backend from Python: one graph split over several devices.

A meta device wraps simple devices (`cpu`, `vulkan0`, ...). Every statically allocated
tensor gets a split state from a *policy* written in Python; ggml derives the split of
every computed tensor from those. A policy is a callable `policy(tensor) -> Split | None`
or a list of `(name pattern, Split or callable)` pairs, first match wins; None (and no
match) means mirrored: every device holds the whole tensor.

ggml calls the policy through one C callback (`pyggml_meta_split_state`), possibly from
its own threads: cffi takes the GIL for it, and the callback touches no state but the
policy's. A split that cannot be right (a bad axis, sizes that do not add up to the
tensor's extent, a wrong device count) raises ValueError in Python before ggml sees it:
`MetaDevice.check(ctx)` runs the policy over a context's tensors, and `alloc_tensors`
does so before allocating.
"""

from __future__ import annotations

import fnmatch
import re
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from pyggml._args import instance, integer
from pyggml._native import ffi, lib
from pyggml import rpc
from pyggml.backend import Backend, Buffer, Device, GGMLError, device
from pyggml.context import Context
from pyggml.errors import Unsplittable
from pyggml.graph import Graph
from pyggml.tensor import MAX_DIMS, Tensor
from pyggml.types import DeviceType

MAX_DEVICES = lib.GGML_BACKEND_META_MAX_DEVICES
MIRRORED = "mirrored"
PARTIAL = "partial"
_AXES = {MIRRORED: lib.GGML_BACKEND_SPLIT_AXIS_MIRRORED, PARTIAL: lib.GGML_BACKEND_SPLIT_AXIS_PARTIAL}


@dataclass(frozen=True)
class Split:
    """How a static tensor is spread over the meta device's devices.

    axis: 0..3 (ggml order), "mirrored" or "partial".
    sizes: for a split axis, the extent each device holds, one list per segment
    (a single flat list is one segment); repeats: how often each segment repeats.
    """
    axis: int | str
    sizes: tuple = ()
    repeats: tuple = ()

    @staticmethod
    def even(axis: int, extent: int, n_devices: int, granularity: int = 1) -> "Split":
        """Split `extent` over the devices as evenly as `granularity` allows (earlier devices get more)."""
        extent = integer("Split.even: extent", extent, 0, 2**62)
        n_devices = integer("Split.even: n_devices", n_devices, 1, MAX_DEVICES)
        granularity = integer("Split.even: granularity", granularity, 1, 2**62)
        if extent % granularity:
            raise ValueError(f"extent {extent} is not a multiple of the granularity {granularity}")
        blocks = extent // granularity
        sizes = [(blocks // n_devices + (i < blocks % n_devices)) * granularity for i in range(n_devices)]
        return Split(axis, tuple(sizes))

    def segments(self) -> list[list[int]]:
        if not self.sizes:
            return []
        if isinstance(self.sizes[0], (list, tuple)):
            return [list(s) for s in self.sizes]
        return [list(self.sizes)]

    def validate(self, tensor: Tensor, n_devices: int) -> None:
        instance("Split.validate: tensor", tensor, Tensor)
        n_devices = integer("Split.validate: n_devices", n_devices, 1, MAX_DEVICES)
        where = f"split of tensor {tensor.name or '(unnamed)'} ne={tensor.ne}"
        if self.axis in _AXES:
            return
        if not isinstance(self.axis, int) or not 0 <= self.axis < MAX_DIMS:
            raise ValueError(f"{where}: axis must be 0..{MAX_DIMS - 1}, 'mirrored' or 'partial', got {self.axis!r}")
        if self.axis == MAX_DIMS - 1:
            # ggml's meta buffer sets and gets a split tensor chunk-wise along axes 0..2 only
            raise ValueError(f"{where}: ggml's meta backend cannot set or get a tensor split along axis 3")
        segs = self.segments()
        if not segs:
            raise ValueError(f"{where}: a split along axis {self.axis} needs per-device sizes")
        if len(segs) > 16:
            raise ValueError(f"{where}: at most 16 segments, got {len(segs)}")
        repeats = [integer(f"{where}: a repeat count", r) for r in self.repeats] or [1] * len(segs)
        if len(repeats) != len(segs) or any(r < 1 for r in repeats):
            raise ValueError(f"{where}: repeats {repeats} must give a count >= 1 for each of the {len(segs)} segments")
        for seg in segs:
            for s in seg:
                integer(f"{where}: a size", s)
            if len(seg) != n_devices:
                raise ValueError(f"{where}: each segment needs one size per device ({n_devices}), got {seg}")
            if any(s < 0 for s in seg):
                raise ValueError(f"{where}: sizes must be non-negative, got {seg}")
        total = sum(sum(seg) * r for seg, r in zip(segs, repeats))
        if total != tensor.ne[self.axis]:
            raise ValueError(f"{where}: sizes add up to {total} along axis {self.axis}, "
                             f"the tensor has {tensor.ne[self.axis]}")
        if len(segs) > 1 or repeats != [1]:
            # ggml derives a computed tensor's split with one segment (the per-device totals: the FIXME
            # in ggml_backend_meta_get_split_state), so a mul_mat of a several-segment weight put the
            # rows of each device in the wrong places: silently wrong (max error 2.8 in issue 9)
            raise ValueError(f"{where}: {len(segs)} segments with repeats {repeats}: ggml's meta backend "
                             f"loses the segment layout in computed tensors (wrong results); use one segment")
        block = lib.ggml_blck_size(tensor.ptr.type)
        if self.axis == 0 and any(s % block for s in segs[0]):
            # ggml asserts it at allocation: a device's slice along axis 0 must hold whole quantized blocks
            raise ValueError(f"{where}: sizes {segs[0]} along axis 0 must be multiples of the block size "
                             f"{block} of type {ffi.string(lib.ggml_type_name(tensor.ptr.type)).decode()}")

    def to_c(self, out) -> None:
        """Fill a struct ggml_backend_meta_split_state (validate first)."""
        if not isinstance(out, ffi.CData) or ffi.typeof(out) is not ffi.typeof("struct ggml_backend_meta_split_state *"):
            raise TypeError("Split.to_c: out must be a struct ggml_backend_meta_split_state * (cdata)")
        if self.axis in _AXES:
            out.axis = _AXES[self.axis]
            out.n_segments = 1
            out.nr[0] = 1
            return
        out.axis = self.axis
        segs = self.segments()
        repeats = list(self.repeats) or [1] * len(segs)
        out.n_segments = len(segs)
        k = 0
        for s, seg in enumerate(segs):
            out.nr[s] = repeats[s]
            for size in seg:
                out.ne[k] = size
                k += 1


Policy = Callable[[Tensor], "Split | None"] | Sequence[tuple[str, "Split | Callable[[Tensor], Split | None]"]]


def _as_callable(policy) -> Callable[[Tensor], Split | None]:
    if policy is None:
        return lambda t: None
    if callable(policy):
        return policy
    rules = [(re.compile(fnmatch.translate(pattern)), rule) for pattern, rule in policy]

    def by_name(t: Tensor):
        for rx, rule in rules:
            if rx.match(t.name):
                return rule(t) if callable(rule) else rule
        return None
    return by_name


# meta devices live as long as the process (ggml caches them by (devices, callback, userdata))
_DEVICES: list["MetaDevice"] = []


class MetaDevice:
    """A meta device over `devices` (names or Device objects) with a split policy."""

    def __init__(self, devices: Sequence[str | Device], policy: Policy | None = None):
        devs = [d if isinstance(d, Device) else device(d) for d in devices]
        if not 1 <= len(devs) <= MAX_DEVICES:
            raise ValueError(f"a meta device needs 1 to {MAX_DEVICES} devices, got {len(devs)}")
        self.devices = devs
        self.set_policy(policy)
        self._lock = threading.Lock()
        self._errors: list[BaseException] = []
        self._checked: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # graph -> {(n_nodes, policy)}
        self._handle = ffi.new_handle(self)
        arr = ffi.new("ggml_backend_dev_t[]", [d.ptr for d in devs])
        ptr = lib.ggml_backend_meta_device(arr, len(devs), lib.pyggml_meta_split_state, self._handle)
        if ptr == ffi.NULL:
            raise GGMLError("could not create the meta device")
        self.device = Device(ptr)
        rpc.register_meta(ptr, [d.ptr for d in devs])  # its faults are those of its RPC devices
        _DEVICES.append(self)

    @property
    def name(self) -> str:
        return self.device.name

    def set_policy(self, policy: Policy | None):
        """Replace the split policy; it applies to static tensors allocated from now on."""
        self.policy = _as_callable(policy)

    @property
    def n_devices(self) -> int:
        return len(self.devices)

    def split_of(self, t: Tensor) -> Split:
        """The policy's split for a static tensor, checked."""
        split = self.policy(t)
        if split is None:
            split = Split(MIRRORED)
        if not isinstance(split, Split):
            raise TypeError(f"the split policy returned {type(split).__name__} for {t.name!r}, not a Split or None")
        split.validate(t, self.n_devices)
        return split

    def _root_state(self, root, states, index) -> "_State | None":
        """The split state ggml gives a view's source: a node's as ggml derived it, a static tensor's
        from the policy; None for anything that reaches the meta device mirrored (an input, a node
        computed elsewhere)."""
        i = index.get(int(ffi.cast("uintptr_t", root)))
        if i is not None:
            return _State.of(states[i], self.n_devices)
        buf = root.buffer
        if (buf != ffi.NULL and lib.ggml_backend_buffer_get_usage(buf) != lib.GGML_BACKEND_BUFFER_USAGE_COMPUTE
                and lib.ggml_backend_buft_get_device(lib.ggml_backend_buffer_get_type(buf)) == self.device.ptr):
            out = ffi.new("struct ggml_backend_meta_split_state *")
            self.split_of(Tensor(root, None)).to_c(out)
            return _State.of(out[0], self.n_devices)
        return None

    def _check_views(self, graph, states) -> None:
        """Refuse a view that ggml's meta code would map onto the devices' shares wrongly.

        ggml gives a view of a split tensor, on each device, the same view of that device's share,
        scaled by the share's proportion (handle_view in ggml_backend_meta_get_split_state, and
        ggml_backend_meta_buffer_init_tensor_impl: the extent along the split dim, the strides above it,
        the offset unless ggml deems it internal). That is the single-device answer only when it maps
        each device's part of the view onto the elements of the source it names: a view that takes part
        of the split axis (fused q/k/v views of a product split in one segment) or an offset with parts
        above and below the split dim reads the wrong elements, silently. Each view is mapped here as
        ggml maps it, device by device, onto the source's elements, and compared with the view itself.
        """
        n = lib.ggml_graph_n_nodes(graph.ptr)
        nodes = [lib.ggml_graph_node(graph.ptr, i) for i in range(n)]
        index = {int(ffi.cast("uintptr_t", t)): i for i, t in enumerate(nodes)}
        for i, v in enumerate(nodes):
            if v.view_src == ffi.NULL or lib.ggml_nelements(v) == 0 or not _view_chain(v):
                continue
            vs = _State.of(states[i], self.n_devices)
            if vs is None and states[i].axis == lib.GGML_BACKEND_SPLIT_AXIS_UNKNOWN:
                continue  # not computed on the meta device
            rs = self._root_state(v.view_src, states, index)
            if rs is None:
                continue
            problem = _view_mismatch(v, vs, v.view_src, rs)
            if problem is None:
                continue
            name = ffi.string(v.name).decode(errors="replace") or "(unnamed)"
            root = ffi.string(v.view_src.name).decode(errors="replace") or "(unnamed)"
            op = ffi.string(lib.ggml_op_desc(v)).decode()
            shares = "/".join(str(x) for x in rs.totals())
            raise Unsplittable(
                f"{self.name} cannot split this graph: the {op} '{name}' (ne={tuple(v.ne)}, nb={tuple(v.nb)}, offset "
                f"{v.view_offs}) of '{root}' (ne={tuple(v.view_src.ne)}, split along axis {rs.axis} in shares "
                f"{shares}) {problem}; ggml's meta backend gives each device the same view of its own share, "
                f"scaled by the share, so it would read the wrong elements. Make the view line up with the split: "
                f"keep the split axis whole in every view (lay fused rows out in groups, [q k v] of one group "
                f"together and whole groups on each device, and take each part with a view strided across the "
                f"groups, as pyggml.models.delta_net does), split separate tensors instead of one fused one, or mirror "
                f"{root}")

    def check_graph(self, graph) -> None:
        """Raise Unsplittable, with ggml's reason, if ggml's meta code cannot split some node of graph.

        ggml derives every computed tensor's split from the static tensors' (as allocated, so allocate
        static tensors first); where it cannot, it aborts at allocation or compute and the process
        dies. ggml_backend_meta_graph_check (patch 0009) runs the same derivation and reports instead;
        with the split states it derives (patch 0022), views that ggml would map onto the devices'
        shares wrongly are refused too (_check_views).
        Run once per graph, node count and policy: a reused graph costs one dictionary lookup.
        """
        instance("MetaDevice.check_graph: graph", graph, Graph)
        key = (graph.n_nodes, id(self.policy))
        if key in self._checked.get(graph, ()):
            return
        reason = ffi.new("char[]", 1024)
        states = ffi.new("struct ggml_backend_meta_split_state[]", max(1, graph.n_nodes))
        ok = lib.ggml_backend_meta_graph_split_states(self.device.ptr, graph.ptr, states, reason, len(reason))
        self.raise_pending()
        if not ok:
            raise Unsplittable(f"{self.name} cannot split this graph: {ffi.string(reason).decode(errors='replace')}")
        self._check_views(graph, states)  # what ggml's check passes but computes wrongly
        self._checked.setdefault(graph, set()).add(key)

    def check(self, ctx) -> dict[str, Split]:
        """Run the policy over every tensor of a context; raises on the first impossible split."""
        instance("MetaDevice.check: ctx", ctx, Context)
        return {t.name: self.split_of(t) for t in ctx.tensors()}

    def _split_state(self, tensor_ptr, out) -> None:
        try:
            self.split_of(Tensor(tensor_ptr, None)).to_c(out)
        except BaseException as e:  # noqa: BLE001 - it is re-raised in the calling Python thread
            with self._lock:
                self._errors.append(e)
            Split(MIRRORED).to_c(out)

    def raise_pending(self):
        """Re-raise an error the policy raised while ggml called it."""
        with self._lock:
            errors, self._errors = self._errors, []
        if errors:
            raise errors[0]

    def init(self) -> "MetaBackend":
        ptr = lib.ggml_backend_dev_init(self.device.ptr, ffi.NULL)
        if ptr == ffi.NULL:
            raise GGMLError(f"could not initialise a backend on {self.name}")
        return MetaBackend(ptr, self)

    def __repr__(self):
        return f"<MetaDevice {self.name}>"


_VIEW_OPS = (lib.GGML_OP_VIEW, lib.GGML_OP_RESHAPE, lib.GGML_OP_PERMUTE, lib.GGML_OP_TRANSPOSE)


def _view_chain(v) -> bool:
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
    def of(c, n_devices: int) -> "_State | None":
        if not 0 <= c.axis < MAX_DIMS:
            return None
        segs = tuple(tuple(int(c.ne[s * n_devices + j]) for j in range(n_devices)) for s in range(c.n_segments))
        return _State(int(c.axis), segs, tuple(int(c.nr[s]) for s in range(c.n_segments)))

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


def _sample(ne: int, edges=()) -> np.ndarray:
    if ne <= _SAMPLE:
        return np.arange(ne, dtype=np.int64)
    picks = {0, 1, ne - 2, ne - 1, *np.linspace(0, ne - 1, 16, dtype=np.int64).tolist()}
    for e in edges:
        picks.update(x for x in (e - 1, e, e + 1) if 0 <= x < ne)
    return np.array(sorted(picks), dtype=np.int64)


def _addresses(ne, nb, offs, edges_dim=None, edges=()) -> tuple[list[np.ndarray], np.ndarray]:
    """The (sampled) index of every element along each dim, and the byte address of each element."""
    idx = [_sample(int(ne[k]), edges if k == edges_dim else ()) for k in range(MAX_DIMS)]
    grid = np.meshgrid(*idx, indexing="ij")
    return idx, offs + sum(g * int(nb[k]) for k, g in enumerate(grid))


def _view_mismatch(v, vs: "_State | None", root, rs: _State) -> str | None:
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


def _what(v, root, rs: _State, j: int, how: str) -> str:
    """Say why a view goes wrong: the part of the split axis it takes, or its offset."""
    a = rs.axis
    row = int(root.nb[a + 1]) if a < MAX_DIMS - 1 else None
    offs = np.array([int(v.view_offs) % row if row else int(v.view_offs)], dtype=np.int64)
    for k in range(MAX_DIMS):
        if v.ne[k] > 1 and (row is None or v.nb[k] < row):
            offs = np.unique(np.add.outer(offs, np.arange(min(int(v.ne[k]), 1 << 12), dtype=np.int64) * int(v.nb[k])).ravel())
    coords = np.unique((offs % row if row else offs) // int(root.nb[a]))
    if coords.size != int(root.ne[a]) or coords[0] != 0:
        return (f"takes part of its split axis {a} (indices {coords[0]}..{coords[-1]} of {int(root.ne[a])}): "
                f"device {j} {how}")
    return (f"keeps the split axis {a} whole, but ggml maps its offset {int(v.view_offs)} (a part above and one "
            f"below the split axis) wrongly: device {j} {how}")


@ffi.def_extern()
def pyggml_meta_split_state(tensor, userdata):
    out = ffi.new("struct ggml_backend_meta_split_state *")
    ffi.from_handle(userdata)._split_state(tensor, out)
    return out[0]


class MetaBackend(Backend):
    """The backend of a meta device; the policy's errors surface as Python exceptions."""

    def __init__(self, ptr, meta: MetaDevice):
        self.meta = meta
        super().__init__(ptr, meta.device)

    @property
    def runs_on_cpu(self) -> bool:
        """The CPU kernels' rules apply when any device of the meta device is a CPU."""
        return any(d.type == DeviceType.CPU for d in self.meta.devices)

    def alloc_tensors(self, ctx) -> Buffer:
        self.meta.check(ctx)
        buf = super().alloc_tensors(ctx)
        self.meta.raise_pending()
        return buf

    def compute(self, graph):
        self.meta.check_graph(graph)
        try:
            super().compute(graph)
        finally:
            self.meta.raise_pending()
