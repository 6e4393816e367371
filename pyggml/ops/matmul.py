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
_MATMUL_PRECISION = """Precision: CPU: F32 a and b in F32 (within NMSE 1e-7 of a float64 product). An F16 a
   rounds b to F16 before the products (NMSE ~1e-7, bound 1e-5), a BF16 a rounds b to BF16 (bound
   1e-4), a quantized a quantizes b to Q8_0/Q8_1/Q8_K first (bound NMSE 3e-4 to 5e-4): the weight's
   type decides the activations' precision. Vulkan: an F32 x F32 product of more than 8 columns of
   b (or several matrices) caches its tiles in F16 shared memory on devices with F16 arithmetic,
   lavapipe included: relative error about 3e-4 per product, GGML_PREC_F32 or not
   (docs/findings.md entry 25); a non-contiguous F32 a is rounded to F16 (entry 11)."""

mul_mat: BinaryWrapper = _make_binary("mul_mat", doc=f"""ggml_mul_mat: the matrix product of a's rows with b's rows: out = b @ a.T per matrix, in NumPy terms.

a: ne [K, M, A2, A3] (NumPy shape (A3, A2, M, K)): the weights, any type the backend multiplies
   (F32, F16, BF16, quantized).
b: ne [K, N, B2, B3] (NumPy shape (B3, B2, N, K)): the activations, F32 (or a's type); A2 divides B2
   and A3 divides B3 (a is repeated: b's matrix i2 uses a's i2 // (B2/A2)).
Result: F32 ne [M, N, B2, B3] (NumPy shape (B3, B2, N, M)): out[n, m] = sum_k a[m, k] * b[n, k].
{_MATMUL_PRECISION}""")

out_prod: BinaryWrapper = _make_binary("out_prod", doc="""ggml_out_prod: the sum of outer products: out = b.T @ a per matrix, in NumPy terms
(out[n, m] = sum_k a[k, m] * b[k, n] with NumPy indices).

a: ne [M, K, A2, A3] (NumPy shape (A3, A2, K, M)), F32, F16 or quantized.
b: ne [N, K, B2, B3] (NumPy shape (B3, B2, K, N)), F32; A2 divides B2, A3 divides B3 (a repeated).
Result: F32 ne [M, N, B2, B3] (NumPy shape (B3, B2, N, M)).
Precision: F32 accumulation (the suite's bound NMSE 1e-6).""")

_mul_mat_id = _guarded("mul_mat_id")
_add_id = _guarded("add_id")


def mul_mat_id(ctx, as_: Tensor, b: Tensor, ids: Tensor):
    """ggml_mul_mat_id: mixture-of-experts product: each token's b multiplied by the experts ids picks,
    out[:, e, t] = as_[:, :, ids[e, t]] . b[:, e % n_b, t] (mul_mat with a matrix chosen per row).

    as_: ne [K, M, n_as] (ggml order; NumPy shape (n_as, M, K)): one weight matrix per expert, any type
         mul_mat takes.
    b: ne [K, n_b, n_tokens], F32: n_b = 1 (every expert reads the token's row) or n_used.
    ids: I32 ne [n_used, n_tokens], each in 0..n_as-1 (checked before compute: the CPU kernel writes
         out of bounds otherwise).
    Result: F32 ne [M, n_used, n_tokens].
    Precision: as mul_mat (b rounded to the weight's dot type on the CPU; Vulkan's F16 tiles)."""
    try:
        r = _mul_mat_id(ctx.ptr, as_.ptr, b.ptr, ids.ptr)
    except _ARG_ERRORS as e:
        raise _bad_arguments("mul_mat_id", e, ctx, as_=as_, b=b, ids=ids) from None
    return _result(ctx, r, "mul_mat_id", as_, b, ids)


def add_id(ctx, a: Tensor, b: Tensor, ids: Tensor):
    """ggml_add_id: an expert's bias added by id: out[:, i1, i2] = a[:, i1, i2] + b[:, ids[i1, i2]].

    a: F32 ne [n, ne1, ne2] (ggml order; NumPy shape reversed), e.g. mul_mat_id's result.
    b: F32 ne [n, n_experts]: one bias row per expert.
    ids: I32 ne [ne1, ne2], each in 0..n_experts-1 (checked before compute: the CPU aborts otherwise).
    Result: a's shape, F32. Exact up to one F32 addition."""
    try:
        r = _add_id(ctx.ptr, a.ptr, b.ptr, ids.ptr)
    except _ARG_ERRORS as e:
        raise _bad_arguments("add_id", e, ctx, a=a, b=b, ids=ids) from None
    return _result(ctx, r, "add_id", a, b, ids)


# the family's op wrappers, listed so that type checkers see them (tests/test_types.py keeps it exact)
__all__ = [
    "add_id", "mul_mat", "mul_mat_id", "out_prod",
]
