"""Every node of a graph against its oracle, fed the data the node actually received.

The op database says, for each ggml op kind, how to read a node back into an oracle call
(`OpSpec.reads` and `from_node`). `NodeChecker` is an observer for ggml's scheduler
(`Scheduler.observe`, ggml_backend_sched_set_eval_callback): just before ggml computes a node it
reads the node's sources, right after it reads the node, calls the oracle on the sources and
compares. A wrong node is found where it is, not at the graph's end, with the values it was given,
so an error upstream does not spread into it; and what happens to the memory afterwards (an
allocator reusing it, an op writing in place into a source) does not matter.

    checker = NodeChecker()
    with observing(runner, checker):
        runner.compute(graph)
    bad = [v for v in checker.verdicts if not v.ok]
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from pyggml import types
from pyggml._native import ffi, lib
from pyggml.runner import Runner
from pyggml.tensor import Tensor
from pyggml.testing import opdb
from pyggml.testing.opdb import Node, default_nmse
from pyggml.testing.verdict import Comparison, compare, default_max_error

if TYPE_CHECKING:
    from pyggml.testing.cases import OpCase

# nodes that compute nothing of their own: their value is their source's memory seen another way
VIEW_KINDS = {"NONE", "VIEW", "RESHAPE", "PERMUTE", "TRANSPOSE"}


@dataclass
class NodeVerdict:
    index: int  # the node's place in the order ggml computed the graph
    kind: str
    name: str
    comparison: Comparison | None  # None: not checked (no reader for this kind, or `error`)
    nmse_bound: float = 0.0
    error: str = ""  # the reader could not model this node (its oracle raised): why

    @property
    def ok(self) -> bool:
        return self.comparison is None or self.comparison.ok


def kind(t: Tensor) -> str:
    """The node's op kind as ggml names it (unary and GLU ops by their own names)."""
    return ffi.string(lib.ggml_op_desc(t.ptr)).decode()


def node_bound(s: opdb.OpSpec, t: Tensor, srcs: list[Tensor]) -> float:
    """The NMSE a node of `s` may show on any backend: 0 for an exact spec; else the loosest of the spec's
    bounds that hold for every backend and match the node's types (its own and its sources'); else the
    bound its precision earns."""
    if s.exact:
        return 0.0
    node_types = {x.type.name.lower() for x in [t, *srcs]}
    rules = [b.nmse for b in s.bounds if not b.backend and (not b.types or node_types & set(b.types))]
    if rules:
        return max(rules)
    return default_nmse(node_types)


def values(t: Tensor) -> np.ndarray:
    """t's values as `Tensor.numpy()` gives them, and also for a strided view of a type NumPy has no dtype
    for (BF16, quantized) or outside host memory, which numpy() refuses: the view's whole span is read
    (ggml_nbytes of a view covers it) and each row decoded from its own offset."""
    if lib.ggml_is_contiguous(t.ptr) or (types.has_raw_dtype(t.type) and t.is_host):
        return t.numpy()
    span = np.empty(lib.ggml_nbytes(t.ptr), dtype=np.uint8)
    if t.ptr.buffer == ffi.NULL:
        ffi.memmove(ffi.from_buffer(span), t.ptr.data, span.size)
    else:
        lib.ggml_backend_tensor_get(t.ptr, ffi.from_buffer(span), 0, span.size)
    ne, nb = t.ne, t.nb
    block = lib.ggml_blck_size(t.ptr.type)
    if block > 1 and nb[0] != lib.ggml_type_size(t.ptr.type):
        raise ValueError(f"{t.type.name} view whose blocks are not packed along ne0: no row to decode")
    row = lib.ggml_row_size(t.ptr.type, ne[0])
    out = np.empty(
        (ne[3], ne[2], ne[1], ne[0]), dtype=np.float32 if not types.has_raw_dtype(t.type) else types.host_dtype(t.type)
    )
    for i3 in range(ne[3]):
        for i2 in range(ne[2]):
            for i1 in range(ne[1]):
                at = i1 * nb[1] + i2 * nb[2] + i3 * nb[3]
                if block > 1 or nb[0] == lib.ggml_type_size(t.ptr.type):
                    raw = span[at : at + row]
                else:  # elements apart from each other (a transposed view): gather them first
                    size = lib.ggml_type_size(t.ptr.type)
                    raw = np.concatenate([span[at + i0 * nb[0] : at + i0 * nb[0] + size] for i0 in range(ne[0])])
                out[i3, i2, i1] = types.decode(t.type, raw, (ne[0],))
    return out.reshape(t.shape)


META_UNREAD = "on a meta device's split buffer: not read back (ggml's meta get_tensor aborts on some split states)"


def on_meta_buffer(p: object) -> bool:
    """The tensor lives in a meta device's buffer. Reading such a tensor back went through ggml's meta
    get_tensor, which asserted (killing the process) on tensors of llama.cpp's tensor split, views and
    nodes alike: the checker leaves them unread rather than die."""
    buf = p.buffer  # type: ignore[attr-defined]
    if buf == ffi.NULL:
        return False
    return ffi.string(lib.ggml_backend_buft_name(lib.ggml_backend_buffer_get_type(buf))).startswith(b"Meta")


def sources(t: Tensor) -> list[np.ndarray | None]:
    """The values of t's sources by slot (None for an empty slot: a reader tells sources apart by their
    slot, e.g. soft_max_ext's src[1] mask and src[2] sinks)."""
    ptrs = list(t.ptr.src)
    while ptrs and ptrs[-1] == ffi.NULL:
        ptrs.pop()
    return [values(Tensor(p, t.ctx)) if p != ffi.NULL else None for p in ptrs]


def as_stored(t: Tensor, expected: np.ndarray) -> np.ndarray:
    """The oracle's values as a node of t's type holds them: F16 and BF16 rounded (and overflowed to inf)
    the way the node stores its result; other types as they are."""
    name = t.type.name
    if name not in ("F16", "BF16") or expected.dtype.kind != "f":
        return expected
    with np.errstate(over="ignore", invalid="ignore"):
        return types.decode(name, types.encode(name, expected.astype(np.float32)), expected.shape)


def flush_denormals(a: np.ndarray) -> np.ndarray:
    """Values below F32's smallest normal as zero: ggml's kernels may flush them (FTZ/DAZ), so a result
    of denormals alone (an attn_factor of 1e-45) is no disagreement."""
    a = np.asarray(a)
    if a.dtype.kind != "f":
        return a
    return np.where(np.abs(a) < np.finfo(np.float32).tiny, 0, a)


class NodeChecker:
    """A scheduler observer (`Scheduler.observe`) that checks each node as ggml computes it; the verdicts
    gather in `verdicts`. Views (VIEW_KINDS) compute nothing and are not asked for.

    `tolerance(node, bound)`, when given, returns the NMSE bound to apply instead of the spec's (the
    fuzzer widens it for random shapes and values); `flush` compares denormals as zero."""

    def __init__(self, tolerance: Callable[[Tensor, float], float] | None = None, flush: bool = False) -> None:
        opdb.load()
        self.tolerance, self.flush = tolerance, flush
        self.verdicts: list[NodeVerdict] = []
        self._index = 0
        self._pending: tuple[opdb.OpSpec, Node] | None = None

    def __call__(self, t: Tensor, ask: bool) -> bool:
        if not ask:
            return self._judge(t)
        index, self._index = self._index, self._index + 1
        k = kind(t)
        if k in VIEW_KINDS:
            return False
        # Every node that computes something is asked for, read or not: ggml computes a node nobody asked
        # for together with the next one asked for, after that one's sources were read here
        s = opdb.READERS.get(k)
        if s is None:
            self.verdicts.append(NodeVerdict(index, k, t.name, None))
            return True
        if any(on_meta_buffer(p) for p in [t.ptr, *t.ptr.src] if p != ffi.NULL):
            self.verdicts.append(NodeVerdict(index, k, t.name, None, error=META_UNREAD))
            return True
        self._pending = (s, Node(t, sources(t)))  # before ggml computes t: what it will read
        self.verdicts.append(NodeVerdict(index, k, t.name, None))
        return True

    def _judge(self, t: Tensor) -> bool:
        if self._pending is None:  # a node with no oracle, or unread: computed, not judged
            return True
        (s, node), self._pending = self._pending, None
        verdict = self.verdicts[-1]
        assert s.from_node is not None
        try:
            expected = np.asarray(s.from_node(Node(t, node.src)))
        except Exception as e:  # noqa: BLE001 - a call the oracle does not model: no verdict, and why
            verdict.error = f"{type(e).__name__}: {e}"
            return True
        ptrs = [Tensor(p, t.ctx) for p in t.ptr.src if p != ffi.NULL]
        bound = node_bound(s, t, ptrs)
        if self.tolerance is not None:
            bound = self.tolerance(t, bound)
        max_err = 0.0 if bound == 0 else default_max_error(bound)
        actual, expected = values(t), as_stored(t, expected)
        if self.flush:
            actual, expected = flush_denormals(actual), flush_denormals(expected)
        verdict.comparison, verdict.nmse_bound = compare(actual, expected, bound, max_err), bound
        return True


@contextmanager
def observing(runner: Runner, checker: NodeChecker) -> Iterator[NodeChecker]:
    """The runner's scheduler calls `checker` for every node computed inside the block."""
    runner.sched.observe(checker)
    try:
        yield checker
    finally:
        runner.sched.observe(None)


def check_case_nodes(case: "OpCase", runner: Runner) -> list[NodeVerdict]:
    """Run an op case's graph on `runner`, checking every node as it is computed."""
    _, x, out, graph = case.build()
    if graph.n_nodes == 0:  # a graph of views only (view_tensor of a leaf): no node computes anything
        return []
    checker = NodeChecker()
    with observing(runner, checker):
        case.run_on(runner, x, out, graph)
    return checker.verdicts
