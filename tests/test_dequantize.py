"""pyggml's own decoders (native/dequantize.c, through pyggml.types.decode) give ggml's values bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from pyggml import types
from pyggml._native import ffi, lib

# F16 scales a model never holds but a file may: zeros of both signs, subnormals, the largest, infinities, NaN
SPECIAL_SCALES = np.array([0.0, -0.0, 6e-8, -3e-6, 6.1e-5, 65504.0, -65504.0, np.inf, -np.inf, np.nan], np.float16)


def _ggml_to_float(t: types.Type, raw: np.ndarray, n: int) -> np.ndarray:
    out = np.empty(n, np.float32)
    lib.ggml_get_type_traits(t).to_float(ffi.from_buffer(raw), ffi.from_buffer("float[]", out), n)
    return out


def _same(ours: np.ndarray, theirs: np.ndarray) -> None:
    nan = np.isnan(theirs)
    assert np.array_equal(np.isnan(ours), nan)
    assert np.array_equal(ours[~nan].view(np.uint32), theirs[~nan].view(np.uint32))  # -0.0 and 0.0 told apart


@pytest.mark.parametrize("n_blocks", [1, 7, 2 * types.DECODE_CHUNK // 256 + 5])  # the last on several threads
def test_q6_k_decodes_as_ggml_does_bit_for_bit(n_blocks: int) -> None:
    """Random bytes (every 6-bit value and int8 scale) under random and special F16 scales (block: ql[128],
    qh[64], scales[16], d)."""
    rng = np.random.default_rng(n_blocks)
    blocks = rng.integers(0, 256, (n_blocks, 210), dtype=np.uint8)
    d = rng.normal(0, 0.01, n_blocks).astype(np.float16)
    d[: min(n_blocks, SPECIAL_SCALES.size)] = SPECIAL_SCALES[:n_blocks]
    blocks[:, 208:] = d.view(np.uint8).reshape(-1, 2)
    raw = blocks.ravel()
    ours = types.decode(types.Type.Q6_K, raw, (n_blocks, 256))
    _same(ours.ravel(), _ggml_to_float(types.Type.Q6_K, raw, n_blocks * 256))


def test_q6_k_values_that_are_not_whole_blocks_are_refused_by_the_decoder() -> None:
    """The C decoder writes nothing and says so for a count that is not whole blocks (types.decode refuses such a
    count before any decoder runs)."""
    raw, out = np.zeros(210, np.uint8), np.full(300, 7, np.float32)
    assert lib.pyggml_dequantize_q6_k(ffi.from_buffer(raw), ffi.from_buffer("float[]", out), 300) == 0
    assert (out == 7).all()
    assert lib.pyggml_dequantize_q6_k(ffi.from_buffer(raw), ffi.from_buffer("float[]", out), 256) == 1


@pytest.mark.parametrize("t", [types.Type.Q6_K, types.Type.Q4_0, types.Type.Q4_K])
def test_bytes_that_do_not_hold_the_values_asked_for_are_refused(t: types.Type) -> None:
    """`types.decode` of fewer bytes than the values take read past them (into whatever memory followed), and a count
    of values that is not whole blocks left the last values unwritten: both came back as values, silently."""
    block, size = types.block_size(t), types.type_size(t)
    with pytest.raises(ValueError, match="bytes"):
        types.decode(t, np.zeros(size - 1, np.uint8), (block,))
    with pytest.raises(ValueError, match="not whole blocks"):
        types.decode(t, np.zeros(2 * size, np.uint8), (block + 1,))
    assert types.decode(t, np.zeros(size, np.uint8), (1, block)).shape == (1, block)
