"""Reductions over rows or whole tensors, norms, sorting."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from pyggml.ops._common import (
    _ARG_ERRORS,
    UnaryWrapper,
    _bad_arguments,
    _guarded,
    _make_unary,
    _result,
    _scalar,
)
from pyggml.tensor import Tensor
from pyggml.types import SortOrder

if TYPE_CHECKING:
    from pyggml.context import Context

# --- reductions, norms ---------------------------------------------------------------------------------
sum: UnaryWrapper = _make_unary(
    "sum",
    doc="""ggml_sum: the sum of every element of a: np.sum(a), as a 1-element tensor.

a: any ne, F32, F16 or BF16, contiguous rows.
Result: ne [1] of a's type.
Precision: the CPU accumulates in double (F32 a) or F32 (F16/BF16), then rounds to a's type.""",
)
sum_rows: UnaryWrapper = _make_unary(
    "sum_rows",
    doc="""ggml_sum_rows: the sum of each row: np.sum(a, axis=-1, keepdims=True) (ggml's dim 0).

a: any ne [ne0, ne1, ne2, ne3] (NumPy shape reversed), F32, contiguous rows.
Result: ne [1, ne1, ne2, ne3], F32.
Precision: the CPU accumulates each row in double: within NMSE 1e-7 of a float64 NumPy sum.""",
)
mean: UnaryWrapper = _make_unary(
    "mean",
    doc="""ggml_mean: the mean of each row: np.mean(a, axis=-1, keepdims=True) (ggml's dim 0).

a: any ne [ne0, ne1, ne2, ne3] (NumPy shape reversed), F32, contiguous rows.
Result: ne [1, ne1, ne2, ne3], F32. Precision: as sum_rows, divided by ne0.""",
)
argmax: UnaryWrapper = _make_unary(
    "argmax",
    doc="""ggml_argmax: the index of each row's largest value: np.argmax(a, axis=-1), but the last index on ties
(NumPy gives the first).

a: a matrix, ne [ne0, ne1] (NumPy shape (ne1, ne0)), F32.
Result: I32 ne [ne1]. Exact.""",
)


def _norm(op: str, ctx, a, eps):
    eps = _scalar(op, "eps", eps)
    if not eps >= 0:  # ggml takes any float; a negative or NaN eps is a silent NaN result
        raise ValueError(f"{op}: eps must be >= 0, got {eps}")
    try:
        r = _guarded(op)(ctx.ptr, a.ptr, eps)
    except _ARG_ERRORS as e:
        raise _bad_arguments(op, e, ctx, a=a) from None
    return _result(ctx, r, op, a)


def norm(ctx: Context, a: Tensor, eps: float = 1e-5) -> Tensor:
    """ggml_norm: each row standardized: (a - mean) / sqrt(var + eps) over ne0 (NumPy's last axis).

    a: any ne (NumPy shape reversed), F32, contiguous rows.
    eps: added to the variance, >= 0.
    Result: a's shape and type (no scale or bias: multiply and add those yourself).
    Precision: the CPU accumulates the sums in double; within NMSE 1e-7 of a float64 NumPy reference.
    """
    return _norm("norm", ctx, a, eps)


def rms_norm(ctx: Context, a: Tensor, eps: float = 1e-6) -> Tensor:
    """ggml_rms_norm: each row divided by its root mean square: a / sqrt(mean(a**2) + eps) over ne0.

    a: any ne (NumPy shape reversed), F32, contiguous rows.
    eps: added to the mean square, >= 0.
    Result: a's shape and type (no weight: multiply by it yourself, as llama.cpp does).
    Precision: the CPU accumulates in double; within NMSE 1e-7 of a float64 NumPy reference.
    """
    return _norm("rms_norm", ctx, a, eps)


def l2_norm(ctx: Context, a: Tensor, eps: float = 1e-12) -> Tensor:
    """ggml_l2_norm: each row divided by its Euclidean norm: a / max(sqrt(sum(a**2)), eps) over ne0.

    a: any ne (NumPy shape reversed), F32, contiguous rows.
    eps: the smallest divisor, >= 0.
    Result: a's shape and type. Precision: F32 sums of squares, within NMSE 1e-7.
    """
    return _norm("l2_norm", ctx, a, eps)


def argsort(ctx: Context, a: Tensor, order: SortOrder | str | int = SortOrder.ASC) -> Tensor:
    """ggml_argsort: the indices that sort each row (ne0, NumPy's last axis): np.argsort(a, axis=-1).

    a: any ne (NumPy shape reversed), F32, contiguous rows.
    order: SortOrder.ASC / 'asc' / 0 (smallest first) or SortOrder.DESC / 'desc' / 1.
    Result: I32 of a's shape. The order of equal values is not defined (not a stable sort).
    """
    if isinstance(order, str):
        if order.upper() not in SortOrder.__members__:
            raise ValueError(f"argsort: order must be 'asc' or 'desc', got {order!r}")
        order = SortOrder[order.upper()]
    order = _scalar("argsort", "order", order, int)  # a bool or float is no order
    if order not in (SortOrder.ASC, SortOrder.DESC):
        raise ValueError(f"argsort: order must be ASC or DESC, got {order}")
    try:
        r = _guarded("argsort")(ctx.ptr, a.ptr, order)
    except _ARG_ERRORS as e:
        raise _bad_arguments("argsort", e, ctx, a=a) from None
    return _result(ctx, r, "argsort", a)


# --- top k, group norm -------------------------------------------------------------------------------------
def _k(op: str, k) -> int:
    k = _scalar(op, "k", k, int)
    if not 0 < k < 2**31:  # ggml checks only k <= ne0: k = 0 makes an empty result, a negative one a bad view
        raise ValueError(f"{op}: k must be positive, got {k}")
    return k


def top_k(ctx: Context, a: Tensor, k: int) -> Tensor:
    """ggml_top_k: the indices of the k largest values of each row (ne0), in no particular order (ggml.h).

    a: any ne (NumPy shape reversed), F32, contiguous rows.
    k: how many, 1..ne0.
    Result: I32 ne [k, ne1, ne2, ne3]. Sort them (or use argsort_top_k) when the order matters.
    """
    k = _k("top_k", k)
    try:
        r = _guarded("top_k")(ctx.ptr, a.ptr, k)
    except _ARG_ERRORS as e:
        raise _bad_arguments("top_k", e, ctx, a=a) from None
    return _result(ctx, r, "top_k", a)


def argsort_top_k(ctx: Context, a: Tensor, k: int) -> Tensor:
    """ggml_argsort_top_k: argsort DESC, the first k of each row: the indices of the k largest,
    largest first.

    a: any ne (NumPy shape reversed), F32, contiguous rows.
    k: how many, 1..ne0.
    Result: I32 ne [k, ne1, ne2, ne3] (a view of the whole argsort).
    """
    k = _k("argsort_top_k", k)
    try:
        r = _guarded("argsort_top_k")(ctx.ptr, a.ptr, k)
    except _ARG_ERRORS as e:
        raise _bad_arguments("argsort_top_k", e, ctx, a=a) from None
    return _result(ctx, r, "argsort_top_k", a)


def group_norm(ctx: Context, a: Tensor, n_groups: int, eps: float = 1e-6) -> Tensor:
    """ggml_group_norm: group normalization without affine: per sample (ne3), the channels (ne2) are
    split in n_groups groups of ceil(ne2 / n_groups), each standardized to mean 0 and variance 1 over
    its channels x ne1 x ne0 values ((x - mean) / sqrt(var + eps)).

    a: ne [W, H, C, N] (NumPy shape (N, C, H, W)), F32.
    n_groups: 1..C. eps: added to the variance, finite, >= 0.
    Result: a's shape and type. Precision: F32 with double sums on the CPU, within NMSE 1e-7.
    """
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


__all__ = [  # generated by tools/gen_methods.py
    "argmax",
    "argsort",
    "argsort_top_k",
    "group_norm",
    "l2_norm",
    "mean",
    "norm",
    "rms_norm",
    "sum",
    "sum_rows",
    "top_k",
]
