"""Cases of the matrix products."""

from __future__ import annotations

from pyggml.testing import oracles
from pyggml.testing.cases import (
    NMSE_Q8_DOT,
    op_case,
)

# --- matrix ------------------------------------------------------------------------------------------------------------
op_case("mul_mat/f32", {"a": ("f32", (5, 16)), "b": ("f32", (3, 16))}, lambda c, x: c.mul_mat(x.a, x.b),
        lambda x: oracles.mul_mat(x.a, x.b))
op_case("mul_mat/f32/broadcast", {"a": ("f32", (1, 2, 4, 8)), "b": ("f32", (3, 4, 2, 8))},
        lambda c, x: c.mul_mat(x.a, x.b), lambda x: oracles.mul_mat(x.a, x.b))
op_case("mul_mat/f32/vector", {"a": ("f32", (7, 32)), "b": ("f32", (1, 32))},
        lambda c, x: c.mul_mat(x.a, x.b), lambda x: oracles.mul_mat(x.a, x.b))
op_case("mul_mat/f16", {"a": ("f16", (2, 5, 32)), "b": ("f32", (2, 3, 32))}, lambda c, x: c.mul_mat(x.a, x.b),
        lambda x: oracles.mul_mat(x.a, x.b))
op_case("mul_mat/f16_f16", {"a": ("f16", (5, 32)), "b": ("f16", (3, 32))}, lambda c, x: c.mul_mat(x.a, x.b),
        lambda x: oracles.mul_mat(x.a, x.b))
for _q in ("q8_0", "q4_0"):
    op_case(f"mul_mat/{_q}", {"a": (_q, (2, 6, 64)), "b": ("f32", (2, 3, 64))}, lambda c, x: c.mul_mat(x.a, x.b),
            lambda x: oracles.mul_mat(x.a, x.b), nmse=NMSE_Q8_DOT)

