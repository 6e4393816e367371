"""Matrix products."""

from __future__ import annotations

from pyggml.ops._common import _make_binary, exported

# --- matrix, state space --------------------------------------------------------------------------------
mul_mat = _make_binary("mul_mat")
mul_mat.__doc__ = "ggml_mul_mat: a [K, M, ...], b [K, N, ...] -> F32 [M, N, ...] (a's rows dotted with b's)."


__all__ = exported(globals())
