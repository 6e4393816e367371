"""Checked ggml ops. Names and arguments mirror the C functions (`ggml_add(ctx, a, b)` is
`ops.add(ctx, a, b)` or `ctx.add(a, b)`); shapes are ggml order, strides and offsets bytes.

Each wrapper checks ggml's preconditions for the op (the GGML_ASSERTs in ggml.c, and the
types the CPU kernels accept) and raises TypeError (wrong kind or tensor type) or
ValueError (shapes, strides, ranges) naming the failed condition, before ggml is called.
"""

from __future__ import annotations

import builtins

from pyggml import types
from pyggml._native import ffi, lib
from pyggml.tensor import MAX_DIMS, Tensor
from pyggml.types import SortOrder, Type

FLOAT_TYPES = (Type.F32, Type.F16, Type.BF16)
INDEX_TYPES = (Type.I32, Type.I64)


# --- precondition helpers -------------------------------------------------------------
def _t(x, op: str, arg: str) -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"{op}: {arg} must be a Tensor, got {type(x).__name__}")
    return x


def _need(cond: bool, op: str, msg, exc=ValueError):
    """Raise exc("op: msg") unless cond; msg may be a callable, so that an f-string naming
    the tensors' shapes is only formatted when the check fails (op building is a hot path)."""
    if not cond:
        raise exc(f"{op}: {msg() if callable(msg) else msg}")


def _types(x: Tensor, allowed, op: str, arg: str):
    if x.type not in allowed:
        names = "/".join(t.name for t in allowed)
        raise TypeError(f"{op}: {arg} must be {names}, got {x.type.name}")


def _new(ctx, ptr) -> Tensor:
    return Tensor(ptr, ctx)


def _room(ctx, op: str):
    ctx.require_room(0, what=op)


def _can_repeat(b: Tensor, a: Tensor) -> bool:
    """ggml_can_repeat(b, a): every dim of a is a multiple of b's."""
    return all(n == 0 and m == 0 or (n > 0 and m % n == 0) for n, m in zip(b.ne, a.ne))


def _contiguous_rows(x: Tensor) -> bool:
    """ggml_is_contiguous_rows."""
    return x.ne[0] == types.block_size(x.type) or x.nb[0] == types.type_size(x.type)


def _packed_rows(x: Tensor) -> bool:
    """nb[0] == type size: what the CPU kernels assert as nb00 == sizeof(T)."""
    return x.nb[0] == types.type_size(x.type)


def _padded_1d(x: Tensor) -> bool:
    """ggml_is_padded_1d: packed rows, evenly spaced (kernels that walk rows as i*nb[1])."""
    return _packed_rows(x) and x.nb[2] == x.nb[1] * x.ne[1] and x.nb[3] == x.nb[2] * x.ne[2]


def _has_vec_dot(t) -> bool:
    tr = lib.ggml_get_type_traits_cpu(t)
    return tr != ffi.NULL and tr.vec_dot != ffi.NULL


def _has_from_float(t) -> bool:
    tr = lib.ggml_get_type_traits_cpu(t)
    return tr != ffi.NULL and tr.from_float != ffi.NULL


# --- element-wise binary --------------------------------------------------------------
_F32 = int(Type.F32)
_FLOAT_IDS = frozenset(int(t) for t in FLOAT_TYPES)
_TYPE_SIZE_OF = {int(t): types.type_size(t) for t in Type}


def _repeats(nb, na) -> bool:
    """ggml_can_repeat on raw ne arrays: every na[i] a multiple of nb[i] (0 only with 0).
    Written out for the four dims: binary ops are most of a graph, and this runs for each."""
    return ((nb[0] and not na[0] % nb[0]) or na[0] == nb[0] == 0) and \
           ((nb[1] and not na[1] % nb[1]) or na[1] == nb[1] == 0) and \
           ((nb[2] and not na[2] % nb[2]) or na[2] == nb[2] == 0) and \
           ((nb[3] and not na[3] % nb[3]) or na[3] == nb[3] == 0)


def _binary(name: str, c_fn, ctx, a, b) -> Tensor:
    a, b = _t(a, name, "a"), _t(b, name, "b")
    pa, pb = a.ptr, b.ptr
    if not _repeats(pb.ne, pa.ne):
        raise ValueError(f"{name}: b (ne={b.ne}) must broadcast to a (ne={a.ne}): "
                         "every a.ne[i] a multiple of b.ne[i]")
    ta, tb = pa.type, pb.type
    if ta not in _FLOAT_IDS:
        _types(a, FLOAT_TYPES, name, "a")
    if tb not in _FLOAT_IDS:
        _types(b, FLOAT_TYPES, name, "b")
    if tb != ta and tb != _F32:
        raise TypeError(f"{name}: b must be {'/'.join(sorted({a.type.name, 'F32'}))} when a is {a.type.name}, "
                        f"got {b.type.name}")
    if pa.nb[0] != _TYPE_SIZE_OF[ta]:
        raise ValueError(f"{name}: a must have contiguous rows (nb[0] == element size)")
    ctx.require_room(0, name)
    return Tensor(c_fn(ctx.ptr, pa, pb), ctx)


def add(ctx, a, b):
    return _binary("add", lib.ggml_add, ctx, a, b)


def sub(ctx, a, b):
    return _binary("sub", lib.ggml_sub, ctx, a, b)


def mul(ctx, a, b):
    return _binary("mul", lib.ggml_mul, ctx, a, b)


def div(ctx, a, b):
    return _binary("div", lib.ggml_div, ctx, a, b)


def scale(ctx, a, s: float):
    a = _t(a, "scale", "a")
    _types(a, (Type.F32, Type.BF16), "scale", "a")
    _need(a.is_contiguous(), "scale", "a must be contiguous (use cont() first)")
    _room(ctx, "scale")
    return _new(ctx, lib.ggml_scale(ctx.ptr, a.ptr, float(s)))


def clamp(ctx, a, min: float, max: float):
    a = _t(a, "clamp", "a")
    _types(a, (Type.F32, Type.F16), "clamp", "a")
    _need(_padded_1d(a), "clamp", "a must have contiguous, evenly spaced rows (use cont() first)")
    _need(min <= max, "clamp", lambda: f"min ({min}) must not exceed max ({max})")
    _room(ctx, "clamp")
    return _new(ctx, lib.ggml_clamp(ctx.ptr, a.ptr, float(min), float(max)))


# --- element-wise unary ---------------------------------------------------------------
def _unary(name: str, c_fn, ctx, a) -> Tensor:
    a = _t(a, name, "a")
    _types(a, FLOAT_TYPES, name, "a")
    _need(_packed_rows(a), name, "a must have contiguous rows (nb[0] == element size)")
    _room(ctx, name)
    return _new(ctx, c_fn(ctx.ptr, a.ptr))


UNARY_OPS = ("abs", "sgn", "neg", "step", "tanh", "elu", "relu", "sigmoid", "gelu", "gelu_quick", "gelu_erf",
             "silu", "hardswish", "hardsigmoid", "exp", "softplus", "floor", "ceil", "round", "trunc",
             "sqr", "sqrt", "log", "sin", "cos")


def _make_unary(name):
    c_fn = getattr(lib, f"ggml_{name}")

    def op(ctx, a):
        return _unary(name, c_fn, ctx, a)
    op.__name__ = name
    op.__doc__ = f"ggml_{name}(ctx, a), element-wise."
    return op


for _name in UNARY_OPS:
    globals()[_name] = _make_unary(_name)
del _name


def leaky_relu(ctx, a, negative_slope: float = 0.01):
    a = _t(a, "leaky_relu", "a")
    _types(a, (Type.F32, Type.F16), "leaky_relu", "a")
    _need(_padded_1d(a), "leaky_relu", "a must have contiguous, evenly spaced rows (use cont() first)")
    _room(ctx, "leaky_relu")
    return _new(ctx, lib.ggml_leaky_relu(ctx.ptr, a.ptr, float(negative_slope), False))


# --- reductions, norms, softmax ------------------------------------------------------
def _reduce(name: str, c_fn, ctx, a, allowed=(Type.F32,)):
    a = _t(a, name, "a")
    _types(a, allowed, name, "a")
    _need(_packed_rows(a), name, "a must have contiguous rows (nb[0] == element size)")
    _room(ctx, name)
    return _new(ctx, c_fn(ctx.ptr, a.ptr))


def sum(ctx, a):
    return _reduce("sum", lib.ggml_sum, ctx, a, FLOAT_TYPES)


def sum_rows(ctx, a):
    return _reduce("sum_rows", lib.ggml_sum_rows, ctx, a)


def mean(ctx, a):
    return _reduce("mean", lib.ggml_mean, ctx, a)


def argmax(ctx, a):
    a = _t(a, "argmax", "a")
    _need(a.ne[2] == 1 and a.ne[3] == 1, "argmax", lambda: f"a must be a matrix (ne[2] == ne[3] == 1), got ne={a.ne}")
    return _reduce("argmax", lib.ggml_argmax, ctx, a)


def _norm(name: str, c_fn, ctx, a, eps: float):
    a = _t(a, name, "a")
    _types(a, (Type.F32,), name, "a")
    _need(eps >= 0, name, lambda: f"eps must be >= 0, got {eps}")
    _need(_packed_rows(a), name, "a must have contiguous rows (nb[0] == element size)")
    _room(ctx, name)
    return _new(ctx, c_fn(ctx.ptr, a.ptr, float(eps)))


def norm(ctx, a, eps: float = 1e-5):
    return _norm("norm", lib.ggml_norm, ctx, a, eps)


def rms_norm(ctx, a, eps: float = 1e-6):
    return _norm("rms_norm", lib.ggml_rms_norm, ctx, a, eps)


def l2_norm(ctx, a, eps: float = 1e-12):
    return _norm("l2_norm", lib.ggml_l2_norm, ctx, a, eps)


def soft_max(ctx, a):
    return _soft_max("soft_max", ctx, a, None, 1.0, 0.0)


def soft_max_ext(ctx, a, mask=None, scale: float = 1.0, max_bias: float = 0.0):
    return _soft_max("soft_max_ext", ctx, a, mask, scale, max_bias)


def _soft_max(op: str, ctx, a, mask, scale: float, max_bias: float):
    a = _t(a, op, "a")
    _types(a, (Type.F32,), op, "a")
    _need(a.is_contiguous(), op, "a must be contiguous")
    if mask is not None:
        mask = _t(mask, op, "mask")
        _types(mask, (Type.F16, Type.F32), op, "mask")
        _need(mask.is_contiguous(), op, "mask must be contiguous")
        _need(mask.ne[0] == a.ne[0], op, lambda: f"mask.ne[0] ({mask.ne[0]}) must equal a.ne[0] ({a.ne[0]})")
        _need(mask.ne[1] >= a.ne[1], op, lambda: f"mask.ne[1] ({mask.ne[1]}) must be >= a.ne[1] ({a.ne[1]})")
        _need(a.ne[2] % mask.ne[2] == 0 and a.ne[3] % mask.ne[3] == 0, op,
              "a.ne[2] and a.ne[3] must be multiples of the mask's")
    _need(max_bias >= 0, op, lambda: f"max_bias must be >= 0, got {max_bias}")
    _need(max_bias == 0 or mask is not None, op, "max_bias > 0 (ALiBi) needs a mask")
    _room(ctx, op)
    return _new(ctx, lib.ggml_soft_max_ext(ctx.ptr, a.ptr, mask.ptr if mask is not None else ffi.NULL,
                                           float(scale), float(max_bias)))


def diag_mask_inf(ctx, a, n_past: int):
    a = _t(a, "diag_mask_inf", "a")
    _types(a, (Type.F32,), "diag_mask_inf", "a")
    _need(a.is_contiguous(), "diag_mask_inf", "a must be contiguous (use cont() first)")
    _need(n_past >= 0, "diag_mask_inf", lambda: f"n_past must be >= 0, got {n_past}")
    _room(ctx, "diag_mask_inf")
    return _new(ctx, lib.ggml_diag_mask_inf(ctx.ptr, a.ptr, int(n_past)))


def rope_ext(ctx, a, pos, freq_factors=None, n_dims: int = 0, mode: int = 0, n_ctx_orig: int = 0,
             freq_base: float = 10000.0, freq_scale: float = 1.0, ext_factor: float = 0.0,
             attn_factor: float = 1.0, beta_fast: float = 32.0, beta_slow: float = 1.0):
    a, pos = _t(a, "rope_ext", "a"), _t(pos, "rope_ext", "pos")
    _types(a, (Type.F32, Type.F16), "rope_ext", "a")
    _types(pos, (Type.I32,), "rope_ext", "pos")
    _need(mode & 1 == 0, "rope_ext", "mode & 1 is no longer supported by ggml")
    _need(mode in (lib.GGML_ROPE_TYPE_NORMAL, lib.GGML_ROPE_TYPE_NEOX), "rope_ext",
          lambda: f"mode must be 0 (normal) or 2 (neox), got {mode} (multi-section modes need ggml_rope_multi)")
    _need(_packed_rows(a), "rope_ext", "a must have contiguous rows (nb[0] == element size)")
    _need(pos.ne[1] == pos.ne[2] == pos.ne[3] == 1, "rope_ext", lambda: f"pos must be a vector, got ne={pos.ne}")
    multi = bool(mode & lib.GGML_ROPE_TYPE_MROPE)
    want = a.ne[2] * 4 if multi else a.ne[2]
    _need(pos.ne[0] == want, "rope_ext", lambda: f"pos.ne[0] ({pos.ne[0]}) must be {'4*' if multi else ''}a.ne[2] ({want})")
    _need(0 < n_dims <= a.ne[0] and n_dims % 2 == 0, "rope_ext",
          lambda: f"n_dims ({n_dims}) must be even and in 1..a.ne[0] ({a.ne[0]})")
    if freq_factors is not None:
        freq_factors = _t(freq_factors, "rope_ext", "freq_factors")
        _types(freq_factors, (Type.F32,), "rope_ext", "freq_factors")
        _need(freq_factors.ne[0] >= n_dims // 2, "rope_ext", "freq_factors.ne[0] must be >= n_dims/2")
        _need(freq_factors.is_contiguous(), "rope_ext", "freq_factors must be contiguous")
    _room(ctx, "rope_ext")
    return _new(ctx, lib.ggml_rope_ext(ctx.ptr, a.ptr, pos.ptr,
                                       freq_factors.ptr if freq_factors is not None else ffi.NULL,
                                       int(n_dims), int(mode), int(n_ctx_orig), float(freq_base), float(freq_scale),
                                       float(ext_factor), float(attn_factor), float(beta_fast), float(beta_slow)))


# --- matrix ---------------------------------------------------------------------------
def mul_mat(ctx, a, b):
    """ggml_mul_mat: a [K, M, ...], b [K, N, ...] -> F32 [M, N, ...] (a's rows dotted with b's)."""
    a, b = _t(a, "mul_mat", "a"), _t(b, "mul_mat", "b")
    _need(a.ne[0] == b.ne[0], "mul_mat", lambda: f"a.ne[0] ({a.ne[0]}) must equal b.ne[0] ({b.ne[0]})")
    _need(b.ne[2] % a.ne[2] == 0 and b.ne[3] % a.ne[3] == 0, "mul_mat",
          lambda: f"b.ne[2:4] {b.ne[2:]} must be multiples of a.ne[2:4] {a.ne[2:]} (broadcast)")
    _need(not a.is_transposed(), "mul_mat", "a must not be transposed (make it contiguous with cont())")
    _types(b, FLOAT_TYPES, "mul_mat", "b")
    _need(_has_vec_dot(a.type), "mul_mat", lambda: f"a's type {a.type.name} has no CPU dot product", TypeError)
    _need(_packed_rows(a), "mul_mat", "a must have contiguous rows (nb[0] == type size)")
    _need(_packed_rows(b), "mul_mat", "b must have contiguous rows (nb[0] == type size)")
    _room(ctx, "mul_mat")
    return _new(ctx, lib.ggml_mul_mat(ctx.ptr, a.ptr, b.ptr))


def ssm_conv(ctx, sx, c):
    """ggml_ssm_conv: sx [d_conv-1+n_t, d_inner, n_s], c [d_conv, d_inner] -> [d_inner, n_t, n_s]."""
    sx, c = _t(sx, "ssm_conv", "sx"), _t(c, "ssm_conv", "c")
    _types(sx, (Type.F32,), "ssm_conv", "sx")
    _types(c, (Type.F32,), "ssm_conv", "c")
    _need(sx.ne[3] == 1, "ssm_conv", lambda: f"sx must be 3d, got ne={sx.ne}")
    _need(c.ne[2] == 1 and c.ne[3] == 1, "ssm_conv", lambda: f"c must be a matrix, got ne={c.ne}")
    d_conv, d_inner = c.ne[0], c.ne[1]
    _need(sx.ne[0] >= d_conv - 1, "ssm_conv", lambda: f"sx.ne[0] ({sx.ne[0]}) must be d_conv-1+n_t >= {d_conv - 1}")
    _need(sx.ne[1] == d_inner, "ssm_conv", lambda: f"sx.ne[1] ({sx.ne[1]}) must equal c.ne[1] = d_inner ({d_inner})")
    _need(sx.nb[0] == sx.element_size and sx.nb[1] == sx.ne[0] * sx.element_size, "ssm_conv",
          "sx must have contiguous rows, packed (nb[0] == 4, nb[1] == ne[0]*4)")
    _need(c.is_contiguous(), "ssm_conv", "c must be contiguous")
    _room(ctx, "ssm_conv")
    return _new(ctx, lib.ggml_ssm_conv(ctx.ptr, sx.ptr, c.ptr))


# --- index ops --------------------------------------------------------------------------
def get_rows(ctx, a, b):
    """Rows b (I32 [n, ne2, ne3]) of a ([ne0, rows, ne2, ne3])."""
    a, b = _t(a, "get_rows", "a"), _t(b, "get_rows", "b")
    _types(b, (Type.I32,), "get_rows", "b (the row index)")
    _need(a.type in (Type.F32, Type.F16, Type.BF16, Type.I32) or
          (types.is_quantized(a.type) and lib.ggml_get_type_traits(a.type).to_float != ffi.NULL
           and a.type != Type.Q8_K), "get_rows",
          lambda: f"a must be F32/F16/BF16/I32 or quantized, got {a.type.name}", TypeError)
    _need(_packed_rows(a), "get_rows", "a must have contiguous rows (nb[0] == type size)")
    _need(a.ne[2] == b.ne[1], "get_rows", lambda: f"a.ne[2] ({a.ne[2]}) must equal b.ne[1] ({b.ne[1]})")
    _need(a.ne[3] == b.ne[2], "get_rows", lambda: f"a.ne[3] ({a.ne[3]}) must equal b.ne[2] ({b.ne[2]})")
    _need(b.ne[3] == 1, "get_rows", lambda: f"b.ne[3] must be 1, got {b.ne[3]}")
    _room(ctx, "get_rows")
    return _new(ctx, lib.ggml_get_rows(ctx.ptr, a.ptr, b.ptr))


def set_rows(ctx, a, b, c):
    """Write rows of b into rows c (I32/I64 index) of a; returns a view of a as the op's node."""
    a, b, c = _t(a, "set_rows", "a"), _t(b, "set_rows", "b"), _t(c, "set_rows", "c")
    _types(b, (Type.F32, Type.F16), "set_rows", "b (the source rows)")
    _types(c, INDEX_TYPES, "set_rows", "c (the row index)")
    _need(a.ne[0] == b.ne[0], "set_rows", lambda: f"a.ne[0] ({a.ne[0]}) must equal b.ne[0] ({b.ne[0]})")
    _need(a.ne[2] == b.ne[2] and a.ne[3] == b.ne[3], "set_rows",
          lambda: f"a.ne[2:4] {a.ne[2:]} must equal b.ne[2:4] {b.ne[2:]}")
    _need(b.ne[1] == c.ne[0], "set_rows", lambda: f"b.ne[1] ({b.ne[1]}) must equal c.ne[0] ({c.ne[0]}): one index per row")
    _need(b.ne[2] % c.ne[1] == 0 and b.ne[3] % c.ne[2] == 0, "set_rows",
          "b.ne[2] and b.ne[3] must be multiples of c.ne[1] and c.ne[2]")
    _need(c.ne[3] == 1, "set_rows", lambda: f"c.ne[3] must be 1, got {c.ne[3]}")
    _need(_contiguous_rows(a), "set_rows", "a must have contiguous rows (nb[0] == element size)")
    _need(_contiguous_rows(b), "set_rows", "b must have contiguous rows (nb[0] == element size)")
    _need(a.type in (Type.F32, Type.F16, Type.BF16) or types.is_quantized(a.type), "set_rows",
          lambda: f"a (the destination) type {a.type.name} has no conversion from F32", TypeError)
    _room(ctx, "set_rows")
    return _new(ctx, lib.ggml_set_rows(ctx.ptr, a.ptr, b.ptr, c.ptr))


def arange(ctx, start: float, stop: float, step: float = 1.0):
    _need(stop > start, "arange", lambda: f"stop ({stop}) must be greater than start ({start})")
    _need(step > 0, "arange", lambda: f"step must be positive, got {step}")
    _room(ctx, "arange")
    return _new(ctx, lib.ggml_arange(ctx.ptr, float(start), float(stop), float(step)))


def argsort(ctx, a, order=SortOrder.ASC):
    a = _t(a, "argsort", "a")
    _types(a, (Type.F32,), "argsort", "a")
    _need(_padded_1d(a), "argsort", "a must have contiguous, evenly spaced rows (use cont() first)")
    _need(a.ne[0] <= 2**31 - 1, "argsort", "a.ne[0] must fit in int32")
    if isinstance(order, str):
        _need(order.upper() in SortOrder.__members__, "argsort", lambda: f"order must be 'asc' or 'desc', got {order!r}")
        order = SortOrder[order.upper()]
    _need(order in (SortOrder.ASC, SortOrder.DESC), "argsort", lambda: f"order must be ASC or DESC, got {order}")
    _room(ctx, "argsort")
    return _new(ctx, lib.ggml_argsort(ctx.ptr, a.ptr, int(order)))


# --- data movement: copies, views, shapes -------------------------------------------------
def cpy(ctx, a, b):
    """Copy a into b (same number of elements, converting type); the result is a view of b."""
    a, b = _t(a, "cpy", "a"), _t(b, "cpy", "b")
    _need(a.nelements == b.nelements, "cpy", lambda: f"a has {a.nelements} elements, b has {b.nelements}: they must match")
    _copy_check("cpy", a, b)
    _room(ctx, "cpy")
    return _new(ctx, lib.ggml_cpy(ctx.ptr, a.ptr, b.ptr))


_CONVERSIONS = {  # the CPU copy kernel (ggml_compute_forward_dup): source type -> destination types
    Type.F32: (Type.F32, Type.F16, Type.BF16, Type.I32), Type.F16: (Type.F32, Type.F16, Type.BF16),
    Type.BF16: (Type.F32, Type.F16, Type.BF16), Type.I32: (Type.F32,),
}


def _copy_check(op: str, a: Tensor, b: Tensor | None):
    """Conditions of ggml's CPU copy kernel for a -> b (b None: a copy of the same type and shape)."""
    bt = a.type if b is None else b.type
    qa, qb = types.is_quantized(a.type), types.is_quantized(bt)
    if qa:
        _need(bt == a.type or bt == Type.F32, op, lambda: f"quantized {a.type.name} converts only to F32, not {bt.name}",
              TypeError)
        _need(_packed_rows(a) and a.ne[0] % types.block_size(a.type) == 0, op,
              lambda: f"quantized a must have contiguous rows of whole blocks (a transposed {a.type.name} cannot be copied)")
        if bt != a.type:
            _need(a.is_contiguous() and b.is_contiguous(), op, "dequantizing copies need contiguous a and b")
    elif bt != a.type:
        if qb:
            _need(_has_from_float(bt), op, lambda: f"no conversion into {bt.name}", TypeError)
            _need(a.type in (Type.F32, Type.F16, Type.BF16), op, lambda: f"only F32/F16/BF16 quantize to {bt.name}", TypeError)
            _need(_packed_rows(a) and b.is_contiguous(), op,
                  "quantizing copies need a with contiguous rows and a contiguous b")
            _need(a.ne[0] % types.block_size(bt) == 0, op,
                  lambda: f"a.ne[0] ({a.ne[0]}) must be a multiple of {bt.name}'s block size {types.block_size(bt)}: "
                  "each row of a is quantized on its own")
        else:
            _need(bt in _CONVERSIONS.get(a.type, ()), op, lambda: f"no conversion from {a.type.name} to {bt.name}", TypeError)
    if b is not None and qb and bt == a.type:
        _need(_packed_rows(b) and b.ne[0] % types.block_size(bt) == 0, op,
              "quantized b must have contiguous rows of whole blocks")


def dup(ctx, a):
    a = _t(a, "dup", "a")
    _copy_check("dup", a, None)
    _room(ctx, "dup")
    return _new(ctx, lib.ggml_dup(ctx.ptr, a.ptr))


def cont(ctx, a):
    a = _t(a, "cont", "a")
    _copy_check("cont", a, None)
    _room(ctx, "cont")
    return _new(ctx, lib.ggml_cont(ctx.ptr, a.ptr))


def _shape_arg(op: str, ne) -> list[int]:
    for n in ne:
        _need(isinstance(n, int) or hasattr(n, "__index__"), op, lambda: f"ne must be integers, got {ne}", TypeError)
    ne = [int(n) for n in ne]
    _need(all(n >= 0 for n in ne), op, lambda: f"ne must be non-negative, got {ne}")
    return ne


def _cont_nd(op: str, ctx, a, ne) -> Tensor:
    a = _t(a, op, "a")
    ne0, ne1, ne2, ne3 = _shape_arg(op, ne)
    _need(a.nelements == ne0 * ne1 * ne2 * ne3, op, lambda: f"{a.nelements} elements do not fit {[ne0, ne1, ne2, ne3]}")
    _copy_check(op, a, None)
    _room(ctx, op)
    return _new(ctx, lib.ggml_cont_4d(ctx.ptr, a.ptr, ne0, ne1, ne2, ne3))


def cont_1d(ctx, a, ne0):
    return _cont_nd("cont_1d", ctx, a, (ne0, 1, 1, 1))


def cont_2d(ctx, a, ne0, ne1):
    return _cont_nd("cont_2d", ctx, a, (ne0, ne1, 1, 1))


def cont_3d(ctx, a, ne0, ne1, ne2):
    return _cont_nd("cont_3d", ctx, a, (ne0, ne1, ne2, 1))


def cont_4d(ctx, a, ne0, ne1=1, ne2=1, ne3=1):
    return _cont_nd("cont_4d", ctx, a, (ne0, ne1, ne2, ne3))


def _reshape_nd(op: str, ctx, a, ne) -> Tensor:
    a = _t(a, op, "a")
    ne0, ne1, ne2, ne3 = _shape_arg(op, ne)
    _need(a.is_contiguous(), op, "a must be contiguous (use cont() first)")
    _need(a.nelements == ne0 * ne1 * ne2 * ne3, op, lambda: f"{a.nelements} elements cannot be reshaped to {[ne0, ne1, ne2, ne3]}")
    _room(ctx, op)
    return _new(ctx, lib.ggml_reshape_4d(ctx.ptr, a.ptr, ne0, ne1, ne2, ne3))


def reshape_1d(ctx, a, ne0):
    return _reshape_nd("reshape_1d", ctx, a, (ne0, 1, 1, 1))


def reshape_2d(ctx, a, ne0, ne1):
    return _reshape_nd("reshape_2d", ctx, a, (ne0, ne1, 1, 1))


def reshape_3d(ctx, a, ne0, ne1, ne2):
    return _reshape_nd("reshape_3d", ctx, a, (ne0, ne1, ne2, 1))


def reshape_4d(ctx, a, ne0, ne1=1, ne2=1, ne3=1):
    return _reshape_nd("reshape_4d", ctx, a, (ne0, ne1, ne2, ne3))


def reshape(ctx, a, b):
    """Reshape a to b's shape, like ggml_reshape."""
    b = _t(b, "reshape", "b")
    return _reshape_nd("reshape", ctx, a, b.ne)


def permute(ctx, a, axis0: int, axis1: int, axis2: int, axis3: int):
    """ggml_permute: source dim i goes to position axis_i."""
    a = _t(a, "permute", "a")
    axes = (axis0, axis1, axis2, axis3)
    _need(sorted(axes) == [0, 1, 2, 3], "permute", lambda: f"axes {axes} must be a permutation of 0, 1, 2, 3")
    _room(ctx, "permute")
    return _new(ctx, lib.ggml_permute(ctx.ptr, a.ptr, *axes))


def transpose(ctx, a):
    a = _t(a, "transpose", "a")
    _room(ctx, "transpose")
    return _new(ctx, lib.ggml_transpose(ctx.ptr, a.ptr))


def concat(ctx, a, b, dim: int):
    a, b = _t(a, "concat", "a"), _t(b, "concat", "b")
    _need(0 <= dim < MAX_DIMS, "concat", lambda: f"dim must be in 0..{MAX_DIMS - 1}, got {dim}")
    _need(a.type == b.type, "concat", lambda: f"a ({a.type.name}) and b ({b.type.name}) must have the same type", TypeError)
    if a.type not in (Type.F32, Type.I32, Type.F16, Type.BF16, Type.I16, Type.I8):
        _need(_contiguous_rows(a) and _contiguous_rows(b), "concat", lambda: f"{a.type.name} a and b must have contiguous rows")
    for d in range(MAX_DIMS):
        _need(d == dim or a.ne[d] == b.ne[d], "concat", lambda: f"a.ne[{d}] ({a.ne[d]}) must equal b.ne[{d}] ({b.ne[d]})")
    _room(ctx, "concat")
    return _new(ctx, lib.ggml_concat(ctx.ptr, a.ptr, b.ptr, dim))


def repeat(ctx, a, b):
    """Repeat a to b's shape."""
    a, b = _t(a, "repeat", "a"), _t(b, "repeat", "b")
    _need(_can_repeat(a, b), "repeat", lambda: f"b.ne {b.ne} must be a multiple of a.ne {a.ne} in every dim")
    _types(a, (Type.F32, Type.F16, Type.BF16, Type.I16, Type.I32, Type.I64), "repeat", "a")
    _need(_packed_rows(a), "repeat", "a must have contiguous rows (nb[0] == element size)")
    _room(ctx, "repeat")
    return _new(ctx, lib.ggml_repeat(ctx.ptr, a.ptr, b.ptr))


def pad(ctx, a, p0: int, p1: int = 0, p2: int = 0, p3: int = 0):
    a = _t(a, "pad", "a")
    _types(a, (Type.F32,), "pad", "a")
    _need(min(p0, p1, p2, p3) >= 0, "pad", "padding must be non-negative")
    _room(ctx, "pad")
    return _new(ctx, lib.ggml_pad(ctx.ptr, a.ptr, p0, p1, p2, p3))


def _view(op: str, ctx, a, ne: list[int], nb: list[int], offset: int) -> Tensor:
    a = _t(a, op, "a")
    _need(all(n >= 0 for n in ne), op, lambda: f"ne must be non-negative, got {ne}")
    _need(offset >= 0, op, lambda: f"offset must be non-negative, got {offset}")
    _need(ne[0] % types.block_size(a.type) == 0, op,
          lambda: f"ne[0] ({ne[0]}) must be a multiple of {a.type.name}'s block size {types.block_size(a.type)}")
    size = types.row_size(a.type, ne[0])
    for n in ne[1:]:
        size *= n
    _need(size == 0 or size + offset <= a.nbytes, op,
          lambda: f"the view ({size} bytes at offset {offset}) must lie inside a ({a.nbytes} bytes)")
    if all(n > 0 for n in ne):
        strides = [types.type_size(a.type)] + list(nb)
        span = offset + types.row_size(a.type, ne[0]) + builtins.sum((n - 1) * s for n, s in zip(ne[1:], strides[1:]))
        _need(span <= a.nbytes, op, lambda: f"the strides reach byte {span}, past the end of a ({a.nbytes} bytes)")
    _room(ctx, op)
    if len(ne) == 1:
        ptr = lib.ggml_view_1d(ctx.ptr, a.ptr, ne[0], offset)
    elif len(ne) == 2:
        ptr = lib.ggml_view_2d(ctx.ptr, a.ptr, ne[0], ne[1], nb[0], offset)
    elif len(ne) == 3:
        ptr = lib.ggml_view_3d(ctx.ptr, a.ptr, ne[0], ne[1], ne[2], nb[0], nb[1], offset)
    else:
        ptr = lib.ggml_view_4d(ctx.ptr, a.ptr, ne[0], ne[1], ne[2], ne[3], nb[0], nb[1], nb[2], offset)
    return _new(ctx, ptr)


def view_1d(ctx, a, ne0, offset=0):
    return _view("view_1d", ctx, a, [ne0], [], offset)


def view_2d(ctx, a, ne0, ne1, nb1, offset=0):
    return _view("view_2d", ctx, a, [ne0, ne1], [nb1], offset)


def view_3d(ctx, a, ne0, ne1, ne2, nb1, nb2, offset=0):
    return _view("view_3d", ctx, a, [ne0, ne1, ne2], [nb1, nb2], offset)


def view_4d(ctx, a, ne0, ne1, ne2, ne3, nb1, nb2, nb3, offset=0):
    return _view("view_4d", ctx, a, [ne0, ne1, ne2, ne3], [nb1, nb2, nb3], offset)


def view_nd(ctx, a, ne, nb, offset=0):
    """A view with explicit strides for every dim (nb[0] included), for views no ggml_view_Nd makes:
    ggml_view_4d of ne/nb[1:], then nb[0] and any widened ne set on the view, as llama.cpp's seed does
    with its overlapping conv windows."""
    ne, nb = [int(n) for n in ne], [int(n) for n in nb]
    _need(len(ne) == len(nb) == MAX_DIMS, "view_nd", lambda: f"ne and nb must have {MAX_DIMS} entries")
    a = _t(a, "view_nd", "a")
    _need(nb[0] >= a.element_size or ne[0] == 1, "view_nd", "nb[0] must be at least the element size")
    span = offset + a.element_size + builtins.sum((n - 1) * s for n, s in zip(ne, nb))
    _need(span <= a.nbytes, "view_nd", lambda: f"the view reaches byte {span}, past the end of a ({a.nbytes} bytes)")
    _room(ctx, "view_nd")
    v = _new(ctx, lib.ggml_view_4d(ctx.ptr, a.ptr, ne[0], 1, 1, 1, a.nb[1], a.nb[2], a.nb[3], offset))
    for i in range(MAX_DIMS):
        v.ptr.ne[i] = ne[i]
        v.ptr.nb[i] = nb[i]
    return v


def set_name(ctx, a, name: str):
    return _t(a, "set_name", "a").set_name(name)


__all__ = [n for n in dir() if not n.startswith("_") and n not in (
    "annotations", "builtins", "types", "ffi", "lib", "MAX_DIMS", "Tensor", "SortOrder", "Type")]
