"""Cases of reductions, norms and sorting."""

from __future__ import annotations

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


