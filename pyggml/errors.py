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
- `ExportError`: a tensor's memory cannot be shared without a copy (`np.from_dlpack(t)`,
  `memoryview(t)`, `np.asarray(t)`, `t.view()`): it is on a device, lent to one graph by an
  allocator, not allocated, or of a type the protocol has no code for. Both a `BufferError`
  (what DLPack and buffer consumers expect) and a `ValueError` (what `view()` raised before).
- `LlamaError`: llama.cpp (pyggml.llama) reported a failure: a model it cannot load (the
  file and llama.cpp's logged reason), a context it cannot make, llama_decode's failure codes.
"""

from __future__ import annotations


class GGMLError(RuntimeError):
    """A ggml call reported failure (a status, or a NULL where an object was expected)."""


class LlamaError(GGMLError):
    """llama.cpp reported a failure (pyggml.llama): a model file it cannot load, a context it cannot
    make, a decode that failed (the message says what its return code means)."""


class ExportError(BufferError, ValueError):
    """A tensor's memory cannot be shared without a copy (DLPack, the buffer protocol, the NumPy array
    interface, `Tensor.view()`); the message says why and what to do instead (most often: `numpy()`,
    which copies). Raised for memory outside the host (a Vulkan, CUDA, RPC or meta buffer: ggml gives
    no pointer that can be handed out safely), memory an allocator lends to one graph (it is taken back
    at the allocator's next graph, which an export would outlive), a tensor without memory, one that
    ggml handed to a callback (nothing keeps its memory alive), and types or strides the protocol has
    no code for (quantized types; BF16 in the buffer protocol and the array interface)."""


class OpError(ValueError):
    """A ggml op's precondition failed while building a graph."""


class GraphError(ValueError):
    """A graph cannot be computed as it is; raised before ggml runs it."""


class Unsupported(GraphError):
    """The backend cannot compute some node of the graph (ggml_backend_supports_op says no)."""


class Unsplittable(GraphError):
    """A meta device cannot split this graph with these split states (ggml's reason in the message)."""
