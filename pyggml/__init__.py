"""pyggml: drive the real ggml from Python.

    import pyggml as gg
    ctx = gg.Context()
    a = ctx.tensor("f32", (2, 3), "a", input=True)     # NumPy-order shape
    b = ctx.tensor("f32", (2, 3), "b", input=True)
    out = ctx.mul(ctx.add(a, b), b)
    graph = gg.Graph(ctx).build_forward_expand(out)
    [y] = gg.Runner("cpu").run(graph, {a: ..., b: ...}, [out])

`pyggml.ffi` / `pyggml.lib` are ggml's whole C API (generated from its headers, unguarded);
`pyggml.checked` is ggml.h's part of it with GGML_ASSERT turned into `OpError`.
"""

from pyggml import (
    graph_dot,  # noqa: E402,F401 - registers Graph.to_dot's renderer
    ops,
)
from pyggml._native import build_info, checked, ffi, lib
from pyggml.backend import (
    Backend,
    Buffer,
    Device,
    Gallocr,
    Scheduler,
    backend,
    cpu_backend,
    device,
    devices,
    enable_cpu_vulkan_devices,
)
from pyggml.context import Context
from pyggml.errors import ExportError, GGMLError, GraphError, OpError, StaleValue, Unsplittable, Unsupported
from pyggml.graph import Graph
from pyggml.runner import Runner
from pyggml.tensor import Tensor
from pyggml.types import DeviceType, Op, SortOrder, Type, UnaryOp

__all__ = [
    "ffi",
    "lib",
    "checked",
    "build_info",
    "ops",
    "Backend",
    "Buffer",
    "Device",
    "Gallocr",
    "GGMLError",
    "Scheduler",
    "backend",
    "cpu_backend",
    "device",
    "devices",
    "enable_cpu_vulkan_devices",
    "Context",
    "Graph",
    "Runner",
    "Unsupported",
    "GraphError",
    "OpError",
    "Unsplittable",
    "ExportError",
    "StaleValue",
    "Tensor",
    "DeviceType",
    "Op",
    "SortOrder",
    "Type",
    "UnaryOp",
]
__version__ = "0.1.0"
