"""Arena: a ggml_context, the pool tensors and graphs are made in, without the ops (`pyggml.context` adds
them): the floor below the ops, which check their context against it.

By default a context holds only tensor descriptions (`no_alloc=True`); their memory
comes from a backend buffer (`Backend.alloc_tensors`, a `Gallocr` or a `Scheduler`).
With `no_alloc=False` the data lives in the context's own host memory.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyggml import lifetime, types
from pyggml._args import integer
from pyggml._native import ffi, guard_error, lib
from pyggml.tensor import MAX_DIMS, Tensor, set_rank
from pyggml.types import TypeLike

# ggml sizes memory in size_t and tensor extents in int64_t; keep both well inside range
MAX_MEM_SIZE = 2**48
MAX_TENSOR_BYTES = 2**62


class Arena:
    """The ggml context itself (`ggml_init`): its pool, the tensors made in it and what it keeps alive.
    `pyggml.Context` is an Arena with every op of `pyggml.ops` as a method; the ops check for an Arena, so
    they need not import the class that imports them. Its arguments and attributes: `Context`'s."""

    def __init__(
        self,
        mem_size: int | None = None,
        *,
        n_tensors: int = 4096,
        no_alloc: bool = True,
        graph_size: int = lib.GGML_DEFAULT_GRAPH_SIZE,
    ) -> None:
        if mem_size is None:
            mem_size = n_tensors * lib.ggml_tensor_overhead() + lib.ggml_graph_overhead_custom(graph_size, False)
        mem_size = integer("mem_size", mem_size, 1, MAX_MEM_SIZE)
        params = ffi.new(
            "struct ggml_init_params *", {"mem_size": mem_size, "mem_buffer": ffi.NULL, "no_alloc": bool(no_alloc)}
        )
        ptr = lib.pyggml_guarded_ggml_init(params[0])
        if ptr == ffi.NULL:  # ggml asserts its malloc succeeded
            raise MemoryError(f"ggml_init could not allocate {mem_size} bytes")
        self.ptr = ffi.gc(ptr, lib.ggml_free)
        self.no_alloc = bool(no_alloc)
        # what this context's tensors may touch and must outlive them (pyggml.lifetime says who keeps what)
        self._keep: set = set()

    def keep_alive(self, obj: object) -> None:
        """Hold a reference to `obj` for as long as this context lives.

        For what its tensors may point into: a buffer, an allocator, another context, a NumPy array; so that
        it is not freed while a tensor still uses it (`pyggml.lifetime`).

        Args:
            obj: any object.
        """
        lifetime.keep(self, obj)

    def adopt(self, t: Tensor) -> None:
        """Record that a tensor of this context refers to `t`: keep `t`'s context (and so its memory) alive.

        The op wrappers call it for every source that lives in another context.

        Args:
            t: the tensor referred to.

        Raises:
            TypeError: `t` is not a `Tensor`.
        """
        if not isinstance(t, Tensor):
            raise TypeError(f"adopt: expected a Tensor, got {type(t).__name__}")
        if t.ctx is not None:
            lifetime.keep(self, t.ctx)

    def contexts(self) -> list["Arena"]:
        """This context and every context it keeps alive, transitively.

        Returns:
            The contexts, this one first.
        """
        return lifetime.contexts(self)

    @property
    def mem_size(self) -> int:
        """The bytes of the context's memory pool (`ggml_get_mem_size`).

        The pool holds tensor and graph descriptions, and the data of tensors when the context was made with
        `no_alloc=False`.
        """
        return lib.ggml_get_mem_size(self.ptr)

    @property
    def used_mem(self) -> int:
        """The bytes of the pool used so far (`ggml_used_mem`).

        A tensor or graph that does not fit in what is left raises `MemoryError`: make the Context with more
        `n_tensors`, `graph_size` or `mem_size`.
        """
        return lib.ggml_used_mem(self.ptr)

    # --- tensors -------------------------------------------------------------------
    def new_tensor(self, type: TypeLike, ne: Sequence[int], name: str | None = None) -> Tensor:
        """A new tensor of ggml extents `ne` (`ggml_new_tensor`).

        `ne` is ggml's order, innermost first; the tensor's NumPy `shape` is `ne` reversed, with `len(ne)`
        dims (`new_tensor("f32", [3, 2]).shape == (2, 3)`). For a NumPy-order shape use `tensor`.

        Args:
            type: a `Type`, its name (`"f32"`, `"q8_0"`) or a NumPy dtype.
            ne: 1 to 4 positive extents in ggml's order; `ne[0]` a multiple of the type's block size.
            name: an optional name (see `Tensor.name`).

        Returns:
            The tensor, without data until it is allocated (with `no_alloc=True`).

        Raises:
            ValueError: extents that are not positive, not 1 to 4 of them, an `ne[0]` that is not a multiple
                of the type's block size, a tensor too large for ggml to address, an unknown type name, a name
                too long.
            TypeError: extents that are not integers; a dtype with no ggml type.
            MemoryError: the context is full.
        """
        t = types.require(type)
        ne = list(ne)
        if not 1 <= len(ne) <= MAX_DIMS:
            raise ValueError(f"ne must have 1 to {MAX_DIMS} dims, got {len(ne)}")
        for n in ne:
            if isinstance(n, bool) or not hasattr(n, "__index__"):
                raise TypeError(f"ne must be integers, got {ne}")
        ne = [n.__index__() for n in ne]
        if any(n <= 0 for n in ne):
            # ggml allows empty tensors, but its shape checks divide by extents (a SIGFPE) and
            # its kernels do not handle them
            raise ValueError(f"ne must be positive, got {ne} (ggml does not handle empty tensors)")
        if ne[0] % types.block_size(t):
            raise ValueError(f"ne[0] = {ne[0]} is not a multiple of {t.name}'s block size {types.block_size(t)}")
        # ggml computes the byte size in size_t/int64 without overflow checks
        nbytes = ne[0] // types.block_size(t) * types.type_size(t)
        for n in ne[1:]:
            nbytes *= n
        if nbytes > MAX_TENSOR_BYTES or any(n > MAX_TENSOR_BYTES for n in ne):
            raise ValueError(f"a {t.name} tensor of ne={ne} would take {nbytes} bytes, more than ggml can address")
        arr = ffi.new("int64_t[]", ne)
        ptr = lib.pyggml_guarded_ggml_new_tensor(self.ptr, t, len(ne), arr)
        if ptr == ffi.NULL:
            raise guard_error("new_tensor") or MemoryError("ggml_new_tensor failed")
        set_rank(ptr, len(ne))
        out = Tensor(ptr, self)
        if name:
            out.name = name
        return out

    def new_tensor_1d(self, type: TypeLike, ne0: int, name: str | None = None) -> Tensor:
        """A new 1-d tensor of `ne0` elements (as `ggml_new_tensor_1d`); NumPy shape `(ne0,)`.

        It raises what `new_tensor` raises.

        Args:
            type: a `Type`, its name (`"f32"`) or a NumPy dtype.
            ne0: the extent.
            name: an optional name.

        Returns:
            The tensor.
        """
        return self.new_tensor(type, [ne0], name)

    def new_tensor_2d(self, type: TypeLike, ne0: int, ne1: int, name: str | None = None) -> Tensor:
        """A new tensor of `ne = [ne0, ne1]` in ggml's order (as `ggml_new_tensor_2d`).

        Its NumPy shape is `(ne1, ne0)`, kept 2-d even where `ne1` is 1. It raises what `new_tensor` raises.

        Args:
            type: a `Type`, its name (`"f32"`) or a NumPy dtype.
            ne0: elements per row (innermost).
            ne1: rows.
            name: an optional name.

        Returns:
            The tensor.
        """
        return self.new_tensor(type, [ne0, ne1], name)

    def new_tensor_3d(self, type: TypeLike, ne0: int, ne1: int, ne2: int, name: str | None = None) -> Tensor:
        """A new tensor of `ne = [ne0, ne1, ne2]` in ggml's order (as `ggml_new_tensor_3d`).

        Its NumPy shape is `(ne2, ne1, ne0)`, kept 3-d. It raises what `new_tensor` raises.

        Args:
            type: a `Type`, its name or a NumPy dtype.
            ne0: the innermost extent.
            ne1: the second extent.
            ne2: the outermost extent.
            name: an optional name.

        Returns:
            The tensor.
        """
        return self.new_tensor(type, [ne0, ne1, ne2], name)

    def new_tensor_4d(self, type: TypeLike, ne0: int, ne1: int, ne2: int, ne3: int, name: str | None = None) -> Tensor:
        """A new tensor of `ne = [ne0, ne1, ne2, ne3]` in ggml's order (as `ggml_new_tensor_4d`).

        Its NumPy shape is `(ne3, ne2, ne1, ne0)`. It raises what `new_tensor` raises.

        Args:
            type: a `Type`, its name or a NumPy dtype.
            ne0: the innermost extent.
            ne1: the second extent.
            ne2: the third extent.
            ne3: the outermost extent.
            name: an optional name.

        Returns:
            The tensor.
        """
        return self.new_tensor(type, [ne0, ne1, ne2, ne3], name)

    def tensor(
        self, type: TypeLike, shape: int | Sequence[int], name: str | None = None, *, input: bool = False
    ) -> Tensor:
        """A new tensor of NumPy shape `shape`: the usual way to make one.

        `shape` is NumPy's order, outermost first; the tensor's `ne` is its reverse, padded with 1s
        (`tensor("f32", (2, 3)).ne == (3, 2, 1, 1)`), and it keeps that shape, leading 1s included
        (`tensor("f32", (1, 16)).shape == (1, 16)`).

        Args:
            type: a `Type`, its name (`"f32"`, `"q8_0"`) or a NumPy dtype.
            shape: up to 4 positive extents, outermost first; an int is a 1-d shape, `()` a scalar.
            name: an optional name.
            input: mark it a graph input (`Tensor.set_input`), to be given a value at every run.

        Returns:
            The tensor.

        Raises:
            TypeError: a shape that is not an int or a sequence of ints (a str among them), a dtype with no
                ggml type.
            ValueError: as `new_tensor` (extents, block size, size, type name).
            MemoryError: the context is full.
        """
        if isinstance(shape, (str, bytes)) or not (hasattr(shape, "__iter__") or hasattr(shape, "__index__")):
            raise TypeError(
                f"tensor: shape must be an int or a sequence of ints (NumPy order), "
                f"got {shape.__class__.__name__} {shape!r}"
            )
        dims: list[int] = [shape] if isinstance(shape, int) or hasattr(shape, "__index__") else list(shape)  # type: ignore[list-item]
        out = self.new_tensor(type, list(reversed(dims)) or [1], name)
        set_rank(out.ptr, len(dims))
        return out.set_input() if input else out

    def tensors(self) -> list[Tensor]:
        """Every tensor of the context in creation order: leaves, views and op results.

        Walks `ggml_get_first_tensor` / `ggml_get_next_tensor`.

        Returns:
            The tensors, as `Tensor` objects.
        """
        out = []
        t = lib.ggml_get_first_tensor(self.ptr)
        while t != ffi.NULL:
            out.append(Tensor(t, self))
            t = lib.ggml_get_next_tensor(self.ptr, t)
        return out

    def get_tensor(self, name: str) -> Tensor | None:
        """The context's tensor with this name (`ggml_get_tensor`).

        Args:
            name: the name to look for.

        Returns:
            The first tensor of that name, or None when there is none.

        Raises:
            TypeError: `name` is not a str.
        """
        if not isinstance(name, str):
            raise TypeError(f"get_tensor: name must be a str, got {type(name).__name__}")
        t = lib.ggml_get_tensor(self.ptr, name.encode())
        return Tensor(t, self) if t != ffi.NULL else None
