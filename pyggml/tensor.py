"""Tensor: a ggml_tensor seen from Python.

`t.ne` is ggml order (ne[0] innermost), `t.shape` NumPy order (reversed), so a
contiguous tensor and its NumPy array share one memory layout. Values move in and out
through `set()` / `numpy()`; a tensor in host memory can also be read without a copy
(`view()`) and shared with other libraries (`np.from_dlpack(t)`, `torch.from_dlpack(t)`,
`np.asarray(t)`, `memoryview(t)`: pyggml.interop).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike

from pyggml import interop, lifetime, transport, types
from pyggml._native import cstr, ffi, lib
from pyggml.errors import ExportError, StaleValue
from pyggml.types import Op, Type

if TYPE_CHECKING:
    from typing_extensions import Buffer

    from pyggml._pyggml_cffi import CData
    from pyggml.arena import Arena

MAX_DIMS = lib.GGML_MAX_DIMS
# plain dict lookups: Enum(value) costs several times more, and op building reads types a lot
_TYPE_OF = {int(t): t for t in Type}
_OP_OF = {int(o): o for o in Op}


# --- rank: how many dims `shape` has --------------------------------------------------------------
# ggml keeps 4 extents and no rank. pyggml records the rank a tensor was made with in its first byte
# of `padding` (rank + 1; 0: not recorded), which ggml never reads and zeroes in every new tensor, so
# the rank travels with the C tensor, whichever Python object reads it later.
RANK_BYTE = [bytes([n + 1]) for n in range(MAX_DIMS + 1)]  # what padding[0] holds for each rank
# ops whose result's dims ggml defines afresh: their rank is what their extents show
_OWN_DIMS = {int(o) for o in (Op.VIEW, Op.RESHAPE, Op.ARGMAX, Op.SUM, Op.COUNT_EQUAL, Op.CROSS_ENTROPY_LOSS)}


def set_rank(p: CData, n: int) -> None:
    """Record that the C tensor `p` has `n` NumPy dims, in its first padding byte (which ggml never reads).

    Args:
        p: a `struct ggml_tensor *` (cffi cdata).
        n: the rank, 0 to 4.
    """
    p.padding[0] = RANK_BYTE[n]


def _extent_rank(p) -> int:
    n = MAX_DIMS
    while n > 1 and p.ne[n - 1] == 1:  # not ggml_n_dims: it drops a trailing dim of 0 as well
        n -= 1
    return n


def rank(p: CData) -> int:
    """The NumPy rank of the C tensor `p` (see `Tensor.shape`).

    Derived once from its sources (where ggml keeps their outer dims in place, the largest of their
    ranks), then recorded in the tensor.

    Args:
        p: a `struct ggml_tensor *` (cffi cdata).

    Returns:
        The number of NumPy dims, 0 to 4.
    """
    stored = p.padding[0][0]
    if stored:
        return stored - 1
    # post-order over the sources with no rank yet, without recursion (graphs are deep)
    stack, seen = [(p, False)], set()
    while stack:
        q, expanded = stack.pop()
        if expanded:
            set_rank(q, _derived_rank(q))
            continue
        a = int(ffi.cast("uintptr_t", q))
        if a in seen:
            continue
        seen.add(a)
        stack.append((q, True))
        if q.op not in _OWN_DIMS:
            stack.extend((s, False) for s in q.src if s != ffi.NULL and not s.padding[0][0])
    return p.padding[0][0] - 1


def _derived_rank(q) -> int:
    n = _extent_rank(q)
    if q.op in _OWN_DIMS:
        return n
    for s in q.src:
        if s != ffi.NULL:
            r = s.padding[0][0] - 1
            # a source's leading 1s carry over where ggml keeps its outer dims in place: this
            # result is 1 along them too
            if r > n and all(s.ne[i] == 1 for i in range(n, r)):
                n = r
    return n


class Tensor:
    """A ggml tensor: a view of a `struct ggml_tensor` owned by its `Context` (`t.ctx`), which it keeps alive.

    Made by `ctx.tensor(type, shape)` (a NumPy-order shape), `ctx.new_tensor(type, ne)` /
    `ctx.new_tensor_2d(type, ne0, ne1)`, ... (ggml order) or an op (`ctx.add(a, b)`); not constructed
    directly. Its extents are `t.ne` in ggml's order (`ne[0]` innermost, always 4 entries) and `t.shape` in
    NumPy's (the reverse, with the rank the tensor was made with, leading 1s kept): a contiguous tensor and
    its NumPy array share their memory layout. Values move with `t.set(array)` and `t.numpy()` once the
    tensor has memory (from a `Runner`, a `Gallocr`, a `Scheduler`, `Backend.alloc_tensors`, or a Context
    made with `no_alloc=False`). Two Tensor objects are equal (and hash alike) when they wrap the same C
    tensor, so tensors work as dict keys (`Runner.run`'s inputs).

    Operators build ops with NumPy's meaning for the NumPy-order shapes, exactly or not at all: `a + b`,
    `a - b`, `a * b`, `a / b` are ggml_add/sub/mul/div of two tensors of one float type whose shapes broadcast
    (ggml repeats only b into a: where a would broadcast into b, `+` and `*` swap their operands, `-` and `/`
    raise saying to repeat a first); with a number (F32, F16 tensors; the number rounded to the tensor's type
    as NumPy does) `t * 2.0` is ggml_scale, `t + 1.0`, `t - 1.0`, `1.0 - t` ggml_scale_bias, `t / c` and
    `1.0 / t` ggml_div by a constant (ggml_scale where exact); `-t` is ggml_neg; `a @ b` NumPy's matmul
    (`mul_mat(cont(transpose(b)), a)`, F32). `t.item()` and `float(t)` read a one-element tensor's value.

    Args:
        ptr: the `struct ggml_tensor *` (cffi cdata).
        ctx: the Context that owns it; None for the tensors ggml's callbacks hand over.

    Attributes:
        ptr: the `struct ggml_tensor *`.
        ctx: the owning Context (kept alive), or None.
    """

    __slots__ = ("ptr", "ctx", "__weakref__")

    def __init__(self, ptr: CData, ctx: Arena | None) -> None:
        self.ptr = ptr
        # keeps the context (and so the tensor's memory) alive; None for the tensors ggml's callbacks hand
        # over (typed Any: pyggml/ops/attention.py's flash_attn_ext_add_sinks uses it without a None check)
        self.ctx: Any = ctx

    # --- identity ------------------------------------------------------------------
    def __eq__(self, other):
        return isinstance(other, Tensor) and self.ptr == other.ptr

    def __hash__(self):
        return hash(int(ffi.cast("uintptr_t", self.ptr)))

    def __repr__(self):
        # `<Tensor 'a' f32 (2, 3)>` for a leaf, `<Tensor 'h' f32 (2, 3) op=ADD>` for a node: name, type, NumPy shape
        name = f" {self.name!r}" if self.name else ""
        op = f" op={self.op.name}" if self.ptr.op != lib.GGML_OP_NONE else ""
        return f"<Tensor{name} {self.type.name.lower()} {self.shape}{op}>"

    # --- description ---------------------------------------------------------------
    @property
    def ne(self) -> tuple[int, ...]:
        """The extents in ggml's order, innermost first: `(ne0, ne1, ne2, ne3)`, always 4 entries.

        `shape` reversed and padded with 1s: a tensor of NumPy shape `(2, 3)` has `ne == (3, 2, 1, 1)`.
        """
        return tuple(self.ptr.ne)

    @property
    def nb(self) -> tuple[int, ...]:
        """The byte strides in ggml's order (`nb[0]` first).

        `nb[0]` is the element (or quantized block) size, `nb[i]` the bytes between consecutive indices along
        `ne[i]`. Bytes, like NumPy's strides, but in reverse order.
        """
        return tuple(self.ptr.nb)

    @property
    def shape(self) -> tuple[int, ...]:
        """The extents in NumPy's order, outermost first, with the rank the tensor was made with.

        A tensor made from a NumPy shape (`Context.tensor`) or a list of ggml extents keeps that many dims,
        leading 1s included: `ctx.tensor("f32", (1, 16)).shape == (1, 16)`. An op's result keeps the largest
        rank of its sources where ggml keeps their outer dims in place (elementwise ops, mul_mat, norms, rope,
        get_rows, ...): `mul_mat(w, x)` of an x of shape (1, E) has shape (1, rows). Views, reshapes and ops that
        define their own dims (argmax, sum, count_equal, the losses) take the rank their extents show (trailing
        ggml 1s dropped, at least one dim).
        """
        ne = self.ptr.ne
        return tuple(ne[i] for i in range(rank(self.ptr) - 1, -1, -1))

    @property
    def ndim(self) -> int:
        """The number of NumPy dims, `len(shape)`: the rank the tensor was made with, leading 1s counted.

        `ctx.tensor("f32", (1, 16)).ndim == 2`. Not `ggml_n_dims`, which drops trailing ggml 1s.
        """
        return rank(self.ptr)

    @property
    def type(self) -> Type:
        """The tensor's ggml type (`pyggml.types.Type`, an IntEnum: F32, F16, Q8_0, ...)."""
        return _TYPE_OF[self.ptr.type]

    @property
    def op(self) -> Op:
        """The op that computes this tensor (`pyggml.types.Op`).

        NONE for a leaf (an input, a weight); VIEW, RESHAPE, PERMUTE, TRANSPOSE for views; ADD, MUL_MAT, ...
        for nodes.
        """
        return _OP_OF[self.ptr.op]

    @property
    def name(self) -> str:
        """The tensor's name, '' when unnamed (`ggml_get_name` / `ggml_set_name`).

        Shown in errors and graphs, saved in GGUF files. Settable to a str of at most `GGML_MAX_NAME - 1`
        bytes: another type raises TypeError, a longer name ValueError.
        """
        return cstr(lib.ggml_get_name(self.ptr))

    @name.setter
    def name(self, value: str):
        if not isinstance(value, str):
            raise TypeError(f"a tensor name must be a str, got {type(value).__name__}")
        raw = value.encode()
        if len(raw) >= lib.GGML_MAX_NAME:
            raise ValueError(f"tensor name {value!r} is longer than GGML_MAX_NAME-1 = {lib.GGML_MAX_NAME - 1} bytes")
        lib.ggml_set_name(self.ptr, raw)

    def set_name(self, value: str) -> "Tensor":
        """Set the name and return the tensor, for chaining: `ctx.add(a, b).set_name("h")`.

        Args:
            value: the name (see `name`).

        Returns:
            This tensor.

        Raises:
            TypeError: `value` is not a str.
            ValueError: `value` is longer than `GGML_MAX_NAME - 1` bytes.
        """
        self.name = value
        return self

    @property
    def src(self) -> list["Tensor"]:
        """The op's source tensors (ggml's `src[]` without the NULL ones), in order; `[]` for a leaf."""
        return [Tensor(s, self.ctx) for s in self.ptr.src if s != ffi.NULL]

    @property
    def view_src(self) -> "Tensor | None":
        """The tensor whose memory this one views (ggml's `view_src`), or None when it is not a view."""
        return Tensor(self.ptr.view_src, self.ctx) if self.ptr.view_src != ffi.NULL else None

    @property
    def view_offs(self) -> int:
        """A view's byte offset into `view_src`'s data; 0 for a tensor that is not a view."""
        return self.ptr.view_offs

    @property
    def nelements(self) -> int:
        """The number of elements, the product of `ne` (`ggml_nelements`)."""
        return lib.ggml_nelements(self.ptr)

    @property
    def nrows(self) -> int:
        """The number of rows, `ne1 * ne2 * ne3` (`ggml_nrows`); a row is `ne0` elements along the innermost dim."""
        return lib.ggml_nrows(self.ptr)

    @property
    def nbytes(self) -> int:
        """The bytes the tensor spans in memory with its strides (`ggml_nbytes`).

        For a contiguous tensor, `nelements` times the element size (rows of blocks for a quantized type).
        """
        return lib.ggml_nbytes(self.ptr)

    @property
    def element_size(self) -> int:
        """The bytes of one element, of one block for a quantized type (`ggml_element_size`).

        See `pyggml.types.type_size` and `block_size`.
        """
        return lib.ggml_element_size(self.ptr)

    def is_contiguous(self) -> bool:
        """Whether the elements lie packed in ggml's order, without gaps (`ggml_is_contiguous`).

        What `set`, `set_raw` and `view` need, and many ops; `ctx.cont(t)` makes a contiguous copy.

        Returns:
            True for a contiguous tensor.
        """
        return bool(lib.ggml_is_contiguous(self.ptr))

    def is_permuted(self) -> bool:
        """Whether some byte stride is larger than the next dim's (`ggml_is_permuted`): a permute() or transpose() view.

        Returns:
            True for a permuted tensor.
        """
        return bool(lib.ggml_is_permuted(self.ptr))

    def is_transposed(self) -> bool:
        """Whether dims 0 and 1 are swapped in memory, `nb[0] > nb[1]` (`ggml_is_transposed`): a transpose() view.

        Returns:
            True for a transposed tensor.
        """
        return bool(lib.ggml_is_transposed(self.ptr))

    @property
    def is_input(self) -> bool:
        """Whether the tensor is flagged as a graph input (`ggml_set_input`).

        Set by `set_input()` or `ctx.tensor(..., input=True)`: schedulers place inputs in host memory, to be
        written after each allocation, before compute.
        """
        return bool(self.ptr.flags & lib.GGML_TENSOR_FLAG_INPUT)

    @property
    def is_output(self) -> bool:
        """Whether the tensor is flagged as a graph output (`ggml_set_output`).

        The graph allocator never reuses an output's memory for another node, so its value can be read after
        compute.
        """
        return bool(self.ptr.flags & lib.GGML_TENSOR_FLAG_OUTPUT)

    def set_input(self) -> "Tensor":
        """Flag the tensor as a graph input (`ggml_set_input`), filled on the host at every run.

        Returns:
            This tensor.

        Raises:
            ValueError: the tensor is computed by an op: only tensors no op computes can be inputs.
        """
        if self.ptr.op != lib.GGML_OP_NONE:  # ggml asserts it
            raise ValueError(
                f"set_input: {self.name or 'the tensor'} is computed by a {self.op.name} node; "
                "only tensors no op computes can be graph inputs"
            )
        lib.ggml_set_input(self.ptr)
        return self

    def set_output(self) -> "Tensor":
        """Flag the tensor as a graph output (`ggml_set_output`; see `is_output`).

        `Runner.run` and `Runner.allocate` flag the outputs they are given.

        Returns:
            This tensor.
        """
        lib.ggml_set_output(self.ptr)
        return self

    @property
    def is_param(self) -> bool:
        """Whether the tensor is flagged as a trainable parameter (`ggml_set_param`; see `set_param`)."""
        return bool(self.ptr.flags & lib.GGML_TENSOR_FLAG_PARAM)

    @property
    def is_loss(self) -> bool:
        """Whether the tensor is flagged as a training loss (`ggml_set_loss`; see `set_loss`)."""
        return bool(self.ptr.flags & lib.GGML_TENSOR_FLAG_LOSS)

    def set_param(self) -> "Tensor":
        """Flag the tensor as a trainable parameter (`ggml_set_param`): the backward pass computes its gradient.

        `Graph.build_backward_expand` then gives it a gradient (`graph.grad(t)`), and an optimizer of
        `pyggml.optim` updates it in place. A parameter an optimizer updates keeps its values between runs:
        give it memory of its own (`runner.backend.alloc_tensors(weights_ctx)`) rather than making it an input.

        Returns:
            This tensor.

        Raises:
            ValueError: the tensor is computed by an op or is a view (ggml asserts a leaf).
            TypeError: the tensor is not F32 (ggml's backward pass and optimizer steps compute in F32).
        """
        if self.ptr.op != lib.GGML_OP_NONE or self.ptr.view_src != ffi.NULL:  # ggml asserts op == NONE
            raise ValueError(
                f"set_param: {self.name or 'the tensor'} is computed by a {self.op.name} node; only tensors no "
                "op computes (weights, inputs) can be trainable parameters"
            )
        if self.ptr.type != lib.GGML_TYPE_F32:
            raise TypeError(
                f"set_param: {self.name or 'the tensor'} is {self.type.name}; trainable parameters must be F32 "
                "(ggml's gradients and optimizer steps are F32): make it with type 'f32'"
            )
        lib.ggml_set_param(self.ptr)
        return self

    def set_loss(self) -> "Tensor":
        """Flag the tensor as the training loss (`ggml_set_loss`): the backward pass starts from it.

        `Graph.build_backward_expand` computes the gradient of every loss with respect to every parameter
        (`set_param`); a Runner seeds the loss's own gradient with 1 at every run.

        Returns:
            This tensor.

        Raises:
            ValueError: the tensor is not a scalar (one element; ggml asserts it): reduce it first, e.g. with
                `ctx.sum(t)` or `ctx.mean(t)`.
            TypeError: the tensor is not F32 (ggml asserts it).
        """
        if lib.ggml_nelements(self.ptr) != 1 or any(n != 1 for n in self.ptr.ne):
            raise ValueError(
                f"set_loss: {self.name or 'the tensor'} has shape {self.shape}; a loss must be a scalar (one "
                "element): reduce it first (ctx.sum(t), ctx.mean(t), ctx.cross_entropy_loss(logits, labels))"
            )
        if self.ptr.type != lib.GGML_TYPE_F32:
            raise TypeError(f"set_loss: {self.name or 'the tensor'} is {self.type.name}; a loss must be F32")
        lib.ggml_set_loss(self.ptr)
        return self

    # --- memory --------------------------------------------------------------------
    @property
    def buffer(self) -> CData:
        """The `ggml_backend_buffer_t` holding the data (cffi cdata): NULL for context memory or none."""
        return self.ptr.buffer

    @property
    def is_allocated(self) -> bool:
        """Whether the tensor has memory (its data pointer is set).

        Not before a Runner, an allocator or `Backend.alloc_tensors` has placed it, nor after a graph allocator
        took lent memory back to allocate another graph, nor after its buffer was closed: then `set`, `numpy`
        and `view` raise ValueError. A view made earlier kept its source's address: it has memory only while
        every source it views still has.
        """
        p = self.ptr
        while p != ffi.NULL:
            if p.data == ffi.NULL:
                return False
            p = p.view_src
        return True

    @property
    def is_host(self) -> bool:
        """Whether the data is in host memory, directly readable and writable (False without memory).

        A view's memory is its source's: a view of a device tensor made after the tensor was allocated is
        not host memory.
        """
        if self.ptr.data == ffi.NULL:
            return False
        buf = lifetime.memory_buffer(self.ptr)
        return buf == ffi.NULL or bool(lib.ggml_backend_buffer_is_host(buf))

    def _require_allocated(self, what: str):
        if not self.is_allocated:
            raise ValueError(
                f"{what}: tensor {self.name or '(unnamed)'} has no memory yet "
                "(allocate its context or graph on a backend first)"
            )

    def _writable(self, what: str):
        """The C tensor, for `set` and `set_raw` (named `what` in the errors): they write it whole, from its
        start, so it must have memory and its bytes must lie packed."""
        p = self.ptr
        if p.data == ffi.NULL:
            self._require_allocated(what)
        if not lib.ggml_is_contiguous(p):
            raise ValueError(f"{what}: tensor is not contiguous; write to the tensor it views instead")
        return p

    @lifetime.with_lender_lock  # another thread must not take the memory back meanwhile
    def set(self, values: ArrayLike | interop.SupportsDLPack, *, cast: bool = False) -> "Tensor":
        """Write values into the tensor, converted to its type.

        Values go in exactly or raise: into an integer type (I32 row indices, ...) only whole numbers in its
        range (`cast=True` rounds fractions toward zero, as NumPy's astype); into a float type, values are
        rounded to its precision (F16: 11 bits), and finite values beyond its range (F16: 65504) raise unless
        `cast=True` (then they become inf). Quantized types quantize (lossy by design;
        `pyggml.types.decode(encode(...))` shows the values held).

        Args:
            values: an array of the tensor's NumPy `shape` (leading 1s may be left out), or a 1-d array of
                `nelements` values, in NumPy (C) order: a NumPy array, a list or scalar, any DLPack producer (a
                torch tensor on the CPU, any object with `__dlpack__`: read through `np.from_dlpack`, without a
                copy), any buffer-protocol object (memoryview, array.array: `np.asarray`), or another Tensor
                (its `numpy()`).
            cast: accept fractions into integer types (rounded toward zero) and overflow into float types.

        Returns:
            This tensor.

        Raises:
            ValueError: a tensor without memory or not contiguous; a wrong number of values or shape; a value
                that does not convert exactly (see above).
            TypeError: values that are not numbers (strings, objects); a type ggml cannot quantize to; a
                DLPack producer NumPy cannot read (device memory, bfloat16).
            pyggml.rpc.RpcError: the tensor lives on an RPC server whose connection failed.
        """
        p = self._writable("set")
        arr = values.numpy() if isinstance(values, Tensor) else interop.as_array(values, "set")  # a copy of a Tensor
        t = _TYPE_OF[p.type]
        if arr.dtype.kind not in "biuf":
            raise TypeError(f"set: values of dtype {arr.dtype} cannot be written to a {t.name} tensor")
        if arr.size != lib.ggml_nelements(p):
            raise ValueError(f"set: {arr.size} values for a tensor of {self.nelements} elements (shape {self.shape})")
        if arr.ndim > 1 and _strip_leading_ones(arr.shape) != _strip_leading_ones(self.shape):
            raise ValueError(f"set: array shape {arr.shape} does not match tensor shape {self.shape}")
        if arr.size and arr.dtype != _HOST_DTYPE[t]:
            _check_exact(arr, t, cast, self.name)
        # raw types keep their bytes in C order whatever the shape; the others convert row by row
        with np.errstate(over="ignore"):  # overflow was refused above unless cast=True asked for inf
            raw = types.encode(t, arr if types.has_raw_dtype(t) else arr.reshape(tuple(reversed(self.ne))))
        return self._write(raw, "set: {} bytes encoded for a tensor of {} bytes")

    @lifetime.with_lender_lock  # another thread must not take the memory back meanwhile
    def set_raw(self, data: Buffer | np.ndarray) -> "Tensor":
        """Write the tensor's bytes as they are, in ggml's own encoding of its type (quantized blocks and all).

        For example what `raw_bytes` or `pyggml.types.encode` gave.

        Args:
            data: any bytes-like object (bytes, a NumPy array, a memoryview) of exactly `nbytes` bytes.

        Returns:
            This tensor.

        Raises:
            ValueError: a tensor without memory or not contiguous; data of another size.
            pyggml.rpc.RpcError: the tensor lives on an RPC server whose connection failed.
        """
        self._writable("set_raw")
        # Any: NumPy's stubs make an ndarray a Buffer from NumPy 2.5 on, not before; a cast would be redundant
        # on one and needed on the other (mypy's verdict must not depend on the NumPy a Python resolves to)
        buffer: Any = data
        raw = np.ascontiguousarray(np.frombuffer(memoryview(buffer).cast("B"), np.uint8))
        return self._write(raw, "set_raw: {} bytes for a tensor of {} bytes")

    def _write(self, raw: np.ndarray, wrong_size: str) -> "Tensor":
        """Write the tensor's whole bytes (`set`'s and `set_raw`'s end): wrong_size formats the size error."""
        p = self.ptr
        nbytes = lib.ggml_nbytes(p)
        if raw.nbytes != nbytes:
            raise ValueError(wrong_size.format(raw.nbytes, nbytes))
        if p.buffer == ffi.NULL:
            ffi.memmove(p.data, ffi.from_buffer(raw), nbytes)
        else:
            lib.ggml_backend_tensor_set(p, ffi.from_buffer(raw), 0, nbytes)
            transport.after_transfer(p.buffer)  # a tensor on a failed RPC server was not written
        lifetime.written(p)
        return self

    @lifetime.with_lender_lock  # another thread must not take the memory back meanwhile
    def raw_bytes(self) -> np.ndarray:
        """A copy of the tensor's `nbytes` bytes, in ggml's own encoding (for contiguous tensors).

        Returns:
            A uint8 array of `nbytes` bytes.

        Raises:
            ValueError: the tensor has no memory, or memory ggml cannot read back (a CPU extra buffer type such
                as CPU_REPACK: `pyggml.transport.unreadable`).
            pyggml.rpc.RpcError: the tensor lives on an RPC server whose connection failed.
        """
        self._require_allocated("read")
        out = np.empty(self.nbytes, dtype=np.uint8)
        if self.ptr.buffer == ffi.NULL:
            _check_current(self.ptr, f"read of {self.name or 'a tensor'}")
            ffi.memmove(ffi.from_buffer(out), self.ptr.data, self.nbytes)
        else:
            transport.before_read(self.ptr.buffer, f"read: tensor {self.name or '(unnamed)'}")
            _check_current(self.ptr, f"read of {self.name or 'a tensor'}")
            lib.ggml_backend_tensor_get(self.ptr, ffi.from_buffer(out), 0, self.nbytes)
            transport.after_transfer(self.ptr.buffer)  # zeros, not its values, from a failed RPC server
        return out

    @lifetime.with_lender_lock  # another thread must not take the memory back meanwhile
    def numpy(self) -> np.ndarray:
        """A copy of the values as a NumPy array of shape `t.shape` (NumPy order).

        The dtype is the type's host dtype (`pyggml.types.host_dtype`: float16 for F16; float32 for types NumPy
        has no dtype for, quantized ones decoded). A strided view is read through its strides when it is of a
        raw type and in host memory.

        Returns:
            The values, a new array.

        Raises:
            ValueError: the tensor has no memory, or memory ggml cannot read back (a CPU extra buffer type);
                a non-contiguous view of a quantized or BF16 type, or outside host memory (make it contiguous
                with `cont()` first).
            pyggml.errors.StaleValue: (a ValueError) a node of a run whose memory ggml's graph allocator gave to
                a later node (ask for it as an output of the run, or `set_output()` it before allocating), or
                a node read before its graph was computed.
            pyggml.rpc.RpcError: the tensor lives on an RPC server whose connection failed.
        """
        p = self.ptr
        if lib.ggml_is_contiguous(p):
            t = _TYPE_OF[p.type]
            if not types.has_raw_dtype(t):
                return types.decode(t, self.raw_bytes(), tuple(reversed(self.ne))).reshape(self.shape)
            # raw types: one copy, straight into the array
            self._require_allocated("read")  # also a view whose source's memory went
            out = np.empty(self.shape, dtype=types.host_dtype(t))
            if p.buffer == ffi.NULL:
                _check_current(p, "numpy")  # a node whose memory a later node took, or not computed yet
                ffi.memmove(ffi.from_buffer(out), p.data, out.nbytes)
            else:
                transport.before_read(p.buffer, f"numpy: tensor {self.name or '(unnamed)'}")
                _check_current(p, "numpy")
                lib.ggml_backend_tensor_get(p, ffi.from_buffer(out), 0, out.nbytes)
                transport.after_transfer(p.buffer)
            return out
        self._require_allocated("read")
        _check_current(p, "numpy")
        full = tuple(reversed(self.ne))
        # a strided view: read through its strides, on the host
        if not types.has_raw_dtype(self.type):
            raise ValueError(f"numpy: non-contiguous {self.type.name} view; make it contiguous with cont() first")
        if not self.is_host:
            raise ValueError("numpy: non-contiguous view outside host memory; make it contiguous with cont() first")
        span = sum((n - 1) * s for n, s in zip(self.ne, self.nb)) + self.element_size
        arr = np.ndarray(
            shape=full,
            dtype=types.host_dtype(self.type),
            buffer=ffi.buffer(self.ptr.data, span),
            strides=tuple(reversed(self.nb)),
        )
        return arr.reshape(self.shape).copy()

    def view(self) -> np.ndarray:
        """A zero-copy NumPy array of shape `t.shape` over the tensor's host memory.

        Writes through it change the tensor; the array keeps the tensor (and so its memory) alive. Only for a
        contiguous host tensor of a raw type (F32, F16, I32, ...) whose memory it keeps: a context's own memory
        (`no_alloc=False`) or a buffer from `Backend.alloc_tensors`. Memory a Runner, Scheduler or Gallocr lends
        to one graph is taken back at its next allocation, and a view would then read what the next graph put
        there, so viewing it raises; `numpy()` copies. DLPack, the buffer protocol and `np.asarray(t)` share
        memory by the same rules, strided views too (pyggml.interop).

        Returns:
            The array.

        Raises:
            ExportError: (a ValueError) the tensor has no memory, is outside host memory, its memory is lent by
                a graph allocator, or it is not contiguous or of a quantized type.
        """
        lifetime.check_shareable(self, "view")
        if not self.is_contiguous() or not types.has_raw_dtype(self.type):
            what = self.type.name if self.is_contiguous() else f"a non-contiguous {self.type.name} view"
            raise ExportError(
                f"view: {self.name or 'the tensor'} is {what}: only contiguous tensors of a raw type (F32, F16, "
                "I32, ...) can be viewed; numpy() copies (dequantized to float32), np.asarray(t) shares a strided view"
            )
        # the array's base holds this tensor, so the memory outlives every view of it
        return interop.shared_array(self, "view", "view()")

    # --- zero-copy export: DLPack, the buffer protocol, NumPy's array interface -------------------
    def __dlpack__(
        self,
        stream: Any = None,
        *,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> Any:
        """A DLPack capsule of the tensor's memory, without a copy: `np.from_dlpack(t)`, `torch.from_dlpack(t)`.

        The consumer's array shares the tensor's memory (writes show both ways) and keeps it alive after
        the Tensor object is gone; the rules are `view()`'s (host memory the tensor keeps). Strided views
        export their strides (in elements). Types: F32, F16, F64, BF16 (kDLBfloat), I8, I16, I32, I64.

        stream: must be None (host memory has no stream). max_version: the newest DLPack version the
        consumer reads, (major, minor): (1, 0) or newer gives a versioned capsule (DLPack 1.0,
        'dltensor_versioned', with NumPy >= 2.1), None a legacy 'dltensor' one. dl_device: None or
        (1, 0), kDLCPU: the only device pyggml exports to. copy: None or False share the memory; True
        exports a copy made now, which works for lent memory too and, with dl_device=(1, 0), for a
        contiguous tensor on a device (`np.from_dlpack(t, device="cpu", copy=True)`).
        Returns the capsule (a PyCapsule a consumer takes once). Raises ExportError (a BufferError):
        memory outside the host (naming its buffer: copy it with numpy()), lent by an allocator, not
        allocated; a quantized type; a byte stride that is not a whole number of elements; a stream or
        another device."""
        return interop.dlpack(self, stream, max_version, dl_device, copy)

    def __dlpack_device__(self) -> tuple[int, int]:
        """Where the tensor's memory is, as DLPack says it: (1, 0), kDLCPU, for host memory; (7, index)
        kDLVulkan and (2, index) kDLCUDA for those devices' memory, (12, index) kDLExtDev for any other
        (RPC, meta), which `__dlpack__` refuses to export (copy with numpy()). Returns (device type, id).
        Raises ExportError for a tensor without memory."""
        return interop.dlpack_device(self)

    def __buffer__(self, flags: int, /) -> memoryview:
        """The buffer protocol (PEP 688, Python >= 3.12: `memoryview(t)`, `bytes(t)`, `np.asarray(t)`): a
        memoryview of the tensor's memory without a copy, holding the tensor; shape `t.shape`, the tensor's
        byte strides, struct format 'f' F32, 'e' F16, 'd' F64, 'b' I8, 'h' I16, 'i' I32, 'q' I64. On
        Python 3.11, `memoryview(np.asarray(t))` gives the same. flags: the consumer's PyBUF_* request
        (Python checks it against the view: a strided view refuses a contiguous request). Returns the
        memoryview. Raises ExportError as `view()` for the memory, and for BF16 (no format code; DLPack
        shares it) and quantized types."""
        return interop.buffer(self)

    @property
    def __array_interface__(self) -> dict[str, Any]:
        """NumPy's array interface (version 3): `np.asarray(t)` is a zero-copy array over the tensor's
        memory (strided views included) that holds the tensor, on every Python version (3.12 and later
        read `__buffer__` first, to the same effect). The rules are
        `view()`'s; ExportError (which NumPy passes on) for memory that may not be shared, BF16 (NumPy has
        no dtype for it: `np.from_dlpack` cannot either; numpy() converts to float32) and quantized types."""
        return interop.array_interface(self)

    # --- operators and scalars: `a + b`, `2.0 * a`, `-a`, `a @ b`, `float(t)` ----------------------------------
    # The arithmetic operators build ggml ops with NumPy's meaning for the tensors' NumPy-order shapes
    # (pyggml/_operators.py says how each is built and why it is exact); `item()` and `float(t)` read a one-value
    # tensor after a run.

    # NumPy defers to these operators (`np.float32(2) * t` is `t.__rmul__`) rather than computing on the memory
    __array_ufunc__ = None

    def __add__(self, other: Any) -> "Tensor":
        """`self + other`: ggml_add with NumPy's broadcasting, or ggml_scale_bias/add for a number.

        Args:
            other: a Tensor of the same float type whose shape broadcasts with this one's, or a number.

        Returns:
            The result tensor (a node of this tensor's context; nothing is computed yet).
        """
        return _arith("add", self, other)

    def __radd__(self, other: Any) -> "Tensor":
        """`other + self` for a number `other` (ggml_scale_bias on F32; exact).

        Args:
            other: a number.

        Returns:
            The result tensor.
        """
        return _arith("add", self, other, True)

    def __sub__(self, other: Any) -> "Tensor":
        """`self - other`: ggml_sub (other repeated into self), or ggml_scale_bias/sub for a number.

        Args:
            other: a Tensor of the same float type that broadcasts into this one's shape, or a number.

        Returns:
            The result tensor.
        """
        return _arith("sub", self, other)

    def __rsub__(self, other: Any) -> "Tensor":
        """`other - self` for a number `other` (ggml_scale_bias with a factor of -1 on F32; exact).

        Args:
            other: a number.

        Returns:
            The result tensor.
        """
        return _arith("sub", self, other, True)

    def __mul__(self, other: Any) -> "Tensor":
        """`self * other`: ggml_mul with NumPy's broadcasting, or ggml_scale for a number.

        Args:
            other: a Tensor of the same float type whose shape broadcasts with this one's, or a number.

        Returns:
            The result tensor.
        """
        return _arith("mul", self, other)

    def __rmul__(self, other: Any) -> "Tensor":
        """`other * self` for a number `other` (ggml_scale on F32; exact).

        Args:
            other: a number.

        Returns:
            The result tensor.
        """
        return _arith("mul", self, other, True)

    def __truediv__(self, other: Any) -> "Tensor":
        """`self / other`: ggml_div (other repeated into self); for a number ggml_scale by its reciprocal where
        that is exact (a power of two), else ggml_div by a constant.

        Args:
            other: a Tensor of the same float type that broadcasts into this one's shape, or a number.

        Returns:
            The result tensor.
        """
        return _arith("div", self, other)

    def __rtruediv__(self, other: Any) -> "Tensor":
        """`other / self` for a number `other`: ggml_div of a constant of this tensor's shape by it (exact).

        Args:
            other: a number.

        Returns:
            The result tensor.
        """
        return _arith("div", self, other, True)

    def __neg__(self) -> "Tensor":
        """`-self`: ggml_neg (exact).

        Returns:
            The result tensor, of this tensor's shape and type.
        """
        return _operators().neg(self)

    def __matmul__(self, other: Any) -> "Tensor":
        """`self @ other` with NumPy's matmul meaning for NumPy-order shapes: (m, k) @ (k, n) -> (m, n).

        Built as `mul_mat(cont(transpose(other)), self)` (ggml_mul_mat computes b @ a.T in NumPy order; no copy
        where `other` is `ctx.transpose(w)` of a contiguous weight w). 1-d operands and batch dims follow NumPy
        where ggml's mul_mat can repeat them; the result is F32. pyggml/_operators.py's `matmul` says the rules.

        Args:
            other: an F32, F16 or BF16 Tensor (this tensor must be F32); a quantized weight w cannot be
                transposed: `x @ w.T` is `ctx.mul_mat(w, x)`.

        Returns:
            The result tensor.
        """
        return _operators().matmul(self, other)

    def __rmatmul__(self, other: Any) -> "Tensor":
        """`other @ self` for a Tensor `other` (Python calls it only for another kind: that is NotImplemented).

        Args:
            other: the left operand.

        Returns:
            The result tensor, or NotImplemented.
        """
        return _operators().matmul(other, self)

    def item(self) -> float | int:
        """The one value of a one-element tensor as a Python scalar (NumPy's `ndarray.item()`), read now.

        `ctx.sum(a)` has shape (1,) (ggml has no 0-d tensors): after a run, `s.item()` is NumPy's `a.sum()`
        as a Python float; `Runner.run` still returns an array. Reads the tensor's memory as `numpy()` does.

        Returns:
            A float for a float type, an int for an integer type.

        Raises:
            ValueError: the tensor has more than one element, or no memory (as `numpy()`).
        """
        if self.nelements != 1:
            raise ValueError(
                f"item: {self.name or 'the tensor'} has {self.nelements} elements (shape {self.shape}); only a "
                "one-element tensor converts to a Python scalar (read the others with numpy())"
            )
        return self.numpy().item()

    def __float__(self) -> float:
        """`float(t)`: the one value of a one-element tensor, read now (see `item`).

        Returns:
            The value as a Python float.
        """
        return float(self.item())

    def __int__(self) -> int:
        """`int(t)`: the one value of a one-element integer tensor, read now (see `item`).

        Returns:
            The value as a Python int.

        Raises:
            TypeError: the tensor is of a float type (`int(float(t))` truncates on purpose).
        """
        if not types.is_integer(self.type):
            raise TypeError(
                f"int: {self.name or 'the tensor'} is {self.type.name}; use float(t), or int(float(t)) to truncate"
            )
        return int(self.item())

    # --- end of operators and scalars ------------------------------------------------------------------------


# the operators' implementation, pyggml/_operators.py: it builds ops, a floor above this module (docs/layout.md,
# "Floors"), so it registers itself here when imported (pyggml.context imports it)
_OPERATORS: list[Any] = []


def _register_operators(impl: Any) -> None:
    """Called by pyggml._operators when imported: the module Tensor's operators call."""
    _OPERATORS[:] = [impl]


def _operators() -> Any:
    if not _OPERATORS:
        raise RuntimeError("Tensor's operators are not registered: import pyggml (pyggml.context registers them)")
    return _OPERATORS[0]


def _arith(op: str, t: Tensor, other: Any, reflected: bool = False) -> Any:
    """The arithmetic operators' one path into pyggml/_operators.py."""
    return _operators().binary(op, t, other, reflected)


def _check_current(p: CData, what: str) -> None:
    """`lifetime.check_current`, but memory on a device whose connection failed (an RPC server) raises that
    failure (`pyggml.rpc.RpcError`) rather than StaleValue: its compute failed with the connection."""
    try:
        lifetime.check_current(p, what)
    except StaleValue:
        buf = lifetime.memory_buffer(p)
        if buf != ffi.NULL:
            transport.after_transfer(buf)
        raise


def _check_exact(arr: np.ndarray, t: Type, cast: bool, name: str):
    """Raise unless every value converts to type t exactly (see Tensor.set)."""
    what = f"set: {name or 'tensor'} ({t.name})"
    if types.is_integer(t):
        if arr.dtype.kind == "f":
            bad = ~np.isfinite(arr)
            if bad.any():
                raise ValueError(f"{what}: NaN or infinite value ({arr[bad].flat[0].item()}) has no integer value")
            if not cast:
                frac = arr != np.trunc(arr)
                if frac.any():
                    raise ValueError(
                        f"{what}: {arr[frac].flat[0].item()!r} is not a whole number; round the values "
                        f"yourself, cast them (np.asarray(v).astype(np.{_HOST_DTYPE[t]})), or pass "
                        "cast=True to round toward zero"
                    )
        info = np.iinfo(_HOST_DTYPE[t])
        lo, hi = arr.min(), arr.max()
        if lo < info.min or hi > info.max:
            raise ValueError(f"{what}: values {lo}..{hi} do not fit in {t.name} ({info.min}..{info.max})")
    elif not cast and arr.dtype.kind in "fiu":
        biggest = _FLOAT_MAX.get(t, _FLOAT_MAX[Type.F32])  # quantized types convert through F32
        finite = arr[np.isfinite(arr)] if arr.dtype.kind == "f" else arr
        if finite.size and np.abs(finite).max() > biggest:
            raise ValueError(
                f"{what}: {np.abs(finite).max()} is beyond the type's largest value {biggest:g} "
                "and would become inf (pass cast=True to accept that)"
            )


# the largest finite value of each float type, after rounding (a value rounds up to inf only past these)
_FLOAT_MAX = {
    Type.F16: 65519.99,
    Type.BF16: 3.3961e38,
    Type.F32: float(np.finfo(np.float32).max) * (1 + 2**-25),
    Type.F64: float("inf"),
}
_HOST_DTYPE = {t: types.host_dtype(t) for t in Type}


def _strip_leading_ones(shape: tuple[int, ...]) -> tuple[int, ...]:
    i = 0
    while i < len(shape) - 1 and shape[i] == 1:
        i += 1
    return tuple(shape[i:])
