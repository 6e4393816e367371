"""The CPU kernels' rules: ggml-cpu says it supports every op and then asserts inside the kernel, on a
worker thread, where no guard can catch it (the process ends), or computes a wrong answer. These are
CPU facts, so they apply only where a CPU device computes the node (alone or inside a meta device);
other backends answer supports_op themselves.

Each rule is registered in CPU_RULES with the op(s) it checks, why it exists and the test that covers
it; an op may have several rules, which run in order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyggml._native import ffi, lib
from pyggml.errors import GraphError
from pyggml.preflight.core import RuleTable, name, read
from pyggml.types import Op, Type

_NULL = ffi.NULL
_FLOAT = {int(Type.F32), int(Type.F16), int(Type.BF16)}
_F32, _F16, _BF16, _I32, _I64 = (int(t) for t in (Type.F32, Type.F16, Type.BF16, Type.I32, Type.I64))


def _tname(t: int) -> str:
    return Type(t).name


def _packed_rows(p: Any) -> bool:
    return p.nb[0] == lib.ggml_type_size(p.type)


def _padded_1d(p: Any) -> bool:
    return _packed_rows(p) and p.nb[2] == p.nb[1] * p.ne[1] and p.nb[3] == p.nb[2] * p.ne[2]


def _contiguous(p: Any) -> bool:
    """Every stride the one a new tensor of this shape has. ggml_is_contiguous leaves the stride of a dim of
    extent 1 free (a permute gives such strides), but the kernels that assume contiguous data walk it as
    ggml_nrows rows of nb[1] (pool_1d, soft_max_back) or as planes of nb[2] up to ggml_nbytes (pool_2d, which
    then writes planes past its result: docs/findings.md 36); they also assert nb[0] == element size."""
    if not _packed_rows(p):
        return False
    nb = lib.ggml_row_size(p.type, p.ne[0])
    for i in range(1, 4):
        if p.nb[i] != nb:
            return False
        nb *= p.ne[i]
    return True


def _has_vec_dot(t: int) -> bool:
    tr = lib.ggml_get_type_traits_cpu(t)
    return tr != _NULL and tr.vec_dot != _NULL


def _has_from_float(t: int) -> bool:
    tr = lib.ggml_get_type_traits_cpu(t)
    return tr != _NULL and tr.from_float != _NULL


def _quantized(t: int) -> bool:
    return bool(lib.ggml_is_quantized(t))


# --- the checks, by op family ---------------------------------------------------------------------
def _float_src0(p: Any, allowed: set[int] = _FLOAT, rows: Callable[[Any], bool] = _packed_rows) -> str | None:
    a = p.src[0]
    if a.type not in allowed:
        return f"the CPU kernel takes {'/'.join(sorted(_tname(t) for t in allowed))} input, got {_tname(a.type)}"
    if not rows(a):
        return "the CPU kernel needs an input with contiguous rows (nb[0] == element size; use cont() first)"
    return None


def _binary(p: Any) -> str | None:
    a, b = p.src[0], p.src[1]
    if a.type not in _FLOAT or b.type not in _FLOAT:
        return f"the CPU kernel takes F32/F16/BF16 inputs, got {_tname(a.type)} and {_tname(b.type)}"
    if b.type != a.type and b.type != _F32:
        return f"the CPU kernel takes b of a's type or F32, got a {_tname(a.type)} and b {_tname(b.type)}"
    if not _packed_rows(a) or not _packed_rows(b):
        return "the CPU kernel needs inputs with contiguous rows (nb[0] == element size; use cont() first)"
    return None


def _mul_mat(p: Any) -> str | None:
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


def _copy(p: Any) -> str | None:
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
                return (
                    f"the source rows ({a.ne[0]}) must be a multiple of {_tname(dst.type)}'s block size "
                    f"{lib.ggml_blck_size(dst.type)}"
                )
        elif dst.type not in _CONVERSIONS.get(a.type, ()):
            return f"the CPU has no conversion from {_tname(a.type)} to {_tname(dst.type)}"
    if _quantized(dst.type) and not (_packed_rows(dst) and dst.ne[0] % lib.ggml_blck_size(dst.type) == 0):
        return f"a quantized {_tname(dst.type)} destination needs contiguous rows of whole blocks"
    return None


_CONVERSIONS = {
    _F32: (_F32, _F16, _BF16, _I32),
    _F16: (_F32, _F16, _BF16),
    _BF16: (_F32, _F16, _BF16),
    _I32: (_F32, _I32),
}


def _soft_max(p: Any) -> str | None:
    a, mask = p.src[0], p.src[1]
    if a.type != _F32 or not _contiguous(a):
        return "the CPU kernel takes a contiguous F32 input"
    if mask != _NULL and (mask.type not in (_F16, _F32) or not _contiguous(mask)):
        return "the CPU kernel takes a contiguous F16/F32 mask"
    return None


def _rope(p: Any) -> str | None:
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


def _get_rows(p: Any) -> str | None:
    a = p.src[0]
    if not (
        a.type in (_F32, _F16, _BF16, _I32)
        or (_quantized(a.type) and lib.ggml_get_type_traits(a.type).to_float != _NULL and a.type != int(Type.Q8_K))
    ):
        return f"the CPU kernel reads rows of F32/F16/BF16/I32 or quantized types, not {_tname(a.type)}"
    if not _packed_rows(a):
        return "the CPU kernel needs a with contiguous rows"
    return None


def _set_rows(p: Any) -> str | None:
    b, dst = p.src[0], p.src[2]
    if b.type not in (_F32, _F16):
        return f"the CPU kernel writes F32/F16 rows, got {_tname(b.type)}"
    if not (dst.type in _FLOAT or _quantized(dst.type) and _has_from_float(dst.type)):
        return f"the CPU kernel cannot convert rows into {_tname(dst.type)}"
    return None


def _ssm_conv(p: Any) -> str | None:
    sx, c = p.src[0], p.src[1]
    if sx.type != _F32 or c.type != _F32:
        return "the CPU kernel takes F32 sx and c"
    if not (sx.nb[0] == 4 and sx.nb[1] == sx.ne[0] * 4) or not _contiguous(c):
        return "the CPU kernel needs sx with packed rows (nb[1] == ne[0]*4) and a contiguous c"
    return None


def _concat(p: Any) -> str | None:
    a, b = p.src[0], p.src[1]
    if a.type not in (_F32, _I32, _F16, _BF16, int(Type.I16), int(Type.I8)):
        if not (_packed_rows(a) and _packed_rows(b)):
            return f"{_tname(a.type)} inputs need contiguous rows"
    return None


def _argmax(p: Any) -> str | None:
    a = p.src[0]
    if a.type != _F32 or not _packed_rows(a):
        return "the CPU kernel takes F32 input with contiguous rows"
    return None


def _xielu(p: Any) -> str | None:
    """XIELU's kernel (apply_unary_op_functor) asserts ggml_is_contiguous_1 of its input: rows packed and
    dims 2 and 3 packed after dim 1 (a permuted input with ne0 in place is not enough, as it is for the
    other unary kernels)."""
    if lib.ggml_get_unary_op(p) == lib.GGML_UNARY_OP_XIELU and not lib.ggml_is_contiguous_1(p.src[0]):
        return (
            "the CPU's xielu kernel needs an input contiguous above its rows (ggml_is_contiguous_1; use cont() first)"
        )
    return None


def _glu(p: Any) -> str | None:
    """GLU kernels: F32/F16/BF16, except SWIGLU_OAI (F32) and SWIGLU_CLAMP (F32/F16)."""
    kind = ffi.cast("int32_t *", p.op_params)[0]
    allowed = {3: {_F32}, 6: {_F32, _F16}}.get(kind, _FLOAT)
    return _float_src0(p, allowed)


def _add_result_type(p: Any) -> str | None:
    """ADD with the result's type (add_cast): the CPU has kernels for a's type or, from F16/BF16, F32.
    Runs after _binary, which checks the inputs."""
    a, dst = p.src[0], p
    if dst.type != a.type and not (a.type in (_F16, _BF16) and p.src[1].type == _F32 and dst.type == _F32):
        return (
            f"the CPU kernel makes a {_tname(a.type)} result from {_tname(a.type)} + {_tname(p.src[1].type)}"
            f"{' (or F32 when b is F32)' if a.type != _F32 else ''}, not {_tname(dst.type)}"
        )
    return None


def _add1(p: Any) -> str | None:
    a, b = p.src[0], p.src[1]
    why = _float_src0(p)
    if why is None and b.type not in (a.type, _F32):
        return f"the CPU kernel takes b of a's type or F32, got a {_tname(a.type)} and b {_tname(b.type)}"
    return why


def _count_equal(p: Any) -> str | None:
    if p.src[0].type != _I32 or p.src[1].type != _I32:
        return f"the CPU kernel takes I32 inputs, got {_tname(p.src[0].type)} and {_tname(p.src[1].type)}"
    if p.src[0].ne[2] > 1 or p.src[0].ne[3] > 1:  # docs/findings.md: it takes ne03/ne02 for ne02*ne01/ne01
        return "the CPU kernel counts 3-d and 4-d inputs wrongly (it indexes their rows wrongly): reshape to 2-d first"
    return None


def _acc_set(p: Any) -> str | None:
    a, b = p.src[0], p.src[1]
    allowed = (_F32,) if p.op == Op.ACC else (_F32, _I32)
    if a.type not in allowed or b.type != a.type:
        return f"the CPU kernel takes a and b both {'/'.join(map(_tname, allowed))}, got {_tname(a.type)} and {_tname(b.type)}"
    if not _contiguous(a) or not _packed_rows(b):
        return "the CPU kernel needs a contiguous a and b with contiguous rows"
    return None


def _vec_dot_type(t: int) -> int:
    return lib.ggml_get_type_traits_cpu(t).vec_dot_type


def _has_to_float(t: int) -> bool:
    return lib.ggml_get_type_traits(t).to_float != _NULL


def _mul_mat_id(p: Any) -> str | None:
    a, b = p.src[0], p.src[1]
    if not _has_vec_dot(a.type):
        return f"the CPU has no dot product for as of type {_tname(a.type)}"
    if b.type not in (_F32, _vec_dot_type(a.type)):  # b is converted only from F32
        return f"the CPU kernel takes b as F32 (or {_tname(_vec_dot_type(a.type))}) for as {_tname(a.type)}, got {_tname(b.type)}"
    if not _packed_rows(a) or not _packed_rows(b):
        return "the CPU kernel needs as and b with contiguous rows (nb[0] == type size; use cont() first)"
    return None


# out_prod's kernel switch: F32, F16 and the quantized types it dequantizes (not Q8_1 / Q8_K)
_OUT_PROD_QUANT = {
    int(getattr(Type, n))
    for n in (
        "Q1_0",
        "Q2_0",
        "Q4_0",
        "Q4_1",
        "Q5_0",
        "Q5_1",
        "Q8_0",
        "MXFP4",
        "NVFP4",
        "Q2_K",
        "Q3_K",
        "Q4_K",
        "Q5_K",
        "Q6_K",
        "TQ1_0",
        "TQ2_0",
        "IQ2_XXS",
        "IQ2_XS",
        "IQ3_XXS",
        "IQ1_S",
        "IQ1_M",
        "IQ4_NL",
        "IQ4_XS",
        "IQ3_S",
        "IQ2_S",
    )
    if hasattr(Type, n)
}


def _out_prod(p: Any) -> str | None:
    a = p.src[0]
    if a.type not in _OUT_PROD_QUANT | {_F32, _F16}:
        return f"the CPU kernel takes a as F32, F16 or a dequantizable type, got {_tname(a.type)}"
    if not _packed_rows(a):
        return "the CPU kernel needs a with contiguous rows (nb[0] == type size; use cont() first)"
    return None  # b's type and the broadcast F16/quantized a cannot do are the CPU's supports_op


def _add_id(p: Any) -> str | None:
    a, b = p.src[0], p.src[1]
    if a.type != _F32 or b.type != _F32:
        return f"the CPU kernel takes F32 a and b, got {_tname(a.type)} and {_tname(b.type)}"
    if not _packed_rows(a) or not _packed_rows(b):
        return "the CPU kernel needs a and b with contiguous rows (use cont() first)"
    return None


def _flash_attn(p: Any) -> str | None:
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


def _rope_rows(p: Any) -> str | None:
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


def _get_rel_pos(p: Any) -> str | None:
    a = p.src[0]
    if a.type != _F16:  # a BF16 a's bits would be copied into the F16 result
        return f"the CPU kernel takes F16 input (its result is F16), got {_tname(a.type)}"
    if not _contiguous(a):
        return "the CPU kernel takes a contiguous input"
    return None


def _lightning_indexer(p: Any) -> str | None:
    q, k, w, mask = p.src[0], p.src[1], p.src[2], p.src[3]
    if k.type != _F32 and not _has_to_float(k.type):
        return f"the CPU kernel cannot read k of type {_tname(k.type)}"
    if not all(_packed_rows(t) for t in (q, k, w, mask)):
        return "the CPU kernel needs q, k, weights and mask with contiguous rows (use cont() first)"
    return None


def _f32_rows(
    *srcs: int, rows: Callable[[Any], bool] = _packed_rows, types: tuple[int, ...] = (_F32,)
) -> Callable[[Any], str | None]:
    """A rule: the sources at these indices have one of `types` and rows as `rows` wants."""

    def rule(p: Any) -> str | None:
        for i in srcs:
            s = p.src[i]
            if s.type not in types:
                return f"the CPU kernel takes {'/'.join(_tname(t) for t in types)} src{i}, got {_tname(s.type)}"
            if not rows(s):
                return f"the CPU kernel needs src{i} {'contiguous' if rows is _contiguous else 'with contiguous rows'}"
        return None

    return rule


def _silu_back(p: Any) -> str | None:
    if p.src[1].type != p.src[0].type:  # the F16 kernel reads both as F16
        return f"the CPU kernel takes x of the gradient's type, got {_tname(p.src[0].type)} and {_tname(p.src[1].type)}"
    return _f32_rows(0, 1, rows=_padded_1d, types=(_F32, _F16))(p)


def _get_rows_back(p: Any) -> str | None:
    why = _f32_rows(0, types=(_F32, _F16))(p) or _f32_rows(1, rows=_contiguous, types=(_I32,))(p)
    if why:
        return why
    # the kernel asserts every index is a row of the result; pyggml's per-run index check (core.find_index_inputs)
    # does not know this op, so the values the index holds now are checked here
    v = read(p.src[1])
    if v is not None and v.size and (int(v.min()) < 0 or int(v.max()) >= p.ne[1]):
        return f"index holds {int(v.min())}..{int(v.max())}, outside the {p.ne[1]} rows of the result"
    return None


def _soft_max_back(p: Any) -> str | None:
    if ffi.cast("float *", p.op_params)[1] != 0:
        return "the CPU kernel has no ALiBi (max_bias must be 0)"
    return _f32_rows(0, 1, rows=_contiguous)(p)


def _opt_step(*others: int) -> Callable[[Any], str | None]:
    """opt_step_*: the kernel reads every tensor at the parameter's byte offsets."""

    def rule(p: Any) -> str | None:
        a = p.src[0]
        why = _f32_rows(0, *others)(p)
        if why:
            return why
        for i in others:
            if tuple(p.src[i].nb) != tuple(a.nb):
                return (
                    f"the CPU kernel reads src{i} with the parameter's strides {tuple(a.nb)}, got {tuple(p.src[i].nb)}"
                )
        params = p.src[1 + len(others)]
        if not _contiguous(params):
            return "the CPU kernel reads the optimizer parameters as a contiguous F32 vector"
        return None

    return rule


# --- the table --------------------------------------------------------------------------------------
CPU_RULES = RuleTable("CPU")
_ABORTS = "ggml-cpu asserts inside the kernel, on a worker thread (the process ends)"
_BAD = "tests/test_bad_input.py::test_bad_call"
# ggml.c refuses these at build; a node changed through the raw layer would still reach the kernel
_BUILT_RAW = f"{_ABORTS}; ggml.c asserts it at build, not for a node changed through the raw layer"
_RAW = (
    "tests/test_preflight_rules.py::test_rules_ggml_also_asserts_at_build_hold_for_graphs_changed_through_the_raw_layer"
)
_CONV_T = "tests/test_preflight_rules.py::test_transposed_convolutions_take_f32_or_f16_kernels_and_f32_data"


def _cpu(
    ops: Op | tuple[Op, ...], check: Callable[[Any], str | None], finding: str = _ABORTS, test: str = _BAD
) -> None:
    CPU_RULES.register(ops, check, finding=finding, test=test)


# elementwise, reductions
_cpu((Op.ADD, Op.SUB, Op.MUL, Op.DIV), _binary)
_cpu(Op.ADD, _add_result_type, test="tests/test_preflight_rules.py::test_add_checks_its_inputs_and_its_result_type")
_cpu(Op.SCALE, lambda p: _float_src0(p, {_F32, _BF16}, _contiguous))
_cpu(Op.CLAMP, lambda p: _float_src0(p, {_F32, _F16}, _padded_1d))
_cpu(Op.LEAKY_RELU, lambda p: _float_src0(p, {_F32, _F16}, _padded_1d))
_cpu((Op.UNARY, Op.SQR, Op.SQRT, Op.LOG, Op.SIN, Op.COS, Op.SUM), _float_src0)
_cpu(
    Op.UNARY,
    _xielu,
    "found by the fuzzer: unary-ops.cpp:194 GGML_ASSERT(ggml_is_contiguous_1(src0) ...)",
    "tests/test_preflight_rules.py::test_xielu_of_a_permuted_input_is_refused_before_the_cpu_aborts",
)
_cpu(Op.SUM_ROWS, lambda p: _float_src0(p, {_F32}))
_cpu(Op.MEAN, lambda p: _float_src0(p, {_F32}))
_cpu(Op.ARGMAX, _argmax)
_cpu(Op.NORM, lambda p: _float_src0(p, {_F32}))
_cpu(Op.RMS_NORM, lambda p: _float_src0(p, {_F32}))
_cpu(Op.L2_NORM, lambda p: _float_src0(p, {_F32}))
_cpu(Op.SOFT_MAX, _soft_max)
_cpu(Op.SSM_CONV, _ssm_conv)
_cpu(Op.DIAG_MASK_INF, lambda p: _float_src0(p, {_F32}, _contiguous))
_cpu(Op.ARGSORT, lambda p: _float_src0(p, {_F32}, _padded_1d))
_cpu(Op.REPEAT, lambda p: _float_src0(p, {_F32, _F16, _BF16, int(Type.I16), _I32}))
_cpu(Op.PAD, lambda p: _float_src0(p, {_F32}))
_cpu(Op.CONCAT, _concat, test="tests/test_preflight_rules.py::test_concat_of_quantized_inputs_needs_packed_rows")
_cpu(Op.GLU, _glu)
_cpu(Op.ADD1, _add1)
_cpu(Op.FILL, lambda p: _float_src0(p, {_F32, _F16}, _contiguous), _BUILT_RAW, _RAW)
_cpu(Op.COUNT_EQUAL, _count_equal, "docs/findings.md 12-18")
_cpu(Op.TRI, lambda p: _float_src0(p, {_F32}, _contiguous), _BUILT_RAW, _RAW)
_cpu(Op.DIAG, lambda p: _float_src0(p, {_F32}))
_cpu(Op.DIAG_MASK_ZERO, lambda p: _float_src0(p, {_F32}, _contiguous))
_cpu(Op.ROLL, lambda p: _float_src0(p, {_F32}))
_cpu(Op.CUMSUM, lambda p: _float_src0(p, {_F32}))
_cpu((Op.ACC, Op.SET), _acc_set)
_cpu(Op.TOP_K, lambda p: _float_src0(p, {_F32}, _padded_1d))  # rows found at i*nb01
_cpu(Op.GROUP_NORM, lambda p: _float_src0(p, {_F32}))
_cpu(Op.TIMESTEP_EMBEDDING, lambda p: _float_src0(p, {_F32}))
# movement
_cpu((Op.CPY, Op.DUP, Op.CONT), _copy)
_cpu(Op.GET_ROWS, _get_rows)
_cpu(Op.SET_ROWS, _set_rows)
# matmul, attention
_cpu(Op.MUL_MAT, _mul_mat)
_cpu(Op.MUL_MAT_ID, _mul_mat_id)
_cpu(Op.OUT_PROD, _out_prod)
_cpu(Op.ADD_ID, _add_id)
_cpu(Op.FLASH_ATTN_EXT, _flash_attn)
_cpu((Op.ROPE, Op.ROPE_BACK), _rope)
_cpu(
    Op.ROPE,
    _rope_rows,
    "ggml-cpu writes past an odd row, or asserts in the kernel",
    "tests/test_preflight_rules.py::test_rope_checks_its_types_and_its_rows",
)
_cpu(Op.GET_REL_POS, _get_rel_pos, "a BF16 input's bits are copied into the F16 result: wrong values")
_cpu(Op.ADD_REL_POS, lambda p: _float_src0(p, {_F32}, _contiguous))
_cpu(Op.WIN_PART, lambda p: _float_src0(p, {_F32}, _contiguous))
_cpu(Op.WIN_UNPART, lambda p: _float_src0(p, {_F32}, _contiguous), _BUILT_RAW, _RAW)
_cpu(Op.LIGHTNING_INDEXER, _lightning_indexer)
# convolution: im2col's kernels switch on dst's type (F32: F32 data; F16: F16/F32 data) and read each
# channel's plane as packed rows (row y at y * ne[0] elements)
_cpu(
    Op.IM2COL,
    lambda p: (
        f"the CPU kernel makes F32 or F16 columns, not {_tname(p.type)}"
        if p.type not in (_F32, _F16)
        else _f32_rows(
            1,
            rows=lambda s: _packed_rows(s) and (p.op_params[6] != 1 or s.nb[1] == s.nb[0] * s.ne[0]),
            types=(_F32,) if p.type == _F32 else (_F32, _F16),
        )(p)
    ),
)
_cpu(
    Op.CONV_TRANSPOSE_1D,
    lambda p: _f32_rows(0, rows=_contiguous, types=(_F32, _F16))(p) or _f32_rows(1, rows=_contiguous)(p),
    test=_CONV_T,
)
_cpu(
    Op.CONV_TRANSPOSE_2D,
    lambda p: _f32_rows(0, rows=_contiguous, types=(_F32, _F16))(p) or _f32_rows(1, rows=_contiguous)(p),
    test=_CONV_T,
)
_cpu(Op.CONV_2D, lambda p: _f32_rows(0, rows=_contiguous, types=(_F32, _F16))(p) or _f32_rows(1)(p))
_cpu(
    Op.CONV_3D, lambda p: _f32_rows(0, rows=_contiguous, types=(_F32, _F16))(p) or _f32_rows(1, rows=lambda s: True)(p)
)
_cpu(
    Op.IM2COL_3D,
    lambda p: (
        f"the CPU kernel makes F32 or F16 columns, not {_tname(p.type)}"
        if p.type not in (_F32, _F16)
        else _f32_rows(1)(p)
    ),
)
# whole contiguous tensors (WHCN) or channels innermost (CWHN, with the kernel laid out the same way)
_cpu(
    Op.CONV_2D_DW,
    lambda p: _f32_rows(0, rows=lambda s: True, types=(_F32, _F16))(p)
    or _f32_rows(1, rows=lambda s: True)(p)
    or (
        None
        if _contiguous(p.src[1])
        else None
        if lib.ggml_is_contiguous_channels(p.src[1])
        and p.src[0].nb[0] >= p.src[0].nb[2]
        and p.src[0].nb[1] >= p.src[0].nb[0]
        else "the CPU kernel takes contiguous data, or channels innermost (CWHN) with a kernel laid out alike"
    ),
)
# the pooling kernels walk the data as one packed block of rows (pool_2d: planes of nb[2] up to ggml_nbytes)
_POOL_TEST = "tests/test_preflight_rules.py::test_pool_of_a_permuted_input_is_refused_before_it_writes_past_its_result"
_cpu(Op.POOL_1D, lambda p: _f32_rows(0, rows=_contiguous, types=(_F32, _F16))(p), "docs/findings.md 36", _POOL_TEST)
_cpu(Op.POOL_2D, lambda p: _f32_rows(0, rows=_contiguous, types=(_F32, _F16))(p), "docs/findings.md 36", _POOL_TEST)
# recurrent: the kernels switch on the first source's type only and read every other source as F32
_cpu(
    Op.SSM_SCAN,
    lambda p: next(
        (
            f"the CPU kernel takes F32 s, x, dt, A, B and C, got {_tname(p.src[i].type)}"
            for i in range(6)
            if p.src[i].type != _F32
        ),
        None,
    )
    or (p.src[6].nb[0] != 4 and "the CPU kernel needs packed ids (nb[0] == 4)")
    or None,
)
_cpu(
    Op.RWKV_WKV6,
    lambda p: next(
        (f"the CPU kernel takes F32 inputs, got {_tname(p.src[i].type)}" for i in range(6) if p.src[i].type != _F32),
        None,
    ),
)
_cpu(
    Op.GATED_LINEAR_ATTN,
    lambda p: next(
        (f"the CPU kernel takes F32 inputs, got {_tname(p.src[i].type)}" for i in range(5) if p.src[i].type != _F32),
        None,
    ),
)
# the SIMD kernel steps over each head's rows GGML_F32_STEP floats at a time with no tail loop:
# another head size reads and writes past the rows (and past the result)
_cpu(
    Op.RWKV_WKV7,
    lambda p: next(
        (f"the CPU kernel takes F32 inputs, got {_tname(p.src[i].type)}" for i in range(7) if p.src[i].type != _F32),
        None,
    )
    or next(
        (
            f"the CPU kernel needs a head size (S = {p.src[2].ne[0]}) that is a multiple of {step} (its SIMD step)"
            for step in [
                1
                if lib.ggml_cpu_has_sve() or lib.ggml_cpu_has_riscv_v()
                else 64
                if lib.ggml_cpu_has_avx512()
                else 32
                if lib.ggml_cpu_has_avx() or lib.ggml_cpu_has_sse3() or lib.ggml_cpu_has_vsx()
                else 16
                if lib.ggml_cpu_has_neon() or lib.ggml_cpu_has_wasm_simd()
                else 64
            ]
            if p.src[2].ne[0] % step
        ),
        None,
    ),
    "docs/findings.md 12-18",
)
# backward ops, training
_cpu(Op.SILU_BACK, _silu_back)
_cpu(Op.RMS_NORM_BACK, _f32_rows(0, 1))
_cpu(Op.REPEAT_BACK, _f32_rows(0))
_cpu(Op.GET_ROWS_BACK, _get_rows_back)
_cpu(Op.SOFT_MAX_BACK, _soft_max_back, "docs/findings.md 12-18")
_cpu(
    Op.IM2COL_BACK,
    lambda p: _f32_rows(0, rows=_contiguous)(p) or _f32_rows(1, rows=lambda s: True, types=(_F32, _F16))(p),
)
_cpu(Op.POOL_2D_BACK, _f32_rows(0, 1, rows=_contiguous))
_cpu(Op.CROSS_ENTROPY_LOSS, _f32_rows(0, 1, rows=_padded_1d))
_cpu(Op.CROSS_ENTROPY_LOSS_BACK, _f32_rows(0, 1, 2, rows=_contiguous))
_cpu(Op.OPT_STEP_ADAMW, _opt_step(1, 2, 3))
_cpu(Op.OPT_STEP_SGD, _opt_step(1))


def structure(ns: list) -> None:
    """The CPU kernels' rules over the nodes a CPU device computes (pyggml.preflight's kind hook)."""
    for p in ns:
        why = CPU_RULES.why(p)
        if why:
            raise GraphError(f"compute: {name(p)}: {why}")
