"""Run a graph on a named backend the way llama.cpp does: through ggml's scheduler.

`Runner("vulkan0")` schedules over [Vulkan0, CPU]; `Runner("cpu")` over [CPU];
`Runner("meta:vulkan0,vulkan1")` over [a meta device of those devices, CPU], its split
policy settable with `set_policy` (mirrored by default). Inputs
(tensors flagged with set_input) land on the CPU's host buffer and are filled there,
so an input that must be host memory (as the seed's `rs_s_slot_rev`) is host memory on
every backend; the scheduler copies it to the device.
"""

from __future__ import annotations

import numpy as np

from pyggml.errors import Unsupported
from pyggml.backend import Backend, Scheduler, backend, cpu_backend
from pyggml.graph import Graph
from pyggml.tensor import Tensor
from pyggml.types import Op


META_PREFIX = "meta:"


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
        bad = self.unsupported(graph)
        if bad:
            raise Unsupported(", ".join(sorted({n.op.name for n in bad})))
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
