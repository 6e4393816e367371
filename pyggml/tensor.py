"""Tensor: a ggml_tensor seen from Python.

`t.ne` is ggml order (ne[0] innermost), `t.shape` NumPy order (reversed), so a
contiguous tensor and its NumPy array share one memory layout. Values move in and out
through `set()` / `numpy()`; a tensor in host memory can also be read without a copy
(`view()`).
"""

from __future__ import annotations

import numpy as np

from pyggml import rpc, types
from pyggml._native import cstr, ffi, lib
from pyggml.types import Op, Type

MAX_DIMS = lib.GGML_MAX_DIMS
# plain dict lookups: Enum(value) costs several times more, and op building reads types a lot
_TYPE_OF = {int(t): t for t in Type}
_OP_OF = {int(o): o for o in Op}


class Tensor:
    __slots__ = ("ptr", "ctx", "__weakref__")

    def __init__(self, ptr, ctx):
        self.ptr = ptr
        self.ctx = ctx  # keeps the context (and so the tensor's memory) alive

    # --- identity ------------------------------------------------------------------
    def __eq__(self, other):
        return isinstance(other, Tensor) and self.ptr == other.ptr

    def __hash__(self):
        return hash(int(ffi.cast("uintptr_t", self.ptr)))

    def __repr__(self):
        name = f" {self.name!r}" if self.name else ""
        return f"<Tensor{name} {self.type.name} ne={self.ne} op={self.op.name}>"

    # --- description ---------------------------------------------------------------
    @property
    def ne(self) -> tuple[int, ...]:
        return tuple(self.ptr.ne)

    @property
    def nb(self) -> tuple[int, ...]:
        return tuple(self.ptr.nb)

    @property
    def shape(self) -> tuple[int, ...]:
        """NumPy order, trailing ggml dims of size 1 dropped (at least one dim)."""
        ne = list(self.ptr.ne)
        n = MAX_DIMS
        while n > 1 and ne[n - 1] == 1:  # not ggml_n_dims: it drops a trailing dim of 0 as well
            n -= 1
        return tuple(reversed(ne[:n]))

    @property
    def ndim(self) -> int:
        return lib.ggml_n_dims(self.ptr)

    @property
    def type(self) -> Type:
        return _TYPE_OF[self.ptr.type]

    @property
    def op(self) -> Op:
        return _OP_OF[self.ptr.op]

    @property
    def name(self) -> str:
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
        self.name = value
        return self

    @property
    def src(self) -> list["Tensor"]:
        return [Tensor(s, self.ctx) for s in self.ptr.src if s != ffi.NULL]

    @property
    def view_src(self) -> "Tensor | None":
        return Tensor(self.ptr.view_src, self.ctx) if self.ptr.view_src != ffi.NULL else None

    @property
    def view_offs(self) -> int:
        return self.ptr.view_offs

    @property
    def nelements(self) -> int:
        return lib.ggml_nelements(self.ptr)

    @property
    def nrows(self) -> int:
        return lib.ggml_nrows(self.ptr)

    @property
    def nbytes(self) -> int:
        return lib.ggml_nbytes(self.ptr)

    @property
    def element_size(self) -> int:
        return lib.ggml_element_size(self.ptr)

    def is_contiguous(self) -> bool:
        return bool(lib.ggml_is_contiguous(self.ptr))

    def is_permuted(self) -> bool:
        return bool(lib.ggml_is_permuted(self.ptr))

    def is_transposed(self) -> bool:
        return bool(lib.ggml_is_transposed(self.ptr))

    @property
    def is_input(self) -> bool:
        return bool(self.ptr.flags & lib.GGML_TENSOR_FLAG_INPUT)

    @property
    def is_output(self) -> bool:
        return bool(self.ptr.flags & lib.GGML_TENSOR_FLAG_OUTPUT)

    def set_input(self) -> "Tensor":
        """Mark a graph input (filled on the host); only tensors no op computes can be inputs."""
        if self.ptr.op != lib.GGML_OP_NONE:  # ggml asserts it
            raise ValueError(f"set_input: {self.name or 'the tensor'} is computed by a {self.op.name} node; "
                             "only tensors no op computes can be graph inputs")
        lib.ggml_set_input(self.ptr)
        return self

    def set_output(self) -> "Tensor":
        lib.ggml_set_output(self.ptr)
        return self

    # --- memory --------------------------------------------------------------------
    @property
    def buffer(self):
        """The ggml_backend_buffer_t holding the data (NULL for context memory or none)."""
        return self.ptr.buffer

    @property
    def is_allocated(self) -> bool:
        return self.ptr.data != ffi.NULL

    @property
    def is_host(self) -> bool:
        """True when the data is in host memory, directly readable and writable."""
        if self.ptr.data == ffi.NULL:
            return False
        return self.ptr.buffer == ffi.NULL or bool(lib.ggml_backend_buffer_is_host(self.ptr.buffer))

    def _require_allocated(self, what: str):
        if not self.is_allocated:
            raise ValueError(f"{what}: tensor {self.name or '(unnamed)'} has no memory yet "
                             "(allocate its context or graph on a backend first)")

    def set(self, values) -> "Tensor":
        """Write values (NumPy order shape, or any array with as many elements)."""
        p = self.ptr
        if p.data == ffi.NULL:
            self._require_allocated("set")
        if not lib.ggml_is_contiguous(p):
            raise ValueError("set: tensor is not contiguous; write to the tensor it views instead")
        arr = np.asarray(values)
        t = _TYPE_OF[p.type]
        if arr.dtype.kind not in "biuf":
            raise TypeError(f"set: values of dtype {arr.dtype} cannot be written to a {t.name} tensor")
        if types.is_integer(t) and arr.size:
            _check_integer_values(arr, t)
        if arr.size != lib.ggml_nelements(p):
            raise ValueError(f"set: {arr.size} values for a tensor of {self.nelements} elements (shape {self.shape})")
        if arr.ndim > 1 and _strip_leading_ones(arr.shape) != _strip_leading_ones(self.shape):
            raise ValueError(f"set: array shape {arr.shape} does not match tensor shape {self.shape}")
        # raw types keep their bytes in C order whatever the shape; the others convert row by row
        raw = types.encode(t, arr if types.has_raw_dtype(t) else arr.reshape(tuple(reversed(self.ne))))
        nbytes = lib.ggml_nbytes(p)
        if raw.nbytes != nbytes:
            raise ValueError(f"set: {raw.nbytes} bytes encoded for a tensor of {nbytes} bytes")
        if p.buffer == ffi.NULL:
            ffi.memmove(p.data, ffi.from_buffer(raw), nbytes)
        else:
            lib.ggml_backend_tensor_set(p, ffi.from_buffer(raw), 0, nbytes)
            rpc.check_buffer(p.buffer)  # a tensor on a failed RPC server was not written
        return self

    def set_raw(self, data) -> "Tensor":
        """Write the tensor's bytes as they are (ggml's own encoding of its type: quantized blocks
        and all), e.g. what `raw_bytes` or `pyggml.types.encode` gave."""
        p = self.ptr
        if p.data == ffi.NULL:
            self._require_allocated("set_raw")
        if not lib.ggml_is_contiguous(p):
            raise ValueError("set_raw: tensor is not contiguous; write to the tensor it views instead")
        raw = np.ascontiguousarray(np.frombuffer(memoryview(data).cast("B"), np.uint8))
        nbytes = lib.ggml_nbytes(p)
        if raw.nbytes != nbytes:
            raise ValueError(f"set_raw: {raw.nbytes} bytes for a tensor of {nbytes} bytes")
        if p.buffer == ffi.NULL:
            ffi.memmove(p.data, ffi.from_buffer(raw), nbytes)
        else:
            lib.ggml_backend_tensor_set(p, ffi.from_buffer(raw), 0, nbytes)
            rpc.check_buffer(p.buffer)  # a tensor on a failed RPC server was not written
        return self

    def raw_bytes(self) -> np.ndarray:
        """A copy of the tensor's bytes (contiguous tensors)."""
        self._require_allocated("read")
        out = np.empty(self.nbytes, dtype=np.uint8)
        if self.ptr.buffer == ffi.NULL:
            ffi.memmove(ffi.from_buffer(out), self.ptr.data, self.nbytes)
        else:
            lib.ggml_backend_tensor_get(self.ptr, ffi.from_buffer(out), 0, self.nbytes)
            rpc.check_buffer(self.ptr.buffer)  # zeros, not its values, from a failed RPC server
        return out

    def numpy(self) -> np.ndarray:
        """A copy of the values, in NumPy shape `t.shape`."""
        p = self.ptr
        if lib.ggml_is_contiguous(p):
            t = _TYPE_OF[p.type]
            if not types.has_raw_dtype(t):
                return types.decode(t, self.raw_bytes(), tuple(reversed(self.ne))).reshape(self.shape)
            # raw types: one copy, straight into the array
            if p.data == ffi.NULL:
                self._require_allocated("read")
            out = np.empty(self.shape, dtype=types.host_dtype(t))
            if p.buffer == ffi.NULL:
                ffi.memmove(ffi.from_buffer(out), p.data, out.nbytes)
            else:
                lib.ggml_backend_tensor_get(p, ffi.from_buffer(out), 0, out.nbytes)
                rpc.check_buffer(p.buffer)
            return out
        full = tuple(reversed(self.ne))
        # a strided view: read through its strides, on the host
        if not types.has_raw_dtype(self.type):
            raise ValueError(f"numpy: non-contiguous {self.type.name} view; make it contiguous with cont() first")
        if not self.is_host:
            raise ValueError("numpy: non-contiguous view outside host memory; make it contiguous with cont() first")
        span = sum((n - 1) * s for n, s in zip(self.ne, self.nb)) + self.element_size
        arr = np.ndarray(shape=full, dtype=types.host_dtype(self.type), buffer=ffi.buffer(self.ptr.data, span),
                         strides=tuple(reversed(self.nb)))
        return arr.reshape(self.shape).copy()

    def view(self) -> np.ndarray:
        """A zero-copy NumPy view of a contiguous host tensor of a raw type (writes go to ggml)."""
        self._require_allocated("view")
        if not self.is_host:
            raise ValueError("view: the tensor is not in host memory; use numpy() to copy it")
        if not self.is_contiguous() or not types.has_raw_dtype(self.type):
            raise ValueError("view: only contiguous tensors of a raw type (F32, F16, I32, ...) can be viewed")
        # the array's base holds this tensor, so the memory outlives every view of it
        return np.asarray(_HostMemory(self, types.host_dtype(self.type)))


def _check_integer_values(arr: np.ndarray, t: Type):
    """NumPy would wrap values beyond the type's range, and cast NaN to anything: refuse both
    (floats are truncated, as NumPy's astype does)."""
    info = np.iinfo(types.host_dtype(t))
    if arr.dtype.kind == "f":
        if not np.isfinite(arr).all():
            raise ValueError(f"set: NaN or infinite values for a {t.name} tensor")
    lo, hi = arr.min(), arr.max()
    if lo < info.min or hi > info.max:
        raise ValueError(f"set: values {lo}..{hi} do not fit in {t.name} ({info.min}..{info.max})")


class _HostMemory:
    """A tensor's host memory as NumPy sees it (the array interface), holding the tensor."""

    def __init__(self, tensor: Tensor, dtype: np.dtype):
        self.tensor = tensor
        self.__array_interface__ = {
            "shape": tensor.shape, "typestr": dtype.str, "version": 3,
            "data": (int(ffi.cast("uintptr_t", tensor.ptr.data)), False),
        }


def _strip_leading_ones(shape: tuple[int, ...]) -> tuple[int, ...]:
    i = 0
    while i < len(shape) - 1 and shape[i] == 1:
        i += 1
    return tuple(shape[i:])
