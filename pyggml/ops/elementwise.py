"""Element-wise ops: arithmetic, unary activations, scalar maps, generators."""

from __future__ import annotations

import math

from pyggml.ops._common import (
    _ARG_ERRORS,
    _bad_arguments,
    _guarded,
    _make_binary,
    _make_unary,
    _result,
    _scalar,
    exported,
)

# --- element-wise ------------------------------------------------------------------------------------
add = _make_binary("add")
sub = _make_binary("sub")
mul = _make_binary("mul")
div = _make_binary("div")

UNARY_OPS = ("abs", "sgn", "neg", "step", "tanh", "elu", "relu", "sigmoid", "gelu", "gelu_quick", "gelu_erf",
             "silu", "hardswish", "hardsigmoid", "exp", "softplus", "floor", "ceil", "round", "trunc",
             "sqr", "sqrt", "log", "sin", "cos")
for _name in UNARY_OPS:
    globals()[_name] = _make_unary(_name)
del _name


def scale(ctx, a, s: float):
    s = _scalar("scale", "s", s)
    try:
        r = _guarded("scale")(ctx.ptr, a.ptr, s)
    except _ARG_ERRORS as e:
        raise _bad_arguments("scale", e, ctx, a=a) from None
    return _result(ctx, r, "scale", a)


def clamp(ctx, a, min: float, max: float):
    lo, hi = _scalar("clamp", "min", min), _scalar("clamp", "max", max)
    if not lo <= hi:
        raise ValueError(f"clamp: min ({min}) must not exceed max ({max})")
    try:
        r = _guarded("clamp")(ctx.ptr, a.ptr, lo, hi)
    except _ARG_ERRORS as e:
        raise _bad_arguments("clamp", e, ctx, a=a) from None
    return _result(ctx, r, "clamp", a)


def leaky_relu(ctx, a, negative_slope: float = 0.01):
    slope = _scalar("leaky_relu", "negative_slope", negative_slope)
    if not math.isfinite(slope):  # ggml computes x + slope*min(x, 0): inf*0 is NaN for every x >= 0
        raise ValueError(f"leaky_relu: negative_slope must be finite, got {slope}")
    try:
        r = _guarded("leaky_relu")(ctx.ptr, a.ptr, slope, False)
    except _ARG_ERRORS as e:
        raise _bad_arguments("leaky_relu", e, ctx, a=a) from None
    return _result(ctx, r, "leaky_relu", a)


def arange(ctx, start: float, stop: float, step: float = 1.0):
    start, stop, step = (_scalar("arange", n, v) for n, v in (("start", start), ("stop", stop), ("step", step)))
    # ggml sizes the result as ceil((stop - start) / step) elements, unchecked
    if not all(map(math.isfinite, (start, stop, step))):
        raise ValueError(f"arange: start, stop and step must be finite, got {start}, {stop}, {step}")
    if not stop > start:
        raise ValueError(f"arange: stop ({stop}) must be greater than start ({start})")
    if not step > 0:
        raise ValueError(f"arange: step must be positive, got {step}")
    if math.ceil((stop - start) / step) > 2**31:
        raise ValueError(f"arange: {math.ceil((stop - start) / step)} elements is too many")
    try:
        r = _guarded("arange")(ctx.ptr, start, stop, step)
    except _ARG_ERRORS as e:
        raise _bad_arguments("arange", e, ctx) from None
    return _result(ctx, r, "arange")



__all__ = exported(globals())
