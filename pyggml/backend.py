"""Devices, backends, buffers, the graph allocator (gallocr) and the scheduler.

Devices are named as ggml names them, case-insensitively: `cpu`, `vulkan0`, `cuda0`.
A CPU backend made without `n_threads` chooses its threads per graph: one for a small graph (ggml
starts and joins its threads at every compute, which a small graph's work never repays), the machine's
cores for a large one (`auto_threads`; what each costs: bench/cpu_threads.py and bench/README.md); ggml's
own default is a fixed 4.
"""

from __future__ import annotations

import contextlib
import os
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyggml import backend_kinds, cpu_variants, lifetime, preflight, threads, transport
from pyggml._args import instance, integer, text
from pyggml._native import build_info, cstr, ffi, lib
from pyggml.context import Context
from pyggml.errors import GGMLError, GraphError
from pyggml.graph import MAX_GRAPH_SIZE, Graph
from pyggml.lifetime import Closable, Lender, graph_tensors
from pyggml.serial import serialized
from pyggml.target import Target
from pyggml.tensor import Tensor
from pyggml.types import DeviceType, Op, Status

if TYPE_CHECKING:
    from pyggml._pyggml_cffi import CData


def _check_status(status: int, what):
    """what: a text, or a callable giving it (formatted only on failure: compute is a hot path)."""
    if status != lib.GGML_STATUS_SUCCESS:
        raise GGMLError(f"{what() if callable(what) else what} failed: {Status(status).name}")


# --- devices -------------------------------------------------------------------------------
def enable_cpu_vulkan_devices(spec: str = "0") -> str:
    """Let ggml-vulkan list CPU-type Vulkan devices (Mesa's lavapipe, a software Vulkan).

    ggml-vulkan skips such devices unless `GGML_VK_VISIBLE_DEVICES` names them ("0", or "0,0" for the same
    device twice, which gives two devices on a machine with one). ggml reads the variable once, when it first
    lists devices, so call this before anything else. An explicit `GGML_VK_VISIBLE_DEVICES` in the
    environment wins.

    Args:
        spec: the value to set when the variable is unset.

    Returns:
        The value in force.
    """
    return os.environ.setdefault("GGML_VK_VISIBLE_DEVICES", spec)


@dataclass(frozen=True)
class Device:
    """A ggml backend device (`ggml_backend_dev_t`): the CPU, a GPU, an RPC server's device, a meta device.

    Listed by `pyggml.devices()`, found by `pyggml.device(name)`; `init()` makes a Backend on it. Frozen:
    two Device objects of the same device are equal.

    Attributes:
        ptr: the `ggml_backend_dev_t` (cffi cdata).
    """

    ptr: object

    @property
    def name(self) -> str:
        """The device's ggml name ('CPU', 'Vulkan0', 'RPC0', ...; `ggml_backend_dev_name`).

        What `pyggml.device()` and `Runner` take, in any case.
        """
        return cstr(lib.ggml_backend_dev_name(self.ptr))

    @property
    def description(self) -> str:
        """The device's description from its backend, e.g. the GPU's model (`ggml_backend_dev_description`)."""
        return cstr(lib.ggml_backend_dev_description(self.ptr))

    @property
    def type(self) -> DeviceType:
        """The device's kind (`pyggml.types.DeviceType`: CPU, GPU, IGPU, ACCEL, META; `ggml_backend_dev_type`)."""
        return DeviceType(lib.ggml_backend_dev_type(self.ptr))

    @property
    def backend_name(self) -> str:
        """The name of the backend registry the device belongs to ('CPU', 'Vulkan', 'RPC', ...)."""
        return cstr(lib.ggml_backend_reg_name(lib.ggml_backend_dev_backend_reg(self.ptr)))

    def memory(self) -> tuple[int, int]:
        """The device's memory (`ggml_backend_dev_memory`).

        Returns:
            `(free, total)` in bytes.
        """
        free, total = ffi.new("size_t *"), ffi.new("size_t *")
        lib.ggml_backend_dev_memory(self.ptr, free, total)
        return free[0], total[0]

    def init(self, n_threads: int | None = None) -> "Backend":
        """A new Backend on this device (`ggml_backend_dev_init`).

        Args:
            n_threads: a CPU device's fixed thread count; None chooses per graph (see `cpu_backend`). Other
                devices ignore it.

        Returns:
            The backend.

        Raises:
            GGMLError: ggml cannot make a backend on the device.
            ValueError: a thread count outside 1..4096.
        """
        ptr = lib.ggml_backend_dev_init(self.ptr, ffi.NULL)
        if ptr == ffi.NULL:
            raise GGMLError(f"could not initialise a backend on device {self.name}")
        return Backend(ptr, self, n_threads)

    def supports_op(self, t: Tensor) -> bool:
        """Whether the device can compute the node `t`, its op with its types and shapes (`ggml_backend_dev_supports_op`).

        Args:
            t: a node (a tensor made by an op).

        Returns:
            True when the device supports it.
        """
        return bool(lib.ggml_backend_dev_supports_op(self.ptr, t.ptr))

    def __repr__(self):
        return f"<Device {self.name}: {self.description} ({self.type.name})>"


def devices() -> list[Device]:
    """Every device ggml registered on this machine (`ggml_backend_dev_get`).

    Returns:
        The devices in the registry's order: GPUs first, then the CPU, then RPC servers' devices as they
        are added.
    """
    return [Device(lib.ggml_backend_dev_get(i)) for i in range(lib.ggml_backend_dev_count())]


def backend_features() -> dict[str, dict[str, str]]:
    """What each registered backend says it was built with (ggml_backend_get_features).

    Returns:
        `{registry name: {feature: value}}`: for CUDA the architectures of its kernels ("ARCHS": "900" for
        sm_90), "NO_VMM", "FA_QUANTS", ...; for the CPU the SIMD extensions it uses. A backend without the
        function is left out.
    """
    out: dict[str, dict[str, str]] = {}
    for i in range(lib.ggml_backend_reg_count()):
        reg = lib.ggml_backend_reg_get(i)
        fn = lib.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_get_features")
        if fn == ffi.NULL:
            continue
        features = ffi.cast("ggml_backend_get_features_t", fn)(reg)
        found: dict[str, str] = {}
        j = 0
        while features[j].name != ffi.NULL:
            found[cstr(features[j].name)] = cstr(features[j].value)
            j += 1
        out[cstr(lib.ggml_backend_reg_name(reg))] = found
    return out


def device(name: str) -> Device:
    """The device of this name.

    Args:
        name: 'cpu', 'vulkan0', 'cuda0', 'rpc0', ..., in any case; `cpu:VARIANT` one of ggml's CPU variants this
            build has (`cpu:zen4`; `cpu:best` the one ggml would load here: `pyggml.cpu_variants`).

    Returns:
        The device.

    Raises:
        ValueError: no device matches; the message lists this build's devices (and how to get a missing
            one: `pyggml.backend_kinds`).
        TypeError: `name` is not a str.
    """
    text("device: name", name)
    if Target.parse(name).variant is not None:  # one of ggml's CPU variants: cpu:zen4, cpu:best
        return Device(cpu_variants.device_ptr(name))
    for d in devices():
        if d.name.lower() == name.lower():
            return d
    known = ", ".join(d.name.lower() for d in devices())
    hint = ""
    k = backend_kinds.of_device(name)
    if k is not None and k.family not in build_info()["backends"]:
        hint = f" (this build has no {k.family} backend: rebuild with {backend_kinds.build_hint(k)})"
    elif k is not None and k.missing:
        hint = f" ({k.missing})"
    raise ValueError(f"no device named {name!r}; this build has: {known}{hint}")


# --- backends ----------------------------------------------------------------------------
class Backend(Closable):
    """A ggml backend (`ggml_backend_t`): a device's stream that computes graphs; freed with the object.

    Made by `device.init(n_threads)`, `pyggml.backend(name)` or `pyggml.cpu_backend(n_threads)`.
    `compute(graph)` computes a graph whose tensors have memory this backend can use (`alloc_tensors`, a
    Gallocr on its `buffer_type`). Most users want a `Runner`, which adds the scheduler, the CPU for inputs,
    and the checks before compute.

    Args:
        ptr: the `ggml_backend_t` (cffi cdata); the Backend frees it.
        dev: its Device; None asks ggml.
        n_threads: for a CPU backend, a fixed thread count; None chooses per graph (`auto_threads`).

    Attributes:
        ptr: the `ggml_backend_t`.
        device: the Device it runs on.
        n_threads: on a CPU backend the thread count in force (None on others).
        auto_threads: whether the thread count is chosen per graph (made without `n_threads`).
        lock: held by each compute: threads take turns (`pyggml.serial`).
    """

    def __init__(self, ptr: CData, dev: Device | None = None, n_threads: int | None = None) -> None:
        self._ptr = ffi.gc(ptr, lib.ggml_backend_free)
        self._users: weakref.WeakSet = weakref.WeakSet()  # the Schedulers computing with it
        self.lock = threading.RLock()  # one compute at a time (pyggml.serial)
        self.device = dev if dev is not None else Device(lib.ggml_backend_get_device(ptr))
        self.n_threads: int | None = None
        self._rule_kinds: tuple[str, ...] | None = None
        # n_threads None: chosen per graph by its work (auto_threads), else fixed
        self.auto_threads = n_threads is None
        if self.is_cpu:
            self.set_n_threads(threads.cores() if n_threads is None else n_threads)
            self.auto_threads = n_threads is None

    def _close(self) -> None:
        users = [u for u in self._users if not u.closed]
        if users:
            raise ValueError(
                f"Backend.close: a Scheduler still computes with {self.name}: close it (or its Runner) first"
            )
        with self.lock:
            ffi.release(self._ptr)

    @property
    def name(self) -> str:
        """The backend's ggml name ('CPU', 'Vulkan0', ...; `ggml_backend_name`)."""
        return cstr(lib.ggml_backend_name(self.ptr))

    @property
    def is_cpu(self) -> bool:
        """Whether this is ggml's CPU backend (`ggml_backend_is_cpu`), the only one with a thread count."""
        return bool(lib.ggml_backend_is_cpu(self.ptr))

    def set_n_threads(self, n: int) -> None:
        """Compute with `n` threads from now on, instead of choosing them per graph (`ggml_backend_cpu_set_n_threads`).

        Args:
            n: the thread count, 1 to `MAX_THREADS` (4096).

        Raises:
            ValueError: the backend is not the CPU, or `n` is out of range.
            TypeError: `n` is not an integer.
        """
        n = integer("n_threads", n, 1, MAX_THREADS)
        if not self.is_cpu:
            raise ValueError(f"{self.name} is not a CPU backend; threads are set on CPU backends")
        self._set_threads(n)
        self.n_threads = n
        self.auto_threads = False

    def _set_threads(self, n: int) -> None:
        # through the device's registry (ggml_backend_set_n_threads): a CPU variant (pyggml.cpu_variants) is a copy
        # of ggml-cpu of its own, whose backend this module's ggml_backend_cpu_set_n_threads does not own
        fn = lib.ggml_backend_reg_get_proc_address(
            lib.ggml_backend_dev_backend_reg(self.device.ptr), b"ggml_backend_set_n_threads"
        )
        if fn == ffi.NULL:
            lib.ggml_backend_cpu_set_n_threads(self.ptr, n)
        else:
            ffi.cast("ggml_backend_set_n_threads_t", fn)(self.ptr, n)

    def _threads_for(self, graph: Graph) -> None:
        """Before computing graph: a CPU backend made without n_threads takes `auto_threads(graph)`."""
        if self.is_cpu and self.auto_threads:
            n = auto_threads(graph)
            if n != self.n_threads:
                self._set_threads(n)
                self.n_threads = n

    @property
    def buffer_type(self) -> CData:
        """The backend's default buffer type (`ggml_backend_get_default_buffer_type`), a cffi cdata.

        For example for `Gallocr(backend.buffer_type)`.
        """
        return lib.ggml_backend_get_default_buffer_type(self.ptr)

    def supports_op(self, t: Tensor) -> bool:
        """Whether the backend can compute the node `t` (`ggml_backend_supports_op`).

        Args:
            t: a node (a tensor made by an op).

        Returns:
            True when the backend supports it.

        Raises:
            TypeError: `t` is not a Tensor.
        """
        return bool(lib.ggml_backend_supports_op(self.ptr, instance("supports_op: t", t, Tensor).ptr))

    def unsupported(self, graph: Graph) -> list[Tensor]:
        """The nodes of the graph this backend cannot compute (see `supports_op`).

        Args:
            graph: the graph to look through.

        Returns:
            The nodes, in compute order.

        Raises:
            TypeError: `graph` is not a Graph.
        """
        instance("unsupported: graph", graph, Graph)
        return [n for n in graph.nodes if n.op.name != "NONE" and not self.supports_op(n)]

    def alloc_tensors(self, ctx: Context) -> "Buffer":
        """Give every tensor of a `no_alloc` context memory in one new buffer of this backend (`ggml_backend_alloc_ctx_tensors`).

        The context keeps the buffer alive, and the memory stays the tensors' own: weights are written once
        (`Tensor.set`) and `Tensor.view()` is allowed. Graphs built in other contexts may read these tensors.

        Args:
            ctx: a Context made with `no_alloc=True` (the default).

        Returns:
            The new Buffer.

        Raises:
            TypeError: `ctx` is not a Context.
            ValueError: a context made with `no_alloc=False` (it holds its data already).
            GGMLError: there is nothing to allocate, or no memory for it.
        """
        instance("alloc_tensors: ctx", ctx, Context)
        if not ctx.no_alloc:
            raise ValueError("alloc_tensors: the context already holds its tensors' data (no_alloc=False)")
        ptr = lib.ggml_backend_alloc_ctx_tensors(ctx.ptr, self.ptr)
        transport.after_device_call([self.device.ptr])
        if ptr == ffi.NULL:
            raise GGMLError(
                f"{self.name}: could not allocate the context's tensors (none to allocate, or out of memory)"
            )
        buf = Buffer(ptr, ctx)
        ctx.keep_alive(buf)
        return buf

    @property
    def is_vulkan(self) -> bool:
        """Whether the backend is one of ggml-vulkan's devices (its name starts with 'Vulkan')."""
        return _is_vulkan(self.ptr)

    @property
    def runs_on_cpu(self) -> bool:
        """Whether a CPU device computes (some of) this backend's nodes, so that the CPU kernels' rules apply."""
        return self.is_cpu

    @property
    def rule_kinds(self) -> tuple[str, ...]:
        """The backend kinds (pyggml.backend_kinds families) whose preflight rules hold for the nodes this backend
        computes: its device's kind ("cpu", "vulkan", ...)."""
        if self._rule_kinds is None:
            k = backend_kinds.of_device(self.device.name)
            self._rule_kinds = ("cpu",) if self.is_cpu else (k.family,) if k is not None else ()
        return self._rule_kinds

    @serialized
    def compute(self, graph: Graph) -> None:
        """Compute a graph whose tensors are all allocated in memory this backend can use (`ggml_backend_graph_compute`).

        The preflight (`pyggml.preflight`) checks the graph first; its structural part runs once per graph and
        node count, not at every compute of a reused graph. A CPU backend made without `n_threads` chooses its
        threads for the graph first.

        Args:
            graph: the graph, allocated (`Gallocr`, `alloc_tensors`, a context with `no_alloc=False`).

        Raises:
            TypeError: `graph` is not a Graph.
            GraphError: the preflight refuses the graph (tensors without memory, unwritten inputs, kernels'
                rules, index ranges).
            GGMLError: ggml reports a failed compute.
            pyggml.rpc.RpcError: an RPC server's connection failed.
        """
        if not isinstance(graph, Graph):
            raise TypeError(f"compute: expected a Graph, got {type(graph).__name__}")
        preflight.check(graph, kinds_at=self.rule_kinds, path=self, backend=self)
        if graph.n_nodes == 0:
            return  # nothing to compute (a graph of views only; ggml-rpc asserted on it)
        preflight.rpc.check_devices([self.device.ptr])
        self._threads_for(graph)
        lender = _current_lender(graph)
        with lender._computing() if lender is not None else contextlib.nullcontext():
            status = lib.ggml_backend_graph_compute(self.ptr, graph.ptr)
            transport.after_device_call([self.device.ptr])  # a failed connection computes nothing, says SUCCESS
        if lender is not None and status != lib.GGML_STATUS_SUCCESS:
            lender._compute_failed()
        _check_status(status, lambda: f"{self.name} graph compute")

    def synchronize(self) -> None:
        """Wait until the backend has finished the work it was given (`ggml_backend_synchronize`)."""
        lib.ggml_backend_synchronize(self.ptr)

    def __repr__(self):
        threads = f", {self.n_threads} threads" if self.n_threads else ""
        return f"<Backend {self.name}{threads}>"


def _current_lender(graph: Graph) -> Lender | None:
    """The allocator whose memory the graph holds now (a Gallocr's graph computed by a Backend), else None."""
    alloc = graph.state.allocation
    if alloc is None or alloc[0].generation != alloc[1]:
        return None
    return alloc[0]


def _is_vulkan(backend_ptr) -> bool:
    k = backend_kinds.of_device(cstr(lib.ggml_backend_name(backend_ptr)))
    return k is not None and k.family == "vulkan"


def backend(name: str = "cpu", n_threads: int | None = None) -> Backend:
    """A new backend on the device of that name (see `device`).

    Args:
        name: 'cpu', 'vulkan0', ..., in any case.
        n_threads: for the CPU, a fixed thread count, or None to choose per graph.

    Returns:
        The backend.

    Raises:
        ValueError: no device of that name (see `device`).
        TypeError: `name` is not a str.
        GGMLError: ggml cannot make a backend on the device.
    """
    return device(name).init(n_threads)


# The work (graph_work) below which one CPU thread computes a graph faster than several: starting
# and joining ggml's threads for each compute costs tens of microseconds, far more on a loaded machine,
# which a small graph's work never repays (bench/cpu_threads.py, bench/README.md)
SMALL_GRAPH_WORK = 1 << 18
_MATMUL_OPS = {int(Op.MUL_MAT), int(Op.MUL_MAT_ID), int(Op.OUT_PROD)}


def graph_work(graph: Graph) -> int:
    """A measure of a graph's compute in multiply-adds, to choose a CPU backend's threads by.

    A matrix product counts its result's elements times the inner extent, any other node 8 per element
    (about what an element of an elementwise op costs against a multiply-add of ggml's vectorized products,
    bench/cpu_threads.py). Computed once per graph and node count.

    Args:
        graph: the graph.

    Returns:
        The work, in multiply-adds.
    """

    def count():
        work = 0
        for i in range(graph.n_nodes):
            p = lib.ggml_graph_node(graph.ptr, i)
            n = p.ne[0] * p.ne[1] * p.ne[2] * p.ne[3]
            work += n * p.src[0].ne[0] if p.op in _MATMUL_OPS else 8 * n
        return work

    return preflight.once(graph, "work", count)


def auto_threads(graph: Graph) -> int:
    """The threads a CPU backend made without `n_threads` computes this graph with.

    Args:
        graph: the graph.

    Returns:
        1 for a small graph (`graph_work` under `SMALL_GRAPH_WORK`), the cores this process may run on otherwise
        (`pyggml.threads.cores`).
    """
    return 1 if graph_work(graph) < SMALL_GRAPH_WORK else threads.cores()


def cpu_backend(n_threads: int | None = None) -> Backend:
    """A new backend on the process's CPU: this build's own CPU backend, or the CPU variant that replaced it
    (`pyggml.cpu_variants.choice`: the best one in a portable build), as ggml's registry gives it to libllama too.

    Args:
        n_threads: a fixed thread count; None (the default) chooses per graph: one thread for a small graph,
            the machine's cores for a large one (`auto_threads`).

    Returns:
        The backend.

    Raises:
        GGMLError: ggml cannot make it.
        ValueError: a thread count outside 1..4096.
        TypeError: a thread count that is not an integer.
    """
    ptr = lib.ggml_backend_init_by_type(lib.GGML_BACKEND_DEVICE_TYPE_CPU, ffi.NULL)
    if ptr == ffi.NULL:
        raise GGMLError("could not initialise the CPU backend")
    return Backend(ptr, None, n_threads)


# the process's CPU, before anything asks ggml's registry for it (libllama included)
cpu_variants.install_choice()


# --- buffers and allocation -----------------------------------------------------------------
class Buffer(Closable):
    """A ggml backend buffer (`ggml_backend_buffer_t`): memory on a device that tensors are placed in.

    Freed (`ggml_backend_buffer_free`) when the last reference goes, or at once with `close()` (a `with`
    block); `Backend.alloc_tensors` returns one and the context keeps it alive.

    Args:
        ptr: the `ggml_backend_buffer_t` (cffi cdata); the Buffer frees it.
        ctx: the context whose tensors it holds: `close()` takes their memory away first, so that reading them
            raises instead of reading freed memory.

    Attributes:
        ptr: the `ggml_backend_buffer_t`.
    """

    def __init__(self, ptr: CData, ctx: Context | None = None) -> None:
        self._ptr = ffi.gc(ptr, lib.ggml_backend_buffer_free)
        self._ctx = weakref.ref(ctx) if ctx is not None else None  # whose tensors it holds

    def _close(self) -> None:
        # the tensors it holds lose their memory first: a read then raises instead of reading freed memory
        ctx = self._ctx() if self._ctx is not None else None
        if ctx is not None:
            for t in ctx.tensors():
                if t.ptr.buffer == self._ptr:
                    t.ptr.data, t.ptr.buffer = ffi.NULL, ffi.NULL
        ffi.release(self._ptr)

    @property
    def size(self) -> int:
        """The buffer's size in bytes (`ggml_backend_buffer_get_size`)."""
        return lib.ggml_backend_buffer_get_size(self.ptr)

    @property
    def name(self) -> str:
        """The buffer's ggml name, its buffer type's (e.g. 'CPU', 'Vulkan0'; `ggml_backend_buffer_name`)."""
        return cstr(lib.ggml_backend_buffer_name(self.ptr))

    @property
    def is_host(self) -> bool:
        """Whether the buffer is host memory, readable by NumPy without a copy (`ggml_backend_buffer_is_host`)."""
        return bool(lib.ggml_backend_buffer_is_host(self.ptr))

    def clear(self, value: int = 0) -> None:
        """Set every byte of the buffer to `value` (`ggml_backend_buffer_clear`).

        Args:
            value: the byte, 0 to 255.

        Raises:
            ValueError: `value` outside 0..255.
            TypeError: `value` is not an integer.
            pyggml.rpc.RpcError: the buffer lives on an RPC server whose connection failed.
        """
        lib.ggml_backend_buffer_clear(self.ptr, integer("Buffer.clear: value", value, 0, 255))
        transport.after_transfer(self.ptr)


SCHED_MAX_BACKENDS = 16  # GGML_SCHED_MAX_BACKENDS of ggml-backend.cpp (not in a public header)
MAX_THREADS = 4096  # the most threads set_n_threads takes


def _memory_needs(graph: Graph, backends: list) -> str:
    """Why an allocation may have failed, in numbers: what the graph's tensors take against what the devices have."""
    need = [t for t in graph_tensors(graph) if t.data == ffi.NULL and t.view_src == ffi.NULL]
    total = sum(lib.ggml_nbytes(t) for t in need)
    text = f"its tensors take up to {_gib(total)} in all"
    if need:
        big = max(need, key=lambda t: lib.ggml_nbytes(t))
        text += f", the largest ({cstr(big.name) or Op(big.op).name.lower()}, ne={tuple(big.ne)}) {_gib(lib.ggml_nbytes(big))}"
    for b in backends:
        free, _ = b.device.memory()
        if free:
            text += f"; {b.device.name} has {_gib(free)} free"
    return (
        text
        + " (ggml's log, pyggml.ggml at level WARNING, has the allocation that failed): make the tensors smaller or use a device with more memory"
    )


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**28 else f"{n / 2**20:.2f} MiB"


class Gallocr(Lender, Closable):
    """ggml's graph allocator (`ggml_gallocr`): a graph's tensors in one buffer type, memory reused between nodes.

    The graph is then computed with the backend's `compute`. The memory is lent to one graph at a time
    (`pyggml.lifetime.Lender`): allocating another graph takes it back.

    Args:
        buffer_type: a `ggml_backend_buffer_type_t` (cffi cdata), e.g. `backend.buffer_type`.

    Attributes:
        ptr: the `ggml_gallocr_t`.
        lock: held by each allocation; hold it around allocate, write, compute, read when threads share the
            allocator (`pyggml.serial`).

    Raises:
        GGMLError: ggml cannot make the allocator.
    """

    def __init__(self, buffer_type: CData) -> None:
        ptr = lib.ggml_gallocr_new(buffer_type)
        if ptr == ffi.NULL:
            raise GGMLError("could not create the graph allocator")
        self.lock = threading.RLock()  # one graph at a time (pyggml.serial)
        self._ptr = ffi.gc(ptr, lib.ggml_gallocr_free)

    def _close(self) -> None:
        with self.lock:
            self._release()  # the lent memory back first: the graph's tensors then raise when read
            ffi.release(self._ptr)

    @serialized
    def reserve(self, graph: Graph) -> None:
        """Plan the graph's memory and size the buffer for it (`ggml_gallocr_reserve`), without giving the tensors memory.

        The buffer grows when a plan needs more, never shrinks. `alloc_graph` does this itself when the graph
        is not the one planned last.

        Args:
            graph: the graph to plan for.

        Raises:
            TypeError: `graph` is not a Graph.
            GraphError: a graph that cannot be allocated (an expand that failed half-way, no nodes).
            GGMLError: the memory cannot be had (the message gives the sizes).
        """
        instance("gallocr reserve: graph", graph, Graph)
        preflight.check_allocatable(graph)
        if not lib.ggml_gallocr_reserve(self.ptr, graph.ptr):
            raise GGMLError(f"gallocr: reserving the graph's memory failed: {_memory_needs(graph, [])}")
        self._plan_made(graph)

    @serialized
    def alloc_graph(self, graph: Graph) -> None:
        """Give every tensor of the graph that has no memory a place in the allocator's buffer (`ggml_gallocr_alloc_graph`).

        Memory is reused between nodes whose lifetimes do not overlap (outputs and inputs keep theirs). The
        memory is lent: the tensors lose it when this allocator allocates another graph, and inputs must be
        written before compute.

        Args:
            graph: the graph to allocate.

        Raises:
            TypeError: `graph` is not a Graph.
            GraphError: a graph that cannot be allocated.
            GGMLError: the allocation fails.
        """
        if not isinstance(graph, Graph):
            raise TypeError(f"alloc_graph: expected a Graph, got {type(graph).__name__}")
        preflight.check_allocatable(graph)
        fresh = self._before_alloc(graph)
        if self._needs_plan(graph):
            self.reserve(graph)
        if not lib.ggml_gallocr_alloc_graph(self.ptr, graph.ptr):
            raise GGMLError("gallocr: allocating the graph failed")
        self._after_alloc(graph, fresh)


class Scheduler(Lender, Closable):
    """ggml's backend scheduler (`ggml_backend_sched`) over several backends; the last one must be the CPU.

    Graph inputs (tensors flagged with `set_input`) are placed on the last backend, so they are in host
    memory and filled there; the scheduler copies them to the devices. Its memory is lent to one graph at a
    time (`pyggml.lifetime.Lender`). A `Runner` wraps one.

    Args:
        backends: 1 to 16 Backends in order of preference, the CPU last.
        graph_size: the most nodes and leafs together of a graph it allocates.
        parallel: ggml's pipeline parallelism (several copies of the inputs).

    Attributes:
        ptr: the `ggml_backend_sched_t`.
        backends: the backends.
        graph_size: the scheduler's graph size.
        lock: held by each allocation and compute; hold it around allocate, write, compute, read when threads
            share the scheduler (`pyggml.serial`).

    Raises:
        ValueError: no backends, more than 16, or a last backend that is not the CPU; `graph_size` outside
            1..2**24.
        TypeError: a backend that is not a Backend.
        GGMLError: ggml cannot make the scheduler.
    """

    def __init__(
        self, backends: list[Backend], graph_size: int = lib.GGML_DEFAULT_GRAPH_SIZE, parallel: bool = False
    ) -> None:
        if not backends:
            raise ValueError("Scheduler needs at least one backend")
        if not all(isinstance(b, Backend) for b in backends):
            raise TypeError("Scheduler: backends must be Backend objects")
        if not backends[-1].is_cpu:
            raise ValueError("Scheduler: the last backend must be the CPU (ggml places inputs there)")
        if len(backends) > SCHED_MAX_BACKENDS:
            raise ValueError(f"Scheduler: at most {SCHED_MAX_BACKENDS} backends, got {len(backends)}")
        # ggml mallocs tables of graph_size entries per backend and aborts if that fails
        graph_size = integer("Scheduler: graph_size", graph_size, 1, MAX_GRAPH_SIZE)
        self.backends = list(backends)
        self._devices = [b.device.ptr for b in backends]  # what compute and allocation talk to
        self.graph_size = graph_size
        arr = ffi.new("ggml_backend_t[]", [b.ptr for b in backends])
        ptr = lib.ggml_backend_sched_new(arr, ffi.NULL, len(backends), self.graph_size, parallel, True)
        if ptr == ffi.NULL:
            raise GGMLError("could not create the scheduler")
        self._ptr = ffi.gc(ptr, lib.ggml_backend_sched_free)
        for b in self.backends:
            b._users.add(self)
        self.lock = threading.RLock()  # one graph at a time (pyggml.serial); a Runner holds it for a whole run
        self._placed: dict[int, tuple[Tensor, Backend]] = {}  # set_tensor_backend's assignments
        self._observer: EvalObserver | None = None  # observe()

    def _close(self) -> None:
        with self.lock:
            self._release()  # the lent memory back first: the graph's tensors then raise when read
            self._observer = None
            ffi.release(self._ptr)

    @serialized
    def reserve(self, graph: Graph) -> None:
        """Plan the graph's memory on every backend (`ggml_backend_sched_reserve`) without giving the tensors memory.

        `alloc_graph` does this itself when the graph is not the one planned last.

        Args:
            graph: the graph to plan for.

        Raises:
            TypeError: `graph` is not a Graph.
            GraphError: a graph with more nodes and leafs than `graph_size`, or one that cannot be allocated
                or placed.
            GGMLError: the plan fails.
        """
        instance("scheduler reserve: graph", graph, Graph)
        self.restore(graph)
        preflight.check_allocatable(graph)
        preflight.check_placeable(graph)
        preflight.check_size(graph, self.graph_size, "scheduler reserve")
        graph.state.sources_as_built = None  # ggml rewires the sources (ggml_backend_sched_split_graph)
        if not lib.ggml_backend_sched_reserve(self.ptr, graph.ptr):
            raise GGMLError("scheduler: reserving the graph failed")
        self._plan_made(graph)

    @serialized
    def reset(self) -> None:
        """Forget the assignment of nodes to backends and the allocation (`ggml_backend_sched_reset`).

        `alloc_graph` resets the scheduler itself.
        """
        lib.ggml_backend_sched_reset(self.ptr)

    @serialized
    def restore(self, graph: Graph) -> None:
        """Give the graph back the sources it was built with.

        The scheduler rewrites the graph it allocates: a node's source on another backend is replaced by the
        scheduler's copy of it (`ggml_backend_sched_split_graph`), and ggml expects a new graph for every
        allocation. Allocated again as it is, a graph kept reading the first run's copies of its inputs (a meta
        runner returned the first run's mul_mat result). The sources are recorded per context of the graph, at
        a tensor's first allocation: graphs of one context share tensors.

        Args:
            graph: the graph.

        Raises:
            TypeError: `graph` is not a Graph.
        """
        instance("scheduler restore: graph", graph, Graph)
        lifetime.restore_sources(graph)

    @serialized
    def alloc_graph(self, graph: Graph, pin: Backend | None = None, place: dict[Tensor, Backend] | None = None) -> None:
        """Assign the graph's nodes to backends and give its tensors memory (`ggml_backend_sched_alloc_graph`).

        The memory is lent until the scheduler allocates another graph. Inputs must be written (`Tensor.set`)
        before `compute`.

        Args:
            graph: the graph to allocate.
            pin: one of the scheduler's backends to compute every node (views stay with what they view); None
                lets ggml choose, and ggml runs a node fed only by inputs, which live in host memory, on the CPU.
            place: `{node: backend}` for this allocation only, over `pin` (a Runner computes on the CPU the
                nodes its device cannot: `Runner(fallback=True)`).

        Raises:
            TypeError: `graph` is not a Graph.
            ValueError: `pin` or a backend of `place` is not one of the scheduler's backends.
            GraphError: a graph larger than `graph_size`, or one that cannot be allocated or placed.
            GGMLError: planning or allocating the memory fails (the message gives the sizes).
            pyggml.rpc.RpcError: an RPC server's connection failed.
        """
        instance("scheduler alloc_graph: graph", graph, Graph)
        if pin is not None and not any(pin is own for own in self.backends):
            raise ValueError("scheduler alloc_graph: pin must be one of the scheduler's backends")
        place = dict(place or {})
        if not all(any(b is own for own in self.backends) for b in place.values()):
            raise ValueError("scheduler alloc_graph: place's backends must be the scheduler's")
        self.restore(graph)
        preflight.check_view_leaves(graph)  # pinned or not: ggml's scheduler asserts on such a leaf
        preflight.check_allocatable(graph)
        fresh = self._before_alloc(graph)
        preflight.check_buffers_usable(graph, self.backends, "scheduler alloc_graph")
        preflight.check_placeable(graph)
        preflight.check_size(graph, self.graph_size, "scheduler alloc_graph")
        graph.state.index_inputs = preflight.index_inputs(graph)  # before the scheduler rewires the sources
        lib.ggml_backend_sched_reset(self.ptr)  # ggml asserts the scheduler is not allocated already
        if self._needs_plan(graph):
            self._pin(graph, pin, place)
            graph.state.sources_as_built = None
            preflight.rpc.check_devices(self._devices)
            ok = lib.ggml_backend_sched_reserve(self.ptr, graph.ptr)  # resets the scheduler when done
            self.restore(graph)
            transport.after_device_call(self._devices)
            if not ok:
                raise GGMLError(f"scheduler: planning the graph's memory failed: {_memory_needs(graph, self.backends)}")
            self._plan_made(graph)
        self._pin(graph, pin, place)
        graph.state.sources_as_built = None  # ggml rewires the sources now, whether it succeeds or not
        ok = lib.ggml_backend_sched_alloc_graph(self.ptr, graph.ptr)
        transport.after_device_call(self._devices)
        if not ok:
            raise GGMLError("scheduler: allocating the graph failed")
        self._after_alloc(graph, fresh)

    def _pin(self, graph: Graph, pin: Backend | None, place: dict[Tensor, Backend]):
        if pin is not None:  # views stay with what they view (ggml places them so)
            for i in range(lib.ggml_graph_n_nodes(graph.ptr)):
                node = lib.ggml_graph_node(graph.ptr, i)
                if node.view_src == ffi.NULL:
                    lib.ggml_backend_sched_set_tensor_backend(self.ptr, node, pin.ptr)
        for t, b in place.items():
            lib.ggml_backend_sched_set_tensor_backend(self.ptr, t.ptr, b.ptr)
        # ggml forgets assignments at every reset, which allocating does: they are made again here
        for t, b in self._placed.values():
            lib.ggml_backend_sched_set_tensor_backend(self.ptr, t.ptr, b.ptr)

    @serialized
    def compute(self, graph: Graph) -> None:
        """Compute the graph, split over the backends (`ggml_backend_sched_graph_compute`).

        It must be the graph this scheduler allocated last. CPU backends made without `n_threads` choose their
        threads for this graph first.

        Args:
            graph: the graph `alloc_graph` was given last.

        Raises:
            TypeError: `graph` is not a Graph.
            GraphError: another graph, or the preflight refuses it (inputs not written since the allocation
                among the reasons).
            GGMLError: ggml reports a failed compute.
            pyggml.rpc.RpcError: an RPC server's connection failed.
            Exception: what an observer (`observe`) raised, after ggml stopped the compute at that node.
        """
        if not isinstance(graph, Graph):
            raise TypeError(f"compute: expected a Graph, got {type(graph).__name__}")
        alloc = graph.state.allocation
        if alloc is None or alloc[0] is not self:
            raise GraphError(
                "scheduler compute: the graph is not allocated by this scheduler (alloc_graph it here first)"
            )
        # with one backend every node stays on it; with several, where ggml puts each node can change
        # with each allocation, and the CPU kernels' rules with it
        version = None if len(self.backends) == 1 else self.generation
        preflight.check(graph, kinds_at=self._kinds_at, path=self, version=version)
        preflight.rpc.check_devices(self._devices)
        with contextlib.ExitStack() as held:  # and its backends, in one order (a Backend.compute may share one)
            for b in sorted(set(self.backends), key=id):
                held.enter_context(b.lock)
            for b in self.backends:
                b._threads_for(graph)
            held.enter_context(self._computing())
            if self._observer is not None:
                self._observer.stopped = False
            status = lib.ggml_backend_sched_graph_compute(self.ptr, graph.ptr)
            transport.after_device_call(self._devices)  # a failed connection computes nothing and says SUCCESS
        if status != lib.GGML_STATUS_SUCCESS or (self._observer is not None and self._observer.stopped):
            self._compute_failed()
        if self._observer is not None:  # what the observer raised: ggml stopped the compute at that node
            self._observer.raise_pending()
        _check_status(status, "scheduler graph compute")

    @serialized
    def observe(self, fn: Callable[[Tensor, bool], bool] | None) -> None:
        """Watch every node as ggml computes it (`ggml_backend_sched_set_eval_callback`).

        `fn(node, ask)` is called with `ask=True` before a node is computed (return True to see it computed)
        and, for those it asked for, with `ask=False` once the node is computed (return False to stop the
        compute there). ggml computes the nodes not asked for together with the next one asked for, after fn
        was asked about it: a node's sources hold what it will read at `ask=True` only when fn asked for every
        node before it (views compute nothing); an observer that asks for each node sees each one with its
        sources as they were. On a meta device the meta backend does the same inside its compute (ggml patch
        0032): each node is read back whole, its devices' shares assembled. An exception fn raises stops the
        compute and is raised by `compute`.

        Args:
            fn: the observer `fn(node: Tensor, ask: bool) -> bool`, or None to stop observing.

        Raises:
            TypeError: `fn` is neither callable nor None.
        """
        if fn is None:
            lib.ggml_backend_sched_set_eval_callback(self.ptr, ffi.NULL, ffi.NULL)
            self._observer = None
            return
        if not callable(fn):
            raise TypeError(f"observe: fn must be callable or None, got {type(fn).__name__}")
        self._observer = EvalObserver(fn)
        lib.ggml_backend_sched_set_eval_callback(self.ptr, lib.pyggml_eval_callback, self._observer.handle)

    def _kinds_at(self, p) -> tuple[str, ...]:
        """The backend kinds whose preflight rules hold for node p: its backend's (the CPU's where the scheduler
        has not placed it, as ggml then computes it on the last backend, the CPU)."""
        b = lib.ggml_backend_sched_get_tensor_backend(self.ptr, p)
        for backend in self.backends:
            if backend.ptr == b:
                return backend.rule_kinds
        return ("cpu",)

    @serialized
    def set_tensor_backend(self, t: Tensor, b: Backend) -> None:
        """Assign tensor `t` to backend `b` for every later allocation (`ggml_backend_sched_set_tensor_backend`).

        ggml clears assignments when the scheduler resets, which allocating does: the scheduler makes them
        again each time. To compute every node on one backend, use `alloc_graph(graph, pin=b)`.

        Args:
            t: the tensor.
            b: one of the scheduler's backends.

        Raises:
            TypeError: `t` is not a Tensor.
            ValueError: `b` is not one of the scheduler's backends.
        """
        instance("set_tensor_backend: t", t, Tensor)
        if not any(b is own for own in self.backends):
            raise ValueError("set_tensor_backend: b must be one of the scheduler's backends")
        self._placed[int(ffi.cast("uintptr_t", t.ptr))] = (t, b)  # t keeps its context, so the address stays t's
        lib.ggml_backend_sched_set_tensor_backend(self.ptr, t.ptr, b.ptr)

    def tensor_backend(self, t: Tensor) -> str | None:
        """The backend tensor `t` is assigned to (`ggml_backend_sched_get_tensor_backend`).

        Args:
            t: the tensor.

        Returns:
            The backend's name, or None when it has none (before the graph is allocated).

        Raises:
            TypeError: `t` is not a Tensor.
        """
        instance("tensor_backend: t", t, Tensor)
        p = lib.ggml_backend_sched_get_tensor_backend(self.ptr, t.ptr)
        return cstr(lib.ggml_backend_name(p)) if p != ffi.NULL else None

    @property
    def n_splits(self) -> int:
        """How many splits (runs of consecutive nodes on one backend) the last allocated graph was cut into (`ggml_backend_sched_get_n_splits`)."""
        return lib.ggml_backend_sched_get_n_splits(self.ptr)


class EvalObserver:
    """An observer `fn(node, ask)` behind ggml's eval callback.

    Used by `Scheduler.observe` and llama.cpp's `cb_eval` through `pyggml.llama.Context(observe=)`. The C
    callback finds it by `handle`. An exception fn raises is kept, never raised into ggml's C or llama.cpp's
    C++ code: the callback answers False, which stops the compute, and `raise_pending` raises it once the
    compute has returned.

    Args:
        fn: the observer, `fn(node: Tensor, ask: bool) -> bool` (see `Scheduler.observe`).

    Attributes:
        fn: the observer.
        error: what fn raised during the compute, until `raise_pending`.
        handle: the cffi handle the C callback is given.
    """

    def __init__(self, fn: Callable[[Tensor, bool], bool]) -> None:
        self.fn = fn
        self.error: BaseException | None = None
        self.stopped = False  # the compute was stopped at a node (the nodes after it hold no computed value)
        self.handle = ffi.new_handle(self)

    def __call__(self, t: object, ask: bool) -> bool:
        if self.error is not None:
            return False
        try:
            go_on = bool(self.fn(Tensor(t, None), ask))
        except BaseException as e:  # noqa: BLE001 - raised by raise_pending, after the compute
            self.error = e
            self.stopped = True
            return False
        if not ask and not go_on:
            self.stopped = True
        return go_on

    def raise_pending(self) -> None:
        """Raise what fn raised during the last compute, if anything, and forget it.

        Raises:
            BaseException: whatever fn raised.
        """
        error, self.error = self.error, None
        if error is not None:
            raise error


@ffi.def_extern()
def pyggml_eval_callback(t: object, ask: bool, user_data: object) -> bool:
    """The C callback ggml's scheduler calls for every node while an observer is set (see `EvalObserver`).

    Args:
        t: the node (`struct ggml_tensor *`).
        ask: True before the node is computed, False after.
        user_data: the observer's handle.

    Returns:
        The observer's answer.
    """
    return ffi.from_handle(user_data)(t, ask)
