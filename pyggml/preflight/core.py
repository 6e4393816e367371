"""The preflight's frame: the Rule record, rule tables, the state it keeps on a graph, and the checks
that hold whatever device computes: memory that is there and current, no half-expanded graph, no
empty tensors, index values inside the rows they address, inputs written since they got memory."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from pyggml import lifetime
from pyggml._native import cstr, ffi, lib
from pyggml.errors import GraphError, Unsupported
from pyggml.tensor import Tensor
from pyggml.types import Op

_NULL = ffi.NULL
VIEW_OPS = {int(Op.VIEW), int(Op.RESHAPE), int(Op.PERMUTE), int(Op.TRANSPOSE), int(Op.NONE)}


@dataclass(frozen=True)
class Rule:
    """One check before compute, declared as data.

    ops: the ops (ggml_op values) whose nodes it looks at; () for a check of the whole graph.
    check: for a node rule, node -> the reason it cannot be computed, or None; for a graph rule, the
        function that raises.
    finding: why the rule exists: "docs/findings.md <number>", or the reason in words.
    test: the test that covers it, "tests/test_x.py::test_name".
    """

    ops: tuple[int, ...]
    check: Callable[..., Any]
    finding: str
    test: str


class RuleTable:
    """The node rules of one device kind. An op may have several rules: they run in the order they were
    registered, and the first reason found is the one raised. Registering the same check for the same
    op twice raises, so a table is never silently changed by a second registration."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.rules: list[Rule] = []
        self._by_op: dict[int, list[Rule]] = {}

    def register(
        self, ops: Op | tuple[Op, ...], check: Callable[[Any], str | None], *, finding: str, test: str
    ) -> Rule:
        """Add a rule for these ops (one Op or several); ValueError for a check already there for one of them."""
        ops_t = tuple(int(o) for o in (ops if isinstance(ops, tuple) else (ops,)))
        for op in ops_t:
            if any(r.check is check for r in self._by_op.get(op, ())):
                raise ValueError(f"{self.name} rules: {Op(op).name} already has the rule {check.__name__}")
        rule = Rule(ops_t, check, finding, test)
        self.rules.append(rule)
        for op in ops_t:
            self._by_op.setdefault(op, []).append(rule)
        return rule

    def why(self, p: Any) -> str | None:
        """The first reason a rule of node p's op gives against it, or None."""
        for rule in self._by_op.get(p.op, ()):
            why = rule.check(p)
            if why:
                return why
        return None

    def ops(self) -> set[int]:
        """The ops that have rules."""
        return set(self._by_op)

    def for_op(self, op: Op) -> list[Rule]:
        """The rules of one op, in the order they run."""
        return list(self._by_op.get(int(op), ()))


def name(p: Any) -> str:
    """How errors name node p: its op and its name."""
    n = ffi.string(p.name).decode("utf-8", "replace")
    op = Op(p.op).name.lower()
    return f"{op} node {n!r}" if n else f"{op} node"


def nodes(graph: Any) -> list:
    return [lib.ggml_graph_node(graph.ptr, i) for i in range(graph.n_nodes)]


def _nelements(p: Any) -> int:
    return p.ne[0] * p.ne[1] * p.ne[2] * p.ne[3]


def read(p: Any) -> np.ndarray | None:
    """The values of tensor p where they can be read from the host now, else None."""
    if p.data == _NULL:
        return None
    t = Tensor(p, None)
    try:
        if lib.ggml_is_contiguous(p) or t.is_host:
            return t.numpy()
    except ValueError:
        pass
    return None


# --- what is known of a graph (kept on graph.state: pyggml.lifetime.GraphState) ---------------------
def once(graph: Any, what: str, compute: Callable[[], Any]) -> Any:
    """compute() once per graph and node count (what it looks at does not change otherwise):
    allocating a reused graph, as every Runner.run does, walks it once, not at every run."""
    st = graph.state
    n = graph.n_nodes
    done = st.marks.get(what)
    if done is not None and done[0] == n:
        return done[1]
    value = compute()
    st.marks[what] = (n, value)
    return value


def leaf_count(graph: Any) -> int:
    return once(graph, "leafs", lambda: len(graph.leafs()))


# --- graph rules ------------------------------------------------------------------------------------
def check_broken(graph: Any, what: str) -> None:
    """A graph whose expand failed half-way holds part of what was asked for."""
    if graph.broken:
        raise GraphError(f"{what}: {graph.broken}")


def check_has_nodes(graph: Any) -> None:
    if graph.n_nodes == 0:  # ggml's allocator asserts on a graph of leafs only
        raise GraphError("the graph has no nodes to compute (it holds only leafs: inputs or weights)")


def check_placeable(graph: Any) -> None:
    """A scheduler places a tensor without memory only if it is an input or something computes it:
    a leaf that is neither has no backend, and ggml's allocator asserts."""
    once(graph, "placeable", lambda: _placeable(nodes(graph)))


def _placeable(ns: list) -> None:
    # a leaf a node views (cpy's destination, set_rows' target) is placed with that node
    viewed = {int(ffi.cast("uintptr_t", p.view_src)) for p in ns if p.view_src != _NULL}
    for p in ns:
        for s in p.src:
            if (
                s != _NULL
                and s.op == lib.GGML_OP_NONE
                and s.data == _NULL
                and s.view_src == _NULL
                and not s.flags & lib.GGML_TENSOR_FLAG_INPUT
                and int(ffi.cast("uintptr_t", s)) not in viewed
            ):
                n = ffi.string(s.name).decode("utf-8", "replace") or "(unnamed)"
                raise GraphError(
                    f"leaf {n} has no memory and is not an input: mark it with set_input() "
                    "(or input=True), or allocate it on a backend first"
                )


def check_size(graph: Any, graph_size: int, what: str) -> None:
    """ggml's scheduler asserts its hash set (graph_size entries) holds every node and leaf."""
    n = graph.n_nodes + leaf_count(graph)
    if n > graph_size:
        raise GraphError(
            f"{what}: the graph has {n} nodes and leafs, more than the scheduler's graph_size "
            f"{graph_size} (create it with a larger graph_size)"
        )


def check_view_leaves(graph: Any) -> None:
    """A leaf that views an input the graph does not hold (cont(view_tensor(transpose(x))): ggml makes the
    view a leaf and x no part of the graph) gets no backend in ggml's scheduler, pinned to one backend
    or not, which aborted (GGML_ASSERT(src_backend_id != -1)); refused here."""
    for i in range(lib.ggml_graph_n_nodes(graph.ptr)):
        for leaf in lib.ggml_graph_node(graph.ptr, i).src:
            if leaf == _NULL or leaf.view_src == _NULL or leaf.view_src.buffer != _NULL:
                continue
            if leaf.op == lib.GGML_OP_NONE and leaf.view_src.flags & lib.GGML_TENSOR_FLAG_INPUT:
                n = cstr(leaf.view_src.name) or "(unnamed)"
                raise Unsupported(
                    f"the graph reads a view of input {n} but not {n} itself: ggml's scheduler "
                    "cannot place it (build the graph from the input, e.g. "
                    "cont(transpose(x)) rather than cont(view_tensor(transpose(x))))"
                )


def check_buffers_usable(graph: Any, backends: list, what: str) -> None:
    """Every tensor of the graph that already has memory (weights, a cache, memory another runner lent) is in a
    buffer one of `backends` can compute with, for the op of that tensor: ggml's scheduler aborts otherwise
    ("pre-allocated tensor in a buffer that cannot run the operation"), and a backend computing alone reads
    memory that is not its own (a CPU reading a device's addresses)."""
    usable: dict[tuple[int, int], bool] = {}
    for p in lifetime.graph_tensors(graph):
        buf = lifetime.memory_buffer(p)
        if buf == _NULL:
            continue
        buft = lib.ggml_backend_buffer_get_type(buf)
        for b in backends:
            key = (int(ffi.cast("uintptr_t", buft)), id(b))
            if key not in usable:
                usable[key] = bool(lib.ggml_backend_supports_buft(b.ptr, buft))
            if usable[key] and (p.op == lib.GGML_OP_NONE or lib.ggml_backend_supports_op(b.ptr, p)):
                break
        else:
            names = ", ".join(b.name for b in backends)
            t = f"tensor {cstr(p.name)!r}" if cstr(p.name) else "an unnamed tensor"
            op = "" if p.op == lib.GGML_OP_NONE else f" for its op {Op(p.op).name}"
            raise GraphError(
                f"{what}: {t} is in a {cstr(lib.ggml_backend_buffer_name(buf))} buffer, which none of the backends "
                f"computing this graph ({names}) can use{op}: give it memory of this runner's backend "
                "(runner.backend.alloc_tensors(ctx)) and write it there, or run the graph on a runner of that "
                "buffer's devices"
            )


def check_device_supports(graph: Any, backend: Any) -> None:
    """Before a runner allocates: the nodes its device cannot compute (supports_op), by op name."""
    bad = backend.unsupported(graph)
    if bad:
        raise Unsupported(", ".join(sorted({n.op.name for n in bad})))


def check_empty(ns: list) -> None:
    """ggml's kernels do not handle empty (zero-element) tensors."""
    for p in ns:
        if _nelements(p) == 0:
            raise GraphError(
                f"compute: {name(p)} has no elements (ne={tuple(p.ne)}); ggml's kernels do not handle empty tensors"
            )
        for s in p.src:
            if s != _NULL and _nelements(s) == 0:
                raise GraphError(f"compute: {name(p)} reads an empty tensor (ne={tuple(s.ne)})")


def check_supported(ns: list, backend: Any) -> None:
    """Backend.compute: every node is one the backend says it computes."""
    bad = [p for p in ns if p.op != lib.GGML_OP_NONE and not lib.ggml_backend_supports_op(backend.ptr, p)]
    if bad:
        names = ", ".join(f"{Op(p.op).name}({ffi.string(p.name).decode('utf-8', 'replace')})" for p in bad[:5])
        raise Unsupported(f"compute: {backend.name} does not support {len(bad)} node(s): {names}")


def check_current(graph: Any) -> None:
    """The allocator that gave the graph its memory has not since given it to another graph."""
    alloc = graph.state.allocation
    if alloc is not None and alloc[0].generation != alloc[1]:
        raise GraphError(
            "compute: the graph's memory was since given to another graph by the same allocator; "
            "allocate this graph again"
        )


def check_memory(ns: list) -> None:
    """Every node and every tensor a node reads has memory."""
    for p in ns:
        for t in (p, *p.src):
            if t != _NULL and t.data == _NULL:
                raise GraphError(f"compute: {name(p)}: a tensor it uses has no memory; allocate the graph first")


def check_written(graph: Any) -> None:
    """The leaves an allocator lent memory to were written since (they hold what an earlier graph left)."""
    alloc = graph.state.allocation
    if alloc is None:
        return
    missing = lifetime.unwritten(alloc[0].leaves)
    if missing:
        names = ", ".join(cstr(p.name) or "(unnamed)" for p in missing)
        raise GraphError(
            f"compute: input(s) {names} were given no value since the graph was allocated: "
            "their memory holds whatever an earlier graph left there. Give every input in "
            "Runner.run's inputs (each run allocates anew), or write it with Tensor.set before "
            "computing; tensors that must keep their values between runs (weights) belong in a "
            "buffer of their own (Backend.alloc_tensors)"
        )


def index_inputs(graph: Any) -> list:
    """(index tensor, rows it addresses, op) of the index-reading ops (get_rows, set_rows, get_rows_back,
    the ids of ssm_scan, mul_mat_id and add_id) whose index the graph does not compute.
    A scheduler rewires the nodes to its own copies of the inputs (filled only during compute),
    so it records this list before it allocates the graph (graph.state.index_inputs)."""
    return find_index_inputs(nodes(graph))


def find_index_inputs(ns: list) -> list:
    computed = {int(ffi.cast("uintptr_t", p)) for p in ns if p.op not in VIEW_OPS}
    out = []
    for p in ns:
        if p.op == Op.GET_ROWS:
            index, n_rows, what = p.src[1], p.src[0].ne[1], "get_rows"
        elif p.op == Op.SET_ROWS:
            index, n_rows, what = p.src[1], p.src[2].ne[1], "set_rows"
        elif p.op == Op.GET_ROWS_BACK:  # rows of the result
            index, n_rows, what = p.src[1], p.ne[1], "get_rows_back"
        elif p.op == Op.SSM_SCAN:  # ids: the row of the state each sequence starts from
            index, n_rows, what = p.src[6], p.src[0].ne[3], "ssm_scan"
        elif p.op == Op.MUL_MAT_ID:  # ids: which of the n_as matrices (the CPU checks with assert() only)
            index, n_rows, what = p.src[2], p.src[0].ne[2], "mul_mat_id"
        elif p.op == Op.ADD_ID:  # ids: which row of b
            index, n_rows, what = p.src[2], p.src[1].ne[1], "add_id"
        else:
            continue
        root = index
        while root.view_src != _NULL:
            root = root.view_src
        if int(ffi.cast("uintptr_t", root)) not in computed and int(ffi.cast("uintptr_t", index)) not in computed:
            out.append((index, n_rows, what))
    return out


def check_index_values(index_inputs: list) -> None:
    """An index outside the rows it addresses aborts inside ggml (get_rows, set_rows) or reads
    memory that is not the tensor's (get_rows_back, ssm_scan)."""
    for index, n_rows, what in index_inputs:
        v = read(index)
        if v is None or not v.size:
            continue
        lo, hi = int(v.min()), int(v.max())
        if lo < 0 or hi >= n_rows:
            n = ffi.string(index.name).decode("utf-8", "replace") or "(unnamed)"
            raise GraphError(f"{what}: index {n} holds {lo}..{hi}, outside the {n_rows} rows it addresses")


_ABORTS = "ggml asserts (the process ends)"
# the graph rules, as data (the order they run in is check()'s, in pyggml/preflight/__init__.py)
GRAPH_RULES: list[Rule] = [
    Rule(
        (),
        check_broken,
        "a half-expanded graph holds part of what was asked for: wrong results",
        "tests/test_safety.py::test_graph_too_small_is_refused_and_never_computed",
    ),
    Rule(
        (),
        check_has_nodes,
        f"{_ABORTS}: ggml's allocator on a graph of leafs only",
        "tests/test_preflight_rules.py::test_a_graph_of_leafs_only_is_refused",
    ),
    Rule(
        (),
        check_placeable,
        f"{_ABORTS}: a leaf without memory that is not an input has no backend",
        "tests/test_preflight_rules.py::test_a_leaf_without_memory_that_is_not_an_input_is_refused",
    ),
    Rule(
        (),
        check_size,
        f"{_ABORTS}: the scheduler's hash set holds graph_size tensors",
        "tests/test_safety.py::test_scheduler_graph_size_too_small",
    ),
    Rule(
        (),
        check_view_leaves,
        f"{_ABORTS}: a view of an input not in the graph gets no backend",
        "tests/test_meta.py::test_a_view_of_a_view_of_an_input_does_not_abort_the_scheduler",
    ),
    Rule(
        (),
        check_device_supports,
        "a node the device does not support would run elsewhere or abort",
        "tests/test_preflight_rules.py::test_a_runner_names_the_ops_its_device_does_not_support",
    ),
    Rule(
        (),
        check_empty,
        f"{_ABORTS}: ggml's kernels divide by empty extents",
        "tests/test_preflight_rules.py::test_an_empty_node_is_refused",
    ),
    Rule(
        (),
        check_supported,
        "Backend.compute of a node its backend does not support aborts",
        "tests/test_preflight_rules.py::test_backend_compute_refuses_nodes_its_backend_does_not_support",
    ),
    Rule(
        (),
        check_current,
        "memory given to another graph holds that graph's values: wrong results",
        "tests/test_safety.py::test_compute_of_a_graph_that_is_not_the_one_allocated",
    ),
    Rule(
        (),
        check_memory,
        "a tensor without memory is read at address 0: the process ends",
        "tests/test_preflight_rules.py::test_an_unallocated_graph_is_refused",
    ),
    Rule(
        (),
        check_written,
        "an input not written since allocation holds an earlier graph's values",
        "tests/test_correct_or_raise.py::test_an_input_left_out_of_a_later_run_raises_naming_it",
    ),
    Rule(
        (),
        check_index_values,
        f"{_ABORTS}, or reads outside the tensor: an index outside its rows",
        "tests/test_bad_input.py::test_out_of_range_row_indices_are_rejected_before_ggml",
    ),
]
