"""Cases of the element-wise ops and generators."""

from __future__ import annotations

import numpy as np

from pyggml import ops as _ops
from pyggml.testing import oracles
from pyggml.testing.cases import (
    NMSE_FP16_TABLE,
    op_case,
    signed_away_from_zero,
    uniform,
)

# --- element-wise binary --------------------------------------------------------------------------
for _op in ("add", "sub", "mul", "div"):
    _b_gen = (signed_away_from_zero(),) if _op == "div" else ()
    _fn = getattr(oracles, _op)

    def _build(c, x, _op=_op):
        return getattr(c, _op)(x.a, x.b)

    def _oracle(x, _fn=_fn):
        return _fn(x.a, x.b)

    op_case(f"{_op}/f32", {"a": ("f32", (2, 3, 8)), "b": ("f32", (2, 3, 8), *_b_gen)}, _build, _oracle)
    op_case(f"{_op}/f32/broadcast", {"a": ("f32", (2, 2, 3, 8)), "b": ("f32", (1, 3, 8), *_b_gen)},
            _build, _oracle)
    op_case(f"{_op}/f32/broadcast_row", {"a": ("f32", (4, 3, 8)), "b": ("f32", (2, 1, 4), *_b_gen)},
            _build, _oracle)
    op_case(f"{_op}/f16", {"a": ("f16", (3, 16)), "b": ("f16", (3, 16), *_b_gen)}, _build, _oracle)
    op_case(f"{_op}/f16_f32", {"a": ("f16", (3, 16)), "b": ("f32", (1, 16), *_b_gen)}, _build, _oracle)

op_case("scale/f32", {"a": ("f32", (3, 4, 8))}, lambda c, x: c.scale(x.a, -1.75),
        lambda x: oracles.scale(x.a, -1.75))
op_case("scale/bf16", {"a": ("bf16", (3, 16))}, lambda c, x: c.scale(x.a, 0.5),
        lambda x: oracles.scale(x.a, 0.5))
op_case("clamp/f32", {"a": ("f32", (3, 4, 8), uniform(-2, 2))}, lambda c, x: c.clamp(x.a, -0.5, 0.75),
        lambda x: oracles.clamp(x.a, -0.5, 0.75))
op_case("clamp/f16", {"a": ("f16", (3, 16), uniform(-2, 2))}, lambda c, x: c.clamp(x.a, -0.5, 0.75),
        lambda x: oracles.clamp(x.a, -0.5, 0.75))

# --- element-wise unary -----------------------------------------------------------------------------
_UNARY_GEN = {
    "sqrt": uniform(0.05, 4.0), "log": uniform(0.05, 4.0), "exp": uniform(-3.0, 3.0),
    "softplus": uniform(-25.0, 25.0), "floor": uniform(-4.0, 4.0), "ceil": uniform(-4.0, 4.0),
    "round": uniform(-4.0, 4.0), "trunc": uniform(-4.0, 4.0), "hardswish": uniform(-5.0, 5.0),
    "hardsigmoid": uniform(-5.0, 5.0), "elu": uniform(-3.0, 3.0), "gelu": uniform(-4.0, 4.0),
    "gelu_quick": uniform(-4.0, 4.0), "gelu_erf": uniform(-4.0, 4.0), "tanh": uniform(-3.0, 3.0),
    "sigmoid": uniform(-6.0, 6.0), "silu": uniform(-6.0, 6.0), "sin": uniform(-4.0, 4.0), "cos": uniform(-4.0, 4.0),
}
_UNARY_NMSE_F32 = {"gelu": NMSE_FP16_TABLE, "gelu_quick": NMSE_FP16_TABLE}

for _op in _ops.UNARY_OPS:
    _gen = (_UNARY_GEN[_op],) if _op in _UNARY_GEN else ()
    _fn = getattr(oracles, _op)

    def _build(c, x, _op=_op):
        return getattr(c, _op)(x.a)

    def _oracle(x, _fn=_fn):
        return _fn(x.a)

    op_case(f"{_op}/f32", {"a": ("f32", (2, 4, 16), *_gen)}, _build, _oracle, nmse=_UNARY_NMSE_F32.get(_op))
    op_case(f"{_op}/f16", {"a": ("f16", (4, 16), *_gen)}, _build, _oracle)

# rounding at exact halves: C roundf rounds them away from zero (NumPy's round goes to even)
op_case("round/f32/halves", {"a": ("f32", (2, 8), lambda rng, s: (rng.integers(-8, 8, size=s) + 0.5).astype(np.float32))},
        lambda c, x: c.round(x.a), lambda x: oracles.round(x.a))

op_case("leaky_relu/f32", {"a": ("f32", (3, 4, 8))}, lambda c, x: c.leaky_relu(x.a, 0.1),
        lambda x: oracles.leaky_relu(x.a, 0.1))
op_case("leaky_relu/f16", {"a": ("f16", (3, 16))}, lambda c, x: c.leaky_relu(x.a, 0.2),
        lambda x: oracles.leaky_relu(x.a, 0.2))


op_case("arange/f32", {}, lambda c, x: c.arange(-3.0, 5.0, 0.5), lambda x: oracles.arange(-3.0, 5.0, 0.5))
op_case("arange/f32/uneven", {}, lambda c, x: c.arange(0.0, 10.0, 3.0), lambda x: oracles.arange(0.0, 10.0, 3.0))

