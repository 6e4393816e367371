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
from typing import TYPE_CHECKING

from pyggml import lifetime, preflight, rpc_link
from pyggml._args import instance, integer
from pyggml._native import ffi, lib
from pyggml.backend import MAX_THREADS, Backend, Buffer, Device, GGMLError, auto_threads, device
from pyggml.context import Context
from pyggml.graph import Graph
from pyggml.tensor import MAX_DIMS, Tensor
from pyggml.types import DeviceType

if TYPE_CHECKING:
    from pyggml._pyggml_cffi import CData

MAX_DEVICES = lib.GGML_BACKEND_META_MAX_DEVICES
MIRRORED = "mirrored"
PARTIAL = "partial"
_AXES = {MIRRORED: lib.GGML_BACKEND_SPLIT_AXIS_MIRRORED, PARTIAL: lib.GGML_BACKEND_SPLIT_AXIS_PARTIAL}


@dataclass(frozen=True)
class Split:
    """How a static tensor is spread over the meta device's devices.

    Along the axis come the segments in order, each repeated, each repetition split over the devices in
    order: `Split(1, ((2, 2), (4, 4)), (2, 1))` gives device 0 indices 0-1, 4-5 and 8-11 of 16 (llama.cpp's
    [q | k | v] split: q's and k's heads, then v's, of each device). Computed tensors keep such a layout
    (patch 0026) or ggml refuses the graph, saying why.

    Args:
        axis: 0..2 in ggml's order (`ne[axis]` is split), "mirrored" (every device holds the whole tensor)
            or "partial" (every device holds a partial sum).
        sizes: for a split axis, the extent each device holds: one flat list (one segment), or one list per
            segment.
        repeats: how often each segment repeats along the axis; empty: once each.
    """

    axis: int | str
    sizes: tuple = ()
    repeats: tuple = ()

    @staticmethod
    def even(axis: int, extent: int, n_devices: int, granularity: int = 1) -> "Split":
        """Split `extent` over the devices as evenly as `granularity` allows (earlier devices get more).

        Args:
            axis: the axis to split, in ggml's order (0..2).
            extent: the tensor's extent along it, `t.ne[axis]`.
            n_devices: the meta device's device count.
            granularity: each device's share is a multiple of it (a quantized type's block size along axis 0,
                a head's size).

        Returns:
            A one-segment Split.

        Raises:
            ValueError: `extent` is not a multiple of `granularity`, or an argument is out of range.
            TypeError: an argument is not an integer.
        """
        extent = integer("Split.even: extent", extent, 0, 2**62)
        n_devices = integer("Split.even: n_devices", n_devices, 1, MAX_DEVICES)
        granularity = integer("Split.even: granularity", granularity, 1, 2**62)
        if extent % granularity:
            raise ValueError(f"extent {extent} is not a multiple of the granularity {granularity}")
        blocks = extent // granularity
        sizes = [(blocks // n_devices + (i < blocks % n_devices)) * granularity for i in range(n_devices)]
        return Split(axis, tuple(sizes))

    def segments(self) -> list[list[int]]:
        """The per-device sizes of each segment.

        Returns:
            One list of sizes (one per device) per segment; `[]` for a mirrored or partial split.
        """
        if not self.sizes:
            return []
        if isinstance(self.sizes[0], (list, tuple)):
            return [list(s) for s in self.sizes]
        return [list(self.sizes)]

    def validate(self, tensor: Tensor, n_devices: int) -> None:
        """Check that this split can be right for `tensor` on `n_devices` devices, before ggml sees it.

        Args:
            tensor: the tensor it splits.
            n_devices: the meta device's device count.

        Raises:
            ValueError: a bad axis (axis 3 included: ggml's meta buffer cannot set or get it), missing sizes,
                more than 16 segments, repeats that do not match the segments, a segment without one size per
                device, negative sizes, sizes that do not add up to the tensor's extent, or sizes along axis 0
                that cut through quantized blocks.
            TypeError: `tensor` is not a Tensor; a size or count that is not an integer.
        """
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
            raise ValueError(
                f"{where}: sizes add up to {total} along axis {self.axis}, the tensor has {tensor.ne[self.axis]}"
            )
        block = lib.ggml_blck_size(tensor.ptr.type)
        if self.axis == 0 and any(s % block for seg in segs for s in seg):
            # ggml asserts it at allocation: a device's slice along axis 0 must hold whole quantized blocks
            raise ValueError(
                f"{where}: sizes {segs} along axis 0 must be multiples of the block size "
                f"{block} of type {ffi.string(lib.ggml_type_name(tensor.ptr.type)).decode()}"
            )

    def to_c(self, out: CData) -> None:
        """Fill a `struct ggml_backend_meta_split_state` with this split (call `validate` first).

        Args:
            out: a `struct ggml_backend_meta_split_state *` (cffi cdata).

        Raises:
            TypeError: `out` is not such a pointer.
        """
        if not isinstance(out, ffi.CData) or ffi.typeof(out) is not ffi.typeof(
            "struct ggml_backend_meta_split_state *"
        ):
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


class _Slot:
    """A ggml meta device over a list of devices. ggml keeps it for the life of the process (it has no way to
    free one) and calls back into it for split states; it answers with the policy of the MetaDevice that uses
    it now. A slot whose MetaDevice is gone is used again by the next MetaDevice of the same devices, so that
    making Runners over the same devices again and again makes no new ggml device (5 KB each)."""

    def __init__(self, devs: Sequence[Device]) -> None:
        self.owner: weakref.ref[MetaDevice] | None = None
        self.handle = ffi.new_handle(self)
        arr = ffi.new("ggml_backend_dev_t[]", [d.ptr for d in devs])
        ptr = lib.ggml_backend_meta_device(arr, len(devs), lib.pyggml_meta_split_state, self.handle)
        if ptr == ffi.NULL:
            raise GGMLError("could not create the meta device")
        self.device = Device(ptr)
        rpc_link.register_meta(ptr, [d.ptr for d in devs])  # its faults are those of its RPC devices
        lifetime.keep_forever(self)  # ggml calls back with this handle for as long as the process lives


_SLOTS: dict[tuple[int, ...], list[_Slot]] = {}
_SLOTS_LOCK = threading.Lock()


def _take_slot(devs: Sequence[Device], user: MetaDevice) -> _Slot:
    """A slot over these devices for `user`: a free one (its MetaDevice gone), else a new one."""
    key = tuple(int(ffi.cast("uintptr_t", d.ptr)) for d in devs)
    with _SLOTS_LOCK:
        slots = _SLOTS.setdefault(key, [])
        free = next((s for s in slots if s.owner is None or s.owner() is None), None)
        if free is None:
            free = _Slot(devs)
            slots.append(free)
        free.owner = weakref.ref(user)
        return free


class MetaDevice:
    """A meta device over several devices with a split policy: one graph spread over them.

    ggml's meta devices live as long as the process; a MetaDevice uses one of the same devices whose
    MetaDevice is gone, or a new one. `init()` makes its backend; `Runner("meta:dev1,dev2")` makes one for you.

    Args:
        devices: 1 to `MAX_DEVICES` devices, by name ('cpu', 'vulkan0', ...) or as Device objects.
        policy: the split policy (see `set_policy`); None: everything mirrored.

    Attributes:
        devices: the devices, as Device objects.
        device: the meta device itself, a Device.
        policy: the split policy as a callable `policy(tensor) -> Split | None`.
        policy_version: how often the policy was set (a graph checked under one policy is checked again).

    Raises:
        ValueError: no device of a name, or not 1 to `MAX_DEVICES` of them.
        GGMLError: ggml cannot make the meta device.
    """

    def __init__(self, devices: Sequence[str | Device], policy: Policy | None = None) -> None:
        devs = [d if isinstance(d, Device) else device(d) for d in devices]
        if not 1 <= len(devs) <= MAX_DEVICES:
            raise ValueError(f"a meta device needs 1 to {MAX_DEVICES} devices, got {len(devs)}")
        self.devices = devs
        self.policy_version = 0  # counts set_policy calls: a graph checked under one policy is checked again
        self.set_policy(policy)
        self._lock = threading.Lock()
        self._errors: list[BaseException] = []
        self._slot = _take_slot(devs, self)
        self.device = self._slot.device

    @property
    def name(self) -> str:
        """The meta device's ggml name."""
        return self.device.name

    def set_policy(self, policy: Policy | None) -> None:
        """Replace the split policy; it applies to static tensors allocated from now on.

        Args:
            policy: a callable `policy(tensor) -> Split | None`, or a list of `(name pattern, Split or callable)`
                pairs whose fnmatch pattern is matched against the tensor's name (first match wins), or None.
                None, and no match, mean mirrored.
        """
        self.policy = _as_callable(policy)
        self.policy_version += 1

    @property
    def n_devices(self) -> int:
        """How many devices the meta device spreads over."""
        return len(self.devices)

    def split_of(self, t: Tensor) -> Split:
        """The policy's split for a static tensor, checked.

        Args:
            t: the tensor.

        Returns:
            Its Split (mirrored when the policy gives None).

        Raises:
            TypeError: the policy returned something other than a Split or None.
            ValueError: the split cannot be right for the tensor (see `Split.validate`).
        """
        split = self.policy(t)
        if split is None:
            split = Split(MIRRORED)
        if not isinstance(split, Split):
            raise TypeError(f"the split policy returned {type(split).__name__} for {t.name!r}, not a Split or None")
        split.validate(t, self.n_devices)
        return split

    def check_graph(self, graph: Graph) -> None:
        """Raise Unsplittable, with ggml's reason, if ggml's meta code cannot split some node of `graph`.

        `pyggml.preflight.meta`: ggml's own check, then the views it would split wrongly. Run once per graph,
        node count and policy: a reused graph costs one dictionary lookup.

        Args:
            graph: the graph.

        Raises:
            TypeError: `graph` is not a Graph.
            Unsplittable: a node cannot be split (the message names it and why).
        """
        instance("MetaDevice.check_graph: graph", graph, Graph)
        preflight.meta.check_graph(self, graph)

    def check(self, ctx: Context) -> dict[str, Split]:
        """Run the policy over every tensor of a context.

        Args:
            ctx: the context whose tensors are to be allocated on the meta device.

        Returns:
            Each tensor's name and its Split.

        Raises:
            TypeError: `ctx` is not a Context, or the policy returned something other than a Split or None.
            ValueError: the first impossible split.
        """
        instance("MetaDevice.check: ctx", ctx, Context)
        return {t.name: self.split_of(t) for t in ctx.tensors()}

    def _split_state(self, tensor_ptr, out) -> None:
        try:
            self.split_of(Tensor(tensor_ptr, None)).to_c(out)
        except BaseException as e:  # noqa: BLE001 - it is re-raised in the calling Python thread
            with self._lock:
                self._errors.append(e)
            Split(MIRRORED).to_c(out)

    def raise_pending(self) -> None:
        """Re-raise the first error the policy raised while ggml called it, and forget the rest.

        Raises:
            BaseException: whatever the policy raised.
        """
        with self._lock:
            errors, self._errors = self._errors, []
        if errors:
            raise errors[0]

    def init(self, n_threads: int | None = None) -> "MetaBackend":
        """A new backend on the meta device (`ggml_backend_dev_init`).

        Args:
            n_threads: the threads of each of its CPU devices; None chooses per graph (`auto_threads`).

        Returns:
            The MetaBackend.

        Raises:
            GGMLError: ggml cannot make it.
            ValueError: a thread count outside 1..4096.
        """
        if n_threads is not None:
            integer("n_threads", n_threads, 1, MAX_THREADS)
        ptr = lib.ggml_backend_dev_init(self.device.ptr, ffi.NULL)
        if ptr == ffi.NULL:
            raise GGMLError(f"could not initialise a backend on {self.name}")
        return MetaBackend(ptr, self, n_threads)

    def __repr__(self):
        return f"<MetaDevice {self.name}>"


@ffi.def_extern()
def pyggml_meta_split_state(tensor: CData, userdata: CData) -> CData:
    """The C callback ggml's meta code calls for the split state of each static tensor (see `MetaDevice`).

    Args:
        tensor: the `struct ggml_tensor *`.
        userdata: the handle of the device's `_Slot`.

    Returns:
        The `struct ggml_backend_meta_split_state`: the policy's split, or mirrored when the policy raised
        (the error is raised later in Python, `MetaDevice.raise_pending`).
    """
    out = ffi.new("struct ggml_backend_meta_split_state *")
    owner = ffi.from_handle(userdata).owner
    meta = owner() if owner is not None else None
    if meta is None:  # no MetaDevice uses the device now: nothing to split by
        Split(MIRRORED).to_c(out)
    else:
        meta._split_state(tensor, out)
    return out[0]


class MetaBackend(Backend):
    """The backend of a meta device; the policy's errors surface as Python exceptions.

    Args:
        ptr: the `ggml_backend_t` (cffi cdata).
        meta: its MetaDevice.
        n_threads: the threads of each of its CPU devices; None chooses per graph.

    Attributes:
        meta: the MetaDevice.
    """

    def __init__(self, ptr: CData, meta: MetaDevice, n_threads: int | None = None) -> None:
        self.meta = meta
        self.fixed_threads = n_threads
        super().__init__(ptr, meta.device)

    def _threads_for(self, graph: Graph) -> None:
        """Before computing graph: its CPU devices' threads, those it was made with or `auto_threads(graph)`
        (ggml patch 0035; each may take every core, the meta backend computes its devices one after another).
        Without it they kept ggml's default of 4 whatever the machine had; without the fixed count, `check -j`'s
        workers each took every core for their splits (a delta_net case 100 times slower than on the CPU)."""
        if not self.runs_on_cpu or not hasattr(lib, "ggml_backend_meta_set_n_threads"):
            return
        n = self.fixed_threads or auto_threads(graph)
        if n != self.n_threads:
            lib.ggml_backend_meta_set_n_threads(self.ptr, n)
            self.n_threads = n

    @property
    def runs_on_cpu(self) -> bool:
        """Whether the CPU kernels' rules apply: when any device of the meta device is a CPU."""
        return any(d.type == DeviceType.CPU for d in self.meta.devices)

    @property
    def rule_kinds(self) -> tuple[str, ...]:
        """The rules of the kernels of every kind among its devices (the CPU's, Vulkan's: each device computes its
        share of every node with them); the meta rules are checked apart (`pyggml.preflight.meta`)."""
        from pyggml import backend_kinds

        kinds = []
        for d in self.meta.devices:
            k = "cpu" if d.type == DeviceType.CPU else getattr(backend_kinds.of_device(d.name), "family", None)
            if k is not None and k not in kinds:
                kinds.append(k)
        return tuple(kinds)

    def alloc_tensors(self, ctx: Context) -> Buffer:
        """Check the policy over the context's tensors, then allocate them as `Backend.alloc_tensors` does.

        Args:
            ctx: a Context made with `no_alloc=True`.

        Returns:
            The new Buffer.

        Raises:
            ValueError: an impossible split (see `Split.validate`), or a context made with `no_alloc=False`.
            TypeError: the policy returned something other than a Split or None.
            GGMLError: there is nothing to allocate, or no memory for it.
        """
        self.meta.check(ctx)
        buf = super().alloc_tensors(ctx)
        self.meta.raise_pending()
        return buf

    def compute(self, graph: Graph) -> None:
        """Check that ggml can split the graph, then compute it as `Backend.compute` does.

        Args:
            graph: the allocated graph.

        Raises:
            Unsplittable: a node cannot be split.
            GraphError: the preflight refuses the graph.
            GGMLError: ggml reports a failed compute.
        """
        self.meta.check_graph(graph)
        try:
            super().compute(graph)
        finally:
            self.meta.raise_pending()
