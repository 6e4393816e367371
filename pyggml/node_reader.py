"""Observers that read every node of a graph, at the cost of computing it whole.

An eval callback that reads every node must, on a stock ggml, ask for each one: the graph allocator gives a
node's memory to a later node once its last consumer ran, so the scheduler computes the graph one node at a
time (on a real-size model that doubles llama.cpp's own compute). pyggml's ggml carries a scheduler option
(patch 0034, `ggml_backend_sched_set_observed_nodes_budget`): the nodes of a graph that fits a budget are kept
(flagged GGML_TENSOR_FLAG_OBSERVED), a node that writes into memory it shares is asked only once every node
before it ran, and the callback hears of the last node of every split. A `NodeReader` leaves the kept nodes for
later, and reads them, in order, before such a write and at the end of each split, through the same two calls
(`on_ask`, then `on_done`) it makes for a node read at once: it sees every value as computed either way.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from pyggml._native import ffi, lib
from pyggml.tensor import Tensor

# the flag patch 0034 sets on kept nodes (0 on a ggml without it: nothing is ever kept)
KEPT = int(getattr(lib, "GGML_TENSOR_FLAG_OBSERVED", 0))
# the most bytes of one graph's nodes kept: a 32-token prompt of a 0.6B model keeps about 0.2 GB; a graph
# larger than this is read node by node as on a stock ggml
KEPT_BYTES = 2 << 30
_VIEW_OPS = {int(lib.GGML_OP_VIEW), int(lib.GGML_OP_RESHAPE), int(lib.GGML_OP_PERMUTE), int(lib.GGML_OP_TRANSPOSE)}
_VIEW_OPS.add(int(lib.GGML_OP_NONE))


def writes_shared(p: object) -> bool:
    """Whether node p has an op whose result lives in memory it shares with another tensor (ggml_cpy into a view,
    ggml_set_rows, an in-place op): computing it overwrites what earlier nodes read or were.

    Args:
        p: the node's C pointer.

    Returns:
        True for such a node.
    """
    return p.view_src != ffi.NULL and int(p.op) not in _VIEW_OPS  # type: ignore[attr-defined]


class NodeReader:
    """Base of an observer that reads every node (`Scheduler.observe`, `pyggml.llama.Context(observe=)`).

    A subclass writes `on_ask(node)` (before the node is computed, its sources as it will read them; return
    True to be called back) and `on_done(node)` (once it is computed). Under a scheduler that keeps the nodes
    (`kept_while`), both are called after the node ran, together; otherwise as ggml asks, one node at a time.

    Attributes:
        reads_later: whether this reader may leave kept nodes for later (a subclass that calls an observer
            which must see each node as ggml asks sets it False).
    """

    reads_later = True

    def __init__(self) -> None:
        self._later: list[Tensor] = []

    def on_ask(self, t: Tensor) -> bool:
        """Called before t is computed (or, for a kept node, once it ran, its sources as they were).

        Args:
            t: the node.

        Returns:
            True to be called back with `on_done(t)`.
        """
        raise NotImplementedError

    def on_done(self, t: Tensor) -> bool:
        """Called once t is computed, for the nodes `on_ask` answered True.

        Args:
            t: the node.

        Returns:
            False to stop the compute.
        """
        raise NotImplementedError

    def __call__(self, t: Tensor, ask: bool) -> bool:
        if ask:
            if self._later or (self.reads_later and t.ptr.flags & KEPT):
                if not writes_shared(t.ptr):
                    self._later.append(t)
                    return False
                self.flush()  # every node before it ran (patch 0034): read them before it writes
            return self.on_ask(t)
        if self._later:  # the end of a split, or a node asked for while others waited
            return self.flush()
        return self.on_done(t)

    def flush(self) -> bool:
        """Read the nodes left for later, in compute order.

        Returns:
            False when on_done asked to stop.
        """
        later, self._later = self._later, []
        go = True
        for t in later:
            if self.on_ask(t):
                go = self.on_done(t) and go
        return go


@contextlib.contextmanager
def kept_while(observer: object) -> Iterator[None]:
    """Let the scheduler keep the nodes of the graphs allocated in this block, when `observer` is a NodeReader.

    Args:
        observer: the eval callback's observer.

    Returns:
        A context manager: the budget is set inside the block and 0 again after it.
    """
    if not KEPT or not isinstance(observer, NodeReader) or not observer.reads_later:
        yield
        return
    lib.ggml_backend_sched_set_observed_nodes_budget(KEPT_BYTES)
    try:
        yield
    finally:
        lib.ggml_backend_sched_set_observed_nodes_budget(0)
        observer._later.clear()  # none is left after a whole compute: only a stopped one leaves nodes never run
