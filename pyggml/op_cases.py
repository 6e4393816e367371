"""One or more oracle cases for every op of pyggml.ops.

Names are "<op>/<type>[/<variant>]", and every case carries `op="<opname>"` (the pyggml.ops function it
tests) in its params. Inputs are tiny (a few hundred elements) so the whole registry runs in seconds.
"""

from __future__ import annotations

import numpy as np

from pyggml import oracles
from pyggml import ops as _ops
from pyggml.cases import integers, op_case, permutation_rows, uniform
from pyggml.types import SortOrder

# NMSE bounds that depend on more than the input types (see each use)
NMSE_FP16_TABLE = 1e-5   # gelu / gelu_quick on CPU look F32 inputs up in an fp16 table
NMSE_Q8_DOT = 5e-4       # mul_mat with a quantized a: the CPU quantizes b to Q8_0 first
NMSE_Q8_STORE = 1e-4     # values written into a Q8_0 tensor (quantized on the way)


def signed_away_from_zero(lo=0.5, hi=2.0):
    """|x| in [lo, hi) with a random sign: div denominators."""
    return lambda rng, shape: (rng.uniform(lo, hi, size=shape) * rng.choice([-1.0, 1.0], size=shape)).astype(np.float32)


def distinct(lo=-1.0, hi=1.0):
    """Values with no ties in any row (argsort / argmax are ambiguous on ties)."""
    def gen(rng, shape):
        n = int(np.prod(shape))
        vals = np.linspace(lo, hi, n, dtype=np.float32)
        return rng.permutation(vals).reshape(shape)
    return gen


# --- element-wise binary --------------------------------------------------------------------------
for _op in ("add", "sub", "mul", "div"):
    _b_gen = (signed_away_from_zero(),) if _op == "div" else ()
    _fn = getattr(oracles, _op)

    def _build(c, x, _op=_op):
        return getattr(c, _op)(x.a, x.b)

    def _oracle(x, _fn=_fn):
        return _fn(x.a, x.b)

    op_case(f"{_op}/f32", {"a": ("f32", (2, 3, 8)), "b": ("f32", (2, 3, 8), *_b_gen)}, _build, _oracle, op=_op)
    op_case(f"{_op}/f32/broadcast", {"a": ("f32", (2, 2, 3, 8)), "b": ("f32", (1, 3, 8), *_b_gen)},
            _build, _oracle, op=_op)
    op_case(f"{_op}/f32/broadcast_row", {"a": ("f32", (4, 3, 8)), "b": ("f32", (2, 1, 4), *_b_gen)},
            _build, _oracle, op=_op)
    op_case(f"{_op}/f16", {"a": ("f16", (3, 16)), "b": ("f16", (3, 16), *_b_gen)}, _build, _oracle, op=_op)
    op_case(f"{_op}/f16_f32", {"a": ("f16", (3, 16)), "b": ("f32", (1, 16), *_b_gen)}, _build, _oracle, op=_op)

op_case("scale/f32", {"a": ("f32", (3, 4, 8))}, lambda c, x: c.scale(x.a, -1.75),
        lambda x: oracles.scale(x.a, -1.75), op="scale")
op_case("scale/bf16", {"a": ("bf16", (3, 16))}, lambda c, x: c.scale(x.a, 0.5),
        lambda x: oracles.scale(x.a, 0.5), op="scale")
op_case("clamp/f32", {"a": ("f32", (3, 4, 8), uniform(-2, 2))}, lambda c, x: c.clamp(x.a, -0.5, 0.75),
        lambda x: oracles.clamp(x.a, -0.5, 0.75), op="clamp")
op_case("clamp/f16", {"a": ("f16", (3, 16), uniform(-2, 2))}, lambda c, x: c.clamp(x.a, -0.5, 0.75),
        lambda x: oracles.clamp(x.a, -0.5, 0.75), op="clamp")

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

    op_case(f"{_op}/f32", {"a": ("f32", (2, 4, 16), *_gen)}, _build, _oracle, nmse=_UNARY_NMSE_F32.get(_op), op=_op)
    op_case(f"{_op}/f16", {"a": ("f16", (4, 16), *_gen)}, _build, _oracle, op=_op)

# rounding at exact halves: C roundf rounds them away from zero (NumPy's round goes to even)
op_case("round/f32/halves", {"a": ("f32", (2, 8), lambda rng, s: (rng.integers(-8, 8, size=s) + 0.5).astype(np.float32))},
        lambda c, x: c.round(x.a), lambda x: oracles.round(x.a), op="round")

op_case("leaky_relu/f32", {"a": ("f32", (3, 4, 8))}, lambda c, x: c.leaky_relu(x.a, 0.1),
        lambda x: oracles.leaky_relu(x.a, 0.1), op="leaky_relu")
op_case("leaky_relu/f16", {"a": ("f16", (3, 16))}, lambda c, x: c.leaky_relu(x.a, 0.2),
        lambda x: oracles.leaky_relu(x.a, 0.2), op="leaky_relu")

# --- reductions --------------------------------------------------------------------------------------------
op_case("sum/f32", {"a": ("f32", (2, 3, 4, 8))}, lambda c, x: c.sum(x.a), lambda x: oracles.sum(x.a), op="sum")
op_case("sum/f16", {"a": ("f16", (3, 16))}, lambda c, x: c.sum(x.a), lambda x: oracles.sum(x.a), op="sum")
op_case("sum_rows/f32", {"a": ("f32", (2, 3, 4, 8))}, lambda c, x: c.sum_rows(x.a),
        lambda x: oracles.sum_rows(x.a), op="sum_rows")
op_case("mean/f32", {"a": ("f32", (2, 3, 4, 8))}, lambda c, x: c.mean(x.a), lambda x: oracles.mean(x.a), op="mean")
op_case("argmax/f32", {"a": ("f32", (6, 20), distinct())}, lambda c, x: c.argmax(x.a),
        lambda x: oracles.argmax(x.a), exact=True, op="argmax")

# --- norms, softmax ------------------------------------------------------------------------------------------
for _op, _eps in (("norm", 1e-5), ("rms_norm", 1e-6), ("l2_norm", 1e-12)):
    op_case(f"{_op}/f32", {"a": ("f32", (2, 3, 32))}, lambda c, x, _op=_op, _eps=_eps: getattr(c, _op)(x.a, _eps),
            lambda x, _op=_op, _eps=_eps: getattr(oracles, _op)(x.a, _eps), op=_op)
op_case("norm/f32/large_eps", {"a": ("f32", (4, 16), uniform(-0.1, 0.1))}, lambda c, x: c.norm(x.a, 0.01),
        lambda x: oracles.norm(x.a, 0.01), op="norm")

op_case("soft_max/f32", {"a": ("f32", (2, 3, 16), uniform(-4, 4))}, lambda c, x: c.soft_max(x.a),
        lambda x: oracles.soft_max(x.a), op="soft_max")
op_case("soft_max_ext/f32/mask_f32", {"a": ("f32", (2, 3, 16)), "m": ("f32", (3, 16), uniform(-2, 0))},
        lambda c, x: c.soft_max_ext(x.a, x.m, 0.5), lambda x: oracles.soft_max_ext(x.a, x.m, 0.5),
        op="soft_max_ext")
op_case("soft_max_ext/f32/mask_f16_broadcast", {"a": ("f32", (2, 4, 3, 16)), "m": ("f16", (1, 2, 5, 16), uniform(-2, 0))},
        lambda c, x: c.soft_max_ext(x.a, x.m, 2.0), lambda x: oracles.soft_max_ext(x.a, x.m, 2.0),
        op="soft_max_ext")
op_case("soft_max_ext/f32/no_mask", {"a": ("f32", (3, 16))}, lambda c, x: c.soft_max_ext(x.a, None, 3.0),
        lambda x: oracles.soft_max_ext(x.a, None, 3.0), op="soft_max_ext")
op_case("soft_max_ext/f32/alibi", {"a": ("f32", (6, 3, 16)), "m": ("f32", (3, 16), uniform(-2, 0))},
        lambda c, x: c.soft_max_ext(x.a, x.m, 1.0, 8.0), lambda x: oracles.soft_max_ext(x.a, x.m, 1.0, 8.0),
        op="soft_max_ext")
op_case("diag_mask_inf/f32", {"a": ("f32", (2, 5, 8))}, lambda c, x: c.diag_mask_inf(x.a, 0),
        lambda x: oracles.diag_mask_inf(x.a, 0), op="diag_mask_inf")
op_case("diag_mask_inf/f32/n_past", {"a": ("f32", (2, 3, 5, 8))}, lambda c, x: c.diag_mask_inf(x.a, 2),
        lambda x: oracles.diag_mask_inf(x.a, 2), op="diag_mask_inf")

# --- rope ------------------------------------------------------------------------------------------------------------
# a NumPy [batch, tokens, heads, head_dim]; pos one position per token
for _mode, _mname in ((0, "normal"), (2, "neox")):
    for _t in ("f32", "f16"):
        op_case(f"rope_ext/{_t}/{_mname}", {"a": (_t, (5, 2, 16)), "pos": ("i32", (5,), integers(0, 200))},
                lambda c, x, _m=_mode: c.rope_ext(x.a, x.pos, n_dims=16, mode=_m),
                lambda x, _m=_mode: oracles.rope_ext(x.a, x.pos, 16, _m), op="rope_ext")
    op_case(f"rope_ext/f32/{_mname}/partial", {"a": ("f32", (2, 4, 3, 16)), "pos": ("i32", (4,), integers(0, 200))},
            lambda c, x, _m=_mode: c.rope_ext(x.a, x.pos, n_dims=8, mode=_m, freq_base=500.0, freq_scale=0.5,
                                              attn_factor=1.5),
            lambda x, _m=_mode: oracles.rope_ext(x.a, x.pos, 8, _m, freq_base=500.0, freq_scale=0.5, attn_factor=1.5),
            op="rope_ext")
    op_case(f"rope_ext/f32/{_mname}/freq_factors",
            {"a": ("f32", (3, 2, 12)), "pos": ("i32", (3,), integers(0, 50)), "ff": ("f32", (6,), uniform(0.5, 4.0))},
            lambda c, x, _m=_mode: c.rope_ext(x.a, x.pos, x.ff, n_dims=12, mode=_m),
            lambda x, _m=_mode: oracles.rope_ext(x.a, x.pos, 12, _m, freq_factors=x.ff), op="rope_ext")

# --- matrix ------------------------------------------------------------------------------------------------------------
op_case("mul_mat/f32", {"a": ("f32", (5, 16)), "b": ("f32", (3, 16))}, lambda c, x: c.mul_mat(x.a, x.b),
        lambda x: oracles.mul_mat(x.a, x.b), op="mul_mat")
op_case("mul_mat/f32/broadcast", {"a": ("f32", (1, 2, 4, 8)), "b": ("f32", (3, 4, 2, 8))},
        lambda c, x: c.mul_mat(x.a, x.b), lambda x: oracles.mul_mat(x.a, x.b), op="mul_mat")
op_case("mul_mat/f32/vector", {"a": ("f32", (7, 32)), "b": ("f32", (1, 32))},
        lambda c, x: c.mul_mat(x.a, x.b), lambda x: oracles.mul_mat(x.a, x.b), op="mul_mat")
op_case("mul_mat/f16", {"a": ("f16", (2, 5, 32)), "b": ("f32", (2, 3, 32))}, lambda c, x: c.mul_mat(x.a, x.b),
        lambda x: oracles.mul_mat(x.a, x.b), op="mul_mat")
op_case("mul_mat/f16_f16", {"a": ("f16", (5, 32)), "b": ("f16", (3, 32))}, lambda c, x: c.mul_mat(x.a, x.b),
        lambda x: oracles.mul_mat(x.a, x.b), op="mul_mat")
for _q in ("q8_0", "q4_0"):
    op_case(f"mul_mat/{_q}", {"a": (_q, (2, 6, 64)), "b": ("f32", (2, 3, 64))}, lambda c, x: c.mul_mat(x.a, x.b),
            lambda x: oracles.mul_mat(x.a, x.b), nmse=NMSE_Q8_DOT, op="mul_mat")
op_case("ssm_conv/f32", {"sx": ("f32", (2, 6, 3 + 5)), "c": ("f32", (6, 4))}, lambda c, x: c.ssm_conv(x.sx, x.c),
        lambda x: oracles.ssm_conv(x.sx, x.c), op="ssm_conv")
op_case("ssm_conv/f32/one_token", {"sx": ("f32", (3, 8, 4)), "c": ("f32", (8, 4))}, lambda c, x: c.ssm_conv(x.sx, x.c),
        lambda x: oracles.ssm_conv(x.sx, x.c), op="ssm_conv")

# --- index ops -----------------------------------------------------------------------------------------------------------
for _t in ("f32", "f16", "q8_0", "q4_0"):
    op_case(f"get_rows/{_t}", {"a": (_t, (10, 32)), "b": ("i32", (6,), integers(0, 10))},
            lambda c, x: c.get_rows(x.a, x.b), lambda x: oracles.get_rows(x.a, x.b), op="get_rows")
op_case("get_rows/f32/batched", {"a": ("f32", (2, 3, 7, 8)), "b": ("i32", (2, 3, 4), integers(0, 7))},
        lambda c, x: c.get_rows(x.a, x.b), lambda x: oracles.get_rows(x.a, x.b), op="get_rows")
op_case("get_rows/i32", {"a": ("i32", (6, 4), integers(-100, 100)), "b": ("i32", (5,), integers(0, 6))},
        lambda c, x: c.get_rows(x.a, x.b), lambda x: oracles.get_rows(x.a, x.b), exact=True, op="get_rows")

op_case("set_rows/f32/i64", {"a": ("f32", (10, 8)), "b": ("f32", (4, 8)), "c": ("i64", (4,), permutation_rows(10))},
        lambda c, x: c.set_rows(x.a, x.b, x.c), lambda x: oracles.set_rows(x.a, x.b, x.c), op="set_rows")
op_case("set_rows/f32/i32_batched", {"a": ("f32", (2, 3, 6, 8)), "b": ("f32", (2, 3, 2, 8)),
                                     "c": ("i32", (2, 3, 2), permutation_rows(6))},
        lambda c, x: c.set_rows(x.a, x.b, x.c), lambda x: oracles.set_rows(x.a, x.b, x.c), op="set_rows")
op_case("set_rows/f32/broadcast_index", {"a": ("f32", (2, 4, 6, 8)), "b": ("f32", (2, 4, 3, 8)),
                                         "c": ("i64", (1, 2, 3), permutation_rows(6))},
        lambda c, x: c.set_rows(x.a, x.b, x.c), lambda x: oracles.set_rows(x.a, x.b, x.c), op="set_rows")
op_case("set_rows/f16", {"a": ("f16", (7, 16)), "b": ("f32", (3, 16)), "c": ("i64", (3,), permutation_rows(7))},
        lambda c, x: c.set_rows(x.a, x.b, x.c), lambda x: oracles.set_rows(x.a, x.b, x.c), op="set_rows")
op_case("set_rows/f16_src", {"a": ("f32", (7, 16)), "b": ("f16", (3, 16)), "c": ("i32", (3,), permutation_rows(7))},
        lambda c, x: c.set_rows(x.a, x.b, x.c), lambda x: oracles.set_rows(x.a, x.b, x.c), op="set_rows")
op_case("set_rows/q8_0", {"a": ("q8_0", (6, 64)), "b": ("f32", (2, 64)), "c": ("i64", (2,), permutation_rows(6))},
        lambda c, x: c.set_rows(x.a, x.b, x.c), lambda x: oracles.set_rows(x.a, x.b, x.c), nmse=NMSE_Q8_STORE,
        op="set_rows")

op_case("arange/f32", {}, lambda c, x: c.arange(-3.0, 5.0, 0.5), lambda x: oracles.arange(-3.0, 5.0, 0.5), op="arange")
op_case("arange/f32/uneven", {}, lambda c, x: c.arange(0.0, 10.0, 3.0), lambda x: oracles.arange(0.0, 10.0, 3.0),
        op="arange")
for _order in (SortOrder.ASC, SortOrder.DESC):
    op_case(f"argsort/f32/{_order.name.lower()}", {"a": ("f32", (2, 3, 24), distinct())},
            lambda c, x, _o=_order: c.argsort(x.a, _o), lambda x, _o=_order: oracles.argsort(x.a, _o),
            exact=True, op="argsort")

# --- data movement ----------------------------------------------------------------------------------------------------------
op_case("cpy/f32_f16", {"a": ("f32", (3, 16)), "b": ("f16", (3, 16))}, lambda c, x: c.cpy(x.a, x.b),
        lambda x: oracles.cpy(x.a), op="cpy")
op_case("cpy/f16_f32", {"a": ("f16", (3, 16)), "b": ("f32", (6, 8))}, lambda c, x: c.cpy(x.a, x.b),
        lambda x: oracles.cpy(x.a).reshape(6, 8), op="cpy")
op_case("cpy/f32_bf16", {"a": ("f32", (3, 16)), "b": ("bf16", (3, 16))}, lambda c, x: c.cpy(x.a, x.b),
        lambda x: oracles.cpy(x.a), op="cpy")
op_case("cpy/f32_q8_0", {"a": ("f32", (2, 64)), "b": ("q8_0", (2, 64))}, lambda c, x: c.cpy(x.a, x.b),
        lambda x: oracles.cpy(x.a), nmse=NMSE_Q8_STORE, op="cpy")
op_case("cpy/f32_transposed", {"a": ("f32", (4, 6)), "b": ("f32", (6, 4))}, lambda c, x: c.cpy(c.transpose(x.a), x.b),
        lambda x: oracles.cpy(oracles.transpose(x.a)), op="cpy")
op_case("cpy/f32_i32", {"a": ("f32", (3, 8), integers(-50, 50)), "b": ("i32", (3, 8))}, lambda c, x: c.cpy(x.a, x.b),
        lambda x: oracles.cpy(x.a, np.int32), exact=True, op="cpy")

op_case("dup/f32", {"a": ("f32", (2, 3, 8))}, lambda c, x: c.dup(x.a), lambda x: oracles.dup(x.a), op="dup")
op_case("dup/f16/permuted", {"a": ("f16", (2, 3, 8))}, lambda c, x: c.dup(c.permute(x.a, 2, 0, 1, 3)),
        lambda x: oracles.dup(oracles.permute(x.a, 2, 0, 1, 3)), op="dup")
op_case("cont/f32", {"a": ("f32", (5, 8))}, lambda c, x: c.cont(c.transpose(x.a)),
        lambda x: oracles.cont(oracles.transpose(x.a)), op="cont")
op_case("cont/f16", {"a": ("f16", (2, 5, 8))}, lambda c, x: c.cont(c.permute(x.a, 1, 2, 0, 3)),
        lambda x: oracles.cont(oracles.permute(x.a, 1, 2, 0, 3)), op="cont")
_CONT_NE = {1: (40,), 2: (10, 4), 3: (5, 2, 4), 4: (5, 2, 2, 2)}
for _n, _ne in _CONT_NE.items():
    op_case(f"cont_{_n}d/f32", {"a": ("f32", (5, 8))},
            lambda c, x, _n=_n, _ne=_ne: getattr(c, f"cont_{_n}d")(c.transpose(x.a), *_ne),
            lambda x, _ne=_ne: oracles.cont_nd(oracles.transpose(x.a), _ne), op=f"cont_{_n}d")
    op_case(f"cont_{_n}d/f16", {"a": ("f16", (5, 8))},
            lambda c, x, _n=_n, _ne=_ne: getattr(c, f"cont_{_n}d")(c.transpose(x.a), *_ne),
            lambda x, _ne=_ne: oracles.cont_nd(oracles.transpose(x.a), _ne), op=f"cont_{_n}d")
    op_case(f"reshape_{_n}d/f32", {"a": ("f32", (5, 8))},
            lambda c, x, _n=_n, _ne=_ne: getattr(c, f"reshape_{_n}d")(x.a, *_ne),
            lambda x, _ne=_ne: oracles.reshape(x.a, _ne), op=f"reshape_{_n}d")
    op_case(f"reshape_{_n}d/f16", {"a": ("f16", (5, 8))},
            lambda c, x, _n=_n, _ne=_ne: c.cont(getattr(c, f"reshape_{_n}d")(x.a, *_ne)),
            lambda x, _ne=_ne: oracles.reshape(x.a, _ne), op=f"reshape_{_n}d")
op_case("reshape/f32", {"a": ("f32", (4, 6))}, lambda c, x: c.reshape(x.a, c.new_tensor("f32", [3, 8])),
        lambda x: oracles.reshape(x.a, (3, 8)), op="reshape")

for _axes in ((1, 0, 2, 3), (2, 0, 1, 3), (0, 2, 1, 3), (3, 2, 1, 0), (1, 3, 0, 2)):
    op_case("permute/f32/" + "".join(map(str, _axes)), {"a": ("f32", (2, 3, 4, 5))},
            lambda c, x, _a=_axes: c.cont(c.permute(x.a, *_a)), lambda x, _a=_axes: oracles.permute(x.a, *_a),
            op="permute")
op_case("permute/f16/2013", {"a": ("f16", (2, 3, 4, 5))}, lambda c, x: c.cont(c.permute(x.a, 2, 0, 1, 3)),
        lambda x: oracles.permute(x.a, 2, 0, 1, 3), op="permute")
op_case("transpose/f32", {"a": ("f32", (2, 3, 7))}, lambda c, x: c.cont(c.transpose(x.a)),
        lambda x: oracles.transpose(x.a), op="transpose")
op_case("transpose/f16", {"a": ("f16", (6, 7))}, lambda c, x: c.cont(c.transpose(x.a)),
        lambda x: oracles.transpose(x.a), op="transpose")

for _dim in range(4):
    _sa, _sb = [2, 3, 4, 5], [2, 3, 4, 5]
    _sb[3 - _dim] = 2
    op_case(f"concat/f32/dim{_dim}", {"a": ("f32", tuple(_sa)), "b": ("f32", tuple(_sb))},
            lambda c, x, _d=_dim: c.concat(x.a, x.b, _d), lambda x, _d=_dim: oracles.concat(x.a, x.b, _d), op="concat")
op_case("concat/f16/dim1", {"a": ("f16", (3, 8)), "b": ("f16", (2, 8))}, lambda c, x: c.concat(x.a, x.b, 1),
        lambda x: oracles.concat(x.a, x.b, 1), op="concat")
op_case("concat/f32/dim0_transposed", {"a": ("f32", (4, 3)), "b": ("f32", (3, 2))},
        lambda c, x: c.concat(c.transpose(x.a), x.b, 0), lambda x: oracles.concat(oracles.transpose(x.a), x.b, 0),
        op="concat")

op_case("repeat/f32", {"a": ("f32", (1, 3, 4))}, lambda c, x: c.repeat(x.a, c.new_tensor("f32", [8, 6, 2, 2])),
        lambda x: oracles.repeat(x.a, (8, 6, 2, 2)), op="repeat")
op_case("repeat/f16", {"a": ("f16", (2, 4))}, lambda c, x: c.repeat(x.a, c.new_tensor("f16", [4, 6])),
        lambda x: oracles.repeat(x.a, (4, 6)), op="repeat")
op_case("pad/f32", {"a": ("f32", (2, 3, 5))}, lambda c, x: c.pad(x.a, 3, 1, 2, 1),
        lambda x: oracles.pad(x.a, 3, 1, 2, 1), op="pad")
op_case("pad/f32/dim0", {"a": ("f32", (4, 5))}, lambda c, x: c.pad(x.a, 2),
        lambda x: oracles.pad(x.a, 2), op="pad")

# --- views (strided, made contiguous with cont so every backend returns them alike) ------------------------------------------
# a is NumPy (4, 5, 6, 8) F32: ne = [8, 6, 5, 4], nb = [4, 32, 192, 960]
_VA = ("f32", (4, 5, 6, 8))
op_case("view_1d/f32", {"a": _VA}, lambda c, x: c.cont(c.view_1d(x.a, 20, 4 * 7)),
        lambda x: oracles.view_1d(x.a, 20, 4 * 7), op="view_1d")
op_case("view_2d/f32", {"a": _VA}, lambda c, x: c.cont(c.view_2d(x.a, 5, 7, 64, 4 * 3)),
        lambda x: oracles.view_2d(x.a, 5, 7, 64, 4 * 3), op="view_2d")
op_case("view_3d/f32", {"a": _VA}, lambda c, x: c.cont(c.view_3d(x.a, 3, 4, 2, 32, 192 * 2, 4 * 2 + 192)),
        lambda x: oracles.view_3d(x.a, 3, 4, 2, 32, 192 * 2, 4 * 2 + 192), op="view_3d")
op_case("view_4d/f32", {"a": _VA}, lambda c, x: c.cont(c.view_4d(x.a, 4, 3, 2, 2, 64, 192, 960 * 2, 4 + 32)),
        lambda x: oracles.view_4d(x.a, 4, 3, 2, 2, 64, 192, 960 * 2, 4 + 32), op="view_4d")
op_case("view_2d/f16", {"a": ("f16", (6, 8))}, lambda c, x: c.cont(c.view_2d(x.a, 4, 3, 32, 2)),
        lambda x: oracles.view_2d(x.a, 4, 3, 32, 2), op="view_2d")
# view_nd: overlapping conv windows as llama.cpp's seed takes them. a: NumPy (channels 3, time 9);
# windows ne = [d_conv 4, window 6, channel 3, 1], nb = [4 (time step), 4 (next window), 36 (channel), 108]
op_case("view_nd/f32/windows", {"a": ("f32", (3, 9))},
        lambda c, x: c.cont(c.view_nd(x.a, [4, 6, 3, 1], [4, 4, 36, 108])),
        lambda x: oracles.view_nd(x.a, [4, 6, 3, 1], [4, 4, 36, 108]), op="view_nd")
# view_nd with a strided innermost dim: every other element of each row
op_case("view_nd/f32/stride0", {"a": ("f32", (2, 3, 8))},
        lambda c, x: c.cont(c.view_nd(x.a, [4, 3, 2, 1], [8, 32, 96, 192], 4)),
        lambda x: oracles.view_nd(x.a, [4, 3, 2, 1], [8, 32, 96, 192], 4), op="view_nd")
