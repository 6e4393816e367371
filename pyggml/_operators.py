"""Tensor's arithmetic operators (`a + b`, `a - 2.0`, `1.0 / a`, `-a`, `a @ b`): the ggml ops that compute what
NumPy computes for arrays of the tensors' NumPy-order shapes, exactly where NumPy's float32 (float16) result is
one IEEE operation, or a clear exception.

The rules (`Tensor`'s docstring says them to users):

- Two tensors: both of one float type (F32, F16, BF16); their NumPy-order shapes must broadcast (NumPy's rule).
  ggml_add/sub/mul/div repeat their second operand into the first, never the first into the second: where
  NumPy would broadcast `a` into `b`, `a + b` and `a * b` are built as `b + a` and `b * a` (IEEE addition and
  multiplication commute exactly); `a - b` and `a / b` raise, saying to repeat `a` first, as does a pair that
  broadcasts both ways ((3, 1) with (1, 4)).
- A number (int, float, a NumPy integer or float scalar) with an F32 or F16 tensor: rounded to the tensor's
  type first, as NumPy does with a Python number (NEP 50; a np.float64 operand, which NumPy would promote to
  float64, is rounded the same way). `t * c` is ggml_scale (one exact product); `t + c`, `t - c`, `c - t` are
  ggml_scale_bias with a factor of 1 or -1 (the product exact, so one rounding even where the backend fuses
  it) on F32; `t / c` is ggml_scale by 1/c where c is a power of two (1/c exact), else, and everything on F16
  and for `c / t`, the ggml op between the tensor and a one-value constant ggml_fill makes (add, sub, mul, div
  of the tensor and ggml_repeat of it: exact). A zero c on add/sub takes that path too: ggml_scale_bias with a
  bias of 0 leaves -0.0 as -0.0 where `-0.0 + 0.0` is 0.0.
- `-t`: ggml_neg.
- `a @ b`: NumPy's matmul for NumPy-order shapes (see `matmul`).

Each result has the rank of NumPy's result (`Tensor.shape`). The result is built in the left operand's context
(a number's tensor's for a reflected form), which keeps the other's alive, as every op does.
"""

from __future__ import annotations

import math
import sys
from typing import Any

import numpy as np

from pyggml import ops
from pyggml.tensor import MAX_DIMS, Tensor, _register_operators, set_rank
from pyggml.types import Type

_FLOAT_TYPES = (Type.F32, Type.F16, Type.BF16)
_SCALAR_TYPES: dict[Type, type[np.floating[Any]]] = {Type.F32: np.float32, Type.F16: np.float16}
_SYMBOL = {"add": "+", "sub": "-", "mul": "*", "div": "/"}
_OPS = {"add": ops.add, "sub": ops.sub, "mul": ops.mul, "div": ops.div}
_NUMBERS = (int, float, np.integer, np.floating)


def _said(t: Tensor) -> str:
    name = f"{t.name!r}, " if t.name else ""
    return f"({name}{t.type.name.lower()} of shape {t.shape})"


def _context(t: Tensor, what: str) -> Any:
    if t.ctx is None:
        raise ValueError(
            f"{what}: tensor {_said(t)} was handed over by a ggml callback and has no Context to build the result in"
        )
    return t.ctx


def _ne(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(reversed(shape)) + (1,) * (MAX_DIMS - len(shape))


def _shaped(r: Tensor, shape: tuple[int, ...]) -> Tensor:
    """r given NumPy's rank for `shape` (its extents are already those)."""
    if r.ne != _ne(shape):  # the ops above make exactly these extents: a mismatch is pyggml's bug
        raise AssertionError(f"operator result ne {r.ne}, expected {_ne(shape)} (NumPy shape {shape})")
    set_rank(r.ptr, len(shape))
    return r


def _is_number(v: object) -> bool:
    return isinstance(v, _NUMBERS) and not isinstance(v, (bool, np.bool_))


def _float_type(t: Tensor, what: str, allowed: tuple[Type, ...] = _FLOAT_TYPES) -> None:
    if t.type not in allowed:
        names = ", ".join(x.name.lower() for x in allowed)
        raise TypeError(
            f"{what}: tensor {_said(t)}: the operators take {names} tensors; cast it first "
            f"(ctx.cast(t, 'f32')) or call the ggml op itself (ctx.add, ctx.mul, ...)"
        )


def binary(op: str, t: Tensor, other: object, reflected: bool = False) -> Any:
    """`t <op> other` (or `other <op> t` where reflected): a Tensor, or NotImplemented for an operand of
    another kind (Python then tries the other's method, or raises TypeError).

    Args:
        op: "add", "sub", "mul" or "div".
        t: the Tensor whose method was called.
        other: the other operand: a Tensor or a number.
        reflected: whether t is the right operand (`2.0 - t`).

    Returns:
        The result Tensor, or NotImplemented.
    """
    if isinstance(other, Tensor):
        return _tensors(op, t, other)
    if _is_number(other):
        return _with_number(op, t, other, reflected)
    return NotImplemented


def _tensors(op: str, a: Tensor, b: Tensor) -> Tensor:
    sym = _SYMBOL[op]
    what = f"a {sym} b"
    _float_type(a, what)
    _float_type(b, what)
    if a.type != b.type:
        raise TypeError(
            f"{what}: a {_said(a)}, b {_said(b)}: the operators take one type (NumPy would promote, ggml "
            "computes in a's type); cast one first (ctx.cast(b, a.type))"
        )
    try:
        shape = np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        raise ValueError(
            f"{what}: a {_said(a)} and b {_said(b)} do not broadcast (NumPy's rule: each dim equal or 1)"
        ) from None
    ctx = _context(a, what)
    ne = _ne(shape)
    if a.ne == ne:
        return _shaped(_OPS[op](ctx, a, b), shape)
    if b.ne == ne and op in ("add", "mul"):
        return _shaped(_OPS[op](ctx, b, a), shape)  # exact: IEEE + and * commute
    if b.ne == ne:
        raise ValueError(
            f"{what}: NumPy would broadcast a {_said(a)} into b {_said(b)}, and ggml_{op} repeats only its second "
            f"operand into the first: repeat a first, ctx.repeat(a, b) {sym} b"
        )
    raise ValueError(
        f"{what}: a {_said(a)} and b {_said(b)} broadcast each into the other (to {shape}), and ggml_{op} repeats "
        f"only its second operand into the first: repeat a to the result's shape first, "
        f"ctx.repeat_4d(a, *{ne}) {sym} b"
    )


def _power_of_two_reciprocal(c: float) -> float | None:
    """1/c where c is a power of two whose reciprocal float32 holds exactly (so x * (1/c) is x / c); else None."""
    if not math.isfinite(c) or c == 0:
        return None
    mantissa, _ = math.frexp(c)
    if abs(mantissa) != 0.5:
        return None
    inv = 1.0 / c  # exact in float64
    return inv if math.isfinite(float(np.float32(inv))) and float(np.float32(inv)) == inv else None


def _with_number(op: str, t: Tensor, c: Any, reflected: bool) -> Tensor:
    sym = _SYMBOL[op]
    what = f"c {sym} t" if reflected else f"t {sym} c"
    _float_type(t, what, tuple(_SCALAR_TYPES))
    ctx = _context(t, what)
    try:
        with np.errstate(over="ignore"):  # NumPy's own result is inf there too
            k = float(_SCALAR_TYPES[t.type](c))  # rounded to t's type, as NumPy rounds a Python number
    except OverflowError:
        raise OverflowError(f"{what}: the number {c!r} is too large to convert to a float") from None
    shape = t.shape
    if t.type == Type.F32:
        if op == "mul":
            return _shaped(ops.scale(ctx, t, k), shape)
        if op == "add" and k != 0:
            return _shaped(ops.scale_bias(ctx, t, 1.0, k), shape)
        if op == "sub" and k != 0:
            return _shaped(ops.scale_bias(ctx, t, -1.0, k) if reflected else ops.scale_bias(ctx, t, 1.0, -k), shape)
        if op == "div" and not reflected:
            inv = _power_of_two_reciprocal(k)
            if inv is not None:
                return _shaped(ops.scale(ctx, t, inv), shape)
    # the exact path: a one-value constant of t's type (k holds exactly in it), repeated where it comes first
    one = ops.fill(ctx, ops.view_1d(ctx, t, 1, 0), k)
    set_rank(one.ptr, 0)
    if reflected:
        r = _OPS[op](ctx, ops.repeat(ctx, one, t), t)
    else:
        r = _OPS[op](ctx, t, one)
    return _shaped(r, shape)


def neg(t: Tensor) -> Tensor:
    """`-t`: ggml_neg (exact).

    Args:
        t: an F32, F16 or BF16 tensor.

    Returns:
        The result Tensor, t's shape and type.
    """
    _float_type(t, "-t")
    return _shaped(ops.neg(_context(t, "-t"), t), t.shape)


def matmul(a: object, b: object) -> Any:
    """`a @ b` with NumPy's meaning for NumPy-order shapes: (m, k) @ (k, n) -> (m, n); a 1-d a is a row,
    a 1-d b a column (dropped from the result, as NumPy does); leading dims are batch dims, broadcast.

    ggml_mul_mat(x, y) computes y @ x.T per matrix (NumPy order), so a @ b is mul_mat(cont(b.T), a) (no copy
    where b is a transposed view whose transpose is contiguous: `x @ ctx.transpose(w)` multiplies by the weight
    w itself). ggml repeats x's matrices over y's batch dims, not y's over x's: where b's batch dims are each 1
    or a's this is it; where a's are each 1 or b's, it is built as (b.T @ a.T).T (a copy of the result); a mix
    of both raises. The result is F32 (ggml's mul_mat); a is F32, b F32, F16 or BF16 (then a is rounded to b's
    type first: mul_mat's precision). A quantized weight w cannot be transposed: x @ w.T is ctx.mul_mat(w, x).

    Args:
        a: the left operand (a Tensor; else NotImplemented).
        b: the right operand (a Tensor; else NotImplemented).

    Returns:
        The result Tensor, or NotImplemented.
    """
    if not isinstance(a, Tensor) or not isinstance(b, Tensor):
        return NotImplemented
    what = "a @ b"
    if a.type != Type.F32:
        raise TypeError(f"{what}: a {_said(a)}: ggml's mul_mat takes F32 activations; cast it first (ctx.cast)")
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError(f"{what}: a {_said(a)}, b {_said(b)}: matmul needs operands of one dim or more (NumPy's rule)")
    a2 = (1, *a.shape) if a.ndim == 1 else a.shape
    b2 = (*b.shape, 1) if b.ndim == 1 else b.shape
    m, k = a2[-2:]
    kb, n = b2[-2:]
    if k != kb:
        raise ValueError(
            f"{what}: a {_said(a)}, b {_said(b)}: a's last dim ({k}) must be b's "
            f"{'only' if b.ndim == 1 else 'second to last'} dim ({kb})"
        )
    try:
        batch = np.broadcast_shapes(a2[:-2], b2[:-2])
    except ValueError:
        raise ValueError(
            f"{what}: a {_said(a)}, b {_said(b)}: the batch dims do not broadcast (NumPy's rule)"
        ) from None
    shape = batch + ((m,) if a.ndim > 1 else ()) + ((n,) if b.ndim > 1 else ())
    ctx = _context(a, what)
    if b.type not in _FLOAT_TYPES:
        raise TypeError(
            f"{what}: b {_said(b)}: the operator takes f32, f16 or bf16 operands; for a quantized weight w "
            "(whose rows cannot be transposed), x @ w.T is ctx.mul_mat(w, x)"
        )
    ab = (1,) * (len(batch) - len(a2) + 2) + a2[:-2]
    bb = (1,) * (len(batch) - len(b2) + 2) + b2[:-2]
    y = a if a.is_contiguous() else ops.cont(ctx, a)
    if b.ndim == 1:
        # b as one row of k: mul_mat(b, a) is a's rows dotted with it, ne [1, m, ...]
        r = ops.mul_mat(ctx, b, y)
    elif all(q in (1, p) for p, q in zip(ab, bb)):
        bt = ops.transpose(ctx, b)
        if not bt.is_contiguous():
            bt = ops.cont(ctx, bt)
        r = ops.mul_mat(ctx, bt, y)
    elif all(p in (1, q) for p, q in zip(ab, bb)):
        if b.type != Type.F32:
            raise TypeError(
                f"{what}: a {_said(a)} broadcasts over b's batch dims, built as (b.T @ a.T).T, which needs an F32 b"
            )
        r = ops.mul_mat(ctx, y, ops.cont(ctx, ops.transpose(ctx, b)))  # ne [m, n, ...]: (a @ b) transposed
        r = ops.cont(ctx, ops.transpose(ctx, r)) if m > 1 and n > 1 else r
    else:
        raise ValueError(
            f"{what}: a {_said(a)}, b {_said(b)}: NumPy broadcasts each operand's batch dims over the other's, "
            "ggml_mul_mat repeats only one operand's matrices: repeat one first (ctx.repeat)"
        )
    ne = _ne(shape)
    if r.ne != ne:  # the same elements in the same order: only dims of 1 dropped or moved
        r = ops.reshape_4d(ctx, r, *ne)
    return _shaped(r, shape)


_register_operators(sys.modules[__name__])
