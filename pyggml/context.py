"""Context: a ggml_context, the arena tensors and graphs are created in.

By default a context holds only tensor descriptions (`no_alloc=True`); their memory
comes from a backend buffer (`Backend.alloc_tensors`, a `Gallocr` or a `Scheduler`).
With `no_alloc=False` the data lives in the context's own host memory.

Every op of `pyggml.ops` is also a method: `ctx.add(a, b)` is `ops.add(ctx, a, b)`.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyggml import types
from pyggml._native import ffi, lib
from pyggml.tensor import MAX_DIMS, Tensor


class Context:
    def __init__(self, mem_size: int | None = None, *, n_tensors: int = 4096, no_alloc: bool = True,
                 graph_size: int = lib.GGML_DEFAULT_GRAPH_SIZE):
        """mem_size defaults to room for `n_tensors` tensor descriptions and one graph of `graph_size`."""
        if mem_size is None:
            mem_size = n_tensors * lib.ggml_tensor_overhead() + lib.ggml_graph_overhead_custom(graph_size, False)
        if mem_size <= 0:
            raise ValueError(f"mem_size must be positive, got {mem_size}")
        params = ffi.new("struct ggml_init_params *", {"mem_size": mem_size, "mem_buffer": ffi.NULL,
                                                        "no_alloc": no_alloc})
        ptr = lib.ggml_init(params[0])
        if ptr == ffi.NULL:
            raise MemoryError(f"ggml_init could not allocate {mem_size} bytes")
        self.ptr = ffi.gc(ptr, lib.ggml_free)
        self.no_alloc = no_alloc
        self._mem_size = mem_size
        self._overhead = lib.ggml_tensor_overhead()
        self._keep: list = []  # buffers and allocators whose memory this context's tensors use

    def keep_alive(self, obj):
        self._keep.append(obj)

    # --- memory accounting: ggml aborts when the arena is full, we raise first ---------
    @property
    def mem_size(self) -> int:
        return lib.ggml_get_mem_size(self.ptr)

    @property
    def used_mem(self) -> int:
        return lib.ggml_used_mem(self.ptr)

    def require_room(self, data_bytes: int = 0, what: str = "tensor"):
        need = self._overhead if self.no_alloc else self._overhead + data_bytes + lib.GGML_MEM_ALIGN
        if self._mem_size - lib.ggml_used_mem(self.ptr) < need:
            raise MemoryError(f"context is full: {what} needs {need} bytes, {self.mem_size - self.used_mem} left "
                              f"of {self.mem_size} (create the Context with a larger mem_size or n_tensors)")

    # --- tensors -------------------------------------------------------------------
    def new_tensor(self, type, ne: Sequence[int], name: str | None = None) -> Tensor:
        """A new tensor of ggml shape `ne` (ne[0] innermost), like ggml_new_tensor."""
        t = types.as_type(type)
        ne = [int(n) for n in ne]
        if not 1 <= len(ne) <= MAX_DIMS:
            raise ValueError(f"ne must have 1 to {MAX_DIMS} dims, got {len(ne)}")
        if any(n < 0 for n in ne):
            raise ValueError(f"ne must be non-negative, got {ne}")
        if ne[0] % types.block_size(t):
            raise ValueError(f"ne[0] = {ne[0]} is not a multiple of {t.name}'s block size {types.block_size(t)}")
        nbytes = types.row_size(t, ne[0])
        for n in ne[1:]:
            nbytes *= n
        self.require_room(nbytes)
        arr = ffi.new("int64_t[]", ne)
        out = Tensor(lib.ggml_new_tensor(self.ptr, t, len(ne), arr), self)
        if name:
            out.name = name
        return out

    def new_tensor_1d(self, type, ne0, name=None) -> Tensor:
        return self.new_tensor(type, [ne0], name)

    def new_tensor_2d(self, type, ne0, ne1, name=None) -> Tensor:
        return self.new_tensor(type, [ne0, ne1], name)

    def new_tensor_3d(self, type, ne0, ne1, ne2, name=None) -> Tensor:
        return self.new_tensor(type, [ne0, ne1, ne2], name)

    def new_tensor_4d(self, type, ne0, ne1, ne2, ne3, name=None) -> Tensor:
        return self.new_tensor(type, [ne0, ne1, ne2, ne3], name)

    def tensor(self, type, shape: Sequence[int], name: str | None = None, *, input: bool = False) -> Tensor:
        """A new tensor of NumPy shape `shape` (outermost first); `input=True` marks it a graph input."""
        out = self.new_tensor(type, list(reversed([int(s) for s in shape])) or [1], name)
        return out.set_input() if input else out

    def tensors(self) -> list[Tensor]:
        out = []
        t = lib.ggml_get_first_tensor(self.ptr)
        while t != ffi.NULL:
            out.append(Tensor(t, self))
            t = lib.ggml_get_next_tensor(self.ptr, t)
        return out

    def max_tensor_count(self) -> int:
        """An upper bound of the tensors created in this context (its used memory / one tensor's)."""
        return self.used_mem // lib.ggml_tensor_overhead()

    def get_tensor(self, name: str) -> Tensor | None:
        t = lib.ggml_get_tensor(self.ptr, name.encode())
        return Tensor(t, self) if t != ffi.NULL else None


def _bind_ops():
    """Every op of pyggml.ops as a method: ctx.add(a, b) is ops.add(ctx, a, b)."""
    from pyggml import ops
    for name in ops.__all__:
        fn = getattr(ops, name)
        if callable(fn) and not isinstance(fn, type) and not hasattr(Context, name):
            setattr(Context, name, fn)


_bind_ops()
