"""Devices, backends, buffers, the graph allocator (gallocr) and the scheduler.

Devices are named as ggml names them, case-insensitively: `cpu`, `vulkan0`, `cuda0`.
A CPU backend uses as many threads as the machine has cores (ggml's own default is 4,
which on a 2-core machine makes a tiny graph hundreds of times slower).
"""

from __future__ import annotations

import os
import weakref
from dataclasses import dataclass

from pyggml._native import cstr, ffi, lib
from pyggml.errors import GGMLError
from pyggml.graph import Graph
from pyggml.tensor import Tensor
from pyggml.types import DeviceType, Status


def _check_status(status: int, what):
    """what: a text, or a callable giving it (formatted only on failure: compute is a hot path)."""
    if status != lib.GGML_STATUS_SUCCESS:
        raise GGMLError(f"{what() if callable(what) else what} failed: {Status(status).name}")


# --- devices -------------------------------------------------------------------------------
def enable_cpu_vulkan_devices(spec: str = "0") -> str:
    """Let ggml-vulkan list CPU-type Vulkan devices (Mesa's lavapipe, a software Vulkan).

    ggml-vulkan skips such devices unless GGML_VK_VISIBLE_DEVICES names them ("0", or "0,0"
    for the same device twice, which gives two devices on a machine with one). ggml reads
    the variable once, when it first lists devices, so call this before anything else.
    An explicit GGML_VK_VISIBLE_DEVICES in the environment wins. Returns the value in force.
    """
    return os.environ.setdefault("GGML_VK_VISIBLE_DEVICES", spec)



@dataclass(frozen=True)
class Device:
    ptr: object

    @property
    def name(self) -> str:
        return cstr(lib.ggml_backend_dev_name(self.ptr))

    @property
    def description(self) -> str:
        return cstr(lib.ggml_backend_dev_description(self.ptr))

    @property
    def type(self) -> DeviceType:
        return DeviceType(lib.ggml_backend_dev_type(self.ptr))

    @property
    def backend_name(self) -> str:
        return cstr(lib.ggml_backend_reg_name(lib.ggml_backend_dev_backend_reg(self.ptr)))

    def memory(self) -> tuple[int, int]:
        """(free, total) bytes."""
        free, total = ffi.new("size_t *"), ffi.new("size_t *")
        lib.ggml_backend_dev_memory(self.ptr, free, total)
        return free[0], total[0]

    def init(self, n_threads: int | None = None) -> "Backend":
        ptr = lib.ggml_backend_dev_init(self.ptr, ffi.NULL)
        if ptr == ffi.NULL:
            raise GGMLError(f"could not initialise a backend on device {self.name}")
        return Backend(ptr, self, n_threads)

    def supports_op(self, t: Tensor) -> bool:
        return bool(lib.ggml_backend_dev_supports_op(self.ptr, t.ptr))

    def __repr__(self):
        return f"<Device {self.name}: {self.description} ({self.type.name})>"


def devices() -> list[Device]:
    return [Device(lib.ggml_backend_dev_get(i)) for i in range(lib.ggml_backend_dev_count())]


def device(name: str) -> Device:
    for d in devices():
        if d.name.lower() == name.lower():
            return d
    known = ", ".join(d.name.lower() for d in devices())
    hint = ""
    if name.lower().startswith("vulkan"):
        hint = (" (ggml lists CPU-type Vulkan devices such as Mesa's lavapipe only when "
                "GGML_VK_VISIBLE_DEVICES names them, e.g. GGML_VK_VISIBLE_DEVICES=0)")
    raise ValueError(f"no device named {name!r}; this build has: {known}{hint}")


# --- backends ----------------------------------------------------------------------------
class Backend:
    def __init__(self, ptr, dev: Device | None = None, n_threads: int | None = None):
        self.ptr = ffi.gc(ptr, lib.ggml_backend_free)
        self.device = dev if dev is not None else Device(lib.ggml_backend_get_device(ptr))
        self.n_threads = None
        self._checked_graph = (lambda: None, 0)  # (weak ref to the graph, its node count) compute() checked last
        if self.is_cpu:
            self.set_n_threads(n_threads or os.cpu_count() or 1)

    @property
    def name(self) -> str:
        return cstr(lib.ggml_backend_name(self.ptr))

    @property
    def is_cpu(self) -> bool:
        return bool(lib.ggml_backend_is_cpu(self.ptr))

    def set_n_threads(self, n: int):
        if n < 1:
            raise ValueError(f"n_threads must be >= 1, got {n}")
        if not self.is_cpu:
            raise ValueError(f"{self.name} is not a CPU backend; threads are set on CPU backends")
        lib.ggml_backend_cpu_set_n_threads(self.ptr, n)
        self.n_threads = n

    @property
    def buffer_type(self):
        return lib.ggml_backend_get_default_buffer_type(self.ptr)

    def supports_op(self, t: Tensor) -> bool:
        return bool(lib.ggml_backend_supports_op(self.ptr, t.ptr))

    def unsupported(self, graph: Graph) -> list[Tensor]:
        """Nodes of the graph this backend cannot compute."""
        return [n for n in graph.nodes if n.op.name != "NONE" and not self.supports_op(n)]

    def alloc_tensors(self, ctx) -> "Buffer":
        """Allocate every tensor of a no_alloc context in one buffer of this backend."""
        if not ctx.no_alloc:
            raise ValueError("alloc_tensors: the context already holds its tensors' data (no_alloc=False)")
        ptr = lib.ggml_backend_alloc_ctx_tensors(ctx.ptr, self.ptr)
        if ptr == ffi.NULL:
            raise GGMLError(f"{self.name}: could not allocate the context's tensors (none to allocate, or out of memory)")
        buf = Buffer(ptr)
        ctx.keep_alive(buf)
        return buf

    def compute(self, graph: Graph):
        """Compute a graph whose tensors are all allocated in memory this backend can use.

        The graph is checked (memory, supported ops) once per graph and node count, not at
        every compute of a reused graph."""
        last, n_nodes = self._checked_graph
        if last() is not graph or n_nodes != graph.n_nodes:
            self._check_graph(graph)
            self._checked_graph = (weakref.ref(graph), graph.n_nodes)
        _check_status(lib.ggml_backend_graph_compute(self.ptr, graph.ptr), lambda: f"{self.name} graph compute")

    def _check_graph(self, graph: Graph):
        for n in graph.nodes:
            if n.ptr.data == ffi.NULL and n.ptr.view_src == ffi.NULL:
                raise ValueError(f"compute: node {n.name or n.op.name} has no memory; allocate the graph first")
        bad = self.unsupported(graph)
        if bad:
            names = ", ".join(f"{n.op.name}({n.name})" for n in bad[:5])
            raise ValueError(f"compute: {self.name} does not support {len(bad)} node(s): {names}")

    def synchronize(self):
        lib.ggml_backend_synchronize(self.ptr)

    def __repr__(self):
        threads = f", {self.n_threads} threads" if self.n_threads else ""
        return f"<Backend {self.name}{threads}>"


def backend(name: str = "cpu", n_threads: int | None = None) -> Backend:
    """A backend on the device of that name (`cpu`, `vulkan0`, ...)."""
    return device(name).init(n_threads)


def cpu_backend(n_threads: int | None = None) -> Backend:
    ptr = lib.ggml_backend_cpu_init()
    if ptr == ffi.NULL:
        raise GGMLError("could not initialise the CPU backend")
    return Backend(ptr, None, n_threads)


# --- buffers and allocation -----------------------------------------------------------------
class Buffer:
    def __init__(self, ptr):
        self.ptr = ffi.gc(ptr, lib.ggml_backend_buffer_free)

    @property
    def size(self) -> int:
        return lib.ggml_backend_buffer_get_size(self.ptr)

    @property
    def name(self) -> str:
        return cstr(lib.ggml_backend_buffer_name(self.ptr))

    @property
    def is_host(self) -> bool:
        return bool(lib.ggml_backend_buffer_is_host(self.ptr))

    def clear(self, value: int = 0):
        lib.ggml_backend_buffer_clear(self.ptr, value)


class Gallocr:
    """ggml_gallocr: allocates a graph's tensors in one buffer type, reusing memory between nodes."""

    def __init__(self, buffer_type):
        self.ptr = ffi.gc(lib.ggml_gallocr_new(buffer_type), lib.ggml_gallocr_free)

    def reserve(self, graph: Graph):
        if not lib.ggml_gallocr_reserve(self.ptr, graph.ptr):
            raise GGMLError("gallocr: reserving the graph's memory failed")

    def alloc_graph(self, graph: Graph):
        if not lib.ggml_gallocr_alloc_graph(self.ptr, graph.ptr):
            raise GGMLError("gallocr: allocating the graph failed")
        graph.ctx.keep_alive(self)


class Scheduler:
    """ggml_backend_sched over several backends; the last one must be the CPU.

    Graph inputs (tensors flagged with set_input) are placed on the last backend, so they
    are in host memory and filled there; the scheduler copies them to the devices.
    """

    def __init__(self, backends: list[Backend], graph_size: int = lib.GGML_DEFAULT_GRAPH_SIZE,
                 parallel: bool = False):
        if not backends:
            raise ValueError("Scheduler needs at least one backend")
        if not backends[-1].is_cpu:
            raise ValueError("Scheduler: the last backend must be the CPU (ggml places inputs there)")
        self.backends = list(backends)
        arr = ffi.new("ggml_backend_t[]", [b.ptr for b in backends])
        ptr = lib.ggml_backend_sched_new(arr, ffi.NULL, len(backends), graph_size, parallel, True)
        if ptr == ffi.NULL:
            raise GGMLError("could not create the scheduler")
        self.ptr = ffi.gc(ptr, lib.ggml_backend_sched_free)

    def reserve(self, graph: Graph):
        if not lib.ggml_backend_sched_reserve(self.ptr, graph.ptr):
            raise GGMLError("scheduler: reserving the graph failed")

    def reset(self):
        lib.ggml_backend_sched_reset(self.ptr)

    def alloc_graph(self, graph: Graph):
        if not lib.ggml_backend_sched_alloc_graph(self.ptr, graph.ptr):
            raise GGMLError("scheduler: allocating the graph failed")
        graph.ctx.keep_alive(self)

    def compute(self, graph: Graph):
        _check_status(lib.ggml_backend_sched_graph_compute(self.ptr, graph.ptr), "scheduler graph compute")

    def set_tensor_backend(self, t: Tensor, b: Backend):
        lib.ggml_backend_sched_set_tensor_backend(self.ptr, t.ptr, b.ptr)

    def tensor_backend(self, t: Tensor) -> str | None:
        p = lib.ggml_backend_sched_get_tensor_backend(self.ptr, t.ptr)
        return cstr(lib.ggml_backend_name(p)) if p != ffi.NULL else None

    @property
    def n_splits(self) -> int:
        return lib.ggml_backend_sched_get_n_splits(self.ptr)
