"""Bad calls of the newer element-wise and reduction ops (loaded by tests/test_bad_input.py)."""

from __future__ import annotations

import numpy as np

from pyggml import ops
from pyggml.errors import GraphError, OpError
from pyggml.ops.elementwise import GLU_OPS

BAD = [
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
