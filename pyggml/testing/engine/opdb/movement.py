# (the bad calls below pass wrong types and argument counts on purpose: pyggml must raise on them)
"""Specs of data movement: rows, copies, views, reshapes, permutations, concatenation, padding."""

from __future__ import annotations

from collections.abc import Callable
from itertools import permutations
from typing import Any

import numpy as np

from pyggml import ops, types
from pyggml._native import ffi, lib
from pyggml.errors import GraphError
from pyggml.testing.engine import oracles
from pyggml.testing.engine.opdb import *  # noqa: F403 - the database's vocabulary, opdb.__all__
from pyggml.testing.engine.opdb import hints
from pyggml.testing.engine.opdb.matmul import weight_samples

F32 = "f32"
_FLOATS = ("f32", "f16", "bf16")


def _gen(t: str) -> Gen:
    """Integers for integer tensors (a float would be truncated on the way in), floats otherwise."""
    return integers(-100, 100) if t in ("i32", "i16", "i8") else uniform()


def _inp(t: str, shape: tuple[int, ...], layout: Any = None) -> In:
    return In(t, shape, _gen(t), layout)


# --- node readers' helpers ---------------------------------------------------------------------------------
def _as_type(v: np.ndarray, t: Any, shape: tuple[int, ...]) -> np.ndarray:
    """v's values (in order) in NumPy shape `shape` as a tensor of ggml type t holds them: rounded to
    F16 / BF16, quantized, or cast to an integer type through ggml's own conversions.

    Quantized: the row quantizer the CPU kernels write with (the type's from_float_ref), not
    ggml_quantize_chunk (types.encode), which searches harder for some types (IQ4_NL: other blocks)."""
    t = types.as_type(t)
    v = np.ascontiguousarray(v).reshape(shape)
    if types.has_raw_dtype(t) or t == types.Type.BF16:
        return types.decode(t, types.encode(t, v), shape)
    f = np.ascontiguousarray(v, dtype=np.float32)
    out = np.empty(types.row_size(t, f.shape[-1]) * (f.size // f.shape[-1]), dtype=np.uint8)
    lib.ggml_get_type_traits(t).from_float_ref(ffi.from_buffer("float[]", f), ffi.from_buffer(out), f.size)
    return types.decode(t, out, shape)


def _shape(n: Node) -> tuple[int, ...]:
    """The node's NumPy-order 4-d shape."""
    return tuple(reversed(n.ne))


def _cpy_node(n: Node) -> np.ndarray:
    """CPY: src[0]'s elements in order, converted to the node's (the destination's) type and shape.
    src[1] is the destination (or the node itself, for ggml_cast): its old values do not matter."""
    assert n.src[0] is not None
    return _as_type(n.arg(0), n.tensor.type, _shape(n))


def _set_rows_node(n: Node) -> np.ndarray:
    """SET_ROWS: src[0] = b (rows), src[1] = c (indices), src[2] = a (the destination; ggml.c's legacy
    order). a is read after compute, so it already holds the rows written; the rows c does not name
    keep a's values either way. b's rows are converted to a's type as the kernel writes them."""
    b, c, a = n.arg(0), n.arg(1), n.arg(2)
    assert a is not None and b is not None and c is not None
    return oracles.set_rows(a, _as_type(b, n.tensor.type, b.shape), c)


# --- index ops --------------------------------------------------------------------------------------------------
bad(
    "get_rows",
    lambda c, t: ops.get_rows(c, t("q4_k", (3, 256)), t("i64", (2,))),
    ValueError,
    "b->type == GGML_TYPE_I32",
)
bad("get_rows", lambda c, t: ops.get_rows(c, t("f32", (3, 8)), t("i32", (2, 2))), ValueError, "a->ne[2] == b->ne[1]")
bad("get_rows", lambda c, t: ops.get_rows(c, t("f32", (10, 8)), t("f32", (3,))), ValueError, "b->type == GGML_TYPE_I32")
bad("get_rows", lambda c, t: ops.get_rows(c, t("f32", (2, 10, 8)), t("i32", (3,))), ValueError, "a->ne[2] == b->ne[1]")
bad(
    "get_rows",
    lambda c, t: ops.get_rows(c, t("i16", (10, 8)), t("i32", (3,))),
    ValueError,
    "reads rows of F32/F16/BF16/I32 or quantized types, not I16",
)
_WEIGHT_SAMPLES = weight_samples()


def _get_rows_node(n: Node) -> np.ndarray:
    """GET_ROWS: of a packed 2-d source (a model's token embedding: 254 M values for a batch's rows), only the
    rows the index takes are decoded from the source's bytes; otherwise the whole source."""
    idx = np.asarray(n.arg(1))
    p = n.tensor.ptr.src[0]
    ne = [int(p.ne[d]) for d in range(4)]
    t = types.Type(p.type)
    raw = n.raw[0] if n.raw else None
    row = types.row_size(t, ne[0])
    whole = (
        raw is None
        or ne[2] * ne[3] != 1
        or not lib.ggml_is_contiguous(p)
        or raw.size != row * ne[1]
        or idx.size == 0
        or idx.min() < 0
        or idx.max() >= ne[1]
    )
    if whole or raw is None:  # (raw is None is in `whole`: said again for the type checker)
        return oracles.get_rows(n.arg(0), n.arg(1))
    taken = np.unique(idx)
    rows = types.decode(t, np.ascontiguousarray(raw.reshape(ne[1], row)[taken]).reshape(-1), (taken.size, ne[0]))
    return oracles.get_rows(rows, np.searchsorted(taken, idx))


spec(
    "get_rows",
    reads=("GET_ROWS",),
    hints={"a": hints.get_rows_a, "b": hints.get_rows_b},
    from_node=_get_rows_node,
    grad=[Grad({"a": (F32, (5, 4)), "b": ("i32", (6,), integers(0, 5))}, ("a",))],
    samples=[
        *_WEIGHT_SAMPLES["get_rows"],  # the quantized weight types' (opdb/matmul.py)
        # the tag is a's type alone (the index is always I32)
        *(
            Sample({"a": (t, (10, 32)), "b": ("i32", (6,), integers(0, 10))}, tag=t)
            for t in ("f32", "f16", "q8_0", "q4_0")
        ),
        Sample({"a": ("f32", (2, 3, 7, 8)), "b": ("i32", (2, 3, 4), integers(0, 7))}, tag="f32", variant="batched"),
        Sample({"a": ("i32", (6, 4), integers(-100, 100)), "b": ("i32", (5,), integers(0, 6))}, exact=True),
        # four types x layouts (repeated indices; a permuted with whole rows; a transposed (strided) index)
        *(
            s
            for t in ("f32", "f16", "bf16", "i32")
            for s in (
                Sample({"a": _inp(t, (11, 13)), "b": ("i32", (7,), integers(0, 11))}, tag=t, variant="odd", exact=True),
                Sample(
                    {"a": _inp(t, (3, 5, 7, 9)), "b": ("i32", (3, 5, 2), integers(0, 7))},
                    tag=t,
                    variant="batched_odd",
                    exact=True,
                ),
                Sample(
                    {"a": _inp(t, (7, 3, 5), Permuted((0, 2, 1, 3))), "b": ("i32", (3, 4), integers(0, 7))},
                    tag=t,
                    variant="a_permuted",
                    exact=True,
                ),
                Sample(
                    {"a": _inp(t, (3, 7, 5)), "b": In("i32", (6, 3), integers(0, 7), Transposed())},
                    tag=t,
                    variant="index_transposed",
                    exact=True,
                ),
            )
        ),
        # the index is a gapped view (every other element of its input: b[1::2])
        Sample(
            {"a": _inp("f32", (9, 5)), "b": ("i32", (10,), integers(0, 9))},
            tag="f32",
            variant="index_strided",
            call=lambda xp, x: xp.get_rows(x.a, xp.view_nd(x.b, [5, 1, 1, 1], [8, 40, 40, 40], 4)),
            exact=True,
        ),
    ],
)

bad(
    "set_rows",
    lambda c, t: ops.set_rows(c, t("f32", (2, 6, 8)), t("f32", (3, 2, 8)), t("i64", (2, 2))),
    ValueError,
    "a->ne[2] == b->ne[2]",
)
bad(
    "set_rows",
    lambda c, t: ops.set_rows(c, t("f32", (4, 6, 8)), t("f32", (4, 2, 8)), t("i64", (3, 2))),
    ValueError,
    "b->ne[2] % c->ne[1] == 0",
)
bad(
    "set_rows",
    lambda c, t: ops.set_rows(c, t("f32", (6, 8)), t("bf16", (2, 8)), t("i64", (2,))),
    ValueError,
    "b->type == GGML_TYPE_F32 || b->type == GGML_TYPE_F16",
)
bad(
    "set_rows",
    lambda c, t: ops.set_rows(c, ops.transpose(c, t("f32", (8, 6))), t("f32", (2, 8)), t("i64", (2,))),
    ValueError,
    "ggml_is_contiguous_rows(a)",
)
bad(
    "set_rows",
    lambda c, t: ops.set_rows(c, t("f32", (10, 8)), t("f32", (3, 8)), t("f32", (3,))),
    ValueError,
    "c->type == GGML_TYPE_I64",
)
bad(
    "set_rows",
    lambda c, t: ops.set_rows(c, t("f32", (10, 8)), t("f32", (3, 8)), t("i64", (2,))),
    ValueError,
    "b->ne[1] == c->ne[0]",
)
bad(
    "set_rows",
    lambda c, t: ops.set_rows(c, t("f32", (10, 8)), t("f32", (3, 4)), t("i64", (3,))),
    ValueError,
    "== b->ne[",
)
bad(
    "set_rows",
    lambda c, t: ops.set_rows(c, t("i32", (10, 8)), t("f32", (3, 8)), t("i64", (3,))),
    ValueError,
    "cannot convert rows into I32",
)


def _set_rows_rounded(ta: str) -> Callable[..., np.ndarray]:
    """The oracle takes b's values as they are: rows written into an F16 / BF16 a are b rounded to a's type
    (the host sees a BF16 a as float32, so the oracle cannot tell it from a's array): exact then."""
    return lambda x: oracles.set_rows(x.a, oracles.round_to(x.b, ta), x.c)


_SET_LAYOUTS = {
    # a, b, c (NumPy shapes); c's rows addressed: a's dim 1
    "odd": ((11, 13), (5, 13), (5,)),
    "batched": ((2, 3, 7, 5), (2, 3, 3, 5), (2, 3, 3)),
    "broadcast_index": ((3, 2, 9, 7), (3, 2, 4, 7), (1, 2, 4)),
}
_SET_PAIRS = [(ta, tb, tc) for ta in _FLOATS for tb in ("f32", "f16") for tc in ("i32", "i64")]


def _set_rows_sample(i: int, ta: str, tb: str, tc: str) -> Sample:
    """Destination ta x source tb x index tc, in the i-th layout of the three (in turn)."""
    lay = list(_SET_LAYOUTS)[i % 3]
    sa, sb, sc = _SET_LAYOUTS[lay]
    return Sample(
        {"a": (ta, sa), "b": (tb, sb), "c": (tc, sc, permutation_rows(sa[-2]))},
        tag=ta,
        variant=f"{tb}_{tc}_{lay}",
        oracle=_set_rows_rounded(ta),
        exact=True,
    )


spec(
    "set_rows",
    reads=("SET_ROWS",),
    from_node=_set_rows_node,
    hints={"a": hints.set_rows_a, "b": hints.set_rows_b, "c": hints.set_rows_c},
    samples=[
        *_WEIGHT_SAMPLES["set_rows"],  # the quantized weight types' (opdb/matmul.py)
        Sample(
            {"a": ("f32", (10, 8)), "b": ("f32", (4, 8)), "c": ("i64", (4,), permutation_rows(10))},
            tag="f32",
            variant="i64",
        ),
        Sample(
            {"a": ("f32", (2, 3, 6, 8)), "b": ("f32", (2, 3, 2, 8)), "c": ("i32", (2, 3, 2), permutation_rows(6))},
            tag="f32",
            variant="i32_batched",
        ),
        Sample(
            {"a": ("f32", (2, 4, 6, 8)), "b": ("f32", (2, 4, 3, 8)), "c": ("i64", (1, 2, 3), permutation_rows(6))},
            tag="f32",
            variant="broadcast_index",
        ),
        # (these two compare the unrounded b within the F16 bound, as they always did)
        Sample({"a": ("f16", (7, 16)), "b": ("f32", (3, 16)), "c": ("i64", (3,), permutation_rows(7))}, tag="f16"),
        Sample({"a": ("f32", (7, 16)), "b": ("f16", (3, 16)), "c": ("i32", (3,), permutation_rows(7))}, tag="f16_src"),
        Sample(
            {"a": ("q8_0", (6, 64)), "b": ("f32", (2, 64)), "c": ("i64", (2,), permutation_rows(6))},
            tag="q8_0",
            bounds=[Bound(NMSE_Q8_STORE)],
        ),
        *(_set_rows_sample(i, ta, tb, tc) for i, (ta, tb, tc) in enumerate(_SET_PAIRS)),
        # b a permuted view (whole rows), the index transposed (strided), the destination a gapped view of a
        Sample(
            {
                "a": ("f32", (3, 7, 5)),
                "b": In("f32", (2, 3, 5), layout=Permuted((0, 2, 1, 3))),
                "c": ("i64", (3, 2), permutation_rows(7)),
            },
            tag="f32",
            variant="b_permuted",
            exact=True,
        ),
        Sample(
            {
                "a": ("f16", (3, 7, 5)),
                "b": ("f32", (3, 2, 5)),
                "c": In("i32", (2, 3), lambda rng, s: permutation_rows(7)(rng, (3, 2)).T, Transposed()),
            },
            tag="f16",
            variant="index_transposed",
            oracle=_set_rows_rounded("f16"),
            exact=True,
        ),
        # the result is a view of the gapped destination: cont makes it contiguous on both sides
        Sample(
            {
                "a": In("f32", (9, 12), layout=Columns(2, 10)),
                "b": ("f32", (3, 8)),
                "c": ("i64", (3,), permutation_rows(9)),
            },
            tag="f32",
            variant="dst_view",
            call=lambda xp, x: xp.cont(xp.set_rows(x.a, x.b, x.c)),
            exact=True,
        ),
    ],
)


# --- copies ----------------------------------------------------------------------------------------------------
def _cpy_to(td: str) -> Callable[..., np.ndarray]:
    """ggml's cpy takes the destination tensor, the oracle a dtype: a's values in order, as a tensor of b's
    type holds them (the host sees BF16 as float32, so b's array cannot tell the type), in b's shape."""
    return lambda x: oracles.round_to(x.a, td).reshape(x.b.shape)


bad(
    "cpy", lambda c, t: ops.cpy(c, t("q4_0", (2, 64)), t("q8_0", (2, 64))), GraphError, "converts only to F32 or itself"
)
bad("cpy", lambda c, t: ops.cpy(c, t("i32", (2, 32)), t("q8_0", (2, 32))), GraphError, "only F32/F16/BF16 quantize")
bad(
    "cpy",
    lambda c, t: ops.cpy(c, ops.transpose(c, t("f32", (32, 2))), t("q8_0", (2, 32))),
    GraphError,
    "contiguous rows",
)
bad(
    "cpy",
    lambda c, t: ops.cpy(c, t("f32", (2, 64)), ops.view_2d(c, t("q8_0", (4, 64)), 64, 2, 2 * 68)),
    GraphError,
    "contiguous destination",
)
bad("cpy", lambda c, t: ops.cpy(c, t("f32", (2, 8)), "b"), TypeError, "b must be a Tensor")
bad(
    "cpy",
    lambda c, t: ops.cpy(c, t("f32", (3, 8)), t("f32", (3, 7))),
    ValueError,
    "ggml_nelements(a) == ggml_nelements(b)",
)
bad("cpy", lambda c, t: ops.cpy(c, t("f16", (3, 8)), t("i32", (3, 8))), ValueError, "no conversion from F16 to I32")
bad("cpy", lambda c, t: ops.cpy(c, t("q8_0", (2, 64)), t("f16", (2, 64))), ValueError, "converts only to F32")
bad("cpy", lambda c, t: ops.cpy(c, t("i32", (3, 8)), t("i64", (3, 8))), ValueError, "no conversion from I32 to I64")
bad("cpy", lambda c, t: ops.cpy(c, t("f32", (4, 16)), t("q8_0", (1, 64))), ValueError, "multiple of Q8_0's block size")


def _cpy_samples(ts: str, td: str) -> list[Sample]:
    """One conversion in four layouts: reshaped, a transposed, a permuted, into a gapped view of b."""
    src = (ts, (5, 7), integers(-100, 100)) if "i32" in (ts, td) else (ts, (5, 7))
    gen = src[2] if len(src) > 2 else None
    tag, to = f"{ts}_{td}", _cpy_to(td)
    return [
        Sample({"a": src, "b": (td, (7, 5))}, tag=tag, variant="reshaped", oracle=to, exact=True),
        Sample(
            {"a": In(ts, (5, 7), gen, Transposed()), "b": (td, (7, 5))},
            tag=tag,
            variant="transposed",
            oracle=to,
            exact=True,
        ),
        Sample(
            {"a": In(ts, (3, 5, 2), gen, Permuted((2, 0, 1, 3))), "b": (td, (2, 3, 5))},
            tag=tag,
            variant="permuted",
            oracle=to,
            exact=True,
        ),
        # the destination is a gapped view: columns 1..8 of each row of a (5, 9) b; the result is a view
        # of it, made contiguous on the ggml side (the oracle's result is contiguous already)
        Sample(
            {"a": src, "b": In(td, (5, 9), layout=Columns(1, 8))},
            tag=tag,
            variant="dst_view",
            call=lambda xp, x: xp.cont(xp.cpy(x.a, x.b)),
            oracle=to,
            exact=True,
        ),
    ]


_CPY_PAIRS = [(s, d) for s in _FLOATS for d in _FLOATS] + [("f32", "i32"), ("i32", "f32"), ("i32", "i32")]
spec(
    "cpy",
    reads=("CPY",),
    from_node=_cpy_node,
    hints={"b": hints.cpy_b},
    grad=[Grad({"a": (F32, (3, 5)), "b": (F32, (3, 5))}, ("a",), oracle=_cpy_to("f32"))],
    samples=[
        *_WEIGHT_SAMPLES["cpy"],  # the quantized weight types' (opdb/matmul.py)
        # (these compare a's values unrounded within the destination type's bound, as they always did)
        Sample({"a": ("f32", (3, 16)), "b": ("f16", (3, 16))}, oracle=_cpy_to("f32")),
        Sample({"a": ("f16", (3, 16)), "b": ("f32", (6, 8))}, oracle=_cpy_to("f32")),
        Sample({"a": ("f32", (3, 16)), "b": ("bf16", (3, 16))}, oracle=_cpy_to("f32")),
        Sample({"a": ("f32", (2, 64)), "b": ("q8_0", (2, 64))}, oracle=_cpy_to("f32"), bounds=[Bound(NMSE_Q8_STORE)]),
        Sample(
            {"a": In("f32", (4, 6), layout=Transposed()), "b": ("f32", (6, 4))},
            tag="f32_transposed",
            oracle=_cpy_to("f32"),
        ),
        Sample({"a": ("f32", (3, 8), integers(-50, 50)), "b": ("i32", (3, 8))}, oracle=_cpy_to("i32"), exact=True),
        *(s for ts, td in _CPY_PAIRS for s in _cpy_samples(ts, td)),
    ],
)

# --- dup, cont, cont_Nd --------------------------------------------------------------------------------------------
bad("dup", lambda c, t: ops.dup(c, "a"), TypeError, "a must be a Tensor")
spec(
    "dup",
    reads=("DUP",),
    from_node=lambda n: oracles.dup(n.arg(0)),
    samples=[
        Sample({"a": ("f32", (2, 3, 8))}),
        Sample({"a": In("f16", (2, 3, 8), layout=Permuted((2, 0, 1, 3)))}, variant="permuted"),
        *(
            Sample({"a": _inp(t, (5, 7), Transposed())}, variant="transposed", exact=True)
            for t in ("f32", "f16", "bf16", "i32")
        ),
    ],
)


def _cont_node(n: Node) -> np.ndarray:
    """CONT (ggml_cont and cont_Nd): src[0]'s elements in order, in the node's shape."""
    return oracles.cont_nd(n.arg(0), n.ne)


bad("cont", lambda c, t: ops.cont(c, None), TypeError, "a must be a Tensor")
spec(
    "cont",
    reads=("CONT",),
    from_node=_cont_node,
    grad=[Grad({"a": In(F32, (3, 5), layout=Transposed())}, ("a",), variant="transposed")],
    samples=[
        Sample({"a": In("f32", (5, 8), layout=Transposed())}),
        Sample({"a": In("f16", (2, 5, 8), layout=Permuted((1, 2, 0, 3)))}),
        *(
            s
            for t in ("f32", "f16", "bf16", "i32")
            for s in (
                Sample({"a": _inp(t, (2, 3, 5, 7), Permuted((3, 1, 0, 2)))}, variant="permuted", exact=True),
                Sample({"a": _inp(t, (5, 9), Columns(1, 8))}, variant="gapped", exact=True),
            )
        ),
        Sample({"a": In("q8_0", (3, 5, 64), layout=Permuted((0, 2, 1, 3)))}, variant="rows_of_blocks", exact=True),
    ],
)

_CONT_NE = {1: (40,), 2: (10, 4), 3: (5, 2, 4), 4: (5, 2, 2, 2)}  # of a (5, 8)
_ND = {1: (105,), 2: (15, 7), 3: (5, 7, 3), 4: (7, 5, 1, 3)}  # of a (3, 5, 7)
_CONT_BAD_NE = {1: (25,), 2: (5, 5), 3: (5, 1, 5), 4: (5, 1, 5, 1)}  # not 24 elements
for _n in range(1, 5):
    bad(
        f"cont_{_n}d",
        lambda c, t, _n=_n: getattr(ops, f"cont_{_n}d")(c, t("f32", (3, 8)), *_CONT_BAD_NE[_n]),
        ValueError,
        "ggml_nelements(a) == (ne0*ne1*ne2*ne3)",
    )
    if _n == 2:
        bad(f"cont_{_n}d", lambda c, t: ops.cont_2d(c, t("q4_0", (2, 64)), 16, 8), ValueError, "block size 32")
        bad(f"cont_{_n}d", lambda c, t: ops.cont_2d(c, t("f32", (3, 8)), 2.5, 8), TypeError, "ne must be integers")
    # the wrappers take the extents one by one (cont_2d(a, ne0, ne1)), the oracle as one shape
    spec(
        f"cont_{_n}d",
        lambda xp, x, *ne, _n=_n: getattr(xp, f"cont_{_n}d")(x.a, *ne),
        oracle=lambda x, *ne: oracles.cont_nd(x.a, ne),
        samples=[
            Sample({"a": In("f32", (5, 8), layout=Transposed())}, _CONT_NE[_n]),
            Sample({"a": In("f16", (5, 8), layout=Transposed())}, _CONT_NE[_n]),
            *(
                Sample({"a": _inp(t, (3, 5, 7), Permuted((1, 2, 0, 3)))}, _ND[_n], variant="permuted", exact=True)
                for t in ("f32", "bf16", "i32")
            ),
        ],
    )

# --- reshapes (views: read as they are) ---------------------------------------------------------------------------
_Q4_NE = {1: (384,), 2: (64, 6), 3: (64, 3, 2), 4: (32, 3, 2, 2)}  # of a q4_0 (3, 2, 64): whole blocks
for _n in range(1, 5):
    bad(
        f"reshape_{_n}d",
        lambda c, t, _n=_n: getattr(ops, f"reshape_{_n}d")(c, t("f32", (3, 8)), *_CONT_BAD_NE[_n]),
        ValueError,
        "ggml_nelements(a) == ",
    )
    bad(
        f"reshape_{_n}d",
        lambda c, t, _n=_n: getattr(ops, f"reshape_{_n}d")(
            c, ops.transpose(c, t("f32", (3, 8))), *((24,) + (1,) * (_n - 1))
        ),
        ValueError,
        "ggml_is_contiguous(a)",
    )
    if _n == 2:
        bad(f"reshape_{_n}d", lambda c, t: ops.reshape_2d(c, t("q4_0", (2, 64)), 16, 8), ValueError, "block size 32")
        bad(f"reshape_{_n}d", lambda c, t: ops.reshape_2d(c, t("f32", (3, 8)), -3, -8), ValueError, "must be positive")
    # the wrappers take the extents one by one (reshape_2d(a, ne0, ne1)), the oracle as one shape
    spec(
        f"reshape_{_n}d",
        lambda xp, x, *ne, _n=_n: getattr(xp, f"reshape_{_n}d")(x.a, *ne),
        oracle=lambda x, *ne: oracles.reshape(x.a, ne),
        samples=[
            Sample({"a": ("f32", (5, 8))}, _CONT_NE[_n]),
            # read through cont (a copy of the view), as this case always was
            Sample(
                {"a": ("f16", (5, 8))},
                _CONT_NE[_n],
                call=lambda xp, x, *ne, _n=_n: xp.cont(getattr(xp, f"reshape_{_n}d")(x.a, *ne)),
                oracle=lambda x, *ne: oracles.reshape(x.a, ne),
            ),
            *(Sample({"a": _inp(t, (3, 5, 7))}, _ND[_n], variant="odd", exact=True) for t in ("f32", "f16", "i32")),
            Sample({"a": ("q4_0", (3, 2, 64))}, _Q4_NE[_n], variant="blocks", exact=True),
        ],
    )

# ggml_reshape takes the target shape as a tensor (only its ne is read), the oracle as a shape
bad("reshape", lambda c, t: ops.reshape(c, t("f32", (3, 8)), t("f32", (5, 5))), ValueError, "ggml_nelements(a) == ")
bad("reshape", lambda c, t: ops.reshape(c, t("f32", (3, 8)), (8, 3)), TypeError, "b must be a Tensor")
spec(
    "reshape",
    lambda xp, x, ne: xp.reshape(x.a, xp.new_tensor("f32", list(ne))),
    hints={"b": hints.reshape_b},
    oracle=lambda x, ne: oracles.reshape(x.a, ne),
    grad=[Grad({"a": (F32, (3, 4))}, ("a",), ((6, 2),))],
    samples=[
        Sample({"a": ("f32", (4, 6))}, ((3, 8),)),
    ],
)

# --- permute, transpose (views, made contiguous with cont so every backend returns them alike) ---------------------
_SOME_AXES = ((1, 0, 2, 3), (2, 0, 1, 3), (0, 2, 1, 3), (3, 2, 1, 0), (1, 3, 0, 2))


def _axes_name(axes: tuple[int, ...]) -> str:
    return "".join(map(str, axes))


bad("permute", lambda c, t: ops.permute(c, t("q4_0", (2, 3, 64)), 1, 0, 2, 3), ValueError, "whole blocks")
bad(
    "permute",
    lambda c, t: ops.permute(c, t("f32", (2, 3, 4, 5)), 0, 2.0, 1, 3),
    TypeError,
    "axis1 must be an integer, got float",
)
bad(
    "permute",
    lambda c, t: ops.permute(c, t("f32", (2, 3, 4, 5)), "0", 2, 1, 3),
    TypeError,
    "axis0 must be an integer, got str",
)
bad("permute", lambda c, t: ops.permute(c, t("f32", (3, 8)), 0, 0, 1, 2), ValueError, "axis")
bad("permute", lambda c, t: ops.permute(c, t("f32", (3, 8)), 0, 1, 2, 4), ValueError, "axis")
spec(
    "permute",
    lambda xp, x, *axes: xp.cont(xp.permute(x.a, *axes)),
    grad=[Grad({"a": (F32, (2, 3, 5))}, ("a",), (2, 0, 1, 3))],
    samples=[
        *(Sample({"a": ("f32", (2, 3, 4, 5))}, axes, variant=_axes_name(axes)) for axes in _SOME_AXES),
        Sample({"a": ("f16", (2, 3, 4, 5))}, (2, 0, 1, 3), variant="2013"),
        # all 24 permutations, odd extents (NumPy (2, 3, 5, 7): ggml ne [7, 5, 3, 2])
        *(
            s
            for axes in permutations(range(4))
            for s in (
                Sample({"a": _inp("f32", (2, 3, 5, 7))}, axes, variant=f"all_{_axes_name(axes)}", exact=True),
                Sample({"a": _inp("f16", (3, 5, 2, 7))}, axes, variant=f"all_{_axes_name(axes)}", exact=True),
            )
        ),
        *(
            Sample({"a": _inp(t, (2, 3, 5, 7))}, axes, variant=_axes_name(axes), exact=True)
            for t in ("bf16", "i32")
            for axes in (*_SOME_AXES, (2, 3, 0, 1))
        ),
        # a permutation of a permutation
        Sample({"a": _inp("f32", (2, 3, 5, 7), Permuted((2, 0, 3, 1)))}, (1, 3, 0, 2), variant="twice", exact=True),
    ],
)

bad("transpose", lambda c, t: ops.dup(c, ops.transpose(c, t("q8_0", (2, 64)))), ValueError, "whole blocks")
bad("transpose", lambda c, t: ops.cont(c, ops.transpose(c, t("q4_0", (2, 64)))), ValueError, "whole blocks")
bad("transpose", lambda c, t: ops.transpose(c, np.eye(3)), TypeError, "a must be a Tensor")
spec(
    "transpose",
    lambda xp, x: xp.cont(xp.transpose(x.a)),
    grad=[Grad({"a": (F32, (3, 5))}, ("a",))],
    samples=[
        Sample({"a": ("f32", (2, 3, 7))}),
        Sample({"a": ("f16", (6, 7))}),
        *(
            s
            for t in ("f32", "f16", "bf16", "i32")
            for s in (
                Sample({"a": _inp(t, (7, 5))}, variant="odd", exact=True),
                Sample({"a": _inp(t, (3, 11, 4))}, variant="3d", exact=True),
            )
        ),
        Sample({"a": _inp("f32", (2, 3, 5, 7), Permuted((0, 2, 1, 3)))}, variant="of_permuted", exact=True),
    ],
)

# --- concat, repeat, pad ---------------------------------------------------------------------------------------------


def _concat_b(dim: int, shape: list[int], extent: int) -> tuple[int, ...]:
    """a's NumPy shape with b's extent along ggml dim `dim`."""
    out = list(shape)
    out[len(out) - 1 - dim] = extent
    return tuple(out)


bad("concat", lambda c, t: ops.concat(c, t("bf16", (3, 8)), t("f16", (3, 8)), 1), ValueError, "a->type == b->type")
bad("concat", lambda c, t: ops.concat(c, t("f32", (3, 8)), t("f32", (3, 8)), 1.5), TypeError, "dim")
bad(
    "concat",
    lambda c, t: ops.concat(c, t("f32", (3, 8)), t("f32", (3, 8)), 4),
    ValueError,
    "dim >= 0 && dim < GGML_MAX_DIMS",
)
bad(
    "concat",
    lambda c, t: ops.concat(c, t("f32", (3, 8)), t("f32", (3, 8)), -1),
    ValueError,
    "dim >= 0 && dim < GGML_MAX_DIMS",
)
bad("concat", lambda c, t: ops.concat(c, t("f32", (3, 8)), t("f16", (3, 8)), 0), ValueError, "a->type == b->type")
bad("concat", lambda c, t: ops.concat(c, t("f32", (3, 8)), t("f32", (2, 4)), 1), ValueError, "== b->ne[")
spec(
    "concat",
    reads=("CONCAT",),
    hints={"b": hints.same_as_a},
    from_node=lambda n: oracles.concat(n.arg(0), n.arg(1), n.param("dim")),
    samples=[
        *(
            Sample({"a": ("f32", (2, 3, 4, 5)), "b": ("f32", _concat_b(d, [2, 3, 4, 5], 2))}, (d,), variant=f"dim{d}")
            for d in range(4)
        ),
        Sample({"a": ("f16", (3, 8)), "b": ("f16", (2, 8))}, (1,), variant="dim1"),
        Sample({"a": In("f32", (4, 3), layout=Transposed()), "b": ("f32", (3, 2))}, (0,), variant="dim0_transposed"),
        # every dim, four types, contiguous and permuted a (b's extent along dim differs from a's)
        *(
            s
            for t in ("f32", "f16", "bf16", "i32")
            for d in range(4)
            for s in (
                Sample(
                    {"a": _inp(t, (2, 3, 5, 7)), "b": _inp(t, _concat_b(d, [2, 3, 5, 7], (1, 2, 4, 3)[d]))},
                    (d,),
                    variant=f"dim{d}_odd",
                    exact=True,
                ),
                # a is a (dims 0 and 1 swapped) view of its input: NumPy (2, 3, 7, 5) -> (2, 3, 5, 7)
                Sample(
                    {
                        "a": _inp(t, (2, 3, 7, 5), Permuted((1, 0, 2, 3))),
                        "b": _inp(t, _concat_b(d, [2, 3, 5, 7], (1, 2, 4, 3)[d])),
                    },
                    (d,),
                    variant=f"dim{d}_a_permuted",
                    exact=True,
                ),
            )
        ),
    ],
)

# ggml_repeat takes the target shape as a tensor (only its ne is read; made of a's type), the oracle as a shape
bad("repeat", lambda c, t: ops.repeat(c, t("f32", (3, 8)), [6, 8]), TypeError, "b must be a Tensor")
bad("repeat", lambda c, t: ops.repeat(c, t("f32", (3, 8)), t("f32", (4, 8))), ValueError, "ggml_can_repeat(a, b)")
bad("repeat", lambda c, t: ops.repeat(c, t("q8_0", (1, 32)), t("q8_0", (2, 32))), ValueError, "got Q8_0")
bad(
    "repeat", lambda c, t: ops.repeat(c, ops.transpose(c, t("f32", (4, 4))), t("f32", (8, 8))), ValueError, "contiguous"
)
spec(
    "repeat",
    lambda xp, x, ne: xp.repeat(x.a, xp.new_tensor(x.a.type, list(ne))),
    hints={"b": hints.twice_ne1_of_a},
    oracle=lambda x, ne: oracles.repeat(x.a, ne),
    reads=("REPEAT",),
    from_node=lambda n: oracles.repeat(n.arg(0), n.ne),
    grad=[Grad({"a": (F32, (3, 1, 5))}, ("a",), ((5, 4, 3, 2),))],
    samples=[
        Sample({"a": ("f32", (1, 3, 4))}, ((8, 6, 2, 2),)),
        Sample({"a": ("f16", (2, 4))}, ((4, 6),)),
        *(
            s
            for t in ("f32", "f16", "bf16", "i32", "i16")
            for s in (
                Sample({"a": _inp(t, (1, 3, 1, 5))}, ((10, 3, 3, 2),), variant="odd", exact=True),
                Sample({"a": _inp(t, (7,))}, ((7, 5),), variant="rows", exact=True),
            )
        ),
        Sample({"a": _inp("f32", (3, 1, 5), Permuted((0, 2, 1, 3)))}, ((5, 6, 2),), variant="a_permuted", exact=True),
        Sample({"a": _inp("f32", (3, 5))}, ((5, 3),), variant="same_shape", exact=True),
    ],
)

# (the CPU pads F32)
# pad makes a PAD node: read by pad_ext's spec (opdb/elementwise.py)
bad("pad", lambda c, t: ops.pad(c, t("i32", (3, 8)), 1), GraphError, "the CPU kernel takes F32 input")
bad("pad", lambda c, t: ops.pad(c, t("f32", (3, 8)), 1.5), TypeError, "p0")
bad("pad", lambda c, t: ops.pad(c, t("f32", (3, 8)), -1), ValueError, "padding must be non-negative")
bad("pad", lambda c, t: ops.pad(c, t("f16", (3, 8)), 1), ValueError, "the CPU kernel takes")
spec(
    "pad",
    samples=[
        Sample({"a": ("f32", (2, 3, 5))}, (3, 1, 2, 1)),
        Sample({"a": ("f32", (4, 5))}, (2,), variant="dim0"),
        *(
            Sample({"a": _inp("f32", (2, 3, 5, 7))}, p, variant="odd_" + "".join(map(str, p)), exact=True)
            for p in ((1, 0, 0, 0), (0, 2, 0, 0), (0, 0, 3, 0), (0, 0, 0, 1), (2, 1, 1, 1), (5, 3, 0, 2))
        ),
        Sample({"a": _inp("f32", (3, 5, 7), Permuted((0, 2, 1, 3)))}, (2, 1, 1), variant="a_permuted", exact=True),
        Sample({"a": _inp("f32", (13,))}, (3, 2), variant="vector", exact=True),
    ],
)

# --- views (strided, made contiguous with cont so every backend returns them alike) -----------------------------------
# a is NumPy (4, 5, 6, 8) F32: ne = [8, 6, 5, 4], nb = [4, 32, 192, 960]
_VA = ("f32", (4, 5, 6, 8))


def _view_call(op: str) -> Callable[..., Any]:
    return lambda xp, x, *args: xp.cont(getattr(xp, op)(x.a, *args))


def _typed_views(
    op: str, variant: str, ggml_args: Callable[[int], tuple], nb_args: Callable[[int], tuple]
) -> list[Sample]:
    """One view of a (3, 4, 5, 7) tensor of F16 / BF16 / I32: ggml_args(s) for element size s; for BF16 the
    oracle gets nb_args(4) (its byte arguments for 4-byte items)."""
    out = []
    for t, s in (("f16", 2), ("bf16", 2), ("i32", 4)):
        # (the oracle gets the sample's ggml arguments too: it uses its own instead)
        oracle = (
            (lambda x, *_ggml, _a=nb_args(4): oracles.cont(getattr(oracles, op)(x.a, *_a))) if t == "bf16" else None
        )
        out.append(Sample({"a": _inp(t, (3, 4, 5, 7))}, ggml_args(s), variant=variant, oracle=oracle, exact=True))
    return out


# a NumPy (3, 4, 5, 7): ne = [7, 5, 4, 3], element size s: nb = [s, 7s, 35s, 140s]
_V1 = lambda s: (23, 9 * s)  # noqa: E731
_V2 = lambda s: (5, 9, 14 * s, 1 * s)  # noqa: E731
_V3 = lambda s: (3, 5, 3, 7 * s, 35 * s, 2 * s + 35 * s)  # noqa: E731
_V4 = lambda s: (5, 2, 3, 2, 14 * s, 35 * s, 140 * s, 1 * s)  # noqa: E731
_VN = lambda s: ([3, 5, 4, 3], [2 * s, 7 * s, 35 * s, 140 * s], s)  # noqa: E731

bad("view_1d", lambda c, t: ops.view_1d(c, t("f32", (2, 8)), True), TypeError, "ne must be integers")
bad("view_1d", lambda c, t: ops.view_1d(c, t("f32", (3, 8)), 20, 4 * 8), ValueError, "past the end of a")
bad("view_1d", lambda c, t: ops.view_1d(c, t("f32", (3, 8)), 4, -4), ValueError, "offset non-negative")
bad("view_1d", lambda c, t: ops.view_1d(c, t("q8_0", (2, 64)), 16), ValueError, "block size")
spec(
    "view_1d",
    _view_call("view_1d"),
    samples=[
        Sample({"a": _VA}, (20, 4 * 7)),
        *_typed_views("view_1d", "offset", _V1, _V1),
    ],
)
bad("view_2d", lambda c, t: ops.view_2d(c, t("f32", (2, 8)), 4, 2, "32"), TypeError, "must be an integer")
bad("view_2d", lambda c, t: ops.view_2d(c, t("f32", (3, 8)), 8, 3, 40), ValueError, "past the end of a")
bad("view_2d", lambda c, t: ops.view_2d(c, t("f32", (3, 8)), -1, 3, 32), ValueError, "must be positive")
spec(
    "view_2d",
    _view_call("view_2d"),
    grad=[Grad({"a": ("f32", (4, 6))}, ("a",), (3, 2, 48, 8), name="view/f32")],
    samples=[
        Sample({"a": _VA}, (5, 7, 64, 4 * 3)),
        Sample({"a": ("f16", (6, 8))}, (4, 3, 32, 2)),
        *_typed_views("view_2d", "gapped", _V2, _V2),
        # a view of a view: the oracles' views read a contiguous copy of their input, so the outer view (with
        # the input's strides) has no oracle call of the same form: its elements, a[:3, 3:7], directly
        Sample(
            {"a": _inp("f32", (5, 11))},
            variant="of_view",
            call=lambda xp, x: xp.cont(xp.view_2d(xp.view_2d(x.a, 9, 5, 44, 4), 4, 3, 44, 8)),
            oracle=lambda x: x.a[:3, 3:7],
            exact=True,
        ),
    ],
)
bad("view_3d", lambda c, t: ops.view_3d(c, t("f16", (2, 3, 8)), 8, 3, 2, 16, 48, 2), ValueError, "past the end of a")
bad(
    "view_3d",
    lambda c, t: ops.view_3d(c, t("f32", (2, 2, 8)), 2, 2, 2, 32, 64, True),
    TypeError,
    "offset must be an integer, got bool",
)
bad("view_3d", lambda c, t: ops.view_3d(c, t("f32", (2, 3, 8)), 8, 3, 3, 32, 96), ValueError, "past the end of a")
spec(
    "view_3d",
    _view_call("view_3d"),
    samples=[
        Sample({"a": _VA}, (3, 4, 2, 32, 192 * 2, 4 * 2 + 192)),
        *_typed_views("view_3d", "gapped", _V3, _V3),
    ],
)
bad(
    "view_4d",
    lambda c, t: ops.view_4d(c, t("i32", (2, 3, 8)), 8, 3, 2, 1, 32, -96, 192),
    ValueError,
    "strides and offset non-negative",
)
bad(
    "view_4d",
    lambda c, t: ops.view_4d(c, t("f32", (2, 3, 8)), 8, 3, 2, 1, 32, 100, 192),
    ValueError,
    "past the end of a",
)
spec(
    "view_4d",
    _view_call("view_4d"),
    samples=[
        Sample({"a": _VA}, (4, 3, 2, 2, 64, 192, 960 * 2, 4 + 32)),
        *_typed_views("view_4d", "gapped", _V4, _V4),
    ],
)
bad(
    "view_nd",
    lambda c, t: ops.view_nd(c, t("q8_0", (2, 64)), [32, 2, 1, 1], [34, 68, 136, 136]),
    ValueError,
    "has blocks",
)
bad("view_nd", lambda c, t: ops.view_nd(c, t("f32", (3, 8)), [8, 3], [4, 32]), ValueError, "must have 4 entries")
bad(
    "view_nd",
    lambda c, t: ops.view_nd(c, t("f32", (3, 8)), [4, 7, 1, 1], [4, 16, 96, 96]),
    ValueError,
    "past the end of a",
)
bad(
    "view_nd",
    lambda c, t: ops.view_nd(c, t("f32", (3, 8)), [4, 3, 1, 1], [2, 32, 96, 96]),
    ValueError,
    "nb[0] must be at least the element size",
)
spec(
    "view_nd",
    _view_call("view_nd"),
    samples=[
        # overlapping conv windows as llama.cpp's seed takes them. a: NumPy (channels 3, time 9); windows
        # ne = [d_conv 4, window 6, channel 3, 1], nb = [4 (time step), 4 (next window), 36 (channel), 108]
        Sample({"a": ("f32", (3, 9))}, ([4, 6, 3, 1], [4, 4, 36, 108]), variant="windows"),
        # a strided innermost dim: every other element of each row
        Sample({"a": ("f32", (2, 3, 8))}, ([4, 3, 2, 1], [8, 32, 96, 192], 4), variant="stride0"),
        *_typed_views("view_nd", "stride0", _VN, _VN),
    ],
)

# the oracles have no view_tensor: a view of all of a reads as a itself
bad("view_tensor", lambda c, t: ops.view_tensor(c, [1.0, 2.0]), TypeError, "src must be a Tensor")
bad("view_tensor", lambda c, t: ops.view_tensor(None, t("f32", (2, 8))), TypeError, "ctx must be a Context")
spec(
    "view_tensor",
    lambda xp, x: xp.cont(xp.view_tensor(x.a)),
    oracle=lambda x: oracles.cont(x.a),
    samples=[
        *(
            Sample({"a": _inp(t, (5, 7), Transposed())}, variant="of_transposed", exact=True)
            for t in ("f32", "f16", "i32")
        ),
        # a quantized view is not made contiguous (no cont of Q4_0 rows needed): the view itself is the output
        Sample(
            {"a": ("q4_0", (3, 64))},
            variant="rows",
            call=lambda xp, x: xp.view_tensor(x.a),
            oracle=lambda x: x.a,
            exact=True,
        ),
    ],
)
