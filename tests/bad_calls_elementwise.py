"""Bad calls of the newer reduction ops (loaded by tests/test_bad_input.py); the element-wise ops' bad
calls are in their specs (pyggml/testing/opdb/elementwise.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyggml import ops
from pyggml.errors import GraphError, OpError

BAD: list[tuple[str, Callable[..., Any], type[Exception], str]] = [
    ("top_k", lambda c, t: ops.top_k(c, t("f32", (3, 8)), 9), OpError, "a->ne[0] >= k"),
    ("top_k", lambda c, t: ops.top_k(c, t("f32", (3, 8)), 0), ValueError, "k must be positive"),
    ("top_k", lambda c, t: ops.top_k(c, t("f16", (3, 8)), 2), GraphError, "the CPU kernel takes"),
    ("top_k", lambda c, t: ops.top_k(c, ops.permute(c, t("f32", (3, 4, 8)), 0, 2, 1, 3), 2), GraphError, "rows"),
    ("argsort_top_k", lambda c, t: ops.argsort_top_k(c, t("f32", (3, 8)), 9), OpError, "a->ne[0] >= k"),
    ("argsort_top_k", lambda c, t: ops.argsort_top_k(c, t("f32", (3, 8)), -1), ValueError, "k must be positive"),
    ("group_norm", lambda c, t: ops.group_norm(c, t("f32", (2, 3, 8)), 3), ValueError, "n_groups must be in 1..ne2 = 2"),
    ("group_norm", lambda c, t: ops.group_norm(c, t("f32", (2, 3, 8)), 1, float("nan")), ValueError, "eps must be finite"),
    ("group_norm", lambda c, t: ops.group_norm(c, t("f16", (2, 3, 8)), 1), GraphError, "the CPU kernel takes"),
    # scalar arguments: a truth value or text is no integer or number (issue 19)
    ("argsort", lambda c, t: ops.argsort(c, t("f32", (3, 8)), True), TypeError, "order must be an integer, got bool"),
    ("rms_norm", lambda c, t: ops.rms_norm(c, t("f32", (3, 8)), "1e-6"), TypeError, "eps must be a number, got str"),
    ("top_k", lambda c, t: ops.top_k(c, t("f32", (3, 8)), 2.0), TypeError, "k must be an integer, got float"),
]
