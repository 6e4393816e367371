"""Attention's building blocks: soft_max, masks, rotary position embedding."""

from __future__ import annotations

from pyggml._args import integer
from pyggml._native import lib
from pyggml.ops._common import (
    _new_tensor,
    _ARG_ERRORS,
    _NULL,
    _bad_arguments,
    _failed,
    _guarded,
    _make_unary,
    _result,
    _scalar,
    exported,
)
from pyggml.tensor import Tensor

soft_max = _make_unary("soft_max")
_soft_max_ext = _guarded("soft_max_ext")


def soft_max_ext(ctx, a, mask=None, scale: float = 1.0, max_bias: float = 0.0):
    if type(scale) is not float or type(max_bias) is not float:
        scale, max_bias = _scalar("soft_max_ext", "scale", scale), _scalar("soft_max_ext", "max_bias", max_bias)
    if not max_bias >= 0:
        raise ValueError(f"soft_max_ext: max_bias must be >= 0, got {max_bias}")
    if max_bias > 0 and mask is None:
        raise ValueError("soft_max_ext: max_bias > 0 (ALiBi) needs a mask")
    try:
        r = _soft_max_ext(ctx.ptr, a.ptr, _NULL if mask is None else mask.ptr, scale, max_bias)
    except _ARG_ERRORS as e:
        raise _bad_arguments("soft_max_ext", e, ctx, a=a, **({} if mask is None else {"mask": mask})) from None
    if not r:
        raise _failed("soft_max_ext")
    if a.ctx is not ctx:
        ctx.adopt(a)
    if mask is not None and mask.ctx is not ctx:
        ctx.adopt(mask)
    t = _new_tensor(Tensor)
    t.ptr, t.ctx = r, ctx
    return t


def diag_mask_inf(ctx, a, n_past: int):
    n_past = integer("diag_mask_inf: n_past", n_past)
    if n_past < 0:
        raise ValueError(f"diag_mask_inf: n_past must be >= 0, got {n_past}")
    try:
        r = _guarded("diag_mask_inf")(ctx.ptr, a.ptr, n_past)
    except _ARG_ERRORS as e:
        raise _bad_arguments("diag_mask_inf", e, ctx, a=a) from None
    return _result(ctx, r, "diag_mask_inf", a)


_rope_ext = _guarded("rope_ext")
_ROPE_MODES = (lib.GGML_ROPE_TYPE_NORMAL, lib.GGML_ROPE_TYPE_NEOX)


def rope_ext(ctx, a, pos, freq_factors=None, n_dims: int = 0, mode: int = 0, n_ctx_orig: int = 0,
             freq_base: float = 10000.0, freq_scale: float = 1.0, ext_factor: float = 0.0,
             attn_factor: float = 1.0, beta_fast: float = 32.0, beta_slow: float = 1.0):
    # multi-section modes read sections this wrapper cannot pass (ggml_rope_multi); the kernels
    # would read garbage, so only the two plain modes
    if mode not in _ROPE_MODES:
        raise ValueError(f"rope_ext: mode must be 0 (normal) or 2 (neox), got {mode} "
                         "(multi-section modes need ggml_rope_multi)")
    if type(n_dims) is not int:
        n_dims = integer("rope_ext: n_dims", n_dims)
    if not (0 < n_dims and n_dims % 2 == 0):  # ggml asserts n_dims <= ne[0] only in the kernels
        raise ValueError(f"rope_ext: n_dims ({n_dims}) must be even and positive")
    try:
        r = _rope_ext(ctx.ptr, a.ptr, pos.ptr, _NULL if freq_factors is None else freq_factors.ptr,
                      n_dims, mode, n_ctx_orig, freq_base, freq_scale, ext_factor, attn_factor, beta_fast, beta_slow)
    except _ARG_ERRORS as e:
        extra = {} if freq_factors is None else {"freq_factors": freq_factors}
        raise _bad_arguments("rope_ext", e, ctx, a=a, pos=pos, **extra) from None
    if not r:
        raise _failed("rope_ext")
    if a.ctx is not ctx:
        ctx.adopt(a)
    if pos.ctx is not ctx:
        ctx.adopt(pos)
    if freq_factors is not None and freq_factors.ctx is not ctx:
        ctx.adopt(freq_factors)
    t = _new_tensor(Tensor)
    t.ptr, t.ctx = r, ctx
    return t



__all__ = exported(globals())
