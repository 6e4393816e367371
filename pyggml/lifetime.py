"""Who keeps what alive, and whose memory a tensor may use: every lifetime rule of pyggml in one place.

ggml's objects point at each other without owning anything: a tensor points into a context's arena
and into a backend buffer, a graph into its context, a scheduler's copies into its own buffers. Python
frees an object when its last reference goes, so pyggml follows pygit2's rule: every object holds
its owner, and so nothing is freed while something that may touch it is alive.

- Keep-alive (`keep`, `contexts`). A `Tensor` holds its `Context`; a context holds, in its `_keep`
  set, what its tensors may touch and must outlive them: buffers (`Backend.alloc_tensors`), the
  allocators that lent them memory, and the contexts of tensors its graphs read. A graph holds its
  context, a NumPy `view()` its tensor. A set, so running a graph again adds nothing.
- Lending (`Lender`). A `Gallocr` or a `Scheduler` lends memory to the graph it allocated last and
  takes it back when it allocates another: the tensors' data pointers are cleared, so reading or
  computing them raises instead of touching memory that is no longer theirs. The lender holds the
  graph's contexts weakly (each context holds its lender: a strong pair would be a cycle that only
  Python's collector breaks, late), so dropping a Runner and its graph frees both at once; a context
  that goes first takes its tensors with it, and the lender neither writes into them nor lists them.
  While memory is lent, two facts are kept by tensor address, with a weak reference to the lender (a
  listed address is dropped when its context or its lender goes, so no other tensor can take it while
  listed): which tensors hold lent memory (a zero-copy `view()`
  would outlive the lending, so it is refused) and which leaves have not been written since they
  got it (they hold what an earlier graph left there: computing raises, naming them).
- Source restoring (`restore_sources`). ggml's scheduler rewires a node's sources to its own copies;
  the sources as built are recorded per context (graphs of one context share tensors), held weakly
  by the context, and put back before the graph is allocated again.
- Graph state (`GraphState`, `graph.state`). What allocators and the preflight know of one graph is
  one object held by the graph, so it dies with the graph; nothing is keyed by `id()`, which a new
  object may reuse once the old one is freed.
- Exports (`check_shareable`, `exported`, `exports`). A zero-copy export of a tensor's memory (`Tensor.view()`,
  DLPack, the buffer protocol, NumPy's array interface: pyggml.interop) holds the Tensor, so the memory
  outlives the consumer's array, and is allowed only where that is enough: host memory the tensor keeps
  (a context's own, a buffer from `Backend.alloc_tensors`). Memory lent by an allocator is refused (it is
  taken back at the allocator's next graph, which the export would outlive), as are device memory, a
  tensor without memory, and a tensor ggml handed to a callback (no Python object holds its memory). The
  live exports are counted per tensor address until the consumer drops them (`exports`).
- Meta devices (`keep_forever`). ggml keeps a meta device for the life of the process and calls back
  into its Python object (pyggml.meta's `_Slot`): that object must never be freed; a slot whose
  MetaDevice is gone serves the next MetaDevice of the same devices.
- Closing (`Closable`). A Runner, Scheduler, Gallocr, Backend or Buffer frees its ggml object when its last
  reference goes, or at once with `close()` (or at the end of a `with` block): lent memory is taken back
  and a buffer's tensors lose their memory first, so that nothing reads freed memory; the object then
  raises ValueError when used. A Context has no `close()`: its tensors point into its arena, and it goes
  with the last of them.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from pyggml._native import cstr, ffi, lib
from pyggml.errors import ExportError, StaleValue

F = TypeVar("F", bound=Callable[..., Any])

if TYPE_CHECKING:
    from pyggml.graph import Graph

_NULL = ffi.NULL


def address(p: Any) -> int:
    """The address a C pointer holds, as an int.

    Args:
        p: a C pointer (cdata): a tensor, its data.

    Returns:
        The address.
    """
    return int(ffi.cast("uintptr_t", p))


_addr = address


# --- keep-alive -------------------------------------------------------------------------------------
def keep(owner: Any, obj: Any) -> None:
    """Make `owner` (a Context) hold `obj` for as long as it lives.

    Args:
        owner: an object with a `_keep` set (a Context).
        obj: what it must outlive: a buffer, an allocator, another context, an array.
    """
    owner._keep.add(obj)


def contexts(ctx: Any) -> list[Any]:
    """`ctx` and every context it keeps alive, transitively.

    Args:
        ctx: a Context (an owner is an object with a `_keep` set).

    Returns:
        The owners, `ctx` first.
    """
    out, stack, seen = [], [ctx], set()
    while stack:
        c = stack.pop()
        if id(c) in seen:  # every object on the stack is alive until the walk ends: ids stay unique
            continue
        seen.add(id(c))
        out.append(c)
        stack.extend(k for k in c._keep if hasattr(k, "_keep"))
    return out


_FOREVER: list[Any] = []


def keep_forever(obj: Any) -> None:
    """Hold `obj` for the life of the process (a meta device ggml keeps calling back into).

    Args:
        obj: the object.
    """
    _FOREVER.append(obj)


# --- graph state ------------------------------------------------------------------------------------
class GraphState:
    """What pyggml knows of one graph beyond ggml's cgraph, held by it as `graph.state`.

    Attributes:
        allocation: (allocator, its generation) that gave the graph its memory; stale once the allocator's
            generation moves on (it lent the memory to another graph).
        index_inputs: the index tensors a scheduler recorded before it rewired the graph's sources.
        sources_as_built: the node count at a scheduler's last restore; None once it rewired them.
        marks: `pyggml.preflight`'s once(): what -> (node count, value).
        paths: compute path (a Backend, a Scheduler) -> (version, node count) of its structural check,
            held weakly: a freed path's entry goes with it, and a new object never meets an old entry.
        memory: the (allocation, node count) whose memory the preflight checked last.
        found_index_inputs: the index inputs the structural check found.
        split_checked: meta device -> {(node count, policy version)} its split check passed for.
    """

    __slots__ = (
        "allocation",
        "index_inputs",
        "sources_as_built",
        "marks",
        "paths",
        "memory",
        "found_index_inputs",
        "split_checked",
    )

    def __init__(self) -> None:
        self.allocation: tuple[Lender, int] | None = None
        self.index_inputs: list | None = None
        self.sources_as_built: int | None = None
        self.marks: dict[str, tuple[int, Any]] = {}
        self.paths: weakref.WeakKeyDictionary[Any, tuple[Any, int]] = weakref.WeakKeyDictionary()
        self.memory: tuple | None = None
        self.found_index_inputs: list = []
        self.split_checked: weakref.WeakKeyDictionary[Any, set[tuple[int, int]]] = weakref.WeakKeyDictionary()


# --- source restoring -------------------------------------------------------------------------------
# graph context -> {node address: its sources as built}
_PRISTINE_SOURCES: weakref.WeakKeyDictionary[Any, dict[int, tuple]] = weakref.WeakKeyDictionary()


def restore_sources(graph: Graph) -> None:
    """Give the graph back the sources it was built with (see `pyggml.backend.Scheduler.restore`).

    The first time a node is seen its sources are recorded; its context keeps the node, so its address
    stays its own.

    Args:
        graph: the graph.
    """
    st = graph.state
    if st.sources_as_built == graph.n_nodes:  # not rewired (nor expanded) since the last restore
        return
    saved = _PRISTINE_SOURCES.setdefault(graph.ctx, {})
    others: list | None = None
    for i in range(lib.ggml_graph_n_nodes(graph.ptr)):
        node = lib.ggml_graph_node(graph.ptr, i)
        key = _addr(node)
        srcs = saved.get(key)
        if srcs is None:
            # a node another context's graph recorded (a scheduler may hold it rewired): its sources as built
            if others is None:
                others = [r for c, r in _PRISTINE_SOURCES.items() if c is not graph.ctx]
            srcs = next((r[key] for r in others if key in r), None)
        if srcs is None:
            saved[key] = tuple(node.src)
        else:
            saved[key] = srcs
            for j, s in enumerate(srcs):
                node.src[j] = s
    st.sources_as_built = graph.n_nodes


@contextmanager
def sources_as_built(roots: Iterable[Any]) -> Iterator[None]:
    """Within the block, the nodes `roots` reach have the sources they were built with: a scheduler that
    allocated a graph of theirs rewired them to its own copies (`restore_sources` recorded the originals). The
    copies are put back at the block's end, so that the graph the scheduler holds still computes as planned.

    Args:
        roots: C tensors (`struct ggml_tensor *`).

    Yields:
        Nothing.
    """
    records = list(_PRISTINE_SOURCES.values())
    swapped: list[tuple[Any, tuple]] = []
    if records:
        seen: set[int] = set()
        stack = list(roots)
        while stack:
            t = stack.pop()
            a = _addr(t)
            if a in seen:
                continue
            seen.add(a)
            for record in records:
                srcs = record.get(a)
                if srcs is not None:
                    now = tuple(t.src)
                    if any(x != y for x, y in zip(now, srcs)):
                        swapped.append((t, now))
                        for j, s in enumerate(srcs):
                            t.src[j] = s
                    break
            stack.extend(s for s in t.src if s != _NULL)
    try:
        yield
    finally:
        for t, now in swapped:
            for j, s in enumerate(now):
                t.src[j] = s


def built_sources(graph: Graph, node: Any) -> tuple:
    """A node's sources as the graph was built, without changing the graph.

    While a scheduler has the graph rewired to its own copies, the sources are read from what
    `restore_sources` recorded.

    Args:
        graph: the Graph the node belongs to.
        node: the node, a `struct ggml_tensor *` (cdata).

    Returns:
        Its GGML_MAX_SRC sources as C pointers, NULL included.
    """
    if graph.state.sources_as_built != graph.n_nodes:
        saved = _PRISTINE_SOURCES.get(graph.ctx)
        srcs = saved.get(_addr(node)) if saved is not None else None
        if srcs is not None:
            return srcs
    return tuple(node.src)


# --- lending ----------------------------------------------------------------------------------------
# weak references to the lenders: a table of this module holding a lender strongly kept every dropped Runner's
# scheduler, its buffers and its graph's contexts alive for the life of the process (163 KB per Runner made, run
# and dropped). A lender's entries go when it does (Lender._weak); a context keeps its lender while it lives.
_lent: dict[int, weakref.ref] = {}  # address of a tensor holding lent memory -> its lender
_unwritten: dict[int, weakref.ref] = {}  # address of a leaf given lent memory, not written since -> its lender


def _context_gone(lender: weakref.ref, addresses: list[int], _: object) -> None:
    """A context died holding tensors `lender` lent memory to: their entries go (a later tensor may sit at
    the same address)."""
    for a in addresses:
        for table in (_lent, _unwritten):
            if table.get(a) is lender:
                del table[a]


def _arena(ctx: Any) -> range:
    """The addresses of a context's own memory, where its tensors' structs live."""
    start = int(ffi.cast("uintptr_t", lib.ggml_get_mem_buffer(ctx.ptr)))
    return range(start, start + int(lib.ggml_get_mem_size(ctx.ptr)))


def _forget(lender: weakref.ref) -> None:
    """Drop a collected lender's entries (its tensors' memory went with it)."""
    for table in (_lent, _unwritten):
        for a in [a for a, r in table.items() if r is lender]:
            del table[a]


def graph_tensors(graph: Graph) -> list:
    """Every tensor of the graph: nodes, what they read and what they view.

    Args:
        graph: the graph.

    Returns:
        The C tensors (`struct ggml_tensor *`), once each.
    """
    return reachable([lib.ggml_graph_node(graph.ptr, i) for i in range(graph.n_nodes)], views=True)


def reachable(roots: Iterable[Any], *, views: bool) -> list:
    """The C tensors `roots` reach through their sources, the roots included, once each: root by root,
    each one's sources depth first.

    Args:
        roots: C tensors (`struct ggml_tensor *`).
        views: follow a view to the tensor it views (`view_src`) too, whose memory it is; False walks the
            sources alone, as ggml does when it builds a graph.

    Returns:
        The C tensors, each once.
    """
    seen, out = set(), []
    for root in roots:
        stack = [root]
        while stack:
            t = stack.pop()
            key = _addr(t)
            if key in seen:
                continue
            seen.add(key)
            out.append(t)
            stack.extend(s for s in t.src if s != _NULL)
            if views and t.view_src != _NULL:
                stack.append(t.view_src)
    return out


def _outputs(graph: Graph) -> tuple[int, ...]:
    """The indices of the graph's nodes flagged as outputs (ggml_set_output): the memory plan keeps theirs."""
    flag = lib.GGML_TENSOR_FLAG_OUTPUT
    return tuple(i for i in range(graph.n_nodes) if lib.ggml_graph_node(graph.ptr, i).flags & flag)


def written(p: Any) -> None:
    """Record that the C tensor `p` was written from the host.

    A view counts as a write of the tensor it views only when it covers all of it (half an input written
    is still an input left with old values).

    Args:
        p: the `struct ggml_tensor *`.
    """
    _unwritten.pop(_addr(p), None)
    if p.view_src != _NULL and lib.ggml_nbytes(p) == lib.ggml_nbytes(p.view_src):
        _unwritten.pop(_addr(p.view_src), None)
    ref = _lent.get(_addr(p))
    lender = ref() if ref is not None else None
    if lender is not None:  # it holds what was written, whatever the last compute left in its memory
        lender._rewritten.add(_addr(p))


_NO_WRITE = (lib.GGML_OP_NONE, lib.GGML_OP_VIEW, lib.GGML_OP_RESHAPE, lib.GGML_OP_PERMUTE, lib.GGML_OP_TRANSPOSE)


def _describe(p: Any) -> str:
    """A tensor for a message: its name (or 'an unnamed'), its op and its NumPy-order shape."""
    name = cstr(p.name)
    shape = tuple(reversed([int(p.ne[i]) for i in range(lib.ggml_n_dims(p))]))
    op = cstr(lib.ggml_op_desc(p))
    return f"tensor {name!r} ({op}, shape {shape})" if name else f"an unnamed {op} tensor (shape {shape})"


def check_current(p: Any, what: str) -> None:
    """Raise StaleValue unless the C tensor `p` holds the value its graph computed (`Lender._check_current`);
    tensors whose memory no allocator lent (weights, a context's own memory) are not checked.

    Args:
        p: the `struct ggml_tensor *`.
        what: the caller's name, first in the message.

    Raises:
        pyggml.errors.StaleValue: a node read before its graph's compute, or whose memory a later node took.
    """
    ref = _lent.get(_addr(p))
    if ref is None and p.view_src != _NULL:
        ref = _lent.get(_addr(p.view_src))
    lender = ref() if ref is not None else None
    if lender is not None:
        lender._check_current(p, what)


def is_lent(p: Any) -> bool:
    """Whether the C tensor `p` (or the tensor it views) holds memory an allocator lent it.

    Args:
        p: the `struct ggml_tensor *`.

    Returns:
        True for lent memory (a zero-copy view of it is refused).
    """
    return _addr(p) in _lent or (p.view_src != _NULL and _addr(p.view_src) in _lent)  # entries of live lenders


@contextmanager
def lender_lock(p: Any) -> Iterator[None]:
    """Hold, for a transfer, the lock of the allocator whose memory the C tensor `p` (or the tensor it views)
    holds, if any: an allocator takes its memory back only under its lock (pyggml.serial), so a transfer that
    finds the memory still there inside this block uses it while it is p's, whatever other threads allocate.

    Args:
        p: the `struct ggml_tensor *`.

    Yields:
        Nothing; check that `p` has memory inside the block.
    """
    ref = _lent.get(_addr(p))
    if ref is None and p.view_src != _NULL:
        ref = _lent.get(_addr(p.view_src))
    lock = getattr(ref() if ref is not None else None, "lock", None)
    if lock is None:
        yield
        return
    with lock:
        yield


def with_lender_lock(method: F) -> F:
    """A Tensor method that reads or writes its memory, run inside `lender_lock(self.ptr)`.

    Args:
        method: the method.

    Returns:
        The method, holding the lock.
    """

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        with lender_lock(self.ptr):
            return method(self, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


def unwritten(leaves: list) -> list:
    """The leaves among these that still hold what an earlier graph left in their memory.

    Args:
        leaves: C tensors (`struct ggml_tensor *`).

    Returns:
        Those not written from the host since they got lent memory.
    """
    if not _unwritten:
        return []
    return [p for p in leaves if _addr(p) in _unwritten]


class Lender:
    """An allocator that lends its memory to one graph at a time (`Gallocr`, `Scheduler`).

    Allocating a graph gives memory to the graph's tensors that had none. When the allocator then
    allocates another graph (or the graph is allocated elsewhere), that memory is reused or freed, so those
    tensors are given back first: their data pointers are cleared, and reading or computing them raises
    instead of touching memory that is no longer theirs. Every context of the graph keeps the allocator
    alive while its tensors may use it.

    Attributes:
        generation: moves on with every allocation and release: a graph's `state.allocation` is current
            while it matches.
        leaves: the leaves of the lent graph that must be written before it is computed.
    """

    generation = 0
    lock: Any  # a threading.RLock, made by the subclass: allocating, computing and taking memory back hold it
    # per context of the graph: (the context, weakly; its tensors given memory)
    _lent: list[tuple[weakref.ref, list]] | None = None
    _planned: tuple | None = None  # (weak reference to the graph, its node count, its outputs) the plan was made for
    leaves: list = []  # leaves of the lent graph that must be written before it is computed
    _order: list = []  # the lent graph's nodes in compute order (C tensors), for `check_current`
    _writers: dict | None = None  # buffer address -> what `_writer_table` found, built at the first read
    _computed = False  # whether the lent graph was computed since its allocation (set as its compute starts)
    _rewritten: set = set()  # addresses of tensors written from the host since the last compute
    _busy = False  # inside `_computing()`: an observer reads nodes as they are computed
    _index: dict | None = None  # node address -> compute index, built with `_writer_table`

    def _needs_plan(self, graph: Graph) -> bool:
        """ggml's graph allocator reuses its last memory plan for any graph whose node and leaf
        counts and sizes fit it (ggml_gallocr_needs_realloc), without looking at which node reads
        which, nor at which nodes are outputs: another graph of the same size then ran with the first
        graph's in-place reuse and computed wrong values, silently, and so did the same graph run with an
        output it was not planned with (its memory given to a later node). A plan is made again whenever the
        graph is not the one (or has grown since, or has other outputs than) the plan was made for; a graph
        run again as it was keeps its plan."""
        planned = self._planned
        return planned is None or planned[0]() is not graph or planned[1:] != (graph.n_nodes, _outputs(graph))

    def _plan_made(self, graph: Graph) -> None:
        self._planned = (weakref.ref(graph), graph.n_nodes, _outputs(graph))

    def _before_alloc(self, graph: Graph) -> list:
        """Take back what this allocator, and the one that allocated graph before, lent; returns the
        graph's tensors without memory, which the allocation gives memory to."""
        st = graph.state
        if st.allocation is not None and st.allocation[0] is not self:
            st.allocation[0].release()
        self.release()
        st.allocation = None
        tensors = graph_tensors(graph)
        for t in tensors:
            # a view made while its source held lent memory copied that address (ggml sets a view's
            # data at creation) but has no buffer: stale once the memory is given back, and ggml's
            # scheduler then takes it for a tensor allocated elsewhere and aborts. The allocator
            # views it again. (A view of context memory, whose source has data and no buffer, stays.)
            if t.view_src != _NULL and t.buffer == _NULL and t.data != _NULL:
                src = t.view_src
                if src.buffer != _NULL or src.data == _NULL:
                    t.data = _NULL
        return [t for t in tensors if t.data == _NULL]

    def _after_alloc(self, graph: Graph, fresh: list) -> None:
        ctxs = contexts(graph.ctx)
        for c in ctxs:
            keep(c, self)
        # the contexts weakly: each keeps this lender, and a lender that kept them made a cycle only Python's
        # collector breaks, late, each holding a scheduler's megabytes meanwhile. A context that goes first
        # takes its tensors with it: they are then neither given back (their memory is gone) nor listed
        me, arenas = self._weak(), [_arena(c) for c in ctxs]
        owner = {_addr(p): next((i for i, r in enumerate(arenas) if _addr(p) in r), 0) for p in fresh}
        groups = []
        for i, c in enumerate(ctxs):  # a tensor found in no context of the graph's: with the graph's own (ctxs[0])
            mine = [p for p in fresh if owner[_addr(p)] == i]
            gone = functools.partial(_context_gone, me, [_addr(p) for p in mine])
            groups.append((weakref.ref(c, gone), mine))
        self._lent = groups
        self._order = [lib.ggml_graph_node(graph.ptr, i) for i in range(graph.n_nodes)]
        self._writers, self._index = None, None
        self._computed = False
        self._rewritten = set()
        self.leaves = self._lend(fresh, self._order)
        self.generation += 1
        graph.state.allocation = (self, self.generation)

    def _weak(self) -> weakref.ref:
        """This lender's one weak reference, the value of its entries in the module's tables, which go with it."""
        ref = self.__dict__.get("_weak_self")
        if ref is None:
            ref = self._weak_self = weakref.ref(self)
            weakref.finalize(self, _forget, ref)
        return ref

    def _lend(self, fresh: list, graph_nodes: list) -> list:
        """`fresh` (C tensors) got memory from this allocator; returns the leaves among them that must
        be written before the graph is computed. A leaf that only receives a copy (cpy's destination)
        is overwritten whole by the graph and needs no value."""
        copied_into = {_addr(n.src[1]) for n in graph_nodes if n.op == lib.GGML_OP_CPY and n.src[1] != _NULL}
        leaves, me = [], self._weak()
        for p in fresh:
            a = _addr(p)
            _lent[a] = me
            if p.op == lib.GGML_OP_NONE and p.view_src == _NULL and a not in copied_into:
                _unwritten[a] = me
                leaves.append(p)
        return leaves

    def release(self) -> None:
        """Take the memory back from the graph allocated last: its tensors lose their data and buffer.

        Under this allocator's `lock` (its subclasses make one): a transfer holding it (`lender_lock`) never
        sees the memory go in the middle."""
        with self.lock:
            self._release()

    def _release(self) -> None:
        if self._lent is not None:
            me = self._weak()
            for ctx, fresh in self._lent:
                if ctx() is None:  # gone, with its tensors (_context_gone dropped their entries)
                    continue
                for p in fresh:
                    a = _addr(p)
                    if _lent.get(a) is me:
                        del _lent[a]
                    if _unwritten.get(a) is me:
                        del _unwritten[a]
                    p.data = _NULL
                    p.buffer = _NULL
            self._lent = None
            self.leaves = []
            self._order, self._writers, self._index, self._computed = [], None, None, False
            self.generation += 1

    # --- what a node's memory holds after the compute -------------------------------------------------
    @contextmanager
    def _computing(self) -> Iterator[None]:
        """The block computes the lent graph: after it, its nodes hold computed values (an exception out of the
        block, or `_compute_failed`, says they do not). Inside it an observer reads each node as ggml computes
        it, before any later node can take its memory: reads are not checked there.

        Yields:
            Nothing.
        """
        self._computed, self._busy, self._rewritten = True, True, set()
        try:
            yield
        except BaseException:
            self._computed = False
            raise
        finally:
            self._busy = False

    def _compute_failed(self) -> None:
        """Record that the lent graph's compute failed: its nodes hold no value to read."""
        self._computed = False

    def _writer_table(self) -> dict:
        """The nodes that write memory of their own, per buffer: (starts, ends, compute indices, addresses) as
        arrays. A view, even one whose op writes (cpy, set_rows, an in-place op), writes the memory of the
        tensor it views: that is the graph's own doing, not the allocator's reuse, and is left out."""
        if self._writers is None:
            import numpy as np

            rows: dict[int, list[tuple[int, int, int, int]]] = {}
            for i, n in enumerate(self._order):
                if n.op in _NO_WRITE or n.view_src != _NULL or n.data == _NULL:
                    continue
                start = _addr(n.data)
                rows.setdefault(_addr(memory_buffer(n)), []).append((start, start + lib.ggml_nbytes(n), i, _addr(n)))
            self._writers = {}
            for b, rs in rows.items():
                starts, ends, times, owners = zip(*rs)
                # addresses as uint64; compute indices as int64, compared with a leaf's -1
                self._writers[b] = (
                    np.array(starts, np.uint64),
                    np.array(ends, np.uint64),
                    np.array(times, np.int64),
                    np.array(owners, np.uint64),
                )
            self._index = {_addr(n): i for i, n in enumerate(self._order)}
        return self._writers

    def _check_current(self, p: Any, what: str) -> None:
        """Raise StaleValue unless the C tensor `p`, which holds memory this allocator lent, holds the value its
        graph computed (or, for a leaf, the value written to it).

        Refused: a computed node read before the compute, and one whose memory ggml's graph allocator gave to
        a node computed after it (the allocator reuses a node's memory once its readers have run, unless it is
        an output). A tensor written from the host since the compute holds what was written.

        Args:
            p: the `struct ggml_tensor *`.
            what: the caller's name, first in the message.

        Raises:
            pyggml.errors.StaleValue: what it holds is not its value.
        """
        import numpy as np

        base = p.view_src if p.view_src != _NULL else p
        if not self._computed:
            if p.op not in _NO_WRITE or base.op not in _NO_WRITE:
                raise StaleValue(
                    f"{what}: {_describe(p)} holds no computed value: its graph was allocated and not computed since, "
                    "or its compute failed or was stopped before the end (compute(graph) after writing the inputs, "
                    "or run(...))"
                )
            return
        if self._busy:
            return
        table = self._writer_table().get(_addr(memory_buffer(p)))
        if table is None or p.data == _NULL or _addr(p) in self._rewritten:
            return
        index = self._index or {}
        when = index.get(
            _addr(p), index.get(_addr(base), -1)
        )  # a leaf (or a view of one) holds its value from the start
        start = _addr(p.data)
        end = start + max(int(lib.ggml_nbytes(p)), 1)
        starts, ends, times, owners = table
        hit = (times > when) & (starts < end) & (ends > start) & (owners != _addr(base))
        if hit.any():  # the message is built only here: reads that pass are on every numpy()'s path
            taker = self._order[int(times[int(np.argmax(hit))])]
            value = "the value written to it" if when < 0 else "the value its graph computed"
            t = cstr(p.name) or "t"
            raise StaleValue(
                f"{what}: {_describe(p)} no longer holds {value}: ggml's graph allocator gave its memory to "
                f"{_describe(taker)}, computed after it, once the nodes reading it had run. Keep it: pass it among "
                f"the run's outputs (runner.run(graph, inputs, [..., {t}])), or call {t}.set_output() before "
                "allocate/run, so that no other node takes its memory."
            )


# --- closing ----------------------------------------------------------------------------------------
class Closable:
    """`close()` frees the object's ggml memory now rather than when its last reference goes, and `with obj:`
    closes it at the block's end. Once closed, its `ptr` raises ValueError naming it, so no call reaches
    freed memory; closing again does nothing. A subclass keeps its C pointer in `_ptr` and frees in `_close`."""

    _closed = False
    _ptr: Any

    def _close(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Free the ggml object now (see the class). Raises what `_close` refuses (a Backend a live Scheduler
        still uses)."""
        if not self._closed:
            self._close()
            self._closed = True

    @property
    def closed(self) -> bool:
        """Whether `close()` was called."""
        return self._closed

    @property
    def ptr(self) -> Any:
        """The ggml object (cffi cdata).

        Raises:
            ValueError: the object is closed.
        """
        if self._closed:
            raise ValueError(f"{type(self).__name__} is closed (close() was called): make a new one")
        return self._ptr

    def __enter__(self: Any) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --- exports ----------------------------------------------------------------------------------------
_exports: dict[int, int] = {}  # address of a tensor whose memory is exported -> live exports


def memory_buffer(p: Any) -> Any:
    """The backend buffer that holds a tensor's memory.

    Args:
        p: the tensor, a `struct ggml_tensor *` (cdata).

    Returns:
        Its own buffer, else (a view made after its source was allocated, which ggml gives the source's
        data but no buffer) its source's; NULL for a context's own memory.
    """
    if p.buffer != _NULL or p.view_src == _NULL:
        return p.buffer
    return p.view_src.buffer


def buffer_name(p: Any) -> str:
    """The name of the buffer holding a tensor's memory.

    Args:
        p: the tensor, a `struct ggml_tensor *` (cdata).

    Returns:
        'CPU', 'Vulkan0', 'CUDA0_Host', ...; 'context' for a context's own memory.
    """
    buf = memory_buffer(p)
    return "context" if buf == _NULL else cstr(lib.ggml_backend_buffer_name(buf))


def check_shareable(t: Any, what: str) -> None:
    """Raise ExportError unless a Tensor's memory may be shared without a copy.

    Shared: a view, DLPack, the buffer protocol (see the module's "Exports"). The tensor must have memory,
    in host memory, that its Context keeps (not lent by a graph allocator).

    Args:
        t: a pyggml Tensor.
        what: the caller's name, first in the message.

    Raises:
        ExportError: (a BufferError and a ValueError) the memory may not be shared; the message says why.
    """
    p = t.ptr
    name = t.name or "(unnamed)"
    if p.data == _NULL:
        raise ExportError(
            f"{what}: tensor {name} has no memory yet (allocate its context or graph on a backend first; memory an "
            "allocator lent it is taken back when the allocator allocates another graph)"
        )
    buf = memory_buffer(p)
    if buf != _NULL and not lib.ggml_backend_buffer_is_host(buf):
        raise ExportError(
            f"{what}: tensor {name} is not in host memory but in a {buffer_name(p)} buffer, and ggml gives no "
            "pointer to device memory that can be shared safely; copy it to the host with numpy() (or "
            "np.from_dlpack(t, device='cpu', copy=True))"
        )
    if t.ctx is None:
        raise ExportError(
            f"{what}: tensor {name} was handed over by ggml (a callback, a scheduler's copy) and no Python object "
            "keeps its memory alive; use numpy() for a copy"
        )
    if is_lent(p):
        raise ExportError(
            f"{what}: {t.name or 'the tensor'}'s memory is lent by a graph allocator (a Runner, Scheduler or "
            "Gallocr) until it allocates another graph, which a view or export would outlive; use numpy() for a "
            "copy, or give the tensor memory of its own (Backend.alloc_tensors) to share it"
        )


def exported(p: Any, holder: object) -> None:
    """Record that holder shares the memory of tensor p: counted in `exports(p)` until holder is freed.

    Args:
        p: the tensor, a `struct ggml_tensor *` (cdata).
        holder: what a consumer's array, memoryview or capsule keeps alive (it holds the tensor).
    """
    a = _addr(p)
    _exports[a] = _exports.get(a, 0) + 1
    weakref.finalize(holder, _unexported, a).atexit = False


def _unexported(a: int) -> None:
    n = _exports.get(a, 0) - 1
    if n > 0:
        _exports[a] = n
    else:
        _exports.pop(a, None)


def exports(p: Any) -> int:
    """How many zero-copy exports of a tensor's memory are alive.

    Args:
        p: the tensor, a `struct ggml_tensor *` (cdata).

    Returns:
        The live `Tensor.view()` arrays, DLPack capsules and the arrays made from them, memoryviews; 0 once
        every consumer has dropped its own.
    """
    return _exports.get(_addr(p), 0)
