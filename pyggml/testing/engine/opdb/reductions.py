"""Specs of reductions, norms and sorting."""

from __future__ import annotations

from typing import Any

import numpy as np

from pyggml import ops
from pyggml.errors import GraphError, OpError
from pyggml.testing.engine import oracles
from pyggml.testing.engine.opdb import *  # noqa: F403 - the database's vocabulary, opdb.__all__
from pyggml.types import SortOrder

_ops: Any = ops  # the bad calls below pass wrong types on purpose


def _top_k_node(n: Node) -> np.ndarray:
    """ggml leaves the order of the k indices open: the node's own order, if it holds the right set."""
    want = oracles.top_k(n.arg(0), n.ne[0])
    got = n.value()
    same = np.array_equal(np.sort(got, axis=-1), np.sort(want, axis=-1))
    return got if same else want


def _argsort_node(n: Node) -> np.ndarray:
    """ggml leaves the order of equal values open (its sorts are not stable; glm5-next sorts rows of -Inf):
    the node's own order, if each row is a permutation that puts the values in order."""
    a, order = n.arg(0), n.param("order")
    want = oracles.argsort(a, order)
    got = n.value()
    if got.shape != want.shape or not np.array_equal(np.sort(got, axis=-1), np.sort(want, axis=-1)):
        return want
    ranked = np.take_along_axis(a, got.astype(np.int64), axis=-1)
    with np.errstate(invalid="ignore"):  # -Inf - -Inf: a tie, NaN
        steps = np.diff(ranked, axis=-1)
    in_order = (steps >= 0) if order == 0 else (steps <= 0)  # GGML_SORT_ORDER_ASC is 0
    return got if bool(np.all(in_order | np.isnan(steps))) else want


def _dims(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape))


# --- bad calls: each must raise naming the op (or the node, for what the CPU preflight refuses) -------------


bad("sum", lambda c, t: _ops.sum(c, t("i32", (3, 8))), ValueError, "the CPU kernel takes")
bad("sum", lambda c, t: _ops.sum(c, _ops.transpose(c, t("f32", (3, 8)))), ValueError, "contiguous")
bad("sum_rows", lambda c, t: _ops.sum_rows(c, t("f16", (3, 8))), ValueError, "the CPU kernel takes")
bad("sum_rows", lambda c, t: _ops.sum_rows(c, _ops.transpose(c, t("f32", (3, 8)))), ValueError, "contiguous")
bad("mean", lambda c, t: _ops.mean(c, t("f16", (3, 8))), ValueError, "the CPU kernel takes")
bad("argmax", lambda c, t: _ops.argmax(c, t("f32", (2, 3, 8))), ValueError, "ggml_is_matrix(a)")
bad("argmax", lambda c, t: _ops.argmax(c, _ops.transpose(c, t("f32", (3, 8)))), ValueError, "contiguous")
for _op in ("norm", "rms_norm", "l2_norm"):
    bad(_op, lambda c, t, _op=_op: getattr(_ops, _op)(c, t("f32", (3, 8)), -1.0), ValueError, "eps must be >= 0")
    bad(_op, lambda c, t, _op=_op: getattr(_ops, _op)(c, t("f16", (3, 8))), ValueError, "the CPU kernel takes")
    bad(_op, lambda c, t, _op=_op: getattr(_ops, _op)(c, _ops.transpose(c, t("f32", (3, 8)))), ValueError, "contiguous")
bad("argsort", lambda c, t: _ops.argsort(c, t("f32", (3, 8)), "sideways"), ValueError, "order must be")
bad("argsort", lambda c, t: _ops.argsort(c, t("f32", (3, 8)), 7), ValueError, "order must be ASC or DESC")
bad("argsort", lambda c, t: _ops.argsort(c, t("i32", (3, 8))), ValueError, "the CPU kernel takes")
bad("argsort", lambda c, t: _ops.argsort(c, _ops.transpose(c, t("f32", (3, 8)))), ValueError, "rows")
bad("top_k", lambda c, t: _ops.top_k(c, t("f32", (3, 8)), 9), OpError, "a->ne[0] >= k")
bad("top_k", lambda c, t: _ops.top_k(c, t("f32", (3, 8)), 0), ValueError, "k must be positive")
bad("top_k", lambda c, t: _ops.top_k(c, t("f16", (3, 8)), 2), GraphError, "the CPU kernel takes")
bad("top_k", lambda c, t: _ops.top_k(c, _ops.permute(c, t("f32", (3, 4, 8)), 0, 2, 1, 3), 2), GraphError, "rows")
bad("argsort_top_k", lambda c, t: _ops.argsort_top_k(c, t("f32", (3, 8)), 9), OpError, "a->ne[0] >= k")
bad("argsort_top_k", lambda c, t: _ops.argsort_top_k(c, t("f32", (3, 8)), -1), ValueError, "k must be positive")
# scalar arguments: a truth value or text is no integer or number (issue 19)
bad("argsort", lambda c, t: _ops.argsort(c, t("f32", (3, 8)), True), TypeError, "order must be an integer, got bool")
bad("rms_norm", lambda c, t: _ops.rms_norm(c, t("f32", (3, 8)), "1e-6"), TypeError, "eps must be a number, got str")
bad("top_k", lambda c, t: _ops.top_k(c, t("f32", (3, 8)), 2.0), TypeError, "k must be an integer, got float")

_POSITIVE = uniform(0.1, 1.0)  # sums of positive values: no cancellation to blur the NMSE

spec(
    "sum",
    reads=("SUM",),
    from_node=lambda n: oracles.sum(n.arg(0)),
    grad=[Grad({"a": ("f32", (2, 3, 7))}, ("a",))],
    samples=[
        Sample({"a": ("f32", (2, 3, 4, 8))}),
        Sample({"a": ("f16", (3, 16))}),
        *(
            Sample({"a": (t, s, _POSITIVE)}, variant=_dims(s))
            for t, s in (("f32", (3, 5, 7, 11)), ("f16", (5, 13)), ("bf16", (7, 9)), ("f32", (1, 1, 1, 37)))
        ),
        Sample({"a": In("f32", (5, 3, 7), _POSITIVE, Permuted())}, variant="permuted"),
    ],
)
for _op in ("sum_rows", "mean"):
    spec(
        _op,
        lambda xp, x, _op=_op: getattr(xp, _op)(x.a),
        reads=(_op.upper(),),
        from_node=lambda n, _op=_op: getattr(oracles, _op)(n.arg(0)),
        grad=[Grad({"a": ("f32", (2, 3, 7))}, ("a",))],
        samples=[
            Sample({"a": ("f32", (2, 3, 4, 8))}),
            *(Sample({"a": ("f32", s, _POSITIVE)}, variant=_dims(s)) for s in ((3, 5, 7, 11), (13, 1), (1, 41))),
            Sample({"a": In("f32", (5, 3, 7), _POSITIVE, Permuted())}, variant="permuted"),
        ],
    )

spec(
    "argmax",
    reads=("ARGMAX",),
    from_node=lambda n: oracles.argmax(n.arg(0)),
    samples=[
        Sample({"a": ("f32", (6, 20), distinct())}),
        *(Sample({"a": ("f32", s, distinct())}, variant=_dims(s)) for s in ((7, 13), (1, 33), (11, 1), (5, 2))),
        Sample({"a": In("f32", (7, 20), distinct(), Columns(3, 16))}, variant="row_slice"),
    ],
    exact=True,
)

# --- norms ---------------------------------------------------------------------------------------------------
for _op, _eps in (("norm", 1e-5), ("rms_norm", 1e-6), ("l2_norm", 1e-12)):
    spec(
        _op,
        lambda xp, x, eps, _op=_op: getattr(xp, _op)(x.a, eps),
        reads=(_op.upper(),),
        from_node=lambda n, _op=_op: getattr(oracles, _op)(n.arg(0), n.param("eps")),
        grad=[Grad({"a": ("f32", (3, 7), uniform(-2, 2))}, ("a",), (1e-5,))] if _op == "rms_norm" else [],
        samples=[
            Sample({"a": ("f32", (2, 3, 32))}, (_eps,)),
            *(
                [Sample({"a": ("f32", (4, 16), uniform(-0.1, 0.1))}, (0.01,), variant="large_eps")]
                if _op == "norm"
                else []
            ),
            *(Sample({"a": ("f32", s)}, (_eps,), variant=_dims(s)) for s in ((3, 5, 7, 11), (2, 1, 9), (3, 1))),
            Sample({"a": In("f32", (5, 3, 13), layout=Permuted())}, (_eps,), variant="permuted"),
            Sample({"a": ("f32", (3, 17), uniform(-0.5, 0.5))}, (0.5,), variant="eps0.5"),
        ],
    )

bad("group_norm", lambda c, t: _ops.group_norm(c, t("f32", (2, 3, 8)), 3), ValueError, "n_groups must be in 1..ne2 = 2")
bad(
    "group_norm",
    lambda c, t: _ops.group_norm(c, t("f32", (2, 3, 8)), 1, float("nan")),
    ValueError,
    "eps must be finite",
)
bad("group_norm", lambda c, t: _ops.group_norm(c, t("f16", (2, 3, 8)), 1), GraphError, "the CPU kernel takes")
spec(
    "group_norm",
    reads=("GROUP_NORM",),
    from_node=lambda n: oracles.group_norm(n.arg(0), *n.scalars()),
    samples=[
        Sample({"a": ("f32", s)}, (g, e), variant=f"{_dims(s)}_g{g}")
        for s, g, e in (((2, 6, 3, 5), 3, 1e-6), ((1, 6, 4, 7), 4, 1e-6), ((5, 3, 9), 2, 1e-5), ((2, 4, 3, 5), 1, 0.1))
    ],
)
# groups of unequal size (9 channels in 2 groups) are unsupported on Vulkan (pyggml/preflight/vulkan.py, docs/findings.md)

# --- sorting -----------------------------------------------------------------------------------------------------
_ORDERS = (SortOrder.ASC, SortOrder.DESC)
spec(
    "argsort",
    reads=("ARGSORT",),
    from_node=_argsort_node,
    samples=[
        *(Sample({"a": ("f32", (2, 3, 24), distinct())}, (o,), variant=o.name.lower()) for o in _ORDERS),
        *(
            Sample({"a": ("f32", s, distinct())}, (o,), variant=f"{_dims(s)}_{o.name.lower()}")
            for s in ((5, 13), (1, 3, 1), (3, 2, 33), (7, 64))
            for o in _ORDERS
        ),
    ],
    exact=True,
)


# top_k leaves the order of the k indices open: the graph sorts them (as F32) before they are compared
def _sorted_top_k(c, x, k):
    idx = c.cast(c.top_k(x.a, k), "f32")
    rows = int(np.prod(idx.shape[:-1]))
    flat = c.reshape_2d(idx, k, rows)
    return c.get_rows(c.reshape_3d(flat, 1, k, rows), c.argsort(flat, SortOrder.ASC))


_TOP_K = (((5, 13), 3), ((2, 3, 20), 1), ((7, 11), 11), ((3, 33), 8))
spec(
    "top_k",
    _sorted_top_k,
    reads=("TOP_K",),
    from_node=_top_k_node,
    samples=[Sample({"a": ("f32", s, distinct())}, (k,), variant=f"{_dims(s)}_k{k}") for s, k in _TOP_K],
    oracle=lambda x, k: np.sort(oracles.top_k(x.a, k), axis=-1).astype(np.float32),
    exact=True,
)
spec(
    "argsort_top_k",
    lambda xp, x, k: xp.cont(xp.argsort_top_k(x.a, k)),
    samples=[Sample({"a": ("f32", s, distinct())}, (k,), variant=f"{_dims(s)}_k{k}") for s, k in _TOP_K],
    exact=True,
)
