"""Graph attacks on ggml's RPC server, as a hostile client would send them (issue 23), each with its benign
twin: the same graph with only the hostile field set right, which must compute the right values.

    python -m pyggml.testing.fuzzers.rpc_attacks [--only NAME] [--json]

Every attack runs against a fresh server (`rpc.Server`, the real `python -m pyggml rpc-server`): the
hostile graph on one connection, then, on that connection if it is still open and on a new one, the
benign twin. Outcomes of the hostile graph:

- refused: the server answered with a refusal (a 7.1 server, patch 0023) or closed the connection, and
  still serves;
- killed: the server process ended (or stopped answering);
- wrote outside: it was computed and bytes outside every node's destination changed (the arena puts
  canary bytes between tensors);
- computed: it was computed and nothing outside the destinations changed (a read outside the sources
  leaves no trace here; the sanitizers see it).

Each graph is laid out by hand in one server buffer (`rpc_wire.Arena`) with the wire format of
ggml-rpc, so any field can be set to anything.
"""

from __future__ import annotations

import argparse
import functools
import json
import struct
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pyggml.testing.engine import oracles as O  # noqa: N812
from pyggml.testing.fuzzers.rpc_wire import COMPUTED, Arena, Connection, Desc, params
from pyggml.types import Op, UnaryOp

F32, F16, Q8_0, I32, I64 = 0, 1, 8, 26, 27
GLU_SWIGLU = 2
_RNG = np.random.default_rng(23)


def _values(ne: tuple[int, ...]) -> np.ndarray:
    return _RNG.uniform(-1, 1, size=tuple(reversed(ne))).astype(np.float32)


@dataclass
class Built:
    """A graph laid out in an arena: its nodes in order, the node whose values the benign twin checks
    and what they must be (NumPy order)."""

    nodes: list[Desc]
    out: Desc
    expect: np.ndarray | None
    extra: list[Desc] = field(default_factory=list)  # descriptors not placed in the arena
    node_ids: list[int] | None = None  # the node list sent, when it is not the nodes' ids
    dtype: type = np.float32
    writes: list[Desc] = field(default_factory=list)  # tensors a node may write besides the nodes
    rtol: float = 1e-4

    def tensors(self, arena: Arena) -> list[Desc]:
        placed = {d.id: d for d in arena.tensors}
        for d in self.nodes + self.extra:  # a node changed after placing replaces its placed descriptor
            placed[d.id] = d
        return list(placed.values())

    def ids(self) -> list[int]:
        return self.node_ids if self.node_ids is not None else [n.id for n in self.nodes]


class G:
    """A small graph builder on an arena: inputs with values, nodes with storage."""

    def __init__(self, arena: Arena) -> None:
        self.a = arena

    def input(self, type: int, ne: tuple[int, ...], values: np.ndarray | None = None) -> tuple[Desc, np.ndarray]:
        d = self.a.place(type, ne, flags=1)  # GGML_TENSOR_FLAG_INPUT
        v = _values(d.ne) if values is None else values
        self.a.set(d, v)
        return d, v

    def node(
        self, op: int, type: int, ne: tuple[int, ...], srcs: tuple[Desc | None, ...], op_params: bytes = b"", **kw: Any
    ) -> Desc:
        d = self.a.place(type, ne, op=int(op), src=tuple(s.id if s else 0 for s in srcs), **kw)
        if op_params:
            d.op_params = op_params
        return d

    def view_node(self, of: Desc, op: int, srcs: tuple[Desc | None, ...], op_params: bytes = b"") -> Desc:
        """A node whose result is `of` itself (set_rows, cpy, ... write into a view of their destination)."""
        d = of.with_(
            id=self.a.new_id(), op=int(op), src=tuple(s.id if s else 0 for s in srcs), view_src=of.id, flags=16
        )
        if op_params:
            d.op_params = op_params
        return d


Builder = Callable[[G, bool], Built]


@dataclass(frozen=True)
class Attack:
    name: str
    what: str
    build: Builder
    # what the patched server does with the hostile graph: refuse it, or compute it right where the
    # hostile field cannot hurt (then the hostile graph's values are checked as the twin's are)
    outcome: str = "refused"


ATTACKS: list[Attack] = []


def attack(what: str, outcome: str = "refused") -> Callable[[Builder], Builder]:
    def register(fn: Builder) -> Builder:
        ATTACKS.append(Attack(fn.__name__, what, fn, outcome))
        return fn

    return register


# --- gated delta net --------------------------------------------------------------------------------------
def _gdn(g: G, K: int, K_shape: int, qk_seqs: int = 1) -> Built:
    S, H, T, N = 16, 2, 4, 1
    q, qv = g.input(F32, (S, H, T, qk_seqs))
    k, kv = g.input(F32, (S, H, T, qk_seqs))
    v, vv = g.input(F32, (S, H, T, N))
    gate, gv = g.input(F32, (1, H, T, N), -np.abs(_values((1, H, T, N))))
    beta, bv = g.input(F32, (1, H, T, N), np.abs(_values((1, H, T, N))))
    st, sv = g.input(F32, (S, S, H, N))
    out = g.node(Op.GATED_DELTA_NET, F32, (S * H, T * N + K_shape * S * N), (q, k, v, gate, beta, st), params(K))
    expect = O.gated_delta_net(qv, kv, vv, gv, bv, sv, K) if K == K_shape and qk_seqs == N else None
    return Built([out], out, expect)


@attack("GATED_DELTA_NET whose op_params K (2) is larger than its destination holds (K 1): snapshots past it")
def gdn_k_past_destination(g: G, hostile: bool) -> Built:
    return _gdn(g, 2 if hostile else 1, 1)


@attack("GATED_DELTA_NET with K 64 and a destination for K 1")
def gdn_k_64(g: G, hostile: bool) -> Built:
    return _gdn(g, 64 if hostile else 1, 1)


@attack("GATED_DELTA_NET whose q and k have more sequences than v (the kernel divides by zero)")
def gdn_qk_more_sequences_than_v(g: G, hostile: bool) -> Built:
    return _gdn(g, 1, 1, qk_seqs=2 if hostile else 1)


# --- code the client chooses --------------------------------------------------------------------------------
_FUN = 0x4141414141  # where a hostile CUSTOM node makes the server jump


def _custom(g: G, hostile: bool, op: int, n_src: int) -> Built:
    srcs, vals = zip(*(g.input(F32, (8, 2)) for _ in range(n_src)))
    if hostile:  # ggml_custom_op_params / ggml_map_custom*_op_params: fun, n_tasks, userdata
        out = g.node(op, F32, (8, 2), srcs, struct.pack("<QiiQ", _FUN, 1, 0, 0))
        return Built([out], out, None)
    if n_src == 1:
        out = g.node(Op.DUP, F32, (8, 2), srcs)
        return Built([out], out, vals[0])
    out = g.node(Op.ADD, F32, (8, 2), srcs[:2])
    return Built([out], out, vals[0] + vals[1])


# one attack per op (custom_function_address, map_custom1_function_address, ...), with the op's sources
for _op, _n_src in ((Op.CUSTOM, 1), (Op.MAP_CUSTOM1, 1), (Op.MAP_CUSTOM2, 2), (Op.MAP_CUSTOM3, 3)):
    ATTACKS.append(
        Attack(
            f"{_op.name.lower()}_function_address",
            f"{_op.name}: the server calls the function at an address in op_params",
            functools.partial(_custom, op=_op, n_src=_n_src),
        )
    )


# --- index tensors --------------------------------------------------------------------------------------------
def _get_rows(g: G, index: list[int]) -> Built:
    a, av = g.input(F32, (8, 16))
    b, bv = g.input(I32, (len(index),), np.array(index, np.int32))
    out = g.node(Op.GET_ROWS, F32, (8, len(index)), (a, b))
    ok = all(0 <= i < 16 for i in index)
    return Built([out], out, O.get_rows(av, bv) if ok else None)


@attack("GET_ROWS with an index past the source's rows")
def get_rows_index_past_rows(g: G, hostile: bool) -> Built:
    return _get_rows(g, [3, 16, 0, 7] if hostile else [3, 15, 0, 7])


@attack("GET_ROWS with a negative index")
def get_rows_index_negative(g: G, hostile: bool) -> Built:
    return _get_rows(g, [3, -1, 0, 7] if hostile else [3, 1, 0, 7])


def _set_rows(g: G, index: list[int]) -> Built:
    dst, dv = g.input(F32, (8, 16))
    b, bv = g.input(F32, (8, len(index)))
    c, cv = g.input(I64, (len(index),), np.array(index, np.int64))
    out = g.view_node(dst, Op.SET_ROWS, (b, c, dst))
    ok = all(0 <= i < 16 for i in index)
    return Built([out], out, O.set_rows(dv, bv, cv) if ok else None)


@attack("SET_ROWS with an index past the destination's rows")
def set_rows_index_past_rows(g: G, hostile: bool) -> Built:
    return _set_rows(g, [2, 5, 1 << 20] if hostile else [2, 5, 9])


@attack("SET_ROWS with a negative index")
def set_rows_index_negative(g: G, hostile: bool) -> Built:
    return _set_rows(g, [2, -3, 9] if hostile else [2, 3, 9])


@attack("MUL_MAT_ID with an expert id past the experts")
def mul_mat_id_expert_past(g: G, hostile: bool) -> Built:
    as_, av = g.input(F32, (8, 4, 3))
    b, bv = g.input(F32, (8, 1, 2))
    ids, iv = g.input(I32, (2, 2), np.array([[0, 2], [1, 3 if hostile else 2]], np.int32))
    out = g.node(Op.MUL_MAT_ID, F32, (4, 2, 2), (as_, b, ids))
    return Built([out], out, None if hostile else O.mul_mat_id(av, bv, iv))


@attack("ADD_ID with a row id past b's rows")
def add_id_row_past(g: G, hostile: bool) -> Built:
    a, av = g.input(F32, (8, 2, 3))
    b, bv = g.input(F32, (8, 4))
    ids, iv = g.input(I32, (2, 3), np.array([[0, 1], [2, 3], [1, 4 if hostile else 0]], np.int32))
    out = g.node(Op.ADD_ID, F32, (8, 2, 3), (a, b, ids))
    return Built([out], out, None if hostile else O.add_id(av, bv, iv))


@attack("GET_ROWS of an index the graph itself computes (CPY F32 -> I32), out of range")
def get_rows_computed_index(g: G, hostile: bool) -> Built:
    a, av = g.input(F32, (8, 16))
    f, fv = g.input(F32, (4,), np.array([1, 99 if hostile else 9, 0, 3], np.float32))
    idx = g.a.place(I32, (4,))
    cast = g.view_node(idx, Op.CPY, (f, idx))
    out = g.node(Op.GET_ROWS, F32, (8, 4), (a, cast))
    return Built([cast, out], out, None if hostile else O.get_rows(av, fv.astype(np.int32)))


@attack("GET_ROWS into a destination declared smaller than its index (1024 rows into room for 16)")
def get_rows_destination_too_small(g: G, hostile: bool) -> Built:
    a, av = g.input(F32, (16, 8))
    n = 1024 if hostile else 16
    b, bv = g.input(I32, (n,), (np.arange(n) % 8).astype(np.int32))
    out = g.node(Op.GET_ROWS, F32, (16, 16), (a, b))
    return Built([out], out, None if hostile else O.get_rows(av, bv))


@attack("GET_ROWS whose index lies in its own destination: the rows it writes become indices past the rows")
def get_rows_index_inside_its_destination(g: G, hostile: bool) -> Built:
    a, av = g.input(I32, (4, 8), np.full((8, 4), 1000, np.int32))  # rows of 1000s: an index of 1000 is past them
    out = g.node(Op.GET_ROWS, I32, (4, 8), (a, None))
    index = np.arange(8, dtype=np.int32)[::-1].copy()
    if hostile:  # the index: the first 8 values of the destination itself
        b = Desc(g.a.new_id(), I32, (8, 1, 1, 1), (4, 32, 32, 32), buffer=out.buffer, data=out.data, view_src=out.id)
        g.a.set(b, index)
        extra = [b]
    else:
        b, _ = g.input(I32, (8,), index)
        extra = []
    out.src = (a.id, b.id)
    return Built([out], out, None if hostile else O.get_rows(av, index), extra=extra, dtype=np.int32)


# --- sources that disagree ------------------------------------------------------------------------------------
def _two_sources(
    g: G,
    hostile: bool,
    op: int,
    ne: tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]],
    expect: Callable[[np.ndarray, np.ndarray], np.ndarray],
) -> Built:
    """A node of `op` on two F32 inputs, `ne` the extents of a, b and the result (the hostile graph's, or its
    twin's); the twin's values are `expect(a, b)`."""
    a, av = g.input(F32, ne[0])
    b, bv = g.input(F32, ne[1])
    out = g.node(op, F32, ne[2], (a, b))
    return Built([out], out, None if hostile else expect(av, bv))


@attack("MUL_MAT whose sources' inner sizes disagree (64 against 32): reads past a's rows")
def mul_mat_inner_sizes_disagree(g: G, hostile: bool) -> Built:
    return _two_sources(g, hostile, Op.MUL_MAT, ((32, 4), (64 if hostile else 32, 2), (4, 2)), O.mul_mat)


@attack("MUL_MAT whose result claims more columns than b has: reads past b")
def mul_mat_result_larger_than_sources(g: G, hostile: bool) -> Built:
    return _two_sources(g, hostile, Op.MUL_MAT, ((32, 4), (32, 2), (4, 64 if hostile else 2)), O.mul_mat)


@attack("ADD whose result is larger than a: reads past a")
def add_result_larger_than_a(g: G, hostile: bool) -> Built:
    return _two_sources(g, hostile, Op.ADD, ((8, 2), (8, 1), (8, 64 if hostile else 2)), np.add)


@attack("ADD whose b does not broadcast to a (rows of 6 against 8)")
def add_sources_disagree(g: G, hostile: bool) -> Built:
    return _two_sources(g, hostile, Op.ADD, ((8, 2), (6 if hostile else 8, 1), (8, 2)), np.add)


@attack("CPY of 256 values into a destination of 16: writes past it")
def cpy_into_smaller_destination(g: G, hostile: bool) -> Built:
    a, av = g.input(F32, (256 if hostile else 16,))
    dst = g.a.place(F32, (16,))
    out = g.view_node(dst, Op.CPY, (a, dst))
    return Built([out], out, None if hostile else av)


@attack("a VIEW reaching 1 KiB past the tensor it views (inside the buffer), then read")
def view_past_its_source(g: G, hostile: bool) -> Built:
    a, av = g.input(F32, (8,))
    n = 256 if hostile else 8
    view = Desc(
        g.a.new_id(),
        F32,
        (n, 1, 1, 1),
        (4, 4 * n, 4 * n, 4 * n),
        buffer=a.buffer,
        data=a.data,
        op=int(Op.VIEW),
        src=(a.id,),
        view_src=a.id,
    )
    out = g.node(Op.ADD, F32, (n,), (view, view))
    return Built([view, out], out, None if hostile else av + av)


@attack("a source whose data lies past the end of its buffer")
def source_past_buffer_end(g: G, hostile: bool) -> Built:
    a, av = g.input(F32, (8,))
    b, bv = g.input(F32, (8,))
    if hostile:
        b = b.with_(data=g.a.base + g.a.size - 8)
    out = g.node(Op.ADD, F32, (8,), (a, b))
    return Built([out], out, None if hostile else av + bv, extra=[b])


@attack("a source with no storage (no buffer, data 0)")
def source_without_storage(g: G, hostile: bool) -> Built:
    a, av = g.input(F32, (8,))
    b, bv = g.input(F32, (8,))
    if hostile:
        b = b.with_(buffer=0, data=0)
    out = g.node(Op.ADD, F32, (8,), (a, b))
    return Built([out], out, None if hostile else av + bv, extra=[b])


# --- the graph's structure ---------------------------------------------------------------------------------------
def _add(g: G) -> tuple[Desc, np.ndarray]:
    a, av = g.input(F32, (8, 2))
    b, bv = g.input(F32, (8, 2))
    return g.node(Op.ADD, F32, (8, 2), (a, b)), av + bv


@attack("an op value of GGML_OP_COUNT")
def op_count(g: G, hostile: bool) -> Built:
    out, expect = _add(g)
    if hostile:
        out.op = len(Op)
    return Built([out], out, None if hostile else expect)


@attack("an op value far past GGML_OP_COUNT")
def op_far_past_count(g: G, hostile: bool) -> Built:
    out, expect = _add(g)
    if hostile:
        out.op = 0x7FFFFFF0
    return Built([out], out, None if hostile else expect)


@attack("node id 0 in the node list")
def node_id_zero(g: G, hostile: bool) -> Built:
    out, expect = _add(g)
    return Built([out], out, None if hostile else expect, node_ids=[0, out.id] if hostile else None)


@attack("the same node listed twice")
def node_listed_twice(g: G, hostile: bool) -> Built:
    out, expect = _add(g)
    return Built([out], out, None if hostile else expect, node_ids=[out.id, out.id] if hostile else None)


@attack(
    "a source chain 200,000 deep (a recursive deserializer overflows its stack); the server reads a node's "
    "sources and never theirs, so it computes the node right",
    outcome="computed",
)
def source_chain_200000(g: G, hostile: bool) -> Built:
    a, av = g.input(F32, (8, 2))
    b, bv = g.input(F32, (8, 2))
    depth = 200_000 if hostile else 1
    chain, nxt = [], b.id
    for _ in range(depth):  # each an alias of b whose src[0] is the next: read as b by the node
        d = b.with_(id=g.a.new_id(), op=int(Op.DUP), src=(nxt,), flags=0)
        chain.append(d)
        nxt = d.id
    out = g.node(Op.ADD, F32, (8, 2), (a, chain[-1]))
    return Built([out], out, av + bv, extra=chain)


@attack("a MUL_MAT whose F32 b (strides 0) is converted into a work buffer of 2^63 bytes")
def work_size_2_63(g: G, hostile: bool) -> Built:
    a, av = g.input(F16, (64, 1), _values((64, 1)).astype(np.float16))
    b, bv = g.input(F32, (64,))
    if hostile:  # 2^62 values that are all the same 64: no storage behind them but 256 bytes
        b = b.with_(ne=(64, 1 << 18, 1 << 19, 1 << 19), nb=(4, 0, 0, 0))
        out = g.a.place(F32, (1,))
        out = out.with_(ne=(1, 1 << 18, 1 << 19, 1 << 19), nb=(4, 0, 0, 0), op=int(Op.MUL_MAT), src=(a.id, b.id))
        return Built([out], out, None, extra=[b])
    out = g.node(Op.MUL_MAT, F32, (1, 1), (a, b))
    # the CPU converts b to F16 (a's dot product type) before the dot product
    return Built(
        [out], out, O.mul_mat(av.astype(np.float32), bv.astype(np.float16).astype(np.float32).reshape(1, 64)), rtol=1e-3
    )


# --- op_params the kernels trust ------------------------------------------------------------------------------------
@attack("UNARY with an op_params unary op past GGML_UNARY_OP_COUNT")
def unary_op_unknown(g: G, hostile: bool) -> Built:
    a, av = g.input(F32, (8, 2))
    out = g.node(Op.UNARY, F32, (8, 2), (a,), params(1000 if hostile else int(UnaryOp.RELU)))
    return Built([out], out, None if hostile else np.maximum(av, 0))


@attack("GLU with an op_params glu op past GGML_GLU_OP_COUNT")
def glu_op_unknown(g: G, hostile: bool) -> Built:
    a, av = g.input(F32, (16, 2))
    out = g.node(Op.GLU, F32, (8, 2), (a,), params(99 if hostile else GLU_SWIGLU, 0))
    return Built([out], out, None if hostile else O.swiglu(av))


@attack("ROPE with n_dims (16) past its rows (8)")
def rope_dims_past_row(g: G, hostile: bool) -> Built:
    a, av = g.input(F32, (8, 2, 3))
    pos, pv = g.input(I32, (3,), np.array([0, 1, 5], np.int32))
    p = params(0, 16 if hostile else 8, 0, 0, 0, 10000.0, 1.0, 0.0, 1.0, 32.0, 1.0)
    out = g.node(Op.ROPE, F32, (8, 2, 3), (a, pos), p)
    return Built([out], out, None if hostile else O.rope_ext(av, pv, n_dims=8))


@attack("ACC whose offset places b past the end of a")
def acc_offset_past_a(g: G, hostile: bool) -> Built:
    a, av = g.input(F32, (16,))
    b, bv = g.input(F32, (4,))
    offset = 56 if hostile else 8
    out = g.node(Op.ACC, F32, (16,), (a, b), params(64, 64, 64, offset, 0))
    return Built([out], out, None if hostile else O.acc(av, bv, 64, 64, 64, offset))


@attack("CONCAT along dim 7")
def concat_dim_out_of_range(g: G, hostile: bool) -> Built:
    a, av = g.input(F32, (4, 2))
    b, bv = g.input(F32, (4, 2))
    out = g.node(Op.CONCAT, F32, (8, 2), (a, b), params(7 if hostile else 0))
    return Built([out], out, None if hostile else O.concat(av, bv, 0))


@attack("GROUP_NORM with 0 groups (the kernel divides by it)")
def group_norm_zero_groups(g: G, hostile: bool) -> Built:
    a, av = g.input(F32, (4, 3, 4))
    out = g.node(Op.GROUP_NORM, F32, (4, 3, 4), (a,), params(0 if hostile else 2, 1e-6))
    return Built([out], out, None if hostile else O.group_norm(av, 2, 1e-6))


@attack("ARGSORT with an unknown sort order")
def argsort_unknown_order(g: G, hostile: bool) -> Built:
    a, av = g.input(F32, (8, 2), np.stack([_RNG.permutation(8), _RNG.permutation(8)]).astype(np.float32))
    out = g.node(Op.ARGSORT, I32, (8, 2), (a,), params(5 if hostile else 0))
    return Built([out], out, None if hostile else O.argsort(av, "asc"), dtype=np.int32)


# --- strides of dims of extent 1 ---------------------------------------------------------------------------------------
# ggml_is_contiguous (and _contiguous_1) skip the stride of a dim of extent 1, but kernels that walk a tensor as
# ggml_nrows rows of nb[1] or as planes of nb[2] up to ggml_nbytes use it.
def _odd_strides(d: Desc, nb: tuple[int, ...], hostile: bool) -> Desc:
    return d.with_(nb=nb) if hostile else d


@attack(
    "POOL_2D of a source whose plane stride (dim 2 of extent 1) is half a plane: the kernel walks planes of "
    "nb[2] up to ggml_nbytes and writes a second plane past its destination (found by the graph fuzzer)"
)
def pool_2d_plane_stride(g: G, hostile: bool) -> Built:
    x, xv = g.input(F32, (5, 5))
    x = _odd_strides(x, (4, 20, 50, 100), hostile)
    out = g.node(Op.POOL_2D, F32, (3, 3), (x,), params(1, 3, 3, 1, 1, 0, 0))
    return Built([out], out, None if hostile else O.pool_2d(xv, 1, 3, 3, 1, 1, 0, 0), extra=[x])


@attack("POOL_1D of a source whose row stride (dim 1 of extent 1) is 16 MiB: the kernel reads rows of nb[1]")
def pool_1d_row_stride(g: G, hostile: bool) -> Built:
    x, xv = g.input(F32, (6, 1, 3))
    x = _odd_strides(x, (4, 1 << 24, 24, 72), hostile)
    out = g.node(Op.POOL_1D, F32, (3, 1, 3), (x,), params(1, 2, 2, 0))
    return Built([out], out, None if hostile else O.pool_1d(xv, 1, 2, 2, 0), extra=[x])


@attack("SOFT_MAX_BACK in place over a gradient whose row stride (dim 1 of extent 1) is 256: rows written at nb[1]")
def soft_max_back_row_stride(g: G, hostile: bool) -> Built:
    dy, dyv = g.input(F32, (8, 1, 3))
    y, yv = g.input(F32, (8, 1, 3), np.abs(_values((8, 1, 3))))
    dy = _odd_strides(dy, (4, 256, 32, 96), hostile)
    out = g.view_node(dy, Op.SOFT_MAX_BACK, (dy, y), params(1.0, 0.0))
    return Built([out], out, None if hostile else O.soft_max_ext_back(dyv, yv, 1.0, 0.0), extra=[dy])


# --- empty tensors --------------------------------------------------------------------------------------------------
# A meta device holding no share of a split gets tensors with an extent of 0. ggml computes nothing for an
# empty node, but its constructors and kernels divide by the extents of sources (`%` and `/` by ne): an
# empty source feeding a node that computes, or an empty node a backend would still run, must not reach them.
@attack("MUL of a by an empty b (rows of 0): the kernel broadcasts b with i0 % ne10")
def mul_by_empty_b(g: G, hostile: bool) -> Built:
    a, av = g.input(F32, (8, 2))
    b, bv = g.input(F32, (0 if hostile else 8, 1))
    out = g.node(Op.MUL, F32, (8, 2), (a, b))
    return Built([out], out, None if hostile else av * bv)


@attack("MUL_MAT whose a holds 0 matrices: the constructor's b->ne[2] % a->ne[2] divides by 0")
def mul_mat_empty_matrices(g: G, hostile: bool) -> Built:
    a, av = g.input(F32, (8, 4, 0 if hostile else 1))
    b, bv = g.input(F32, (8, 2, 3))
    out = g.node(Op.MUL_MAT, F32, (4, 2, 3), (a, b))
    return Built([out], out, None if hostile else O.mul_mat(av, bv))


@attack(
    "MUL_MAT over an empty inner size (K = 0, a meta device's share of a weight split along K): computed as "
    "the sum of no terms, zeros",
    outcome="computed",
)
def mul_mat_empty_inner_size(g: G, hostile: bool) -> Built:
    k = 0 if hostile else 8
    a, av = g.input(F32, (k, 4))
    b, bv = g.input(F32, (k, 2))
    out = g.node(Op.MUL_MAT, F32, (4, 2), (a, b))
    return Built([out], out, np.zeros((2, 4), np.float32) if hostile else O.mul_mat(av, bv))


@attack(
    "MUL_MAT over an empty inner size with an F16 a (b converted into the work buffer: nothing to convert)",
    outcome="computed",
)
def mul_mat_empty_inner_size_f16(g: G, hostile: bool) -> Built:
    k = 0 if hostile else 8
    a, av = g.input(F16, (k, 4), _values((k, 4)).astype(np.float16))
    b, bv = g.input(F32, (k, 3))
    out = g.node(Op.MUL_MAT, F32, (4, 3), (a, b))
    expect = O.mul_mat(av.astype(np.float32), bv.astype(np.float16).astype(np.float32))
    return Built([out], out, np.zeros((3, 4), np.float32) if hostile else expect, rtol=1e-3)


@attack("MUL_MAT over an empty inner size whose a has nb[0] 0 (the CPU kernel asserts nb[0] is the element size)")
def mul_mat_empty_inner_size_bad_stride(g: G, hostile: bool) -> Built:
    a, _ = g.input(F32, (0, 4))
    b, _ = g.input(F32, (0, 2))
    if hostile:
        a = a.with_(nb=(0, 0, 0, 0))
    out = g.node(Op.MUL_MAT, F32, (4, 2), (a, b))
    return Built([out], out, None if hostile else np.zeros((2, 4), np.float32), extra=[a])


@attack("MUL_MAT over an empty inner size with a Q8_0 b (blocks of 32: only 1-element types are taken)")
def mul_mat_empty_inner_size_quantized_b(g: G, hostile: bool) -> Built:
    a, _ = g.input(F32, (0, 4))
    b, _ = g.input(Q8_0 if hostile else F32, (0, 2))
    out = g.node(Op.MUL_MAT, F32, (4, 2), (a, b))
    return Built([out], out, None if hostile else np.zeros((2, 4), np.float32))


@attack("MUL_MAT whose a is empty in its rows while b is not: a destination of 4 rows from none")
def mul_mat_empty_rows(g: G, hostile: bool) -> Built:
    a, av = g.input(F32, (8, 0 if hostile else 4))
    b, bv = g.input(F32, (8, 2))
    out = g.node(Op.MUL_MAT, F32, (4, 2), (a, b))
    return Built([out], out, None if hostile else O.mul_mat(av, bv))


@attack("SET_ROWS with an empty index of 0 rows per matrix: the constructor's b->ne[2] % c->ne[1] divides by 0")
def set_rows_empty_index(g: G, hostile: bool) -> Built:
    dst, dv = g.input(F32, (8, 16))
    n = 0 if hostile else 3
    b, bv = g.input(F32, (8, n))
    c, cv = g.input(I64, (n, 0 if hostile else 1), np.array([2, 5, 9][:n], np.int64))
    out = g.view_node(dst, Op.SET_ROWS, (b, c, dst))
    return Built([out], out, None if hostile else O.set_rows(dv, bv, cv))


@attack(
    "GET_ROWS with an empty index: an empty destination, left out of the graph the backend computes",
    outcome="computed",
)
def get_rows_empty_index(g: G, hostile: bool) -> Built:
    a, av = g.input(F32, (8, 16))
    index = [] if hostile else [3, 15, 0]
    b, bv = g.input(I32, (len(index),), np.array(index, np.int32))
    out = g.node(Op.GET_ROWS, F32, (8, len(index)), (a, b))
    return Built([out], out, O.get_rows(av, bv).reshape(len(index), 8))


@attack(
    "RMS_NORM then MUL by a weight of no rows, both empty: ggml-cpu fuses the pair and its fused kernel "
    "divides by the weight's rows (i01 % ne11) even for an empty node; left out of the graph, nothing runs",
    outcome="computed",
)
def rms_norm_mul_empty_weight(g: G, hostile: bool) -> Built:
    x, xv = g.input(F32, (0 if hostile else 8, 3))
    w, wv = g.input(F32, (0 if hostile else 8, 0 if hostile else 1))
    norm = g.node(Op.RMS_NORM, F32, x.ne, (x,), params(1e-6))
    out = g.node(Op.MUL, F32, x.ne, (norm, w))
    expect = np.zeros((3, 0), np.float32) if hostile else O.rms_norm(xv, 1e-6) * wv
    return Built([norm, out], out, expect.reshape(1, 1, 3, -1))


@attack("GATED_DELTA_NET whose v holds 0 sequences, its destination room for 1 (the kernel divides by v's sequences)")
def gdn_empty_v(g: G, hostile: bool) -> Built:
    S, H, T, K = 16, 2, 4, 1
    q, qv = g.input(F32, (S, H, T, 1))
    k, kv = g.input(F32, (S, H, T, 1))
    n = 0 if hostile else 1
    v, vv = g.input(F32, (S, H, T, n))
    gate, gv = g.input(F32, (1, H, T, n), -np.abs(_values((1, H, T, n))))
    beta, bv = g.input(F32, (1, H, T, n), np.abs(_values((1, H, T, n))))
    st, sv = g.input(F32, (S, S, H, n))
    out = g.node(Op.GATED_DELTA_NET, F32, (S * H, T + K * S), (q, k, v, gate, beta, st), params(K))
    return Built([out], out, None if hostile else O.gated_delta_net(qv, kv, vv, gv, bv, sv, K))


@attack("an empty node whose source has no storage (no buffer, data 0)")
def empty_node_source_without_storage(g: G, hostile: bool) -> Built:
    a, av = g.input(F32, (8, 16))
    b, bv = g.input(I32, (0,), np.zeros(0, np.int32))
    if hostile:
        a = a.with_(buffer=0, data=0)
    out = g.node(Op.GET_ROWS, F32, (8, 0), (a, b))
    return Built([out], out, None if hostile else np.zeros((1, 1, 0, 8), np.float32), extra=[a])


# --- running them ----------------------------------------------------------------------------------------------------
@dataclass
class Outcome:
    name: str
    hostile: str  # refused, killed, wrote outside, computed
    reason: str = ""
    benign_same_connection: bool | None = None  # the twin computed right on the hostile graph's connection
    benign_next_connection: bool | None = None  # and on a new one
    seconds: float = 0.0


def _benign(conn: Connection, atk: Attack) -> bool:
    arena = Arena(conn, size=1 << 20)
    built = atk.build(G(arena), False)
    answer = conn.compute(built.ids(), built.tensors(arena))
    if answer is not None and answer[0] != COMPUTED:
        return False
    got = arena.get(built.out, built.dtype)
    conn.free(arena.buffer)
    return built.expect is not None and np.allclose(got, built.expect, rtol=built.rtol, atol=1e-5)


def run(atk: Attack, threads: int = 1, python: str | None = None, cwd: str | None = None) -> Outcome:
    """One attack against a fresh server (of another pyggml build with `python` and `cwd`)."""
    from pyggml import rpc

    t0 = time.monotonic()
    with rpc.Server(threads=threads, python=python, cwd=cwd) as srv:
        running = lambda: srv.proc.poll() is None  # noqa: E731
        out = Outcome(atk.name, "computed")
        try:
            conn = Connection(srv.host, srv.port)
        except OSError as e:
            return Outcome(atk.name, "killed", f"no connection: {e}")
        open_ = True
        try:
            arena = Arena(conn, size=1 << 20)
            built = atk.build(G(arena), True)
            before = arena.snapshot()
            answer = conn.compute(built.ids(), built.tensors(arena))
            if answer is not None and answer[0] != COMPUTED:
                out.hostile, out.reason = "refused", answer[1]
            else:
                changed = arena.changed(before, arena.snapshot())
                bad = arena.outside(changed, built.nodes + built.writes)
                if bad:
                    out.hostile = "wrote outside"
                    out.reason = f"{sum(e - s for s, e in bad)} bytes outside the destinations changed"
                elif built.expect is not None and not np.allclose(
                    arena.get(built.out, built.dtype), built.expect, rtol=built.rtol, atol=1e-5
                ):
                    out.hostile = "computed wrong"
        except OSError as e:
            open_ = False
            out.hostile, out.reason = "refused", f"the connection closed ({e})"
        time.sleep(0.2)
        if not running():
            if open_:
                conn.close()
            out.hostile = "killed"
            out.reason = srv.output().strip().splitlines()[-1:] and srv.output().strip().splitlines()[-1] or ""
            out.seconds = time.monotonic() - t0
            return out
        if open_:
            try:
                out.benign_same_connection = _benign(conn, atk)
            except OSError:
                out.benign_same_connection = False
            conn.close()
        try:
            with Connection(srv.host, srv.port) as c2:
                out.benign_next_connection = _benign(c2, atk)
        except OSError as e:  # a server that stopped answering
            out.hostile, out.reason = "killed", f"it no longer answers ({e})"
        if not running():
            out.hostile = "killed"
    out.seconds = time.monotonic() - t0
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", action="append", help="run only these attacks (repeatable)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--server-python", help="run the servers with this interpreter (another pyggml build)")
    p.add_argument("--server-cwd", help="... from this folder (that build's source tree)")
    args = p.parse_args(argv)
    chosen = [a for a in ATTACKS if not args.only or a.name in args.only]
    results = []
    for atk in chosen:
        r = run(atk, python=args.server_python, cwd=args.server_cwd)
        results.append(r)
        if not args.json:
            print(
                f"{r.name:40s} {r.hostile:14s} twin: {r.benign_same_connection}/{r.benign_next_connection}  {r.reason[:110]}",
                flush=True,
            )
    counts: dict[str, int] = {}
    for r in results:
        counts[r.hostile] = counts.get(r.hostile, 0) + 1
    if args.json:
        print(json.dumps({"counts": counts, "attacks": [r.__dict__ for r in results]}, indent=1))
    else:
        print(f"{len(results)} attacks: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
