"""Specs of the element-wise ops and generators: arithmetic, unary activations, gated linear units,
casts, fills, masks, acc / set, padding, embeddings."""

from __future__ import annotations

import math
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import numpy as np

from pyggml import ops
from pyggml.errors import GraphError, OpError
from pyggml.ops.elementwise import GLU_OPS, TRI_TYPES, UNARY_OPS
from pyggml.testing.engine import oracles
from pyggml.testing.engine.opdb import *  # noqa: F403 - the database's vocabulary, opdb.__all__
from pyggml.testing.engine.opdb import hints

# the CPU looks F32 gelu / gelu_quick (and the geglu / geglu_quick GLUs) up in an fp16 table: their F32
# outputs get F16's bound. A plain bound (not one for types=("f32",)) because the node checks
# (pyggml/testing/engine/nodes.py) apply only a spec's plain bound; BF16 keeps its own, looser bound.
_FP16_TABLE = [
    Bound(NMSE_FP16_TABLE, why="the CPU looks F32 inputs up in a table of F16 results (ggml-cpu's GGML_GELU_FP16)"),
    Bound(NMSE_BF16, types=("bf16",), why="BF16 inputs and output (8 significant bits)"),
]
F32 = "f32"


def _dims(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape))


def _src(n: Node, i: int) -> np.ndarray | None:
    """Source i of a node, None where the slot is empty (trailing empty slots are not in n.src)."""
    return n.src[i] if i < len(n.src) else None


def _gate(x: SimpleNamespace) -> Any:
    """The gate input b of a GLU sample, None where the sample has only a (the halves of a's rows)."""
    return vars(x).get("b")


# --- bad calls, by op (each spec takes its own below) --------------------------------------------------


for _op in ("add", "sub", "mul", "div"):
    bad(
        _op,
        lambda c, t, _op=_op: getattr(ops, _op)(c, t("f32", (3, 8)), t("f32", (2, 8))),
        ValueError,
        "ggml_can_repeat(b, a)",
    )
    bad(
        _op,
        lambda c, t, _op=_op: getattr(ops, _op)(c, t("f32", (3, 8)), t("f16", (3, 8))),
        ValueError,
        "b of a's type or F32",
    )
    bad(
        _op,
        lambda c, t, _op=_op: getattr(ops, _op)(c, np.zeros((3, 8), np.float32), t("f32", (3, 8))),
        TypeError,
        "a must be a Tensor",
    )
    bad(
        _op,
        lambda c, t, _op=_op: getattr(ops, _op)(c, ops.transpose(c, t("f32", (8, 8))), t("f32", (8, 8))),
        ValueError,
        "contiguous",
    )
bad("add", lambda c, t: ops.add(c, t("i32", (3, 8)), t("i32", (3, 8))), ValueError, "the CPU kernel takes")

bad("scale", lambda c, t: ops.scale(c, t("f16", (3, 8)), 2.0), ValueError, "takes BF16/F32 input, got F16")
bad("scale", lambda c, t: ops.scale(c, ops.transpose(c, t("f32", (3, 8))), 2.0), ValueError, "ggml_is_padded_1d(a)")
bad("clamp", lambda c, t: ops.clamp(c, t("f32", (3, 8)), 1.0, -1.0), ValueError, "must not exceed max")
bad("clamp", lambda c, t: ops.clamp(c, t("bf16", (3, 8)), -1.0, 1.0), ValueError, "takes F16/F32 input, got BF16")

for _op in UNARY_OPS:
    bad(_op, lambda c, t, _op=_op: getattr(ops, _op)(c, t("i32", (3, 8))), ValueError, "the CPU kernel takes")
    bad(_op, lambda c, t, _op=_op: getattr(ops, _op)(c, [1.0, 2.0]), TypeError, "a must be a Tensor")
bad("exp", lambda c, t: ops.exp(c, ops.transpose(c, t("f32", (3, 8)))), ValueError, "contiguous")
bad("leaky_relu", lambda c, t: ops.leaky_relu(c, t("bf16", (3, 8))), ValueError, "takes F16/F32 input, got BF16")
bad("leaky_relu", lambda c, t: ops.leaky_relu(c, ops.transpose(c, t("f32", (3, 8)))), ValueError, "rows")
bad("arange", lambda c, t: ops.arange(c, 5.0, 1.0), ValueError, "stop (1.0) must be greater than start (5.0)")
bad("arange", lambda c, t: ops.arange(c, 0.0, 1.0, -0.5), ValueError, "step must be positive")

bad("expm1", lambda c, t: ops.expm1(c, t("i32", (3, 8))), GraphError, "the CPU kernel takes")
bad("expm1", lambda c, t: ops.expm1(c, np.zeros(3)), TypeError, "a must be a Tensor")
bad("xielu", lambda c, t: ops.xielu(c, t("f32", (3, 8)), float("nan")), ValueError, "must be finite")
bad("xielu", lambda c, t: ops.xielu(c, t("f32", (3, 8)), "x"), TypeError, "alpha_n must be a number")
bad("swiglu_oai", lambda c, t: ops.swiglu_oai(c, t("f16", (3, 8))), GraphError, "takes F32 input")
bad(
    "swiglu_oai",
    lambda c, t: ops.swiglu_oai(c, t("f32", (3, 8)), None, 1.0, -1.0),
    ValueError,
    "limit must be positive",
)
bad("swiglu_oai", lambda c, t: ops.swiglu_oai(c, t("f32", (3, 8)), t("f32", (3, 7))), OpError, "ggml_are_same_shape")
bad("swiglu_clamp", lambda c, t: ops.swiglu_clamp(c, t("bf16", (3, 8))), GraphError, "takes F16/F32 input")
bad("swiglu_clamp", lambda c, t: ops.swiglu_clamp(c, t("f32", (3, 7))), ValueError, "even length")
bad("swiglu_clamp", lambda c, t: ops.swiglu_clamp(c, t("f32", (3, 8)), 1.0), TypeError, "b must be a Tensor")
for _op in GLU_OPS:
    if _op.endswith("_split"):
        bad(
            _op,
            lambda c, t, _op=_op: getattr(ops, _op)(c, t("f32", (3, 8)), t("f16", (3, 8))),
            OpError,
            "a->type == b->type",
        )
        bad(
            _op,
            lambda c, t, _op=_op: getattr(ops, _op)(c, t("f32", (3, 8)), t("f32", (3, 6))),
            OpError,
            "ggml_are_same_shape",
        )
        bad(
            _op,
            lambda c, t, _op=_op: getattr(ops, _op)(c, t("i32", (3, 8)), t("i32", (3, 8))),
            GraphError,
            "the CPU kernel takes",
        )
    else:
        bad(_op, lambda c, t, _op=_op: getattr(ops, _op)(c, t("f32", (3, 9))), ValueError, "even length")
        bad(
            _op,
            lambda c, t, _op=_op: getattr(ops, _op)(c, ops.transpose(c, t("f32", (8, 8)))),
            OpError,
            "ggml_is_contiguous_1(a)",
        )
        bad(_op, lambda c, t, _op=_op: getattr(ops, _op)(c, "a"), TypeError, "a must be a Tensor")

bad("add1", lambda c, t: ops.add1(c, t("f32", (3, 8)), t("f32", (2,))), OpError, "ggml_is_scalar(b)")
bad("add1", lambda c, t: ops.add1(c, t("f32", (3, 8)), t("f16", (1,))), GraphError, "b of a's type or F32")
bad("add1", lambda c, t: ops.add1(c, t("i32", (3, 8)), t("i32", (1,))), GraphError, "the CPU kernel takes")
bad("add_cast", lambda c, t: ops.add_cast(c, t("f32", (3, 8)), t("f32", (3, 8)), "f16"), OpError, "ggml_is_quantized")
bad(
    "add_cast",
    lambda c, t: ops.add_cast(c, t("f16", (3, 8)), t("f16", (3, 8)), "f32"),
    GraphError,
    "makes a F16 result",
)
bad(
    "add_cast",
    lambda c, t: ops.add_cast(c, t("f16", (3, 8)), t("f32", (3, 8)), "nope"),
    ValueError,
    "unknown ggml type",
)
bad("cast", lambda c, t: ops.cast(c, t("f32", (3, 8)), 1.5), TypeError, "type")
bad("cast", lambda c, t: ops.cast(c, t("i32", (3, 8)), "f16"), GraphError, "no conversion from I32 to F16")
bad("scale_bias", lambda c, t: ops.scale_bias(c, t("f32", (3, 8)), 1.0, None), TypeError, "b must be a number")
bad("scale_bias", lambda c, t: ops.scale_bias(c, t("f16", (3, 8)), 1.0, 0.5), GraphError, "the CPU kernel takes")
bad("fill", lambda c, t: ops.fill(c, t("bf16", (3, 8)), 1.0), OpError, "a->type == GGML_TYPE_F32")
bad("fill", lambda c, t: ops.fill(c, t("f32", (3, 8)), "x"), TypeError, "c must be a number")
bad("count_equal", lambda c, t: ops.count_equal(c, t("f32", (3, 8)), t("f32", (3, 8))), GraphError, "takes I32 inputs")
bad("count_equal", lambda c, t: ops.count_equal(c, t("i32", (3, 8)), t("i32", (3, 7))), OpError, "ggml_are_same_shape")
bad("tri", lambda c, t: ops.tri(c, t("f32", (4, 4)), 4), ValueError, "type must be one of")
bad("tri", lambda c, t: ops.tri(c, t("f32", (4, 5))), OpError, "a->ne[0] == a->ne[1]")
bad("tri", lambda c, t: ops.tri(c, t("f32", (4, 4)), "diag"), ValueError, "type must be one of")
bad("diag", lambda c, t: ops.diag(c, t("f32", (3, 8))), OpError, "a->ne[1] == 1")
bad("diag", lambda c, t: ops.diag(c, t("f16", (1, 8))), GraphError, "the CPU kernel takes")
bad("diag_mask_zero", lambda c, t: ops.diag_mask_zero(c, t("f32", (3, 8)), -1), ValueError, "n_past must be >= 0")
bad("diag_mask_zero", lambda c, t: ops.diag_mask_zero(c, t("f16", (3, 8)), 1), GraphError, "the CPU kernel takes")
bad("roll", lambda c, t: ops.roll(c, t("f32", (3, 8)), 8), OpError, "abs(shift0) < a->ne[0]")
bad("roll", lambda c, t: ops.roll(c, t("f16", (3, 8)), 1), GraphError, "the CPU kernel takes")
bad("roll", lambda c, t: ops.roll(c, t("f32", (3, 8)), 2**40), ValueError, "do not fit a C int")
bad("repeat_4d", lambda c, t: ops.repeat_4d(c, t("f32", (3, 8)), 12, 3), OpError, "can_repeat")
bad("repeat_4d", lambda c, t: ops.repeat_4d(c, t("f32", (3, 8)), 0, 3), ValueError, "ne must be positive")
bad("cumsum", lambda c, t: ops.cumsum(c, t("f16", (3, 8))), OpError, "a->type == GGML_TYPE_F32")
bad("cumsum", lambda c, t: ops.cumsum(c, ops.transpose(c, t("f32", (3, 8)))), GraphError, "contiguous rows")

bad("acc", lambda c, t: ops.acc(c, t("f32", (3, 8)), t("f32", (2, 4)), 32, 96, 96, 80), ValueError, "past a's 96 bytes")
bad(
    "acc",
    lambda c, t: ops.acc(c, t("f32", (3, 8)), t("f32", (2, 4)), 32, 96, 96, 2),
    ValueError,
    "multiples of a's element size",
)
bad("acc", lambda c, t: ops.acc(c, t("f32", (3, 8)), t("f32", (2, 4)), 8, 96, 96, 0), ValueError, "overlaps itself")
bad(
    "acc",
    lambda c, t: ops.acc(c, t("f16", (3, 8)), t("f16", (2, 4)), 16, 48, 48, 0),
    OpError,
    "a->type == GGML_TYPE_F32",
)
bad("acc", lambda c, t: ops.acc(c, t("f32", (3, 8)), t("f32", (2, 4)), -4, 96, 96, 0), ValueError, "must be >= 0")
bad("set", lambda c, t: ops.set(c, t("f16", (3, 8)), t("f16", (2, 4)), 16, 48, 48, 0), GraphError, "both F32/I32")
bad("set", lambda c, t: ops.set(c, t("f32", (3, 8)), t("f32", (2, 4)), 32, 96, 96, 96), ValueError, "past a's")
bad("set", lambda c, t: ops.set(c, t("f32", (3, 8)), "b", 32, 96, 96, 0), TypeError, "b must be a Tensor")
bad("set_1d", lambda c, t: ops.set_1d(c, t("f32", (3, 8)), t("f32", (5,)), 80), ValueError, "past a's")
bad("set_1d", lambda c, t: ops.set_1d(c, t("f32", (3, 8)), t("f32", (5,)), "x"), TypeError, "offset must be an integer")
bad("set_2d", lambda c, t: ops.set_2d(c, t("f32", (3, 8)), t("f32", (2, 4)), 84, 0), ValueError, "past a's")
bad("set_2d", lambda c, t: ops.set_2d(c, t("f32", (3, 8)), t("f32", (2, 4)), 8, 0), ValueError, "overlaps itself")

bad("pad_ext", lambda c, t: ops.pad_ext(c, t("f32", (3, 8)), -1), ValueError, "paddings must be >= 0")
bad("pad_ext", lambda c, t: ops.pad_ext(c, t("f16", (3, 8)), 1), GraphError, "the CPU kernel takes")
bad(
    "pad_ext_circular", lambda c, t: ops.pad_ext_circular(c, t("f32", (3, 8)), 9), ValueError, "must not exceed the dim"
)
bad(
    "pad_ext_circular", lambda c, t: ops.pad_ext_circular(c, t("f32", (3, 8)), "x"), TypeError, "lp0 must be an integer"
)
bad("pad_circular", lambda c, t: ops.pad_circular(c, t("f32", (3, 8)), -2), ValueError, "paddings must be >= 0")
bad("pad_circular", lambda c, t: ops.pad_circular(c, t("i32", (3, 8)), 2), GraphError, "the CPU kernel takes")
bad("timestep_embedding", lambda c, t: ops.timestep_embedding(c, t("f32", (2, 8)), 16), ValueError, "must be a vector")
bad("timestep_embedding", lambda c, t: ops.timestep_embedding(c, t("f32", (8,)), 0), ValueError, "must be positive")
bad(
    "timestep_embedding", lambda c, t: ops.timestep_embedding(c, t("f16", (8,)), 16), GraphError, "the CPU kernel takes"
)
# ggml-cpu indexes 3-d/4-d rows wrongly (docs/findings.md): refused before compute
bad(
    "count_equal",
    lambda c, t: ops.count_equal(c, t("i32", (2, 3, 7)), t("i32", (2, 3, 7))),
    GraphError,
    "counts 3-d and 4-d inputs wrongly",
)

# scalar arguments: text and truth values are no numbers, a float is no integer (issue 19: `scale(a, "2")`
# was taken as 2.0, and `int(2.7)` silently truncated)
bad("scale", lambda c, t: ops.scale(c, t("f32", (3, 8)), "2"), TypeError, "s must be a number, got str")
bad("scale", lambda c, t: ops.scale(c, t("f32", (3, 8)), True), TypeError, "s must be a number, got bool")
bad("scale_bias", lambda c, t: ops.scale_bias(c, t("f32", (3, 8)), 1.0, b"1"), TypeError, "b must be a number")
bad("clamp", lambda c, t: ops.clamp(c, t("f32", (3, 8)), "-1", 1.0), TypeError, "min must be a number, got str")
bad("fill", lambda c, t: ops.fill(c, t("f32", (3, 8)), np.bool_(True)), TypeError, "c must be a number, got bool")
bad("leaky_relu", lambda c, t: ops.leaky_relu(c, t("f32", (3, 8)), "0.1"), TypeError, "negative_slope must be a number")
bad("arange", lambda c, t: ops.arange(c, 0, "5"), TypeError, "stop must be a number, got str")
bad("tri", lambda c, t: ops.tri(c, t("f32", (4, 4)), 1.0), TypeError, "type must be an integer, got float")
bad(
    "diag_mask_zero",
    lambda c, t: ops.diag_mask_zero(c, t("f32", (4, 4)), 2.7),
    TypeError,
    "n_past must be an integer, got float",
)
bad("roll", lambda c, t: ops.roll(c, t("f32", (4, 4)), True), TypeError, "shift0 must be an integer, got bool")
bad(
    "timestep_embedding",
    lambda c, t: ops.timestep_embedding(c, t("f32", (4,)), "8"),
    TypeError,
    "dim must be an integer, got str",
)
bad("swiglu_oai", lambda c, t: ops.swiglu_oai(c, t("f32", (3, 8)), None, "1.7"), TypeError, "alpha must be a number")


# --- element-wise binary ---------------------------------------------------------------------------------
_BCAST = (
    ((3, 5, 7, 11), (1, 1, 1, 11)),
    ((3, 5, 7, 11), (3, 1, 7, 1)),
    ((3, 5, 7, 11), (1, 5, 1, 11)),
    ((2, 5, 7, 13), (2, 5, 7, 1)),
    ((6, 5, 3, 5), (3, 5, 1, 5)),
    ((4, 9, 2, 3), (2, 3, 2, 3)),
)
_AWAY = signed_away_from_zero(0.3, 1.5)  # grad: away from kinks (relu, abs) and poles (div)


def _add_node(n: Node) -> np.ndarray:
    """ADD nodes come from add and add_cast: the sum, rounded to the node's own type (add_cast's target)."""
    return oracles.add_cast(n.arg(0), n.arg(1), n.tensor.type)


for _op in ("add", "sub", "mul", "div"):
    _b_gen = signed_away_from_zero() if _op == "div" else None  # div denominators away from 0
    _gb = _AWAY if _op == "div" else uniform()
    spec(
        _op,
        lambda xp, x, _op=_op: getattr(xp, _op)(x.a, x.b),
        reads=(_op.upper(),),
        hints={"b": hints.same_or_row},
        from_node=_add_node if _op == "add" else (lambda n, _op=_op: getattr(oracles, _op)(n.arg(0), n.arg(1))),
        grad=[
            Grad({"a": (F32, (3, 7)), "b": (F32, (3, 7), _gb)}, ("a", "b"), variant="same_shape"),
            # ggml's backward of sub and div asserts when b broadcasts and needs a gradient (no repeat_back)
            Grad(
                {"a": (F32, (2, 3, 5)), "b": (F32, (3, 1), _gb)},
                ("a", "b") if _op in ("add", "mul") else ("a",),
                variant="broadcast",
            ),
        ],
        samples=[
            Sample({"a": In("f32", (2, 3, 8)), "b": In("f32", (2, 3, 8), _b_gen)}),
            Sample({"a": In("f32", (2, 2, 3, 8)), "b": In("f32", (1, 3, 8), _b_gen)}, variant="broadcast"),
            Sample({"a": In("f32", (4, 3, 8)), "b": In("f32", (2, 1, 4), _b_gen)}, variant="broadcast_row"),
            Sample({"a": In("f16", (3, 16)), "b": In("f16", (3, 16), _b_gen)}),
            Sample({"a": In("f16", (3, 16)), "b": In("f32", (1, 16), _b_gen)}),
            *(
                Sample({"a": In("f32", sa), "b": In("f32", sb, _b_gen)}, variant=f"bcast{i}")
                for i, (sa, sb) in enumerate(_BCAST)
            ),
            *(
                Sample(
                    {"a": In(ta, (3, 7, 13)), "b": In(tb, (1, 7, 13), _b_gen)}, tag=f"{ta}_{tb}", variant="odd_bcast"
                )
                for ta, tb in (("bf16", "bf16"), ("bf16", "f32"), ("f16", "f32"))
            ),
            # permuted a and b: rows stay contiguous, the kernels walk dims 1..3 by stride
            Sample(
                {"a": In("f32", (5, 3, 7), layout=Permuted()), "b": In("f32", (3, 5, 7), _b_gen)}, variant="permuted_a"
            ),
            Sample(
                {"a": In("f32", (2, 3, 5, 7)), "b": In("f32", (5, 1, 7), _b_gen, Permuted())},
                variant="permuted_b_bcast",
            ),
            Sample(
                {"a": In("f32", (5, 20), layout=Columns(2, 11)), "b": In("f32", (5, 9), _b_gen)}, variant="row_slice"
            ),
        ],
    )

spec(
    "scale",
    reads=("SCALE",),
    params=("s:float", "b:float"),  # ggml_scale_impl's: scale is scale_bias with b = 0
    # SCALE nodes come from scale and scale_bias: op_params (s, b), b = 0 for scale
    from_node=lambda n: oracles.scale_bias(n.arg(0), *n.scalars()),
    grad=[Grad({"a": (F32, (3, 5))}, ("a",), (-1.7,))],
    samples=[
        Sample({"a": ("f32", (3, 4, 8))}, (-1.75,)),
        Sample({"a": ("bf16", (3, 16))}, (0.5,)),
        *(Sample({"a": ("f32", (3, 7, 11))}, (s,), variant=f"odd_{s}") for s in (0.3, -2.5, 0.0)),
    ],
)
spec(
    "clamp",
    reads=("CLAMP",),
    from_node=lambda n: oracles.clamp(n.arg(0), *n.scalars()),
    samples=[
        Sample({"a": ("f32", (3, 4, 8), uniform(-2, 2))}, (-0.5, 0.75)),
        Sample({"a": ("f16", (3, 16), uniform(-2, 2))}, (-0.5, 0.75)),
        *(
            Sample({"a": ("f32", (3, 7, 11), uniform(-2, 2))}, (lo, hi), variant=f"odd_{lo}_{hi}")
            for lo, hi in ((-0.25, 0.25), (0.0, 1.0), (-1.5, -0.5))
        ),
    ],
)

# --- element-wise unary ------------------------------------------------------------------------------------
_UNARY_GEN = {
    "sqrt": uniform(0.05, 4.0),
    "log": uniform(0.05, 4.0),
    "exp": uniform(-3.0, 3.0),
    "softplus": uniform(-25.0, 25.0),
    "floor": uniform(-4.0, 4.0),
    "ceil": uniform(-4.0, 4.0),
    "round": uniform(-4.0, 4.0),
    "trunc": uniform(-4.0, 4.0),
    "hardswish": uniform(-5.0, 5.0),
    "hardsigmoid": uniform(-5.0, 5.0),
    "elu": uniform(-3.0, 3.0),
    "gelu": uniform(-4.0, 4.0),
    "gelu_quick": uniform(-4.0, 4.0),
    "gelu_erf": uniform(-4.0, 4.0),
    "tanh": uniform(-3.0, 3.0),
    "sigmoid": uniform(-6.0, 6.0),
    "silu": uniform(-6.0, 6.0),
    "sin": uniform(-4.0, 4.0),
    "cos": uniform(-4.0, 4.0),
}
# the grad samples' values: away from kinks (relu, abs), inside the domain (sqrt, log)
_UNARY_GRAD_GEN = {
    "sqr": uniform(),
    "sqrt": uniform(0.3, 2.0),
    "log": uniform(0.3, 2.0),
    "sin": uniform(-3, 3),
    "cos": uniform(-3, 3),
    "abs": _AWAY,
    "neg": uniform(),
    "relu": _AWAY,
    "silu": uniform(-4, 4),
    "exp": uniform(-2, 2),
    "softplus": uniform(-3, 3),
}


def _halves(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Exact halves: C roundf rounds them away from zero (NumPy's round goes to even)."""
    return (rng.integers(-8, 8, size=shape) + 0.5).astype(np.float32)


for _op in UNARY_OPS:
    _gen = _UNARY_GEN.get(_op)
    spec(
        _op,
        lambda xp, x, _op=_op: getattr(xp, _op)(x.a),
        reads=(_op.upper(),),
        from_node=lambda n, _op=_op: getattr(oracles, _op)(n.arg(0)),
        bounds=_FP16_TABLE if _op in ("gelu", "gelu_quick") else [],
        grad=[Grad({"a": (F32, (3, 7), _UNARY_GRAD_GEN[_op])}, ("a",))] if _op in _UNARY_GRAD_GEN else [],
        samples=[
            Sample({"a": In("f32", (2, 4, 16), _gen)}),
            Sample({"a": In("f16", (4, 16), _gen)}),
            Sample({"a": In("bf16", (5, 13), _gen)}),
            Sample({"a": In("f32", (5, 3, 7), _gen, Permuted())}, variant="odd_permuted"),
            *([Sample({"a": In("f32", (2, 8), _halves)}, variant="halves")] if _op == "round" else []),
        ],
    )

spec(
    "leaky_relu",
    reads=("LEAKY_RELU",),
    from_node=lambda n: oracles.leaky_relu(n.arg(0), n.param("negative_slope")),
    samples=[
        Sample({"a": ("f32", (3, 4, 8))}, (0.1,)),
        Sample({"a": ("f16", (3, 16))}, (0.2,)),
        *(Sample({"a": ("f32", (3, 7, 11))}, (s,), variant=f"odd_{s}") for s in (0.0, 0.5, -0.3)),
    ],
)

spec(
    "arange",
    reads=("ARANGE",),
    from_node=lambda n: oracles.arange(*n.scalars()),
    samples=[
        Sample({}, (-3.0, 5.0, 0.5)),
        Sample({}, (0.0, 10.0, 3.0), variant="uneven"),
        Sample({}, (-7.5, -1.0, 0.25), variant="negative_start"),
    ],
)

spec(
    "expm1",
    reads=("EXPM1",),
    from_node=lambda n: oracles.expm1(n.arg(0)),
    samples=[
        *(
            Sample({"a": (t, s, uniform(-3.0, 2.0))})
            for t, s in (("f32", (3, 5, 7)), ("f16", (5, 13)), ("bf16", (3, 11)))
        ),
        # the transposed input made contiguous first: cont is part of the case, not of the layout
        Sample(
            {"a": In("f32", (7, 5), uniform(-2.0, 2.0), Transposed())},
            variant="transposed_cont",
            call=lambda xp, x: xp.expm1(xp.cont(x.a)),
        ),
        # a permutation of dims 1 and 2 keeps rows contiguous: the unary kernels walk rows by stride
        Sample({"a": In("f32", (3, 5, 7), uniform(-2.0, 2.0), Permuted())}, variant="permuted"),
    ],
)


def _inverse_softplus(v: float) -> float:
    """The alpha whose softplus ggml stored as v (softplus(a) = a above 20)."""
    return v if v > 20.0 else math.log(math.expm1(v))


def _xielu_node(n: Node) -> np.ndarray:
    """op_params: 1 beta + softplus(alpha_n), 2 softplus(alpha_p), 3 beta, 4 eps (ggml_xielu); the oracle
    takes the raw alphas."""
    an, ap, beta, eps = n.scalars()
    return oracles.xielu(n.arg(0), _inverse_softplus(an - beta), _inverse_softplus(ap), beta, eps)


spec(
    "xielu",
    params=("", "an:float", "ap:float", "beta:float", "eps:float"),
    reads=("XIELU",),
    from_node=_xielu_node,
    samples=[
        Sample({"a": (t, (3, 5, 7) if t == "f32" else (5, 13), uniform(-3.0, 3.0))}, p, variant=f"p{i}")
        for i, (t, p) in enumerate(
            (
                ("f32", (0.8, 0.8, 0.5, -1e-6)),
                ("f32", (1.5, -0.3, 0.2, -1e-4)),
                ("f16", (0.8, 0.8, 0.5, -1e-6)),
                ("f32", (25.0, 30.0, 0.0, -1e-6)),
            )
        )
    ],
)


# --- gated linear units ------------------------------------------------------------------------------------
def _glu_node(family: str) -> Callable[[Node], np.ndarray]:
    """A GLU node of `family`: op_params 1 is `swapped`; a second source makes it the _split form."""

    def read(n: Node) -> np.ndarray:
        b = _src(n, 1)
        if b is not None:
            return getattr(oracles, family + "_split")(n.arg(0), b)
        return getattr(oracles, family + ("_swapped" if n.param("swapped") else ""))(n.arg(0))

    return read


# ggml_glu_impl's op_params: the GLU op, swapped, and swiglu_oai's alpha and limit (swiglu_clamp's limit at 3)
GLU_PARAMS = ("", "swapped:bool", "alpha:float", "limit:float")
for _op in GLU_OPS:
    _family = _op.removesuffix("_swapped").removesuffix("_split")
    _split = _op.endswith("_split")
    _glu_samples = []
    for _t, _shape in (("f32", (3, 5, 14)), ("f16", (7, 10)), ("bf16", (5, 6)), ("f32", (2, 11, 26))):
        _ins = {"a": In(_t, _shape, uniform(-4.0, 4.0))}
        if _split:
            _ins["b"] = In(_t, _shape, uniform(-2.0, 2.0))
        _glu_samples.append(Sample(_ins, variant="odd" if _shape[-1] == 26 else ""))
    # a column slice: rows of 14 out of 20 (ggml needs only ggml_is_contiguous_1: row stride free)
    _ins = {"a": In("f32", (5, 20), uniform(-4.0, 4.0), Columns(3, 17))}
    if _split:
        _ins["b"] = In("f32", (5, 14), uniform(-2.0, 2.0))
    _glu_samples.append(Sample(_ins, variant="row_slice"))
    _reader = {"reads": (_family.upper(),), "from_node": _glu_node(_family)} if _op == _family else {}
    spec(
        _op,
        (lambda xp, x, _op=_op: getattr(xp, _op)(x.a, x.b))
        if _split
        else (lambda xp, x, _op=_op: getattr(xp, _op)(x.a)),
        _glu_samples,
        **_reader,
        params=GLU_PARAMS,
        bounds=_FP16_TABLE if _family in ("geglu", "geglu_quick") else [],
    )

_GLU_LIMITS = ((1.702, 7.0), (1.0, 1.5), (0.5, 0.75))  # (alpha, limit)
spec(
    "swiglu_oai",
    lambda xp, x, alpha, limit: xp.swiglu_oai(x.a, _gate(x), alpha, limit),
    reads=("SWIGLU_OAI",),
    params=GLU_PARAMS,  # no b: the halves of a's rows
    from_node=lambda n: oracles.swiglu_oai(n.arg(0), _src(n, 1), n.param("alpha"), n.param("limit")),
    samples=[
        *(
            Sample({"a": ("f32", (3, 5, 18), uniform(-4.0, 4.0))}, (al, li), variant=f"p{i}")
            for i, (al, li) in enumerate(_GLU_LIMITS)
        ),
        *(
            Sample(
                {"a": ("f32", (5, 13), uniform(-4.0, 4.0)), "b": ("f32", (5, 13), uniform(-3.0, 3.0))},
                (al, li),
                variant=f"split_p{i}",
            )
            for i, (al, li) in enumerate(_GLU_LIMITS)
        ),
    ],
)
spec(
    "swiglu_clamp",
    lambda xp, x, limit: xp.swiglu_clamp(x.a, _gate(x), limit),
    reads=("SWIGLU_CLAMP",),
    params=GLU_PARAMS,
    from_node=lambda n: oracles.swiglu_clamp(n.arg(0), _src(n, 1), n.param("limit")),
    samples=[
        *(
            Sample({"a": ("f32", (3, 5, 18), uniform(-4.0, 4.0))}, (li,), variant=f"p{i}")
            for i, (_, li) in enumerate(_GLU_LIMITS)
        ),
        *(
            Sample(
                {"a": ("f16", (5, 13), uniform(-4.0, 4.0)), "b": ("f16", (5, 13), uniform(-3.0, 3.0))},
                (li,),
                variant=f"split_p{i}",
            )
            for i, (_, li) in enumerate(_GLU_LIMITS)
        ),
    ],
)

# --- more arithmetic, casts, generators ----------------------------------------------------------------------
spec(
    "add1",
    reads=("ADD1",),
    from_node=lambda n: oracles.add1(n.arg(0), n.arg(1)),
    samples=[
        Sample({"a": (ta, s), "b": (tb, (1,), uniform(0.5, 1.5))}, tag=f"{ta}_{tb}", variant=_dims(s))
        for ta, tb, s in (
            ("f32", "f32", (3, 5, 7)),
            ("f16", "f16", (5, 13)),
            ("f16", "f32", (2, 11)),
            ("bf16", "bf16", (3, 9)),
            ("bf16", "f32", (7, 5)),
        )
    ],
)
# add_cast's ADD nodes are read by add's spec (the sum rounded to the node's type)
spec(
    "add_cast",
    samples=[
        *(
            Sample(
                {"a": (ta, (3, 5, 12)), "b": (tb, (1, 5, 12))}, (to,), tag=f"{ta}_{tb}", variant=f"to_{to}", types=(to,)
            )
            for ta, tb, to in (
                ("f16", "f32", "f32"),
                ("bf16", "f32", "f32"),
                ("f16", "f16", "f16"),
                ("f16", "f32", "f16"),
                ("bf16", "f32", "bf16"),
            )
        ),
        Sample({"a": ("f16", (4, 3, 10)), "b": ("f32", (1, 1, 10))}, ("f32",), variant="rows"),
    ],
)
# cast makes a CPY node: read by cpy's spec (opdb/movement.py), which converts to any type ggml allows
spec(
    "cast",
    samples=[
        *(
            Sample({"a": (ta, (3, 5, 7), uniform(-3, 3))}, (to,), variant=f"to_{to}", types=(to,))
            for ta, to in (
                ("f32", "f16"),
                ("f32", "bf16"),
                ("f16", "f32"),
                ("bf16", "f32"),
                ("f16", "bf16"),
                ("f32", "f32"),
            )
        ),
        Sample({"a": In("f32", (7, 5), layout=Transposed())}, ("f16",), variant="transposed_to_f16", types=("f16",)),
    ],
)
# scale_bias's SCALE nodes are read by scale's spec (op_params s, b)
spec(
    "scale_bias",
    samples=[
        Sample({"a": (t, (3, 5, 7))}, (s, b), variant=f"s{s}_b{b}")
        for t, s, b in (("f32", 1.5, -0.25), ("f32", -0.5, 2.0), ("bf16", 0.75, 0.5))
    ],
)
spec(
    "fill",
    reads=("FILL",),
    from_node=lambda n: oracles.fill(n.arg(0), n.param("c")),
    exact=True,
    samples=[
        Sample({"a": (t, (3, 5, 7))}, (c,), variant=str(c)) for t, c in (("f32", 2.5), ("f32", -0.125), ("f16", 3.0))
    ],
)
# 2-d only: the CPU counts 3-d and 4-d inputs wrongly and its preflight refuses them (docs/findings.md)
spec(
    "count_equal",
    reads=("COUNT_EQUAL",),
    from_node=lambda n: oracles.count_equal(n.arg(0), n.arg(1)),
    exact=True,
    samples=[
        Sample({"a": ("i32", s, integers(0, 3)), "b": ("i32", s, integers(0, 3))}, variant=_dims(s))
        for s in ((5, 13), (1, 21))
    ],
)
spec(
    "tri",
    reads=("TRI",),
    from_node=lambda n: oracles.tri(n.arg(0), n.param("type")),
    exact=True,
    samples=[
        *(Sample({"a": ("f32", (2, 7, 7))}, (tt,), variant=name) for name, tt in TRI_TYPES.items()),
        Sample({"a": ("f32", (5, 5))}, ("lower",), variant="lower_by_name"),
    ],
)
spec(
    "diag",
    reads=("DIAG",),
    from_node=lambda n: oracles.diag(n.arg(0)),
    exact=True,
    samples=[
        Sample({"a": ("f32", (1, 7))}),
        Sample({"a": ("f32", (2, 3, 1, 5))}, variant="batched"),
    ],
)
spec(
    "diag_mask_zero",
    reads=("DIAG_MASK_ZERO",),
    from_node=lambda n: oracles.diag_mask_zero(n.arg(0), n.param("n_past")),
    exact=True,
    samples=[
        *(Sample({"a": ("f32", (3, 5, 7))}, (k,), variant=f"n_past{k}") for k in (0, 1, 3)),
        Sample({"a": ("f32", (2, 3, 5, 5))}, (1,), variant="4d"),
    ],
)
spec(
    "roll",
    reads=("ROLL",),
    from_node=lambda n: oracles.roll(n.arg(0), *n.scalars()),
    exact=True,
    samples=[
        *(
            Sample({"a": ("f32", (2, 3, 5, 7))}, sh, variant="_".join(map(str, sh)))
            for sh in ((2, 0, 0, 0), (-3, 1, 0, 0), (0, -2, 1, 0), (4, 3, -1, 1))
        ),
        Sample({"a": In("f32", (3, 5, 7), layout=Permuted())}, (3, -2), variant="permuted"),
    ],
)
# repeat_4d makes a REPEAT node: read by repeat's spec (opdb/movement.py)
spec(
    "repeat_4d",
    exact=True,
    samples=[
        Sample({"a": In(t, s, integers(-50, 50) if t == "i32" else uniform())}, ne, variant=_dims(ne))
        for t, s, ne in (
            ("f32", (3, 5), (10, 6, 2, 1)),
            ("f16", (1, 3, 5), (5, 6, 2, 3)),
            ("bf16", (2, 7), (21, 2, 1, 2)),
            ("i32", (3, 1), (3, 3, 1, 1)),
        )
    ],
)
spec(
    "cumsum",
    reads=("CUMSUM",),
    from_node=lambda n: oracles.cumsum(n.arg(0)),
    samples=[
        *(Sample({"a": ("f32", s)}, variant=_dims(s)) for s in ((5, 13), (2, 3, 7), (1, 33))),
        Sample({"a": In("f32", (3, 5, 7), layout=Permuted())}, variant="permuted"),
    ],
)

# --- acc / set (strides and offsets in bytes, of a's contiguous layout) -------------------------------
# a (3, 5, 12) F32: nb1 = 48, nb2 = 240; b written as a sub-block or with a row stride of its own
_VIEWS = (
    ((3, 5, 12), (2, 3, 4), (48, 240, 720, 4 * (12 + 2))),  # a 2x3x4 block at (0, 1, 2)
    ((3, 5, 12), (5, 7), (48, 240, 720, 8)),  # 5 rows of 7, from column 2
    ((3, 5, 12), (4, 6), (96, 240, 720, 4)),  # every other row
    ((7, 13), (2, 3, 4), (4 * 13, 4 * 13 * 3, 720, 4 * 13)),
)  # a 3D b into a 2D a
# views whose strides do not nest (view2, set_1d of a b longer than a's row) are unsupported on Vulkan:
# its shader divides a's flat index by the view's strides (pyggml/preflight/vulkan.py, docs/findings.md)


def _view_params(n: Node) -> list[int]:
    """op_params of ACC and SET: nb1, nb2, nb3, offset (then inplace), as acc's builder takes them."""
    return [n.param(p) for p in ("nb1", "nb2", "nb3", "offset")]


spec(
    "acc",
    reads=("ACC",),
    from_node=lambda n: oracles.acc(n.arg(0), n.arg(1), *_view_params(n)),
    samples=[
        Sample({"a": ("f32", sa), "b": ("f32", sb)}, v, variant=f"view{i}") for i, (sa, sb, v) in enumerate(_VIEWS)
    ],
)
spec(
    "set",
    reads=("SET",),
    # SET nodes come from set, set_1d and set_2d, all with the four view parameters
    from_node=lambda n: oracles.set(n.arg(0), n.arg(1), *_view_params(n)),
    exact=True,
    samples=[
        Sample(
            {
                "a": In(t, sa, integers(-100, 100) if t == "i32" else None),
                "b": In(t, sb, integers(-100, 100) if t == "i32" else None),
            },
            v,
            variant=f"view{i}",
        )
        for t in ("f32", "i32")
        for i, (sa, sb, v) in enumerate(_VIEWS)
    ],
)
spec(
    "set_1d",
    exact=True,
    samples=[
        *(Sample({"a": ("f32", (3, 5, 12)), "b": ("f32", (23,))}, (off,), variant=f"at{off}") for off in (0, 4 * 17)),
        *(
            Sample({"a": ("f32", (3, 5, 12)), "b": ("f32", (7,))}, (off,), variant=f"in_row_at{off}")
            for off in (0, 4 * 17)
        ),
        Sample({"a": ("i32", (5, 7), integers(-9, 9)), "b": ("i32", (11,), integers(-9, 9))}, (8,)),
    ],
)
spec(
    "set_2d",
    exact=True,
    samples=[
        Sample({"a": ("f32", (3, 5, 12)), "b": ("f32", (3, 5))}, (96, off), variant=f"at{off}") for off in (0, 4 * 17)
    ],
)


# --- padding, embeddings -----------------------------------------------------------------------------------------
def _pad_node(n: Node) -> np.ndarray:
    """PAD nodes (pad_ext, pad_ext_circular, pad_circular, pad): op_params lp0, rp0, ..., lp3, rp3, circular."""
    p = n.scalars()
    return (oracles.pad_ext_circular if p[8] else oracles.pad_ext)(n.arg(0), *p[:8])


_PADS = ((1, 2, 0, 0, 0, 0, 0, 0), (0, 3, 2, 1, 0, 0, 0, 0), (2, 0, 1, 1, 1, 2, 0, 0), (1, 1, 0, 2, 2, 0, 1, 1))
spec(
    "pad_ext",
    params=("lp0", "rp0", "lp1", "rp1", "lp2", "rp2", "lp3", "rp3", "circular:bool"),
    reads=("PAD",),
    from_node=_pad_node,
    exact=True,
    samples=[
        *(Sample({"a": ("f32", (2, 3, 5, 7))}, p, variant="_".join(map(str, p))) for p in _PADS),
        Sample({"a": In("f32", (3, 5, 7), layout=Permuted())}, (1, 2, 2, 1), variant="permuted"),
    ],
)
spec(
    "pad_ext_circular",
    exact=True,
    samples=[Sample({"a": ("f32", (2, 3, 5, 7))}, p, variant="_".join(map(str, p))) for p in _PADS],
)
spec(
    "pad_circular",
    exact=True,
    samples=[
        Sample({"a": ("f32", (2, 3, 5, 7))}, p, variant="_".join(map(str, p)))
        for p in ((3, 0, 0, 0), (2, 4, 1, 0), (7, 5, 3, 2))
    ],
)
spec(
    "timestep_embedding",
    reads=("TIMESTEP_EMBEDDING",),
    from_node=lambda n: oracles.timestep_embedding(n.arg(0), *n.scalars()),
    samples=[
        Sample({"t": ("f32", (k,), uniform(0.0, 100.0))}, (dim, period), variant=f"n{k}_dim{dim}_p{period}")
        for k, dim, period in ((5, 16, 10000), (7, 13, 10000), (3, 32, 100), (1, 6, 5000))
    ],
)
