"""pyggml's exceptions.

A wrong call through the Python layer raises one of these (or a plain TypeError for an
argument of the wrong kind), never kills the process:

- `GGMLError`: ggml reported a failure (a status, a NULL where an object was expected).
- `OpError`: an op's precondition failed while the graph was being built; the message
  names the op and ggml's own condition (GGML_ASSERT turned into an exception).
- `GraphError`: a graph cannot be computed as it is (the preflight every compute entry
  point runs: memory, node kinds the backend's kernels abort on, index ranges).
- `Unsupported`: a backend does not support some node (`ggml_backend_supports_op`).
- `Unsplittable`: a meta device cannot split the graph with the given split states.
- `StaleValue`: a tensor read after a run whose memory the graph allocator gave to a later node
  (or read before the graph was computed): what it holds is not the value its graph computed.
- `ExportError`: a tensor's memory cannot be shared without a copy (`np.from_dlpack(t)`,
  `memoryview(t)`, `np.asarray(t)`, `t.view()`): it is on a device, lent to one graph by an
  allocator, not allocated, or of a type the protocol has no code for. Both a `BufferError`
  (what DLPack and buffer consumers expect) and a `ValueError` (what `view()` raised before).
- `LlamaError`: llama.cpp (pyggml.llama) reported a failure: a model it cannot load (the
  file and llama.cpp's logged reason), a context it cannot make, llama_decode's failure codes.
"""

from __future__ import annotations


class GGMLError(RuntimeError):
    """A ggml call reported failure: a status other than GGML_STATUS_SUCCESS, or a NULL where an object
    was expected (a backend that cannot be made, memory that cannot be had, a failed compute).

    The base of the failures ggml itself reports; `LlamaError`, `pyggml.gguf.GGUFError` and
    `pyggml.rpc.RpcError` derive from it.
    """


class LlamaError(GGMLError):
    """llama.cpp reported a failure (`pyggml.llama`).

    Raised for a model file llama.cpp cannot load (the message names the file and the reason llama.cpp
    logged), a context it cannot make, and a `llama_decode` that failed (the message says what its
    return code means).
    """


class ExportError(BufferError, ValueError):
    """A tensor's memory cannot be shared without a copy (DLPack, the buffer protocol, the NumPy array
    interface, `Tensor.view()`); the message says why and what to do instead (most often: `numpy()`,
    which copies). Raised for memory outside the host (a Vulkan, CUDA, RPC or meta buffer: ggml gives
    no pointer that can be handed out safely), memory an allocator lends to one graph (it is taken back
    at the allocator's next graph, which an export would outlive), a tensor without memory, one that
    ggml handed to a callback (nothing keeps its memory alive), and types or strides the protocol has
    no code for (quantized types; BF16 in the buffer protocol and the array interface)."""


class StaleValue(ValueError):
    """A tensor's memory no longer holds the value its graph computed, so reading it is refused.

    ggml's graph allocator reuses the memory of a node once every node that reads it has run, unless the
    node is an output: after a run, such a node holds whatever a later node wrote there. Raised by
    `Tensor.numpy()` (and `raw_bytes()`) for a node whose memory a later node of the same allocation wrote,
    and for a computed node read before its graph was computed. The message names the node, the node that
    took its memory, and how to keep it: make it an output of the run (`runner.run(graph, inputs, [y, t])`,
    `runner.allocate(graph, outputs=[t])`) or flag it with `t.set_output()` before allocating.
    """


class OpError(ValueError):
    """A ggml op's precondition failed while a graph was being built.

    ggml's `GGML_ASSERT` in the op's C function, turned into an exception: the message names the op,
    ggml's condition and the source file it is in (`mul_mat: ggml requires ggml_can_mul_mat(a, b)
    (ggml.c)`). Nothing was added to the context's graph.
    """


class GraphError(ValueError):
    """A graph cannot be computed as it is; raised before ggml runs it.

    Raised by the preflight every compute entry point runs (`Runner`, `Scheduler`, `Backend.compute`):
    inputs not written since the allocation, a graph larger than the scheduler's size, node kinds or
    layouts the backend's kernels abort on, index values out of range. The message names the node and
    the reason.
    """


class Unsupported(GraphError):
    """The backend cannot compute some node of the graph (`ggml_backend_supports_op` says no).

    The message names the unsupported nodes' ops; `Runner.unsupported(graph)` lists them beforehand.
    """


class Unsplittable(GraphError):
    """A meta device cannot split this graph with these split states.

    ggml's reason is in the message: a node its meta code cannot split, or a view pyggml knows ggml
    would map onto the devices' shares wrongly (`pyggml.preflight.meta`).
    """
