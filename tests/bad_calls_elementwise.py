"""Bad calls of the newer element-wise and reduction ops (loaded by tests/test_bad_input.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
import numpy as np

from pyggml import ops
from pyggml.errors import GraphError, OpError
from pyggml.ops.elementwise import GLU_OPS

BAD: list[tuple[str, Callable[..., Any], type[Exception], str]] = [
    ("expm1", lambda c, t: ops.expm1(c, t("i32", (3, 8))), GraphError, "the CPU kernel takes"),
    ("expm1", lambda c, t: ops.expm1(c, np.zeros(3)), TypeError, "a must be a Tensor"),
    ("xielu", lambda c, t: ops.xielu(c, t("f32", (3, 8)), float("nan")), ValueError, "must be finite"),
    ("xielu", lambda c, t: ops.xielu(c, t("f32", (3, 8)), "x"), TypeError, "alpha_n must be a number"),
    ("swiglu_oai", lambda c, t: ops.swiglu_oai(c, t("f16", (3, 8))), GraphError, "takes F32 input"),
    ("swiglu_oai", lambda c, t: ops.swiglu_oai(c, t("f32", (3, 8)), None, 1.0, -1.0), ValueError, "limit must be positive"),
    ("swiglu_oai", lambda c, t: ops.swiglu_oai(c, t("f32", (3, 8)), t("f32", (3, 7))), OpError, "ggml_are_same_shape"),
    ("swiglu_clamp", lambda c, t: ops.swiglu_clamp(c, t("bf16", (3, 8))), GraphError, "takes F16/F32 input"),
    ("swiglu_clamp", lambda c, t: ops.swiglu_clamp(c, t("f32", (3, 7))), ValueError, "even length"),
    ("swiglu_clamp", lambda c, t: ops.swiglu_clamp(c, t("f32", (3, 8)), 1.0), TypeError, "b must be a Tensor"),
]
for _op in GLU_OPS:
    if _op.endswith("_split"):
        BAD += [(_op, lambda c, t, _op=_op: getattr(ops, _op)(c, t("f32", (3, 8)), t("f16", (3, 8))), OpError,
                 "a->type == b->type"),
                (_op, lambda c, t, _op=_op: getattr(ops, _op)(c, t("f32", (3, 8)), t("f32", (3, 6))), OpError,
                 "ggml_are_same_shape"),
                (_op, lambda c, t, _op=_op: getattr(ops, _op)(c, t("i32", (3, 8)), t("i32", (3, 8))), GraphError,
                 "the CPU kernel takes")]
    else:
        BAD += [(_op, lambda c, t, _op=_op: getattr(ops, _op)(c, t("f32", (3, 9))), ValueError, "even length"),
                (_op, lambda c, t, _op=_op: getattr(ops, _op)(c, ops.transpose(c, t("f32", (8, 8)))), OpError,
                 "ggml_is_contiguous_1(a)"),
                (_op, lambda c, t, _op=_op: getattr(ops, _op)(c, "a"), TypeError, "a must be a Tensor")]

BAD += [
    ("add1", lambda c, t: ops.add1(c, t("f32", (3, 8)), t("f32", (2,))), OpError, "ggml_is_scalar(b)"),
    ("add1", lambda c, t: ops.add1(c, t("f32", (3, 8)), t("f16", (1,))), GraphError, "b of a's type or F32"),
    ("add1", lambda c, t: ops.add1(c, t("i32", (3, 8)), t("i32", (1,))), GraphError, "the CPU kernel takes"),
    ("add_cast", lambda c, t: ops.add_cast(c, t("f32", (3, 8)), t("f32", (3, 8)), "f16"), OpError, "ggml_is_quantized"),
    ("add_cast", lambda c, t: ops.add_cast(c, t("f16", (3, 8)), t("f16", (3, 8)), "f32"), GraphError, "makes a F16 result"),
    ("add_cast", lambda c, t: ops.add_cast(c, t("f16", (3, 8)), t("f32", (3, 8)), "nope"), ValueError, "unknown ggml type"),
    ("cast", lambda c, t: ops.cast(c, t("f32", (3, 8)), 1.5), TypeError, "type"),
    ("cast", lambda c, t: ops.cast(c, t("i32", (3, 8)), "f16"), GraphError, "no conversion from I32 to F16"),
    ("scale_bias", lambda c, t: ops.scale_bias(c, t("f32", (3, 8)), 1.0, None), TypeError, "b must be a number"),
    ("scale_bias", lambda c, t: ops.scale_bias(c, t("f16", (3, 8)), 1.0, 0.5), GraphError, "the CPU kernel takes"),
    ("fill", lambda c, t: ops.fill(c, t("bf16", (3, 8)), 1.0), OpError, "a->type == GGML_TYPE_F32"),
    ("fill", lambda c, t: ops.fill(c, t("f32", (3, 8)), "x"), TypeError, "c must be a number"),
    ("count_equal", lambda c, t: ops.count_equal(c, t("f32", (3, 8)), t("f32", (3, 8))), GraphError, "takes I32 inputs"),
    ("count_equal", lambda c, t: ops.count_equal(c, t("i32", (3, 8)), t("i32", (3, 7))), OpError, "ggml_are_same_shape"),
    ("tri", lambda c, t: ops.tri(c, t("f32", (4, 4)), 4), ValueError, "type must be one of"),
    ("tri", lambda c, t: ops.tri(c, t("f32", (4, 5))), OpError, "a->ne[0] == a->ne[1]"),
    ("tri", lambda c, t: ops.tri(c, t("f32", (4, 4)), "diag"), ValueError, "type must be one of"),
    ("diag", lambda c, t: ops.diag(c, t("f32", (3, 8))), OpError, "a->ne[1] == 1"),
    ("diag", lambda c, t: ops.diag(c, t("f16", (1, 8))), GraphError, "the CPU kernel takes"),
    ("diag_mask_zero", lambda c, t: ops.diag_mask_zero(c, t("f32", (3, 8)), -1), ValueError, "n_past must be >= 0"),
    ("diag_mask_zero", lambda c, t: ops.diag_mask_zero(c, t("f16", (3, 8)), 1), GraphError, "the CPU kernel takes"),
    ("roll", lambda c, t: ops.roll(c, t("f32", (3, 8)), 8), OpError, "abs(shift0) < a->ne[0]"),
    ("roll", lambda c, t: ops.roll(c, t("f16", (3, 8)), 1), GraphError, "the CPU kernel takes"),
    ("roll", lambda c, t: ops.roll(c, t("f32", (3, 8)), 2**40), ValueError, "do not fit a C int"),
    ("repeat_4d", lambda c, t: ops.repeat_4d(c, t("f32", (3, 8)), 12, 3), OpError, "can_repeat"),
    ("repeat_4d", lambda c, t: ops.repeat_4d(c, t("f32", (3, 8)), 0, 3), ValueError, "ne must be positive"),
    ("cumsum", lambda c, t: ops.cumsum(c, t("f16", (3, 8))), OpError, "a->type == GGML_TYPE_F32"),
    ("cumsum", lambda c, t: ops.cumsum(c, ops.transpose(c, t("f32", (3, 8)))), GraphError, "contiguous rows"),
]

BAD += [
    ("acc", lambda c, t: ops.acc(c, t("f32", (3, 8)), t("f32", (2, 4)), 32, 96, 96, 80), ValueError, "past a's 96 bytes"),
    ("acc", lambda c, t: ops.acc(c, t("f32", (3, 8)), t("f32", (2, 4)), 32, 96, 96, 2), ValueError, "multiples of a's element size"),
    ("acc", lambda c, t: ops.acc(c, t("f32", (3, 8)), t("f32", (2, 4)), 8, 96, 96, 0), ValueError, "overlaps itself"),
    ("acc", lambda c, t: ops.acc(c, t("f16", (3, 8)), t("f16", (2, 4)), 16, 48, 48, 0), OpError, "a->type == GGML_TYPE_F32"),
    ("acc", lambda c, t: ops.acc(c, t("f32", (3, 8)), t("f32", (2, 4)), -4, 96, 96, 0), ValueError, "must be >= 0"),
    ("set", lambda c, t: ops.set(c, t("f16", (3, 8)), t("f16", (2, 4)), 16, 48, 48, 0), GraphError, "both F32/I32"),
    ("set", lambda c, t: ops.set(c, t("f32", (3, 8)), t("f32", (2, 4)), 32, 96, 96, 96), ValueError, "past a's"),
    ("set", lambda c, t: ops.set(c, t("f32", (3, 8)), "b", 32, 96, 96, 0), TypeError, "b must be a Tensor"),
    ("set_1d", lambda c, t: ops.set_1d(c, t("f32", (3, 8)), t("f32", (5,)), 80), ValueError, "past a's"),
    ("set_1d", lambda c, t: ops.set_1d(c, t("f32", (3, 8)), t("f32", (5,)), "x"), TypeError, "offset must be an integer"),
    ("set_2d", lambda c, t: ops.set_2d(c, t("f32", (3, 8)), t("f32", (2, 4)), 84, 0), ValueError, "past a's"),
    ("set_2d", lambda c, t: ops.set_2d(c, t("f32", (3, 8)), t("f32", (2, 4)), 8, 0), ValueError, "overlaps itself"),
]

BAD += [
    ("top_k", lambda c, t: ops.top_k(c, t("f32", (3, 8)), 9), OpError, "a->ne[0] >= k"),
    ("top_k", lambda c, t: ops.top_k(c, t("f32", (3, 8)), 0), ValueError, "k must be positive"),
    ("top_k", lambda c, t: ops.top_k(c, t("f16", (3, 8)), 2), GraphError, "the CPU kernel takes"),
    ("top_k", lambda c, t: ops.top_k(c, ops.permute(c, t("f32", (3, 4, 8)), 0, 2, 1, 3), 2), GraphError, "rows"),
    ("argsort_top_k", lambda c, t: ops.argsort_top_k(c, t("f32", (3, 8)), 9), OpError, "a->ne[0] >= k"),
    ("argsort_top_k", lambda c, t: ops.argsort_top_k(c, t("f32", (3, 8)), -1), ValueError, "k must be positive"),
    ("group_norm", lambda c, t: ops.group_norm(c, t("f32", (2, 3, 8)), 3), ValueError, "n_groups must be in 1..ne2 = 2"),
    ("group_norm", lambda c, t: ops.group_norm(c, t("f32", (2, 3, 8)), 1, float("nan")), ValueError, "eps must be finite"),
    ("group_norm", lambda c, t: ops.group_norm(c, t("f16", (2, 3, 8)), 1), GraphError, "the CPU kernel takes"),
    ("pad_ext", lambda c, t: ops.pad_ext(c, t("f32", (3, 8)), -1), ValueError, "paddings must be >= 0"),
    ("pad_ext", lambda c, t: ops.pad_ext(c, t("f16", (3, 8)), 1), GraphError, "the CPU kernel takes"),
    ("pad_ext_circular", lambda c, t: ops.pad_ext_circular(c, t("f32", (3, 8)), 9), ValueError, "must not exceed the dim"),
    ("pad_ext_circular", lambda c, t: ops.pad_ext_circular(c, t("f32", (3, 8)), "x"), TypeError, "lp0 must be an integer"),
    ("pad_circular", lambda c, t: ops.pad_circular(c, t("f32", (3, 8)), -2), ValueError, "paddings must be >= 0"),
    ("pad_circular", lambda c, t: ops.pad_circular(c, t("i32", (3, 8)), 2), GraphError, "the CPU kernel takes"),
    ("timestep_embedding", lambda c, t: ops.timestep_embedding(c, t("f32", (2, 8)), 16), ValueError, "must be a vector"),
    ("timestep_embedding", lambda c, t: ops.timestep_embedding(c, t("f32", (8,)), 0), ValueError, "must be positive"),
    ("timestep_embedding", lambda c, t: ops.timestep_embedding(c, t("f16", (8,)), 16), GraphError, "the CPU kernel takes"),
    # ggml-cpu indexes 3-d/4-d rows wrongly (docs/findings.md): refused before compute
    ("count_equal", lambda c, t: ops.count_equal(c, t("i32", (2, 3, 7)), t("i32", (2, 3, 7))), GraphError,
     "counts 3-d and 4-d inputs wrongly"),
]

# scalar arguments: text and truth values are no numbers, a float is no integer (issue 19: `scale(a, "2")`
# was taken as 2.0, and `int(2.7)` silently truncated)
BAD += [
    ("scale", lambda c, t: ops.scale(c, t("f32", (3, 8)), "2"), TypeError, "s must be a number, got str"),
    ("scale", lambda c, t: ops.scale(c, t("f32", (3, 8)), True), TypeError, "s must be a number, got bool"),
    ("scale_bias", lambda c, t: ops.scale_bias(c, t("f32", (3, 8)), 1.0, b"1"), TypeError, "b must be a number"),
    ("clamp", lambda c, t: ops.clamp(c, t("f32", (3, 8)), "-1", 1.0), TypeError, "min must be a number, got str"),
    ("fill", lambda c, t: ops.fill(c, t("f32", (3, 8)), np.bool_(True)), TypeError, "c must be a number, got bool"),
    ("leaky_relu", lambda c, t: ops.leaky_relu(c, t("f32", (3, 8)), "0.1"), TypeError, "negative_slope must be a number"),
    ("arange", lambda c, t: ops.arange(c, 0, "5"), TypeError, "stop must be a number, got str"),
    ("tri", lambda c, t: ops.tri(c, t("f32", (4, 4)), 1.0), TypeError, "type must be an integer, got float"),
    ("diag_mask_zero", lambda c, t: ops.diag_mask_zero(c, t("f32", (4, 4)), 2.7), TypeError,
     "n_past must be an integer, got float"),
    ("roll", lambda c, t: ops.roll(c, t("f32", (4, 4)), True), TypeError, "shift0 must be an integer, got bool"),
    ("timestep_embedding", lambda c, t: ops.timestep_embedding(c, t("f32", (4,)), "8"), TypeError,
     "dim must be an integer, got str"),
    ("swiglu_oai", lambda c, t: ops.swiglu_oai(c, t("f32", (3, 8)), None, "1.7"), TypeError, "alpha must be a number"),
    ("argsort", lambda c, t: ops.argsort(c, t("f32", (3, 8)), True), TypeError, "order must be an integer, got bool"),
    ("rms_norm", lambda c, t: ops.rms_norm(c, t("f32", (3, 8)), "1e-6"), TypeError, "eps must be a number, got str"),
    ("top_k", lambda c, t: ops.top_k(c, t("f32", (3, 8)), 2.0), TypeError, "k must be an integer, got float"),
]
