"""Reductions over rows or whole tensors, norms, sorting."""

from __future__ import annotations

import math
from collections.abc import Callable
from types import SimpleNamespace

from pyggml.ops._common import UnaryWrapper, _scalar
from pyggml.ops.declared import declared
from pyggml.tensor import Tensor
from pyggml.types import SortOrder

# --- reductions, norms ---------------------------------------------------------------------------------
sum: UnaryWrapper = declared(
    "sum",
    """ggml_sum: the sum of every element of a: np.sum(a), as a 1-element tensor.

a: any ne, F32, F16 or BF16, contiguous rows.
Result: ne [1] of a's type.
Precision: the CPU accumulates in double (F32 a) or F32 (F16/BF16), then rounds to a's type.""",
)
sum_rows: UnaryWrapper = declared(
    "sum_rows",
    """ggml_sum_rows: the sum of each row: np.sum(a, axis=-1, keepdims=True) (ggml's dim 0).

a: any ne [ne0, ne1, ne2, ne3] (NumPy shape reversed), F32, contiguous rows.
Result: ne [1, ne1, ne2, ne3], F32.
Precision: the CPU accumulates each row in double: within NMSE 1e-7 of a float64 NumPy sum.""",
)
mean: UnaryWrapper = declared(
    "mean",
    """ggml_mean: the mean of each row: np.mean(a, axis=-1, keepdims=True) (ggml's dim 0).

a: any ne [ne0, ne1, ne2, ne3] (NumPy shape reversed), F32, contiguous rows.
Result: ne [1, ne1, ne2, ne3], F32. Precision: as sum_rows, divided by ne0.""",
)
argmax: UnaryWrapper = declared(
    "argmax",
    """ggml_argmax: the index of each row's largest value: np.argmax(a, axis=-1), but the last index on ties
(NumPy gives the first).

a: a matrix, ne [ne0, ne1] (NumPy shape (ne1, ne0)), F32.
Result: I32 ne [ne1]. Exact.""",
)


def _eps(op: str, finite: bool = False) -> Callable[[SimpleNamespace], None]:
    """The check of an op's eps: >= 0 (and finite): ggml takes any float; a negative or NaN eps is a silent
    NaN result."""

    def check(x: SimpleNamespace) -> None:
        if not (x.eps >= 0 and (not finite or math.isfinite(x.eps))):
            raise ValueError(f"{op}: eps must be {'finite and ' if finite else ''}>= 0, got {x.eps}")

    return check


norm = declared(
    "norm",
    """ggml_norm: each row standardized: (a - mean) / sqrt(var + eps) over ne0 (NumPy's last axis).

a: any ne (NumPy shape reversed), F32, contiguous rows.
eps: added to the variance, >= 0.
Result: a's shape and type (no scale or bias: multiply and add those yourself).
Precision: the CPU accumulates the sums in double; within NMSE 1e-7 of a float64 NumPy reference.""",
    defaults=dict(eps=1e-5),
    check=_eps("norm"),
)
rms_norm = declared(
    "rms_norm",
    """ggml_rms_norm: each row divided by its root mean square: a / sqrt(mean(a**2) + eps) over ne0.

a: any ne (NumPy shape reversed), F32, contiguous rows.
eps: added to the mean square, >= 0.
Result: a's shape and type (no weight: multiply by it yourself, as llama.cpp does).
Precision: the CPU accumulates in double; within NMSE 1e-7 of a float64 NumPy reference.""",
    defaults=dict(eps=1e-6),
    check=_eps("rms_norm"),
)
l2_norm = declared(
    "l2_norm",
    """ggml_l2_norm: each row divided by its Euclidean norm: a / max(sqrt(sum(a**2)), eps) over ne0.

a: any ne (NumPy shape reversed), F32, contiguous rows.
eps: the smallest divisor, >= 0.
Result: a's shape and type. Precision: F32 sums of squares, within NMSE 1e-7.""",
    defaults=dict(eps=1e-12),
    check=_eps("l2_norm"),
)


def _order(order: object) -> int:
    """argsort's order: a name ('asc', 'desc') read as its value, anything else as an integer."""
    if isinstance(order, str):
        if order.upper() not in SortOrder.__members__:
            raise ValueError(f"argsort: order must be 'asc' or 'desc', got {order!r}")
        order = SortOrder[order.upper()]
    return _scalar("argsort", "order", order, int)  # a bool or float is no order


def _asc_or_desc(x: SimpleNamespace) -> None:
    if x.order not in (SortOrder.ASC, SortOrder.DESC):
        raise ValueError(f"argsort: order must be ASC or DESC, got {x.order}")


argsort = declared(
    "argsort",
    """ggml_argsort: the indices that sort each row (ne0, NumPy's last axis): np.argsort(a, axis=-1).

a: any ne (NumPy shape reversed), F32, contiguous rows.
order: SortOrder.ASC / 'asc' / 0 (smallest first) or SortOrder.DESC / 'desc' / 1.
Result: I32 of a's shape. The order of equal values is not defined (not a stable sort).""",
    defaults=dict(order=SortOrder.ASC),
    convert=dict(order=_order),
    check=_asc_or_desc,
)


# --- top k, group norm -------------------------------------------------------------------------------------
def _k(op: str) -> Callable[[SimpleNamespace], None]:
    """The check of an op's k: ggml checks only k <= ne0: k = 0 makes an empty result, a negative one a bad
    view."""

    def check(x: SimpleNamespace) -> None:
        if not 0 < x.k < 2**31:
            raise ValueError(f"{op}: k must be positive, got {x.k}")

    return check


top_k = declared(
    "top_k",
    """ggml_top_k: the indices of the k largest values of each row (ne0), in no particular order (ggml.h).

a: any ne (NumPy shape reversed), F32, contiguous rows.
k: how many, 1..ne0.
Result: I32 ne [k, ne1, ne2, ne3]. Sort them (or use argsort_top_k) when the order matters.""",
    check=_k("top_k"),
)
argsort_top_k = declared(
    "argsort_top_k",
    """ggml_argsort_top_k: argsort DESC, the first k of each row: the indices of the k largest,
largest first.

a: any ne (NumPy shape reversed), F32, contiguous rows.
k: how many, 1..ne0.
Result: I32 ne [k, ne1, ne2, ne3] (a view of the whole argsort).""",
    check=_k("argsort_top_k"),
)
_group_norm_eps = _eps("group_norm", finite=True)


def _group_norm_check(x: SimpleNamespace) -> None:
    _group_norm_eps(x)
    # the kernel splits ne2 into groups of ceil(ne2 / n_groups) channels: more groups than channels
    # leaves groups empty, and n_groups <= 0 divides by zero
    if isinstance(x.a, Tensor) and not 0 < x.n_groups <= x.a.ptr.ne[2]:
        raise ValueError(f"group_norm: n_groups must be in 1..ne2 = {x.a.ptr.ne[2]}, got {x.n_groups}")


group_norm = declared(
    "group_norm",
    """ggml_group_norm: group normalization without affine: per sample (ne3), the channels (ne2) are
split in n_groups groups of ceil(ne2 / n_groups), each standardized to mean 0 and variance 1 over
its channels x ne1 x ne0 values ((x - mean) / sqrt(var + eps)).

a: ne [W, H, C, N] (NumPy shape (N, C, H, W)), F32.
n_groups: 1..C. eps: added to the variance, finite, >= 0.
Result: a's shape and type. Precision: F32 with double sums on the CPU, within NMSE 1e-7.""",
    defaults=dict(eps=1e-6),
    check=_group_norm_check,
)


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
