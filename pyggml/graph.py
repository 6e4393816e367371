"""Graph: a ggml_cgraph built in a Context."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from pyggml import lifetime
from pyggml._args import instance, integer, text
from pyggml._native import ffi, guard_error, lib
from pyggml.context import Context
from pyggml.lifetime import GraphState, reachable
from pyggml.tensor import Tensor, rank
from pyggml.types import Op

if TYPE_CHECKING:
    from pyggml.profile import Profile

MAX_GRAPH_SIZE = 2**24  # nodes of one graph: far beyond any model's, well inside what ggml can size


def _addr(ptr) -> int:
    return int(ffi.cast("uintptr_t", ptr))


# Graph.to_dot's renderer: pyggml.graph_dot.graph_to_dot, registered by that module (a floor above this one:
# it reads backends, meta devices, runners and profiles), so that the graph need not import upward
_to_dot: Callable[..., str] | None = None


class Graph:
    """A ggml compute graph (`ggml_new_graph_custom`) made in a Context's memory.

    Build it with `Graph(ctx).build_forward_expand(out)` (out and every node it depends on, in compute
    order), then compute it with a `Runner` (`Runner("cpu").run(graph, {a: A}, out)`), a `Scheduler`, or a
    `Backend` once its tensors have memory. `Graph.with_grads` makes one that can hold a backward pass.

    Args:
        ctx: the Context the graph is made in (its tensors may live in others).
        size: the most nodes (and, separately, leafs) it can hold, 1 to 2**24 (ggml's default 2048); an
            expand past it raises ValueError naming the size to ask for.

    Attributes:
        ctx: the Context the graph lives in.
        size: the graph's size.
        ptr: the `struct ggml_cgraph *` (cffi cdata).
        broken: why the graph must not be computed (an expand that failed half-way), or None.
        has_grads: whether the graph has room for gradients (made by `with_grads`).
        has_backward: whether `build_backward_expand` has added the backward pass.
        state: what allocators and the preflight know of this graph (`pyggml.lifetime.GraphState`).

    Raises:
        TypeError: `ctx` is not a Context; `size` not an integer.
        ValueError: `size` outside 1..2**24.
        MemoryError: the context has no room left for the graph.
    """

    def __init__(self, ctx: Context, size: int = lib.GGML_DEFAULT_GRAPH_SIZE) -> None:
        self._init(ctx, size, grads=False)

    def _init(self, ctx: Context, size: int, grads: bool) -> None:
        """`__init__`, and `with_grads` where `grads` makes room for the gradients."""
        instance("Graph: ctx", ctx, Context)
        size = integer("Graph: size", size, 1, MAX_GRAPH_SIZE)
        need = lib.ggml_graph_overhead_custom(size, grads)
        if ctx.mem_size - ctx.used_mem < need:  # ggml (before patch 0010) dereferenced NULL here
            graph = f"a graph of size {size} with gradients" if grads else f"a graph of size {size}"
            raise MemoryError(
                f"context is full: {graph} needs {need} bytes, "
                f"{ctx.mem_size - ctx.used_mem} left (create the Context with a larger mem_size)"
            )
        ptr = lib.pyggml_guarded_ggml_new_graph_custom(ctx.ptr, size, grads)
        if ptr == ffi.NULL:
            raise guard_error("Graph") or MemoryError(f"Graph: no room for a graph of size {size}")
        self.ctx = ctx
        self.size = size
        self.ptr = ptr
        self.broken: str | None = None  # why the graph must not be computed (an expand that failed half-way)
        self.has_grads = grads
        self.has_backward = False
        # tensors a Runner writes itself before each compute (the losses' gradient seeds, an optimizer's
        # hyper-parameters): (tensor, values function); and what it calls after each compute that succeeded
        self._feeds: list[tuple[Tensor, Callable[[], Any]]] = []
        self._after_compute: list[Callable[[], None]] = []
        # what allocators and the preflight know of this graph (pyggml.lifetime.GraphState): the graph
        # holds it, so it goes with the graph
        self.state = GraphState()

    def build_forward_expand(self, *tensors: Tensor) -> "Graph":
        """Add the tensors and every node they depend on, in compute order (`ggml_build_forward_expand`).

        Also spelled `expand`. A tensor from another context is fine: the graph's context keeps that context
        alive.

        Args:
            *tensors: the outputs to compute.

        Returns:
            This graph, for chaining: `graph = Graph(ctx).build_forward_expand(y)`.

        Raises:
            TypeError: an argument is not a Tensor.
            ValueError: the graph is full; the message names the size needed (the graph is then marked
                broken: computing it raises GraphError).
            OpError: another failed ggml precondition (the graph is marked broken too).
        """
        for t in tensors:
            if not isinstance(t, Tensor):
                raise TypeError(f"build_forward_expand: expected a Tensor, got {type(t).__name__}")
            # a scheduler that ran another graph of these nodes left them reading its own copies: ggml walks the
            # sources as built, else the new graph held the scheduler's copies as leaves (in memory of the other
            # graph's devices: a meta runner aborted on them)
            with lifetime.sources_as_built([t.ptr]):
                failed = lib.pyggml_guarded_ggml_build_forward_expand(self.ptr, t.ptr)
            if failed:
                err = guard_error("build_forward_expand")
                assert err is not None  # the guarded call failed, so it left its message
                # ggml stops where the graph filled up: what it holds is not what was asked for
                self.broken = f"an expand failed half-way ({err})"
                if "cgraph->size" in str(err) or "GGML_HASHSET_FULL" in str(err):
                    need = self._size_needed(t)
                    raise ValueError(
                        f"build_forward_expand: graph is full: it holds {self.size} nodes and leafs, "
                        f"this one needs {need}: create it as Graph(ctx, size={need}) (or larger), "
                        f"in a Context with room for it (Context(graph_size={need})); {err}"
                    )
                raise err
            if t.ctx is not self.ctx:
                self.ctx.adopt(t)
            # every node's NumPy rank, now: it derives from the sources, which a scheduler rewires to its own
            # copies (ranked from their ne alone) while it computes, so a rank first asked for then, when a
            # run reads its outputs, came out wrong ((8,) for a (1, 8) product on a meta device)
            rank(t.ptr)
        return self

    expand = build_forward_expand

    def _size_needed(self, t: Tensor) -> int:
        """The size a graph needs to hold what this one holds and t: its nodes or its leafs, the more
        numerous (ggml keeps each in a table of `size` entries, and both in a hash set of twice that)."""
        held = reachable([t.ptr] + [lib.ggml_graph_node(self.ptr, i) for i in range(self.n_nodes)], views=False)
        leafs = sum(p.op == lib.GGML_OP_NONE for p in held)
        return max(len(held) - leafs, leafs, 1)

    @property
    def n_nodes(self) -> int:
        """The number of nodes, the tensors the graph computes (`ggml_graph_n_nodes`).

        Leafs (inputs, weights) are not nodes.
        """
        return lib.ggml_graph_n_nodes(self.ptr)

    def node(self, i: int) -> Tensor:
        """The i-th node in compute order (`ggml_graph_node`).

        Args:
            i: the index; a negative one counts from the end, as in a list.

        Returns:
            The node.

        Raises:
            IndexError: `i` outside the graph's nodes.
            TypeError: `i` is not an integer.
        """
        i = integer("Graph.node: i", i)
        n = self.n_nodes
        if not -n <= i < n:
            raise IndexError(f"graph has {n} nodes, no node {i}")
        # the graph's context keeps alive every context the graph's tensors live in
        return Tensor(lib.ggml_graph_node(self.ptr, i), self.ctx)

    @property
    def nodes(self) -> list[Tensor]:
        """Every node in compute order, as Tensors (see `node`)."""
        return [self.node(i) for i in range(self.n_nodes)]

    def leafs(self) -> list[Tensor]:
        """The tensors the nodes read that the graph does not compute: weights, inputs, caches.

        Returns:
            The leafs, in the order the nodes first read them.
        """
        nodes = {_addr(n.ptr) for n in self.nodes}
        out, seen = [], set()
        for n in self.nodes:
            for s in n.ptr.src:
                if s != ffi.NULL and _addr(s) not in nodes and _addr(s) not in seen:
                    seen.add(_addr(s))
                    out.append(Tensor(s, self.ctx))
        return out

    def op_counts(self) -> Counter:
        """How many nodes of each op the graph has.

        Returns:
            A Counter of op name (`Op` member name, e.g. "MUL_MAT") to count.
        """
        return Counter(Op(n.op).name for n in (lib.ggml_graph_node(self.ptr, i) for i in range(self.n_nodes)))

    def get_tensor(self, name: str) -> Tensor | None:
        """The graph's node or leaf with this name (`ggml_graph_get_tensor`).

        Args:
            name: the name to look for.

        Returns:
            The tensor, or None when there is none.

        Raises:
            TypeError: `name` is not a str.
        """
        p = lib.ggml_graph_get_tensor(self.ptr, text("Graph.get_tensor: name", name).encode())
        return Tensor(p, self.ctx) if p != ffi.NULL else None

    def inputs(self) -> list[Tensor]:
        """Every tensor of the graph (node or leaf) flagged as an input.

        Returns:
            The inputs: leafs first, then nodes.
        """
        return [t for t in self.leafs() + self.nodes if t.is_input]

    def to_dot(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        placement: Any = None,
        profile: Profile | None = None,
        native: bool = False,
        title: str | None = None,
    ) -> str:
        """The graph as Graphviz DOT text: every node and leaf, an edge from each source to its node.

        Each node shows its op (ggml_op_desc), compute index, name, NumPy-order shape, ggml `ne` and type,
        a permute's axes, what a view views, its flags; views are dashed, inputs, parameters, weights and
        other leaves have shapes of their own, outputs a double border (pyggml.graph_dot has the legend).
        Names are escaped: any name gives valid DOT. The sources drawn are those the graph was built with,
        also after a scheduler rewired them to its copies.

        Args:
            path: also write the text to this file (UTF-8); None: only return it.
            placement: where the graph is computed, to color each node by its backend (a legend lists them;
                an edge between backends is bold red): a Runner or a Scheduler that has allocated this graph
                (`runner.allocate(graph)` or `runner.run`; the scheduler's own assignment,
                ggml_backend_sched_get_tensor_backend); for a meta device (a meta Runner, or a MetaDevice)
                each node also shows its split as ggml's meta code derives it
                (ggml_backend_meta_graph_split_states; the policy's for static tensors); or a mapping of
                Tensor or tensor name -> a label of your own.
            profile: a Profile of this graph (`Runner.profile`), to show each node's time.
            native: return what ggml's own ggml_graph_dump_dot writes instead (records, no placement,
                names unescaped).
            title: a title above the picture.

        Returns:
            The DOT text. Render it with `pyggml.graph_dot.render` (Graphviz's `dot` program).

        Raises:
            TypeError: arguments of the wrong kind.
            ValueError: a Runner or Scheduler that has not allocated this graph (or allocated another
                since), a mapping naming tensors the graph lacks, native=True with placement, profile or
                title, or (native) a name ggml would write unescaped into its record syntax.
            OSError: path cannot be written.
        """
        if _to_dot is None:  # pyggml/__init__ imports pyggml.graph_dot, which registers it
            raise RuntimeError("Graph.to_dot: pyggml.graph_dot is not loaded (import pyggml)")
        return _to_dot(self, path, placement=placement, profile=profile, native=native, title=title)

    # --- gradients ---------------------------------------------------------------------------------
    @classmethod
    def with_grads(cls, ctx: Context, size: int = lib.GGML_DEFAULT_GRAPH_SIZE) -> "Graph":
        """A graph that can hold gradients (`ggml_new_graph_custom(ctx, size, true)`), for `build_backward_expand`.

        Args:
            ctx: the Context it is made in.
            size: the most nodes (and leafs) it can hold, 1 to 2**24.

        Returns:
            The new, empty graph.

        Raises:
            TypeError: `ctx` is not a Context; `size` not an integer.
            ValueError: `size` outside 1..2**24.
            MemoryError: the context has no room left for the graph.
        """
        g = cls.__new__(cls)
        g._init(ctx, size, grads=True)
        return g

    def build_backward_expand(self) -> "Graph":
        """Add the backward pass (`ggml_build_backward_expand`): the gradients of the loss.

        The gradient of the loss (an F32 scalar flagged with `Tensor.set_loss`) with respect to every tensor
        flagged with `Tensor.set_param`, both flagged before the forward pass was built into this graph, which
        `with_grads` made. Afterwards `grad(t)` is a parameter's gradient, flagged as an output so that it
        can be read after a run (`graph.grad(w).numpy()`). The loss's own gradient, the leaf the backward pass
        starts from (`grad_acc(loss)`), is an input that a `Runner` fills with 1 before every compute: it is
        never given by hand. An optimizer (`pyggml.optim`) then adds its steps with `build_step`.

        Returns:
            This graph.

        Raises:
            ValueError: a graph made by `Graph(ctx)` (no room for gradients: make it with `Graph.with_grads`),
                a graph with no nodes, without a parameter or a loss among its nodes (flagged after
                `build_forward_expand`, or never), or one that holds its backward pass already.
            OpError: another ggml precondition failed (the graph is then marked broken), e.g. an op ggml has no
                backward pass for.
        """
        if not self.has_grads:
            raise ValueError(
                "build_backward_expand: this graph was made by Graph(ctx), which has no room for gradients; "
                "make it with Graph.with_grads(ctx) and build the forward pass into that graph"
            )
        if self.has_backward:
            raise ValueError("build_backward_expand: the graph holds its backward pass already")
        if self.n_nodes == 0:
            raise ValueError("build_backward_expand: the graph has no nodes: build_forward_expand(loss) first")
        nodes = self.nodes
        for flag, what, how in (("is_param", "trainable parameter", "set_param"), ("is_loss", "loss", "set_loss")):
            if not any(getattr(n, flag) for n in nodes):
                late = [t.name or "(unnamed)" for t in self.leafs() if getattr(t, flag)]
                hint = (
                    f" ({', '.join(late)} was flagged after build_forward_expand: ggml then took it for a constant)"
                    if late
                    else ""
                )
                raise ValueError(
                    f"build_backward_expand: the graph has no {what}{hint}; flag it with t.{how}() before "
                    "build_forward_expand"
                )
        if lib.pyggml_guarded_ggml_build_backward_expand(self.ctx.ptr, self.ptr, ffi.NULL):
            err = guard_error("build_backward_expand")
            assert err is not None  # the guarded call failed, so it left its message
            self.broken = f"the backward expand failed half-way ({err})"
            raise err
        self.has_backward = True
        one = np.ones(1, dtype=np.float32)
        for n in nodes:
            if n.is_loss:
                seed = self.grad_acc(n)
                if seed is not None:  # dL/dL = 1, the leaf the backward pass starts from
                    seed.set_input()
                    if not seed.name:
                        seed.name = f"{(n.name or 'loss')[:40]} grad seed"
                    self._feeds.append((seed, lambda: one))
            elif n.is_param:
                g = self.grad(n)
                while g is not None:  # kept after the run (a view's memory is what it views)
                    g.set_output()
                    g = g.view_src
        return self

    def params(self) -> list[Tensor]:
        """The graph's trainable parameters: its nodes flagged with `Tensor.set_param`, in compute order.

        Returns:
            The parameters (an optimizer's default set, `pyggml.optim`).
        """
        return [n for n in self.nodes if n.is_param]

    def _fill_feeds(self) -> None:
        """Write what a Runner writes itself (the losses' gradient seeds, optimizers' hyper-parameters)."""
        for t, values in self._feeds:
            if t.is_allocated:
                t.set(values())

    def _computed(self) -> None:
        """A compute of this graph succeeded: tell who asked (an optimizer counts its steps)."""
        for fn in self._after_compute:
            fn()

    def grad(self, t: Tensor) -> Tensor | None:
        """The gradient of the loss with respect to `t` in this graph (`ggml_graph_get_grad`).

        Args:
            t: a tensor of the forward pass.

        Returns:
            The gradient tensor, or None when `t` has none (or the graph holds no gradients). A parameter's
            gradient is an output of the graph: readable after a run (`graph.grad(w).numpy()`); another node's
            is readable after a run that names it among the outputs.

        Raises:
            TypeError: `t` is not a Tensor.
        """
        return self._grad_lookup("grad", lib.pyggml_guarded_ggml_graph_get_grad, t)

    def grad_acc(self, t: Tensor) -> Tensor | None:
        """`t`'s gradient accumulator (`ggml_graph_get_grad_acc`); for the loss, the leaf its gradient starts from.

        Args:
            t: a tensor of the forward pass.

        Returns:
            The accumulator tensor; None for a `t` without one (or a graph without gradients).

        Raises:
            TypeError: `t` is not a Tensor.
        """
        return self._grad_lookup("grad_acc", lib.pyggml_guarded_ggml_graph_get_grad_acc, t)

    def _grad_lookup(self, method: str, get: Callable[[Any, Any], Any], t: Tensor) -> Tensor | None:
        """`grad`'s and `grad_acc`'s lookup: `get` is the ggml getter, None where it finds no tensor."""
        instance(f"Graph.{method}: t", t, Tensor)
        p = get(self.ptr, t.ptr)
        return Tensor(p, self.ctx) if p != ffi.NULL else None
