"""Specs of reductions, norms and sorting."""

from __future__ import annotations

import numpy as np

from pyggml.testing import oracles
from pyggml.testing.opdb import Columns, Grad, In, Node, Permuted, Sample, distinct, spec, uniform
from pyggml.types import SortOrder


def _top_k_node(n: Node) -> np.ndarray:
    """ggml leaves the order of the k indices open: the node's own order, if it holds the right set."""
    want = oracles.top_k(n.src[0], n.ne[0])
    got = n.value()
    same = np.array_equal(np.sort(got, axis=-1), np.sort(want, axis=-1))
    return got if same else want


def _dims(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape))


_POSITIVE = uniform(0.1, 1.0)  # sums of positive values: no cancellation to blur the NMSE

spec("sum", lambda xp, x: xp.sum(x.a), reads=("SUM",), from_node=lambda n: oracles.sum(n.src[0]),
     grad=[Grad({"a": ("f32", (2, 3, 7))}, ("a",))], samples=[
    Sample({"a": ("f32", (2, 3, 4, 8))}),
    Sample({"a": ("f16", (3, 16))}),
    *(Sample({"a": (t, s, _POSITIVE)}, variant=_dims(s))
      for t, s in (("f32", (3, 5, 7, 11)), ("f16", (5, 13)), ("bf16", (7, 9)), ("f32", (1, 1, 1, 37)))),
    Sample({"a": In("f32", (5, 3, 7), _POSITIVE, Permuted())}, variant="permuted"),
])
for _op in ("sum_rows", "mean"):
    spec(_op, lambda xp, x, _op=_op: getattr(xp, _op)(x.a), reads=(_op.upper(),),
         from_node=lambda n, _op=_op: getattr(oracles, _op)(n.src[0]), grad=[Grad({"a": ("f32", (2, 3, 7))}, ("a",))], samples=[
        Sample({"a": ("f32", (2, 3, 4, 8))}),
        *(Sample({"a": ("f32", s, _POSITIVE)}, variant=_dims(s)) for s in ((3, 5, 7, 11), (13, 1), (1, 41))),
        Sample({"a": In("f32", (5, 3, 7), _POSITIVE, Permuted())}, variant="permuted"),
    ])

spec("argmax", lambda xp, x: xp.argmax(x.a), reads=("ARGMAX",), from_node=lambda n: oracles.argmax(n.src[0]), samples=[
    Sample({"a": ("f32", (6, 20), distinct())}),
    *(Sample({"a": ("f32", s, distinct())}, variant=_dims(s)) for s in ((7, 13), (1, 33), (11, 1), (5, 2))),
    Sample({"a": In("f32", (7, 20), distinct(), Columns(3, 16))}, variant="row_slice"),
], exact=True)

# --- norms ---------------------------------------------------------------------------------------------------
for _op, _eps in (("norm", 1e-5), ("rms_norm", 1e-6), ("l2_norm", 1e-12)):
    spec(_op, lambda xp, x, eps, _op=_op: getattr(xp, _op)(x.a, eps), reads=(_op.upper(),),
         from_node=lambda n, _op=_op: getattr(oracles, _op)(n.src[0], n.f32(0)),
         grad=[Grad({"a": ("f32", (3, 7), uniform(-2, 2))}, ("a",), (1e-5,))] if _op == "rms_norm" else [], samples=[
        Sample({"a": ("f32", (2, 3, 32))}, (_eps,)),
        *([Sample({"a": ("f32", (4, 16), uniform(-0.1, 0.1))}, (0.01,), variant="large_eps")] if _op == "norm" else []),
        *(Sample({"a": ("f32", s)}, (_eps,), variant=_dims(s)) for s in ((3, 5, 7, 11), (2, 1, 9), (3, 1))),
        Sample({"a": In("f32", (5, 3, 13), layout=Permuted())}, (_eps,), variant="permuted"),
        Sample({"a": ("f32", (3, 17), uniform(-0.5, 0.5))}, (0.5,), variant="eps0.5"),
    ])

spec("group_norm", lambda xp, x, groups, eps: xp.group_norm(x.a, groups, eps), reads=("GROUP_NORM",),
     from_node=lambda n: oracles.group_norm(n.src[0], n.i32(0), n.f32(1)), samples=[
    Sample({"a": ("f32", s)}, (g, e), variant=f"{_dims(s)}_g{g}")
    for s, g, e in (((2, 6, 3, 5), 3, 1e-6), ((1, 6, 4, 7), 4, 1e-6), ((5, 3, 9), 2, 1e-5), ((2, 4, 3, 5), 1, 0.1))
])
# groups of unequal size (9 channels in 2 groups) are unsupported on Vulkan (pyggml/preflight.py, docs/findings.md)

# --- sorting -----------------------------------------------------------------------------------------------------
_ORDERS = (SortOrder.ASC, SortOrder.DESC)
spec("argsort", lambda xp, x, order: xp.argsort(x.a, order), reads=("ARGSORT",),
     from_node=lambda n: oracles.argsort(n.src[0], n.i32(0)), samples=[
    *(Sample({"a": ("f32", (2, 3, 24), distinct())}, (o,), variant=o.name.lower()) for o in _ORDERS),
    *(Sample({"a": ("f32", s, distinct())}, (o,), variant=f"{_dims(s)}_{o.name.lower()}")
      for s in ((5, 13), (1, 3, 1), (3, 2, 33), (7, 64)) for o in _ORDERS),
], exact=True)


# top_k leaves the order of the k indices open: the graph sorts them (as F32) before they are compared
def _sorted_top_k(c, x, k):
    idx = c.cast(c.top_k(x.a, k), "f32")
    rows = int(np.prod(idx.shape[:-1]))
    flat = c.reshape_2d(idx, k, rows)
    return c.get_rows(c.reshape_3d(flat, 1, k, rows), c.argsort(flat, SortOrder.ASC))


_TOP_K = (((5, 13), 3), ((2, 3, 20), 1), ((7, 11), 11), ((3, 33), 8))
spec("top_k", _sorted_top_k, reads=("TOP_K",), from_node=_top_k_node, samples=[Sample({"a": ("f32", s, distinct())}, (k,), variant=f"{_dims(s)}_k{k}") for s, k in _TOP_K],
     oracle=lambda x, k: np.sort(oracles.top_k(x.a, k), axis=-1).astype(np.float32), exact=True)
spec("argsort_top_k", lambda xp, x, k: xp.cont(xp.argsort_top_k(x.a, k)),
     [Sample({"a": ("f32", s, distinct())}, (k,), variant=f"{_dims(s)}_k{k}") for s, k in _TOP_K], exact=True)
