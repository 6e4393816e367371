"""Matrix products: mul_mat, its mixture-of-experts form mul_mat_id, out_prod, and add_id (an
expert's bias added by id)."""

from __future__ import annotations

from pyggml.ops._common import (
    BinaryWrapper,
    _ARG_ERRORS,
    _bad_arguments,
    _guarded,
    _make_binary,
    _result,
)
from pyggml.tensor import Tensor

# --- matrix, state space --------------------------------------------------------------------------------
mul_mat: BinaryWrapper = _make_binary("mul_mat")
mul_mat.__doc__ = "ggml_mul_mat: a [K, M, ...], b [K, N, ...] -> F32 [M, N, ...] (a's rows dotted with b's)."

out_prod: BinaryWrapper = _make_binary("out_prod")
out_prod.__doc__ = ("ggml_out_prod: a [M, K, ...], b [N, K, ...] -> F32 [M, N, ...], "
                    "out[m, n] = sum_k a[m, k] * b[n, k]; a broadcasts over b's dims 2 and 3.")

_mul_mat_id = _guarded("mul_mat_id")
_add_id = _guarded("add_id")


def mul_mat_id(ctx, as_: Tensor, b: Tensor, ids: Tensor):
    """ggml_mul_mat_id: as_ [K, M, n_as] (one matrix per expert), b [K, n_b, n_tokens], ids I32
    [n_used, n_tokens] -> F32 [M, n_used, n_tokens]: out[:, e, t] = as_[:, :, ids[e, t]] . b[:, e % n_b, t].
    Every id must lie in 0..n_as-1 (the CPU kernel writes out of bounds otherwise)."""
    try:
        r = _mul_mat_id(ctx.ptr, as_.ptr, b.ptr, ids.ptr)
    except _ARG_ERRORS as e:
        raise _bad_arguments("mul_mat_id", e, ctx, as_=as_, b=b, ids=ids) from None
    return _result(ctx, r, "mul_mat_id", as_, b, ids)


def add_id(ctx, a: Tensor, b: Tensor, ids: Tensor):
    """ggml_add_id: out[:, i1, i2] = a[:, i1, i2] + b[:, ids[i1, i2]] (ids I32 [a.ne1, a.ne2]).
    Every id must lie in 0..b.ne1-1 (the CPU kernel aborts otherwise)."""
    try:
        r = _add_id(ctx.ptr, a.ptr, b.ptr, ids.ptr)
    except _ARG_ERRORS as e:
        raise _bad_arguments("add_id", e, ctx, a=a, b=b, ids=ids) from None
    return _result(ctx, r, "add_id", a, b, ids)


# the family's op wrappers, listed so that type checkers see them (tests/test_types.py keeps it exact)
__all__ = [
    "add_id", "mul_mat", "mul_mat_id", "out_prod",
]
