"""Data movement: row gather/scatter, copies, views, reshapes, permutations, concatenation."""

from __future__ import annotations

from pyggml import types
from pyggml._args import integer
from pyggml._native import lib
from pyggml.ops._common import (
    UnaryWrapper,
    BinaryWrapper,
    _new_tensor,
    _ARG_ERRORS,
    _BLOCK,
    _BLOCKED,
    _TYPE_SIZE,
    _bad_arguments,
    _destination,
    _failed,
    _guarded,
    _make_binary,
    _make_unary,
    _result,
    _self_overlapping,
    _shape_arg,
    _whole_blocks,
)
from pyggml.tensor import MAX_DIMS, Tensor

# --- index ops --------------------------------------------------------------------------------------------
get_rows: BinaryWrapper = _make_binary("get_rows")
get_rows.__doc__ = "Rows b (I32 [n, ne2, ne3]) of a ([ne0, rows, ne2, ne3]). Index values are checked before compute."
_set_rows = _guarded("set_rows")

def set_rows(ctx, a, b, c):
    """Write rows of b into rows c (I32/I64 index) of a; returns a view of a as the op's node."""
    try:
        pa = a.ptr
        if pa.view_src and _self_overlapping(pa):
            _destination("set_rows", a)
        r = _set_rows(ctx.ptr, pa, b.ptr, c.ptr)
    except _ARG_ERRORS as e:
        raise _bad_arguments("set_rows", e, ctx, a=a, b=b, c=c) from None
    if not r:
        raise _failed("set_rows")
    if a.ctx is not ctx:
        ctx.adopt(a)
    if b.ctx is not ctx:
        ctx.adopt(b)
    if c.ctx is not ctx:
        ctx.adopt(c)
    t = _new_tensor(Tensor)
    t.ptr, t.ctx = r, ctx
    return t


# --- data movement: copies, views, shapes ----------------------------------------------------------------
_cpy: BinaryWrapper = _make_binary("cpy")


def cpy(ctx, a, b):
    """Copy a into b (same number of elements, converting type); the result is a view of b."""
    _destination("cpy", b)
    return _cpy(ctx, a, b)
dup: UnaryWrapper = _make_unary("dup")
cont: UnaryWrapper = _make_unary("cont")
_transpose: UnaryWrapper = _make_unary("transpose")




def transpose(ctx, a):
    t = _transpose(ctx, a)
    return _whole_blocks("transpose", t) if t.ptr.type in _BLOCKED else t
def reshape(ctx, a, b):
    """Reshape a to b's shape, like ggml_reshape."""
    if not isinstance(b, Tensor):
        raise TypeError(f"reshape: b must be a Tensor, got {type(b).__name__}")
    return _reshape_nd("reshape", ctx, a, *b.ne)
repeat: BinaryWrapper = _make_binary("repeat")
repeat.__doc__ = "Repeat a to b's shape."




def _cont_nd(op: str, ctx, a, ne) -> Tensor:
    ne0, ne1, ne2, ne3 = _shape_arg(op, ne)
    if isinstance(a, Tensor) and ne0 % _BLOCK[a.ptr.type]:  # the result's rows must hold whole blocks
        raise ValueError(f"{op}: ne[0] ({ne0}) must be a multiple of {a.type.name}'s block size {_BLOCK[a.ptr.type]}")
    try:
        r = _guarded("cont_4d")(ctx.ptr, a.ptr, ne0, ne1, ne2, ne3)
    except _ARG_ERRORS as e:
        raise _bad_arguments(op, e, ctx, a=a) from None
    return _result(ctx, r, op, a)


def cont_1d(ctx, a, ne0):
    return _cont_nd("cont_1d", ctx, a, (ne0, 1, 1, 1))


def cont_2d(ctx, a, ne0, ne1):
    return _cont_nd("cont_2d", ctx, a, (ne0, ne1, 1, 1))


def cont_3d(ctx, a, ne0, ne1, ne2):
    return _cont_nd("cont_3d", ctx, a, (ne0, ne1, ne2, 1))


def cont_4d(ctx, a, ne0, ne1=1, ne2=1, ne3=1):
    return _cont_nd("cont_4d", ctx, a, (ne0, ne1, ne2, ne3))


_reshape_4d = _guarded("reshape_4d")


def _reshape_nd(op: str, ctx, a, ne0, ne1, ne2, ne3) -> Tensor:
    try:
        p = a.ptr
        # ggml checks only that the element counts agree (which two negative extents also do), not
        # that quantized rows keep whole blocks (its row-size assert is compiled out)
        if (ne0 | ne1 | ne2 | ne3) < 0 or (p.type in _BLOCKED and ne0 % _BLOCK[p.type]):
            raise ValueError
        r = _reshape_4d(ctx.ptr, p, ne0, ne1, ne2, ne3)
    except (*_ARG_ERRORS, ValueError) as e:
        raise _reshape_error(op, e, ctx, a, (ne0, ne1, ne2, ne3)) from None
    if not r:
        raise _reshape_error(op, None, ctx, a, (ne0, ne1, ne2, ne3))
    if a.ctx is not ctx:
        ctx.adopt(a)
    t = _new_tensor(Tensor)
    t.ptr, t.ctx = r, ctx
    return t


def _reshape_error(op: str, exc, ctx, a, ne) -> Exception:
    """The slow path: which of a reshape's conditions failed."""
    try:
        ne = _shape_arg(op, ne)
    except (TypeError, ValueError) as e:
        return e
    if isinstance(a, Tensor) and ne[0] % _BLOCK[a.ptr.type]:
        return ValueError(f"{op}: ne[0] ({ne[0]}) must be a multiple of {a.type.name}'s block size "
                          f"{_BLOCK[a.ptr.type]}")
    return _failed(op) if exc is None else _bad_arguments(op, exc, ctx, a=a)


def reshape_1d(ctx, a, ne0):
    return _reshape_nd("reshape_1d", ctx, a, ne0, 1, 1, 1)


def reshape_2d(ctx, a, ne0, ne1):
    return _reshape_nd("reshape_2d", ctx, a, ne0, ne1, 1, 1)


def reshape_3d(ctx, a, ne0, ne1, ne2):
    return _reshape_nd("reshape_3d", ctx, a, ne0, ne1, ne2, 1)


def reshape_4d(ctx, a, ne0, ne1=1, ne2=1, ne3=1):
    return _reshape_nd("reshape_4d", ctx, a, ne0, ne1, ne2, ne3)


_permute = _guarded("permute")


def permute(ctx, a, axis0: int, axis1: int, axis2: int, axis3: int):
    """ggml_permute: source dim i goes to position axis_i."""
    try:
        r = _permute(ctx.ptr, a.ptr, axis0, axis1, axis2, axis3)
    except _ARG_ERRORS as e:
        raise _bad_arguments("permute", e, ctx, a=a) from None
    if not r:
        raise _failed("permute")
    if a.ctx is not ctx:
        ctx.adopt(a)
    if r.type in _BLOCKED:
        _whole_blocks("permute", Tensor(r, ctx))
    t = _new_tensor(Tensor)
    t.ptr, t.ctx = r, ctx
    return t


def concat(ctx, a, b, dim: int):
    dim = integer("concat: dim", dim)
    try:
        r = _guarded("concat")(ctx.ptr, a.ptr, b.ptr, dim)
    except _ARG_ERRORS as e:
        raise _bad_arguments("concat", e, ctx, a=a, b=b) from None
    return _result(ctx, r, "concat", a, b)


def pad(ctx, a, p0: int, p1: int = 0, p2: int = 0, p3: int = 0):
    p = [integer(f"pad: p{i}", v) for i, v in enumerate((p0, p1, p2, p3))]
    if min(p) < 0:  # ggml would make a tensor of negative extent
        raise ValueError(f"pad: padding must be non-negative, got {p}")
    try:
        r = _guarded("pad")(ctx.ptr, a.ptr, *p)
    except _ARG_ERRORS as e:
        raise _bad_arguments("pad", e, ctx, a=a) from None
    return _result(ctx, r, "pad", a)


_VIEW_FNS = {1: _guarded("view_1d"), 2: _guarded("view_2d"), 3: _guarded("view_3d"), 4: _guarded("view_4d")}


def _view(op: str, ctx, a, ne: tuple, nb: tuple, offset) -> Tensor:
    # ggml only checks that a contiguous block of the view's size fits from `offset`; strides
    # that reach further would let a kernel read or write past the tensor
    try:
        p = a.ptr
        negative = min(ne) < 0 or offset < 0 or (nb and min(nb) < 0)
    except (AttributeError, TypeError):
        if not isinstance(a, Tensor):
            raise TypeError(f"{op}: a must be a Tensor, got {type(a).__name__}") from None
        _shape_arg(op, ne), [integer(f"{op}: nb", n) for n in nb], integer(f"{op}: offset", offset)
        raise
    if negative or not all(ne):
        raise ValueError(f"{op}: ne must be positive and strides and offset non-negative (ggml does not handle "
                         f"empty tensors), got ne={list(ne)}, nb={list(nb)}, offset={offset}")
    t = p.type
    blck = _BLOCK[t]
    if ne[0] % blck:
        raise ValueError(f"{op}: ne[0] ({ne[0]}) must be a multiple of {types.Type(t).name}'s block size {blck}")
    nbytes = lib.ggml_nbytes(p)
    if all(ne):
        span = offset + ne[0] // blck * _TYPE_SIZE[t]
        for n, s in zip(ne[1:], nb):
            span += (n - 1) * s
        if span > nbytes:
            raise ValueError(f"{op}: the view ({list(ne)} with strides {list(nb)} at offset {offset}) reaches byte "
                             f"{span}, past the end of a ({nbytes} bytes)")
    elif offset > nbytes:
        raise ValueError(f"{op}: offset {offset} must lie inside a ({nbytes} bytes)")
    try:
        if len(ne) == 2:
            r = _VIEW_FNS[2](ctx.ptr, p, ne[0], ne[1], nb[0], offset)
        elif len(ne) == 1:
            r = _VIEW_FNS[1](ctx.ptr, p, ne[0], offset)
        elif len(ne) == 3:
            r = _VIEW_FNS[3](ctx.ptr, p, ne[0], ne[1], ne[2], nb[0], nb[1], offset)
        else:
            r = _VIEW_FNS[4](ctx.ptr, p, ne[0], ne[1], ne[2], ne[3], nb[0], nb[1], nb[2], offset)
    except _ARG_ERRORS as e:
        raise _bad_arguments(op, e, ctx, a=a) from None
    return _result(ctx, r, op, a)


def _sum_strides(ne, nb) -> int:
    total = 0
    for n, s in zip(ne, nb):
        total += (n - 1) * s
    return total


def view_1d(ctx, a, ne0, offset=0):
    return _view("view_1d", ctx, a, (ne0,), (), offset)


_view_2d = _VIEW_FNS[2]


def view_2d(ctx, a, ne0, ne1, nb1, offset=0):
    # the view most graphs use, written out: the generic _view costs twice as much
    try:
        p = a.ptr
        if ne0 <= 0 or ne1 <= 0 or nb1 < 0 or offset < 0:
            raise ValueError
        t = p.type
        blck = _BLOCK[t]
        row = ne0 // blck * _TYPE_SIZE[t]
        # rows no further apart than their length: ggml's own check (a contiguous block of ne1 rows
        # from offset fits) covers the strides; wider strides reach further and are checked here
        if ne0 % blck or (nb1 > row and offset + row + (ne1 - 1) * nb1 > lib.ggml_nbytes(p)):
            raise ValueError
        r = _view_2d(ctx.ptr, p, ne0, ne1, nb1, offset)
    except (*_ARG_ERRORS, ValueError):
        return _view("view_2d", ctx, a, (ne0, ne1), (nb1,), offset)  # says what is wrong
    if not r:
        raise _failed("view_2d")
    if a.ctx is not ctx:
        ctx.adopt(a)
    t = _new_tensor(Tensor)
    t.ptr, t.ctx = r, ctx
    return t


def view_3d(ctx, a, ne0, ne1, ne2, nb1, nb2, offset=0):
    return _view("view_3d", ctx, a, (ne0, ne1, ne2), (nb1, nb2), offset)


def view_4d(ctx, a, ne0, ne1, ne2, ne3, nb1, nb2, nb3, offset=0):
    return _view("view_4d", ctx, a, (ne0, ne1, ne2, ne3), (nb1, nb2, nb3), offset)


def view_nd(ctx, a, ne, nb, offset=0):
    """A view with explicit strides for every dim (nb[0] included), for views no ggml_view_Nd makes:
    ggml_view_4d of ne/nb[1:], then nb[0] and any widened ne set on the view, as llama.cpp's seed does
    with its overlapping conv windows."""
    if not isinstance(a, Tensor):
        raise TypeError(f"view_nd: a must be a Tensor, got {type(a).__name__}")
    ne, nb = _shape_arg("view_nd", ne), [integer("view_nd: nb", n) for n in nb]
    offset = integer("view_nd: offset", offset)
    if not len(ne) == len(nb) == MAX_DIMS:
        raise ValueError(f"view_nd: ne and nb must have {MAX_DIMS} entries")
    if offset < 0 or any(n < 0 for n in nb):
        raise ValueError(f"view_nd: offset and strides must be non-negative, got offset {offset}, nb {nb}")
    if types.is_quantized(a.type) or types.block_size(a.type) != 1:
        raise ValueError(f"view_nd: {a.type.name} has blocks; only views of unblocked types set nb[0]")
    if not all(ne):
        raise ValueError(f"view_nd: ne must be positive, got {ne}")
    if nb[0] < a.element_size and ne[0] > 1:
        raise ValueError("view_nd: nb[0] must be at least the element size")
    span = offset + a.element_size + _sum_strides(ne, nb)
    if span > a.nbytes:
        raise ValueError(f"view_nd: the view reaches byte {span}, past the end of a ({a.nbytes} bytes)")
    v = _view("view_nd", ctx, a, (1, 1, 1, 1), (a.nb[1], a.nb[2], a.nb[3]), offset)
    for i in range(MAX_DIMS):
        v.ptr.ne[i] = ne[i]
        v.ptr.nb[i] = nb[i]
    return v


def set_name(ctx, a, name: str):
    if not isinstance(a, Tensor):
        raise TypeError(f"set_name: a must be a Tensor, got {type(a).__name__}")
    return a.set_name(name)



view_tensor: UnaryWrapper = _make_unary("view_tensor")
view_tensor.__doc__ = "ggml_view_tensor(ctx, a): a view of all of a (same shape, strides and type)."


# the family's op wrappers, listed so that type checkers see them (tests/test_types.py keeps it exact)
__all__ = [
    "concat", "cont", "cont_1d", "cont_2d", "cont_3d", "cont_4d", "cpy", "dup", "get_rows", "pad",
    "permute", "repeat", "reshape", "reshape_1d", "reshape_2d", "reshape_3d", "reshape_4d",
    "set_name", "set_rows", "transpose", "view_1d", "view_2d", "view_3d", "view_4d", "view_nd",
    "view_tensor",
]
