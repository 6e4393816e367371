"""Cases of the recurrent and state-space ops."""

from __future__ import annotations

from pyggml.testing import oracles
from pyggml.testing.cases import (
                                  op_case,
)

op_case("ssm_conv/f32", {"sx": ("f32", (2, 6, 3 + 5)), "c": ("f32", (6, 4))}, lambda c, x: c.ssm_conv(x.sx, x.c),
        lambda x: oracles.ssm_conv(x.sx, x.c))
op_case("ssm_conv/f32/one_token", {"sx": ("f32", (3, 8, 4)), "c": ("f32", (8, 4))}, lambda c, x: c.ssm_conv(x.sx, x.c),
        lambda x: oracles.ssm_conv(x.sx, x.c))


