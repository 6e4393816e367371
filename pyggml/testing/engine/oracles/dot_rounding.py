"""The activations as a CPU product reads them: ggml-cpu's mul_mat (and mul_mat_id, flash attention's K·Q)
converts F32 activations to the weight type's `vec_dot_type` before the dot products (Q8_0 for Q4_0/Q5_0/Q8_0
weights, Q8_1 for Q4_1/Q5_1, Q8_K for the K- and IQ-quants, F16 for F16, BF16 for BF16). An oracle that rounds
its b the same way, in NumPy, then multiplies in float64, is left with the F32 accumulation order only, so a
quantized product is judged at a tight bound (pyggml.testing.engine.opdb.matmul: NMSE_CPU_DOT).

Written from ggml's reference quantizers (quantize_row_q8_0_ref, quantize_row_q8_1_ref,
quantize_row_q8_K_ref, ggml_fp32_to_bf16), never by calling them.
"""

from __future__ import annotations

import functools

import numpy as np
from numpy.typing import ArrayLike


@functools.lru_cache(maxsize=1)
def q8_scheme() -> str:
    """How this process's CPU converts activations to Q8_0 / Q8_1 (the scale's inverse, and the rounding of a tie):

    - "avx": x86 with AVX (ggml-cpu's arch/x86 quantize_row_q8_0 / q8_1): 127 / max|x|, ties to even;
    - "reference": x86 without AVX, ggml's x64 and sse42 CPU variants (quantize_row_q8_0_ref / q8_1_ref):
      1 / (max|x| / 127), roundf's ties away from zero;
    - "neon": ARM (arch/arm): 1 / (max|x| / 127), ties to even.

    The two inverses differ in their last bit for many blocks, and a value within that of a half rounds the other
    way: one activation a quantum off, thousands of rounding units in an element of the product (the x64 variant's
    Q5_0 products of a Gemma 3 270M, judged with AVX's scheme, failed their element bounds)."""
    import platform

    from pyggml import cpu_variants

    if platform.machine().lower() in ("aarch64", "arm64"):
        return "neon"
    variant = cpu_variants.in_use()
    if variant is not None and "AVX" not in variant.features:
        return "reference"
    return "avx"


def _q8_quantize(b: np.ndarray, block: int) -> tuple[np.ndarray, np.ndarray]:
    """b's rows of whole blocks as int8 per block of `block` values: (q, d), d = max|x| / 127 as F32 and q = x times
    d's inverse, rounded, both as this CPU computes them (`q8_scheme`)."""
    x = b.reshape(-1, block).astype(np.float32)
    amax = np.abs(x).max(axis=1, keepdims=True)
    d = amax / np.float32(127)
    scheme = q8_scheme()
    if scheme == "avx":
        inv = np.divide(np.float32(127), amax, out=np.zeros_like(amax), where=amax != 0)
    else:
        inv = np.divide(np.float32(1), d, out=np.zeros_like(d), where=d != 0)
    v = x * inv
    if scheme == "reference":  # roundf: ties away from zero (in float64, where v + 0.5 is exact)
        q = np.copysign(np.floor(np.abs(v.astype(np.float64)) + 0.5), v)
    else:
        q = np.rint(v)
    return np.clip(q, -127, 127), d


def _q8_blocks(b: np.ndarray, block: int) -> np.ndarray:
    """b quantized to Q8_0 / Q8_1 and decoded: q times d as the format stores it (F16)."""
    q, d = _q8_quantize(b, block)
    return (q * d.astype(np.float16).astype(np.float32)).reshape(b.shape)


def _q8_k_blocks(b: np.ndarray) -> np.ndarray:
    """Q8_K (quantize_row_q8_K_ref): per 256 values, iscale = -127 / the value of largest magnitude (signed),
    q = nearest(iscale * x) clamped to 127, d = 1 / iscale kept as F32."""
    x = b.reshape(-1, 256).astype(np.float32)
    at = np.abs(x).argmax(axis=1)[:, None]
    peak = np.take_along_axis(x, at, axis=1)
    iscale = np.divide(np.float32(-127), peak, out=np.zeros_like(peak), where=peak != 0)
    q = np.minimum(np.rint(iscale * x), 127)  # ggml's nearest_int: round half to even
    d = np.divide(np.float32(1), iscale, out=np.zeros_like(iscale), where=iscale != 0)
    return (q * d).reshape(b.shape)


# the block formats a CPU product converts F32 activations to, by the weight type's `vec_dot_type`
_DOT_ROUNDING = {
    "Q8_0": lambda b: _q8_blocks(b, 32),
    "Q8_1": lambda b: _q8_blocks(b, 32),
    "Q8_K": _q8_k_blocks,
    "F16": lambda b: b.astype(np.float16).astype(np.float32),
    "BF16": lambda b: _to_bf16(b),
}


def _to_bf16(b: np.ndarray) -> np.ndarray:
    """F32 -> BF16 -> F32 as ggml_fp32_to_bf16 rounds: to nearest even (NaN kept)."""
    u = np.ascontiguousarray(b, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    out = (rounded & 0xFFFFFFFF).astype(np.uint32).view(np.float32)
    return np.where(np.isnan(b), b, out).reshape(np.shape(b))


def as_dot_type(b: ArrayLike, dot_type: str) -> np.ndarray:
    """b's values as a CPU product with a weight of `vec_dot_type` dot_type reads them: ggml converts F32
    activations to that type first (ggml-cpu's mul_mat: `from_float` into wdata), row by row along K.

    Args:
        b: the activations, F32, K (the last NumPy dimension) a multiple of the format's block.
        dot_type: the weight type's vec_dot_type name (Q8_0, Q8_1, Q8_K, F16, BF16; F32 or another: b as is).

    Returns:
        b rounded as the product sees it, float32.

    Raises:
        ValueError: K is not a whole number of blocks of the format.
    """
    arr = np.asarray(b, dtype=np.float32)
    round_ = _DOT_ROUNDING.get(dot_type.upper())
    if round_ is None:
        return arr
    block = {"Q8_0": 32, "Q8_1": 32, "Q8_K": 256}.get(dot_type.upper(), 1)
    if arr.shape[-1] % block:
        raise ValueError(f"K = {arr.shape[-1]} is not a whole number of {dot_type} blocks of {block}")
    return round_(arr)


def q8_1_sum_error(b: ArrayLike) -> np.ndarray:
    """What a Q4_1 / Q5_1 product adds beyond b rounded to Q8_1: per block of 32 values, Q8_1 keeps the block's
    sum s = d * sum(q) as F16, and the kernel adds the weight block's minimum m times that s (sum_k a_k b_k =
    d_a d_b sum(q_a q_b) + m_a s_b). s's own F16 rounding (coarse where activations are small: F16 subnormals
    below 6.1e-5) is the difference between s and d_F16 * sum(q), which as_dot_type already gives.

    Args:
        b: the activations, F32, K a multiple of 32.

    Returns:
        [..., K / 32]: s as stored, minus the sum of the block's rounded values, float64.
    """
    arr = np.asarray(b, dtype=np.float32)
    if arr.shape[-1] % 32:
        raise ValueError(f"K = {arr.shape[-1]} is not a whole number of Q8_1 blocks of 32")
    q, d = _q8_quantize(arr, 32)
    total = q.sum(axis=1, keepdims=True)
    stored = (d * total).astype(np.float16).astype(np.float64)
    rounded = d.astype(np.float16).astype(np.float64) * total
    return (stored - rounded).reshape(*arr.shape[:-1], arr.shape[-1] // 32)


def vulkan_f16acc(a: ArrayLike, b: ArrayLike) -> np.ndarray:
    """A product as ggml-vulkan's `mul_mm.comp` computes it with its f16acc pipelines (a quantized or F16 weight,
    more than `mul_mat_vec_max_cols` = 8 columns, a device with fp16 and no cooperative matrices, default
    precision: `ggml_vk_get_mul_mat_mat_f16acc`): the weight dequantized to F16 and the activations converted to
    F16 (its shared-memory tiles), each product rounded to F16 and added to an F16 accumulator, along K in pairs
    (k + 1 first, then k: `dot_product` = fma(a.x, b.x, fma(a.y, b.y, acc)), which Mesa's lavapipe evaluates as
    a multiply and an add, each rounded). Measured bitwise on lavapipe (docs/llama.md, "Why the runs differ").

    Args:
        a: the weight's values, (M, K), float32.
        b: the activations, (N, K), float32.

    Returns:
        (N, M) float32.
    """
    wa = np.asarray(a, np.float32).astype(np.float16)
    xb = np.asarray(b, np.float32).astype(np.float16)
    k = wa.shape[-1]
    acc = np.zeros((xb.shape[0], wa.shape[0]), np.float16)
    order = [j for pair in range(0, k, 2) for j in (pair + 1, pair) if j < k]
    for j in order:  # numpy's float16 arithmetic: exact in float32, then rounded to float16
        acc = acc + xb[:, j, None] * wa[None, :, j]
    return acc.astype(np.float32)
