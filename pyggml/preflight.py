"""The one check every compute entry point runs before ggml sees a graph.

`Runner`, `Backend.compute` and `Scheduler.compute` call `check(graph, ...)`; it raises
`GraphError` (or its subclass `Unsupported`) naming the node and the reason. It covers what
the op wrappers cannot know when a node is built, because it depends on where and with what
the graph runs:

- memory: every node and every tensor a node reads has data, from an allocation that is still
  current (an allocator that since gave its memory to another graph makes this one stale);
- a graph whose expand failed half-way, and empty (zero-element) nodes, which ggml's kernels
  do not handle;
- the CPU kernels' own rules (types, row strides): ggml-cpu says it supports every op and
  then aborts inside the kernel, on a worker thread, where no guard can catch it. These
  rules are CPU facts, so they apply only when a CPU device runs the graph (alone or inside
  a meta device); other backends answer `supports_op` themselves;
- row-index values of get_rows/set_rows that are graph inputs (read from their memory at
  every compute: they change between runs).

The structural part runs once per graph and node count (a reused graph pays it once); the
index values are read at every compute.
"""

from __future__ import annotations

import weakref

import numpy as np

from pyggml._native import ffi, lib
from pyggml.errors import GraphError, Unsupported
from pyggml.tensor import Tensor
from pyggml.types import Op, Type

_NULL = ffi.NULL
_FLOAT = {int(Type.F32), int(Type.F16), int(Type.BF16)}
_F32, _F16, _BF16, _I32, _I64 = (int(t) for t in (Type.F32, Type.F16, Type.BF16, Type.I32, Type.I64))
_VIEW_OPS = {int(Op.VIEW), int(Op.RESHAPE), int(Op.PERMUTE), int(Op.TRANSPOSE), int(Op.NONE)}



def _name(p) -> str:
    name = ffi.string(p.name).decode("utf-8", "replace")
    op = Op(p.op).name.lower()
    return f"{op} node {name!r}" if name else f"{op} node"


def _tname(t: int) -> str:
    return Type(t).name


def _nelements(p) -> int:
    return p.ne[0] * p.ne[1] * p.ne[2] * p.ne[3]


def _packed_rows(p) -> bool:
    return p.nb[0] == lib.ggml_type_size(p.type)


def _padded_1d(p) -> bool:
    return _packed_rows(p) and p.nb[2] == p.nb[1] * p.ne[1] and p.nb[3] == p.nb[2] * p.ne[2]


def _contiguous(p) -> bool:
    # ggml_is_contiguous skips dims of extent 1, the kernels also assert nb[0] == element size
    return bool(lib.ggml_is_contiguous(p)) and _packed_rows(p)


def _has_vec_dot(t: int) -> bool:
    tr = lib.ggml_get_type_traits_cpu(t)
    return tr != _NULL and tr.vec_dot != _NULL


def _has_from_float(t: int) -> bool:
    tr = lib.ggml_get_type_traits_cpu(t)
    return tr != _NULL and tr.from_float != _NULL


def _quantized(t: int) -> bool:
    return bool(lib.ggml_is_quantized(t))


# --- the CPU kernels' rules: op -> function(node) -> reason or None -------------------------------------
def _float_src0(p, allowed=_FLOAT, rows=_packed_rows):
    a = p.src[0]
    if a.type not in allowed:
        return f"the CPU kernel takes {'/'.join(sorted(_tname(t) for t in allowed))} input, got {_tname(a.type)}"
    if not rows(a):
        return "the CPU kernel needs an input with contiguous rows (nb[0] == element size; use cont() first)"
    return None


def _binary(p):
    a, b = p.src[0], p.src[1]
    if a.type not in _FLOAT or b.type not in _FLOAT:
        return f"the CPU kernel takes F32/F16/BF16 inputs, got {_tname(a.type)} and {_tname(b.type)}"
    if b.type != a.type and b.type != _F32:
        return f"the CPU kernel takes b of a's type or F32, got a {_tname(a.type)} and b {_tname(b.type)}"
    if not _packed_rows(a) or not _packed_rows(b):
        return "the CPU kernel needs inputs with contiguous rows (nb[0] == element size; use cont() first)"
    return None


def _mul_mat(p):
    a, b = p.src[0], p.src[1]
    if b.type not in _FLOAT:
        return f"the CPU kernel takes b as F32/F16/BF16, got {_tname(b.type)}"
    if not _has_vec_dot(a.type):
        return f"the CPU has no dot product for a of type {_tname(a.type)}"
    if not _packed_rows(a) or not _packed_rows(b):
        return "the CPU kernel needs a and b with contiguous rows (nb[0] == type size; use cont() first)"
    if lib.ggml_is_transposed(a):
        return "the CPU kernel cannot read a transposed a (use cont() first)"
    return None


def _copy(p):
    """ggml_compute_forward_dup: src0 -> the node (of the node's type)."""
    a, dst = p.src[0], p
    if _quantized(a.type):
        if dst.type not in (a.type, _F32):
            return f"quantized {_tname(a.type)} converts only to F32 or itself, not {_tname(dst.type)}"
        if not (_packed_rows(a) and a.ne[0] % lib.ggml_blck_size(a.type) == 0):
            return f"a quantized {_tname(a.type)} source needs contiguous rows of whole blocks"
        if dst.type == a.type and a.ne[0] != dst.ne[0] and not (_contiguous(a) and _contiguous(dst)):
            return "a quantized copy that changes the row length needs contiguous source and destination"
        if dst.type != a.type and not (_contiguous(a) and _contiguous(dst)):
            return "dequantizing copies need a contiguous source and destination"
    elif dst.type != a.type:
        if _quantized(dst.type):
            if not _has_from_float(dst.type):
                return f"the CPU cannot quantize into {_tname(dst.type)}"
            if a.type not in _FLOAT:
                return f"only F32/F16/BF16 quantize to {_tname(dst.type)}, not {_tname(a.type)}"
            if not (_packed_rows(a) and _contiguous(dst)):
                return "quantizing copies need a source with contiguous rows and a contiguous destination"
            if a.ne[0] % lib.ggml_blck_size(dst.type):
                return (f"the source rows ({a.ne[0]}) must be a multiple of {_tname(dst.type)}'s block size "
                        f"{lib.ggml_blck_size(dst.type)}")
        elif dst.type not in _CONVERSIONS.get(a.type, ()):
            return f"the CPU has no conversion from {_tname(a.type)} to {_tname(dst.type)}"
    if _quantized(dst.type) and not (_packed_rows(dst) and dst.ne[0] % lib.ggml_blck_size(dst.type) == 0):
        return f"a quantized {_tname(dst.type)} destination needs contiguous rows of whole blocks"
    return None


_CONVERSIONS = {_F32: (_F32, _F16, _BF16, _I32), _F16: (_F32, _F16, _BF16), _BF16: (_F32, _F16, _BF16),
                _I32: (_F32, _I32)}


def _soft_max(p):
    a, mask = p.src[0], p.src[1]
    if a.type != _F32 or not _contiguous(a):
        return "the CPU kernel takes a contiguous F32 input"
    if mask != _NULL and (mask.type not in (_F16, _F32) or not _contiguous(mask)):
        return "the CPU kernel takes a contiguous F16/F32 mask"
    return None


def _rope(p):
    a, pos = p.src[0], p.src[1]
    if a.type not in (_F32, _F16) or not _packed_rows(a):
        return "the CPU kernel takes F32/F16 input with contiguous rows"
    n_dims = ffi.cast("int32_t *", p.op_params)[1]
    if n_dims > a.ne[0]:
        return f"n_dims ({n_dims}) must not exceed a.ne[0] ({a.ne[0]})"
    if pos.type != _I32:
        return "pos must be I32"
    if p.src[2] != _NULL:
        ff = p.src[2]
        if ff.type != _F32 or not _contiguous(ff) or ff.ne[0] < n_dims // 2:
            return "freq_factors must be a contiguous F32 vector of at least n_dims/2 values"
    return None


def _get_rows(p):
    a = p.src[0]
    if not (a.type in (_F32, _F16, _BF16, _I32) or (_quantized(a.type) and lib.ggml_get_type_traits(a.type).to_float
                                                        != _NULL and a.type != int(Type.Q8_K))):
        return f"the CPU kernel reads rows of F32/F16/BF16/I32 or quantized types, not {_tname(a.type)}"
    if not _packed_rows(a):
        return "the CPU kernel needs a with contiguous rows"
    return None


def _set_rows(p):
    b, dst = p.src[0], p.src[2]
    if b.type not in (_F32, _F16):
        return f"the CPU kernel writes F32/F16 rows, got {_tname(b.type)}"
    if not (dst.type in _FLOAT or _quantized(dst.type) and _has_from_float(dst.type)):
        return f"the CPU kernel cannot convert rows into {_tname(dst.type)}"
    return None


def _ssm_conv(p):
    sx, c = p.src[0], p.src[1]
    if sx.type != _F32 or c.type != _F32:
        return "the CPU kernel takes F32 sx and c"
    if not (sx.nb[0] == 4 and sx.nb[1] == sx.ne[0] * 4) or not _contiguous(c):
        return "the CPU kernel needs sx with packed rows (nb[1] == ne[0]*4) and a contiguous c"
    return None


def _concat(p):
    a, b = p.src[0], p.src[1]
    if a.type not in (_F32, _I32, _F16, _BF16, int(Type.I16), int(Type.I8)):
        if not (_packed_rows(a) and _packed_rows(b)):
            return f"{_tname(a.type)} inputs need contiguous rows"
    return None


def _argmax(p):
    a = p.src[0]
    if a.type != _F32 or not _packed_rows(a):
        return "the CPU kernel takes F32 input with contiguous rows"
    return None


_CPU_RULES = {
    Op.ADD: _binary, Op.SUB: _binary, Op.MUL: _binary, Op.DIV: _binary,
    Op.SCALE: lambda p: _float_src0(p, {_F32, _BF16}, _contiguous),
    Op.CLAMP: lambda p: _float_src0(p, {_F32, _F16}, _padded_1d),
    Op.LEAKY_RELU: lambda p: _float_src0(p, {_F32, _F16}, _padded_1d),
    Op.UNARY: _float_src0, Op.SQR: _float_src0, Op.SQRT: _float_src0, Op.LOG: _float_src0,
    Op.SIN: _float_src0, Op.COS: _float_src0,
    Op.SUM: _float_src0,
    Op.SUM_ROWS: lambda p: _float_src0(p, {_F32}),
    Op.MEAN: lambda p: _float_src0(p, {_F32}),
    Op.ARGMAX: _argmax,
    Op.NORM: lambda p: _float_src0(p, {_F32}),
    Op.RMS_NORM: lambda p: _float_src0(p, {_F32}),
    Op.L2_NORM: lambda p: _float_src0(p, {_F32}),
    Op.SOFT_MAX: _soft_max,
    Op.DIAG_MASK_INF: lambda p: _float_src0(p, {_F32}, _contiguous),
    Op.ROPE: _rope,
    Op.MUL_MAT: _mul_mat,
    Op.SSM_CONV: _ssm_conv,
    Op.GET_ROWS: _get_rows,
    Op.SET_ROWS: _set_rows,
    Op.ARGSORT: lambda p: _float_src0(p, {_F32}, _padded_1d),
    Op.CPY: _copy, Op.DUP: _copy, Op.CONT: _copy,
    Op.REPEAT: lambda p: _float_src0(p, {_F32, _F16, _BF16, int(Type.I16), _I32}),
    Op.PAD: lambda p: _float_src0(p, {_F32}),
    Op.CONCAT: _concat,
}
# the rules of each op family's newer wrappers, one block per family (pyggml.ops.<family>)
def _glu(p):
    """GLU kernels: F32/F16/BF16, except SWIGLU_OAI (F32) and SWIGLU_CLAMP (F32/F16)."""
    kind = ffi.cast("int32_t *", p.op_params)[0]
    allowed = {3: {_F32}, 6: {_F32, _F16}}.get(kind, _FLOAT)
    return _float_src0(p, allowed)


def _add(p):
    """ADD with the result's type (add_cast): the CPU has kernels for a's type or, from F16/BF16, F32."""
    why = _binary(p)
    a, dst = p.src[0], p
    if why is None and dst.type != a.type and not (a.type in (_F16, _BF16) and p.src[1].type == _F32
                                                   and dst.type == _F32):
        return (f"the CPU kernel makes a {_tname(a.type)} result from {_tname(a.type)} + {_tname(p.src[1].type)}"
                f"{' (or F32 when b is F32)' if a.type != _F32 else ''}, not {_tname(dst.type)}")
    return why


def _add1(p):
    a, b = p.src[0], p.src[1]
    why = _float_src0(p)
    if why is None and b.type not in (a.type, _F32):
        return f"the CPU kernel takes b of a's type or F32, got a {_tname(a.type)} and b {_tname(b.type)}"
    return why


def _count_equal(p):
    if p.src[0].type != _I32 or p.src[1].type != _I32:
        return f"the CPU kernel takes I32 inputs, got {_tname(p.src[0].type)} and {_tname(p.src[1].type)}"
    if p.src[0].ne[2] > 1 or p.src[0].ne[3] > 1:  # docs/findings.md: it takes ne03/ne02 for ne02*ne01/ne01
        return "the CPU kernel counts 3-d and 4-d inputs wrongly (it indexes their rows wrongly): reshape to 2-d first"
    return None


def _acc_set(p):
    a, b = p.src[0], p.src[1]
    allowed = (_F32,) if p.op == Op.ACC else (_F32, _I32)
    if a.type not in allowed or b.type != a.type:
        return f"the CPU kernel takes a and b both {'/'.join(map(_tname, allowed))}, got {_tname(a.type)} and {_tname(b.type)}"
    if not _contiguous(a) or not _packed_rows(b):
        return "the CPU kernel needs a contiguous a and b with contiguous rows"
    return None


_CPU_RULES.update({  # elementwise, reductions
    Op.GLU: _glu,
    Op.ADD: _add,
    Op.ADD1: _add1,
    Op.FILL: lambda p: _float_src0(p, {_F32, _F16}, _contiguous),
    Op.COUNT_EQUAL: _count_equal,
    Op.TRI: lambda p: _float_src0(p, {_F32}, _contiguous),
    Op.DIAG: lambda p: _float_src0(p, {_F32}),
    Op.DIAG_MASK_ZERO: lambda p: _float_src0(p, {_F32}, _contiguous),
    Op.ROLL: lambda p: _float_src0(p, {_F32}),
    Op.CUMSUM: lambda p: _float_src0(p, {_F32}),
    Op.ACC: _acc_set,
    Op.SET: _acc_set,
    Op.TOP_K: lambda p: _float_src0(p, {_F32}, _padded_1d),  # rows found at i*nb01
    Op.GROUP_NORM: lambda p: _float_src0(p, {_F32}),
    Op.TIMESTEP_EMBEDDING: lambda p: _float_src0(p, {_F32}),
})
# --- matmul, attention: the kernels' rules -------------------------------------------------------------------
def _vec_dot_type(t: int) -> int:
    return lib.ggml_get_type_traits_cpu(t).vec_dot_type


def _has_to_float(t: int) -> bool:
    return lib.ggml_get_type_traits(t).to_float != _NULL


def _mul_mat_id(p):
    a, b = p.src[0], p.src[1]
    if not _has_vec_dot(a.type):
        return f"the CPU has no dot product for as of type {_tname(a.type)}"
    if b.type not in (_F32, _vec_dot_type(a.type)):  # b is converted only from F32
        return f"the CPU kernel takes b as F32 (or {_tname(_vec_dot_type(a.type))}) for as {_tname(a.type)}, got {_tname(b.type)}"
    if not _packed_rows(a) or not _packed_rows(b):
        return "the CPU kernel needs as and b with contiguous rows (nb[0] == type size; use cont() first)"
    return None


# out_prod's kernel switch: F32, F16 and the quantized types it dequantizes (not Q8_1 / Q8_K)
_OUT_PROD_QUANT = {int(getattr(Type, n)) for n in ("Q1_0", "Q2_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "MXFP4",
                                                   "NVFP4", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "TQ1_0", "TQ2_0",
                                                   "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ1_M", "IQ4_NL",
                                                   "IQ4_XS", "IQ3_S", "IQ2_S") if hasattr(Type, n)}


def _out_prod(p):
    a = p.src[0]
    if a.type not in _OUT_PROD_QUANT | {_F32, _F16}:
        return f"the CPU kernel takes a as F32, F16 or a dequantizable type, got {_tname(a.type)}"
    if not _packed_rows(a):
        return "the CPU kernel needs a with contiguous rows (nb[0] == type size; use cont() first)"
    return None  # b's type and the broadcast F16/quantized a cannot do are the CPU's supports_op


def _add_id(p):
    a, b = p.src[0], p.src[1]
    if a.type != _F32 or b.type != _F32:
        return f"the CPU kernel takes F32 a and b, got {_tname(a.type)} and {_tname(b.type)}"
    if not _packed_rows(a) or not _packed_rows(b):
        return "the CPU kernel needs a and b with contiguous rows (use cont() first)"
    return None


def _flash_attn(p):
    q, k, v, sinks = p.src[0], p.src[1], p.src[2], p.src[4]
    if q.type != _F32:  # the kernel reads q's rows as floats whatever their type
        return f"the CPU kernel takes q as F32, got {_tname(q.type)}"
    if not (_has_vec_dot(k.type) and _has_from_float(_vec_dot_type(k.type))):
        return f"the CPU kernel has no dot product for k of type {_tname(k.type)}"
    if v.type != _F32 and not _has_to_float(v.type):
        return f"the CPU kernel cannot read v of type {_tname(v.type)}"
    if not (_packed_rows(q) and _packed_rows(k) and _packed_rows(v)):
        return "the CPU kernel needs q, k and v with contiguous rows (nb[0] == type size; use cont() first)"
    if sinks != _NULL and not _contiguous(sinks):
        return "the CPU kernel reads the sinks as a contiguous vector"
    if ffi.cast("int32_t *", p.op_params)[3] not in (lib.GGML_PREC_DEFAULT, lib.GGML_PREC_F32):
        return "the CPU kernel accumulates only at the default or F32 precision"
    return None


_ROPE_MROPE, _ROPE_VISION = lib.GGML_ROPE_TYPE_MROPE, lib.GGML_ROPE_TYPE_VISION


def _rope_rows(p):
    """What the CPU's rope kernel asserts besides _rope's checks, and the odd rows it writes past."""
    a = p.src[0]
    params = ffi.cast("int32_t *", p.op_params)
    n_dims, mode = params[1], params[2]
    # the kernel copies the unrotated tail in pairs: an odd row's last pair reaches into the next row
    if a.ne[0] % 2:
        return f"the CPU kernel needs an even row length (a.ne[0] = {a.ne[0]}): it copies the unrotated tail in pairs"
    if mode & _ROPE_MROPE and sum(params[11 + i] for i in range(4)) > a.ne[0]:
        return f"the sections ({[params[11 + i] for i in range(4)]}) must not add up to more than a.ne[0] ({a.ne[0]})"
    if mode == _ROPE_VISION and 2 * n_dims != a.ne[0]:
        return f"VISION rope needs n_dims == a.ne[0] / 2, got n_dims {n_dims} for a.ne[0] {a.ne[0]}"
    return None


def _get_rel_pos(p):
    a = p.src[0]
    if a.type != _F16:  # a BF16 a's bits would be copied into the F16 result
        return f"the CPU kernel takes F16 input (its result is F16), got {_tname(a.type)}"
    if not _contiguous(a):
        return "the CPU kernel takes a contiguous input"
    return None


def _lightning_indexer(p):
    q, k, w, mask = p.src[0], p.src[1], p.src[2], p.src[3]
    if k.type != _F32 and not _has_to_float(k.type):
        return f"the CPU kernel cannot read k of type {_tname(k.type)}"
    if not all(_packed_rows(t) for t in (q, k, w, mask)):
        return "the CPU kernel needs q, k, weights and mask with contiguous rows (use cont() first)"
    return None



_CPU_RULES.update({  # matmul, attention
    Op.MUL_MAT_ID: lambda p: _mul_mat_id(p),
    Op.OUT_PROD: lambda p: _out_prod(p),
    Op.ADD_ID: lambda p: _add_id(p),
    Op.FLASH_ATTN_EXT: lambda p: _flash_attn(p),
    Op.ROPE: lambda p: _rope(p) or _rope_rows(p),
    Op.GET_REL_POS: lambda p: _get_rel_pos(p),
    Op.ADD_REL_POS: lambda p: _float_src0(p, {_F32}, _contiguous),
    Op.WIN_PART: lambda p: _float_src0(p, {_F32}, _contiguous),
    Op.WIN_UNPART: lambda p: _float_src0(p, {_F32}, _contiguous),
    Op.LIGHTNING_INDEXER: lambda p: _lightning_indexer(p),
})
_CPU_RULES.update({  # convolution
    # im2col's kernels switch on dst's type (F32: F32 data; F16: F16/F32 data) and read each channel's
    # plane as packed rows (row y at y * ne[0] elements)
    Op.IM2COL: lambda p: (f"the CPU kernel makes F32 or F16 columns, not {_tname(p.type)}" if p.type not in (_F32, _F16)
                          else _f32_rows(1, rows=lambda s: _packed_rows(s) and (p.op_params[6] != 1 or s.nb[1] == s.nb[0] * s.ne[0]),
                                         types=(_F32,) if p.type == _F32 else (_F32, _F16))(p)),
    Op.CONV_TRANSPOSE_1D: lambda p: _f32_rows(0, rows=_contiguous, types=(_F32, _F16))(p)
    or _f32_rows(1, rows=_contiguous)(p),
    Op.CONV_TRANSPOSE_2D: lambda p: _f32_rows(0, rows=_contiguous, types=(_F32, _F16))(p)
    or _f32_rows(1, rows=_contiguous)(p),
    Op.CONV_2D: lambda p: _f32_rows(0, rows=_contiguous, types=(_F32, _F16))(p) or _f32_rows(1)(p),
    Op.CONV_3D: lambda p: _f32_rows(0, rows=_contiguous, types=(_F32, _F16))(p) or _f32_rows(1, rows=lambda s: True)(p),
    Op.IM2COL_3D: lambda p: (f"the CPU kernel makes F32 or F16 columns, not {_tname(p.type)}" if p.type not in (_F32, _F16)
                             else _f32_rows(1)(p)),
    # whole contiguous tensors (WHCN) or channels innermost (CWHN, with the kernel laid out the same way)
    Op.CONV_2D_DW: lambda p: _f32_rows(0, rows=lambda s: True, types=(_F32, _F16))(p) or _f32_rows(1, rows=lambda s: True)(p)
    or (None if _contiguous(p.src[1]) else
        None if lib.ggml_is_contiguous_channels(p.src[1]) and p.src[0].nb[0] >= p.src[0].nb[2] and p.src[0].nb[1] >= p.src[0].nb[0]
        else "the CPU kernel takes contiguous data, or channels innermost (CWHN) with a kernel laid out alike"),
    # the pooling kernels walk the data as one packed block of rows
    Op.POOL_1D: lambda p: _f32_rows(0, rows=_contiguous, types=(_F32, _F16))(p),
    Op.POOL_2D: lambda p: _f32_rows(0, rows=_contiguous, types=(_F32, _F16))(p),
})
_CPU_RULES.update({  # recurrent
    # the kernels switch on the first source's type only and read every other source as F32
    Op.SSM_SCAN: lambda p: next((f"the CPU kernel takes F32 s, x, dt, A, B and C, got {_tname(p.src[i].type)}"
                                 for i in range(6) if p.src[i].type != _F32), None)
    or (p.src[6].nb[0] != 4 and "the CPU kernel needs packed ids (nb[0] == 4)") or None,
    Op.RWKV_WKV6: lambda p: next((f"the CPU kernel takes F32 inputs, got {_tname(p.src[i].type)}"
                                  for i in range(6) if p.src[i].type != _F32), None),
    Op.GATED_LINEAR_ATTN: lambda p: next((f"the CPU kernel takes F32 inputs, got {_tname(p.src[i].type)}"
                                          for i in range(5) if p.src[i].type != _F32), None),
    # the SIMD kernel steps over each head's rows GGML_F32_STEP floats at a time with no tail loop:
    # another head size reads and writes past the rows (and past the result)
    Op.RWKV_WKV7: lambda p: next((f"the CPU kernel takes F32 inputs, got {_tname(p.src[i].type)}"
                                  for i in range(7) if p.src[i].type != _F32), None) or next(
        (f"the CPU kernel needs a head size (S = {p.src[2].ne[0]}) that is a multiple of {step} (its SIMD step)"
         for step in [1 if lib.ggml_cpu_has_sve() or lib.ggml_cpu_has_riscv_v() else 64 if lib.ggml_cpu_has_avx512()
                      else 32 if lib.ggml_cpu_has_avx() or lib.ggml_cpu_has_sse3() or lib.ggml_cpu_has_vsx()
                      else 16 if lib.ggml_cpu_has_neon() or lib.ggml_cpu_has_wasm_simd() else 64]
         if p.src[2].ne[0] % step), None),
})
def _f32_rows(*srcs, rows=_packed_rows, types=(_F32,)):
    """A rule: the sources at these indices have one of `types` and rows as `rows` wants."""
    def rule(p):
        for i in srcs:
            s = p.src[i]
            if s.type not in types:
                return (f"the CPU kernel takes {'/'.join(_tname(t) for t in types)} src{i}, "
                        f"got {_tname(s.type)}")
            if not rows(s):
                return f"the CPU kernel needs src{i} {'contiguous' if rows is _contiguous else 'with contiguous rows'}"
        return None
    return rule


def _silu_back(p):
    if p.src[1].type != p.src[0].type:  # the F16 kernel reads both as F16
        return f"the CPU kernel takes x of the gradient's type, got {_tname(p.src[0].type)} and {_tname(p.src[1].type)}"
    return _f32_rows(0, 1, rows=_padded_1d, types=(_F32, _F16))(p)


def _get_rows_back(p):
    why = _f32_rows(0, types=(_F32, _F16))(p) or _f32_rows(1, rows=_contiguous, types=(_I32,))(p)
    if why:
        return why
    # the kernel asserts every index is a row of the result; pyggml's per-run index check (_index_inputs)
    # does not know this op, so the values the index holds now are checked here
    v = _read(p.src[1])
    if v is not None and v.size and (int(v.min()) < 0 or int(v.max()) >= p.ne[1]):
        return f"index holds {int(v.min())}..{int(v.max())}, outside the {p.ne[1]} rows of the result"
    return None


def _soft_max_back(p):
    if ffi.cast("float *", p.op_params)[1] != 0:
        return "the CPU kernel has no ALiBi (max_bias must be 0)"
    return _f32_rows(0, 1, rows=_contiguous)(p)


def _opt_step(*others):
    """opt_step_*: the kernel reads every tensor at the parameter's byte offsets."""
    def rule(p):
        a = p.src[0]
        why = _f32_rows(0, *others)(p)
        if why:
            return why
        for i in others:
            if tuple(p.src[i].nb) != tuple(a.nb):
                return f"the CPU kernel reads src{i} with the parameter's strides {tuple(a.nb)}, got {tuple(p.src[i].nb)}"
        params = p.src[1 + len(others)]
        if not _contiguous(params):
            return "the CPU kernel reads the optimizer parameters as a contiguous F32 vector"
        return None
    return rule


_CPU_RULES.update({  # backward ops, training
    Op.SILU_BACK: _silu_back,
    Op.RMS_NORM_BACK: _f32_rows(0, 1),
    Op.REPEAT_BACK: _f32_rows(0),
    Op.GET_ROWS_BACK: _get_rows_back,
    Op.SOFT_MAX_BACK: _soft_max_back,
    Op.ROPE_BACK: _rope,
    Op.IM2COL_BACK: lambda p: _f32_rows(0, rows=_contiguous)(p) or _f32_rows(1, rows=lambda s: True, types=(_F32, _F16))(p),
    Op.POOL_2D_BACK: _f32_rows(0, 1, rows=_contiguous),
    Op.CROSS_ENTROPY_LOSS: _f32_rows(0, 1, rows=_padded_1d),
    Op.CROSS_ENTROPY_LOSS_BACK: _f32_rows(0, 1, 2, rows=_contiguous),
    Op.OPT_STEP_ADAMW: _opt_step(1, 2, 3),
    Op.OPT_STEP_SGD: _opt_step(1),
})
_CPU_RULES.update({  # movement
})
_CPU_RULES_BY_OP = {int(k): v for k, v in _CPU_RULES.items()}


# --- the checks ------------------------------------------------------------------------------------------
def once(graph, what: str, compute):
    """compute() once per graph and node count (what it looks at does not change otherwise):
    allocating a reused graph, as every Runner.run does, walks it once, not at every run."""
    st = _state(graph)
    n = graph.n_nodes
    done = st.marks.get(what)
    if done is not None and done[0] == n:
        return done[1]
    value = compute()
    st.marks[what] = (n, value)
    return value


def leaf_count(graph) -> int:
    return once(graph, "leafs", lambda: len(graph.leafs()))


def check_placeable(graph):
    """A scheduler places a tensor without memory only if it is an input or something computes it:
    a leaf that is neither has no backend, and ggml's allocator asserts."""
    once(graph, "placeable", lambda: _placeable(_nodes(graph)))


def _placeable(nodes):
    # a leaf a node views (cpy's destination, set_rows' target) is placed with that node
    viewed = {int(ffi.cast("uintptr_t", p.view_src)) for p in nodes if p.view_src != _NULL}
    for p in nodes:
        for s in p.src:
            if s != _NULL and s.op == lib.GGML_OP_NONE and s.data == _NULL and s.view_src == _NULL \
                    and not s.flags & lib.GGML_TENSOR_FLAG_INPUT and int(ffi.cast("uintptr_t", s)) not in viewed:
                name = ffi.string(s.name).decode("utf-8", "replace") or "(unnamed)"
                raise GraphError(f"leaf {name} has no memory and is not an input: mark it with set_input() "
                                 "(or input=True), or allocate it on a backend first")


def check_allocatable(graph):
    """What must hold before an allocator sees the graph (ggml's allocators assert on empty tensors)."""
    if graph.broken:
        raise GraphError(f"the graph must not be allocated or computed: {graph.broken}")
    if graph.n_nodes == 0:  # ggml's allocator asserts on a graph of leafs only
        raise GraphError("the graph has no nodes to compute (it holds only leafs: inputs or weights)")
    once(graph, "allocatable", lambda: _structure(_nodes(graph), _NEVER))


def _structure(nodes, on_cpu):
    for p in nodes:
        if _nelements(p) == 0:
            raise GraphError(f"compute: {_name(p)} has no elements (ne={tuple(p.ne)}); "
                             "ggml's kernels do not handle empty tensors")
        for s in p.src:
            if s != _NULL and _nelements(s) == 0:
                raise GraphError(f"compute: {_name(p)} reads an empty tensor (ne={tuple(s.ne)})")
        if on_cpu(p):
            # ops without rules here are ones pyggml has no wrapper for: built through the raw
            # layer, whose contract is ggml's own
            rule = _CPU_RULES_BY_OP.get(p.op)
            why = rule(p) if rule is not None else None
            if why:
                raise GraphError(f"compute: {_name(p)}: {why}")


def _supported(nodes, backend):
    bad = [p for p in nodes if p.op != lib.GGML_OP_NONE and not lib.ggml_backend_supports_op(backend.ptr, p)]
    if bad:
        names = ", ".join(f"{Op(p.op).name}({ffi.string(p.name).decode('utf-8', 'replace')})" for p in bad[:5])
        raise Unsupported(f"compute: {backend.name} does not support {len(bad)} node(s): {names}")


def _memory(nodes):
    for p in nodes:
        for t in (p, *p.src):
            if t != _NULL and t.data == _NULL:
                raise GraphError(f"compute: {_name(p)}: a tensor it uses has no memory; allocate the graph first")


# Vulkan binds a tensor at an offset aligned to the device's minStorageBufferOffsetAlignment; only
# the shaders of these ops take the rest as a push constant (ggml-vulkan: init_pushconst_tensor_offsets
# specializations, allow_misalign). Any other op on a misaligned view asserts in ggml_vk_tensor_subbuffer
# or init_pushconst_tensor_offsets, which ends the process.
_VK_MISALIGN_OK = {int(o) for o in (
    Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.ADD1, Op.GET_ROWS, Op.GET_ROWS_BACK, Op.SET_ROWS, Op.RMS_NORM,
    Op.UNARY, Op.GLU, Op.SCALE, Op.SQR, Op.SQRT, Op.SIN, Op.COS, Op.LOG, Op.TRI, Op.DIAG, Op.CLAMP, Op.PAD,
    Op.PAD_REFLECT_1D, Op.ROLL, Op.REPEAT, Op.REPEAT_BACK, Op.CPY, Op.DUP, Op.CONT, Op.NORM, Op.L2_NORM,
    Op.LEAKY_RELU, Op.SUM, Op.SUM_ROWS, Op.MEAN, Op.CUMSUM, Op.CONCAT, Op.UPSCALE, Op.ROPE, Op.IM2COL_3D)}


def _vk_nested_view(p):
    # acc.comp / set: b's element is found by dividing a's flat index by the view's strides, which only
    # works when they nest (docs/findings.md)
    es = lib.ggml_type_size(p.type)
    nb1, nb2, nb3 = (ffi.cast("int32_t *", p.op_params)[i] for i in range(3))
    b = p.src[1]
    if not (b.ne[0] * es <= nb1 and b.ne[1] * nb1 <= nb2 and b.ne[2] * nb2 <= nb3):
        return "its shader assumes the view's strides nest (ne10*size <= nb1, ne11*nb1 <= nb2, ne12*nb2 <= nb3)"
    return None


def _vk_group_norm(p):
    n_groups = ffi.cast("int32_t *", p.op_params)[0]
    ne2 = p.src[0].ne[2]
    size = -(-ne2 // n_groups)
    if ne2 % size:  # docs/findings.md: the last, shorter group takes channels past its own
        return f"its shader needs groups of equal size ({ne2} channels in {n_groups} groups)"
    return None


def _vk_mul_mat(p):
    # docs/findings.md: a quantized a times a non-contiguous b ended the process (SIGSEGV) on lavapipe for
    # Q2_K, Q4_K, Q5_K, Q6_K and TQ2_0 (not Q3_K, Q4_0, Q8_0, IQ4_NL, TQ1_0): refused for every quantized a
    if lib.ggml_is_quantized(p.src[0].type) and not lib.ggml_is_contiguous(p.src[1]):
        return "a quantized a times a non-contiguous b crashed it (make b contiguous with cont first)"
    return None


# what Vulkan computes wrongly or crashes on though supports_op says yes: refused as unsupported
_VK_RULES = {int(Op.ACC): _vk_nested_view, int(Op.SET): _vk_nested_view, int(Op.GROUP_NORM): _vk_group_norm,
             int(Op.MUL_MAT): _vk_mul_mat}


def _vulkan_aligned(nodes, on_vulkan):
    for p in nodes:
        if p.op in _VIEW_OPS or not on_vulkan(p):
            continue
        rule = _VK_RULES.get(p.op)
        why = rule(p) if rule is not None else None
        if why:
            raise Unsupported(f"compute: {_name(p)}: Vulkan does not compute {Op(p.op).name} here: {why}")
        if p.op in _VK_MISALIGN_OK:
            continue
        for t in (p, *p.src):
            if t == _NULL or t.buffer == _NULL or t.data == _NULL:
                continue
            align = lib.ggml_backend_buffer_get_alignment(t.buffer)
            offset = int(ffi.cast("uintptr_t", t.data)) - int(ffi.cast("uintptr_t", lib.ggml_backend_buffer_get_base(t.buffer)))
            if align > 1 and offset % align:
                name = ffi.string(t.name).decode("utf-8", "replace") or "(unnamed)"
                raise Unsupported(f"compute: {_name(p)}: Vulkan computes {Op(p.op).name} only from tensors at offsets "
                                 f"aligned to {align} bytes, and {name} is {offset % align} bytes past one "
                                 "(a view: make it contiguous with cont first)")


def index_inputs(graph) -> list:
    """(index tensor, rows it addresses, op) of the index-reading ops (get_rows, set_rows, get_rows_back,
    the ids of ssm_scan, mul_mat_id and add_id) whose index the graph does not compute.
    A scheduler rewires the nodes to its own copies of the inputs (filled only during compute),
    so it records this list before it allocates the graph (graph.index_inputs)."""
    return _index_inputs(_nodes(graph))


def _index_inputs(nodes) -> list:
    computed = {int(ffi.cast("uintptr_t", p)) for p in nodes if p.op not in _VIEW_OPS}
    out = []
    for p in nodes:
        if p.op == Op.GET_ROWS:
            index, n_rows, what = p.src[1], p.src[0].ne[1], "get_rows"
        elif p.op == Op.SET_ROWS:
            index, n_rows, what = p.src[1], p.src[2].ne[1], "set_rows"
        elif p.op == Op.GET_ROWS_BACK:  # rows of the result
            index, n_rows, what = p.src[1], p.ne[1], "get_rows_back"
        elif p.op == Op.SSM_SCAN:  # ids: the row of the state each sequence starts from
            index, n_rows, what = p.src[6], p.src[0].ne[3], "ssm_scan"
        elif p.op == Op.MUL_MAT_ID:  # ids: which of the n_as matrices (the CPU checks with assert() only)
            index, n_rows, what = p.src[2], p.src[0].ne[2], "mul_mat_id"
        elif p.op == Op.ADD_ID:  # ids: which row of b
            index, n_rows, what = p.src[2], p.src[1].ne[1], "add_id"
        else:
            continue
        root = index
        while root.view_src != _NULL:
            root = root.view_src
        if int(ffi.cast("uintptr_t", root)) not in computed and int(ffi.cast("uintptr_t", index)) not in computed:
            out.append((index, n_rows, what))
    return out


def _index_values(index_inputs):
    """An index outside the rows it addresses aborts inside ggml (get_rows, set_rows) or reads
    memory that is not the tensor's (get_rows_back, ssm_scan)."""
    for index, n_rows, what in index_inputs:
        v = _read(index)
        if v is None or not v.size:
            continue
        lo, hi = int(v.min()), int(v.max())
        if lo < 0 or hi >= n_rows:
            name = ffi.string(index.name).decode("utf-8", "replace") or "(unnamed)"
            raise GraphError(f"{what}: index {name} holds {lo}..{hi}, outside the {n_rows} rows it addresses")


def _read(p) -> np.ndarray | None:
    if p.data == _NULL:
        return None
    t = Tensor(p, None)
    try:
        if lib.ggml_is_contiguous(p) or t.is_host:
            return t.numpy()
    except ValueError:
        pass
    return None


def _ALWAYS(p):
    return True


def _NEVER(p):
    return False


class _State:
    """What is known of one graph: structure checked per compute path and node count (and the
    allocation checks of once); memory checked
    for (allocation, node count); its index inputs."""
    __slots__ = ("marks", "memory", "index_inputs", "__weakref__")

    def __init__(self):
        self.marks, self.memory, self.index_inputs = {}, None, []


def _state(graph) -> _State:
    st = _states.get(graph)
    if st is None:
        st = _states[graph] = _State()
    return st


def _nodes(graph) -> list:
    return [lib.ggml_graph_node(graph.ptr, i) for i in range(graph.n_nodes)]


def check(graph, *, on_cpu, key, backend=None, on_vulkan=False):
    """Raise GraphError unless `graph` can be computed now. on_cpu(node): a CPU device computes
    that node (True/False for all). `key` names the compute path (a backend, a scheduler):
    the structural check is cached per key and node count. `backend`: the one backend that
    computes every node (Backend.compute), whose supports_op is asked with the structure.
    on_vulkan(node): a Vulkan device computes that node (its tensors' alignment is checked)."""
    if on_cpu is True or on_cpu is False:
        on_cpu = _ALWAYS if on_cpu else _NEVER
    if on_vulkan is True or on_vulkan is False:
        on_vulkan = _ALWAYS if on_vulkan else _NEVER
    st = _state(graph)
    n = graph.n_nodes
    nodes = None
    if graph.broken:
        raise GraphError(f"compute: the graph must not be computed: {graph.broken}")
    path, version = key if isinstance(key, tuple) else (key, None)
    if st.marks.get(path) != (version, n):  # one entry per compute path: constant memory over reruns
        nodes = _nodes(graph)
        _structure(nodes, on_cpu)
        if backend is not None:
            _supported(nodes, backend)
        st.index_inputs = _index_inputs(nodes)
        st.memory = None
        st.marks[path] = (version, n)
    alloc = graph.allocation
    if alloc is not None and alloc[0].generation != alloc[1]:
        raise GraphError("compute: the graph's memory was since given to another graph by the same allocator; "
                         "allocate this graph again")
    if st.memory != (alloc, n):
        nodes = nodes if nodes is not None else _nodes(graph)
        _memory(nodes)
        _vulkan_aligned(nodes, on_vulkan)
        st.memory = (alloc, n)
    if alloc is not None:
        alloc[0].check_written()
    recorded = graph.index_inputs
    _index_values(recorded if recorded is not None else st.index_inputs)


_states: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
