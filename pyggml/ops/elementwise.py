"""Element-wise ops: arithmetic, unary activations, scalar maps, generators."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from pyggml import types
from pyggml._native import lib
from pyggml.ops._common import (
    _ARG_ERRORS,
    _NULL,
    _TYPE_SIZE,
    _bad_arguments,
    _guarded,
    BinaryWrapper,
    UnaryWrapper,
    _make_binary,
    _make_unary,
    _result,
    _scalar,
    _shape_arg,
)
from pyggml.tensor import Tensor

if TYPE_CHECKING:
    from pyggml.context import Context

# --- element-wise ------------------------------------------------------------------------------------
add: BinaryWrapper = _make_binary("add")
sub: BinaryWrapper = _make_binary("sub")
mul: BinaryWrapper = _make_binary("mul")
div: BinaryWrapper = _make_binary("div")

UNARY_OPS = ("abs", "sgn", "neg", "step", "tanh", "elu", "relu", "sigmoid", "gelu", "gelu_quick", "gelu_erf",
             "silu", "hardswish", "hardsigmoid", "exp", "softplus", "floor", "ceil", "round", "trunc",
             "sqr", "sqrt", "log", "sin", "cos")
abs: UnaryWrapper = _make_unary("abs")
sgn: UnaryWrapper = _make_unary("sgn")
neg: UnaryWrapper = _make_unary("neg")
step: UnaryWrapper = _make_unary("step")
tanh: UnaryWrapper = _make_unary("tanh")
elu: UnaryWrapper = _make_unary("elu")
relu: UnaryWrapper = _make_unary("relu")
sigmoid: UnaryWrapper = _make_unary("sigmoid")
gelu: UnaryWrapper = _make_unary("gelu")
gelu_quick: UnaryWrapper = _make_unary("gelu_quick")
gelu_erf: UnaryWrapper = _make_unary("gelu_erf")
silu: UnaryWrapper = _make_unary("silu")
hardswish: UnaryWrapper = _make_unary("hardswish")
hardsigmoid: UnaryWrapper = _make_unary("hardsigmoid")
exp: UnaryWrapper = _make_unary("exp")
softplus: UnaryWrapper = _make_unary("softplus")
floor: UnaryWrapper = _make_unary("floor")
ceil: UnaryWrapper = _make_unary("ceil")
round: UnaryWrapper = _make_unary("round")
trunc: UnaryWrapper = _make_unary("trunc")
sqr: UnaryWrapper = _make_unary("sqr")
sqrt: UnaryWrapper = _make_unary("sqrt")
log: UnaryWrapper = _make_unary("log")
sin: UnaryWrapper = _make_unary("sin")
cos: UnaryWrapper = _make_unary("cos")


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


# --- newer unary ops ---------------------------------------------------------------------------------
expm1: UnaryWrapper = _make_unary("expm1")


def xielu(ctx, a: Tensor, alpha_n: float = 0.8, alpha_p: float = 0.8, beta: float = 0.5, eps: float = -1e-6):
    vals = [_scalar("xielu", n, v) for n, v in (("alpha_n", alpha_n), ("alpha_p", alpha_p), ("beta", beta), ("eps", eps))]
    if not all(map(math.isfinite, vals)):  # ggml stores softplus(alpha): a NaN/Inf poisons every element
        raise ValueError(f"xielu: alpha_n, alpha_p, beta and eps must be finite, got {vals}")
    try:
        r = _guarded("xielu")(ctx.ptr, a.ptr, *vals)
    except _ARG_ERRORS as e:
        raise _bad_arguments("xielu", e, ctx, a=a) from None
    return _result(ctx, r, "xielu", a)


# --- gated linear units: act(x) * g, x and g the two halves of a's rows (or a and b) ----------------
def _glu_halves(op: str, a) -> None:
    # ggml takes ne0 // 2 and silently drops an odd row's last element (backends need not agree on it)
    if isinstance(a, Tensor) and a.ptr.ne[0] % 2:
        raise ValueError(f"{op}: a's rows must have an even length (two halves), got ne0 = {a.ptr.ne[0]}")


def _make_glu(op: str) -> UnaryWrapper:
    fn = _guarded(op)

    def call(ctx: Context, a: Tensor) -> Tensor:
        _glu_halves(op, a)
        try:
            r = fn(ctx.ptr, a.ptr)
        except _ARG_ERRORS as e:
            raise _bad_arguments(op, e, ctx, a=a) from None
        return _result(ctx, r, op, a)
    call.__name__ = call.__qualname__ = op
    call.__doc__ = f"ggml_{op}: the {op.split('_')[0]} gated linear unit"
    return call


def _make_glu_split(op: str) -> BinaryWrapper:
    fn = _guarded(op)

    def call(ctx: Context, a: Tensor, b: Tensor) -> Tensor:
        try:
            r = fn(ctx.ptr, a.ptr, b.ptr)
        except _ARG_ERRORS as e:
            raise _bad_arguments(op, e, ctx, a=a, b=b) from None
        return _result(ctx, r, op, a, b)
    call.__name__ = call.__qualname__ = op
    call.__doc__ = f"ggml_{op}: the {op.split('_')[0]} gated linear unit, gate in b"
    return call


GLU_OPS = tuple(f"{g}{v}" for g in ("reglu", "geglu", "swiglu", "geglu_erf", "geglu_quick")
                for v in ("", "_swapped", "_split"))
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


def _glu_limit(op: str, b, limit) -> float:
    limit = _scalar(op, "limit", limit)
    if not limit > 0:  # the kernels clamp g to [-limit, limit]: an empty or NaN range is undefined
        raise ValueError(f"{op}: limit must be positive, got {limit}")
    return limit


def swiglu_oai(ctx, a: Tensor, b: Tensor | None = None, alpha: float = 1.702, limit: float = 7.0):
    alpha, limit = _scalar("swiglu_oai", "alpha", alpha), _glu_limit("swiglu_oai", b, limit)
    if not math.isfinite(alpha):
        raise ValueError(f"swiglu_oai: alpha must be finite, got {alpha}")
    if b is None:
        _glu_halves("swiglu_oai", a)
    try:
        r = _guarded("swiglu_oai")(ctx.ptr, a.ptr, _NULL if b is None else b.ptr, alpha, limit)
    except _ARG_ERRORS as e:
        raise _bad_arguments("swiglu_oai", e, ctx, a=a, **({} if b is None else {"b": b})) from None
    return _result(ctx, r, "swiglu_oai", a, *(() if b is None else (b,)))


def swiglu_clamp(ctx, a: Tensor, b: Tensor | None = None, limit: float = 7.0):
    limit = _glu_limit("swiglu_clamp", b, limit)
    if b is None:
        _glu_halves("swiglu_clamp", a)
    try:
        r = _guarded("swiglu_clamp")(ctx.ptr, a.ptr, _NULL if b is None else b.ptr, limit)
    except _ARG_ERRORS as e:
        raise _bad_arguments("swiglu_clamp", e, ctx, a=a, **({} if b is None else {"b": b})) from None
    return _result(ctx, r, "swiglu_clamp", a, *(() if b is None else (b,)))


# --- more arithmetic, casts, generators ----------------------------------------------------------------
def _call(op: str, ctx, tensors: dict, *rest):
    """ggml_<op>(ctx, *tensors, *rest), through the guard; a bad argument names itself."""
    try:
        r = _guarded(op)(ctx.ptr, *(t.ptr for t in tensors.values()), *rest)
    except _ARG_ERRORS as e:
        raise _bad_arguments(op, e, ctx, **tensors) from None
    return _result(ctx, r, op, *tensors.values())


def _type_arg(op: str, type) -> int:
    try:
        return int(types.as_type(type))
    except (ValueError, TypeError) as e:
        raise (ValueError if isinstance(e, ValueError) else TypeError)(f"{op}: type: {e}") from None


def add1(ctx, a: Tensor, b: Tensor):
    return _call("add1", ctx, {"a": a, "b": b})


def add_cast(ctx, a: Tensor, b: Tensor, type):
    return _call("add_cast", ctx, {"a": a, "b": b}, _type_arg("add_cast", type))


def cast(ctx, a: Tensor, type):
    return _call("cast", ctx, {"a": a}, _type_arg("cast", type))


def scale_bias(ctx, a: Tensor, s: float, b: float):
    return _call("scale_bias", ctx, {"a": a}, _scalar("scale_bias", "s", s), _scalar("scale_bias", "b", b))


def fill(ctx, a: Tensor, c: float):
    return _call("fill", ctx, {"a": a}, _scalar("fill", "c", c))


def count_equal(ctx, a: Tensor, b: Tensor):
    return _call("count_equal", ctx, {"a": a, "b": b})


TRI_TYPES = {"upper_diag": 0, "upper": 1, "lower_diag": 2, "lower": 3}


def tri(ctx, a: Tensor, type=0):
    """type: 0 upper_diag, 1 upper, 2 lower_diag, 3 lower (or those names)."""
    t = TRI_TYPES.get(type.lower(), -1) if isinstance(type, str) else _scalar("tri", "type", type, int)
    if t not in TRI_TYPES.values():  # the CPU kernel aborts on any other value
        raise ValueError(f"tri: type must be one of {TRI_TYPES} (or its name), got {type!r}")
    return _call("tri", ctx, {"a": a}, t)


def diag(ctx, a: Tensor):
    return _call("diag", ctx, {"a": a})


def diag_mask_zero(ctx, a: Tensor, n_past: int):
    n_past = _scalar("diag_mask_zero", "n_past", n_past, int)
    if not 0 <= n_past < 2**31:  # the kernel asserts n_past >= 0 on a worker thread
        raise ValueError(f"diag_mask_zero: n_past must be >= 0, got {n_past}")
    return _call("diag_mask_zero", ctx, {"a": a}, n_past)


def roll(ctx, a: Tensor, shift0: int = 0, shift1: int = 0, shift2: int = 0, shift3: int = 0):
    shifts = [_scalar("roll", f"shift{i}", v, int) for i, v in enumerate((shift0, shift1, shift2, shift3))]
    if not all(-2**31 < v < 2**31 for v in shifts):
        raise ValueError(f"roll: shifts {shifts} do not fit a C int")
    return _call("roll", ctx, {"a": a}, *shifts)


def repeat_4d(ctx, a: Tensor, ne0: int, ne1: int = 1, ne2: int = 1, ne3: int = 1):
    ne = _shape_arg("repeat_4d", (ne0, ne1, ne2, ne3))
    return _call("repeat_4d", ctx, {"a": a}, *ne)


def cumsum(ctx, a: Tensor):
    return _call("cumsum", ctx, {"a": a})


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
        raise ValueError(f"{op}: the view (offset {vals[3]}, strides {vals[:3]}, b's ne {ne}) ends at byte {end}, "
                         f"past a's {lib.ggml_nbytes(a.ptr)} bytes")
    return vals


def acc(ctx, a: Tensor, b: Tensor, nb1: int, nb2: int, nb3: int, offset: int):
    return _call("acc", ctx, {"a": a, "b": b}, *_view_of_b("acc", a, b, nb1, nb2, nb3, offset))


def set(ctx, a: Tensor, b: Tensor, nb1: int, nb2: int, nb3: int, offset: int):  # noqa: A001
    vals = _view_of_b("set", a, b, nb1, nb2, nb3, offset)
    if vals[3] >= 1 << 30:
        raise ValueError(f"set: offset must be < 2**30 (ggml stores it in an int32), got {vals[3]}")
    return _call("set", ctx, {"a": a, "b": b}, *vals)


def set_1d(ctx, a: Tensor, b: Tensor, offset: int):
    if isinstance(a, Tensor):
        _view_of_b("set_1d", a, b, a.ptr.nb[1], a.ptr.nb[2], a.ptr.nb[3], offset)
    return _call("set_1d", ctx, {"a": a, "b": b}, _scalar("set_1d", "offset", offset, int))


def set_2d(ctx, a: Tensor, b: Tensor, nb1: int, offset: int):
    if isinstance(a, Tensor):
        _view_of_b("set_2d", a, b, nb1, a.ptr.nb[2], a.ptr.nb[3], offset)
    return _call("set_2d", ctx, {"a": a, "b": b}, _scalar("set_2d", "nb1", nb1, int), _scalar("set_2d", "offset", offset, int))


# --- padding, embeddings ----------------------------------------------------------------------------------
def _pads(op: str, a, pads, circular: bool) -> list[int]:
    names = ("lp0", "rp0", "lp1", "rp1", "lp2", "rp2", "lp3", "rp3")
    vals = [_scalar(op, n, v, int) for n, v in zip(names, pads)]
    if not all(0 <= v < 2**31 for v in vals):
        raise ValueError(f"{op}: paddings must be >= 0, got {vals}")
    # the circular kernel wraps i - lp with (i - lp + ne) % ne: a left pad over ne reads before a
    if circular and isinstance(a, Tensor) and any(vals[2 * d] > a.ptr.ne[d] for d in range(4)):
        raise ValueError(f"{op}: a circular left padding must not exceed the dim (ne {list(a.ptr.ne)}), got {vals[0::2]}")
    return vals


def pad_ext(ctx, a: Tensor, lp0: int = 0, rp0: int = 0, lp1: int = 0, rp1: int = 0, lp2: int = 0, rp2: int = 0,
            lp3: int = 0, rp3: int = 0):
    return _call("pad_ext", ctx, {"a": a}, *_pads("pad_ext", a, (lp0, rp0, lp1, rp1, lp2, rp2, lp3, rp3), False))


def pad_ext_circular(ctx, a: Tensor, lp0: int = 0, rp0: int = 0, lp1: int = 0, rp1: int = 0, lp2: int = 0,
                     rp2: int = 0, lp3: int = 0, rp3: int = 0):
    pads = _pads("pad_ext_circular", a, (lp0, rp0, lp1, rp1, lp2, rp2, lp3, rp3), True)
    return _call("pad_ext_circular", ctx, {"a": a}, *pads)


def pad_circular(ctx, a: Tensor, p0: int = 0, p1: int = 0, p2: int = 0, p3: int = 0):
    pads = _pads("pad_circular", a, (0, p0, 0, p1, 0, p2, 0, p3), True)
    return _call("pad_circular", ctx, {"a": a}, *pads[1::2])


def timestep_embedding(ctx, timesteps: Tensor, dim: int, max_period: int = 10000):
    dim, max_period = _scalar("timestep_embedding", "dim", dim, int), _scalar("timestep_embedding", "max_period", max_period, int)
    if not 0 < dim < 2**31 or not 0 < max_period < 2**31:  # log(max_period) and a [dim, n] result
        raise ValueError(f"timestep_embedding: dim and max_period must be positive, got {dim}, {max_period}")
    # the kernel reads timesteps->ne[0] values: the rest of a 2-D or higher tensor would be ignored
    if isinstance(timesteps, Tensor) and any(timesteps.ptr.ne[d] != 1 for d in (1, 2, 3)):
        raise ValueError(f"timestep_embedding: timesteps must be a vector, got ne {list(timesteps.ptr.ne)}")
    return _call("timestep_embedding", ctx, {"timesteps": timesteps}, dim, max_period)


# the family's op wrappers, listed so that type checkers see them (tests/test_types.py keeps it exact)
__all__ = [
    "abs", "acc", "add", "add1", "add_cast", "arange", "cast", "ceil", "clamp", "cos",
    "count_equal", "cumsum", "diag", "diag_mask_zero", "div", "elu", "exp", "expm1", "fill",
    "floor", "geglu", "geglu_erf", "geglu_erf_split", "geglu_erf_swapped", "geglu_quick",
    "geglu_quick_split", "geglu_quick_swapped", "geglu_split", "geglu_swapped", "gelu", "gelu_erf",
    "gelu_quick", "hardsigmoid", "hardswish", "leaky_relu", "log", "mul", "neg", "pad_circular",
    "pad_ext", "pad_ext_circular", "reglu", "reglu_split", "reglu_swapped", "relu", "repeat_4d",
    "roll", "round", "scale", "scale_bias", "set", "set_1d", "set_2d", "sgn", "sigmoid", "silu",
    "sin", "softplus", "sqr", "sqrt", "step", "sub", "swiglu", "swiglu_clamp", "swiglu_oai",
    "swiglu_split", "swiglu_swapped", "tanh", "timestep_embedding", "tri", "trunc", "xielu",
]
