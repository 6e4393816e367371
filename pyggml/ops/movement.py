"""Data movement: row gather/scatter, copies, views, reshapes, permutations, concatenation."""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace
from typing import TYPE_CHECKING, cast

from pyggml import types
from pyggml._args import integer
from pyggml._native import lib
from pyggml.ops._common import (
    _ARG_ERRORS,
    _BLOCK,
    _BLOCKED,
    _TYPE_SIZE,
    BinaryWrapper,
    UnaryWrapper,
    _bad_arguments,
    _check_scalars,
    _destination,
    _failed,
    _guarded,
    _new_tensor,
    _result,
    _self_overlapping,
    _shape_arg,
    _whole_blocks,
)
from pyggml.ops.declared import declared
from pyggml.tensor import MAX_DIMS, RANK_BYTE, Tensor, rank

if TYPE_CHECKING:
    from pyggml.context import Context

_RANK_2 = RANK_BYTE[2]

# --- index ops --------------------------------------------------------------------------------------------
get_rows: BinaryWrapper = declared(
    "get_rows",
    """ggml_get_rows: the rows of a that b lists (an embedding lookup): a[..., b[i], :] in NumPy terms.

a: ne [ne0, rows, ne2, ne3] (ggml order; NumPy shape (ne3, ne2, rows, ne0)), any type with a row
   reader (F32, F16, BF16, quantized: dequantized on the way; I32).
b: I32 ne [n, ne2, ne3] (NumPy shape (ne3, ne2, n)): row indices, each in 0..rows-1 (checked
   before compute); b's dims 1 and 2 pick a's dims 2 and 3.
Result: F32 ne [ne0, n, ne2, ne3] (I32 for an I32 a). Exact (a quantized row is dequantized as
types.decode does).""",
)
_set_rows = _guarded("set_rows")


# hand-written (hot: each layer's KV cache write): the overlap check inlined; a declared check costs 40% more
def set_rows(ctx: Context, a: Tensor, b: Tensor, c: Tensor) -> Tensor:
    """ggml_set_rows: rows of b written into rows c of a (a scatter): a[..., c[i], :] = b[..., i, :] in
    NumPy terms; returns a view of a as the op's node (compute it to write a).

    a: the destination, ne [ne0, rows, ne2, ne3] (ggml order), F32, F16, BF16 or quantized (rows
       quantized on the way).
    b: F32 ne [ne0, n, ne2, ne3], the rows to write.
    c: I32 or I64 ne [n, c2, c3] (c2 divides ne2, c3 divides ne3), target row of each row of b, each in
       0..rows-1 (checked before compute). Duplicate targets: which write wins is not defined.
    Result: a view of a (a's shape and type). Precision: exact for F32; rounded/quantized to a's type.
    """
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
cpy: BinaryWrapper = declared(
    "cpy",
    """ggml_cpy: a's elements copied into b, in order, converted to b's type; the result is a view of b.

a: the source, any ne. b: the destination, the same number of elements (any shape, any type ggml
   converts to: F32, F16, BF16, quantized, I32); a view of b must not overlap itself.
Result: a view of b. Precision: exact between equal types; to F16/BF16 rounded to nearest; to a
quantized type through ggml's quantizer.""",
    check=lambda x: _destination("cpy", x.b),
)
dup: UnaryWrapper = declared(
    "dup",
    """ggml_dup: a copy of a (same ne and type, contiguous): np.array(a, copy=True).

a: any ne and strides.
Result: a new tensor of a's shape and type. Exact.""",
)
cont: UnaryWrapper = declared(
    "cont",
    """ggml_cont: a copied into contiguous memory, same ne and type (np.ascontiguousarray).

a: any ne and strides (a transposed or permuted view, typically).
Result: a contiguous tensor of a's shape and type. Exact.""",
)
_transpose: UnaryWrapper = declared("transpose")


# hand-written: the result is checked after the call (a quantized a's rows must keep whole blocks)
def transpose(ctx: Context, a: Tensor) -> Tensor:
    """ggml_transpose: a view with dims 0 and 1 swapped (a.T for a matrix), no copy.

    a: any ne [ne0, ne1, ne2, ne3] (a quantized a cannot be transposed: its rows hold blocks).
    Result: a view, ne [ne1, ne0, ne2, ne3] (NumPy's last two axes swapped), non-contiguous: cont() it
    for the ops that need contiguous rows.
    """
    t = _transpose(ctx, a)
    return _whole_blocks("transpose", t) if t.ptr.type in _BLOCKED else t


# hand-written: calls ggml_reshape_4d with b's extents (only b's ne is read), and records b's rank
def reshape(ctx: Context, a: Tensor, b: Tensor) -> Tensor:
    """ggml_reshape: a's elements with b's shape (like np.reshape; a view, no copy).

    a: contiguous, any type. b: any tensor with a's number of elements: only its ne is read.
    Result: a view of a with ne = b.ne.
    """
    if not isinstance(b, Tensor):
        raise TypeError(f"reshape: b must be a Tensor, got {type(b).__name__}")
    return _reshape_nd("reshape", ctx, a, *cast("tuple[int, int, int, int]", b.ne), RANK_BYTE[rank(b.ptr)])


repeat: BinaryWrapper = declared(
    "repeat",
    """ggml_repeat: a tiled to b's shape (np.tile in ggml's dim order).

a: any ne, each a.ne[i] dividing b.ne[i]; F32, F16, BF16, I16 or I32.
b: any tensor of the target shape: only its ne is read.
Result: b's ne, a's type. Exact.""",
)


# cont_Nd hand-written: each calls ggml_cont_4d with its extents (1s added) and records its rank on the result
def _cont_nd(op: str, ctx, a, ne, n_dims: int) -> Tensor:
    ne0, ne1, ne2, ne3 = _shape_arg(op, ne)
    if isinstance(a, Tensor) and ne0 % _BLOCK[a.ptr.type]:  # the result's rows must hold whole blocks
        raise ValueError(f"{op}: ne[0] ({ne0}) must be a multiple of {a.type.name}'s block size {_BLOCK[a.ptr.type]}")
    try:
        r = _guarded("cont_4d")(ctx.ptr, a.ptr, ne0, ne1, ne2, ne3)
    except _ARG_ERRORS as e:
        raise _bad_arguments(op, e, ctx, a=a) from None
    if r:
        r.padding[0] = RANK_BYTE[n_dims]  # cont_Nd: N dims, 1s included (Tensor.shape)
    return _result(ctx, r, op, a)


def cont_1d(ctx: Context, a: Tensor, ne0: int) -> Tensor:
    """ggml_cont_1d: a copied into a new contiguous tensor of ne [ne0] (np.ascontiguousarray + reshape).

    a: any ne and strides. ne0: a's number of elements.
    Result: ne [ne0], a's type. Exact.
    """
    return _cont_nd("cont_1d", ctx, a, (ne0, 1, 1, 1), 1)


def cont_2d(ctx: Context, a: Tensor, ne0: int, ne1: int) -> Tensor:
    """ggml_cont_2d: a copied into a new contiguous tensor of ne [ne0, ne1] (ggml order).

    a: any ne and strides. ne0, ne1: the new extents (product: a's number of elements; ne0 innermost).
    Result: ne [ne0, ne1] (NumPy shape (ne1, ne0)), a's type. Exact.
    """
    return _cont_nd("cont_2d", ctx, a, (ne0, ne1, 1, 1), 2)


def cont_3d(ctx: Context, a: Tensor, ne0: int, ne1: int, ne2: int) -> Tensor:
    """ggml_cont_3d: a copied into a new contiguous tensor of ne [ne0, ne1, ne2] (ggml order).

    a: any ne and strides. ne0, ne1, ne2: the new extents (their product a's number of elements).
    Result: ne [ne0, ne1, ne2] (NumPy shape reversed), a's type. Exact.
    """
    return _cont_nd("cont_3d", ctx, a, (ne0, ne1, ne2, 1), 3)


def cont_4d(ctx: Context, a: Tensor, ne0: int, ne1: int = 1, ne2: int = 1, ne3: int = 1) -> Tensor:
    """ggml_cont_4d: a copied into a new contiguous tensor of ne [ne0, ne1, ne2, ne3] (ggml order).

    a: any ne and strides. ne0, ne1, ne2, ne3: the new extents (their product a's number of elements).
    Result: ne [ne0, ne1, ne2, ne3] (NumPy shape reversed), a's type. Exact.
    """
    return _cont_nd("cont_4d", ctx, a, (ne0, ne1, ne2, ne3), 4)


# reshape_Nd hand-written (hot): each calls ggml_reshape_4d, checks on the slow path, records its rank on the result
_reshape_4d = _guarded("reshape_4d")


def _reshape_nd(op: str, ctx, a, ne0, ne1, ne2, ne3, rank_byte: bytes) -> Tensor:
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
    if (ne0, ne1, ne2, ne3)[rank_byte[0] - 2] == 1:
        # the dims asked for end in 1s that the extents do not show: recorded (Tensor.shape); otherwise
        # the rank a RESHAPE derives from its extents is the one asked for, and the write is saved
        r.padding[0] = rank_byte
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
        return ValueError(
            f"{op}: ne[0] ({ne[0]}) must be a multiple of {a.type.name}'s block size {_BLOCK[a.ptr.type]}"
        )
    return _failed(op) if exc is None else _bad_arguments(op, exc, ctx, a=a)


def reshape_1d(ctx: Context, a: Tensor, ne0: int) -> Tensor:
    """ggml_reshape_1d: a view of the contiguous a as ne [ne0] (np.reshape(a, -1)); no copy.

    a: contiguous. ne0: a's number of elements.
    Result: a view, ne [ne0].
    """
    return _reshape_nd("reshape_1d", ctx, a, ne0, 1, 1, 1, RANK_BYTE[1])


def reshape_2d(ctx: Context, a: Tensor, ne0: int, ne1: int) -> Tensor:
    """ggml_reshape_2d: a view of the contiguous a as ne [ne0, ne1] (ggml order); no copy.

    a: contiguous. ne0, ne1: the new extents (ne0 innermost: np.reshape(a, (ne1, ne0))); a quantized a
       keeps whole blocks in ne0.
    Result: a view, ne [ne0, ne1].
    """
    return _reshape_nd("reshape_2d", ctx, a, ne0, ne1, 1, 1, RANK_BYTE[2])


def reshape_3d(ctx: Context, a: Tensor, ne0: int, ne1: int, ne2: int) -> Tensor:
    """ggml_reshape_3d: a view of the contiguous a as ne [ne0, ne1, ne2] (np.reshape(a, (ne2, ne1, ne0)));
    no copy.

    a: contiguous. ne0, ne1, ne2: the new extents in ggml order.
    Result: a view, ne [ne0, ne1, ne2].
    """
    return _reshape_nd("reshape_3d", ctx, a, ne0, ne1, ne2, 1, RANK_BYTE[3])


def reshape_4d(ctx: Context, a: Tensor, ne0: int, ne1: int = 1, ne2: int = 1, ne3: int = 1) -> Tensor:
    """ggml_reshape_4d: a view of the contiguous a as ne [ne0, ne1, ne2, ne3]
    (np.reshape(a, (ne3, ne2, ne1, ne0))); no copy.

    a: contiguous. ne0, ne1, ne2, ne3: the new extents in ggml order.
    Result: a view, ne [ne0, ne1, ne2, ne3].
    """
    return _reshape_nd("reshape_4d", ctx, a, ne0, ne1, ne2, ne3, RANK_BYTE[4])


# hand-written (hot): scalars checked on the slow path only; the result checked after the call (whole blocks)
_permute = _guarded("permute")


def permute(ctx: Context, a: Tensor, axis0: int, axis1: int, axis2: int, axis3: int) -> Tensor:
    """ggml_permute: a view with a's dims moved: source dim i goes to position axis_i (ggml order), no copy.

    Not np.transpose's convention: np.transpose(x, axes) takes result axis j from source axes[j];
    ggml_permute sends source dim i to result dim axis_i. permute(a, 0, 2, 1, 3) swaps dims 1 and 2.
    a: any ne [ne0, ne1, ne2, ne3].
    axis0, axis1, axis2, axis3: where dims 0, 1, 2, 3 of a go, a permutation of 0..3.
    Result: a view (non-contiguous unless trivial: cont() it for the ops that need contiguous rows).
    """
    try:
        r = _permute(ctx.ptr, a.ptr, axis0, axis1, axis2, axis3)
    except _ARG_ERRORS as e:
        _check_scalars("permute", ints=dict(axis0=axis0, axis1=axis1, axis2=axis2, axis3=axis3))
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


concat = declared(
    "concat",
    """ggml_concat: a and b joined along ggml dim `dim` (np.concatenate(..., axis=3 - dim)).

a, b: the same type and the same extents in every dim but `dim`.
dim: the ggml dim to join along, 0..3 (0 is NumPy's last axis).
Result: a's ne with ne[dim] = a.ne[dim] + b.ne[dim]. Exact.""",
)


def _non_negative_pads(x: SimpleNamespace) -> None:
    p = [x.p0, x.p1, x.p2, x.p3]
    if min(p) < 0:  # ggml would make a tensor of negative extent
        raise ValueError(f"pad: padding must be non-negative, got {p}")


pad = declared(
    "pad",
    """ggml_pad: zeros appended at the end of each dim (np.pad(a, [(0, p3), (0, p2), (0, p1), (0, p0)])).

a: any ne, F32.
p0, p1, p2, p3: zeros after dims 0-3 (p0 along ne0, NumPy's last axis), >= 0.
Result: ne [ne0 + p0, ne1 + p1, ne2 + p2, ne3 + p3]. Exact.""",
    defaults=dict(p1=0, p2=0, p3=0),
    check=_non_negative_pads,
)


# view_Nd hand-written (hot): strides checked against a's size; each records its rank on the result
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
    if bool in {type(v) for v in (*ne, *nb, offset)}:  # True is no extent, stride or offset
        _shape_arg(op, ne), [integer(f"{op}: nb", n) for n in nb], integer(f"{op}: offset", offset)
    if negative or not all(ne):
        raise ValueError(
            f"{op}: ne must be positive and strides and offset non-negative (ggml does not handle "
            f"empty tensors), got ne={list(ne)}, nb={list(nb)}, offset={offset}"
        )
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
            raise ValueError(
                f"{op}: the view ({list(ne)} with strides {list(nb)} at offset {offset}) reaches byte "
                f"{span}, past the end of a ({nbytes} bytes)"
            )
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
    if r:
        r.padding[0] = RANK_BYTE[len(ne)]  # view_Nd: N dims, 1s included (Tensor.shape)
    return _result(ctx, r, op, a)


def _sum_strides(ne, nb) -> int:
    total = 0
    for n, s in zip(ne, nb):
        total += (n - 1) * s
    return total


def view_1d(ctx: Context, a: Tensor, ne0: int, offset: int = 0) -> Tensor:
    """ggml_view_1d: a view of ne0 consecutive elements of a, from byte `offset`; no copy.

    a: any tensor. ne0: the number of elements (whole blocks for a quantized a).
    offset: the first byte, counted from a's start (C's byte offset, not an element index).
    Result: a view, ne [ne0], that must lie inside a (checked).
    """
    return _view("view_1d", ctx, a, (ne0,), (), offset)


_view_2d = _VIEW_FNS[2]


def view_2d(ctx: Context, a: Tensor, ne0: int, ne1: int, nb1: int, offset: int = 0) -> Tensor:
    # the view most graphs use, written out: the generic _view costs twice as much
    """ggml_view_2d: a 2-D view of a with a row stride in bytes; no copy.

    a: any tensor.
    ne0, ne1: the view's extents in ggml order (ne0 elements per row, ne1 rows; NumPy shape (ne1, ne0)).
    nb1: the byte stride between rows (a.nb[1] for a's own rows; C's bytes, not elements).
    offset: the first byte, counted from a's start.
    Result: a view, ne [ne0, ne1], that must lie inside a (checked).
    """
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
    if ne1 == 1:  # a trailing 1 the extents do not show (see _reshape_nd)
        r.padding[0] = _RANK_2
    if a.ctx is not ctx:
        ctx.adopt(a)
    t = _new_tensor(Tensor)
    t.ptr, t.ctx = r, ctx
    return t


def view_3d(ctx: Context, a: Tensor, ne0: int, ne1: int, ne2: int, nb1: int, nb2: int, offset: int = 0) -> Tensor:
    """ggml_view_3d: a 3-D view of a with byte strides; no copy.

    a: any tensor.
    ne0, ne1, ne2: the view's extents in ggml order (NumPy shape (ne2, ne1, ne0)).
    nb1, nb2: the byte strides of dims 1 and 2 (a.nb for a's own).
    offset: the first byte, counted from a's start.
    Result: a view, ne [ne0, ne1, ne2], that must lie inside a (checked).
    """
    return _view("view_3d", ctx, a, (ne0, ne1, ne2), (nb1, nb2), offset)


def view_4d(
    ctx: Context, a: Tensor, ne0: int, ne1: int, ne2: int, ne3: int, nb1: int, nb2: int, nb3: int, offset: int = 0
) -> Tensor:
    """ggml_view_4d: a 4-D view of a with byte strides; no copy.

    a: any tensor.
    ne0, ne1, ne2, ne3: the view's extents in ggml order (NumPy shape reversed).
    nb1, nb2, nb3: the byte strides of dims 1-3 (a.nb for a's own).
    offset: the first byte, counted from a's start.
    Result: a view, ne [ne0, ne1, ne2, ne3], that must lie inside a (checked).
    """
    return _view("view_4d", ctx, a, (ne0, ne1, ne2, ne3), (nb1, nb2, nb3), offset)


# hand-written: takes lists, and sets nb[0] and ne on the view ggml_view_4d makes
def view_nd(ctx: Context, a: Tensor, ne: Sequence[int], nb: Sequence[int], offset: int = 0) -> Tensor:
    """A view with explicit byte strides for every dim, nb[0] included, for views no ggml_view_Nd makes
    (ggml_view_4d of ne/nb[1:], then nb[0] and any widened ne set on the view, as llama.cpp's conv-state
    code does with its overlapping conv windows).

    a: any tensor of an unblocked type (not quantized).
    ne: 4 extents in ggml order. nb: 4 byte strides (nb[0] at least the element size unless ne[0] is 1).
    offset: the first byte, counted from a's start.
    Result: a view that must lie inside a (checked); it may read elements twice (overlapping windows).
    """
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
    v.ptr.padding[0] = b"\0"  # its rank is what its extents show
    return v


# hand-written: no op, a method of the tensor
def set_name(ctx: Context, a: Tensor, name: str) -> Tensor:
    """Name a (ggml_set_name) and return it: the name shows in graphs, errors and GGUF files.

    a: the tensor. name: a str of at most GGML_MAX_NAME - 1 bytes.
    """
    if not isinstance(a, Tensor):
        raise TypeError(f"set_name: a must be a Tensor, got {type(a).__name__}")
    return a.set_name(name)


view_tensor: UnaryWrapper = declared(
    "view_tensor",
    """ggml_view_tensor: a view of all of src: the same ne, byte strides and type, no copy.

src: any tensor.
Result: a view of src (writes through it change src).""",
)


__all__ = [  # generated by tools/gen_methods.py
    "concat",
    "cont",
    "cont_1d",
    "cont_2d",
    "cont_3d",
    "cont_4d",
    "cpy",
    "dup",
    "get_rows",
    "pad",
    "permute",
    "repeat",
    "reshape",
    "reshape_1d",
    "reshape_2d",
    "reshape_3d",
    "reshape_4d",
    "set_name",
    "set_rows",
    "transpose",
    "view_1d",
    "view_2d",
    "view_3d",
    "view_4d",
    "view_nd",
    "view_tensor",
]
