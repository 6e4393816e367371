"""Attention's building blocks: soft_max, masks, rotary position embedding, flash attention, SAM's
windows and relative positions, DeepSeek's lightning indexer and hyper-connections."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from types import FunctionType, SimpleNamespace
from typing import TYPE_CHECKING, NamedTuple, TypeVar, cast

from pyggml._args import integer
from pyggml._native import ffi, lib, require_after
from pyggml.ops._common import (
    _ARG_ERRORS,
    _NULL,
    UnaryWrapper,
    _bad_arguments,
    _failed,
    _guarded,
    _new_tensor,
    _result,
    _scalar,
)
from pyggml.ops.declared import Check, all_of, declared
from pyggml.ops.elementwise import _finite, _n_past
from pyggml.tensor import Tensor

if TYPE_CHECKING:
    from pyggml.context import Context

# --- checks of the declared wrappers (check=), made from the names of the arguments they read -------------------
# (elementwise's _finite and _n_past too)


def _at_least(op: str, lo: int, *names: str) -> Check:
    """The check of numbers >= lo, by name (one message naming them all)."""
    what = " and ".join(filter(None, (", ".join(names[:-1]), names[-1])))

    def check(x: SimpleNamespace) -> None:
        values = [getattr(x, n) for n in names]
        if min(values) < lo:
            raise ValueError(f"{op}: {what} must be >= {lo}, got {', '.join(map(str, values))}")

    return check


soft_max: UnaryWrapper = declared(
    "soft_max",
    """ggml_soft_max: softmax over each row: np.exp(a - max) / sum, along ne0 (NumPy's last axis).

a: any ne (NumPy shape reversed), F32, contiguous rows.
Result: a's shape, F32.
Precision: F32 exponentials with the row sum in double on the CPU (within NMSE 1e-7 of float64).""",
)
_soft_max_ext = _guarded("soft_max_ext")


# hand-written: a hot path (float scalars pass unconverted, no per-call check object)
def soft_max_ext(
    ctx: Context, a: Tensor, mask: Tensor | None = None, scale: float = 1.0, max_bias: float = 0.0
) -> Tensor:
    """ggml_soft_max_ext: softmax over each row (ne0, NumPy's last axis) of a*scale + slope*mask.

    a: ne [n_kv, n_rows, n_head, ne3] (NumPy shape reversed), F32, contiguous rows.
    mask: None, or F16/F32 ne [n_kv, >= n_rows, m2, m3], added to a*scale row by row (row i of a takes
        mask row i); m2 must divide n_head and m3 divide ne3 (repeated over them). -inf masks out.
    scale: multiplies a first (e.g. 1/sqrt(head_dim)).
    max_bias: ALiBi: 0 for none; > 0 gives head h (a's dim 2) its slope m0**(h+1) (m0 =
        2**(-max_bias/n_head_log2), the second set of heads m1**(2(h - n_head_log2) + 1)); needs a mask.
    Result: a's shape, F32.
    Precision: F32 exponentials with the row sum in double on the CPU (within NMSE 1e-7); an F16 mask is
    rounded to F16 when it is made.
    """
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


diag_mask_inf = declared(
    "diag_mask_inf",
    """ggml_diag_mask_inf: a causal mask: element (row i1, column i0) set to -inf where
    i0 > n_past + i1, the rest copied (softmax then gives those 0).

    a: ne [n_kv, n_rows, ne2, ne3] (NumPy shape reversed), F32, contiguous.
    n_past: how many columns every row sees beyond the diagonal (tokens already in the cache), >= 0.
    Result: a's shape and type. Exact.
    """,
    check=_n_past("diag_mask_inf"),
)


# --- rope: YaRN's scalars, and the plain modes (rope_ext; rope_ext_back in training) ----------------------------
class Yarn(NamedTuple):
    """The YaRN scalars (context extension) every rope takes after its mode, in ggml's order, with their defaults:
    a rope that extends nothing, with llama's theta base. The wrappers' defaults and the oracles' are these;
    rope_ext's docstring says what each scalar does."""

    n_ctx_orig: int = 0
    freq_base: float = 10000.0
    freq_scale: float = 1.0
    ext_factor: float = 0.0
    attn_factor: float = 1.0
    beta_fast: float = 32.0
    beta_slow: float = 1.0


_NO_YARN = Yarn()  # the wrappers' defaults
_ROPE_MODES = (lib.GGML_ROPE_TYPE_NORMAL, lib.GGML_ROPE_TYPE_NEOX)
# what rope_ext's code calls and names; rope_ext_back, the same code (_twin), has its own
_ROPE_OP, _ROPE_FN = "rope_ext", _guarded("rope_ext")


# hand-written: a hot path (the scalars go to cffi unconverted; a refused one is named after); n_dims=None is
# computed from a; pos, freq_factors keep their names (ggml.h's b, c). Its code is rope_ext_back's too (_twin)
def rope_ext(
    ctx: Context,
    a: Tensor,
    pos: Tensor,
    freq_factors: Tensor | None = None,
    n_dims: int | None = None,
    mode: int = 0,
    n_ctx_orig: int = _NO_YARN.n_ctx_orig,
    freq_base: float = _NO_YARN.freq_base,
    freq_scale: float = _NO_YARN.freq_scale,
    ext_factor: float = _NO_YARN.ext_factor,
    attn_factor: float = _NO_YARN.attn_factor,
    beta_fast: float = _NO_YARN.beta_fast,
    beta_slow: float = _NO_YARN.beta_slow,
) -> Tensor:
    """ggml_rope_ext: rotary position embedding (RoPE, with YaRN's context extension).

    Every row of a (one head of one token) has its first n_dims elements rotated in pairs: pair
    k (k < n_dims/2) turns by the angle theta_k = pos[token] * freq_base**(-2k/n_dims), divided by
    freq_factors[k] when given, times freq_scale (YaRN-corrected when ext_factor != 0); the elements
    past n_dims pass unchanged. Result: a's shape and type, each rotated value times attn_factor.

    a: [head_dim, n_head, n_tokens, ne3] in ggml's ne order (NumPy shape (ne3, n_tokens, n_head,
       head_dim)), F32 or F16, contiguous rows.
    pos: I32 [n_tokens] (ne[0] == a.ne[2]), each token's position.
    freq_factors: optional F32 [>= n_dims/2], per-pair divisors of theta (Phi-3 long rope), or None.
    n_dims: how many leading elements of each row rotate, even, at most head_dim; None (the default)
       rotates the whole head (head_dim = a.ne[0]), as llama.cpp does unless a model's n_rot says less.
    mode: 0 (GGML_ROPE_TYPE_NORMAL, llama) pairs elements (2k, 2k+1); 2 (GGML_ROPE_TYPE_NEOX, GPT-NeoX)
       pairs (k, k + n_dims/2). The multi-section modes are rope_multi's.
    n_ctx_orig: the model's training context, which YaRN's correction range is computed from.
    freq_base: theta's base (10000 for llama). freq_scale: 1 / the context-extension factor (1: none).
    ext_factor: YaRN's mix of extrapolated and interpolated angles (0: off). attn_factor: YaRN's
       magnitude scale of the result (1: none). beta_fast, beta_slow: YaRN's correction dims (used only
       when ext_factor != 0).

    Precision: the angles are computed in F32 on every backend (the CPU caches cos/sin per row; the
    GPU shaders compute them per element), so large positions differ from a float64 NumPy reference by
    a few F32 ulps of the angle; an F16 a is rotated in F32 and rounded to F16 (11 bits) once. The suite's
    bounds: pyggml/testing/engine/cases/attention.py.
    """
    # multi-section modes read sections this wrapper cannot pass (ggml_rope_multi); the kernels
    # would read garbage, so only the two plain modes (a bool is no mode)
    if mode not in _ROPE_MODES or type(mode) is not int:
        mode = _rope_mode(_ROPE_OP, mode)
    if type(n_dims) is not int:
        n_dims = _whole_head(_ROPE_OP, ctx, a, pos, n_dims)
    if not (0 < n_dims and n_dims % 2 == 0):  # ggml asserts n_dims <= ne[0] only in the kernels
        raise ValueError(f"{_ROPE_OP}: n_dims ({n_dims}) must be even and positive")
    try:
        r = _ROPE_FN(
            ctx.ptr,
            a.ptr,
            pos.ptr,
            _NULL if freq_factors is None else freq_factors.ptr,
            n_dims,
            mode,
            n_ctx_orig,
            freq_base,
            freq_scale,
            ext_factor,
            attn_factor,
            beta_fast,
            beta_slow,
        )
    except _ARG_ERRORS as e:
        # the scalars went to cffi unconverted (the hot path): name the one it refused
        _yarn(_ROPE_OP, n_ctx_orig, freq_base, freq_scale, ext_factor, attn_factor, beta_fast, beta_slow)
        extra = {} if freq_factors is None else {"freq_factors": freq_factors}
        raise _bad_arguments(_ROPE_OP, e, ctx, a=a, pos=pos, **extra) from None
    if not r:
        raise _failed(_ROPE_OP)
    if a.ctx is not ctx:
        ctx.adopt(a)
    if pos.ctx is not ctx:
        ctx.adopt(pos)
    if freq_factors is not None and freq_factors.ctx is not ctx:
        ctx.adopt(freq_factors)
    t = _new_tensor(Tensor)
    t.ptr, t.ctx = r, ctx
    return t


def _rope_mode(op: str, mode) -> int:
    """A plain rope's mode: 0 (normal) or 2 (neox), an integer (not a bool)."""
    m = integer(f"{op}: mode", mode)
    if m not in _ROPE_MODES:
        raise ValueError(
            f"{op}: mode must be 0 (normal) or 2 (neox), got {mode} (multi-section modes need ggml_rope_multi)"
        )
    return m


def _whole_head(op: str, ctx, a, pos, n_dims) -> int:
    """A plain rope's n_dims as an integer; None is a's whole head (a.ne[0])."""
    if n_dims is not None:
        return integer(f"{op}: n_dims", n_dims)
    if not isinstance(a, Tensor):
        raise _bad_arguments(op, TypeError("no tensor"), ctx, a=a, pos=pos)
    return a.ptr.ne[0]


def _yarn(op: str, n_ctx_orig, *floats) -> Yarn:
    """The YaRN scalars a rope was given, in Yarn's order, as C numbers, or a TypeError naming the first that is
    not a number of its kind."""
    return Yarn(
        integer(f"{op}: n_ctx_orig", n_ctx_orig), *(_scalar(op, n, v) for n, v in zip(Yarn._fields[1:], floats))
    )


_Wrapper = TypeVar("_Wrapper", bound=Callable[..., Tensor])


def _twin(fn: _Wrapper, op: str, doc: str) -> _Wrapper:
    """rope_ext (fn) made again as the wrapper of ggml_<op>, which ggml.h declares alike (rope_ext_back): the same
    code, so the same signature and checks, with _ROPE_OP and _ROPE_FN of op's own. Its globals are a copy of
    rope_ext's module's, taken when the twin is made (a closure would slow rope_ext, a hot path, by about 1%)."""
    namespace = {**fn.__globals__, "_ROPE_OP": op, "_ROPE_FN": _guarded(op)}
    twin = FunctionType(fn.__code__.replace(co_name=op, co_qualname=op), namespace, op, fn.__defaults__)
    twin.__doc__ = doc
    twin.__annotations__ = dict(fn.__annotations__)
    twin.__module__ = sys._getframe(1).f_globals["__name__"]  # the family module that made it
    return cast(_Wrapper, twin)


def _finite_float(op: str, name: str, value) -> float:
    """A float scalar that must be finite: a NaN or infinity would poison every output."""
    v = _scalar(op, name, value)
    if not math.isfinite(v):
        raise ValueError(f"{op}: {name} must be finite, got {v}")
    return v


def _int_args(op: str, **values) -> list[int]:
    return [integer(f"{op}: {name}", v) for name, v in values.items()]


# --- rope with sections ------------------------------------------------------------------------------------
_rope_multi = _guarded("rope_multi")
_MROPE_MODES = (lib.GGML_ROPE_TYPE_MROPE, lib.GGML_ROPE_TYPE_VISION, lib.GGML_ROPE_TYPE_IMROPE)


# hand-written: sections is a C array (int[4]), freq_factors may be None, n_dims=None is computed from a and mode
def rope_multi(
    ctx: Context,
    a: Tensor,
    pos: Tensor,
    freq_factors: Tensor | None = None,
    n_dims: int | None = None,
    sections: Sequence[int] = (0, 0, 0, 0),
    mode: int = 8,
    n_ctx_orig: int = _NO_YARN.n_ctx_orig,
    freq_base: float = _NO_YARN.freq_base,
    freq_scale: float = _NO_YARN.freq_scale,
    ext_factor: float = _NO_YARN.ext_factor,
    attn_factor: float = _NO_YARN.attn_factor,
    beta_fast: float = _NO_YARN.beta_fast,
    beta_slow: float = _NO_YARN.beta_slow,
) -> Tensor:
    """ggml_rope_multi: RoPE with several position streams (Qwen2-VL's M-RoPE, its vision RoPE, interleaved
    M-RoPE): each rotated pair takes its position from one of 4 streams, chosen by section.

    a: [head_dim, n_head, n_tokens, ne3] in ggml's ne order (NumPy shape reversed), F32 or F16.
    pos: I32 ne [4 * n_tokens]: the 4 streams one after another (t, h, w, e), n_tokens positions each.
    freq_factors: optional F32 per-pair divisors of theta, or None.
    n_dims: the rotated dims; None (the default) rotates the whole head (head_dim) in modes 8 and 40,
        half of it (head_dim / 2, as llama.cpp's vision encoders) in mode 24. Even.
    sections: 4 non-negative ints, the number of pairs taken from each stream (t, h, w, e) in turn;
        pair i reads the stream of its sector i % sum(sections) (mode 40 interleaves the streams).
    mode: 8 (GGML_ROPE_TYPE_MROPE), 24 (GGML_ROPE_TYPE_VISION: pairs (i, i + n_dims), each section
        restarting theta's exponent) or 40 (GGML_ROPE_TYPE_IMROPE).
    n_ctx_orig, freq_base, freq_scale, ext_factor, attn_factor, beta_fast, beta_slow: as rope_ext (YaRN).
    Result: a's shape and type. Precision: as rope_ext (F32 angles; F16 a rounded once).
    """
    op = "rope_multi"
    (mode,) = _int_args(op, mode=mode)
    n_ctx_orig, *floats = _yarn(op, n_ctx_orig, freq_base, freq_scale, ext_factor, attn_factor, beta_fast, beta_slow)
    if n_dims is None and isinstance(a, Tensor):  # the whole head; the vision mode rotates (i, i + n_dims)
        n_dims = a.ptr.ne[0] // 2 if mode == lib.GGML_ROPE_TYPE_VISION else a.ptr.ne[0]
    (n_dims,) = _int_args(op, n_dims=n_dims)
    # other modes (plain or with extra bits) fall to the kernels' "rope type not supported" abort
    if mode not in _MROPE_MODES:
        raise ValueError(
            f"{op}: mode must be 8 (MROPE), 24 (VISION) or 40 (IMROPE), got {mode} (the plain modes are rope_ext's)"
        )
    if not (0 < n_dims and n_dims % 2 == 0):
        raise ValueError(f"{op}: n_dims ({n_dims}) must be even and positive")
    try:
        secs = [integer(f"{op}: sections", s) for s in sections]
    except TypeError:
        raise TypeError(f"{op}: sections must be 4 integers, got {sections!r}") from None
    # the kernels take each rotated pair's section modulo their sum: negative sections or a zero sum
    # divide by zero or index outside them
    if len(secs) != 4 or min(secs) < 0 or sum(secs[:3]) == 0:
        raise ValueError(f"{op}: sections must be 4 non-negative integers, the first three not all 0, got {sections!r}")
    try:
        r = _rope_multi(
            ctx.ptr,
            a.ptr,
            pos.ptr,
            _NULL if freq_factors is None else freq_factors.ptr,
            n_dims,
            ffi.new("int[4]", secs),
            mode,
            n_ctx_orig,
            *floats,
        )
    except _ARG_ERRORS as e:
        extra = {} if freq_factors is None else {"freq_factors": freq_factors}
        raise _bad_arguments(op, e, ctx, a=a, pos=pos, **extra) from None
    return _result(ctx, r, op, a, pos, *(() if freq_factors is None else (freq_factors,)))


# --- flash attention -----------------------------------------------------------------------------------------
_flash_attn_ext = _guarded("flash_attn_ext")
_PRECS = {int(getattr(lib, n)) for n in dir(lib) if n.startswith("GGML_PREC_")}


# hand-written: a hot path, its checks reading the pointers it passes
def flash_attn_ext(
    ctx: Context,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    scale: float = 1.0,
    max_bias: float = 0.0,
    logit_softcap: float = 0.0,
) -> Tensor:
    """ggml_flash_attn_ext: attention in one op: softmax(scale * q.k + slope*mask) @ v per head
    (logit_softcap > 0: the scaled logits pass through softcap*tanh(x/softcap) first).

    All shapes in ggml's ne order (NumPy's reversed):
    q: F32 [D, n_q, n_head, ne3]. k: [D, n_kv, n_head_kv, ne3], F32/F16/BF16 or quantized (Q8_0, Q4_0...).
    v: [Dv, n_kv, n_head_v, ne3] (not transposed), k's type; n_head_kv and n_head_v divide n_head
        (grouped-query attention: head h reads kv head h // (n_head / n_head_kv)).
    mask: None or F16 [n_kv, >= n_q, m2, m3] (m2 divides n_head, m3 divides ne3), added to the logits.
    scale: multiplies q.k (1/sqrt(D) usually). max_bias: ALiBi slopes as soft_max_ext, 0 for none.
    logit_softcap: 0 for none.
    Result: F32 [Dv, n_head, n_q, ne3]: permuted (heads before tokens), unlike q.
    Precision: CPU: with F16 k the q.k products are computed in F16 (q rounded to F16), with F16 v the
    weighted sum of v accumulates in F16 (NMSE 1e-5 bound); F32 k and v in F32. Vulkan: q, k and v go
    through F16 whatever their type (bound NMSE 1e-6 for all-F32 inputs, docs/findings.md entry 19).
    Quantized k: q is quantized to Q8_0 first, as in mul_mat (NMSE 5e-4).
    """
    op = "flash_attn_ext"
    scale, max_bias, logit_softcap = (
        _finite_float(op, "scale", scale),
        _finite_float(op, "max_bias", max_bias),
        _finite_float(op, "logit_softcap", logit_softcap),
    )
    if max_bias < 0:
        raise ValueError(f"{op}: max_bias must be >= 0, got {max_bias}")
    try:
        pq, pk, pv = q.ptr, k.ptr, v.ptr
        pm = _NULL if mask is None else mask.ptr
        cp = ctx.ptr
    except _ARG_ERRORS as e:
        raise _bad_arguments(op, e, ctx, q=q, k=k, v=v, **({} if mask is None else {"mask": mask})) from None
    # ggml.c leaves these to the kernels, which read past v's rows or the mask's, or divide by
    # v's head count
    if pv.ne[1] != pk.ne[1]:
        raise ValueError(f"{op}: v must have k's {pk.ne[1]} kv rows (v.ne[1] = {pv.ne[1]})")
    if pq.ne[2] % pv.ne[2]:
        raise ValueError(f"{op}: v's heads ({pv.ne[2]}) must divide q's ({pq.ne[2]})")
    # ggml.h's mask is [n_kv, n_batch >= n_q, ...]: a shorter one is read past its end, a wider one
    # is read with a row stride of n_kv by the Vulkan shaders (the CPU uses its own stride)
    if mask is not None and (pm.ne[0] != pk.ne[1] or pm.ne[1] < pq.ne[1]):
        raise ValueError(
            f"{op}: the mask must be [n_kv = {pk.ne[1]}, >= n_q = {pq.ne[1]}, ...], got [{pm.ne[0]}, {pm.ne[1]}, ...]"
        )
    r = _flash_attn_ext(cp, pq, pk, pv, pm, scale, max_bias, logit_softcap)
    return _result(ctx, r, op, q, k, v, *(() if mask is None else (mask,)))


# hand-written (this one and set_prec): void C functions that change the node a in place, no ctx passed
def flash_attn_ext_add_sinks(ctx: Context, a: Tensor, sinks: Tensor) -> Tensor:
    """ggml_flash_attn_ext_add_sinks: attention sinks for the flash_attn_ext node a: one logit per
    head joins every softmax denominator, with no value (GPT-OSS).

    a: the result of flash_attn_ext (changed in place).
    sinks: F32 ne [n_head], the logit of each head.
    Returns a.
    """
    op = "flash_attn_ext_add_sinks"
    try:
        failed = _guarded(op)(a.ptr, sinks.ptr)
    except _ARG_ERRORS as e:
        raise _bad_arguments(op, e, ctx, a=a, sinks=sinks) from None
    if failed:
        raise _failed(op)
    if sinks.ctx is not a.ctx:
        a.ctx.adopt(sinks)
    return a


def flash_attn_ext_set_prec(ctx: Context, a: Tensor, prec: int) -> Tensor:
    """ggml_flash_attn_ext_set_prec: ask for the accumulation precision of the flash_attn_ext node a.

    a: the result of flash_attn_ext (changed in place).
    prec: a ggml_prec value: 0 (GGML_PREC_DEFAULT: the backend chooses, F16 on some), 10
        (GGML_PREC_F32: accumulate in F32 where the backend has such a kernel), 15 (GGML_PREC_BF16).
    Returns a. The CPU computes as without it (see flash_attn_ext's precision).
    """
    op = "flash_attn_ext_set_prec"
    prec = integer(f"{op}: prec", prec)
    if prec not in _PRECS:  # an enum value outside ggml_prec means nothing to any backend
        raise ValueError(f"{op}: prec must be one of {sorted(_PRECS)} (enum ggml_prec), got {prec}")
    try:
        failed = _guarded(op)(a.ptr, prec)
    except _ARG_ERRORS as e:
        raise _bad_arguments(op, e, ctx, a=a) from None
    if failed:
        raise _failed(op)
    return a


# --- SAM: windows and relative positions ----------------------------------------------------------------------
win_part = declared(
    "win_part",
    """ggml_win_part: SAM's window partition: a cut into w x w windows, zero-padded to whole windows.

    a: F32 [C, W, H] (ne order; NumPy shape (H, W, C)), ne3 = 1.
    w: the window size, >= 1.
    Result: F32 [C, w, w, n_windows], window index px + npx*py (npx = ceil(W/w)). Exact.
    """,
    check=_at_least("win_part", 1, "w"),  # ggml.c divides by w
)


def _holds_windows(x: SimpleNamespace) -> None:
    """win_unpart's a holds the windows: ggml.c does not check it, the kernel would read past its end."""
    if isinstance(x.a, Tensor):
        ne, need = x.a.ptr.ne, (-(-x.w0 // x.w)) * (-(-x.h0 // x.w))
        if ne[1] != x.w or ne[2] != x.w or ne[3] < need:
            raise ValueError(
                f"win_unpart: a must hold {need} windows of {x.w} x {x.w} ([C, {x.w}, {x.w}, >= {need}]), "
                f"got ne {list(ne)}"
            )


win_unpart = declared(
    "win_unpart",
    """ggml_win_unpart: the inverse of win_part: windows back to a [C, w0, h0] image (padding dropped).

    a: F32 [C, w, w, n_windows] (ne order), n_windows >= ceil(w0/w) * ceil(h0/w).
    w0, h0: the image's width and height. w: the window size.
    Result: F32 [C, w0, h0]. Exact.
    """,
    check=all_of(_at_least("win_unpart", 1, "w0", "h0", "w"), _holds_windows),
)

get_rel_pos = declared(
    "get_rel_pos",
    """ggml_get_rel_pos: SAM's relative-position table: out[:, j, i] = a[:, i - j + kh - 1].

    a: F16 [C, 2*kh - 1] (ne order).
    qh: the query extent, kh: the key extent.
    Result: F16 [C, kh, qh]. Exact.
    """,
)

add_rel_pos = declared(
    "add_rel_pos",
    """ggml_add_rel_pos: SAM's decomposed relative positions added to its attention logits.

    a: F32 [W*W, W*H', np] (the logits); viewed [W(w), W(h), W, H', np] it gets ph[..., h] + pw[..., w].
    pw, ph: F32 [W, W, H', np], the width and height terms.
    Result: a's shape, F32. Exact up to F32 addition.
    """,
)


# --- DeepSeek: lightning indexer, hyper-connections -----------------------------------------------------------
lightning_indexer = declared(
    "lightning_indexer",
    """ggml_lightning_indexer: DeepSeek's lightning indexer scores:
    out[kv, t, 0, s] = sum_h relu(q[:, h, t, s] . k[:, 0, kv, s]) * weights[h, t, 0, s] + mask[kv, t, 0, s % m3].

    q: [E, H, T, S] (ne order; NumPy (S, T, H, E)), k: [E, 1, KV, S], weights: [H, T, 1, S],
    mask: [KV, T, 1, m3], all F32 (the suite's types).
    Result: F32 [KV, T, 1, S]. Precision: F32 dot products (within NMSE 1e-7).
    """,
)

dsv4_hc_comb = declared(
    "dsv4_hc_comb",
    """ggml_dsv4_hc_comb: DeepSeek-V4's hyper-connection combination matrices (hc = 4 streams):
    logits mixes[2hc + dst + hc*src, t] * scale[2] + base[...], softmax over dst, + eps, divided by
    (eps + their sum over src); then n_iter - 1 more rounds of column and row normalisation.

    mixes: F32 [(2 + hc)*hc, n_tokens]. scale: F32 [>= 3] (scale[2] used here). base: F32 [(2 + hc)*hc].
    eps: >= 0, finite. n_iter: the normalisation rounds, >= 1.
    Result: F32 [hc, hc, n_tokens] (dst, src). Precision: F32 (within NMSE 1e-7).
    """,
    defaults={"eps": 1e-6, "n_iter": 1},
    # a negative eps can cancel a normalising sum to 0
    check=all_of(_finite("dsv4_hc_comb", "eps"), _at_least("dsv4_hc_comb", 0, "eps")),
)

dsv4_hc_pre = declared(
    "dsv4_hc_pre",
    """ggml_dsv4_hc_pre: DeepSeek-V4's hyper-connection read: out[i, t] = sum_h x[i, h, t] * weights[h, t].

    x: F32 [n_embd, hc, n_tokens] (ne order), weights: F32 [hc, n_tokens].
    Result: F32 [n_embd, n_tokens]. Precision: F32.
    """,
)

dsv4_hc_pre_gated = declared(
    "dsv4_hc_pre_gated",
    """ggml_dsv4_hc_pre_gated: out[i, t] = scale * sum_h x[i, h, t] * sigmoid(gate[i, h, t]).

    x, gate: F32 [n_embd, hc, n_tokens] (ne order).
    scale: a finite number.
    Result: F32 [n_embd, n_tokens]. Precision: F32.
    """,
    defaults={"scale": 1.0},
    check=_finite("dsv4_hc_pre_gated", "scale"),
)


def _identity_needs_0_21(x: SimpleNamespace) -> None:
    """comb=None, the identity, came to ggml_dsv4_hc_post later than the op: older ones read the NULL."""
    if x.comb is None:
        require_after("dsv4_hc_post: comb=None (the identity)", "0.21.0")


dsv4_hc_post = declared(
    "dsv4_hc_post",
    """ggml_dsv4_hc_post: DeepSeek-V4's hyper-connection write:
    out[i, d, t] = x[i, t] * post[d, t] + sum_s residual[i, s, t] * comb[d, s, t].

    x: F32 [n_embd, n_tokens], residual: F32 [n_embd, hc, n_tokens], post: F32 [hc, n_tokens],
    comb: F32 [hc, hc, n_tokens] (dst, src) from dsv4_hc_comb, or None (then + residual[i, d, t]).
    Result: F32 [n_embd, hc, n_tokens]. Precision: F32.
    """,
    optional=("comb",),
    check=_identity_needs_0_21,
)


__all__ = [  # generated by tools/gen_methods.py
    "add_rel_pos",
    "diag_mask_inf",
    "dsv4_hc_comb",
    "dsv4_hc_post",
    "dsv4_hc_pre",
    "dsv4_hc_pre_gated",
    "flash_attn_ext",
    "flash_attn_ext_add_sinks",
    "flash_attn_ext_set_prec",
    "get_rel_pos",
    "lightning_indexer",
    "rope_ext",
    "rope_multi",
    "soft_max",
    "soft_max_ext",
    "win_part",
    "win_unpart",
]
