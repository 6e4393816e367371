"""Backward ops of every family (`<forward>_back`), losses and optimizer steps.

ggml.c checks little for most backward ops: it sizes the result from one argument and leaves the
kernels to read the others by that size, so shapes the kernels rely on are checked here.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from pyggml._args import integer
from pyggml._native import ffi
from pyggml.arena import Arena
from pyggml.ops._common import (
    _ARG_ERRORS,
    _NULL,
    _bad_arguments,
    _guarded,
    _result,
    _scalar,
)
from pyggml.ops.attention import _twin, rope_ext
from pyggml.ops.convolution import _ints, _pool_op
from pyggml.ops.declared import declared
from pyggml.tensor import Tensor

if TYPE_CHECKING:
    from pyggml.context import Context


def _tensors(op: str, ctx, **tensors) -> None:
    """TypeError naming the first argument that is not a Tensor (or a ctx that is not a Context)."""
    if not isinstance(ctx, Arena) or not all(isinstance(t, Tensor) for t in tensors.values()):
        raise _bad_arguments(op, TypeError("bad argument"), ctx, **tensors)


def _same_shape(op: str, what: str, x: Tensor, y: Tensor) -> None:
    if x.ne != y.ne:
        raise ValueError(f"{op}: {what} must have the same shape, got {list(x.ne)} and {list(y.ne)}")


def _call(op: str, ctx, tensors: dict, *scalars) -> Tensor:
    """ggml_<op>(ctx, *tensors, *scalars) through its guard; None tensors pass as NULL."""
    try:
        r = _guarded(op)(ctx.ptr, *(_NULL if t is None else t.ptr for t in tensors.values()), *scalars)
    except _ARG_ERRORS as e:
        raise _bad_arguments(op, e, ctx, **{k: t for k, t in tensors.items() if t is not None}) from None
    return _result(ctx, r, op, *(t for t in tensors.values() if t is not None))


def _finite(op: str, name: str, value, lo: float | None = None) -> float:
    v = _scalar(op, name, value)
    if not math.isfinite(v) or (lo is not None and v < lo):
        raise ValueError(f"{op}: {name} must be finite{'' if lo is None else f' and >= {lo}'}, got {v}")
    return v


# --- checks of the declared wrappers (pyggml.ops.declared): each sees the converted arguments by name -----------
def _like(op: str, what: str, **finite: float | None):
    """The check of a backward op whose kernels walk a's rows in b's: its float arguments finite (and >= their
    bound, by name) and a and b of one shape (ggml.c does not check; the kernels assert it or read past one)."""

    def check(x) -> None:
        for name, lo in finite.items():
            _finite(op, name, getattr(x, name), lo)
        if isinstance(x.a, Tensor) and isinstance(x.b, Tensor):  # else the call names the bad argument
            _same_shape(op, what, x.a, x.b)

    return check


# --- backward of element-wise, norm and movement ops ----------------------------------------------------
silu_back = declared(
    "silu_back",
    """Gradient of silu: a = gradient of silu's output, b = silu's input x; a * silu'(x).""",
    check=_like("silu_back", "a (gradient) and b (x)"),
)
rms_norm_back = declared(
    "rms_norm_back",
    """Gradient of rms_norm(b, eps): a = gradient of rms_norm's output, b = its input x.""",
    defaults={"eps": 1e-6},
    # as rms_norm: a negative or NaN eps is a silent NaN
    check=_like("rms_norm_back", "a (gradient) and b (x)", eps=0.0),
)
repeat_back = declared(
    "repeat_back",
    """Gradient of repeat: a (of a repeat's shape) summed over the repeats into b's shape.""",
)


def _one_index_per_row(x) -> None:
    if isinstance(x.a, Tensor) and isinstance(x.b, Tensor) and x.b.ne[0] != x.a.ne[1]:  # a row of a per index
        raise ValueError(f"get_rows_back: b must hold one index per row of a ({x.a.ne[1]}), got {x.b.ne[0]}")


get_rows_back = declared(
    "get_rows_back",
    """Gradient of get_rows(c, b): a [ne0, n] = gradient of its output, b I32 [n] the row indices,
    c the matrix get_rows read (only its shape); F32 result of c's shape, a's rows added at rows b.""",
    check=_one_index_per_row,
)
# a non-finite scale is a NaN gradient
_soft_max_like = _like("soft_max_ext_back", "a (gradient) and b (softmax output)", scale=None, max_bias=0.0)


def _soft_max_back(x) -> None:
    _soft_max_like(x)
    # ggml's allocator may compute this op in place in any source of its layout, b included, but the
    # CPU kernel copies a into the result before it multiplies by b: in b's memory that reads a for b.
    # An output is never reused, so b keeps its own memory
    if isinstance(x.b, Tensor):
        x.b.set_output()


soft_max_ext_back = declared(
    "soft_max_ext_back",
    """Gradient of soft_max_ext(x, mask, scale, max_bias) with respect to x: a = gradient of its
    output, b = its output y; scale * y * (a - dot(y, a)) per row.""",
    defaults={"scale": 1.0, "max_bias": 0.0},
    check=_soft_max_back,
)


# rope_ext's code as the wrapper of ggml_rope_ext_back (ggml.h declares them alike): its signature, names (pos,
# freq_factors, not ggml.h's b, c) and checks
rope_ext_back = _twin(
    rope_ext,
    "rope_ext_back",
    """ggml_rope_ext_back: the gradient of rope_ext with the same arguments: the inverse rotation (by
    -theta) of a, the gradient of rope_ext's output, scaled by attn_factor.

    a: the output's gradient, rope_ext's shape ([head_dim, n_head, n_tokens, ne3] in ggml ne order).
    pos: I32 ne [n_tokens], the positions rope_ext used.
    freq_factors: optional F32 per-pair divisors of theta, or None.
    n_dims: the rotated dims; None (the default) the whole head (a.ne[0]). Even.
    mode: 0 (normal) or 2 (neox).
    n_ctx_orig, freq_base, freq_scale, ext_factor, attn_factor, beta_fast, beta_slow: as rope_ext.
    Result: a's shape and type. Precision: as rope_ext (F32 angles).
    """,
)


def _conv_out(n: int, k: int, s: int, p: int, d: int) -> int:
    return (n + 2 * p - d * (k - 1) - 1) // s + 1


# hand-written: ggml_im2col_back takes ne as an int64_t array
def im2col_back(
    ctx: Context,
    a: Tensor,
    b: Tensor,
    ne: list[int] | tuple[int, ...],
    s0: int,
    s1: int,
    p0: int,
    p1: int,
    d0: int,
    d1: int,
    is_2D: bool = True,
) -> Tensor:
    """Gradient of im2col(b, x, s0, s1, p0, p1, d0, d1, is_2D) with respect to x (of shape `ne`).

    a = gradient of im2col's output: [IC*KH*KW, OW, OH, N] (2D) or [IC*KW, OW, N] (1D); b = the
    kernel, only its shape read (KW = ne0, KH = ne1). ggml.h's comment names a the kernel and b the
    gradient; ggml's own backward pass and the CPU kernel use them as here."""
    _tensors("im2col_back", ctx, a=a, b=b)
    if isinstance(is_2D, bool) is False:
        raise TypeError(f"im2col_back: is_2D must be a bool, got {type(is_2D).__name__}")
    if not isinstance(ne, (list, tuple)) or not 1 <= len(ne) <= 4:
        raise TypeError(f"im2col_back: ne must be a list of 1 to 4 integers, got {ne!r}")
    shape = [integer("im2col_back: ne", n) for n in ne] + [1] * (4 - len(ne))
    if min(shape) <= 0:
        raise ValueError(f"im2col_back: ne must be positive, got {shape}")
    s0, s1, p0, p1, d0, d1 = (
        integer(f"im2col_back: {n}", v, -(2**31), 2**31 - 1)
        for n, v in (("s0", s0), ("s1", s1), ("p0", p0), ("p1", p1), ("d0", d0), ("d1", d1))
    )
    # ggml.c checks none of this; the kernel divides by the strides and reads a by the sizes below
    if min(s0, d0) <= 0 or p0 < 0 or (is_2D and (min(s1, d1) <= 0 or p1 < 0)):
        raise ValueError(
            f"im2col_back: strides and dilations must be positive and paddings >= 0, got "
            f"s=({s0}, {s1}) p=({p0}, {p1}) d=({d0}, {d1})"
        )
    iw, ih, ic, n = shape if is_2D else (shape[0], 1, shape[1], shape[2])
    if not is_2D and shape[3] != 1:
        raise ValueError(f"im2col_back: a 1D input has 3 dims [IW, IC, N], got ne {shape}")
    kw, kh = b.ne[0], (b.ne[1] if is_2D else 1)
    ow = _conv_out(iw, kw, s0, p0, d0)
    oh = _conv_out(ih, kh, s1, p1, d1) if is_2D else 1
    want = [ic * kh * kw, ow, oh, n] if is_2D else [ic * kw, ow, n, 1]
    if min(ow, oh) <= 0 or list(a.ne) != want:
        raise ValueError(
            f"im2col_back: a must be the gradient of im2col's output for input {shape} and kernel "
            f"{list(b.ne)}: shape {want}, got {list(a.ne)}"
        )
    return _call("im2col_back", ctx, {"a": a, "b": b}, ffi.new("int64_t[4]", shape), s0, s1, p0, p1, d0, d1, is_2D)


def _pool_2d_back(x) -> None:
    _pool_op("pool_2d_back", x.op)  # the kernel computes MAX or AVG only (and aborts on COUNT)
    k0, k1, s0, s1 = _ints("pool_2d_back", 1, k0=x.k0, k1=x.k1, s0=x.s0, s1=x.s1)
    p = [_finite("pool_2d_back", n, v, 0.0) for n, v in (("p0", x.p0), ("p1", x.p1))]
    if any(v != int(v) or v >= 2**31 for v in p):  # ggml stores the paddings as int32
        raise ValueError(f"pool_2d_back: p0 and p1 must be whole numbers (ggml stores them as integers), got {p}")
    if not (isinstance(x.a, Tensor) and isinstance(x.af, Tensor)):
        return  # the call names the bad argument
    # ggml.c does not relate a to af; the kernel reads a as one plane of pool_2d's output per plane of af
    a, af = x.a, x.af
    want = [int((af.ne[0] + 2 * p[0] - k0) / s0) + 1, int((af.ne[1] + 2 * p[1] - k1) / s1) + 1, af.ne[2], af.ne[3]]
    if min(want) <= 0 or list(a.ne) != want:
        raise ValueError(
            f"pool_2d_back: a must have the shape of pool_2d's output for af {list(af.ne)}: {want}, got {list(a.ne)}"
        )


pool_2d_back = declared(
    "pool_2d_back",
    """Gradient of pool_2d(af, op, k0, k1, s0, s1, p0, p1) with respect to af: a = gradient of its output.
    op: GGML_OP_POOL_MAX (0) or GGML_OP_POOL_AVG (1). F32 result of af's shape.""",
    defaults={"p0": 0.0, "p1": 0.0},
    check=_pool_2d_back,
)


# --- losses ---------------------------------------------------------------------------------------------
cross_entropy_loss = declared(
    "cross_entropy_loss",
    """Mean over rows of -sum(b * log_softmax(a)) along ne0: a logits, b labels (target distributions).""",
)
cross_entropy_loss_back = declared(
    "cross_entropy_loss_back",
    """Gradient of cross_entropy_loss(b, c) with respect to the logits b: a = the loss's gradient
    (a scalar).""",
)


# --- optimizer steps ------------------------------------------------------------------------------------
opt_step_adamw = declared(
    "opt_step_adamw",
    """ggml_opt_step_adamw: one AdamW step on the parameter a, in place (decoupled weight decay):
    m = beta1*m + (1-beta1)*grad, v = beta2*v + (1-beta2)*grad**2,
    a = a*(1 - alpha*wd) - alpha * (m*beta1h) / (sqrt(v*beta2h) + eps).

    a: the parameter (flagged with ggml_set_param), F32; the result is a view of it, which holds the
       updated values after compute.
    grad: the gradient, a's shape. m, v: the first and second moments, a's shape, updated in place.
    adamw_params: F32 [7]: alpha, beta1, beta2, eps, wd, beta1h = 1/(1 - beta1**t),
       beta2h = 1/(1 - beta2**t) at step t.
    Precision: F32.
    """,
)
opt_step_sgd = declared(
    "opt_step_sgd",
    """One SGD step with weight decay on the parameter a (flagged with ggml_set_param), in place:
    a = a * (1 - alpha * wd) - alpha * grad, sgd_params F32 [alpha, wd]; the result is a view of a.""",
)


__all__ = [  # generated by tools/gen_methods.py
    "cross_entropy_loss",
    "cross_entropy_loss_back",
    "get_rows_back",
    "im2col_back",
    "opt_step_adamw",
    "opt_step_sgd",
    "pool_2d_back",
    "repeat_back",
    "rms_norm_back",
    "rope_ext_back",
    "silu_back",
    "soft_max_ext_back",
]
