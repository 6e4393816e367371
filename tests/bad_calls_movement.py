"""Bad calls of the data movement ops (loaded by test_bad_input.py): (op, call(ctx, t), exception, words);
t(type, NumPy shape) makes a tensor in ctx."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyggml import ops
from pyggml.errors import GraphError

BAD: list[tuple[str, Callable[..., Any], type[Exception], str]] = []


def _bad(op, fn, exc, words):
    BAD.append((op, fn, exc, words))


# --- view_tensor ------------------------------------------------------------------------------------------------------
_bad("view_tensor", lambda c, t: ops.view_tensor(c, [1.0, 2.0]), TypeError, "a must be a Tensor")
_bad("view_tensor", lambda c, t: ops.view_tensor(None, t("f32", (2, 8))), TypeError, "ctx must be a Context")

# --- index types and shapes ggml refuses -----------------------------------------------------------------------------
_bad("get_rows", lambda c, t: ops.get_rows(c, t("q4_k", (3, 256)), t("i64", (2,))), ValueError,
     "b->type == GGML_TYPE_I32")
_bad("get_rows", lambda c, t: ops.get_rows(c, t("f32", (3, 8)), t("i32", (2, 2))), ValueError, "a->ne[2] == b->ne[1]")
_bad("set_rows", lambda c, t: ops.set_rows(c, t("f32", (2, 6, 8)), t("f32", (3, 2, 8)), t("i64", (2, 2))), ValueError,
     "a->ne[2] == b->ne[2]")
_bad("set_rows", lambda c, t: ops.set_rows(c, t("f32", (4, 6, 8)), t("f32", (4, 2, 8)), t("i64", (3, 2))), ValueError,
     "b->ne[2] % c->ne[1] == 0")
_bad("set_rows", lambda c, t: ops.set_rows(c, t("f32", (6, 8)), t("bf16", (2, 8)), t("i64", (2,))), ValueError,
     "b->type == GGML_TYPE_F32 || b->type == GGML_TYPE_F16")
_bad("set_rows", lambda c, t: ops.set_rows(c, ops.transpose(c, t("f32", (8, 6))), t("f32", (2, 8)), t("i64", (2,))),
     ValueError, "ggml_is_contiguous_rows(a)")
# quantized copies the CPU has no kernel for
_bad("cpy", lambda c, t: ops.cpy(c, t("q4_0", (2, 64)), t("q8_0", (2, 64))), GraphError, "converts only to F32 or itself")
_bad("cpy", lambda c, t: ops.cpy(c, t("i32", (2, 32)), t("q8_0", (2, 32))), GraphError, "only F32/F16/BF16 quantize")
_bad("cpy", lambda c, t: ops.cpy(c, ops.transpose(c, t("f32", (32, 2))), t("q8_0", (2, 32))), GraphError,
     "contiguous rows")
_bad("cpy", lambda c, t: ops.cpy(c, t("f32", (2, 64)), ops.view_2d(c, t("q8_0", (4, 64)), 64, 2, 2 * 68)), GraphError,
     "contiguous destination")
_bad("cpy", lambda c, t: ops.cpy(c, t("f32", (2, 8)), "b"), TypeError, "b must be a Tensor")
# shapes and views
_bad("concat", lambda c, t: ops.concat(c, t("bf16", (3, 8)), t("f16", (3, 8)), 1), ValueError, "a->type == b->type")
_bad("concat", lambda c, t: ops.concat(c, t("f32", (3, 8)), t("f32", (3, 8)), 1.5), TypeError, "dim")
_bad("pad", lambda c, t: ops.pad(c, t("i32", (3, 8)), 1), GraphError, "the CPU kernel takes F32 input")
_bad("pad", lambda c, t: ops.pad(c, t("f32", (3, 8)), 1.5), TypeError, "p0")
_bad("repeat", lambda c, t: ops.repeat(c, t("f32", (3, 8)), [6, 8]), TypeError, "b must be a Tensor")
_bad("permute", lambda c, t: ops.permute(c, t("q4_0", (2, 3, 64)), 1, 0, 2, 3), ValueError, "whole blocks")
_bad("reshape_2d", lambda c, t: ops.reshape_2d(c, t("q4_0", (2, 64)), 16, 8), ValueError, "block size 32")
_bad("cont_2d", lambda c, t: ops.cont_2d(c, t("q4_0", (2, 64)), 16, 8), ValueError, "block size 32")
_bad("view_3d", lambda c, t: ops.view_3d(c, t("f16", (2, 3, 8)), 8, 3, 2, 16, 48, 2), ValueError, "past the end of a")
_bad("view_4d", lambda c, t: ops.view_4d(c, t("i32", (2, 3, 8)), 8, 3, 2, 1, 32, -96, 192), ValueError,
     "strides and offset non-negative")
_bad("view_nd", lambda c, t: ops.view_nd(c, t("q8_0", (2, 64)), [32, 2, 1, 1], [34, 68, 136, 136]), ValueError,
     "has blocks")

# scalar arguments (issue 19): a float, text or a truth value is no axis, extent or offset
_bad("permute", lambda c, t: ops.permute(c, t("f32", (2, 3, 4, 5)), 0, 2.0, 1, 3), TypeError,
     "axis1 must be an integer, got float")
_bad("permute", lambda c, t: ops.permute(c, t("f32", (2, 3, 4, 5)), "0", 2, 1, 3), TypeError,
     "axis0 must be an integer, got str")
_bad("view_1d", lambda c, t: ops.view_1d(c, t("f32", (2, 8)), True), TypeError, "ne must be integers")
_bad("view_3d", lambda c, t: ops.view_3d(c, t("f32", (2, 2, 8)), 2, 2, 2, 32, 64, True), TypeError,
     "offset must be an integer, got bool")
_bad("view_2d", lambda c, t: ops.view_2d(c, t("f32", (2, 8)), 4, 2, "32"), TypeError, "must be an integer")
