"""Reductions over rows or whole tensors, norms, sorting."""

from __future__ import annotations

from pyggml.ops._common import (
    _ARG_ERRORS,
    _bad_arguments,
    _guarded,
    _make_unary,
    _result,
    _scalar,
    exported,
)
from pyggml.types import SortOrder

# --- reductions, norms, softmax ----------------------------------------------------------------------
sum = _make_unary("sum")
sum_rows = _make_unary("sum_rows")
mean = _make_unary("mean")
argmax = _make_unary("argmax")


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



__all__ = exported(globals())
