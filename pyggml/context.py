"""Context: a ggml_context (`pyggml.arena.Arena`) with every op of `pyggml.ops` as a method:
`ctx.add(a, b)` is `ops.add(ctx, a, b)`.
"""

from __future__ import annotations

from pyggml import _operators  # noqa: F401 (registers Tensor's operators: `a + b`, `a @ b`, ...)
from pyggml.arena import MAX_MEM_SIZE, MAX_TENSOR_BYTES, Arena
from pyggml.ops.methods import OpMethods

__all__ = ["MAX_MEM_SIZE", "MAX_TENSOR_BYTES", "Context"]


class Context(Arena, OpMethods):
    """A ggml context (`ggml_init`): the memory pool that tensors, their op descriptions and graphs are made in.

    With `no_alloc=True` (the default) the pool holds descriptions only and the tensors' data comes from a
    backend (a `Runner`, `Backend.alloc_tensors`, a `Gallocr` or a `Scheduler`); with `no_alloc=False` the
    data lives in the pool too, in host memory (give a `mem_size` with room for it). Every op of
    `pyggml.ops` is a method: `ctx.add(a, b)` is `ops.add(ctx, a, b)`. The context is freed (`ggml_free`)
    when neither it nor any of its tensors is referenced.

    Args:
        mem_size: the pool's size in bytes, 1 to 2**48; None (the default) makes room for `n_tensors`
            tensor descriptions and one graph of `graph_size` nodes (no room for data).
        n_tensors: how many tensor descriptions the default `mem_size` holds.
        no_alloc: True: descriptions only, data from a backend; False: data in the pool, on the host.
        graph_size: the nodes of the one graph the default `mem_size` has room for.

    Attributes:
        ptr: the `struct ggml_context *` (cffi cdata), freed with the object.
        no_alloc: whether the pool holds descriptions only.

    Raises:
        ValueError: `mem_size` outside 1..2**48.
        TypeError: `mem_size` not an integer.
        MemoryError: ggml could not allocate the pool.
    """
