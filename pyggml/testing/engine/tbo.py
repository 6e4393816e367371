"""A case's node in test-backend-ops' `--test-file` format: one node a line (op, type, ne, op_params, each
source's type, ne and nb), so that llama.cpp's own test-backend-ops builds the very node the case builds
(`bench/perf_vs_tbo.py` times both; `python -m pyggml findings --export` writes a finding's cases this way)."""

from __future__ import annotations

from types import SimpleNamespace

from pyggml._native import ffi, lib
from pyggml.context import Context
from pyggml.graph import Graph
from pyggml.testing.engine import cases


def test_file_line(case: cases.Case) -> str | None:
    """The case's node as a --test-file line, None when its graph is not one node computed from its inputs
    (views of the inputs, scenario cases, several nodes) or it does not build on this ggml."""
    if not isinstance(case, cases.OpCase) or any(i.layout is not None for i in case.inputs.values()):
        return None
    ctx = Context()
    x = {k: ctx.tensor(s.type, s.shape, k, input=True) for k, s in case.inputs.items()}
    try:
        node = case.build_fn(ctx, SimpleNamespace(**x))
    except Exception:  # noqa: BLE001 - a case that cannot build here has no line
        return None
    graph = Graph(ctx).build_forward_expand(node)
    srcs = [node.ptr.src[i] for i in range(lib.GGML_MAX_SRC) if node.ptr.src[i] != ffi.NULL]
    if graph.n_nodes != 1 or any(s.op != 0 for s in srcs):
        return None
    params = [ffi.cast("int32_t *", node.ptr.op_params)[i] for i in range(16)]
    fields = [node.ptr.op, node.ptr.type, *[node.ptr.ne[i] for i in range(4)], 16, *params, len(srcs)]
    for s in srcs:
        fields += [s.type, *[s.ne[i] for i in range(4)], *[s.nb[i] for i in range(4)]]
    return " ".join(map(str, fields)) + " -"
