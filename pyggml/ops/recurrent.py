"""Recurrent and state-space ops."""

from __future__ import annotations

from pyggml.ops._common import _make_binary, exported

ssm_conv = _make_binary("ssm_conv", ("sx", "c"))
ssm_conv.__doc__ = "ggml_ssm_conv: sx [d_conv-1+n_t, d_inner, n_s], c [d_conv, d_inner] -> [d_inner, n_t, n_s]."


__all__ = exported(globals())
