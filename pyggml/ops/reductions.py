"""Reductions over rows or whole tensors, norms, sorting."""

from __future__ import annotations

import math

from pyggml.ops._common import (
    UnaryWrapper,
    _ARG_ERRORS,
    _bad_arguments,
    _guarded,
    _make_unary,
    _result,
    _scalar,
)
from pyggml.tensor import Tensor
from pyggml.types import SortOrder

# --- reductions, norms, softmax ----------------------------------------------------------------------
sum: UnaryWrapper = _make_unary("sum")
sum_rows: UnaryWrapper = _make_unary("sum_rows")
mean: UnaryWrapper = _make_unary("mean")
argmax: UnaryWrapper = _make_unary("argmax")


def _norm(op: str, ctx, a, eps):
    eps = _scalar(op, "eps", eps)
    if not eps >= 0:  # ggml takes any float; a negative or NaN eps is a silent NaN result
        raise ValueError(f"{op}: eps must be >= 0, got {eps}")
    try:
        r = _guarded(op)(ctx.ptr, a.ptr, eps)
    except _ARG_ERRORS as e:
        raise _bad_arguments(op, e, ctx, a=a) from None
    return _result(ctx, r, op, a)


def norm(ctx, a, eps: float = 1e-5):
    return _norm("norm", ctx, a, eps)


def rms_norm(ctx, a, eps: float = 1e-6):
    return _norm("rms_norm", ctx, a, eps)


def l2_norm(ctx, a, eps: float = 1e-12):
    return _norm("l2_norm", ctx, a, eps)


def argsort(ctx, a, order=SortOrder.ASC):
    if isinstance(order, str):
        if order.upper() not in SortOrder.__members__:
            raise ValueError(f"argsort: order must be 'asc' or 'desc', got {order!r}")
        order = SortOrder[order.upper()]
    if order not in (SortOrder.ASC, SortOrder.DESC):
        raise ValueError(f"argsort: order must be ASC or DESC, got {order}")
    try:
        r = _guarded("argsort")(ctx.ptr, a.ptr, int(order))
    except _ARG_ERRORS as e:
        raise _bad_arguments("argsort", e, ctx, a=a) from None
    return _result(ctx, r, "argsort", a)


# --- top k, group norm -------------------------------------------------------------------------------------
def _k(op: str, k) -> int:
    k = _scalar(op, "k", k, int)
    if not 0 < k < 2**31:  # ggml checks only k <= ne0: k = 0 makes an empty result, a negative one a bad view
        raise ValueError(f"{op}: k must be positive, got {k}")
    return k


def top_k(ctx, a: Tensor, k: int):
    """The indices of the k largest values of each row, I32, in no particular order (ggml.h)."""
    k = _k("top_k", k)
    try:
        r = _guarded("top_k")(ctx.ptr, a.ptr, k)
    except _ARG_ERRORS as e:
        raise _bad_arguments("top_k", e, ctx, a=a) from None
    return _result(ctx, r, "top_k", a)


def argsort_top_k(ctx, a: Tensor, k: int):
    """argsort DESC, the first k of each row: the indices of the k largest, largest first (a view)."""
    k = _k("argsort_top_k", k)
    try:
        r = _guarded("argsort_top_k")(ctx.ptr, a.ptr, k)
    except _ARG_ERRORS as e:
        raise _bad_arguments("argsort_top_k", e, ctx, a=a) from None
    return _result(ctx, r, "argsort_top_k", a)


def group_norm(ctx, a: Tensor, n_groups: int, eps: float = 1e-6):
    n_groups = _scalar("group_norm", "n_groups", n_groups, int)
    eps = _scalar("group_norm", "eps", eps)
    if not (eps >= 0 and math.isfinite(eps)):
        raise ValueError(f"group_norm: eps must be finite and >= 0, got {eps}")
    # the kernel splits ne2 into groups of ceil(ne2 / n_groups) channels: more groups than channels
    # leaves groups empty, and n_groups <= 0 divides by zero
    if isinstance(a, Tensor) and not 0 < n_groups <= a.ptr.ne[2]:
        raise ValueError(f"group_norm: n_groups must be in 1..ne2 = {a.ptr.ne[2]}, got {n_groups}")
    try:
        r = _guarded("group_norm")(ctx.ptr, a.ptr, n_groups, eps)
    except _ARG_ERRORS as e:
        raise _bad_arguments("group_norm", e, ctx, a=a) from None
    return _result(ctx, r, "group_norm", a)


# the family's op wrappers, listed so that type checkers see them (tests/test_types.py keeps it exact)
__all__ = [
    "argmax", "argsort", "argsort_top_k", "group_norm", "l2_norm", "mean", "norm", "rms_norm",
    "sum", "sum_rows", "top_k",
]
