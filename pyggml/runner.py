"""Run a graph on a named backend the way llama.cpp does: through ggml's scheduler.

`Runner("vulkan0")` schedules over [Vulkan0, CPU]; `Runner("cpu")` over [CPU];
`Runner("meta:vulkan0,vulkan1")` over [a meta device of those devices, CPU], its split
policy settable with `set_policy` (mirrored by default). Inputs
(tensors flagged with set_input) land on the CPU's host buffer and are filled there,
so an input that must be host memory (as the seed's `rs_s_slot_rev`) is host memory on
every backend; the scheduler copies it to the device.
"""

from __future__ import annotations

import weakref

import numpy as np

from pyggml._native import ffi, lib
from pyggml.errors import Unsupported
from pyggml.backend import Backend, Scheduler, backend, cpu_backend
from pyggml.graph import Graph
from pyggml.tensor import Tensor
from pyggml.types import Op


META_PREFIX = "meta:"

# The scheduler rewrites the graph it allocates: a node's source on another backend is replaced by
# the scheduler's copy of it (ggml_backend_sched_split_graph), and the allocator leaves data and
# buffer pointers in the tensors it places. ggml expects a new graph for every allocation. Run again
# as it is, a graph kept reading the first run's copy of its inputs (the meta runner returned the
# first run's mul_mat result) and pointers into buffers that may have moved. So every allocation
# starts from the graph as it was first seen: per tensor address, its sources and placement. The
# record is kept per context of the graph, not per graph: graphs of one context share tensors (an
# input seen first by a second graph would otherwise be recorded with the first graph's placement).
_PRISTINE: "weakref.WeakKeyDictionary[object, dict[int, tuple]]" = weakref.WeakKeyDictionary()


def _addr(p) -> int:
    return int(ffi.cast("uintptr_t", p))


def restore_graph(graph: Graph):
    """Undo what a previous allocation wrote into the graph's tensors (see _PRISTINE)."""
    saved = _PRISTINE.setdefault(graph.ctx, {})
    for i in range(lib.ggml_graph_n_nodes(graph.ptr)):
        node = lib.ggml_graph_node(graph.ptr, i)
        for t in (node, *node.src):
            if t == ffi.NULL:
                continue
            state = saved.get(_addr(t))
            if state is None:
                saved[_addr(t)] = (tuple(t.src), t.data, t.buffer, t.extra)
                continue
            srcs, t.data, t.buffer, t.extra = state
            for j, s in enumerate(srcs):
                t.src[j] = s


class Runner:
    def __init__(self, name: str = "cpu", n_threads: int | None = None, graph_size: int = 8192):
        self.name = name.lower()
        self.meta = None
        if self.name == "cpu":
            self.backend = cpu_backend(n_threads)
            self.backends: list[Backend] = [self.backend]
        else:
            if self.name.startswith(META_PREFIX):
                from pyggml.meta import MetaDevice
                self.meta = MetaDevice([d for d in self.name[len(META_PREFIX):].split(",") if d])
                self.backend = self.meta.init()
            else:
                self.backend = backend(self.name)
            self.backends = [self.backend, cpu_backend(n_threads)]
        self.sched = Scheduler(self.backends, graph_size)

    @property
    def n_devices(self) -> int:
        return self.meta.n_devices if self.meta else 1

    def set_policy(self, policy):
        """The split policy of a meta runner's static tensors (None: all mirrored); no-op otherwise."""
        if self.meta is not None:
            self.meta.set_policy(policy)

    def unsupported(self, graph: Graph) -> list[Tensor]:
        return self.backend.unsupported(graph)

    def allocate(self, graph: Graph, outputs: list[Tensor] = ()):
        """Allocate the graph's tensors (outputs kept intact) ready for set_inputs/compute."""
        restore_graph(graph)
        bad = self.unsupported(graph)
        if bad:
            raise Unsupported(", ".join(sorted({n.op.name for n in bad})))
        if self.meta is not None:
            self.meta.check_graph(graph)  # before ggml's meta code aborts on a node it cannot split
        for t in outputs:
            t.set_output()
        self.sched.reset()
        self.sched.alloc_graph(graph)

    def compute(self, graph: Graph):
        self.sched.compute(graph)
        if self.meta is not None:
            self.meta.raise_pending()

    def run(self, graph: Graph, inputs: dict[Tensor, np.ndarray], outputs: list[Tensor]) -> list[np.ndarray]:
        """Allocate, set inputs, compute, read outputs."""
        restore_graph(graph)  # the index guard must see the graph's own index tensors
        check_row_indices(graph, inputs)
        self.allocate(graph, outputs)
        for t, values in inputs.items():
            t.set(values)
        self.compute(graph)
        return [t.numpy() for t in outputs]


def check_row_indices(graph: Graph, inputs: dict[Tensor, np.ndarray]):
    """get_rows / set_rows abort inside ggml on an index outside the rows they address:
    check index inputs before they reach it."""
    for node in graph.nodes:
        if node.op == Op.GET_ROWS:
            index, n_rows, what = node.src[1], node.src[0].ne[1], "get_rows"
        elif node.op == Op.SET_ROWS:
            index, n_rows, what = node.src[1], node.src[2].ne[1], "set_rows"
        else:
            continue
        values = inputs.get(index)
        if values is None:
            continue
        v = np.asarray(values)
        if v.size and (v.min() < 0 or v.max() >= n_rows):
            raise ValueError(f"{what}: index input {index.name or '(unnamed)'} holds {int(v.min())}..{int(v.max())}, "
                             f"outside the {n_rows} rows it addresses")
