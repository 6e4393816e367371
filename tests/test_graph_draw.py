"""Drawing part of a graph: the recorder sees every node ggml computes with its sources, `select` keeps some and
joins them through the rest, `draw` lays them out by depth with matplotlib."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import pyggml as gg
from pyggml.graph_draw import GraphRecorder, depths, draw, select


def _recorded() -> list:
    ctx = gg.Context()
    x = ctx.tensor("f32", (3, 4), "x-0", input=True)
    a = ctx.add(x, x).set_name("a-0")
    b = ctx.exp(a)  # unnamed: left out below, the edge a-0 -> c-0 goes through it
    c = ctx.mul(b, a).set_name("c-0")
    d = ctx.sum(c).set_name("d-1")
    graph = gg.Graph(ctx).build_forward_expand(d)
    runner = gg.Runner("cpu")
    rec = GraphRecorder()
    runner.sched.observe(rec)
    out = runner.run(graph, {x: np.ones((3, 4), np.float32)}, d)
    runner.sched.observe(None)
    assert float(out.ravel()[0]) == pytest.approx(12 * np.exp(2.0) * 2.0)  # the recorder changed nothing
    return rec.nodes


def test_the_recorder_sees_every_node_with_its_sources_in_compute_order() -> None:
    nodes = _recorded()
    assert [n.kind for n in nodes] == ["ADD", "EXP", "MUL", "SUM"]
    assert [n.index for n in nodes] == [0, 1, 2, 3]
    add, exp, mul, total = nodes
    assert exp.src == (add.id,) and mul.src == (exp.id, add.id) and total.src == (mul.id,)
    assert len(add.src) == 2 and add.id not in add.src  # x twice: a leaf, not a recorded node


def test_select_joins_the_kept_nodes_through_those_left_out() -> None:
    nodes = select(_recorded(), lambda n: n.name.endswith("-0"))
    assert [n.name for n in nodes] == ["a-0", "c-0"]
    a, c = nodes
    assert a.src == () and c.src == (a.id,)  # x-0 is a leaf (never computed), d-1 is not kept
    assert c.through == frozenset()  # c reads a-0 directly too: the direct edge wins
    only_mul = select(_recorded(), lambda n: n.kind in ("ADD", "SUM"))
    add, total = only_mul
    assert total.src == (add.id,) and total.through == {add.id}  # SUM <- MUL <- EXP <- ADD, all left out
    assert depths(only_mul) == {add.id: 0, total.id: 1}


def test_draw_puts_a_box_per_node_and_an_arrow_per_edge(tmp_path: Path) -> None:
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    nodes = select(_recorded(), lambda n: n.kind != "EXP")
    ax = draw(nodes, title="four nodes")
    texts = [t.get_text() for t in ax.texts]
    assert texts == ["ADD\na-0", "MUL\nc-0", "SUM\nd-1"]
    arrows = [p for p in ax.patches if type(p).__name__ == "FancyArrowPatch"]
    assert len(arrows) == 2 and {a.get_linestyle() for a in arrows} == {"-"}  # MUL reads ADD directly too
    ys = {t.get_text(): t.get_position()[1] for t in ax.texts}
    assert ys["ADD\na-0"] > ys["MUL\nc-0"] > ys["SUM\nd-1"]  # rows by depth, sources above
    dashed = draw(select(_recorded(), lambda n: n.kind in ("ADD", "SUM")))
    [arrow] = dashed.patches
    assert arrow.get_linestyle() == "--"  # through the nodes left out
    ax.figure.savefig(tmp_path / "g.png")
    assert (tmp_path / "g.png").stat().st_size > 1000


def test_one_layer_of_llama_cpps_qwen35_graph(tmp_path: Path) -> None:
    """What the notebook draws: the nodes llama.cpp names NAME-0 (its layer 0), joined through the rest."""
    llama = pytest.importorskip("pyggml.llama", reason="pyggml built without libllama")
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    from pyggml.models.make_model import make_model

    make_model("qwen35", tmp_path / "q.gguf")
    model = llama.Model.load(str(tmp_path / "q.gguf"), n_gpu_layers=0, devices=[])
    rec = GraphRecorder()
    llama.Context(model, n_ctx=32, n_batch=6, observe=rec).decode([1, 2, 3, 4, 5, 6])
    layer = select(rec.nodes, lambda n: n.name.endswith("-0"))
    names = {n.name for n in layer}
    assert {"attn_norm-0", "ffn_up-0", "ffn_out-0", "l_out-0", "conv_output_raw-0"} <= names
    assert not any(n.name.endswith("-1") for n in layer) and len(layer) < len(rec.nodes) / 2
    ids = {n.id for n in layer}
    assert all(s in ids for n in layer for s in n.src)
    out = next(n for n in layer if n.name == "l_out-0")
    assert depths(layer)[out.id] == max(depths(layer).values()) >= 10  # the layer's output is its deepest node
    ax = draw(layer)
    assert len(ax.texts) == len(layer)
