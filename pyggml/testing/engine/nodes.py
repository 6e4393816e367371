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

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from pyggml import transport, types
from pyggml._native import ffi, lib
from pyggml.node_reader import NodeReader
from pyggml.runner import Runner
from pyggml.target import Buffer
from pyggml.tensor import Tensor
from pyggml.testing.engine import opdb
from pyggml.testing.engine.opdb import Node, default_nmse
from pyggml.testing.engine.verdict import Comparison, Policy, compare, default_max_error, policy
from pyggml.types import Op

if TYPE_CHECKING:
    from pyggml.testing.engine.cases import OpCase

# nodes that compute nothing of their own: their value is their source's memory seen another way
VIEW_KINDS = {"NONE", "VIEW", "RESHAPE", "PERMUTE", "TRANSPOSE"}


@dataclass
class Source:
    """One source of a captured node, as the node received it.

    Attributes:
        slot: its place among the node's sources (src[slot]).
        name: the source's name.
        type: ggml's type name (F32, Q8_0, ...).
        ne: its extents, ggml order.
        nb: its strides in bytes, ggml order.
        shape: the NumPy shape the oracle got its values in.
        raw: the bytes it covered (uint8, `span`) just before ggml computed the node.
        given: its values where they were given (a saved reproducer's); None: decoded from `raw` when first
            asked for (`values`).
        shared: a weight's, kept across nodes and steps (`capture`'s cache): its values are read-only.
    """

    slot: int  # its place among the node's sources (src[slot])
    name: str
    type: str  # ggml's type name (F32, Q8_0, ...)
    ne: tuple[int, ...]
    nb: tuple[int, ...]
    shape: tuple[int, ...]  # the NumPy shape the oracle got its values in
    raw: np.ndarray  # the bytes it covered (uint8, `span`) just before ggml computed the node
    given: np.ndarray | None = field(default=None, repr=False)
    shared: bool = field(default=False, repr=False)  # a weight's, kept across nodes and steps: read-only values

    @property
    def values(self) -> np.ndarray:
        """The bytes decoded: what the oracle is given. Decoded when first asked for, since an oracle may need
        only part of a large source (GET_ROWS of a model's token embedding: 254 M values for 32 rows)."""
        if self.given is None:
            self.given = from_span(self.type, self.ne, self.nb, self.shape, self.raw)
            if self.shared:  # an oracle writing into it would change every later node's input: it raises instead
                self.given.setflags(write=False)
        return self.given


@dataclass
class Capture:
    """All a node needs to be computed again on its own: its op, op_params, type and layout, and each source
    as it was just before ggml computed it (pyggml.testing.engine.repro saves and reruns it).

    Attributes:
        op: ggml's op (Op name: UNARY, MUL_MAT, ...).
        kind: ggml_op_desc: the unary and GLU ops by their own names.
        op_params: ggml's 64 bytes of op parameters, as they were.
        name: the node's name.
        type: the node's type name (F32, F16, ...).
        ne: the node's extents, ggml order.
        nb: the node's strides in bytes, ggml order.
        shape: the node's NumPy shape.
        sources: each `Source` by slot; None for an empty slot (empty slots at the end left out).
        view_of: (slot, byte offset) when the node's memory lies in that source's (a node that views its
            source), else None.
        not_standalone: why it cannot be rebuilt on its own ("" when it can).
    """

    op: str  # ggml's op (Op name: UNARY, MUL_MAT, ...)
    kind: str  # ggml_op_desc: the unary and GLU ops by their own names
    op_params: bytes  # ggml's 64 bytes of op parameters, as they were
    name: str
    type: str
    ne: tuple[int, ...]
    nb: tuple[int, ...]
    shape: tuple[int, ...]
    sources: list[Source | None]  # by slot; None for an empty slot
    view_of: tuple[int, int] | None = None  # (slot, byte offset): the node's memory lies in that source's
    not_standalone: str = ""  # why it cannot be rebuilt on its own ("" when it can)


@dataclass
class NodeVerdict:
    """The checker's verdict on one node that computes something.

    Attributes:
        index: the node's place in the order ggml computed the graph.
        kind: its op kind, as ggml_op_desc names it (unary and GLU ops by their own names).
        name: the node's name.
        comparison: the comparison with the oracle (pyggml.testing.engine.verdict.Comparison: ok, nmse,
            max_error, message); None when not checked (no reader for this kind, or `error`).
        nmse_bound: the NMSE bound it was compared with.
        error: why it was not judged: the reader could not model this node (its oracle raised), or it was
            not read (`UNREADABLE`); "" otherwise.
        buffer: the buffer type its memory is in (CPU, Vulkan0, RPC0[host:port], Meta...): where it ran.
        capture: its inputs (`Capture`), when the checker was asked to keep them; else None.
        step: the step of a conversation it was computed in ("prefill", "step 2", "draft", "after rollback"; ""
            outside one).
        known: why the backend that computed it is known to disagree with the oracle on it (the op's `Known`
            rules, by `verdict.policy` as for a case of the op); "" when it is not.
        oracle: which oracle judged it: "full", "projected" (its weight's projection), or "full, after the
            projection failed it".
    """

    index: int  # the node's place in the order ggml computed the graph
    kind: str
    name: str
    comparison: Comparison | None  # None: not checked (no reader for this kind, or `error`)
    nmse_bound: float = 0.0
    error: str = ""  # the reader could not model this node (its oracle raised), or it was not read: why
    buffer: str = ""  # the buffer type its memory is in (CPU, Vulkan0, RPC0[host:port], Meta...): where it ran
    capture: Capture | None = field(default=None, repr=False)  # its inputs, when the checker was asked to keep them
    step: str = ""  # the conversation's step it was computed in
    known: str = ""  # why its backend is known to disagree with the oracle on it (the op's Known), "" if not
    oracle: str = "full"  # which oracle judged it: full, or projected (pyggml.testing.engine.projected)

    @property
    def ok(self) -> bool:
        """False only when the node was compared with its oracle and the comparison failed."""
        return self.comparison is None or self.comparison.ok

    @property
    def unread(self) -> bool:
        """Whether the node was left unread: with a source whose memory ggml cannot read back and whose values
        were not found elsewhere (`UNREADABLE`)."""
        return self.error.startswith(UNREADABLE)


def kind(t: Tensor) -> str:
    """The node's op kind as ggml names it (ggml_op_desc: unary and GLU ops by their own names).

    Args:
        t: the node.

    Returns:
        The kind: MUL_MAT, SILU, VIEW, ...
    """
    return ffi.string(lib.ggml_op_desc(t.ptr)).decode()


def node_policy(s: opdb.OpSpec, t: Tensor, srcs: list[Tensor], backend: str = "") -> Policy:
    """The policy of a node of `s` computed on `backend`: its bounds and known disagreement, by the rule a case of
    the op gets its own by (`verdict.policy`).

    Args:
        s: the op's spec in the op database.
        t: the node.
        srcs: its sources.
        backend: where it was computed ("cpu", "vulkan0", ...; "" when unknown: the rules of no backend hold).

    Returns:
        Bounds of 0 for an exact spec; else the most specific of the spec's bounds stated for the backend or the
        node's types (its own and its sources'); else the spec's plain bound; else the one its precision earns
        (`default_nmse`). Its `known`: the most specific of the spec's known disagreements that holds.
    """
    node_types = frozenset(x.type.name.lower() for x in [t, *srcs])
    # as a case of the op gets its own (cases.Case): an exact spec is exact where no backend's or type's bound is
    # stated, and the plain bound keeps its own largest error
    rules = [b for b in s.bounds if b.backend or b.types]
    if s.exact:
        return policy(rules, s.known, backend, node_types, (0.0, 0.0))
    plain = next((b for b in s.bounds if not b.backend and not b.types), None)
    if plain is not None:
        largest = plain.max_error if plain.max_error is not None else default_max_error(plain.nmse)
        return policy(rules, s.known, backend, node_types, (plain.nmse, largest))
    nmse = default_nmse(set(node_types))
    return policy(rules, s.known, backend, node_types, (nmse, default_max_error(nmse)))


def span(t: Tensor) -> np.ndarray:
    """A copy of the bytes t covers from its data on (ggml_nbytes: a strided view's whole span).

    With t's type, ne and nb, all there is to know of its values.

    Args:
        t: the tensor, in a backend buffer or in its context's own memory.

    Returns:
        The bytes, as a uint8 array.

    Raises:
        ValueError: memory ggml cannot read back (a CPU extra buffer type: `pyggml.transport.unreadable`),
            before any call.
    """
    out = np.empty(lib.ggml_nbytes(t.ptr), dtype=np.uint8)
    buf = t.ptr.buffer
    if buf == ffi.NULL:
        ffi.memmove(ffi.from_buffer(out), t.ptr.data, out.size)
    else:
        why = transport.unreadable(buf)  # as transport.before_read, the name looked up only when it raises
        if why is not None:
            raise ValueError(f"tensor {t.name or '(unnamed)'}: {why}")
        lib.ggml_backend_tensor_get(t.ptr, ffi.from_buffer(out), 0, out.size)
    return out


# the oracles a NodeChecker judges products by (`NodeChecker(oracle=...)`)
ORACLES = ("full", "projected")
# the bound a node judged by its projection records (its NMSE is an estimate: the projection's own bounds judge it)
NMSE_PROJECTED = 1e-6

# a node with a source in memory ggml cannot read back (a CPU extra buffer type such as CPU_REPACK) whose values
# the checker was not given otherwise (NodeChecker's `weights`): counted unread, with the reason after this
UNREADABLE = "a source not read back: "

# where a weight's values come from when its memory cannot be read back: its bytes in the tensor type's own
# encoding (a model file's), by the tensor's name; None when not known
Weights = Callable[[str], np.ndarray | None]


def file_weights(path: str) -> Weights:
    """The bytes of a GGUF file's tensors by name, read from the file when asked (memory-mapped).

    What llama.cpp loaded into a CPU extra buffer type (CPU_REPACK) is the file's tensor, repacked: the file
    holds it in its type's own encoding, which `from_span` decodes.

    Args:
        path: the model file.

    Returns:
        `get(name)`: the tensor's bytes, or None for a name the file does not have.
    """
    from pyggml import gguf

    opened: list[tuple[gguf.GGUFFile, np.memmap]] = []  # read when first asked (a 248k vocabulary: 0.3 s)

    def get(name: str) -> np.ndarray | None:
        if not opened:
            opened.append((gguf.read_info(path), np.memmap(path, np.uint8, "r")))
        info, data = opened[0]
        ti = info.tensor_info.get(name)
        if ti is None:
            return None
        at = info.data_offset + ti.offset
        return np.array(data[at : at + ti.nbytes])

    return get


def source_bytes(s: Tensor, weights: Weights | None) -> np.ndarray:
    """A source's bytes (`span`); for memory ggml cannot read back, its bytes from `weights`, which must be
    exactly what the tensor holds in its type's encoding (its name, its size).

    Args:
        s: the source tensor.
        weights: where the bytes of tensors in memory ggml cannot read back come from, by name; None: nowhere.

    Returns:
        The bytes, as a uint8 array.

    Raises:
        ValueError: memory ggml cannot read back and no bytes of that tensor's size from `weights`.
    """
    why = transport.unreadable(s.ptr.buffer)
    if why is None:
        return span(s)
    found = weights(s.name) if weights is not None and s.name else None
    size = lib.ggml_nbytes(s.ptr)
    if found is None or found.size != size or not lib.ggml_is_contiguous(s.ptr):
        got = "no such tensor" if found is None else f"{found.size} bytes for {size}"
        raise ValueError(f"{UNREADABLE}{s.name or '(unnamed)'}: {why} (the given weights: {got})")
    return found


def packed(type_name: str, ne: Sequence[int], nb: Sequence[int]) -> bool:
    """Whether a tensor of this type, ne and nb is contiguous (ggml_is_contiguous: a dim of extent 1 may have
    any stride).

    Args:
        type_name: ggml's type name (F32, Q8_0, ...).
        ne: the extents, ggml order.
        nb: the strides in bytes, ggml order.

    Returns:
        True when contiguous.
    """
    t = types.as_type(type_name)
    if ne[0] != types.block_size(t) and nb[0] != types.type_size(t):
        return False
    expected = types.row_size(t, ne[0])
    for n, b in zip(ne[1:], nb[1:]):
        if n != 1 and b != expected:
            return False
        expected *= n
    return True


def from_span(
    type_name: str, ne: Sequence[int], nb: Sequence[int], shape: Sequence[int], raw: np.ndarray
) -> np.ndarray:
    """The values of a tensor of this type, ne and nb whose bytes `span` read.

    As `Tensor.numpy()` gives them, and also for a strided view of a type NumPy has no dtype for (BF16,
    quantized), each row decoded from its own offset.

    Args:
        type_name: ggml's type name (F32, Q8_0, ...).
        ne: the extents, ggml order.
        nb: the strides in bytes, ggml order.
        shape: the NumPy shape of the result.
        raw: the bytes, as `span` read them.

    Returns:
        The values, shaped as `shape`.

    Raises:
        ValueError: a view of a block type whose blocks are not packed along ne0 (no row to decode).
    """
    t = types.as_type(type_name)
    ne, nb, shape = tuple(ne), tuple(nb), tuple(shape)
    if packed(type_name, ne, nb):
        return types.decode(t, raw, tuple(reversed(ne))).reshape(shape)
    if types.has_raw_dtype(t):
        full = np.ndarray(tuple(reversed(ne)), types.host_dtype(t), raw, 0, tuple(reversed(nb)))
        return full.reshape(shape).copy()
    block, size = types.block_size(t), types.type_size(t)
    if block > 1 and nb[0] != size:
        raise ValueError(f"{t.name} view whose blocks are not packed along ne0: no row to decode")
    row = types.row_size(t, ne[0])
    out = np.empty((ne[3], ne[2], ne[1], ne[0]), dtype=np.float32)
    for i3 in range(ne[3]):
        for i2 in range(ne[2]):
            for i1 in range(ne[1]):
                at = i1 * nb[1] + i2 * nb[2] + i3 * nb[3]
                if block > 1 or nb[0] == size:
                    piece = raw[at : at + row]
                else:  # elements apart from each other (a transposed view): gather them first
                    piece = np.concatenate([raw[at + i0 * nb[0] : at + i0 * nb[0] + size] for i0 in range(ne[0])])
                out[i3, i2, i1] = types.decode(t, piece, (ne[0],))
    return out.reshape(shape)


def values(t: Tensor) -> np.ndarray:
    """t's values as `Tensor.numpy()` gives them, also where numpy() refuses.

    That is a strided view of a type NumPy has no dtype for (BF16, quantized) or outside host memory: the
    view's whole span is read (ggml_nbytes of a view covers it) and each row decoded from its own offset.

    Args:
        t: the tensor.

    Returns:
        Its values, NumPy order (`t.shape`).

    Raises:
        ValueError: a view of a block type whose blocks are not packed along ne0.
    """
    return from_span(t.type.name, t.ne, t.nb, t.shape, span(t))


def backend_of(buffer: str, run_backend: str = "") -> str:
    """The backend name (as `check --backend` spells it) that computed a node whose memory is in a buffer of type
    `buffer`: CPU -> cpu, Vulkan0 -> vulkan0, CUDA0 -> cuda0, RPC0[host:port] -> rpc0, else `run_backend` (a meta
    backend's memory, context memory).

    Args:
        buffer: the buffer type's name (`NodeChecker._buffer_name`).
        run_backend: the run's backend.

    Returns:
        The name, lower case.
    """
    return Buffer.parse(buffer).device or run_backend


def is_weight(p: Any) -> bool:
    """Whether tensor p's memory is a model's weights (a buffer of usage WEIGHTS): its values never change
    between graphs, so they can be read and decoded once for every node and step that reads them.

    Args:
        p: the tensor's C pointer.

    Returns:
        True for a weight.
    """
    q = p.view_src if p.view_src != ffi.NULL else p
    buf = q.buffer
    return buf != ffi.NULL and int(lib.ggml_backend_buffer_get_usage(buf)) == int(lib.GGML_BACKEND_BUFFER_USAGE_WEIGHTS)


class SourceCache:
    """The weights a checker read once (`is_weight`), by (tensor address, data address, type, ne, nb), each with
    its values decoded once, when first asked; up to `budget` bytes (raw and values), the rest read and decoded
    for every node as before (a model larger than the budget is checked all the same).

    Args:
        budget: the most bytes kept.
    """

    def __init__(self, budget: int) -> None:
        self.budget, self.used = budget, 0
        self.sources: dict[tuple[int, int, int, tuple[int, ...], tuple[int, ...]], Source] = {}

    def get(self, key: tuple[int, int, int, tuple[int, ...], tuple[int, ...]]) -> Source | None:
        """The Source kept for a weight.

        Args:
            key: (tensor address, data address, type, ne, nb).

        Returns:
            The Source, or None when it was not kept.
        """
        return self.sources.get(key)

    def keep(self, key: tuple[int, int, int, tuple[int, ...], tuple[int, ...]], src: Source) -> bool:
        """Keep a weight's Source when it fits the budget (its bytes and float32 values).

        Args:
            key: (tensor address, data address, type, ne, nb).
            src: the Source read for it.

        Returns:
            Whether it was kept.
        """
        cost = src.raw.nbytes + 4 * int(np.prod(src.shape, dtype=np.int64))
        if self.used + cost > self.budget:
            return False
        self.used += cost
        self.sources[key] = src
        return True


# the bytes of weights a NodeChecker keeps decoded across nodes and steps: a 0.6B model at Q4_K_M takes 2.8 GB
WEIGHT_CACHE_BYTES = 8 << 30


def capture(t: Tensor, weights: Weights | None = None, cache: SourceCache | None = None) -> Capture:
    """t and its sources as they are now (just before ggml computes t).

    Args:
        t: the node.
        weights: where the bytes of a source in memory ggml cannot read back come from (`source_bytes`).
        cache: the weights read so far (`is_weight`), reused rather than read and decoded again (a conversation's
            every step reads every weight: decoding them once per run is what keeps a checked step cheap).

    Returns:
        A `Capture`: its op, op_params and layout, and each source's bytes and values (`sources` by slot),
        with why it cannot be rebuilt on its own where it cannot.
    """
    srcs: list[Source | None] = []
    for slot, p in enumerate(t.ptr.src):
        if p == ffi.NULL:
            srcs.append(None)
            continue
        key, weight = None, is_weight(p)
        if cache is not None and weight:
            # the tensor itself and where its data is: a meta device's weights may share a data address
            key = (
                int(ffi.cast("uintptr_t", p)),
                int(ffi.cast("uintptr_t", p.data)),
                int(p.type),
                tuple(p.ne),
                tuple(p.nb),
            )
            hit = cache.get(key)
            if hit is not None:
                srcs.append(hit if hit.slot == slot else replace(hit, slot=slot))
                continue
        s = Tensor(p, t.ctx)
        raw = weight_in_place(p) if weight else None
        src = Source(
            slot, s.name, s.type.name, s.ne, s.nb, s.shape, raw if raw is not None else source_bytes(s, weights)
        )
        if key is not None and cache is not None:
            src.shared = cache.keep(key, src)
        srcs.append(src)
    while srcs and srcs[-1] is None:
        srcs.pop()
    c = Capture(
        Op(t.ptr.op).name, kind(t), bytes(ffi.buffer(t.ptr.op_params)), t.name, t.type.name, t.ne, t.nb, t.shape, srcs
    )
    if any(0 in x.ne for x in [c, *srcs] if x is not None):
        c.not_standalone = "an empty tensor (a 0 in ne): nothing to compute, and pyggml makes no empty tensors"
    elif (
        t.ptr.view_src != ffi.NULL
    ):  # the node writes into memory it shares: one of its sources', or it cannot be rebuilt
        c.view_of = _inside_a_source(t)
        if c.view_of is None:
            c.not_standalone = (
                "the node is a view of a tensor that is not one of its sources: its memory cannot be rebuilt"
            )
    return c


def weight_in_place(p: Any) -> np.ndarray | None:
    """A weight's bytes where they lie in host memory, not copied (read-only), or None where they cannot be read
    so (another device's memory, an extra buffer type's layout). A weight does not change while its model lives:
    copying a 0.8B model's 500 MB of weights into fresh memory took 1.1 s of a 6 s check. `keep`'s captures
    copy them (`owned`), since a reproducer is saved after the model is gone.

    Args:
        p: the weight's C pointer (`is_weight`).

    Returns:
        The bytes (uint8), or None.
    """
    buf = p.buffer
    if buf == ffi.NULL or p.data == ffi.NULL or not lib.ggml_backend_buffer_is_host(buf):
        return None
    if transport.unreadable(buf) is not None:
        return None
    raw = np.frombuffer(ffi.buffer(p.data, lib.ggml_nbytes(p)), dtype=np.uint8)
    raw.setflags(write=False)
    return raw


def owned(c: Capture) -> Capture:
    """The capture with every source's bytes its own (`weight_in_place`'s views copied), to outlive the model.

    Args:
        c: a node's capture.

    Returns:
        The capture, its sources' bytes copied where they were views (their values decoded again when asked).
    """
    # values decoded from the bytes in place are a view of them (F32): decoded again from the copy when asked
    sources = [
        replace(s, raw=np.array(s.raw), given=None) if s is not None and not s.raw.flags.owndata else s
        for s in c.sources
    ]
    return replace(c, sources=sources)


def _inside_a_source(t: Tensor) -> tuple[int, int] | None:
    """(slot, byte offset) of the source whose memory holds all of t's, or None."""
    at = int(ffi.cast("uintptr_t", t.ptr.data))
    for slot, p in enumerate(t.ptr.src):
        if p == ffi.NULL or p.buffer != t.ptr.buffer:
            continue
        start = int(ffi.cast("uintptr_t", p.data))
        if start <= at and at + lib.ggml_nbytes(t.ptr) <= start + lib.ggml_nbytes(p):
            return slot, at - start
    return None


def as_stored(t: Tensor, expected: np.ndarray) -> np.ndarray:
    """The oracle's values as a node of t's type holds them.

    Args:
        t: the node.
        expected: the oracle's values.

    Returns:
        For F16 and BF16 nodes, floating-point values rounded (and overflowed to inf) the way the node
        stores its result; anything else as it is.
    """
    name = t.type.name
    if name not in ("F16", "BF16") or expected.dtype.kind != "f" or (name == "F16" and expected.dtype == np.float16):
        return expected
    with np.errstate(over="ignore", invalid="ignore"):
        if name == "F16":  # NumPy's conversion rounds to nearest even as ggml's does, at a fraction of the cost
            return expected.astype(np.float32).astype(np.float16)
        return types.decode(name, types.encode(name, expected.astype(np.float32)), expected.shape)


def flush_denormals(a: np.ndarray) -> np.ndarray:
    """Values below F32's smallest normal as zero.

    ggml's kernels may flush them (FTZ/DAZ), so a result of denormals alone (an attn_factor of 1e-45) is no
    disagreement.

    Args:
        a: the values.

    Returns:
        A floating-point array with its denormals zeroed; any other array as it is.
    """
    a = np.asarray(a)
    if a.dtype.kind != "f":
        return a
    return np.where(np.abs(a) < np.finfo(np.float32).tiny, 0, a)


class NodeChecker(NodeReader):
    """A scheduler observer (`Scheduler.observe`) that checks each node as ggml computes it.

    The verdicts gather in `verdicts`, one `NodeVerdict` per node that computes something. Views
    (VIEW_KINDS) compute nothing and are not asked for.

    Args:
        tolerance: `tolerance(node, bound)`, when given, returns the NMSE bound to apply instead of the
            spec's (the fuzzer widens it for random shapes and values; `check --model --node-nmse`
            tightens it).
        flush: compare denormals as zero (`flush_denormals`).
        keep: `keep(verdict)`, when given, is asked once a node is judged, and a True keeps the node's
            inputs on the verdict (`verdict.capture`, for pyggml.testing.engine.repro).
        weights: the bytes of weights by name (`file_weights(model path)`), for sources in memory ggml cannot
            read back (llama.cpp's CPU_REPACK weights); without them such a node is unread (`UNREADABLE`).
        weight_cache_bytes: the most bytes of weights kept read and decoded across nodes and steps
            (`SourceCache`).
        backend: the backend the run computes on ("vulkan0", "meta:cpu,cpu"): a node's bound is its op's on the
            backend that computed it (`node_policy`): the CPU for a node in CPU memory, else this one.
        oracle: "full" (each node against its oracle's values), or "projected": a CPU product of a 2-D weight
            judged by its weight's projection (pyggml.testing.engine.projected), a node it fails rechecked in full.
        projections: where "projected" keeps its weights' projections (None: a `ProjectionCache` of the default
            folder and limit).

    Attributes:
        verdicts: the `NodeVerdict`s, in compute order.
    """

    def __init__(
        self,
        tolerance: Callable[[Tensor, float], float] | None = None,
        flush: bool = False,
        keep: Callable[[NodeVerdict], bool] | None = None,
        weights: Weights | None = None,
        weight_cache_bytes: int = WEIGHT_CACHE_BYTES,
        backend: str = "",
        oracle: str = "full",
        projections: Any = None,
    ) -> None:
        super().__init__()
        if oracle not in ORACLES:
            raise ValueError(f"oracle {oracle!r}: one of {', '.join(ORACLES)}")
        self.backend, self.oracle = backend, oracle
        if oracle == "projected" and projections is None:
            from pyggml.testing.engine.projected import ProjectionCache

            projections = ProjectionCache()
        self.projections = projections
        opdb.load()
        self.tolerance, self.flush_denormals, self.keep, self.weights = tolerance, flush, keep, weights
        self.verdicts: list[NodeVerdict] = []
        self._weights = SourceCache(weight_cache_bytes)  # the weights read and decoded once per checker
        self._index = 0
        self._pending: tuple[opdb.OpSpec, Capture] | None = None
        # what a model's every step asks again, by the same few keys: buffer type names by the type's address,
        # policies by (spec, the node's and its sources' types, backend); 20 ms of a 0.3 s checked step
        self._buft_names: dict[int, str] = {}
        self._policies: dict[tuple[int, tuple[int, ...], str], Policy] = {}

    def on_done(self, t: Tensor) -> bool:
        """Judge the node against its oracle, from the sources `on_ask` captured.

        Args:
            t: the node, computed.

        Returns:
            True: the compute goes on.
        """
        return self._judge(t)

    def on_ask(self, t: Tensor) -> bool:
        """Capture the node's sources as it reads them, for its verdict.

        Args:
            t: the node.

        Returns:
            True for a node that computes something (views compute nothing).
        """
        index, self._index = self._index, self._index + 1
        k = kind(t)
        if k in VIEW_KINDS:
            return False
        # Every node that computes something is asked for, read or not: ggml computes a node nobody asked
        # for together with the next one asked for, after that one's sources were read here
        s = opdb.READERS.get(k)
        where = self._buffer_name(t.ptr)
        if s is None:
            self.verdicts.append(NodeVerdict(index, k, t.name, None, buffer=where))
            return True
        try:
            self._pending = (s, capture(t, self.weights, self._weights))  # before ggml computes t: what it will read
        except ValueError as e:
            if not str(e).startswith(UNREADABLE):
                raise
            self.verdicts.append(NodeVerdict(index, k, t.name, None, error=str(e), buffer=where))
            return True  # asked for all the same, so the next node's sources are read after this one ran
        self.verdicts.append(NodeVerdict(index, k, t.name, None, buffer=where))
        return True

    def _judge(self, t: Tensor) -> bool:
        if self._pending is None:  # a node with no oracle, or unread: computed, not judged
            return True
        (s, captured), self._pending = self._pending, None
        verdict = self.verdicts[-1]
        assert s.from_node is not None
        projected = self._projected(t, captured) if self.oracle == "projected" else None
        if projected is not None and projected.ok:
            verdict.comparison, verdict.nmse_bound = projected, NMSE_PROJECTED
            verdict.oracle = "projected"
            return True
        try:
            sources = captured.sources
            result = s.from_node(
                Node(t, [_values_for(captured.kind, x) for x in sources], [x.raw if x else None for x in sources])
            )
        except Exception as e:  # noqa: BLE001 - a call the oracle does not model: no verdict, and why
            verdict.error = f"{type(e).__name__}: {e}"
            return True
        rules = self._policy(s, t, backend_of(verdict.buffer, self.backend))
        verdict.known = rules.known or ""
        elements = None
        # the rule's bounds, as a case of the op gets them; an oracle that modelled this backend's rounding states a
        # tighter NMSE (its largest error follows from it), and --node-nmse replaces the NMSE likewise
        expected, bound, max_err = result, rules.nmse, rules.max_error
        if isinstance(result, opdb.Modeled):
            expected, elements = result.values, result.elements
            if result.nmse is not None:
                bound, max_err = result.nmse, default_max_error(result.nmse)
        expected = np.asarray(expected)
        if self.tolerance is not None:
            bound = self.tolerance(t, bound)
            max_err = default_max_error(bound)
        if bound == 0:
            max_err = 0.0
        actual, expected = values(t), as_stored(t, expected)
        if self.flush_denormals:
            actual, expected = flush_denormals(actual), flush_denormals(expected)
        verdict.comparison, verdict.nmse_bound = compare(actual, expected, bound, max_err, elements), bound
        if not verdict.comparison.ok and not verdict.known:  # a finding covers a node as it covers a case of its op
            from pyggml.testing.engine.findings import covering_node

            types = [Tensor(q, t.ctx).type.name for q in t.ptr.src if q != ffi.NULL]
            verdict.known = covering_node(s.op, types, backend_of(verdict.buffer, self.backend))
        if projected is not None:  # the projection failed it: rechecked in full, both said
            verdict.oracle = "full, after the projection failed it"
            c = verdict.comparison
            c.message = "; ".join(x for x in (c.message, f"projected: {projected.message}") if x)
        if self.keep is not None and self.keep(verdict):
            verdict.capture = owned(captured)
        return True

    def _projected(self, t: Tensor, captured: Capture) -> Comparison | None:
        """The projected oracle's comparison of a product node it applies to (a MUL_MAT the CPU computed, a packed
        2-D weight (`is_weight`: a KV cache's values change, and are not projected once) whose bytes were read,
        F32 activations of one matrix, a dot type other than Q8_1, whose block sums it does not model); None for
        any other node."""
        from pyggml.testing.engine import projected as _p
        from pyggml.testing.engine.opdb.matmul import dot_type_name, rounded_as_dot_type

        p = t.ptr
        if captured.op != "MUL_MAT" or len(captured.sources) < 2:
            return None
        w, x = captured.sources[0], captured.sources[1]
        if w is None or x is None or x.type != "F32" or p.ne[2] * p.ne[3] != 1 or len(w.ne) < 2:
            return None
        if not is_weight(p.src[0]):
            return None
        if any(n != 1 for n in w.ne[2:]) or not packed(w.type, w.ne, w.nb) or not packed(x.type, x.ne, x.nb):
            return None
        dot = dot_type_name(w.type)
        if dot == "Q8_1" or not opdb.Node(t, []).computed_by_cpu():
            return None
        n_out, n_in = int(w.ne[1]), int(w.ne[0])
        place = (int(ffi.cast("uintptr_t", p.src[0].data)), w.name)  # the weight tensor, loaded once
        projected = self.projections.get(w.type, w.raw, n_out, n_in, _p.seed(), _p.BUCKET_ROWS, _p.SETS, place)
        x_dot = rounded_as_dot_type(x.values.reshape(-1, n_in), dot)
        kernel = "extra" if transport.unreadable(p.src[0].buffer) else "plain"  # a repacked weight: its own kernels
        y = values(t).reshape(-1, n_out)
        return _p.judge(y, x_dot, projected, _p.seed(), _p.BUCKET_ROWS, _p.SETS, kernel)

    def _buffer_name(self, p: Any) -> str:
        """The name of the buffer type tensor p's memory is in (CPU, Vulkan0, RPC0[host:port], Meta...; "" for
        context memory), each buffer type's name read once (a buffer type lives as long as its device)."""
        buf = p.buffer
        if buf == ffi.NULL:
            return ""
        buft = lib.ggml_backend_buffer_get_type(buf)
        key = int(ffi.cast("uintptr_t", buft))
        name = self._buft_names.get(key)
        if name is None:
            name = self._buft_names[key] = ffi.string(lib.ggml_backend_buft_name(buft)).decode()
        return name

    def _policy(self, s: opdb.OpSpec, t: Tensor, backend: str) -> Policy:
        """`node_policy` of node t computed on `backend`, each found once per spec, types and backend."""
        srcs = [p for p in t.ptr.src if p != ffi.NULL]
        key = (id(s), (int(t.ptr.type), *(int(p.type) for p in srcs)), backend)
        rules = self._policies.get(key)
        if rules is None:
            rules = self._policies[key] = node_policy(s, t, [Tensor(p, t.ctx) for p in srcs], backend)
        return rules


# (op kind, source slot): the sources whose values the node's reader asks for itself (Node.arg), which may
# need only a part of them (pyggml.testing.engine.opdb.movement's GET_ROWS decodes only the rows it takes, and
# opdb.attention's FLASH_ATTN_EXT the kv columns its mask lets a query see) or
# read them a part at a time (opdb.matmul: a product's weight, a block of rows at a time)
DECODED_WHEN_ASKED = {("GET_ROWS", 0), ("MUL_MAT", 0), ("FLASH_ATTN_EXT", 1), ("FLASH_ATTN_EXT", 2)}
# of those, the ones given decoded whole when the weight is kept for later steps (`SourceCache`): decoded once,
# not a part at a time at every step
WHOLE_WHEN_KEPT = {("MUL_MAT", 0)}


def _values_for(kind: str, x: Source | None) -> np.ndarray | Callable[[], np.ndarray] | None:
    """What a Node holds for source x: its values, or, for DECODED_WHEN_ASKED, a call that decodes them."""
    if x is None:
        return None
    key = (kind, x.slot)
    if key in DECODED_WHEN_ASKED and not (x.shared and key in WHOLE_WHEN_KEPT):
        return lambda: x.values
    return x.values


@contextmanager
def observing(runner: Runner, checker: NodeChecker) -> Iterator[NodeChecker]:
    """The runner's scheduler calls `checker` for every node computed inside the block.

    Afterwards the scheduler observes nothing (an observer set before is not restored).

    Args:
        runner: the Runner whose scheduler computes the graph.
        checker: the NodeChecker.

    Yields:
        The checker.
    """
    runner.sched.observe(checker)
    try:
        yield checker
    finally:
        runner.sched.observe(None)


def check_case_nodes(case: "OpCase", runner: Runner) -> list[NodeVerdict]:
    """Run an op case's graph on `runner`, checking every node as it is computed.

    Args:
        case: an op case of the suite (pyggml.testing.engine.cases.OpCase).
        runner: the Runner to compute it on.

    Returns:
        The `NodeVerdict`s of its nodes, in compute order; none for a graph of views only.
    """
    _, x, out, graph = case.build()
    if graph.n_nodes == 0:  # a graph of views only (view_tensor of a leaf): no node computes anything
        return []
    checker = NodeChecker()
    with observing(runner, checker):
        case.run_on(runner, x, out, graph)
    return checker.verdicts
