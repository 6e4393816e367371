"""Cases of the matrix products."""

from __future__ import annotations

import numpy as np

from pyggml import types
from pyggml._native import ffi, lib
from pyggml.testing import oracles
from pyggml.testing.cases import (
    NMSE_F16,
    NMSE_Q8_DOT,
    integers,
    op_case,
)

# --- matrix ------------------------------------------------------------------------------------------------------------
op_case("mul_mat/f32", {"a": ("f32", (5, 16)), "b": ("f32", (3, 16))}, lambda c, x: c.mul_mat(x.a, x.b),
        lambda x: oracles.mul_mat(x.a, x.b))
op_case("mul_mat/f32/broadcast", {"a": ("f32", (1, 2, 4, 8)), "b": ("f32", (3, 4, 2, 8))},
        lambda c, x: c.mul_mat(x.a, x.b), lambda x: oracles.mul_mat(x.a, x.b))
op_case("mul_mat/f32/vector", {"a": ("f32", (7, 32)), "b": ("f32", (1, 32))},
        lambda c, x: c.mul_mat(x.a, x.b), lambda x: oracles.mul_mat(x.a, x.b))
op_case("mul_mat/f16", {"a": ("f16", (2, 5, 32)), "b": ("f32", (2, 3, 32))}, lambda c, x: c.mul_mat(x.a, x.b),
        lambda x: oracles.mul_mat(x.a, x.b))
op_case("mul_mat/f16_f16", {"a": ("f16", (5, 32)), "b": ("f16", (3, 32))}, lambda c, x: c.mul_mat(x.a, x.b),
        lambda x: oracles.mul_mat(x.a, x.b))
for _q in ("q8_0", "q4_0"):
    op_case(f"mul_mat/{_q}", {"a": (_q, (2, 6, 64)), "b": ("f32", (2, 3, 64))}, lambda c, x: c.mul_mat(x.a, x.b),
            lambda x: oracles.mul_mat(x.a, x.b), nmse=NMSE_Q8_DOT)



# --- odd sizes, broadcasting, strided b, half types ---------------------------------------------------------------

_mm = (lambda c, x: c.mul_mat(x.a, x.b), lambda x: oracles.mul_mat(x.a, x.b))
for _ta, _tb in (("f32", "f32"), ("f16", "f32"), ("f16", "f16"), ("bf16", "f32"), ("bf16", "bf16"), ("f32", "bf16")):
    _n = f"{_ta}" if _tb == "f32" else f"{_ta}_{_tb}"
    op_case(f"mul_mat/{_n}/odd", {"a": (_ta, (7, 13)), "b": (_tb, (5, 13))}, *_mm)
    op_case(f"mul_mat/{_n}/broadcast2", {"a": (_ta, (2, 1, 7, 13)), "b": (_tb, (2, 3, 5, 13))}, *_mm)
    op_case(f"mul_mat/{_n}/broadcast23", {"a": (_ta, (1, 3, 5, 11)), "b": (_tb, (2, 6, 3, 11))}, *_mm)
    op_case(f"mul_mat/{_n}/vector_odd", {"a": (_ta, (11, 37)), "b": (_tb, (1, 37))}, *_mm)
    # b's rows permuted out of order (dims 1 and 2 swapped): packed rows, strided matrices
    op_case(f"mul_mat/{_n}/b_permuted", {"a": (_ta, (3, 7, 13)), "b": (_tb, (5, 3, 13))},
            lambda c, x: c.mul_mat(x.a, c.permute(x.b, 0, 2, 1, 3)),
            lambda x: oracles.mul_mat(x.a, x.b.transpose(1, 0, 2)))
    # b a view of 13 of every 16 columns: rows with a gap between them
    op_case(f"mul_mat/{_n}/b_row_gap", {"a": (_ta, (7, 13)), "b": (_tb, (5, 16))},
            lambda c, x: c.mul_mat(x.a, c.view_2d(x.b, 13, 5, x.b.nb[1], 0)),
            lambda x: oracles.mul_mat(x.a, x.b[:, :13]))
# a itself a permuted view (rows packed, matrices strided)
op_case("mul_mat/f32/a_permuted", {"a": ("f32", (7, 2, 13)), "b": ("f32", (2, 5, 13))},
        lambda c, x: c.mul_mat(c.permute(x.a, 0, 2, 1, 3), x.b), lambda x: oracles.mul_mat(x.a.transpose(1, 0, 2), x.b),
        # Vulkan copies a non-contiguous a to F16 before the product (ggml_vk_mul_mat_q_f16): F16 inputs' bound
        backend_bounds={"vulkan": (NMSE_F16, "a non-contiguous F32 a is rounded to F16 (docs/findings.md)")})


def _quantizable_dot_types(leave_out=frozenset()):
    """The quantized types Tensor.set can write that the CPU has a dot product for, but those in
    `leave_out` (not probed: probing IQ2_S runs ggml_quantize_init, about 2 s at import)."""
    out = []
    for t in types.Type:
        if (types.is_quantized(t) and t.name.lower() not in leave_out and types.can_quantize(t) is None
                and lib.ggml_get_type_traits_cpu(int(t)).vec_dot != ffi.NULL):
            out.append(t.name.lower())
    return sorted(out)


def _requantized(t):
    """Values that quantizing again leaves as they are: the case harness hands the oracle the round-tripped
    values and then sets the tensor from them, which quantizes them a second time; for some types (the
    K-quants now and then) that moves them, and the oracle would see other weights than the tensor holds."""
    def gen(rng, shape):
        x = rng.uniform(-1.0, 1.0, size=shape).astype(np.float32)
        for _ in range(10):
            v = types.decode(t, types.encode(t, x), shape)
            if np.array_equal(types.decode(t, types.encode(t, v), shape), v):
                return v
            x = v
        raise ValueError(f"{t}: no values that survive quantization found")
    return gen


# re-quantizing what IQ2_S, IQ3_S and IQ3_XXS dequantize to keeps moving the values (no fixed point):
# under the harness's double quantization their oracle cannot see the tensor's weights
_NO_FIXED_POINT = {"iq2_s", "iq3_s", "iq3_xxs"}

# quantized a: the oracle sees the dequantized weights; the CPU quantizes b to the type's vec_dot type
# (Q8_0 / Q8_1 / Q8_K) first, whose rounding is what NMSE_Q8_DOT bounds
for _q in _quantizable_dot_types(_NO_FIXED_POINT):
    _k = 3 * types.block_size(_q) if types.block_size(_q) < 256 else types.block_size(_q)
    _g = _requantized(_q)
    op_case(f"mul_mat/{_q}/odd", {"a": (_q, (5, _k), _g), "b": ("f32", (3, _k))}, *_mm, nmse=NMSE_Q8_DOT)
    op_case(f"mul_mat/{_q}/broadcast", {"a": (_q, (1, 3, _k), _g), "b": ("f32", (2, 1, 2, _k))}, *_mm, nmse=NMSE_Q8_DOT)
    # mixture of experts: 3 experts of [5, K], 4 tokens each using 2 of them, b one row per token (broadcast)
    op_case(f"mul_mat_id/{_q}", {"a": (_q, (3, 5, _k), _g), "b": ("f32", (4, 1, _k)), "ids": ("i32", (4, 2), integers(0, 3))},
            lambda c, x: c.mul_mat_id(x.a, x.b, x.ids), lambda x: oracles.mul_mat_id(x.a, x.b, x.ids), nmse=NMSE_Q8_DOT)
    op_case(f"out_prod/{_q}", {"a": (_q, (7, types.block_size(_q)), _g), "b": ("f32", (7, 3))},
            lambda c, x: c.out_prod(x.a, x.b), lambda x: oracles.out_prod(x.a, x.b), nmse=1e-6)

# --- mul_mat_id ------------------------------------------------------------------------------------------------------
_mmid = (lambda c, x: c.mul_mat_id(x.a, x.b, x.ids), lambda x: oracles.mul_mat_id(x.a, x.b, x.ids))
for _ta, _tb in (("f32", "f32"), ("f16", "f32"), ("f16", "f16"), ("bf16", "f32"), ("bf16", "bf16")):
    _n = f"{_ta}" if _tb == "f32" else f"{_ta}_{_tb}"
    # b with one row per expert used (n_b == n_used) and with one row for all of them (n_b == 1)
    op_case(f"mul_mat_id/{_n}/rows_per_expert", {"a": (_ta, (5, 7, 13)), "b": (_tb, (3, 2, 13)),
                                                   "ids": ("i32", (3, 2), integers(0, 5))}, *_mmid)
    op_case(f"mul_mat_id/{_n}/one_row", {"a": (_ta, (4, 3, 11)), "b": (_tb, (5, 1, 11)),
                                           "ids": ("i32", (5, 3), integers(0, 4))}, *_mmid)
# every token through every expert once (ids a permutation per token)
op_case("mul_mat_id/f32/all_experts", {"a": ("f32", (3, 5, 16)), "b": ("f32", (7, 3, 16)),
                                       "ids": ("i32", (7, 3), lambda rng, s: np.stack([rng.permutation(3) for _ in range(s[0])]))},
        *_mmid)
# b's tokens strided (a permuted view with packed rows)
op_case("mul_mat_id/f32/b_permuted", {"a": ("f32", (4, 5, 13)), "b": ("f32", (2, 3, 13)), "ids": ("i32", (3, 2), integers(0, 4))},
        lambda c, x: c.mul_mat_id(x.a, c.permute(x.b, 0, 2, 1, 3), x.ids),
        lambda x: oracles.mul_mat_id(x.a, x.b.transpose(1, 0, 2), x.ids))

# --- out_prod -----------------------------------------------------------------------------------------------------------
_op = (lambda c, x: c.out_prod(x.a, x.b), lambda x: oracles.out_prod(x.a, x.b))
op_case("out_prod/f32/odd", {"a": ("f32", (13, 7)), "b": ("f32", (13, 5))}, *_op)
op_case("out_prod/f32/broadcast", {"a": ("f32", (1, 2, 13, 7)), "b": ("f32", (2, 4, 13, 5))}, *_op)
op_case("out_prod/f16", {"a": ("f16", (2, 13, 7)), "b": ("f32", (2, 13, 5))}, *_op)
# b transposed (the backward pass's usual argument): the kernel reads b with any strides
op_case("out_prod/f32/b_transposed", {"a": ("f32", (13, 7)), "b": ("f32", (5, 13))},
        lambda c, x: c.out_prod(x.a, c.transpose(x.b)), lambda x: oracles.out_prod(x.a, x.b.T))
op_case("out_prod/f32/a_permuted", {"a": ("f32", (13, 2, 7)), "b": ("f32", (2, 13, 5))},
        lambda c, x: c.out_prod(c.permute(x.a, 0, 2, 1, 3), x.b), lambda x: oracles.out_prod(x.a.transpose(1, 0, 2), x.b))
op_case("out_prod/f32/vector", {"a": ("f32", (1, 11)), "b": ("f32", (1, 9))}, *_op)

# --- add_id --------------------------------------------------------------------------------------------------------------
_ai = (lambda c, x: c.add_id(x.a, x.b, x.ids), lambda x: oracles.add_id(x.a, x.b, x.ids))
op_case("add_id/f32", {"a": ("f32", (3, 4, 13)), "b": ("f32", (5, 13)), "ids": ("i32", (3, 4), integers(0, 5))}, *_ai)
op_case("add_id/f32/4d", {"a": ("f32", (2, 3, 2, 7)), "b": ("f32", (3, 7)), "ids": ("i32", (3, 2), integers(0, 3))}, *_ai)
op_case("add_id/f32/a_permuted", {"a": ("f32", (4, 3, 13)), "b": ("f32", (5, 13)), "ids": ("i32", (3, 4), integers(0, 5))},
        lambda c, x: c.add_id(c.permute(x.a, 0, 2, 1, 3), x.b, x.ids),
        lambda x: oracles.add_id(x.a.transpose(1, 0, 2), x.b, x.ids))
