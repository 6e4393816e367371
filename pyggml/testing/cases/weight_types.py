"""Cases of the weight types: get_rows, mul_mat, cpy and set_rows over every type ggml can write
from floats (pyggml.types.can_quantize), with odd row counts, several K and batched dims.

Types ggml cannot produce here: IQ2_XXS, IQ2_XS and IQ1_S need an importance matrix, IQ1_M and
Q8_K have no quantizer (`ggml_quantize_chunk` refuses them), Q8_1 is only an activation format
(no quantizer for it either). IQ2_S, IQ3_S and IQ3_XXS can be quantized by ggml_quantize_chunk but
the CPU has no `from_float` for them, so cpy / set_rows into them are refused by the preflight:
they get get_rows and mul_mat cases only.

Bounds:
- get_rows and dequantizing copies: exact. The oracle sees the weights as the tensor holds them
  (the case harness round-trips every input through the type), and a row read is the same
  dequantization.
- cpy F32/F16 -> type, set_rows into the type: the values written are the source quantized on
  the way. The oracle quantizes them itself with pyggml.types.encode/decode (ggml_quantize_chunk,
  the reference quantizer: no compute op) and so expects the very bytes the kernel writes: exact
  when the backend quantizes as ggml's reference code does (see _STORE_BOUND for the exceptions).
- mul_mat: the oracle multiplies the dequantized weights with b in float64. The CPU first
  quantizes b to the type's vec_dot type (_VEC_DOT below), and that is the only error beyond the
  F32 accumulation order. b uniform in (-1, 1), blocks of 32 or 256 values with max|b| ~ 1:
    Q8_0 / Q8_1 / Q8_K: step d = max|b|/127, error uniform in +-d/2, variance d^2/12 ~ 5.2e-6,
      against E[b^2] = 1/3: NMSE of b ~ 1.6e-5; an output sum_k a_k (b_k + e_k) has the same
      expected NMSE (e independent of a). But all outputs of one b row share its error vector, so
      a case's NMSE is a ratio of a few correlated squares: up to 1.2e-4 seen (IQ4_XS, N=1). Bound
      3e-4; the largest error per element is bounded at 5% of the output's scale (seen: 1.3%).
      (An oracle that quantizes b to Q8_K in NumPy matches the CPU to NMSE 1e-14: the spread is
      the quantization's, not the kernel's.)
    F16: b rounded to F16 (relative step 2^-11): NMSE ~ 1e-7, F16 default bound 1e-5.
    BF16: b rounded to BF16 (relative step 2^-8): NMSE ~ 2.5e-6, BF16 default bound 1e-4.
"""

from __future__ import annotations

import numpy as np

from pyggml import types
from pyggml.testing import oracles
from pyggml.testing.cases import NMSE_F16, integers, op_case, permutation_rows

# weights ggml can write from floats, in ggml's type names (lower case)
WEIGHT_TYPES = ("q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k",
                "iq4_nl", "iq4_xs", "mxfp4", "nvfp4", "tq1_0", "tq2_0", "q1_0", "q2_0",
                "iq2_s", "iq3_s", "iq3_xxs", "f16", "bf16")
# the CPU cannot write these (no from_float): no cpy / set_rows into them
_NO_CPU_STORE = {"iq2_s", "iq3_s", "iq3_xxs"}

# b quantized to Q8_0 / Q8_1 / Q8_K first: NMSE ~ 1.6e-5 expected, bounds in the module doc
_VEC_DOT_Q8 = {"nmse": 3e-4, "max_error": 0.05}
_VEC_DOT = {"f16": {"nmse": NMSE_F16}, "bf16": {"nmse": 1e-4}}  # b rounded to the weight's type (module doc)


def _block(t: str) -> int:
    return types.block_size(t)


def _ks(t: str) -> tuple[int, int, int]:
    """Three row lengths K for type t: whole blocks, odd block counts where they stay small; odd
    lengths for the unblocked F16/BF16."""
    b = _block(t)
    if b == 1:
        return 13, 29, 7
    if b <= 64:
        return 3 * b, 5 * b, b
    if b == 128:
        return b, 3 * b, 2 * b
    return b, 2 * b, b


def _stored(t: str, x: np.ndarray) -> np.ndarray:
    """x as a tensor of type t holds it: quantized by ggml's reference quantizer, dequantized."""
    x = np.asarray(x, dtype=np.float32)
    return types.decode(t, types.encode(t, x), x.shape).copy()


# IQ4_NL's 16 levels (ggml-common.h kvalues_iq4nl)
_IQ4NL_LEVELS = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], np.float32)


def _iq4_nl_row_store(x: np.ndarray) -> np.ndarray:
    """x as a backend's IQ4_NL row quantizer writes it (ggml's quantize_row_iq4_nl_ref, the CPU's
    from_float, which cpy and set_rows use): per block of 32, levels from the scale max/-127, then the
    scale refit by least squares with weights x^2; no scale search. ggml_quantize_chunk (and so
    pyggml.types.encode) searches 15 scales instead, so its bytes differ. float32 throughout, the
    sums in order, as the C code."""
    x = np.asarray(x, dtype=np.float32)
    xb = x.reshape(-1, 32)
    rows = np.arange(len(xb))
    amax_at = np.abs(xb).argmax(axis=1)  # the first largest |x|, as the C loop's strict >
    mx = xb[rows, amax_at]
    with np.errstate(divide="ignore", invalid="ignore"):
        inv = np.float32(1) / (mx / np.float32(-127))
    al = inv[:, None] * xb
    hi = np.clip(np.searchsorted(_IQ4NL_LEVELS, al, side="right"), 1, 15)  # first level above al
    lo_d, hi_d = al - _IQ4NL_LEVELS[hi - 1], _IQ4NL_LEVELS[hi] - al
    idx = np.where(lo_d < hi_d, hi - 1, hi)
    idx = np.where(al <= _IQ4NL_LEVELS[0], 0, np.where(al >= _IQ4NL_LEVELS[15], 15, idx))
    q = _IQ4NL_LEVELS[idx]
    w = xb * xb
    sumqx = np.zeros(len(xb), np.float32)
    sumq2 = np.zeros(len(xb), np.float32)
    for j in range(32):
        sumqx = sumqx + w[:, j] * q[:, j] * xb[:, j]
        sumq2 = sumq2 + w[:, j] * q[:, j] * q[:, j]
    with np.errstate(divide="ignore", invalid="ignore"):
        d = np.where((sumq2 > 0) & (np.abs(mx) >= 1e-15), sumqx / sumq2, 0).astype(np.float32)
    d = d.astype(np.float16).astype(np.float32)  # the block's scale is stored as F16
    return (d[:, None] * q).reshape(x.shape)


def _written(t: str, x: np.ndarray) -> np.ndarray:
    """Values written into a tensor of type t by cpy / set_rows: the row quantizer's result."""
    return _iq4_nl_row_store(x) if t == "iq4_nl" else _stored(t, x)


def _store_bound(t: str) -> dict:
    return {"exact": True}


for _t in WEIGHT_TYPES:
    _k1, _k2, _k3 = _ks(_t)

    # --- get_rows: the rows as the tensor holds them --------------------------------------------------------------
    op_case(f"get_rows/{_t}/weights_rows11", {"a": (_t, (11, _k1)), "b": ("i32", (5,), integers(0, 11))},
            lambda c, x: c.get_rows(x.a, x.b), lambda x: oracles.get_rows(x.a, x.b), exact=True)
    op_case(f"get_rows/{_t}/weights_batched", {"a": (_t, (2, 3, 7, _k3)), "b": ("i32", (2, 3, 4), integers(0, 7))},
            lambda c, x: c.get_rows(x.a, x.b), lambda x: oracles.get_rows(x.a, x.b), exact=True)
    # a permuted (dims 1 and 2 swapped: rows stay whole) and a transposed (strided) index
    op_case(f"get_rows/{_t}/weights_strided", {"a": (_t, (7, 3, _k3)), "b": ("i32", (5, 3), integers(0, 7))},
            lambda c, x: c.get_rows(c.permute(x.a, 0, 2, 1, 3), c.transpose(x.b)),
            lambda x: oracles.get_rows(oracles.permute(x.a, 0, 2, 1, 3), x.b.T), exact=True)

    # --- mul_mat: b is quantized to the vec_dot type first ------------------------------------------------------
    _bound = _VEC_DOT.get(_t, _VEC_DOT_Q8)
    op_case(f"mul_mat/{_t}/weights_m7_n3", {"a": (_t, (7, _k1)), "b": ("f32", (3, _k1))},
            lambda c, x: c.mul_mat(x.a, x.b), lambda x: oracles.mul_mat(x.a, x.b), **_bound)
    op_case(f"mul_mat/{_t}/weights_m13_n1", {"a": (_t, (13, _k2)), "b": ("f32", (1, _k2))},
            lambda c, x: c.mul_mat(x.a, x.b), lambda x: oracles.mul_mat(x.a, x.b), **_bound)
    # a broadcast over dims 2 and 3 of b
    op_case(f"mul_mat/{_t}/weights_batched", {"a": (_t, (1, 2, 5, _k3)), "b": ("f32", (3, 2, 3, _k3))},
            lambda c, x: c.mul_mat(x.a, x.b), lambda x: oracles.mul_mat(x.a, x.b), **_bound)
    # b a permuted view (rows contiguous, dims 1 and 2 swapped), a broadcast over dim 2
    op_case(f"mul_mat/{_t}/weights_b_permuted", {"a": (_t, (5, _k3)), "b": ("f32", (3, 4, _k3))},
            lambda c, x: c.mul_mat(x.a, c.permute(x.b, 0, 2, 1, 3)),
            lambda x: oracles.mul_mat(x.a, oracles.permute(x.b, 0, 2, 1, 3)), **_bound)

    # --- dequantizing copy ---------------------------------------------------------------------------------------
    if _t not in ("f16", "bf16"):  # F16/BF16 -> F32 copies are movement cases
        op_case(f"cpy/{_t}_f32/weights", {"a": (_t, (5, _k1)), "b": ("f32", (5, _k1))},
                lambda c, x: c.cpy(x.a, x.b), lambda x: x.a, exact=True)

    if _t in _NO_CPU_STORE:
        continue
    # --- cpy F32/F16 -> the type: quantized on the way ----------------------------------------------------------
    op_case(f"cpy/f32_{_t}/weights", {"a": ("f32", (5, _k1)), "b": (_t, (5, _k1))},
            lambda c, x, _t=_t: c.cpy(x.a, x.b), lambda x, _t=_t: _written(_t, x.a), **_store_bound(_t))
    op_case(f"cpy/f32_{_t}/weights_reshaped", {"a": ("f32", (2, 3, _k3)), "b": (_t, (3, 2 * _k3))},
            lambda c, x, _t=_t: c.cpy(x.a, x.b), lambda x, _t=_t: _written(_t, x.a).reshape(x.b.shape),
            **_store_bound(_t))
    op_case(f"cpy/f16_{_t}/weights", {"a": ("f16", (3, _k2)), "b": (_t, (3, _k2))},
            lambda c, x, _t=_t: c.cpy(x.a, x.b), lambda x, _t=_t: _written(_t, x.a), **_store_bound(_t))
    # a permuted source: rows contiguous, dims 1 and 2 swapped
    op_case(f"cpy/f32_{_t}/weights_permuted", {"a": ("f32", (3, 5, _k3)), "b": (_t, (5, 3, _k3))},
            lambda c, x, _t=_t: c.cpy(c.permute(x.a, 0, 2, 1, 3), x.b),
            lambda x, _t=_t: _written(_t, oracles.permute(x.a, 0, 2, 1, 3)), **_store_bound(_t))

    # --- set_rows into the type: the rows written are quantized on the way --------------------------------------
    op_case(f"set_rows/{_t}/weights_i64", {"a": (_t, (9, _k1)), "b": ("f32", (4, _k1)),
                                           "c": ("i64", (4,), permutation_rows(9))},
            lambda c, x: c.set_rows(x.a, x.b, x.c),
            lambda x, _t=_t: oracles.set_rows(x.a, _written(_t, x.b), x.c), **_store_bound(_t))
    op_case(f"set_rows/{_t}/weights_broadcast_i32", {"a": (_t, (2, 3, 6, _k3)), "b": ("f32", (2, 3, 2, _k3)),
                                                     "c": ("i32", (1, 3, 2), permutation_rows(6))},
            lambda c, x: c.set_rows(x.a, x.b, x.c),
            lambda x, _t=_t: oracles.set_rows(x.a, _written(_t, x.b), x.c), **_store_bound(_t))
    op_case(f"set_rows/{_t}/weights_f16_src", {"a": (_t, (7, _k2)), "b": ("f16", (3, _k2)),
                                               "c": ("i32", (3,), permutation_rows(7))},
            lambda c, x: c.set_rows(x.a, x.b, x.c),
            lambda x, _t=_t: oracles.set_rows(x.a, _written(_t, x.b), x.c), **_store_bound(_t))
