"""Element-wise ops: arithmetic, unary activations, scalar maps, generators."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from pyggml import types
from pyggml._native import lib
from pyggml.ops._common import (
    _TYPE_SIZE,
    BinaryWrapper,
    UnaryWrapper,
    _scalar,
    _shape_arg,
)
from pyggml.ops.declared import declared
from pyggml.tensor import Tensor

if TYPE_CHECKING:
    pass

# --- element-wise ------------------------------------------------------------------------------------
# Shapes below are ggml's ne, innermost first (`t.ne`); NumPy's `t.shape` is the reverse.
_F16_NOTE = (
    "F16/BF16 a: computed in F32 and rounded to a's type once (F16 keeps 11 significant bits, "
    "BF16 8; the suite's bounds: NMSE 1e-5 and 1e-4)."
)
_BINARY_DOC = """ggml_{op}: a {sym} b, element-wise, b repeated (tiled) over a.

a: any ne [ne0, ne1, ne2, ne3], F32, F16 or BF16, contiguous rows.
b: each b.ne[i] divides a.ne[i] (ggml's repeat rule: b is tiled over a, never a over b, so it is
   NumPy broadcasting only when b's extents are 1 or a's), of a's type or F32.
Result: a's shape and type.
Precision: F32 exactly as NumPy's float32 {sym} (one IEEE operation). {f16}"""
add: BinaryWrapper = declared("add", _BINARY_DOC.format(op="add", sym="+", f16=_F16_NOTE))
sub: BinaryWrapper = declared("sub", _BINARY_DOC.format(op="sub", sym="-", f16=_F16_NOTE))
mul: BinaryWrapper = declared("mul", _BINARY_DOC.format(op="mul", sym="*", f16=_F16_NOTE))
div: BinaryWrapper = declared("div", _BINARY_DOC.format(op="div", sym="/", f16=_F16_NOTE))

UNARY_OPS = (
    "abs",
    "sgn",
    "neg",
    "step",
    "tanh",
    "elu",
    "relu",
    "sigmoid",
    "gelu",
    "gelu_quick",
    "gelu_erf",
    "silu",
    "hardswish",
    "hardsigmoid",
    "exp",
    "softplus",
    "floor",
    "ceil",
    "round",
    "trunc",
    "sqr",
    "sqrt",
    "log",
    "sin",
    "cos",
)
_GELU_TABLE = (
    "CPU: an F32 a with |a| < 10 is rounded to F16 and looked up in a table of F16 results "
    "(ggml-cpu's GGML_GELU_FP16), so the result has F16's 11 significant bits (relative errors of order "
    "1e-3, more where gelu(a) is near 0; the suite's bound NMSE 1e-5); an F16 a is looked up directly. Other "
    "backends compute in F32."
)
_UNARY_EXACT = "F32 as NumPy's float32 (exact). " + _F16_NOTE
_UNARY_LIBM = (
    "F32: the backend's single-precision math library (a few ulps from NumPy's float32, within "
    "the suite's F32 bound NMSE 1e-7). " + _F16_NOTE
)
# op -> (what it computes in NumPy terms, precision)
_UNARY_DOCS = {
    "abs": ("np.abs(a)", _UNARY_EXACT),
    "sgn": ("np.sign(a): 1 where a > 0, -1 where a < 0, else 0", _UNARY_EXACT),
    "neg": ("-a", _UNARY_EXACT),
    "step": ("1 where a > 0, else 0 (Heaviside step; 0 at 0)", _UNARY_EXACT),
    "tanh": ("np.tanh(a)", _UNARY_LIBM),
    "elu": ("a where a > 0, else np.expm1(a) (ELU, alpha 1)", _UNARY_LIBM),
    "relu": ("np.maximum(a, 0)", _UNARY_EXACT),
    "sigmoid": ("1 / (1 + np.exp(-a))", _UNARY_LIBM),
    "gelu": ("GELU, tanh approximation: 0.5*a*(1 + tanh(sqrt(2/pi)*(a + 0.044715*a**3)))", _GELU_TABLE),
    "gelu_quick": ("a * sigmoid(1.702*a)", _GELU_TABLE),
    "gelu_erf": ("exact GELU: 0.5*a*(1 + erf(a/sqrt(2)))", _UNARY_LIBM + " (No lookup table, unlike gelu.)"),
    "silu": (
        "a * sigmoid(a) (SiLU, swish)",
        "F32: the CPU's vectorized exp (within the suite's F32 bound NMSE 1e-7). " + _F16_NOTE,
    ),
    "hardswish": ("a * np.clip((a + 3)/6, 0, 1)", _UNARY_EXACT),
    "hardsigmoid": ("np.clip((a + 3)/6, 0, 1)", _UNARY_EXACT),
    "exp": ("np.exp(a)", _UNARY_LIBM),
    "softplus": (
        "np.log1p(np.exp(a)), and a itself where a > 20",
        _UNARY_LIBM + " Computed as log(1 + exp(a)): "
        "for a below about -17 the result underflows to 0 where NumPy's log1p does not.",
    ),
    "floor": ("np.floor(a)", _UNARY_EXACT),
    "ceil": ("np.ceil(a)", _UNARY_EXACT),
    "round": (
        "C's roundf: halves away from zero (np.round rounds halves to even: 2.5 -> 3 here, 2 in NumPy)",
        _UNARY_EXACT,
    ),
    "trunc": ("np.trunc(a)", _UNARY_EXACT),
    "sqr": ("a * a", _UNARY_EXACT),
    "sqrt": ("np.sqrt(a) (NaN for a < 0)", _UNARY_EXACT),
    "log": ("np.log(a) (NaN for a < 0, -inf at 0)", _UNARY_LIBM),
    "sin": ("np.sin(a)", _UNARY_LIBM),
    "cos": ("np.cos(a)", _UNARY_LIBM),
    "expm1": (
        "np.expm1(a)",
        "the CPU computes exp(a) - 1 in F32, so for |a| << 1 the error is about 1e-7 "
        "absolute, not relative as NumPy's expm1. " + _F16_NOTE,
    ),
}


def _unary_doc(op: str) -> str:
    what, precision = _UNARY_DOCS[op]
    return (
        f"ggml_{op}: {what}, element-wise.\n\n"
        "a: any ne (NumPy shape reversed), F32, F16 or BF16, contiguous rows.\n"
        "Result: a's shape and type.\n"
        f"Precision: {precision}"
    )


abs: UnaryWrapper = declared("abs", _unary_doc("abs"))
sgn: UnaryWrapper = declared("sgn", _unary_doc("sgn"))
neg: UnaryWrapper = declared("neg", _unary_doc("neg"))
step: UnaryWrapper = declared("step", _unary_doc("step"))
tanh: UnaryWrapper = declared("tanh", _unary_doc("tanh"))
elu: UnaryWrapper = declared("elu", _unary_doc("elu"))
relu: UnaryWrapper = declared("relu", _unary_doc("relu"))
sigmoid: UnaryWrapper = declared("sigmoid", _unary_doc("sigmoid"))
gelu: UnaryWrapper = declared("gelu", _unary_doc("gelu"))
gelu_quick: UnaryWrapper = declared("gelu_quick", _unary_doc("gelu_quick"))
gelu_erf: UnaryWrapper = declared("gelu_erf", _unary_doc("gelu_erf"))
silu: UnaryWrapper = declared("silu", _unary_doc("silu"))
hardswish: UnaryWrapper = declared("hardswish", _unary_doc("hardswish"))
hardsigmoid: UnaryWrapper = declared("hardsigmoid", _unary_doc("hardsigmoid"))
exp: UnaryWrapper = declared("exp", _unary_doc("exp"))
softplus: UnaryWrapper = declared("softplus", _unary_doc("softplus"))
floor: UnaryWrapper = declared("floor", _unary_doc("floor"))
ceil: UnaryWrapper = declared("ceil", _unary_doc("ceil"))
round: UnaryWrapper = declared("round", _unary_doc("round"))
trunc: UnaryWrapper = declared("trunc", _unary_doc("trunc"))
sqr: UnaryWrapper = declared("sqr", _unary_doc("sqr"))
sqrt: UnaryWrapper = declared("sqrt", _unary_doc("sqrt"))
log: UnaryWrapper = declared("log", _unary_doc("log"))
sin: UnaryWrapper = declared("sin", _unary_doc("sin"))
cos: UnaryWrapper = declared("cos", _unary_doc("cos"))


scale = declared(
    "scale",
    """ggml_scale: a * s, element-wise.

    a: any ne (NumPy shape reversed), F32 or BF16 on the CPU, contiguous.
    s: the factor, a Python number (a str or bool is refused).
    Result: a's shape and type.
    Precision: F32 exactly as NumPy's float32 product (s is rounded to F32 first).
    """,
)


def _ordered(x) -> None:
    if not x.min <= x.max:
        raise ValueError(f"clamp: min ({x.min}) must not exceed max ({x.max})")


clamp = declared(
    "clamp",
    """ggml_clamp: np.clip(a, min, max), element-wise.

    a: any ne (NumPy shape reversed), F32 or F16.
    min, max: the bounds, numbers with min <= max.
    Result: a's shape and type. Precision: exact (the bounds rounded to F32).
    """,
    check=_ordered,
)


def _finite(op: str, *names: str):
    """A check that the named arguments are finite numbers."""
    listed = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"

    def check(x) -> None:
        vals = [getattr(x, n) for n in names]
        if not all(map(math.isfinite, vals)):
            raise ValueError(f"{op}: {listed} must be finite, got {vals[0] if len(vals) == 1 else vals}")

    return check


# ggml computes x + slope*min(x, 0): inf*0 is NaN for every x >= 0
leaky_relu = declared(
    "leaky_relu",
    """ggml_leaky_relu: a where a > 0, else negative_slope * a, element-wise.

    a: any ne (NumPy shape reversed), F32 or F16, contiguous rows.
    negative_slope: the slope for a < 0, a finite number.
    inplace: write the result into a's memory (a view of a) instead of a new tensor.
    Result: a's shape and type. Precision: F32 as NumPy's float32; F16 a rounded once.
    """,
    defaults={"negative_slope": 0.01, "inplace": False},
    check=_finite("leaky_relu", "negative_slope"),
)


def _arange_range(x) -> None:
    # ggml sizes the result as ceil((stop - start) / step) elements, unchecked
    start, stop, step = x.start, x.stop, x.step
    if not all(map(math.isfinite, (start, stop, step))):
        raise ValueError(f"arange: start, stop and step must be finite, got {start}, {stop}, {step}")
    if not stop > start:
        raise ValueError(f"arange: stop ({stop}) must be greater than start ({start})")
    if not step > 0:
        raise ValueError(f"arange: step must be positive, got {step}")
    if math.ceil((stop - start) / step) > 2**31:
        raise ValueError(f"arange: {math.ceil((stop - start) / step)} elements is too many")


arange = declared(
    "arange",
    """ggml_arange: np.arange(start, stop, step) as a new F32 tensor.

    start, stop, step: finite numbers, stop > start, step > 0.
    Result: F32 ne [n], n = ceil((stop - start) / step), element i = start + i*step computed in F32.
    """,
    defaults={"step": 1.0},
    check=_arange_range,
)


# --- newer unary ops ---------------------------------------------------------------------------------
expm1: UnaryWrapper = declared("expm1", _unary_doc("expm1"))


# ggml stores softplus(alpha): a NaN/Inf poisons every element
xielu = declared(
    "xielu",
    """ggml_xielu: the xIELU activation, element-wise, as ggml computes it.

    With an = beta + softplus(alpha_n) and ap = softplus(alpha_p) (ggml stores those, not the raw
    alphas; ggml.h's formula differs, docs/findings.md entry 21):
        a > 0: ap*a*a + beta*a;    else: (expm1(min(a, eps)) - a)*an + beta*a
    a: any ne (NumPy shape reversed), F32 or F16, contiguous rows.
    alpha_n, alpha_p, beta, eps: finite numbers (defaults: llama.cpp's Apertus values).
    Result: a's shape and type. Precision: F32 math library; F16 a rounded once.
    """,
    defaults={"alpha_n": 0.8, "alpha_p": 0.8, "beta": 0.5, "eps": -1e-6},
    check=_finite("xielu", "alpha_n", "alpha_p", "beta", "eps"),
)


# --- gated linear units: act(x) * g, x and g the two halves of a's rows (or a and b) ----------------
def _glu_halves(op: str, a) -> None:
    # ggml takes ne0 // 2 and silently drops an odd row's last element (backends need not agree on it)
    if isinstance(a, Tensor) and a.ptr.ne[0] % 2:
        raise ValueError(f"{op}: a's rows must have an even length (two halves), got ne0 = {a.ptr.ne[0]}")


def _halves(op: str):
    """A check that a's rows have two halves (where there is no b)."""

    def check(x) -> None:
        if getattr(x, "b", None) is None:
            _glu_halves(op, x.a)

    return check


# family -> (its activation in NumPy terms, precision)
_GLU_ACTS = {
    "reglu": ("relu(x) = np.maximum(x, 0)", _UNARY_EXACT),
    "geglu": ("gelu(x), tanh approximation (see gelu)", _GELU_TABLE),
    "swiglu": ("silu(x) = x * sigmoid(x)", _UNARY_LIBM),
    "geglu_erf": ("exact gelu(x) = 0.5*x*(1 + erf(x/sqrt(2)))", _UNARY_LIBM),
    "geglu_quick": ("x * sigmoid(1.702*x) (see gelu_quick)", _GELU_TABLE),
}


def _glu_doc(op: str) -> str:
    family = op.removesuffix("_swapped").removesuffix("_split")
    act, precision = _GLU_ACTS[family]
    if op.endswith("_split"):
        what = (
            f"ggml_{op}: act(a) * b, element-wise, act(x) = {act}: the {family} gated linear unit with its "
            "input and gate in two tensors.\n\n"
            "a: the activation's input, any ne, F32, F16 or BF16, contiguous rows.\n"
            "b: the gate, a's shape and type.\n"
            "Result: a's shape and type."
        )
    else:
        halves = (
            "x the second half of each row of a, g the first"
            if op.endswith("_swapped")
            else "x the first half of each row of a, g the second"
        )
        what = (
            f"ggml_{op}: act(x) * g, act(x) = {act}: the {family} gated linear unit, {halves}.\n\n"
            "a: ne [2n, ne1, ne2, ne3] (NumPy shape reversed: the halves split its last axis), F32, F16 or "
            "BF16, "
            "contiguous rows of even length.\n"
            "Result: ne [n, ne1, ne2, ne3], a's type."
        )
    return f"{what}\nPrecision: {precision}"


def _make_glu(op: str) -> UnaryWrapper:
    return declared(op, _glu_doc(op), check=_halves(op))


def _make_glu_split(op: str) -> BinaryWrapper:
    return declared(op, _glu_doc(op))


GLU_OPS = tuple(
    f"{g}{v}" for g in ("reglu", "geglu", "swiglu", "geglu_erf", "geglu_quick") for v in ("", "_swapped", "_split")
)
reglu: UnaryWrapper = _make_glu("reglu")
reglu_swapped: UnaryWrapper = _make_glu("reglu_swapped")
reglu_split: BinaryWrapper = _make_glu_split("reglu_split")
geglu: UnaryWrapper = _make_glu("geglu")
geglu_swapped: UnaryWrapper = _make_glu("geglu_swapped")
geglu_split: BinaryWrapper = _make_glu_split("geglu_split")
swiglu: UnaryWrapper = _make_glu("swiglu")
swiglu_swapped: UnaryWrapper = _make_glu("swiglu_swapped")
swiglu_split: BinaryWrapper = _make_glu_split("swiglu_split")
geglu_erf: UnaryWrapper = _make_glu("geglu_erf")
geglu_erf_swapped: UnaryWrapper = _make_glu("geglu_erf_swapped")
geglu_erf_split: BinaryWrapper = _make_glu_split("geglu_erf_split")
geglu_quick: UnaryWrapper = _make_glu("geglu_quick")
geglu_quick_swapped: UnaryWrapper = _make_glu("geglu_quick_swapped")
geglu_quick_split: BinaryWrapper = _make_glu_split("geglu_quick_split")


def _glu_check(op: str, *finite: str):
    """swiglu_oai's and swiglu_clamp's check: a positive limit, finite numbers, a's halves without b."""
    checks = [_finite(op, *finite)] if finite else []
    checks.append(_halves(op))

    def check(x) -> None:
        if not x.limit > 0:  # the kernels clamp g to [-limit, limit]: an empty or NaN range is undefined
            raise ValueError(f"{op}: limit must be positive, got {x.limit}")
        for c in checks:
            c(x)

    return check


swiglu_oai = declared(
    "swiglu_oai",
    """ggml_swiglu_oai: GPT-OSS's clamped SwiGLU: x*sigmoid(alpha*x) * (g + 1), x = min(x, limit),
    g = np.clip(g, -limit, limit).

    a: without b, ne [2n, ...] whose rows hold x (first half) then g (second half); with b, x itself.
    b: the gate g, a's shape and type, or None.
    alpha: sigmoid's slope (1.702), finite. limit: the clamp, positive.
    Result: ne [n, ...] (halves) or a's shape, a's type (F32). Precision: F32 math library.
    """,
    optional=("b",),
    defaults={"alpha": 1.702, "limit": 7.0},
    check=_glu_check("swiglu_oai", "alpha"),
)
swiglu_clamp = declared(
    "swiglu_clamp",
    """ggml_swiglu_clamp: silu(min(x, limit)) * np.clip(g, -limit, limit).

    a: without b, ne [2n, ...] whose rows hold x (first half) then g (second half); with b, x itself.
    b: the gate g, a's shape and type, or None.
    limit: the clamp, positive.
    Result: ne [n, ...] (halves) or a's shape, a's type. Precision: F32 math library; F16 rounded once.
    """,
    optional=("b",),
    defaults={"limit": 7.0},
    check=_glu_check("swiglu_clamp"),
)


# --- more arithmetic, casts, generators ----------------------------------------------------------------
add1 = declared(
    "add1",
    """ggml_add1: a + b[0]: the one value of b added to every element of a.

    a: any ne (NumPy shape reversed), F32, F16 or BF16.
    b: a scalar tensor (one element), of a's type or F32.
    Result: a's shape and type. Precision: F32 exact; F16/BF16 computed in F32, rounded once.
    """,
)


add_cast = declared(
    "add_cast",
    """ggml_add_cast: a + b (b repeated over a, as add), the result converted to `type`.

    a, b: as add (b.ne[i] divides a.ne[i]).
    type: the result's ggml type (Type, its name such as 'f32', or a NumPy dtype).
    Result: a's shape, of `type`. Precision: F32 sum, rounded once to `type`.
    """,
)


cast = declared(
    "cast",
    """ggml_cast: a converted to another type (a copy).

    a: any ne (NumPy shape reversed).
    type: the result's ggml type (Type, 'f16', 'q8_0', or a NumPy dtype).
    Result: a's shape, of `type`. Precision: to F16 rounds to nearest (11 bits); to a quantized type
    with ggml's own quantizer (as types.encode does); to an integer type, as C's conversion.
    """,
)


scale_bias = declared(
    "scale_bias",
    """ggml_scale_bias: a * s + b, element-wise (b a number, not a tensor).

    a: any ne (NumPy shape reversed), F32 or BF16, contiguous.
    s: the factor, b: the offset, both numbers.
    Result: a's shape and type. Precision: F32 (s and b rounded to F32; the product may be fused).
    """,
)


fill = declared(
    "fill",
    """ggml_fill: a tensor of a's shape and type with every element c (np.full_like(a, c)).

    a: any ne (only its shape and type are used), F32 or F16.
    c: the value, a number.
    Result: a's shape and type.
    """,
)


count_equal = declared(
    "count_equal",
    """ggml_count_equal: np.count_nonzero(a == b): how many elements of a and b are equal.

    a, b: I32 of the same ne, contiguous (the CPU's rule: 1-d or 2-d).
    Result: I64 ne [1]. Exact.
    """,
)


TRI_TYPES = {"upper_diag": 0, "upper": 1, "lower_diag": 2, "lower": 3}


def _tri_type(type) -> int:
    t = TRI_TYPES.get(type.lower(), -1) if isinstance(type, str) else _scalar("tri", "type", type, int)
    if t not in TRI_TYPES.values():  # the CPU kernel aborts on any other value
        raise ValueError(f"tri: type must be one of {TRI_TYPES} (or its name), got {type!r}")
    return t


tri = declared(
    "tri",
    """ggml_tri: every matrix of a with the elements outside one triangle set to 0 (np.triu / np.tril).

     a: ne [n, n, ne2, ne3] (each matrix's row r is ne1 index r, column i is ne0 index i), F32,
    contiguous.
     type: which part is kept: 0 or 'upper_diag' (i >= r, np.triu(a)), 1 'upper' (i > r, np.triu(a, 1)),
           2 'lower_diag' (i <= r, np.tril(a)), 3 'lower' (i < r, np.tril(a, -1)).
     Result: a's shape and type. Exact.
    """,
    defaults={"type": 0},
    convert={"type": _tri_type},
)


diag = declared(
    "diag",
    """ggml_diag: a matrix with a's row on its diagonal (np.diag per row).

    a: ne [n, 1, ne2, ne3] (NumPy shape (ne3, ne2, 1, n)), F32.
    Result: ne [n, n, ne2, ne3], zeros off the diagonal. Exact.
    """,
)


def _n_past(op: str):
    def check(x) -> None:
        if not 0 <= x.n_past < 2**31:  # the kernel asserts n_past >= 0 on a worker thread
            raise ValueError(f"{op}: n_past must be >= 0, got {x.n_past}")

    return check


diag_mask_zero = declared(
    "diag_mask_zero",
    """ggml_diag_mask_zero: a causal mask by zeros: element (row i1, column i0) set to 0 where
    i0 > n_past + i1; the rest copied.

    a: ne [n_kv, n_rows, ne2, ne3] (NumPy shape reversed), F32.
    n_past: how many columns every row keeps beyond the diagonal, >= 0.
    Result: a's shape and type. Exact.
    """,
    check=_n_past("diag_mask_zero"),
)


def _shifts(x) -> None:
    shifts = [x.shift0, x.shift1, x.shift2, x.shift3]
    if not all(-(2**31) < v < 2**31 for v in shifts):
        raise ValueError(f"roll: shifts {shifts} do not fit a C int")


roll = declared(
    "roll",
    """ggml_roll: np.roll of a along every dim: shift_i along ggml dim i (NumPy axis 3 - i).

    a: any ne, F32 (the CPU's rule), contiguous rows.
    shift0, shift1, shift2, shift3: how far each dim's elements move toward higher indices (negative:
        lower), wrapping around; shift0 moves along ne0 (NumPy's last axis).
    Result: a's shape and type. Exact.
    """,
    defaults=dict.fromkeys(("shift0", "shift1", "shift2", "shift3"), 0),
    check=_shifts,
)


repeat_4d = declared(
    "repeat_4d",
    """ggml_repeat_4d: a tiled to ne [ne0, ne1, ne2, ne3] (np.tile, in ggml's dim order).

    a: any ne, each a.ne[i] dividing the target's.
    ne0, ne1, ne2, ne3: the result's extents in ggml order (ne0 innermost: NumPy's last axis).
    Result: ne [ne0, ne1, ne2, ne3], a's type. Exact.
    """,
    defaults={"ne1": 1, "ne2": 1, "ne3": 1},
    check=lambda x: _shape_arg("repeat_4d", (x.ne0, x.ne1, x.ne2, x.ne3)),
)


cumsum = declared(
    "cumsum",
    """ggml_cumsum: the running sum along each row: np.cumsum(a, axis=-1) (ggml's dim 0).

    a: any ne (NumPy shape reversed), F32.
    Result: a's shape and type. Precision: a sequential F32 sum (error grows with the row length, as
    np.cumsum in float32; the suite compares with a float64 sum to NMSE 1e-7).
    """,
)


# --- acc / set: b written (added) into a copy of a through a view given in bytes --------------------
def _view_of_b(op: str, a, b, nb1, nb2, nb3, offset) -> list[int]:
    """The byte strides and offset as ints, checked to stay inside a: the kernels assert that on a
    worker thread (acc) or not at all past the last element's start; a view whose rows overlap
    would have the threads race on the same elements."""
    vals = [_scalar(op, n, v, int) for n, v in (("nb1", nb1), ("nb2", nb2), ("nb3", nb3), ("offset", offset))]
    if any(v < 0 for v in vals):
        raise ValueError(f"{op}: nb1, nb2, nb3 and offset must be >= 0, got {vals}")
    if not (isinstance(a, Tensor) and isinstance(b, Tensor)) or types.is_quantized(a.ptr.type):
        return vals  # the call names the bad argument; the CPU rule refuses the type
    es = _TYPE_SIZE[a.ptr.type]
    if any(v % es for v in vals):
        raise ValueError(f"{op}: nb1, nb2, nb3 and offset must be multiples of a's element size {es}, got {vals}")
    ne = list(b.ptr.ne)
    dims = sorted((nb, n) for nb, n in zip([es] + vals[:3], ne) if n > 1)
    reach = es
    for nb, n in dims:
        if nb < reach:
            raise ValueError(f"{op}: the view of b's shape {ne} with strides {[es] + vals[:3]} overlaps itself")
        reach += nb * (n - 1)
    end = vals[3] + es + sum((n - 1) * nb for nb, n in zip([es] + vals[:3], ne))
    if end > lib.ggml_nbytes(a.ptr):
        raise ValueError(
            f"{op}: the view (offset {vals[3]}, strides {vals[:3]}, b's ne {ne}) ends at byte {end}, "
            f"past a's {lib.ggml_nbytes(a.ptr)} bytes"
        )
    return vals


def _in_a(op: str, *, own_strides: int = 0, offset_below: int = 0):
    """The check of acc and the set family: b's view inside a (_view_of_b); the set family's strides are a's own
    beyond the nb1 it gives (`own_strides` of them), set's offset below 2**30."""

    def check(x) -> None:
        nb = [getattr(x, f"nb{i}", None) for i in (1, 2, 3)]
        if own_strides and isinstance(x.a, Tensor):
            nb[3 - own_strides :] = [x.a.ptr.nb[i] for i in range(4 - own_strides, 4)]
        elif own_strides:
            return  # the call names the bad argument
        vals = _view_of_b(op, x.a, x.b, nb[0], nb[1], nb[2], x.offset)
        if offset_below and vals[3] >= offset_below:
            raise ValueError(f"{op}: offset must be < 2**30 (ggml stores it in an int32), got {vals[3]}")

    return check


acc = declared(
    "acc",
    """ggml_acc: a copy of a with b added into a strided view of it (C-style byte strides).

    The view has b's ne and the byte strides (a's element size, nb1, nb2, nb3), and starts at byte
    `offset` of a; view += b, the rest of a copied.
    a: F32, contiguous. b: F32, any ne (the view's extents).
    nb1, nb2, nb3: the view's byte strides of dims 1-3 (multiples of a's element size; a.nb gives a's
        own), offset: its first byte in a. The view must lie inside a and not overlap itself.
    Result: a's shape and type. Exact (one F32 addition per element).
    """,
    check=_in_a("acc"),
)
set = declared(
    "set",
    """ggml_set: a copy of a with b written into a strided view of it (C-style byte strides).

    The view has b's ne and the byte strides (a's element size, nb1, nb2, nb3), and starts at byte
    `offset` of a (offset < 2**30).
    a: F32 or I32, contiguous. b: any ne (the view's extents), of a's type, contiguous rows.
    nb1, nb2, nb3: the view's byte strides of dims 1-3 (a.nb for a's own), offset: its first byte.
    Result: a's shape and type. Exact.
    """,
    check=_in_a("set", offset_below=1 << 30),
)  # noqa: A001
set_1d = declared(
    "set_1d",
    """ggml_set_1d: a copy of a with b's elements written at byte `offset` of a (a's own strides).

    a, b: of one type; b's ne must fit from offset. offset: bytes from a's start.
    Result: a's shape and type. Exact.
    """,
    check=_in_a("set_1d", own_strides=3),
)
set_2d = declared(
    "set_2d",
    """ggml_set_2d: a copy of a with b's rows written at byte `offset`, nb1 bytes apart.

    a, b: of one type. nb1: the byte stride between b's rows inside a (a.nb[1] for a's own rows).
    offset: the first row's first byte in a.
    Result: a's shape and type. Exact.
    """,
    check=_in_a("set_2d", own_strides=2),
)


# --- padding, embeddings ----------------------------------------------------------------------------------
_PAD_NAMES = ("lp0", "rp0", "lp1", "rp1", "lp2", "rp2", "lp3", "rp3")


def _pads(op: str, a, pads, circular: bool) -> list[int]:
    vals = [_scalar(op, n, v, int) for n, v in zip(_PAD_NAMES, pads)]
    if not all(0 <= v < 2**31 for v in vals):
        raise ValueError(f"{op}: paddings must be >= 0, got {vals}")
    # the circular kernel wraps i - lp with (i - lp + ne) % ne: a left pad over ne reads before a
    if circular and isinstance(a, Tensor) and any(vals[2 * d] > a.ptr.ne[d] for d in range(4)):
        raise ValueError(
            f"{op}: a circular left padding must not exceed the dim (ne {list(a.ptr.ne)}), got {vals[0::2]}"
        )
    return vals


pad_ext = declared(
    "pad_ext",
    """ggml_pad_ext: zero padding before and after each dim (np.pad with zeros, in ggml's dim order).

    a: any ne, F32.
    lp0, rp0: zeros before and after dim 0 (ne0, NumPy's last axis); lp1, rp1 for dim 1; lp2, rp2;
        lp3, rp3. All >= 0.
    Result: ne [ne0 + lp0 + rp0, ne1 + lp1 + rp1, ...], a's type. Exact.
    """,
    defaults=dict.fromkeys(_PAD_NAMES, 0),
    check=lambda x: _pads("pad_ext", x.a, [getattr(x, n) for n in _PAD_NAMES], False),
)
pad_ext_circular = declared(
    "pad_ext_circular",
    """ggml_pad_ext_circular: circular padding before and after each dim (np.pad(mode="wrap")).

    a: any ne, F32.
    lp0, rp0: elements added before and after dim 0 (ne0), taken from the other end; lp1, rp1 for
        dim 1; lp2, rp2; lp3, rp3. All >= 0, a left padding at most the dim's extent.
    Result: ne [ne0 + lp0 + rp0, ...], a's type. Exact.
    """,
    defaults=dict.fromkeys(_PAD_NAMES, 0),
    check=lambda x: _pads("pad_ext_circular", x.a, [getattr(x, n) for n in _PAD_NAMES], True),
)


pad_circular = declared(
    "pad_circular",
    """ggml_pad_circular: circular padding after each dim (np.pad(mode="wrap") on the right only).

    a: any ne, F32.
    p0, p1, p2, p3: elements appended to dims 0-3 (p0 along ne0, NumPy's last axis), taken from the
        dim's start.
    Result: ne [ne0 + p0, ne1 + p1, ne2 + p2, ne3 + p3], a's type. Exact.
    """,
    defaults=dict.fromkeys(("p0", "p1", "p2", "p3"), 0),
    check=lambda x: _pads("pad_circular", x.a, (0, x.p0, 0, x.p1, 0, x.p2, 0, x.p3), True),
)


def _embedding(x) -> None:
    if not 0 < x.dim < 2**31 or not 0 < x.max_period < 2**31:  # log(max_period) and a [dim, n] result
        raise ValueError(f"timestep_embedding: dim and max_period must be positive, got {x.dim}, {x.max_period}")
    # the kernel reads timesteps->ne[0] values: the rest of a 2-D or higher tensor would be ignored
    if isinstance(x.timesteps, Tensor) and any(x.timesteps.ptr.ne[d] != 1 for d in (1, 2, 3)):
        raise ValueError(f"timestep_embedding: timesteps must be a vector, got ne {list(x.timesteps.ptr.ne)}")


timestep_embedding = declared(
    "timestep_embedding",
    """ggml_timestep_embedding: sinusoidal embeddings of diffusion timesteps.

    Row t is [cos(t*f_0), ..., cos(t*f_{h-1}), sin(t*f_0), ..., sin(t*f_{h-1})] with h = dim // 2 and
    f_j = max_period**(-j/h); an odd dim ends with a 0.
    timesteps: F32 ne [n] (a vector).
    dim: the embedding size, > 0. max_period: the longest period, > 0.
    Result: F32 ne [dim, n] (NumPy shape (n, dim)). Precision: F32 math library.
    """,
    defaults={"max_period": 10000},
    check=_embedding,
)


__all__ = [  # generated by tools/gen_methods.py
    "abs",
    "acc",
    "add",
    "add1",
    "add_cast",
    "arange",
    "cast",
    "ceil",
    "clamp",
    "cos",
    "count_equal",
    "cumsum",
    "diag",
    "diag_mask_zero",
    "div",
    "elu",
    "exp",
    "expm1",
    "fill",
    "floor",
    "geglu",
    "geglu_erf",
    "geglu_erf_split",
    "geglu_erf_swapped",
    "geglu_quick",
    "geglu_quick_split",
    "geglu_quick_swapped",
    "geglu_split",
    "geglu_swapped",
    "gelu",
    "gelu_erf",
    "gelu_quick",
    "hardsigmoid",
    "hardswish",
    "leaky_relu",
    "log",
    "mul",
    "neg",
    "pad_circular",
    "pad_ext",
    "pad_ext_circular",
    "reglu",
    "reglu_split",
    "reglu_swapped",
    "relu",
    "repeat_4d",
    "roll",
    "round",
    "scale",
    "scale_bias",
    "set",
    "set_1d",
    "set_2d",
    "sgn",
    "sigmoid",
    "silu",
    "sin",
    "softplus",
    "sqr",
    "sqrt",
    "step",
    "sub",
    "swiglu",
    "swiglu_clamp",
    "swiglu_oai",
    "swiglu_split",
    "swiglu_swapped",
    "tanh",
    "timestep_embedding",
    "tri",
    "trunc",
    "xielu",
]
