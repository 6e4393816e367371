"""One run of a llama.cpp model held against another, node by node and at the logits.

A `Recorder` is an observer for `llama.Context(observe=...)`: it copies every node llama.cpp computes, as it is
computed (so the graph allocator reusing the memory later does not matter), keyed by (step, name, occurrence):
the conversation's step (`pyggml.conversation`), the node's name in llama.cpp's graph (`attn_norm-3`), and
how many nodes of that name came before it in the step (a batch computed in several ubatches repeats them).
Given another run's recording (`against=`), it compares each node with the same key as it is computed and
keeps only the figures, so a comparison holds one run's values at a time.

The figures, per node: NMSE (sum of squared differences over the reference's sum of squares), the largest
absolute difference, the cosine of the two; `jump`, its NMSE over the worst NMSE of the nodes it read, and
`added`, its NMSE less theirs (the error the node itself brought). Per layer (a node's layer is its name's `-N`
suffix): the error of its output (`l_out-N`, else its last node) and its growth over the layer before.
`first_difference`: the first node that differs while the nodes it read agreed exactly (where a difference
enters); `first_divergent`: the first node whose NMSE crosses the bound while the nodes it read were within it
(where the error jumps beyond the bound: the node to look at). At the logits, as llama.cpp's
`llama-perplexity --kl-divergence` reports them: KL divergence of B's distribution from
A's per output (mean, median, 99th percentile, max), the outputs whose top-1 token is the same, and the RMS of
the difference in probability of the token that came next.
"""

from __future__ import annotations

import math
import re
import weakref
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from pyggml import transport, types
from pyggml._native import ffi, lib
from pyggml.node_reader import KEPT, NodeReader
from pyggml.tensor import Tensor

__all__ = ["Recorder", "NodeDiff", "Comparison", "logit_stats", "compare_values", "BOUND"]

# the NMSE above which a node counts as departed: a tenth of the F32 logits bound of llama.cpp's
# test-llama-archs (1e-4), well above what reordering an F32 sum does (1e-12 .. 1e-10)
BOUND = 1e-5
# nodes that compute nothing: their value is their source's memory seen another way
VIEW_KINDS = {"NONE", "VIEW", "RESHAPE", "PERMUTE", "TRANSPOSE"}

Key = tuple[str, str, int]  # (step, node name, occurrence of that name in the step)


def layer_of(name: str) -> int | None:
    """The layer a llama.cpp node belongs to: the number after its name's last '-' (`attn_norm-3`: 3)."""
    m = re.search(r"-(\d+)(?: \(\w+\))?$", name)
    return int(m.group(1)) if m else None


def base_name(name: str) -> str:
    """The node's name without its layer (`attn_norm-3`: `attn_norm`): the kind of node in llama.cpp's graph."""
    return re.sub(r"-\d+((?: \(\w+\))?)$", r"\1", name)


def compare_values(a: np.ndarray, b: np.ndarray) -> tuple[float, float, float]:
    """NMSE of b against a, the largest |b - a|, and the cosine of the two.

    Every node of every step goes through here: the sums are taken in one pass, in float64, by C
    (`pyggml_compare_f32`, native/node_copies.c). The cosine is computed
    from the difference (1 - (|b - a|^2 - (|a| - |b|)^2) / (2 |a| |b|)), not from a · b, so two runs a few ulps
    apart read a cosine of 1 - 1e-12, not a rounding of 1.
    A non-finite value in one but not at the same place with the same value in the other makes the NMSE and the
    largest difference infinite. Two all-zero arrays: 0, 0, 1.

    Args:
        a: the reference's values.
        b: the other run's, the same number of values.

    Returns:
        (nmse, max_abs, cosine).
    """
    a32 = np.ascontiguousarray(a, dtype=np.float32).ravel()
    b32 = np.ascontiguousarray(b, dtype=np.float32).ravel()
    if a32.size == 0:
        return 0.0, 0.0, 1.0
    sums = _sums(a32, b32)
    if sums is None:  # a value that is not finite
        fa, fb = np.isfinite(a32), np.isfinite(b32)
        if not np.array_equal(fa, fb) or not np.array_equal(a32[~fa], b32[~fb]):
            return math.inf, math.inf, math.nan
        a32, b32 = np.ascontiguousarray(a32[fa]), np.ascontiguousarray(b32[fb])
        if a32.size == 0:
            return 0.0, 0.0, 1.0
        sums = _sums(a32, b32)
        assert sums is not None
    return figures(*sums)


def figures(ref: float, err: float, nb2: float, worst: float) -> tuple[float, float, float]:
    """`compare_values`' (nmse, max_abs, cosine) from its sums: sum a^2, sum (b - a)^2, sum b^2, max |b - a|."""
    ref, err, nb2, worst = float(ref), float(err), float(nb2), float(worst)
    nmse = err / ref if ref > 0 else (0.0 if err == 0 else math.inf)
    if ref > 0 and nb2 > 0:
        na, nb = math.sqrt(ref), math.sqrt(nb2)
        cos = 1.0 - (err - (na - nb) ** 2) / (2 * na * nb)
    else:
        cos = 1.0 if ref == nb2 else 0.0
    return nmse, worst, max(-1.0, min(cos, 1.0))


def _sums(a: np.ndarray, b: np.ndarray) -> tuple[float, float, float, float] | None:
    """(sum a^2, sum (b - a)^2, sum b^2, max |b - a|) of two contiguous float32 vectors, or None when a value is
    not finite."""
    out = ffi.new("double[5]")
    if not lib.pyggml_compare_f32(ffi.from_buffer("float[]", a), ffi.from_buffer("float[]", b), a.size, out):
        return None
    return out[0], out[1], out[2], out[3]


@dataclass
class NodeDiff:
    """One node of run B against the node of run A with the same key.

    Attributes:
        step: the conversation's step ("prefill", "step 1", ...).
        name: the node's name in llama.cpp's graph.
        occurrence: nodes of that name before it in the step.
        index: its place in B's compute order.
        op: its op kind (ggml_op_desc).
        layer: its layer, or None.
        shape: its NumPy shape.
        nmse: B's values against A's.
        max_abs: the largest absolute difference.
        cosine: the cosine of the two.
        jump: nmse over the worst nmse of the nodes it read (inf when they agreed exactly).
        inputs_nmse: the worst nmse of the nodes it read (0 when none was compared).
        inputs: the names of the compared nodes it read.
        error: why it could not be compared ("" when it was).
    """

    step: str
    name: str
    occurrence: int
    index: int
    op: str
    layer: int | None
    shape: tuple[int, ...]
    nmse: float = math.nan
    max_abs: float = math.nan
    cosine: float = math.nan
    jump: float = math.nan
    inputs_nmse: float = 0.0
    inputs: list[str] = field(default_factory=list)
    error: str = ""

    @property
    def added(self) -> float:
        """The error the node added to what it read: its NMSE less its inputs' worst (0 when it reduced it)."""
        return max(0.0, self.nmse - self.inputs_nmse) if not math.isnan(self.nmse) else math.nan

    @property
    def key(self) -> Key:
        """The node's key in both runs: (step, name, occurrence of that name in the step)."""
        return (self.step, self.name, self.occurrence)


@dataclass
class _Recorded:
    op: str
    shape: tuple[int, ...]
    values: np.ndarray | None  # None: not readable (error)
    error: str = ""


class Recorder(NodeReader):
    """An observer for `llama.Context(observe=...)` that keeps every node's value as it is computed, or compares
    it with another run's at once.

    Args:
        against: another Recorder's `recorded` (the reference run, A), or that Recorder itself (a run conversing
            in turns with this one, `pyggml.llama.record_pair`): compare each node with it and keep the figures
            (`diffs`) rather than the values.
        keep: `keep(name)`: the nodes to record (None: all).
        then: another observer to call as well (a NodeChecker): asked first, its answer does not matter.
        native: copy the nodes in C (native/node_copies.c: the log is read once per decode, `after_decode`), not
            node by node in Python; None: where it can (no `keep`, no `then`). A
            backend behind RPC is read in Python (its transport hooks check every read).

    Attributes:
        step: the current step's label (set it with `set_step`, the conversation's `on_step`).
        recorded: key -> what was recorded (values, op, shape), when recording (a held run copied in C keeps
            `entries` instead: key -> its entry in the C log, for the step).
        diffs: the NodeDiffs, in compute order, when comparing.
        only_here: the keys of nodes this run computed and the reference did not.
    """

    def __init__(
        self,
        against: dict[Key, Any] | Recorder | None = None,
        keep: Callable[[str], bool] | None = None,
        then: Callable[[Tensor, bool], bool] | None = None,
        native: bool | None = None,
    ) -> None:
        super().__init__()
        self._ref = against if isinstance(against, Recorder) else None
        self.against = against.recorded if isinstance(against, Recorder) else against
        self.keep, self.then = keep, then
        can = keep is None and then is None
        if native and not can:
            raise ValueError("Recorder: native copies take no keep or then")
        self.native = can if native is None else native
        self._log: Any = None
        if self.native:
            self._log = ffi.new("struct pyggml_node_copies *")
            self._log.kept_flag = KEPT
            self._log.op_set_rows, self._log.op_gated_delta_net = _SET_ROWS, _GATED_DELTA_NET
            weakref.finalize(self, lib.pyggml_node_copies_free, self._log)
        # an observer of its own, not a NodeReader, must see each node as ggml asks
        self.reads_later = then is None or isinstance(then, NodeReader)
        self.step = ""
        self.recorded: dict[Key, _Recorded] = {}
        self.diffs: list[NodeDiff] = []
        self.only_here: list[Key] = []
        self._seen: Counter[str] = Counter()
        self._where: dict[int, tuple[Key, float]] = {}  # node address -> (its key, its nmse) in this step
        self._index = 0
        self._pending: tuple[Key, str, list[tuple[str, float]]] | None = None
        # conversing in turns (pyggml.llama.record_pair): this reference run's values stay where they were
        # computed, read by the other run before this one decodes again, and are let go at the next step
        self.held = False
        self.entries: dict[Key, int] = {}
        self.unmatched: list[Key] = []  # held: the keys of nodes the other run did not compute

    def leave_in_place(self, on: bool) -> None:
        """Let the C copier log the next decodes' kept nodes where they lie in host memory instead of copying
        them (native/node_copies.h, in_place): only for a decode computed in one ubatch (one sequence, the batch
        within n_ubatch), whose values are read before the next decode.

        Args:
            on: leave them in place (True) or copy every node (False).
        """
        if self._log is not None:
            self._log.in_place = 1 if on else 0

    def let_go(self) -> None:
        """Drop a held run's values of the last step: the memory they lie in is about to be written again."""
        self.recorded.clear()
        self.entries.clear()
        if self._log is not None:
            lib.pyggml_node_copies_clear(self._log)

    def keys(self) -> list[Key]:
        """The keys of the nodes recorded.

        Returns:
            (step, name, occurrence) of each node recorded; a held run's: of its last step only.
        """
        return [*self.recorded, *self.entries]

    def _entry(self, i: int) -> _Recorded:
        """What entry i of this held run's C log holds, read where it lies."""
        c = self._log.nodes[i]
        values, shape, error = copied_values(c, self._entry_bytes(c))
        return _Recorded(ffi.string(c.kind).decode(), shape, values, error)

    def _entry_bytes(self, c: Any) -> np.ndarray:
        """The bytes of an entry of this recorder's C log: the node's own memory where left in place."""
        if c.at != ffi.NULL:  # left in place: read before the memory is written again
            return np.frombuffer(ffi.buffer(ffi.cast("char *", c.at), c.nbytes), dtype=np.uint8)
        if not c.nbytes:
            return np.empty(0, np.uint8)
        return np.frombuffer(ffi.buffer(self._log.data + c.offset, c.nbytes), dtype=np.uint8)

    def _reference(self, key: Key) -> _Recorded | None:
        """The reference's node of this key, or None."""
        ref = self._ref
        if ref is not None and ref.entries:
            i = ref.entries.get(key)
            return ref._entry(i) if i is not None else None
        return self.against.get(key) if self.against is not None else None

    @property
    def eval_callback(self) -> tuple[Any, Any] | None:
        """(C callback, user data) for llama.cpp's cb_eval when the nodes are copied in C, else None."""
        return (lib.pyggml_copy_nodes, self._log) if self._log is not None else None

    def after_decode(self) -> None:
        """Take in the nodes the C copier logged during a decode (called by `pyggml.llama.Context.decode`).

        Raises:
            MemoryError: the copies did not fit in memory (what was logged is dropped).
        """
        log = self._log
        if log is None:
            return
        try:
            if log.out_of_memory:
                raise MemoryError(f"Recorder: {log.n_data} bytes of node copies and no memory for the next")
            if self.held and self.against is None:  # the other run reads them where they are, this step
                for i in range(log.n_nodes):
                    name = ffi.string(log.nodes[i].name).decode()
                    self.entries[(self.step, name, self._seen[name])] = i
                    self._seen[name] += 1
                return
            ref = self._ref
            if ref is not None and ref._log is not None and ref.held:
                self._compare_logs(ref)
                return
            data = None
            if log.n_data and self.against is None:
                # the values are kept: the bytes become a NumPy array's, not copied (a prefill: 100 MB and more)
                size = log.n_data
                taken = ffi.gc(lib.pyggml_node_copies_take(log), lib.pyggml_node_copies_release)
                data = np.frombuffer(ffi.buffer(taken, size), dtype=np.uint8)
            for i in range(log.n_nodes):
                c = log.nodes[i]
                srcs = [(c.src[j], c.src_of_view[j]) for j in range(len(c.src))]
                pending = self._begin(ffi.string(c.name).decode(), ffi.string(c.kind).decode(), srcs)
                if pending is not None:
                    if c.at == ffi.NULL and data is not None:
                        raw = data[c.offset : c.offset + c.nbytes]
                    else:
                        raw = self._entry_bytes(c)
                    values, shape, error = copied_values(c, raw)
                    self._finish(pending, int(ffi.cast("uintptr_t", c.node)), shape, values, error)
        finally:
            if not self.held:  # a held run's values are read by the other run, then let go (`let_go`)
                lib.pyggml_node_copies_clear(log)

    def _compare_logs(self, ref: Recorder) -> None:
        """Compare this decode's logged nodes with a held run's of the same step, the float32 ones in one C pass
        (`pyggml_compare_logged`), the others as `_finish` does."""
        log = self._log
        pending, ia, ib = [], [], []
        for i in range(log.n_nodes):  # a native recorder keeps every node (no `keep`)
            key = self._next_key(ffi.string(log.nodes[i].name).decode())
            j = ref.entries.get(key)
            if j is not None:
                ia.append(j)
                ib.append(i)
            pending.append((i, key, j, self._index - 1))
        n = len(ia)
        sums = np.zeros((n, 5))
        status = np.zeros(n, np.int32)
        if n:
            a_idx, b_idx = np.array(ia, np.int64), np.array(ib, np.int64)
            lib.pyggml_compare_logged(
                ref._log, log, ffi.from_buffer("int64_t[]", a_idx), ffi.from_buffer("int64_t[]", b_idx), n,
                ffi.from_buffer("double[]", sums), ffi.from_buffer("int32_t[]", status),
            )  # fmt: skip
        k = 0
        for i, key, j, index in pending:  # in order: a node's inputs are the nodes before it
            c = log.nodes[i]
            address = int(ffi.cast("uintptr_t", c.node))
            if j is None:
                self.only_here.append(key)
                continue
            op = ffi.string(c.kind).decode()
            inputs = self._inputs([(c.src[s], c.src_of_view[s]) for s in range(len(c.src))])
            shape = (int(c.ne[1]), int(c.ne[0])) if c.rows_only else extents_shape(c.ne)
            if status[k] == 1:
                self._diff(key, op, inputs, index, address, shape, figures(*sums[k][:4]), "")
            else:  # not float32 of one dense layout in both, or not finite: read as `_finish` does
                values, shape, error = copied_values(c, self._entry_bytes(c))
                self._finish((key, op, inputs), address, shape, values, error, index)
            k += 1

    def set_step(self, label: str) -> None:
        """Name the step the nodes computed from now on belong to (a held run lets the last step's values go).

        Args:
            label: the step's label ("prefill", "step 1", ...).
        """
        if self.held:
            self.let_go()
        self.step = label
        self._seen.clear()
        self._where.clear()

    def on_ask(self, t: Tensor) -> bool:
        """Note the node's key and inputs (`then` asked too), to record it or compare it once computed.

        Args:
            t: the node.

        Returns:
            True for a node that computes something (views compute nothing).
        """
        answer = False
        if isinstance(self.then, NodeReader):
            answer = self.then.on_ask(t)
        elif self.then is not None:
            answer = self.then(t, True)
        return self._ask(t) or answer

    def on_done(self, t: Tensor) -> bool:
        """Record the computed node, or its figures against the reference's (`then` told too).

        Args:
            t: the node.

        Returns:
            True: the compute goes on.
        """
        if isinstance(self.then, NodeReader):
            self.then.on_done(t)
        elif self.then is not None:
            self.then(t, False)
        self._done(t)
        return True

    def _ask(self, t: Tensor) -> bool:
        op = ffi.string(lib.ggml_op_desc(t.ptr)).decode()
        if op in VIEW_KINDS:
            return False
        srcs = [(p, p.view_src if p != ffi.NULL else ffi.NULL) for p in t.ptr.src]
        self._pending = self._begin(t.name, op, srcs)
        return True  # asked for even when not kept: computed on its own, so that the next node's value is its own

    def _begin(
        self, name: str, op: str, srcs: list[tuple[Any, Any]]
    ) -> tuple[Key, str, list[tuple[str, float]]] | None:
        """The key, op and recorded inputs of the next node (None when `keep` leaves it out); srcs: each source's
        address and, for a view, the address of the tensor it views (ggml's view chains are one deep)."""
        key = self._next_key(name)
        if self.keep is not None and not self.keep(name):
            return None
        return key, op, self._inputs(srcs)

    def _next_key(self, name: str) -> Key:
        """The key of the next node, of this name."""
        key = (self.step, name, self._seen[name])
        self._seen[name] += 1
        self._index += 1
        return key

    def _inputs(self, srcs: list[tuple[Any, Any]]) -> list[tuple[str, float]]:
        """The names and NMSEs of the nodes recorded so far that a node reads (srcs: as `_begin`'s)."""
        inputs = []
        for pair in srcs:
            for p in pair:
                found = self._where.get(int(ffi.cast("uintptr_t", p))) if p != ffi.NULL else None
                if found is not None:
                    inputs.append((found[0][1], found[1]))
                    break
        return inputs

    def _done(self, t: Tensor) -> None:
        if self._pending is None:
            return
        pending, self._pending = self._pending, None
        try:
            values: np.ndarray | None = node_values(t)
            error = ""
        except (ValueError, TypeError) as e:
            values, error = None, f"not read back: {e}"
        shape = values.shape if values is not None else tuple(t.shape)
        self._finish(pending, int(ffi.cast("uintptr_t", t.ptr)), shape, values, error)

    def _finish(
        self,
        pending: tuple[Key, str, list[tuple[str, float]]],
        address: int,
        shape: tuple[int, ...],
        values: np.ndarray | None,
        error: str,
        index: int | None = None,
    ) -> None:
        """Keep a node's values, or its figures against the reference's (index: its place in the run, if not the
        last node begun)."""
        key, op, inputs = pending
        index = self._index - 1 if index is None else index
        if self.against is None and self._ref is None:
            self.recorded[key] = _Recorded(op, shape, values, error)
            self._where[address] = (key, 0.0)
            return
        ref = self._reference(key)
        if ref is None:
            self.only_here.append(key)
            return
        if error or ref.error:
            self._diff(key, op, inputs, index, address, shape, None, error or f"the reference's {ref.error}")
        elif ref.values is None or ref.values.shape != shape:
            why = f"shape {shape} against the reference's {None if ref.values is None else ref.values.shape}"
            self._diff(key, op, inputs, index, address, shape, None, why)
        else:
            got = compare_values(ref.values, values)  # type: ignore[arg-type]
            self._diff(key, op, inputs, index, address, shape, got, "")

    def _diff(
        self,
        key: Key,
        op: str,
        inputs: list[tuple[str, float]],
        index: int,
        address: int,
        shape: tuple[int, ...],
        got: tuple[float, float, float] | None,
        error: str,
    ) -> None:
        """Keep a node's NodeDiff: its figures (nmse, max_abs, cosine), or the error that left it without."""
        d = NodeDiff(key[0], key[1], key[2], index, op, layer_of(key[1]), shape)
        d.inputs = [n for n, _ in inputs]
        if got is None:
            d.error = error
        else:
            d.nmse, d.max_abs, d.cosine = got
            worst = max((e for _, e in inputs if not math.isnan(e)), default=0.0)
            d.inputs_nmse = worst
            d.jump = d.nmse / worst if worst > 0 else (math.inf if d.nmse > 0 else 1.0)
        self.diffs.append(d)
        self._where[address] = (key, d.nmse)


def extents_shape(ne: Any) -> tuple[int, ...]:
    """The NumPy shape a Recorder gives a node of ggml extents ne: reversed, trailing 1s dropped (at least one dim),
    whichever way the node was read (`node_values`, `Recorder.after_decode`), so that two runs' nodes match."""
    n = 4
    while n > 1 and ne[n - 1] == 1:
        n -= 1
    return tuple(int(ne[i]) for i in reversed(range(n)))


_F32 = int(lib.GGML_TYPE_F32)
# ops a Recorder reads in part, -1 on a ggml tree without them
_SET_ROWS = int(getattr(lib, "GGML_OP_SET_ROWS", -1))
_GATED_DELTA_NET = int(getattr(lib, "GGML_OP_GATED_DELTA_NET", -1))


def copied_values(c: Any, raw: np.ndarray) -> tuple[np.ndarray | None, tuple[int, ...], str]:
    """A node's values from its entry in the C copier's log (native/node_copies.h): (values or None, shape, error).

    Args:
        c: the `struct pyggml_node_copy`.
        raw: its bytes (c.nbytes of them: from the log's data, or the node's own memory where left in place).
    """
    ne = [int(c.ne[i]) for i in range(4)]
    shape = (ne[1], ne[0]) if c.rows_only else extents_shape(ne)
    if c.unread:
        return None, shape, "not read back: no memory, or a row index outside the destination"
    nb = [int(c.nb[i]) for i in range(4)]
    if c.type == _F32 and nb[0] == 4 and nb[1] == 4 * ne[0] and nb[2] == nb[1] * ne[1] and nb[3] == nb[2] * ne[2]:
        return raw.view(np.float32).reshape(shape), shape, ""  # most nodes: no copy
    t = types.Type(int(c.type))
    dense = [types.type_size(t), types.row_size(t, ne[0])]
    dense += [dense[1] * ne[1], dense[1] * ne[1] * ne[2]]
    if all(nb[i] == dense[i] or ne[i] == 1 for i in range(4)):
        return np.asarray(types.decode(t, raw, shape), dtype=np.float32), shape, ""
    if not types.has_raw_dtype(t):
        return None, shape, f"not read back: a strided view of {t.name}"
    full = np.lib.stride_tricks.as_strided(raw.view(types.host_dtype(t)), tuple(reversed(ne)), tuple(reversed(nb)))
    return np.asarray(full, dtype=np.float32).reshape(shape), shape, ""


def written_rows(p: Any) -> int:
    """The rows (ggml dim 1) of node p its op writes: all of them, but a GATED_DELTA_NET of fewer tokens than its
    K snapshot slots writes its attention rows and its first n_tokens slots only; the rest is the caller's
    (ggml-cpu: "older slots are caller-owned") and holds whatever the memory held, which differs from one run to
    another for no fault of either: a comparison reads the written rows (native/node_copies.c does the same).

    Args:
        p: the node's C pointer.

    Returns:
        The count of rows, from the first.
    """
    v = p.src[2]
    if p.op != _GATED_DELTA_NET or v == ffi.NULL or not lib.ggml_is_contiguous(p) or p.ne[2] * p.ne[3] != 1:
        return int(p.ne[1])
    k = int(np.frombuffer(ffi.buffer(p.op_params, 4), dtype=np.int32)[0])
    rows = int(v.ne[2] * v.ne[3] + min(int(v.ne[2]), k) * v.ne[0] * v.ne[3])
    return min(rows, int(p.ne[1]))


def node_values(t: Tensor) -> np.ndarray:
    """A node's values as a Recorder keeps them, float32: all of them, but for a SET_ROWS into a 2-D destination
    with one list of indices (a KV cache layer), the rows it wrote, in the order of its indices. The rest of
    such a destination is earlier steps' rows, held against the other run's when they were written; reading
    and comparing the whole cache at every step cost a comparison more than the decode it records.

    Args:
        t: the node, computed.

    Raises:
        ValueError, TypeError: the node cannot be read back (`Tensor.numpy`).
    """
    p = t.ptr
    written = written_rows(p)
    if written < p.ne[1]:
        return np.asarray(t.numpy(), dtype=np.float32).reshape(-1, int(p.ne[0]))[:written]
    idx = p.src[1] if p.op == _SET_ROWS else ffi.NULL
    if idx == ffi.NULL or p.ne[2] * p.ne[3] != 1 or idx.ne[1] * idx.ne[2] * idx.ne[3] != 1:
        return np.asarray(t.numpy(), dtype=np.float32).reshape(extents_shape(p.ne))
    rows = np.asarray(Tensor(idx, None).numpy(), dtype=np.int64).ravel()
    if rows.size and (rows.min() < 0 or rows.max() >= p.ne[1]):
        raise ValueError(f"SET_ROWS {t.name}: a row index outside 0..{p.ne[1] - 1}")
    width = int(lib.ggml_row_size(p.type, p.ne[0]))
    raw = np.empty((rows.size, width), dtype=np.uint8)
    if p.buffer == ffi.NULL or p.data == ffi.NULL:
        raise ValueError(f"SET_ROWS {t.name}: no memory to read")
    transport.before_read(p.buffer, f"node_values: tensor {t.name}")
    for i, r in enumerate(rows.tolist()):
        lib.ggml_backend_tensor_get(p, ffi.from_buffer(raw[i]), r * int(p.nb[1]), width)
    transport.after_transfer(p.buffer)
    name = types.Type(int(p.type)).name
    return np.asarray(types.decode(name, raw.ravel(), (rows.size, int(p.ne[0]))), dtype=np.float32)


def logit_stats(a: np.ndarray, b: np.ndarray, next_tokens: np.ndarray | None = None) -> dict[str, Any]:
    """B's logits against A's, as llama-perplexity's --kl-divergence reports them.

    Args:
        a: the reference's logits, (outputs, n_vocab).
        b: the other run's, the same shape.
        next_tokens: per output, the token that came next (-1: none), for RMS Δp.

    Returns:
        {"outputs", "nmse", "kld": {"mean", "median", "p99", "max"}, "same_top1" (a fraction), "rms_dp" (a
        fraction: llama.cpp prints it in %), "kld_per_output"}.

    Raises:
        ValueError: shapes that differ.
    """
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        raise ValueError(f"logit_stats: logits of shape {a.shape} against {b.shape}")
    if a.size == 0:
        return {"outputs": 0, "nmse": math.nan, "kld": {}, "same_top1": math.nan, "rms_dp": math.nan}
    nexts = np.asarray(next_tokens) if next_tokens is not None else np.full(a.shape[0], -1)
    in_c = a.dtype == np.float32 and b.dtype == np.float32  # llama.cpp's logits; other dtypes keep their precision
    a32, b32 = (np.ascontiguousarray(a), np.ascontiguousarray(b)) if in_c else (a, b)
    kld, dp = np.empty(a.shape[0]), []
    out = ffi.new("double[5]")
    for i in range(a.shape[0]):
        # one pass in C (native/node_copies.c), float64, no temporaries: NumPy's float64 copies of 36 outputs of a
        # vocabulary of 152k took 0.18 s in a comparison's process, fresh memory, 0.064 s in C; a row with a value
        # that is not finite takes NumPy's path, which carries it through
        if in_c and lib.pyggml_kld_f32(
            ffi.from_buffer("float[]", a32[i]), ffi.from_buffer("float[]", b32[i]), a.shape[1], out
        ):
            kld[i], ma, sa, mb, sb = out[0], out[1], out[2], out[3], out[4]
            if nexts[i] >= 0:
                t = int(nexts[i])
                dp.append(math.exp(float(b32[i, t]) - mb) / sb - math.exp(float(a32[i, t]) - ma) / sa)
            continue
        ca, cb = a[i].astype(np.float64), b[i].astype(np.float64)
        la, lb = ca - ca.max(), cb - cb.max()
        ea, eb = np.exp(la), np.exp(lb)
        sa, sb = ea.sum(), eb.sum()
        kld[i] = max(float(np.einsum("i,i->", ea, la - lb) / sa - np.log(sa) + np.log(sb)), 0.0)
        if nexts[i] >= 0:
            dp.append(eb[nexts[i]] / sb - ea[nexts[i]] / sa)
    nmse, _, _ = compare_values(a, b)
    return {
        "outputs": int(a.shape[0]),
        "nmse": nmse,
        "kld": {
            "mean": float(kld.mean()),
            "median": float(np.median(kld)),
            "p99": float(np.percentile(kld, 99)),
            "max": float(np.max(kld)),
        },
        "same_top1": float(np.mean(a.argmax(axis=1) == b.argmax(axis=1))),
        "rms_dp": float(np.sqrt(np.mean(np.square(dp)))) if dp else math.nan,
        "kld_per_output": [float(x) for x in kld],
    }


@dataclass
class Comparison:
    """Run B held against run A: every node matched by key, the layers, the first divergent node, the logits.

    Attributes:
        a: what run A was (its file and backend, in words).
        b: what run B was.
        nodes: the NodeDiffs, in B's compute order.
        only_a: nodes only A computed (a fused op on one backend, a split's extra nodes): (step, name, occurrence).
        only_b: nodes only B computed.
        logits: `logit_stats` of the conversation's outputs.
        steps: per output of the logits, its step.
        bound: the NMSE bound of `first_divergent`.
    """

    a: str
    b: str
    nodes: list[NodeDiff]
    only_a: list[Key]
    only_b: list[Key]
    logits: dict[str, Any]
    steps: list[str] = field(default_factory=list)
    bound: float = BOUND

    @property
    def first_difference(self) -> NodeDiff | None:
        """The first node, in compute order, that differs while every compared node it read agreed exactly:
        where the difference enters (often far below any bound: a sum split in two, another rounding)."""
        return next((d for d in self.nodes if not d.error and d.nmse > 0 and d.inputs_nmse == 0), None)

    @property
    def first_divergent(self) -> NodeDiff | None:
        """The first node, in compute order, whose NMSE crosses `bound` while every compared node it read was
        within it: where the error jumps beyond the bound (the node to look at). A node whose inputs agreed
        counts too (a quantized weight read where the reference read floats)."""
        return next(
            (d for d in self.nodes if not d.error and d.nmse > self.bound and d.inputs_nmse <= self.bound), None
        )

    def layers(self) -> list[dict[str, Any]]:
        """How the error grows from layer to layer, in the first step.

        Returns:
            Per layer, the NMSE of its output (`l_out-N`, else its last compared node) and its growth over the
            layer before: [{"layer", "node", "nmse", "growth"}].
        """
        first = self.nodes[0].step if self.nodes else ""
        last: dict[int, NodeDiff] = {}
        for d in self.nodes:
            if d.step != first or d.layer is None or d.error:
                continue
            if base_name(d.name) == "l_out" or base_name(last.get(d.layer, d).name) != "l_out":
                last[d.layer] = d
        out, before = [], math.nan
        for layer in sorted(last):
            d = last[layer]
            growth = d.nmse / before if before and before > 0 and not math.isnan(before) else math.nan
            out.append({"layer": layer, "node": d.name, "nmse": d.nmse, "growth": growth})
            before = d.nmse
        return out

    def by_kind(self) -> dict[str, list[tuple[int, float]]]:
        """The error of each kind of node by layer (what `plot` draws).

        Returns:
            Per kind of node (its name without the layer), (layer, worst NMSE over the steps) in layer order.
        """
        worst: dict[tuple[str, int], float] = {}
        for d in self.nodes:
            if d.layer is None or d.error or math.isnan(d.nmse):
                continue
            k = (base_name(d.name), d.layer)
            worst[k] = max(worst.get(k, 0.0), d.nmse)
        out: dict[str, list[tuple[int, float]]] = {}
        for (kind, layer), e in sorted(worst.items(), key=lambda x: (x[0][0], x[0][1])):
            out.setdefault(kind, []).append((layer, e))
        return out

    def to_json(self) -> dict[str, Any]:
        """Every figure, as JSON values (a non-finite number as None).

        Returns:
            `nodes` (step, name, layer, kind, op, nmse, max_abs, cosine, jump, added), `layers`,
            `first_difference`, `first_divergent`, `kld`, `same_top1`, `rms_dp`, `logits_nmse`, `only_a`, `only_b`.
        """

        def num(x: float) -> float | None:
            return None if x is None or (isinstance(x, float) and not math.isfinite(x)) else x

        fd = self.first_divergent
        nodes = []
        for d in self.nodes:
            row = asdict(d)
            row.update(kind=base_name(d.name), shape=list(d.shape))
            row["added"] = d.added
            for k in ("nmse", "max_abs", "cosine", "jump", "inputs_nmse", "added"):
                row[k] = num(row[k])
            nodes.append(row)
        return {
            "a": self.a,
            "b": self.b,
            "bound": self.bound,
            "nodes": nodes,
            "layers": [{k: num(v) if isinstance(v, float) else v for k, v in x.items()} for x in self.layers()],
            "first_difference": None
            if self.first_difference is None
            else {k: getattr(self.first_difference, k) for k in ("step", "name", "index", "op", "layer", "inputs")}
            | {"nmse": num(self.first_difference.nmse)},
            "first_divergent": None
            if fd is None
            else {
                "step": fd.step,
                "name": fd.name,
                "index": fd.index,
                "op": fd.op,
                "layer": fd.layer,
                "nmse": num(fd.nmse),
                "jump": num(fd.jump),
                "inputs": fd.inputs,
            },
            "kld": self.logits.get("kld", {}),
            "same_top1": num(self.logits.get("same_top1", math.nan)),
            "rms_dp": num(self.logits.get("rms_dp", math.nan)),
            "logits_nmse": num(self.logits.get("nmse", math.nan)),
            "outputs": self.logits.get("outputs", 0),
            "only_a": [list(k) for k in self.only_a],
            "only_b": [list(k) for k in self.only_b],
        }

    def table(self, rows: int = 12) -> str:
        """The report in words.

        Args:
            rows: the nodes listed (those that added the most error).

        Returns:
            The logits' figures, the layers, the first difference and the first divergent node, the nodes that
            added the most error, the nodes one run has alone.
        """
        lg = self.logits
        kld = lg.get("kld", {})
        lines = [f"A: {self.a}", f"B: {self.b}"]
        if lg.get("outputs"):
            lines.append(
                f"logits over {lg['outputs']} outputs: KLD mean {kld['mean']:.3g}, median {kld['median']:.3g}, "
                f"p99 {kld['p99']:.3g}, max {kld['max']:.3g}; same top-1 {100 * lg['same_top1']:.1f} %; "
                f"RMS dp {100 * lg['rms_dp']:.3g} %; NMSE {lg['nmse']:.3g}"
            )
        layers = self.layers()
        if layers:
            lines.append(f"{'layer':>5} {'output':<16} {'NMSE':>10} {'growth':>8}")
            for x in layers:
                g = "" if math.isnan(x["growth"]) else f"{x['growth']:.2f}x"
                lines.append(f"{x['layer']:>5} {x['node']:<16} {x['nmse']:>10.3g} {g:>8}")
        fd = self.first_divergent
        compared = [d for d in self.nodes if not d.error]
        lines.append(f"nodes compared: {len(compared)}, not comparable: {len(self.nodes) - len(compared)}")
        fdiff = self.first_difference
        if fdiff is not None:
            lines.append(
                f"first difference: {fdiff.name!r} ({fdiff.op}, {fdiff.step}, node {fdiff.index}): NMSE {fdiff.nmse:.3g}, "
                "its compared inputs equal"
            )
        if fd is None:
            lines.append(f"no node departs beyond NMSE {self.bound:g}")
        else:
            lines.append(
                f"first divergent node: {fd.name!r} ({fd.op}, {fd.step}, node {fd.index}): NMSE {fd.nmse:.3g} beyond "
                f"{self.bound:g}, its inputs' {fd.inputs_nmse:.3g} ({', '.join(fd.inputs) or 'none compared'})"
            )
        added: dict[str, NodeDiff] = {}  # per node name, its step that added the most error
        for d in compared:
            if math.isfinite(d.added) and (d.name not in added or d.added > added[d.name].added):
                added[d.name] = d
        worst = sorted(added.values(), key=lambda d: -d.added)[:rows]
        if worst:
            lines.append("the nodes that added the most error (NMSE less their inputs'), each at its worst step:")
            lines.append(
                f"{'node':<28} {'op':<12} {'step':<14} {'NMSE':>10} {'added':>10} {'max |d|':>10} {'cosine':>10}"
            )
            for d in worst:
                lines.append(
                    f"{d.name[:28]:<28} {d.op[:12]:<12} {d.step[:14]:<14} {d.nmse:>10.3g} {d.added:>10.3g} "
                    f"{d.max_abs:>10.3g} {d.cosine:>10.6f}"
                )
        for label, keys in (("only in A", self.only_a), ("only in B", self.only_b)):
            if keys:
                names = sorted(Counter(base_name(k[1]) for k in keys).items())
                lines.append(f"{len(keys)} nodes {label}: " + ", ".join(f"{n} x{c}" for n, c in names[:12]))
        return "\n".join(lines)

    def plot(self, path: str) -> str:
        """Save the error by layer, one line per kind of node, as a PNG.

        Args:
            path: the file.

        Returns:
            "" when saved, else why not (matplotlib is not installed, the file cannot be written).
        """
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            return "matplotlib is not installed (pip install matplotlib): the table only"
        fig, ax = plt.subplots(figsize=(9, 5))
        kinds = self.by_kind()
        drawn = 0
        for kind, points in sorted(kinds.items(), key=lambda kv: -max(e for _, e in kv[1]))[:12]:
            xs = [x for x, e in points if e > 0]
            ys = [e for _, e in points if e > 0]
            if xs:
                ax.plot(xs, ys, marker="o", markersize=3, label=kind)
                drawn += 1
        ax.set_xlabel("layer")
        ax.set_ylabel("NMSE of B against A")
        ax.set_title(f"{self.b}\nagainst {self.a}", fontsize=9)
        if drawn:
            ax.set_yscale("log")
            ax.legend(fontsize=7, ncol=2)
        else:  # two runs bit for bit equal: nothing to draw on a log scale (matplotlib warned of an empty legend)
            ax.text(0.5, 0.5, "no node differs: every NMSE is 0", transform=ax.transAxes, ha="center")
        fig.tight_layout()
        try:
            fig.savefig(path, dpi=100)
        except OSError as e:
            return f"cannot write {path}: {e}"
        finally:
            plt.close(fig)
        return ""
