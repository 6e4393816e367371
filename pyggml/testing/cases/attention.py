"""Cases of soft_max, masks and rotary position embedding."""

from __future__ import annotations

from pyggml.testing import oracles
from pyggml.testing.cases import (
    integers,
    op_case,
    uniform,
)

op_case("soft_max/f32", {"a": ("f32", (2, 3, 16), uniform(-4, 4))}, lambda c, x: c.soft_max(x.a),
        lambda x: oracles.soft_max(x.a))
op_case("soft_max_ext/f32/mask_f32", {"a": ("f32", (2, 3, 16)), "m": ("f32", (3, 16), uniform(-2, 0))},
        lambda c, x: c.soft_max_ext(x.a, x.m, 0.5), lambda x: oracles.soft_max_ext(x.a, x.m, 0.5))
op_case("soft_max_ext/f32/mask_f16_broadcast", {"a": ("f32", (2, 4, 3, 16)), "m": ("f16", (1, 2, 5, 16), uniform(-2, 0))},
        lambda c, x: c.soft_max_ext(x.a, x.m, 2.0), lambda x: oracles.soft_max_ext(x.a, x.m, 2.0))
op_case("soft_max_ext/f32/no_mask", {"a": ("f32", (3, 16))}, lambda c, x: c.soft_max_ext(x.a, None, 3.0),
        lambda x: oracles.soft_max_ext(x.a, None, 3.0))
op_case("soft_max_ext/f32/alibi", {"a": ("f32", (6, 3, 16)), "m": ("f32", (3, 16), uniform(-2, 0))},
        lambda c, x: c.soft_max_ext(x.a, x.m, 1.0, 8.0), lambda x: oracles.soft_max_ext(x.a, x.m, 1.0, 8.0))
op_case("diag_mask_inf/f32", {"a": ("f32", (2, 5, 8))}, lambda c, x: c.diag_mask_inf(x.a, 0),
        lambda x: oracles.diag_mask_inf(x.a, 0))
op_case("diag_mask_inf/f32/n_past", {"a": ("f32", (2, 3, 5, 8))}, lambda c, x: c.diag_mask_inf(x.a, 2),
        lambda x: oracles.diag_mask_inf(x.a, 2))

# --- rope ------------------------------------------------------------------------------------------------------------
# a NumPy [batch, tokens, heads, head_dim]; pos one position per token
for _mode, _mname in ((0, "normal"), (2, "neox")):
    for _t in ("f32", "f16"):
        op_case(f"rope_ext/{_t}/{_mname}", {"a": (_t, (5, 2, 16)), "pos": ("i32", (5,), integers(0, 200))},
                lambda c, x, _m=_mode: c.rope_ext(x.a, x.pos, n_dims=16, mode=_m),
                lambda x, _m=_mode: oracles.rope_ext(x.a, x.pos, 16, _m))
    op_case(f"rope_ext/f32/{_mname}/partial", {"a": ("f32", (2, 4, 3, 16)), "pos": ("i32", (4,), integers(0, 200))},
            lambda c, x, _m=_mode: c.rope_ext(x.a, x.pos, n_dims=8, mode=_m, freq_base=500.0, freq_scale=0.5,
                                              attn_factor=1.5),
            lambda x, _m=_mode: oracles.rope_ext(x.a, x.pos, 8, _m, freq_base=500.0, freq_scale=0.5, attn_factor=1.5))
    op_case(f"rope_ext/f32/{_mname}/freq_factors",
            {"a": ("f32", (3, 2, 12)), "pos": ("i32", (3,), integers(0, 50)), "ff": ("f32", (6,), uniform(0.5, 4.0))},
            lambda c, x, _m=_mode: c.rope_ext(x.a, x.pos, x.ff, n_dims=12, mode=_m),
            lambda x, _m=_mode: oracles.rope_ext(x.a, x.pos, 12, _m, freq_factors=x.ff))


