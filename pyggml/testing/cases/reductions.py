"""Cases of reductions, norms and sorting."""

from __future__ import annotations

import numpy as np

from pyggml.testing import oracles
from pyggml.testing.cases import (
    distinct,
    op_case,
    uniform,
)
from pyggml.types import SortOrder

# --- reductions --------------------------------------------------------------------------------------------
op_case("sum/f32", {"a": ("f32", (2, 3, 4, 8))}, lambda c, x: c.sum(x.a), lambda x: oracles.sum(x.a))
op_case("sum/f16", {"a": ("f16", (3, 16))}, lambda c, x: c.sum(x.a), lambda x: oracles.sum(x.a))
op_case("sum_rows/f32", {"a": ("f32", (2, 3, 4, 8))}, lambda c, x: c.sum_rows(x.a),
        lambda x: oracles.sum_rows(x.a))
op_case("mean/f32", {"a": ("f32", (2, 3, 4, 8))}, lambda c, x: c.mean(x.a), lambda x: oracles.mean(x.a))
op_case("argmax/f32", {"a": ("f32", (6, 20), distinct())}, lambda c, x: c.argmax(x.a),
        lambda x: oracles.argmax(x.a), exact=True)

# --- norms, softmax ------------------------------------------------------------------------------------------
for _op, _eps in (("norm", 1e-5), ("rms_norm", 1e-6), ("l2_norm", 1e-12)):
    op_case(f"{_op}/f32", {"a": ("f32", (2, 3, 32))}, lambda c, x, _op=_op, _eps=_eps: getattr(c, _op)(x.a, _eps),
            lambda x, _op=_op, _eps=_eps: getattr(oracles, _op)(x.a, _eps))
op_case("norm/f32/large_eps", {"a": ("f32", (4, 16), uniform(-0.1, 0.1))}, lambda c, x: c.norm(x.a, 0.01),
        lambda x: oracles.norm(x.a, 0.01))


for _order in (SortOrder.ASC, SortOrder.DESC):
    op_case(f"argsort/f32/{_order.name.lower()}", {"a": ("f32", (2, 3, 24), distinct())},
            lambda c, x, _o=_order: c.argsort(x.a, _o), lambda x, _o=_order: oracles.argsort(x.a, _o),
            exact=True)



# --- top k, group norm ------------------------------------------------------------------------------------
# top_k leaves the order of the k indices open: the graph sorts them (as F32) before they are compared
def _sorted_top_k(c, a, k):
    idx = c.cast(c.top_k(a, k), "f32")
    rows = int(np.prod(idx.shape[:-1]))
    flat = c.reshape_2d(idx, k, rows)
    return c.get_rows(c.reshape_3d(flat, 1, k, rows), c.argsort(flat, SortOrder.ASC))


_shape: tuple[int, ...]  # NumPy shapes of several ranks, here and below
for _shape, _k in (((5, 13), 3), ((2, 3, 20), 1), ((7, 11), 11), ((3, 33), 8)):
    op_case(f"top_k/f32/{'x'.join(map(str, _shape))}_k{_k}", {"a": ("f32", _shape, distinct())},
            lambda c, x, _k=_k: _sorted_top_k(c, x.a, _k),
            lambda x, _k=_k: np.sort(oracles.top_k(x.a, _k), axis=-1).astype(np.float32), exact=True)
    op_case(f"argsort_top_k/f32/{'x'.join(map(str, _shape))}_k{_k}", {"a": ("f32", _shape, distinct())},
            lambda c, x, _k=_k: c.cont(c.argsort_top_k(x.a, _k)), lambda x, _k=_k: oracles.argsort_top_k(x.a, _k), exact=True)
for _shape, _g, _eps in (((2, 6, 3, 5), 3, 1e-6), ((1, 6, 4, 7), 4, 1e-6), ((5, 3, 9), 2, 1e-5), ((2, 4, 3, 5), 1, 0.1)):
    op_case(f"group_norm/f32/{'x'.join(map(str, _shape))}_g{_g}", {"a": ("f32", _shape)},
            lambda c, x, _g=_g, _e=_eps: c.group_norm(x.a, _g, _e), lambda x, _g=_g, _e=_eps: oracles.group_norm(x.a, _g, _e))
# groups of unequal size (9 channels in 2 groups) are unsupported on Vulkan (pyggml/preflight.py, docs/findings.md)

# --- more cases of the older reductions: odd sizes, strided inputs, F16/BF16 ----------------------------
for _t, _shape in (("f32", (3, 5, 7, 11)), ("f16", (5, 13)), ("bf16", (7, 9)), ("f32", (1, 1, 1, 37))):
    op_case(f"sum/{_t}/{'x'.join(map(str, _shape))}", {"a": (_t, _shape, uniform(0.1, 1.0))}, lambda c, x: c.sum(x.a),
            lambda x: oracles.sum(x.a))
op_case("sum/f32/permuted", {"a": ("f32", (5, 3, 7), uniform(0.1, 1.0))}, lambda c, x: c.sum(c.permute(x.a, 0, 2, 1, 3)),
        lambda x: oracles.sum(x.a.transpose(1, 0, 2)))
for _op in ("sum_rows", "mean"):
    for _shape in ((3, 5, 7, 11), (13, 1), (1, 41)):
        op_case(f"{_op}/f32/{'x'.join(map(str, _shape))}", {"a": ("f32", _shape, uniform(0.1, 1.0))},
                lambda c, x, _op=_op: getattr(c, _op)(x.a), lambda x, _op=_op: getattr(oracles, _op)(x.a))
    op_case(f"{_op}/f32/permuted", {"a": ("f32", (5, 3, 7), uniform(0.1, 1.0))},
            lambda c, x, _op=_op: getattr(c, _op)(c.permute(x.a, 0, 2, 1, 3)),
            lambda x, _op=_op: getattr(oracles, _op)(x.a.transpose(1, 0, 2)))
for _shape in ((7, 13), (1, 33), (11, 1), (5, 2)):
    op_case(f"argmax/f32/{'x'.join(map(str, _shape))}", {"a": ("f32", _shape, distinct())}, lambda c, x: c.argmax(x.a),
            lambda x: oracles.argmax(x.a), exact=True)
op_case("argmax/f32/row_slice", {"a": ("f32", (7, 20), distinct())}, lambda c, x: c.argmax(c.view_2d(x.a, 13, 7, x.a.nb[1], 12)),
        lambda x: oracles.argmax(x.a[:, 3:16]), exact=True)
for _op, _eps in (("norm", 1e-5), ("rms_norm", 1e-6), ("l2_norm", 1e-12)):
    for _shape in ((3, 5, 7, 11), (2, 1, 9), (3, 1)):
        op_case(f"{_op}/f32/{'x'.join(map(str, _shape))}", {"a": ("f32", _shape)},
                lambda c, x, _op=_op, _eps=_eps: getattr(c, _op)(x.a, _eps),
                lambda x, _op=_op, _eps=_eps: getattr(oracles, _op)(x.a, _eps))
    op_case(f"{_op}/f32/permuted", {"a": ("f32", (5, 3, 13))}, lambda c, x, _op=_op, _eps=_eps: getattr(c, _op)(c.permute(x.a, 0, 2, 1, 3), _eps),
            lambda x, _op=_op, _eps=_eps: getattr(oracles, _op)(x.a.transpose(1, 0, 2), _eps))
    op_case(f"{_op}/f32/eps0.5", {"a": ("f32", (3, 17), uniform(-0.5, 0.5))}, lambda c, x, _op=_op: getattr(c, _op)(x.a, 0.5),
            lambda x, _op=_op: getattr(oracles, _op)(x.a, 0.5))
for _shape in ((5, 13), (1, 3, 1), (3, 2, 33), (7, 64)):
    for _order in (SortOrder.ASC, SortOrder.DESC):
        op_case(f"argsort/f32/{'x'.join(map(str, _shape))}_{_order.name.lower()}", {"a": ("f32", _shape, distinct())},
                lambda c, x, _o=_order: c.argsort(x.a, _o), lambda x, _o=_order: oracles.argsort(x.a, _o), exact=True)
