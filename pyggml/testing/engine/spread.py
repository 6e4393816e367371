"""The reference's own spread: how far the CPU's logits move when its products' rounding is realized otherwise.

A trained model amplifies rounding through its layers (docs/llama.md, "Why the runs differ"): two backends that
each pass every node can still give logits 1e-3 apart, and so do two kernel sets of one CPU (cpu:x64 against
cpu:zen4, KLD 6.1e-3 on a Gemma 3 270M). A fixed bound on the logits fails a backend for the model's sensitivity,
and the reference against itself. So the reference's conversation is decoded once more, the same tokens, with
every product (MUL_MAT, MUL_MAT_ID) given Gaussian noise of the size of its own rounding: per token, an NMSE equal
to that of the activations rounded to the weight's dot type (the CPU's Q8 rounding of a quantized product, F16's
of an F16 one), and F32's unit roundoff squared at least. The NMSE of those logits against the reference's is the
spread; another backend passes when it drifts no further than SPREAD_FACTOR times it (or the fixed bound of its
weights, whichever is larger): docs/llama.md, "The logits' bound".
"""

from __future__ import annotations

from typing import Any

import numpy as np

# how many times the reference's spread another backend's logits may differ by: the spread is one realization of
# the rounding. Measured (docs/llama.md, "The logits' bound"): a trained Gemma 3 270M, spread 5.7e-3, meta:cpu,cpu
# 1.9e-3 and cpu:x64 2.0e-3 from the CPU; a trained SmolLM2 135M, spread 2.5e-3, vulkan0 8.9e-4 and
# meta:vulkan0,vulkan1 8.1e-4: each drift within 0.4 times the spread
SPREAD_FACTOR = 2.0
SEED = 59
UNIT2 = 2.0**-48  # F32's unit roundoff squared: the least a product's rounding is given
# rows of a product's activations its rounding is measured on (evenly spaced; a prompt's thousands cost time and
# tell nothing more)
SAMPLE_ROWS = 16
PRODUCTS = ("MUL_MAT", "MUL_MAT_ID")


def rounding_nmse(weight_type: str, x: np.ndarray) -> float:
    """The NMSE of activations x (rows along the last axis) as a CPU product with a `weight_type` weight reads
    them (its dot type), at least UNIT2."""
    from pyggml.testing.engine.opdb.matmul import dot_type_name, rounded_as_dot_type

    rows = x.reshape(-1, x.shape[-1]).astype(np.float32)
    rows = rows[np.linspace(0, len(rows) - 1, min(len(rows), SAMPLE_ROWS)).astype(int)]
    try:
        rounded = rounded_as_dot_type(rows, dot_type_name(weight_type)).astype(np.float64)
    except ValueError:  # a row length that is not a whole number of the dot type's blocks: no model of it
        return UNIT2
    exact = rows.astype(np.float64)
    den = float(np.einsum("ij,ij->", exact, exact))
    num = float(np.einsum("ij,ij->", rounded - exact, rounded - exact))
    return max(UNIT2, num / den) if den > 0 else UNIT2


class Perturb:
    """A llama.Context observer that adds each product's rounding again, as Gaussian noise, in every step.

    Args:
        seed: the noise's seed.

    Attributes:
        products: the product nodes perturbed.
    """

    def __init__(self, seed: int = SEED) -> None:
        self.rng = np.random.default_rng(seed)
        self.products = 0

    def __call__(self, t: Any, ask: bool) -> bool:
        if t.op.name not in PRODUCTS:
            return False
        if ask:
            return True
        w, x = t.src[0], t.src[1]
        y = t.numpy().astype(np.float64)
        xs = x.numpy() if x.type.name == "F32" else None
        nmse = rounding_nmse(w.type.name, xs) if xs is not None else UNIT2
        rows = y.reshape(-1, y.shape[-1])
        scale = np.sqrt(nmse * np.mean(rows * rows, axis=-1, keepdims=True))
        t.set((rows + scale * self.rng.standard_normal(rows.shape)).reshape(y.shape).astype(np.float32))
        self.products += 1
        return True


def bound(floor: float, spread_nmse: float | None) -> float:
    """The NMSE another backend's logits may differ from the reference's by: the fixed bound of the model's
    weights (`floor`), or SPREAD_FACTOR times the reference's own spread where that is larger."""
    if spread_nmse is None or not np.isfinite(spread_nmse):
        return floor
    return max(floor, SPREAD_FACTOR * spread_nmse)
