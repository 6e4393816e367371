"""The preflight's rules are data: each says why it exists and which test covers it, none is lost, and
two rules for one op both run. Its state lives on the graph, so a new object that reuses a freed
object's id() never meets the freed one's entries."""

from __future__ import annotations

import ast
import gc
import re
from pathlib import Path

import numpy as np
import pytest

import pyggml as gg
from pyggml import preflight
from pyggml.preflight import CPU_RULES, GRAPH_RULES, VULKAN_RULES, Rule, RuleTable
from pyggml.testing.engine import oracles as O  # noqa: N812
from pyggml.types import Op

REPO = Path(__file__).resolve().parent.parent

# the ops the CPU rules covered before they became a table of Rules (pyggml/preflight.py's _CPU_RULES,
# 84 entries of which two, ADD and ROPE, were silently replaced by later ones)
CPU_OPS_BEFORE = {
    "ACC",
    "ADD",
    "ADD1",
    "ADD_ID",
    "ADD_REL_POS",
    "ARGMAX",
    "ARGSORT",
    "CLAMP",
    "CONCAT",
    "CONT",
    "CONV_2D",
    "CONV_2D_DW",
    "CONV_3D",
    "CONV_TRANSPOSE_1D",
    "CONV_TRANSPOSE_2D",
    "COS",
    "COUNT_EQUAL",
    "CPY",
    "CROSS_ENTROPY_LOSS",
    "CROSS_ENTROPY_LOSS_BACK",
    "CUMSUM",
    "DIAG",
    "DIAG_MASK_INF",
    "DIAG_MASK_ZERO",
    "DIV",
    "DUP",
    "FILL",
    "FLASH_ATTN_EXT",
    "GATED_LINEAR_ATTN",
    "GET_REL_POS",
    "GET_ROWS",
    "GET_ROWS_BACK",
    "GLU",
    "GROUP_NORM",
    "IM2COL",
    "IM2COL_3D",
    "IM2COL_BACK",
    "L2_NORM",
    "LEAKY_RELU",
    "LIGHTNING_INDEXER",
    "LOG",
    "MEAN",
    "MUL",
    "MUL_MAT",
    "MUL_MAT_ID",
    "NORM",
    "OPT_STEP_ADAMW",
    "OPT_STEP_SGD",
    "OUT_PROD",
    "PAD",
    "POOL_1D",
    "POOL_2D",
    "POOL_2D_BACK",
    "REPEAT",
    "REPEAT_BACK",
    "RMS_NORM",
    "RMS_NORM_BACK",
    "ROLL",
    "ROPE",
    "ROPE_BACK",
    "RWKV_WKV6",
    "RWKV_WKV7",
    "SCALE",
    "SET",
    "SET_ROWS",
    "SILU_BACK",
    "SIN",
    "SOFT_MAX",
    "SOFT_MAX_BACK",
    "SQR",
    "SQRT",
    "SSM_CONV",
    "SSM_SCAN",
    "SUB",
    "SUM",
    "SUM_ROWS",
    "TIMESTEP_EMBEDDING",
    "TOP_K",
    "TRI",
    "UNARY",
    "WIN_PART",
    "WIN_UNPART",
}


def all_rules() -> list[Rule]:
    return [*CPU_RULES.rules, *VULKAN_RULES.rules, *GRAPH_RULES]


def _test_functions(path: Path) -> set[str]:
    return {n.name for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.FunctionDef)}


@pytest.mark.parametrize(
    "rule",
    all_rules(),
    ids=lambda r: f"{'+'.join(Op(o).name for o in r.ops) or 'graph'}:{getattr(r.check, '__name__', '?')}",
)
def test_every_rule_says_why_and_names_a_test_that_exists(rule):
    assert rule.finding.strip(), "a rule needs a docs/findings.md number or a reason"
    if rule.finding.startswith("docs/findings.md"):
        numbers = re.findall(r"\d+", rule.finding)
        headings = (REPO / "docs" / "findings.md").read_text()
        assert all(re.search(rf"^## [\d, -]*\b{n}\b|^## \d+-\d+", headings, re.M) for n in numbers)
    m = re.fullmatch(r"(tests/[\w/]+\.py)::(test_\w+)", rule.test)
    assert m, f"test must read tests/test_x.py::test_name, got {rule.test!r}"
    path = REPO / m[1]
    assert path.exists(), f"{rule.test}: no such file"
    assert m[2] in _test_functions(path), f"{rule.test}: no such test"


def test_no_cpu_rule_is_lost():
    assert {Op(o).name for o in CPU_RULES.ops()} >= CPU_OPS_BEFORE
    pairs = sum(len(r.ops) for r in CPU_RULES.rules)
    assert pairs == 85  # the 84 entries of the dict, the two it replaced included, and XIELU's since
    assert len(CPU_RULES.for_op(Op.ADD)) == 2 and len(CPU_RULES.for_op(Op.ROPE)) == 2


def test_rules_for_one_op_add_up_and_an_exact_duplicate_raises():
    table = RuleTable("test")

    def first(p):
        return "first" if p == "a" else None

    def second(p):
        return "second"

    class Node:
        def __init__(self, value):
            self.op, self.value = int(Op.ADD), value

        def __eq__(self, other):
            return self.value == other

    table.register(Op.ADD, first, finding="why", test="tests/test_preflight_rules.py::test_no_cpu_rule_is_lost")
    table.register((Op.ADD, Op.SUB), second, finding="why", test="tests/x.py::test_y")
    assert [r.check for r in table.for_op(Op.ADD)] == [first, second]
    assert table.why(Node("a")) == "first" and table.why(Node("b")) == "second"
    with pytest.raises(ValueError, match="ADD already has the rule first"):
        table.register(Op.ADD, first, finding="why", test="tests/x.py::test_y")


def _run_cpu(ctx, graph, values):
    backend = gg.cpu_backend(1)
    backend.alloc_tensors(ctx)
    for t, v in values.items():
        t.set(v)
    backend.compute(graph)


def test_add_checks_its_inputs_and_its_result_type():
    # ADD had _binary and then _add (which called it) for the same op: both checks run now
    ctx = gg.Context()
    a, b = ctx.tensor("i32", (2, 4), "a"), ctx.tensor("i32", (2, 4), "b")
    out = ctx.add(a, b)
    with pytest.raises(gg.GraphError, match="takes F32/F16/BF16 inputs"):
        _run_cpu(ctx, gg.Graph(ctx).build_forward_expand(out), {})
    ctx = gg.Context()
    a, b = ctx.tensor("f16", (2, 4), "a"), ctx.tensor("f16", (2, 4), "b")
    out = ctx.add_cast(a, b, "f32")  # an F32 result only from F16 + F32
    with pytest.raises(gg.GraphError, match=r"makes a F16 result from F16 \+ F16 \(or F32 when b is F32\), not F32"):
        _run_cpu(ctx, gg.Graph(ctx).build_forward_expand(out), {})


def test_rope_checks_its_types_and_its_rows():
    # ROPE had _rope and then _rope or _rope_rows: both run, _rope first
    ctx = gg.Context()
    x, pos = ctx.tensor("bf16", (3, 2, 8), "x"), ctx.tensor("i32", (3,), "pos")
    out = ctx.rope_ext(x, pos, n_dims=8)
    with pytest.raises(gg.GraphError, match="takes F32/F16 input with contiguous rows"):
        _run_cpu(ctx, gg.Graph(ctx).build_forward_expand(out), {})
    ctx = gg.Context()
    x, pos = ctx.tensor("f32", (3, 2, 7), "x"), ctx.tensor("i32", (3,), "pos")
    out = ctx.rope_ext(x, pos, n_dims=4)
    with pytest.raises(gg.GraphError, match="needs an even row length"):
        _run_cpu(ctx, gg.Graph(ctx).build_forward_expand(out), {})


def test_a_new_backend_that_reuses_a_freed_ones_id_gets_its_own_check(monkeypatch):
    """The structural check was kept per id(backend): a backend made after another was freed can get its
    id and then found the freed one's entry, and skipped the check of the graph for itself."""
    calls = []
    structure = preflight.cpu.structure
    monkeypatch.setattr(preflight.cpu, "structure", lambda ns: (calls.append(1), structure(ns)))
    ctx = gg.Context()
    a = ctx.tensor("f32", (4,), "a")
    graph = gg.Graph(ctx).build_forward_expand(ctx.exp(a))
    backend = gg.cpu_backend(1)
    backend.alloc_tensors(ctx)
    a.set(np.zeros(4, np.float32))
    backend.compute(graph)
    backend.compute(graph)
    assert len(calls) == 1  # once per compute path
    old = id(backend)
    del backend
    gc.collect()
    keep = []  # backends that did not reuse the id stay alive, so the next one cannot take theirs
    for _ in range(200):
        backend = gg.cpu_backend(1)
        if id(backend) == old:
            break
        keep.append(backend)
    else:
        pytest.skip("no new backend reused the freed one's id")
    backend.compute(graph)
    assert len(calls) == 2  # checked for the new backend, not taken from the freed one's entry
    assert len(graph.state.paths) == 1  # the freed backend's entry went with it


def test_graph_state_is_the_graphs_own():
    ctx = gg.Context()
    a = ctx.tensor("f32", (4,), "a", input=True)
    out = ctx.exp(a)
    graph = gg.Graph(ctx).build_forward_expand(out)
    gg.Runner("cpu").run(graph, {a: np.zeros(4)}, out)
    other = gg.Graph(ctx).build_forward_expand(out)
    assert graph.state.allocation is not None and other.state.allocation is None
    assert graph.state is not other.state


# --- rules no other test reached --------------------------------------------------------------------
def _computed_on_cpu(build):
    ctx = gg.Context()
    out = build(ctx)
    _run_cpu(ctx, gg.Graph(ctx).build_forward_expand(out), {})


def test_concat_of_quantized_inputs_needs_packed_rows():
    def build(c):
        a = c.transpose(c.tensor("q8_0", (64, 64)))  # rows of two blocks: a transposed row is not packed
        return c.concat(a, c.transpose(c.tensor("q8_0", (64, 64))), 0)

    with pytest.raises(gg.GraphError, match="Q8_0 inputs need contiguous rows"):
        _computed_on_cpu(build)


@pytest.mark.parametrize(
    "op,make,other,match",
    [
        ("fill", lambda c, a: c.fill(a, 1.0), "i32", "takes F16/F32 input"),
        ("tri", lambda c, a: c.tri(a), "f16", "takes F32 input"),
        ("win_unpart", lambda c, a: c.win_unpart(a, 4, 4, 2), "f16", "takes F32 input"),
    ],
)
def test_rules_ggml_also_asserts_at_build_hold_for_graphs_changed_through_the_raw_layer(op, make, other, match):
    # ggml.c refuses these types when the node is built; the raw layer can still point a built node at
    # another source, and the CPU kernel would then assert on a worker thread
    shape = (4, 2, 2, 8) if op == "win_unpart" else (4, 4)

    def build(c):
        out = make(c, c.tensor("f32", shape))
        out.ptr.src[0] = c.tensor(other, shape).ptr
        return out

    with pytest.raises(gg.GraphError, match=match):
        _computed_on_cpu(build)


@pytest.mark.parametrize("op", ["conv_transpose_1d", "conv_transpose_2d_p0"])
def test_transposed_convolutions_take_f32_or_f16_kernels_and_f32_data(op):
    k1, x1 = ((2, 3, 3), (2, 8)) if op == "conv_transpose_1d" else ((2, 3, 3, 3), (1, 2, 5, 5))
    with pytest.raises(gg.GraphError, match="takes F32/F16 src0, got BF16"):
        _computed_on_cpu(lambda c: getattr(c, op)(c.tensor("bf16", k1), c.tensor("f32", x1), 1))
    with pytest.raises(gg.GraphError, match="takes F32 src1, got F16"):
        _computed_on_cpu(lambda c: getattr(c, op)(c.tensor("f32", k1), c.tensor("f16", x1), 1))


def test_a_graph_of_leafs_only_is_refused():
    ctx = gg.Context()
    a = ctx.tensor("f32", (4,), "a", input=True)
    graph = gg.Graph(ctx).build_forward_expand(a)
    with pytest.raises(gg.GraphError, match="no nodes to compute"):
        gg.Gallocr(gg.cpu_backend(1).buffer_type).alloc_graph(graph)


def test_a_leaf_without_memory_that_is_not_an_input_is_refused():
    ctx = gg.Context()
    w = ctx.tensor("f32", (4,), "w")
    graph = gg.Graph(ctx).build_forward_expand(ctx.exp(w))
    with pytest.raises(gg.GraphError, match="leaf w has no memory and is not an input"):
        gg.Runner("cpu").allocate(graph)


def test_a_runner_names_the_ops_its_device_does_not_support():
    class Device:  # a device that supports nothing
        def unsupported(self, graph):
            return graph.nodes

    ctx = gg.Context()
    a = ctx.tensor("f32", (4,), "a", input=True)
    graph = gg.Graph(ctx).build_forward_expand(ctx.exp(a))
    with pytest.raises(gg.Unsupported, match="^UNARY$"):
        preflight.check_device_supports(graph, Device())


def test_backend_compute_refuses_nodes_its_backend_does_not_support():
    # the CPU's supports_op takes b of a mul_mat as F32 or a's vec_dot_type (Q8_0 for Q8_0): not F16
    with pytest.raises(gg.Unsupported, match="CPU does not support 1 node\\(s\\): MUL_MAT"):
        _computed_on_cpu(lambda c: c.mul_mat(c.tensor("q8_0", (4, 32)), c.tensor("f16", (2, 32))))


def test_an_unallocated_graph_is_refused():
    ctx = gg.Context()
    a = ctx.tensor("f32", (4,), "a")
    graph = gg.Graph(ctx).build_forward_expand(ctx.exp(a))
    with pytest.raises(gg.GraphError, match="a tensor it uses has no memory; allocate the graph first"):
        gg.cpu_backend(1).compute(graph)


def test_an_empty_node_is_refused():
    # the op wrappers refuse empty extents; a node changed through the raw layer is caught at compute
    def build(c):
        out = c.exp(c.tensor("f32", (4,)))
        out.ptr.ne[0] = 0
        return out

    with pytest.raises(gg.GraphError, match="has no elements"):
        _computed_on_cpu(build)


def test_xielu_of_a_permuted_input_is_refused_before_the_cpu_aborts():
    """permute(0, 3, 1, 2) keeps rows packed but not dims 2-3 after dim 1: the CPU's xielu kernel asserted
    ggml_is_contiguous_1 and killed the process (found by `python -m pyggml fuzz --seed 1`, call 2246)."""
    ctx = gg.Context()
    a = ctx.tensor("f32", (7, 7, 2, 1), "a", input=True)
    out = ctx.xielu(ctx.permute(a, 0, 3, 1, 2), -1.087, -0.324, 1.172, 1e-45)
    graph = gg.Graph(ctx).build_forward_expand(out)
    with pytest.raises(gg.GraphError, match="xielu kernel needs an input contiguous above its rows"):
        gg.Runner("cpu").run(graph, {a: np.zeros((7, 7, 2, 1), np.float32)}, out)
    ok = ctx.xielu(ctx.cont(ctx.permute(a, 0, 3, 1, 2)), -1.087, -0.324, 1.172, 1e-45)  # as the message says
    graph = gg.Graph(ctx).build_forward_expand(ok)
    assert gg.Runner("cpu").run(graph, {a: np.zeros((7, 7, 2, 1), np.float32)}, ok).shape == ok.shape


@pytest.mark.parametrize("op", ["pool_1d", "pool_2d"])
def test_pool_of_a_permuted_input_is_refused_before_it_writes_past_its_result(op):
    """permute(0, 2, 1, 3) of a [5, 1, 5] tensor is contiguous for ggml (the stride of a dim of extent 1 is free)
    but its nb[2] is a row, not a plane: ggml-cpu's pool_2d walked planes of nb[2] up to ggml_nbytes and wrote 5
    planes into a result of 1, corrupting the heap (found by `rpc-fuzz --graphs` against the RPC server,
    docs/findings.md 36); pool_1d reads rows of nb[1] the same way."""
    ctx = gg.Context()
    a = ctx.tensor("f32", (5, 1, 5), "a", input=True)  # NumPy order: ne = [5, 1, 5]
    v = ctx.permute(a, 0, 2, 1, 3)  # ne [5, 5, 1, 1], nb (4, 20, 20, 100)
    assert v.is_contiguous()
    pool = (
        (lambda x: ctx.pool_2d(x, 1, 3, 3, 1, 1, 0, 0)) if op == "pool_2d" else (lambda x: ctx.pool_1d(x, 1, 2, 2, 0))
    )
    out = pool(v)
    graph = gg.Graph(ctx).build_forward_expand(out)
    values = np.arange(25, dtype=np.float32).reshape(5, 1, 5)
    with pytest.raises(gg.GraphError, match="contiguous"):
        gg.Runner("cpu").run(graph, {a: values}, out)
    ok = pool(ctx.cont(v))  # as the message says
    graph = gg.Graph(ctx).build_forward_expand(ok)
    [r] = gg.Runner("cpu").run(graph, {a: values}, [ok])
    x = values.reshape(5, 5)  # the permuted view's values: [1, 1, 5, 5] in NumPy order
    expect = O.pool_2d(x, 1, 3, 3, 1, 1, 0, 0) if op == "pool_2d" else O.pool_1d(x, 1, 2, 2, 0)
    np.testing.assert_allclose(r.reshape(expect.shape), expect, rtol=1e-6)
