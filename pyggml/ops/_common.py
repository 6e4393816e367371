"""What every op wrapper shares: the guarded C call, the errors it raises, ownership (the wrappers themselves
are made by `pyggml.ops.declared` or written in their family). `pyggml.ops` says why the checks are what they
are."""

from __future__ import annotations

import inspect
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Callable

import numpy as np

from pyggml import types
from pyggml._native import ffi, guard_error, lib
from pyggml.arena import Arena
from pyggml.errors import GGMLError, OpError
from pyggml.tensor import MAX_DIMS, Tensor

if TYPE_CHECKING:
    from pyggml.context import Context

_NULL = ffi.NULL
_BLOCK = {int(t): types.block_size(t) for t in types.Type}
_TYPE_SIZE = {int(t): types.type_size(t) for t in types.Type}
_ARG_ERRORS = (AttributeError, TypeError, OverflowError)
# the hot wrappers make their result as `t = _new_tensor(Tensor); t.ptr, t.ctx = r, ctx`: Tensor(r, ctx)
# without the __init__ frame, a third of what the checked layer adds to a raw call (bench/checked_ops.py)
_new_tensor = object.__new__


def _guarded(c_name: str):
    return getattr(lib, f"pyggml_guarded_ggml_{c_name}")


def _bad_arguments(op: str, exc: Exception, ctx, **args) -> Exception:
    """The slow path of a call cffi refused: say which argument was wrong."""
    if not isinstance(ctx, Arena):
        return TypeError(f"{op}: ctx must be a Context, got {type(ctx).__name__}")
    for name, value in args.items():
        if not isinstance(value, Tensor):
            return TypeError(f"{op}: {name} must be a Tensor, got {type(value).__name__}")
    if isinstance(exc, OverflowError):
        return ValueError(f"{op}: an argument is out of range for ggml: {exc}")
    return TypeError(f"{op}: {exc}")


def _failed(op: str, operands: Mapping[str, Tensor] | Sequence[Tensor] = ()) -> Exception:
    """The exception for a guarded call that returned no tensor: ggml's failed condition as an `OpError` naming
    the op and, from `operands` (by parameter name, as ggml's condition names them, or in order), each operand's
    type, NumPy shape and ggml ne, with what to do where the condition is a known one."""
    err = guard_error(op)
    if err is None:
        return GGMLError(f"{op}: ggml returned no tensor")
    if isinstance(err, OpError) and operands:
        return OpError(f"{err}: {_operands_said(op, str(err), operands)}")
    return err


def _said(t: Tensor) -> str:
    name = f"{t.name!r} " if t.name else ""
    return f"{name}{types.Type(t.ptr.type).name.lower()} of shape {t.shape} (ne {t.ne})"


def _repeats(x: Tensor, y: Tensor) -> bool:
    """ggml_can_repeat(x, y): each of y's extents is a multiple of x's."""
    return all(n % m == 0 for m, n in zip(x.ne, y.ne))


# the binary arithmetic ops whose operands must repeat b into a
_ARITHMETIC = {"add": "+", "sub": "-", "mul": "*", "div": "/"}


def _operands_said(op: str, message: str, operands: Mapping[str, Tensor] | Sequence[Tensor]) -> str:
    """What `_failed` adds to ggml's condition: the operands, and for a condition it knows what to do."""
    named: dict[str, Tensor] = dict(operands) if isinstance(operands, Mapping) else {}
    found = re.search(r"ggml_can_repeat\((\w+), (\w+)\)", message)
    if found and found.group(1) in named and found.group(2) in named:
        x, y = found.group(1), found.group(2)
        tx, ty = named[x], named[y]
        said = (
            f"{x} {_said(tx)} cannot repeat into {y} {_said(ty)} (ggml tiles {x} over {y}, never {y} over {x}: each "
            f"of {y}'s ne must be a multiple of {x}'s)"
        )
        if _repeats(ty, tx) and op in _ARITHMETIC:
            sym = _ARITHMETIC[op]
            swap = (
                f"swap the operands, ctx.{op}({x}, {y}) ({y} {sym} {x} is {x} {sym} {y})"
                if sym in "+*"
                else f"repeat {y} first, ctx.{op}(ctx.repeat({y}, {x}), {x})"
            )
            said += f"; {y} repeats into {x}: {swap}"
        elif _repeats(ty, tx):
            said += f"; {y} repeats into {x}: swap them"
        else:
            said += f"; neither repeats into the other: give {x} extents that divide {y}'s (or 1s)"
        return said
    found = re.search(r"ggml_can_mul_mat\((\w+), (\w+)\)", message)
    if found and found.group(1) in named and found.group(2) in named:
        x, y = found.group(1), found.group(2)
        return (
            f"{x} {_said(named[x])}, {y} {_said(named[y])}: {op} needs the same ne[0] (the rows' length, NumPy's "
            f"last dim) in both, and {x}'s ne[2], ne[3] dividing {y}'s (t1 @ t2 with NumPy's meaning builds "
            "this from NumPy-order shapes)"
        )
    if named:
        return "; ".join(f"{n} {_said(t)}" for n, t in named.items())
    return "operands " + "; ".join(_said(t) for t in operands if isinstance(t, Tensor))


def _result(ctx, ptr, op: str, *srcs: Tensor) -> Tensor:
    if not ptr:
        raise _failed(op, srcs)
    for s in srcs:
        if s.ctx is not ctx:
            ctx.adopt(s)
    t = _new_tensor(Tensor)
    t.ptr, t.ctx = ptr, ctx
    return t


def _scalar(op: str, name: str, value, kind=float):
    """A Python number for a C scalar argument, or a TypeError naming the op and the argument.

    float: anything with __float__ (int, float, NumPy scalars) but a str, bytes or bool: `float("2")`
    would parse text, and `True` is no scale or epsilon. int: anything with __index__ but a bool; a
    float is refused rather than truncated (`int(2.7)` is 2)."""
    if kind is float:
        if type(value) is float:
            return value
        if not isinstance(value, _NOT_NUMBERS) and hasattr(value, "__float__"):
            try:
                return float(value)
            except (TypeError, ValueError, OverflowError):
                pass
        what = "a number"
    else:
        if type(value) is int:
            return value
        if not isinstance(value, _NOT_NUMBERS) and hasattr(value, "__index__"):
            return value.__index__()
        what = "an integer"
    raise TypeError(f"{op}: {name} must be {what}, got {type(value).__name__} {value!r}")


# what `float()`/`int()` would accept but no scalar argument of an op means: text, and truth values
# (and a Tensor: its `__float__` reads a one-value tensor's memory, no value to pass to ggml as a constant)
_NOT_NUMBERS = (str, bytes, bytearray, bool, np.bool_, Tensor)


def _check_scalars(op: str, floats: dict | None = None, ints: dict | None = None) -> None:
    """The slow path of a call that passed its scalars to cffi unconverted (the hot wrappers): raise
    the TypeError naming the first argument that is not a number of its kind."""
    for name, v in (floats or {}).items():
        _scalar(op, name, v)
    for name, v in (ints or {}).items():
        _scalar(op, name, v, int)


def _fill(doc: str, width: int = 100) -> str:
    """A generated docstring's long lines wrapped for help(); a line "name: ..." continues indented."""
    import re
    import textwrap

    out = []
    for line in doc.splitlines():
        if len(line) <= width:  # most lines: nothing to wrap (and textwrap is what import would spend)
            out.append(line)
            continue
        label = re.match(r"(\w+: |Precision: |Result: )", line)
        out.append(textwrap.fill(line, width, subsequent_indent="   " if label else ""))
    return "\n".join(out)


# --- the types of the wrappers of the common call shapes: (ctx, a), (ctx, a, b) ---------------------------
# typed so that IDEs and type checkers see the declared ones as methods
# of Context too (pyggml/ops/methods.py)
UnaryWrapper = Callable[["Context", Tensor], Tensor]
BinaryWrapper = Callable[["Context", Tensor, Tensor], Tensor]


def _self_overlapping(p) -> bool:
    """Some element of the tensor is reached by two index tuples (a stride too small for the dims
    inside it): writing into it would depend on the order the kernel's threads write in."""
    reach = _TYPE_SIZE[p.type]  # bytes spanned by the dims seen so far (one element or block at first)
    extents = [p.ne[0] // _BLOCK[p.type], p.ne[1], p.ne[2], p.ne[3]]  # dim 0 in blocks, as nb[0] counts
    for nb, ne in sorted((p.nb[i], extents[i]) for i in range(MAX_DIMS) if extents[i] > 1):
        if nb < reach:
            return True
        reach += nb * (ne - 1)
    return False


def _destination(op: str, t) -> None:
    if isinstance(t, Tensor) and t.ptr.view_src and _self_overlapping(t.ptr):
        raise ValueError(
            f"{op}: the destination view overlaps itself (strides {tuple(t.ptr.nb)} for ne "
            f"{tuple(t.ptr.ne)}); what is written would depend on the order of the writes"
        )


_BLOCKED = frozenset(t for t, b in _BLOCK.items() if b > 1)


def _whole_blocks(op: str, t: Tensor) -> Tensor:
    """A permutation of a quantized tensor must keep whole blocks in its rows: ggml does not check,
    and a kernel would read a block as if it were one element."""
    blck = _BLOCK[t.ptr.type]
    if blck > 1 and t.ptr.ne[0] % blck:
        raise ValueError(
            f"{op}: the result's rows ({t.ptr.ne[0]} elements) must hold whole blocks of "
            f"{blck} ({types.Type(t.ptr.type).name}); a quantized tensor's rows cannot be permuted"
        )
    return t


def _shape_arg(op: str, ne) -> list[int]:
    out = []
    for n in ne:
        if isinstance(n, bool) or not hasattr(n, "__index__"):
            raise TypeError(f"{op}: ne must be integers, got {list(ne)}")
        out.append(n.__index__())
    if any(n <= 0 for n in out):
        raise ValueError(f"{op}: ne must be positive, got {out} (ggml does not handle empty tensors)")
    return out


def op_names(namespace: dict[str, object]) -> list[str]:
    """A family module's `__all__`, derived rather than kept by hand: every public function made in that
    module (a `def`, or one made by `declared`, which sets its module) whose first
    parameter is `ctx`. Helpers imported from elsewhere and private names are left out."""
    module = namespace["__name__"]
    out = []
    for name, value in namespace.items():
        if name.startswith("_") or not inspect.isfunction(value) or value.__module__ != module:
            continue
        params = list(inspect.signature(value).parameters)
        if params and params[0] == "ctx":
            out.append(name)
    return sorted(out)
