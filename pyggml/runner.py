"""Run a graph on a named backend the way llama.cpp does: through ggml's scheduler.

`Runner("vulkan0")` schedules over [Vulkan0, CPU]; `Runner("cpu")` over [CPU];
`Runner("meta:vulkan0,vulkan1")` over [a meta device of those devices, CPU], its split
policy settable with `set_policy` (mirrored by default). Inputs
(tensors flagged with set_input) land on the CPU's host buffer and are filled there,
so an input that must be host memory (as the seed's `rs_s_slot_rev`) is host memory on
every backend; the scheduler copies it to the device.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pyggml import preflight
from pyggml._args import text
from pyggml._native import ffi, lib
from pyggml.backend import Backend, Scheduler, backend, cpu_backend
from pyggml.errors import Unsupported  # noqa: F401 (pyggml.testing and callers import it from here)
from pyggml.graph import Graph
from pyggml.serial import serialized
from pyggml.target import META_PREFIX, Target  # noqa: F401 (META_PREFIX: callers import it from here)
from pyggml.tensor import Tensor

if TYPE_CHECKING:
    from pyggml.meta import MetaDevice, Policy
    from pyggml.profile import Profile

log = logging.getLogger("pyggml.runner")


class Runner:
    """Run graphs on a named backend the way llama.cpp does: through ggml's scheduler.

    `run(graph, inputs, outputs)` allocates, writes the inputs, computes and returns the outputs as NumPy
    arrays; `allocate`, `Tensor.set` on each input, then `compute` do the same in steps. Weights kept
    between runs live in a buffer of their own (`runner.backend.alloc_tensors(weights_ctx)`). Results
    differ from NumPy where the backend computes in lower precision: see docs/precision.md.

    Args:
        name: 'cpu', a device name in any case ('vulkan0', 'cuda0', 'rpc0': see `pyggml.devices()`), or
            'meta:dev1,dev2' for ggml's meta device that splits one graph over several devices (split
            policy set with `set_policy`; mirrored by default).
        n_threads: the threads of the Runner's CPU backend (which computes the graph of Runner('cpu'), and
            beside a device holds the inputs). None (the default) chooses per graph: one thread for a small
            graph, the machine's cores for a large one (`pyggml.backend.auto_threads`); an int fixes the count.
        graph_size: the most nodes and leafs, together, that a graph run here may have (the scheduler's
            size); a larger graph raises GraphError.
        fallback: what to do with the nodes a device cannot compute (`ggml_backend_supports_op` says no,
            `unsupported(graph)` lists them): True (the default) computes them on the CPU, as ggml's
            scheduler can, and logs a warning naming them once per graph (logger "pyggml.runner"); False
            refuses the graph with Unsupported. Every other node stays pinned to the device. A CPU runner
            has nothing to fall back to, nor does a meta device (its nodes must be split over its devices).

    Attributes:
        name: the backend name, lower case.
        backend: the Backend graphs are computed on (a `pyggml.meta.MetaBackend` for a meta runner).
        backends: the scheduler's backends: `[backend]` for the CPU, `[backend, CPU backend]` otherwise.
        meta: the `pyggml.meta.MetaDevice` of a meta runner, else None.
        fallback: whether nodes the device cannot compute fall back to the CPU (see Args).
        sched: the `Scheduler`.
        lock: the scheduler's lock, held for each whole `run`: threads sharing a Runner take turns
            (`pyggml.serial`).

    Raises:
        ValueError: a device this build lacks (the message lists those it has), a bad thread count.
        TypeError: a name that is not a str; a fallback that is not a bool.
        GGMLError: ggml could not make a backend or the scheduler.
    """

    def __init__(
        self, name: str = "cpu", n_threads: int | None = None, graph_size: int = 8192, fallback: bool = True
    ) -> None:
        if not isinstance(fallback, bool):
            raise TypeError(f"Runner: fallback must be True or False, got {type(fallback).__name__}")
        self.fallback = fallback
        self._warned: weakref.WeakSet[Graph] = weakref.WeakSet()  # graphs whose fallback was logged
        target = Target.parse(text("Runner: name", name))
        self.name = target.name
        self.meta: MetaDevice | None = None
        if self.name == "cpu":
            self.backend = cpu_backend(n_threads)
            self.backends: list[Backend] = [self.backend]
        else:
            if target.meta:
                from pyggml.meta import MetaDevice

                self.meta = MetaDevice(list(target.devices))
                self.backend = self.meta.init(n_threads)
            else:
                self.backend = backend(self.name, n_threads)
            # a CPU variant (cpu:zen4) computes every node itself, inputs included
            self.backends = [self.backend] if self.backend.is_cpu else [self.backend, cpu_backend(n_threads)]
        self.sched = Scheduler(self.backends, graph_size)
        self.lock = self.sched.lock  # a whole run at a time, from any thread (pyggml.serial)

    def close(self) -> None:
        """Free the runner's scheduler and backends now rather than with its last reference (`with Runner(...)
        as r:` closes at the block's end). The tensors of the graph it allocated last lose the memory it lent
        them (reading them raises); using the runner again raises ValueError. Closing again does nothing."""
        with self.lock:
            self.sched.close()
            for b in self.backends:
                b.close()

    @property
    def closed(self) -> bool:
        """Whether `close()` was called."""
        return self.sched.closed

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self, what: str) -> None:
        if self.sched.closed:
            raise ValueError(f"Runner.{what}: the runner is closed (close() was called): make a new one")

    @property
    def n_devices(self) -> int:
        """How many devices the runner computes on: the meta device's number of devices, else 1."""
        return self.meta.n_devices if self.meta else 1

    def set_policy(self, policy: Policy | None) -> None:
        """Set the split policy of a meta runner's static tensors; no-op on other runners.

        The policy applies to tensors allocated from now on (`runner.backend.alloc_tensors(ctx)`): set it
        first.

        Args:
            policy: a callable `policy(tensor) -> Split | None`, a list of `(name pattern, Split or callable)`
                rules (first match wins), or None: everything mirrored (see `pyggml.meta`).
        """
        if self.meta is not None:
            self.meta.set_policy(policy)

    def unsupported(self, graph: Graph) -> list[Tensor]:
        """The nodes of `graph` the runner's device cannot compute (`ggml_backend_supports_op` says no).

        Args:
            graph: the graph to look through.

        Returns:
            The nodes, in compute order: those a runner made with `fallback=True` computes on the CPU, those
            for which one made with `fallback=False` (and a CPU runner) raises Unsupported naming their ops.

        Raises:
            TypeError: `graph` is not a Graph.
        """
        return self.backend.unsupported(graph)

    @serialized
    def allocate(self, graph: Graph, outputs: Tensor | Sequence[Tensor] = ()) -> None:
        """Give the graph's tensors memory through the scheduler, ready for `Tensor.set` on every input and then `compute`.

        The memory is lent until this runner allocates another graph (then these tensors lose it); inputs
        hold no value until written.

        Args:
            graph: the graph to allocate.
            outputs: a tensor or tensors to flag as outputs, whose memory no other node reuses.

        Raises:
            TypeError: `graph` is not a Graph; outputs that are not Tensors.
            Unsupported: the device cannot compute some nodes (their ops named) and the runner does not fall
                back to the CPU (`fallback=False`, a CPU or meta runner), or the CPU cannot compute them either.
            Unsplittable: a meta device cannot split the graph.
            GraphError: a graph larger than `graph_size`, or one the preflight refuses.
            GGMLError: the memory cannot be had.
        """
        self._check_open("allocate")
        if not isinstance(graph, Graph):
            raise TypeError(f"allocate: expected a Graph, got {type(graph).__name__}")
        self.sched.restore(graph)  # supports_op and the meta check must see the graph as built
        on_cpu = self._fall_back(graph)
        if self.meta is not None:
            self.meta.check_graph(graph)  # before ggml's meta code aborts on a node it cannot split
        for t in _output_list("allocate", outputs):
            if not isinstance(t, Tensor):
                raise TypeError(f"allocate: outputs must be Tensors, got {type(t).__name__}")
            t.set_output()
        # ggml's scheduler runs a node fed only by inputs (host memory) on the CPU: unpinned,
        # Runner("vulkan0") computed such graphs on the CPU, silently
        self.sched.alloc_graph(
            graph, pin=self.backend if self.meta is None else None, place={n: self.backends[-1] for n in on_cpu}
        )

    def _fall_back(self, graph: Graph) -> list[Tensor]:
        """The nodes of `graph` to compute on the CPU because the device cannot (see `fallback`): raises
        Unsupported where the runner must not or cannot fall back."""
        bad = self.backend.unsupported(graph)
        if not bad:
            return []
        ops = ", ".join(sorted({n.op.name for n in bad}))
        if len(self.backends) == 1:  # the CPU itself: nothing to fall back to
            preflight.check_device_supports(graph, self.backend)
        if not self.fallback:
            raise Unsupported(
                f"{ops}: {self.backend.name} cannot compute {_names(bad)}; Runner({self.name!r}, fallback=True) "
                "computes such nodes on the CPU instead"
            )
        if self.meta is not None:
            raise Unsupported(
                f"{ops}: {self.backend.name} cannot compute {_names(bad)}, and a meta device does not fall back "
                "to the CPU (its nodes are split over its devices)"
            )
        cpu = self.backends[-1]
        neither = [n for n in bad if not cpu.supports_op(n)]
        if neither:
            raise Unsupported(
                f"{', '.join(sorted({n.op.name for n in neither}))}: neither {self.backend.name} nor the CPU can "
                f"compute {_names(neither)}"
            )
        for n in bad:
            root = n.ptr
            while root.view_src != ffi.NULL:
                root = root.view_src
            buf = root.buffer
            if buf != ffi.NULL and not lib.ggml_backend_supports_buft(cpu.ptr, lib.ggml_backend_buffer_get_type(buf)):
                raise Unsupported(
                    f"{n.op.name}: {self.backend.name} cannot compute {_names([n])}, and the CPU cannot either: it "
                    f"writes {Tensor(root, None).name or 'its tensor'} in place, in {self.backend.name}'s memory"
                )
        if graph not in self._warned:
            self._warned.add(graph)
            log.warning(
                "%s cannot compute %d node(s) of this graph (%s): the CPU computes them (%s); "
                "Runner(%r, fallback=False) refuses instead",
                self.backend.name,
                len(bad),
                ops,
                _names(bad),
                self.name,
            )
        return bad

    @serialized
    def compute(self, graph: Graph) -> None:
        """Compute the graph this runner allocated last (`ggml_backend_sched_graph_compute`).

        Read the results with `Tensor.numpy()`. A training graph's loss gradient seed (1) and its optimizers'
        hyper-parameters are written here, before each compute; each compute that succeeds is one optimizer
        step (`pyggml.optim`).

        Args:
            graph: the graph `allocate` was given last.

        Raises:
            TypeError: `graph` is not a Graph.
            GraphError: another graph, inputs not written since the allocation (named), or a graph the
                preflight refuses.
            GGMLError: ggml reports a failed compute.
            pyggml.rpc.RpcError: an RPC server's connection failed.
        """
        self._check_open("compute")
        if not isinstance(graph, Graph):
            raise TypeError(f"compute: expected a Graph, got {type(graph).__name__}")
        alloc = graph.state.allocation
        if alloc is not None and alloc[0] is self.sched and alloc[0].generation == alloc[1]:
            graph._fill_feeds()  # the losses' gradient seeds, optimizers' hyper-parameters
        try:
            self.sched.compute(graph)
        finally:
            if self.meta is not None:
                self.meta.raise_pending()
        graph._computed()  # an optimizer counts its step

    @serialized
    def run(self, graph: Graph, inputs: dict[Tensor, Any], outputs: Tensor | Sequence[Tensor]) -> Any:
        """Allocate the graph, write its inputs, compute it and read the outputs.

        The graph's memory is allocated anew at each run, so values given to an earlier run are gone: give
        every input every time. Weights that stay between runs live in a buffer of their own
        (`runner.backend.alloc_tensors(weights_ctx)`), written once, and are not given as inputs.

        Args:
            graph: the graph to run.
            inputs: `{tensor: values}` for every input of the graph (tensors made with `input=True` and any
                other tensor no op computes that lives in the graph's memory); each value is an array of the
                tensor's NumPy `shape`, converted exactly or refused (`Tensor.set`).
            outputs: a tensor of the graph, or a list of them.

        Returns:
            For one output tensor, one NumPy array of its `shape`; for a list, a list of arrays. Copies.

        Raises:
            TypeError: inputs that are not a dict of Tensors; outputs that are not Tensors.
            ValueError: a key that is a computed node or a view (give the tensor it is computed from or
                views); an input or output that is not part of the graph; values that do not convert exactly.
            GraphError: a missing input (named), and the other errors of `allocate` and `compute`.
            Unsupported: the device cannot compute some nodes.
            GGMLError: the memory cannot be had, or ggml reports a failed compute.
        """
        outs = self._load("run", graph, inputs, outputs)
        self.compute(graph)
        results = [t.numpy() for t in outs]
        return results[0] if isinstance(outputs, Tensor) else results

    @serialized
    def profile(self, graph: Graph, inputs: dict[Tensor, Any], repeats: int = 5, warmup: int = 1) -> Profile:
        """Time every node of a graph on the backends this runner computes it with.

        The graph is allocated and its inputs written once (as `run` does), then computed warmup + repeats
        times as ggml normally does (`Profile.plain_us`), then warmup + repeats times with the scheduler's
        eval callback asking for every node, which makes ggml compute the graph one node at a time: each
        node is timed from the callback's question to its report, the backend synchronized in between.
        That serializes the graph's compute (no overlap of nodes on a GPU, the CPU's threads started per
        node) and adds two Python calls per node: the times are each node's alone, and their sum runs
        above a plain compute (`Profile.overhead`, the profiled compute's median over the plain one's).
        On a meta device each node is timed the same way, every device synchronized after it (ggml patch
        0032; pyggml.profile says more).

        Args:
            graph: the graph to profile.
            inputs: `{tensor: values}` for every input, as for `run`.
            repeats: timed computes, 1 to 100000 (each row's time is their median).
            warmup: computes made first and not timed (Vulkan builds its pipelines there), 0 to 100000.

        Returns:
            A `pyggml.profile.Profile`: rows (name, op, shape, ne, type, backend, times_us, indices),
            `.table()`, `.plot()`.

        Raises:
            TypeError: what `run` raises for the graph and inputs, and repeats or warmup not an int.
            ValueError: what `run` raises, and repeats or warmup out of range.
            GraphError: a missing input, and the errors of `allocate` and `compute`.
            Unsupported: the device cannot compute some nodes.
            GGMLError: the memory cannot be had, or ggml reports a failed compute.
            RuntimeError: ggml did not report every node of the graph.
        """
        from pyggml.profile import profile

        return profile(self, graph, inputs, repeats, warmup)

    def _load(self, what: str, graph: Graph, inputs: dict[Tensor, Any], outputs: Tensor | Sequence[Tensor]) -> list:
        """run's and profile's first part: check the inputs and outputs, allocate, write the inputs; returns
        the outputs as a list (errors named after `what`)."""
        if not isinstance(inputs, dict):
            raise TypeError(f"{what}: inputs must be a dict of Tensor -> values, got {type(inputs).__name__}")
        outs = _output_list(what, outputs)
        for t in inputs:
            if not isinstance(t, Tensor):
                raise TypeError(f"{what}: input keys must be Tensors, got {type(t).__name__}")
            if t.ptr.op != lib.GGML_OP_NONE:
                viewed = t.view_src
                kind = (
                    f"a view ({t.op.name}) of {viewed.name or 'another tensor'}; give that tensor instead"
                    if viewed is not None
                    else f"computed by the graph (a {t.op.name} node), so a value given to it would be overwritten "
                    "or, worse, read half-way; give the inputs it is computed from"
                )
                raise ValueError(f"{what}: {t.name or '(unnamed)'} is not an input: it is {kind}")
        self.allocate(graph, outs)
        for t, values in inputs.items():
            if t.ptr.data == ffi.NULL:
                raise ValueError(
                    f"{what}: input {t.name or '(unnamed)'} is not part of the graph (it got no memory); "
                    "only tensors the graph reads can be given"
                )
        for t in outs:
            if t.ptr.data == ffi.NULL:
                raise ValueError(
                    f"{what}: output {t.name or '(unnamed)'} is not part of the graph: add it with "
                    "graph.build_forward_expand(output) before running"
                )
        for t, values in inputs.items():
            t.set(values)
        return list(outs)


def _names(nodes: list[Tensor], most: int = 5) -> str:
    """Nodes as `OP(name)`, the first `most` of them and how many more."""
    shown = ", ".join(f"{n.op.name}({n.name or 'unnamed'})" for n in nodes[:most])
    return shown + (f" and {len(nodes) - most} more" if len(nodes) > most else "")


def _output_list(what: str, outputs) -> Sequence[Tensor]:
    """One output tensor or a sequence of them, as a sequence."""
    if isinstance(outputs, Tensor):
        return [outputs]
    if isinstance(outputs, (str, bytes)) or not isinstance(outputs, Sequence):
        raise TypeError(f"{what}: outputs must be a Tensor or a list of Tensors, got {type(outputs).__name__}")
    return outputs
