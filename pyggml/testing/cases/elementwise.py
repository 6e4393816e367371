"""Cases of the element-wise ops and generators."""

from __future__ import annotations

import numpy as np

from pyggml import ops as _ops
from pyggml.ops.elementwise import GLU_OPS as _GLU_OPS
from pyggml.ops.elementwise import TRI_TYPES
from pyggml.testing import oracles
from pyggml.testing.cases import (
    NMSE_FP16_TABLE,
    integers,
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



# --- newer unary ops ---------------------------------------------------------------------------------
for _t, _shape in (("f32", (3, 5, 7)), ("f16", (5, 13)), ("bf16", (3, 11))):
    op_case(f"expm1/{_t}", {"a": ("f32" if _t == "f32" else _t, _shape, uniform(-3.0, 2.0))},
            lambda c, x: c.expm1(x.a), lambda x: oracles.expm1(x.a))
op_case("expm1/f32/transposed_cont", {"a": ("f32", (7, 5), uniform(-2.0, 2.0))},
        lambda c, x: c.expm1(c.cont(c.transpose(x.a))), lambda x: oracles.expm1(x.a.T))
# a permutation of dims 1 and 2 keeps rows contiguous: the unary kernels walk rows by stride
op_case("expm1/f32/permuted", {"a": ("f32", (3, 5, 7), uniform(-2.0, 2.0))},
        lambda c, x: c.expm1(c.permute(x.a, 0, 2, 1, 3)), lambda x: oracles.expm1(x.a.transpose(1, 0, 2)))

_p: tuple[float, ...]  # the parameters of xielu, pad_ext and pad_circular below
for _i, (_t, _p) in enumerate((("f32", (0.8, 0.8, 0.5, -1e-6)), ("f32", (1.5, -0.3, 0.2, -1e-4)),
                               ("f16", (0.8, 0.8, 0.5, -1e-6)), ("f32", (25.0, 30.0, 0.0, -1e-6)))):
    op_case(f"xielu/{_t}/p{_i}", {"a": (_t, (3, 5, 7) if _t == "f32" else (5, 13), uniform(-3.0, 3.0))},
            lambda c, x, _p=_p: c.xielu(x.a, *_p), lambda x, _p=_p: oracles.xielu(x.a, *_p))

# --- gated linear units ----------------------------------------------------------------------------
# the CPU's F32 geglu / geglu_quick look the activation up in an fp16 table (as gelu does)
_GLU_NMSE_F32 = {"geglu": NMSE_FP16_TABLE, "geglu_quick": NMSE_FP16_TABLE}
for _op in _GLU_OPS:
    _fn = getattr(oracles, _op)
    _bound = next((v for k, v in _GLU_NMSE_F32.items() if _op in (k, k + "_swapped", k + "_split")), None)
    _split = _op.endswith("_split")
    for _t, _shape in (("f32", (3, 5, 14)), ("f16", (7, 10)), ("bf16", (5, 6)), ("f32", (2, 11, 26))):
        _ins = {"a": (_t, _shape, uniform(-4.0, 4.0))}
        if _split:
            _ins["b"] = (_t, _shape, uniform(-2.0, 2.0))
        _name = f"{_op}/{_t}" + ("/odd" if _shape[-1] in (26,) else "")
        if _split:
            op_case(_name, _ins, lambda c, x, _op=_op: getattr(c, _op)(x.a, x.b),
                    lambda x, _fn=_fn: _fn(x.a, x.b), nmse=_bound if _t == "f32" else None)
        else:
            op_case(_name, _ins, lambda c, x, _op=_op: getattr(c, _op)(x.a),
                    lambda x, _fn=_fn: _fn(x.a), nmse=_bound if _t == "f32" else None)
    # a column slice: rows of 14 out of 20 (ggml needs only ggml_is_contiguous_1: row stride free)
    _ins = {"a": ("f32", (5, 20), uniform(-4.0, 4.0))}
    if _split:
        _ins["b"] = ("f32", (5, 14), uniform(-2.0, 2.0))
        op_case(f"{_op}/f32/row_slice", _ins, lambda c, x, _op=_op: getattr(c, _op)(c.view_2d(x.a, 14, 5, x.a.nb[1], 12), x.b),
                lambda x, _fn=_fn: _fn(x.a[:, 3:17], x.b), nmse=_bound)
    else:
        op_case(f"{_op}/f32/row_slice", _ins, lambda c, x, _op=_op: getattr(c, _op)(c.view_2d(x.a, 14, 5, x.a.nb[1], 12)),
                lambda x, _fn=_fn: _fn(x.a[:, 3:17]), nmse=_bound)

for _i, (_alpha, _limit) in enumerate(((1.702, 7.0), (1.0, 1.5), (0.5, 0.75))):
    op_case(f"swiglu_oai/f32/p{_i}", {"a": ("f32", (3, 5, 18), uniform(-4.0, 4.0))},
            lambda c, x, _a=_alpha, _l=_limit: c.swiglu_oai(x.a, None, _a, _l),
            lambda x, _a=_alpha, _l=_limit: oracles.swiglu_oai(x.a, None, _a, _l))
    op_case(f"swiglu_oai/f32/split_p{_i}", {"a": ("f32", (5, 13), uniform(-4.0, 4.0)), "b": ("f32", (5, 13), uniform(-3.0, 3.0))},
            lambda c, x, _a=_alpha, _l=_limit: c.swiglu_oai(x.a, x.b, _a, _l),
            lambda x, _a=_alpha, _l=_limit: oracles.swiglu_oai(x.a, x.b, _a, _l))
    op_case(f"swiglu_clamp/f32/p{_i}", {"a": ("f32", (3, 5, 18), uniform(-4.0, 4.0))},
            lambda c, x, _l=_limit: c.swiglu_clamp(x.a, None, _l), lambda x, _l=_limit: oracles.swiglu_clamp(x.a, None, _l))
    op_case(f"swiglu_clamp/f16/split_p{_i}", {"a": ("f16", (5, 13), uniform(-4.0, 4.0)), "b": ("f16", (5, 13), uniform(-3.0, 3.0))},
            lambda c, x, _l=_limit: c.swiglu_clamp(x.a, x.b, _l), lambda x, _l=_limit: oracles.swiglu_clamp(x.a, x.b, _l))

# --- more arithmetic, casts, generators --------------------------------------------------------------
for _ta, _tb, _shape in (("f32", "f32", (3, 5, 7)), ("f16", "f16", (5, 13)), ("f16", "f32", (2, 11)),
                         ("bf16", "bf16", (3, 9)), ("bf16", "f32", (7, 5))):
    op_case(f"add1/{_ta}_{_tb}/{'x'.join(map(str, _shape))}", {"a": (_ta, _shape), "b": (_tb, (1,), uniform(0.5, 1.5))},
            lambda c, x: c.add1(x.a, x.b), lambda x: oracles.add1(x.a, x.b))
for _ta, _tb, _to in (("f16", "f32", "f32"), ("bf16", "f32", "f32"), ("f16", "f16", "f16"), ("f16", "f32", "f16"),
                      ("bf16", "f32", "bf16")):
    op_case(f"add_cast/{_ta}_{_tb}/to_{_to}", {"a": (_ta, (3, 5, 12)), "b": (_tb, (1, 5, 12))},
            lambda c, x, _to=_to: c.add_cast(x.a, x.b, _to), lambda x, _to=_to: oracles.add_cast(x.a, x.b, _to))
op_case("add_cast/f16_f32/rows", {"a": ("f16", (4, 3, 10)), "b": ("f32", (1, 1, 10))},
        lambda c, x: c.add_cast(x.a, x.b, "f32"), lambda x: oracles.add_cast(x.a, x.b, "f32"))
for _ta, _to in (("f32", "f16"), ("f32", "bf16"), ("f16", "f32"), ("bf16", "f32"), ("f16", "bf16"), ("f32", "f32")):
    op_case(f"cast/{_ta}/to_{_to}", {"a": (_ta, (3, 5, 7), uniform(-3, 3))},
            lambda c, x, _to=_to: c.cast(x.a, _to), lambda x, _to=_to: oracles.cast(x.a, _to))
op_case("cast/f32/transposed_to_f16", {"a": ("f32", (7, 5))}, lambda c, x: c.cast(c.transpose(x.a), "f16"),
        lambda x: oracles.cast(x.a.T, "f16"))

for _t, _s, _b in (("f32", 1.5, -0.25), ("f32", -0.5, 2.0), ("bf16", 0.75, 0.5)):
    op_case(f"scale_bias/{_t}/s{_s}_b{_b}", {"a": (_t, (3, 5, 7))}, lambda c, x, _s=_s, _b=_b: c.scale_bias(x.a, _s, _b),
            lambda x, _s=_s, _b=_b: oracles.scale_bias(x.a, _s, _b))

for _t, _c in (("f32", 2.5), ("f32", -0.125), ("f16", 3.0)):
    op_case(f"fill/{_t}/{_c}", {"a": (_t, (3, 5, 7))}, lambda c, x, _c=_c: c.fill(x.a, _c),
            lambda x, _c=_c: oracles.fill(x.a, _c), exact=True)

# 2-d only: the CPU counts 3-d and 4-d inputs wrongly and its preflight refuses them (docs/findings.md)
for _shape in ((5, 13), (1, 21)):
    op_case(f"count_equal/i32/{'x'.join(map(str, _shape))}", {"a": ("i32", _shape, integers(0, 3)), "b": ("i32", _shape, integers(0, 3))},
            lambda c, x: c.count_equal(x.a, x.b), lambda x: oracles.count_equal(x.a, x.b), exact=True)

for _name, _tt in TRI_TYPES.items():
    op_case(f"tri/f32/{_name}", {"a": ("f32", (2, 7, 7))}, lambda c, x, _tt=_tt: c.tri(x.a, _tt),
            lambda x, _tt=_tt: oracles.tri(x.a, _tt), exact=True)
op_case("tri/f32/lower_by_name", {"a": ("f32", (5, 5))}, lambda c, x: c.tri(x.a, "lower"),
        lambda x: oracles.tri(x.a, "lower"), exact=True)

op_case("diag/f32", {"a": ("f32", (1, 7))}, lambda c, x: c.diag(x.a), lambda x: oracles.diag(x.a), exact=True)
op_case("diag/f32/batched", {"a": ("f32", (2, 3, 1, 5))}, lambda c, x: c.diag(x.a), lambda x: oracles.diag(x.a), exact=True)

for _n_past in (0, 1, 3):
    op_case(f"diag_mask_zero/f32/n_past{_n_past}", {"a": ("f32", (3, 5, 7))}, lambda c, x, _n=_n_past: c.diag_mask_zero(x.a, _n),
            lambda x, _n=_n_past: oracles.diag_mask_zero(x.a, _n), exact=True)
op_case("diag_mask_zero/f32/4d", {"a": ("f32", (2, 3, 5, 5))}, lambda c, x: c.diag_mask_zero(x.a, 1),
        lambda x: oracles.diag_mask_zero(x.a, 1), exact=True)

for _sh in ((2, 0, 0, 0), (-3, 1, 0, 0), (0, -2, 1, 0), (4, 3, -1, 1)):
    op_case(f"roll/f32/{'_'.join(map(str, _sh))}", {"a": ("f32", (2, 3, 5, 7))}, lambda c, x, _sh=_sh: c.roll(x.a, *_sh),
            lambda x, _sh=_sh: oracles.roll(x.a, *_sh), exact=True)
op_case("roll/f32/permuted", {"a": ("f32", (3, 5, 7))}, lambda c, x: c.roll(c.permute(x.a, 0, 2, 1, 3), 3, -2),
        lambda x: oracles.roll(x.a.transpose(1, 0, 2), 3, -2), exact=True)

for _t, _shape, _ne in (("f32", (3, 5), (10, 6, 2, 1)), ("f16", (1, 3, 5), (5, 6, 2, 3)), ("bf16", (2, 7), (21, 2, 1, 2)),
                        ("i32", (3, 1), (3, 3, 1, 1))):
    op_case(f"repeat_4d/{_t}/{'x'.join(map(str, _ne))}", {"a": (_t, _shape, integers(-50, 50) if _t == "i32" else uniform())},
            lambda c, x, _ne=_ne: c.repeat_4d(x.a, *_ne), lambda x, _ne=_ne: oracles.repeat_4d(x.a, *_ne), exact=True)

for _shape in ((5, 13), (2, 3, 7), (1, 33)):
    op_case(f"cumsum/f32/{'x'.join(map(str, _shape))}", {"a": ("f32", _shape)}, lambda c, x: c.cumsum(x.a),
            lambda x: oracles.cumsum(x.a))
op_case("cumsum/f32/permuted", {"a": ("f32", (3, 5, 7))}, lambda c, x: c.cumsum(c.permute(x.a, 0, 2, 1, 3)),
        lambda x: oracles.cumsum(x.a.transpose(1, 0, 2)))


# --- acc / set (strides and offsets in bytes, of a's contiguous layout) -------------------------------
# a (3, 5, 12) F32: nb1 = 48, nb2 = 240; b written as a sub-block or with a row stride of its own
_VIEWS = (((3, 5, 12), (2, 3, 4), (48, 240, 720, 4 * (12 + 2))),   # a 2x3x4 block at (0, 1, 2)
          ((3, 5, 12), (5, 7), (48, 240, 720, 8)),                  # 5 rows of 7, from column 2
          ((3, 5, 12), (4, 6), (96, 240, 720, 4)),                  # every other row
          ((7, 13), (2, 3, 4), (4 * 13, 4 * 13 * 3, 720, 4 * 13)))  # a 3D b into a 2D a
# views whose strides do not nest (view2, set_1d of a b longer than a's row) are unsupported on Vulkan:
# its shader divides a's flat index by the view's strides (pyggml/preflight.py, docs/findings.md)
for _ta, _tb in (("f32", "f32"), ("i32", "i32")):
    for _i, (_sa, _sb, _v) in enumerate(_VIEWS):
        _gen = (integers(-100, 100),) if _ta == "i32" else ()
        _ins = {"a": (_ta, _sa, *_gen), "b": (_tb, _sb, *_gen)}
        if _ta == "f32":
            op_case(f"acc/f32/view{_i}", _ins, lambda c, x, _v=_v: c.acc(x.a, x.b, *_v),
                    lambda x, _v=_v: oracles.acc(x.a, x.b, *_v))
        op_case(f"set/{_ta}/view{_i}", _ins, lambda c, x, _v=_v: c.set(x.a, x.b, *_v),
                lambda x, _v=_v: oracles.set(x.a, x.b, *_v), exact=True)
for _off in (0, 4 * 17):
    op_case(f"set_1d/f32/at{_off}", {"a": ("f32", (3, 5, 12)), "b": ("f32", (23,))},
            lambda c, x, _o=_off: c.set_1d(x.a, x.b, _o), lambda x, _o=_off: oracles.set_1d(x.a, x.b, _o), exact=True)
    op_case(f"set_1d/f32/in_row_at{_off}", {"a": ("f32", (3, 5, 12)), "b": ("f32", (7,))},
            lambda c, x, _o=_off: c.set_1d(x.a, x.b, _o), lambda x, _o=_off: oracles.set_1d(x.a, x.b, _o), exact=True)
    op_case(f"set_2d/f32/at{_off}", {"a": ("f32", (3, 5, 12)), "b": ("f32", (3, 5))},
            lambda c, x, _o=_off: c.set_2d(x.a, x.b, 96, _o), lambda x, _o=_off: oracles.set_2d(x.a, x.b, 96, _o), exact=True)
op_case("set_1d/i32", {"a": ("i32", (5, 7), integers(-9, 9)), "b": ("i32", (11,), integers(-9, 9))},
        lambda c, x: c.set_1d(x.a, x.b, 8), lambda x: oracles.set_1d(x.a, x.b, 8), exact=True)

# --- padding, embeddings -------------------------------------------------------------------------------
for _p in ((1, 2, 0, 0, 0, 0, 0, 0), (0, 3, 2, 1, 0, 0, 0, 0), (2, 0, 1, 1, 1, 2, 0, 0), (1, 1, 0, 2, 2, 0, 1, 1)):
    _tag = "_".join(map(str, _p))
    op_case(f"pad_ext/f32/{_tag}", {"a": ("f32", (2, 3, 5, 7))}, lambda c, x, _p=_p: c.pad_ext(x.a, *_p),
            lambda x, _p=_p: oracles.pad_ext(x.a, *_p), exact=True)
    op_case(f"pad_ext_circular/f32/{_tag}", {"a": ("f32", (2, 3, 5, 7))}, lambda c, x, _p=_p: c.pad_ext_circular(x.a, *_p),
            lambda x, _p=_p: oracles.pad_ext_circular(x.a, *_p), exact=True)
op_case("pad_ext/f32/permuted", {"a": ("f32", (3, 5, 7))}, lambda c, x: c.pad_ext(c.permute(x.a, 0, 2, 1, 3), 1, 2, 2, 1),
        lambda x: oracles.pad_ext(x.a.transpose(1, 0, 2), 1, 2, 2, 1), exact=True)
for _p in ((3, 0, 0, 0), (2, 4, 1, 0), (7, 5, 3, 2)):
    op_case(f"pad_circular/f32/{'_'.join(map(str, _p))}", {"a": ("f32", (2, 3, 5, 7))},
            lambda c, x, _p=_p: c.pad_circular(x.a, *_p), lambda x, _p=_p: oracles.pad_circular(x.a, *_p), exact=True)

for _n, _dim, _period in ((5, 16, 10000), (7, 13, 10000), (3, 32, 100), (1, 6, 5000)):
    op_case(f"timestep_embedding/f32/n{_n}_dim{_dim}_p{_period}", {"t": ("f32", (_n,), uniform(0.0, 100.0))},
            lambda c, x, _d=_dim, _p=_period: c.timestep_embedding(x.t, _d, _p),
            lambda x, _d=_dim, _p=_period: oracles.timestep_embedding(x.t, _d, _p))

# --- more cases of the older ops: odd sizes, strided inputs, broadcasting in every dim, BF16 ----------
_BCAST = (((3, 5, 7, 11), (1, 1, 1, 11)), ((3, 5, 7, 11), (3, 1, 7, 1)), ((3, 5, 7, 11), (1, 5, 1, 11)),
          ((2, 5, 7, 13), (2, 5, 7, 1)), ((6, 5, 3, 5), (3, 5, 1, 5)), ((4, 9, 2, 3), (2, 3, 2, 3)))
for _op in ("add", "sub", "mul", "div"):
    _b_gen = (signed_away_from_zero(),) if _op == "div" else ()
    _fn = getattr(oracles, _op)
    for _i, (_sa, _sb) in enumerate(_BCAST):
        op_case(f"{_op}/f32/bcast{_i}", {"a": ("f32", _sa), "b": ("f32", _sb, *_b_gen)},
                lambda c, x, _op=_op: getattr(c, _op)(x.a, x.b), lambda x, _fn=_fn: _fn(x.a, x.b))
    for _ta, _tb in (("bf16", "bf16"), ("bf16", "f32"), ("f16", "f32")):
        op_case(f"{_op}/{_ta}_{_tb}/odd_bcast", {"a": (_ta, (3, 7, 13)), "b": (_tb, (1, 7, 13), *_b_gen)},
                lambda c, x, _op=_op: getattr(c, _op)(x.a, x.b), lambda x, _fn=_fn: _fn(x.a, x.b))
    # permuted a and b: rows stay contiguous, the kernels walk dims 1..3 by stride
    op_case(f"{_op}/f32/permuted_a", {"a": ("f32", (5, 3, 7)), "b": ("f32", (3, 5, 7), *_b_gen)},
            lambda c, x, _op=_op: getattr(c, _op)(c.permute(x.a, 0, 2, 1, 3), x.b),
            lambda x, _fn=_fn: _fn(x.a.transpose(1, 0, 2), x.b))
    op_case(f"{_op}/f32/permuted_b_bcast", {"a": ("f32", (2, 3, 5, 7)), "b": ("f32", (5, 1, 7), *_b_gen)},
            lambda c, x, _op=_op: getattr(c, _op)(x.a, c.permute(x.b, 0, 2, 1, 3)),
            lambda x, _fn=_fn: _fn(x.a, x.b.transpose(1, 0, 2)))
    op_case(f"{_op}/f32/row_slice", {"a": ("f32", (5, 20)), "b": ("f32", (5, 9), *_b_gen)},
            lambda c, x, _op=_op: getattr(c, _op)(c.view_2d(x.a, 9, 5, x.a.nb[1], 8), x.b),
            lambda x, _fn=_fn: _fn(x.a[:, 2:11], x.b))

for _op in _ops.UNARY_OPS:
    _gen = (_UNARY_GEN[_op],) if _op in _UNARY_GEN else ()
    _fn = getattr(oracles, _op)
    op_case(f"{_op}/bf16", {"a": ("bf16", (5, 13), *_gen)}, lambda c, x, _op=_op: getattr(c, _op)(x.a),
            lambda x, _fn=_fn: _fn(x.a))
    op_case(f"{_op}/f32/odd_permuted", {"a": ("f32", (5, 3, 7), *_gen)},
            lambda c, x, _op=_op: getattr(c, _op)(c.permute(x.a, 0, 2, 1, 3)),
            lambda x, _fn=_fn: _fn(x.a.transpose(1, 0, 2)), nmse=_UNARY_NMSE_F32.get(_op))

for _s in (0.3, -2.5, 0.0):
    op_case(f"scale/f32/odd_{_s}", {"a": ("f32", (3, 7, 11))}, lambda c, x, _s=_s: c.scale(x.a, _s),
            lambda x, _s=_s: oracles.scale(x.a, _s))
for _lo, _hi in ((-0.25, 0.25), (0.0, 1.0), (-1.5, -0.5)):
    op_case(f"clamp/f32/odd_{_lo}_{_hi}", {"a": ("f32", (3, 7, 11), uniform(-2, 2))},
            lambda c, x, _lo=_lo, _hi=_hi: c.clamp(x.a, _lo, _hi), lambda x, _lo=_lo, _hi=_hi: oracles.clamp(x.a, _lo, _hi))
for _slope in (0.0, 0.5, -0.3):
    op_case(f"leaky_relu/f32/odd_{_slope}", {"a": ("f32", (3, 7, 11))}, lambda c, x, _s=_slope: c.leaky_relu(x.a, _s),
            lambda x, _s=_slope: oracles.leaky_relu(x.a, _s))
op_case("arange/f32/negative_start", {}, lambda c, x: c.arange(-7.5, -1.0, 0.25), lambda x: oracles.arange(-7.5, -1.0, 0.25))
