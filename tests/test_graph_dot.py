"""Graph.to_dot: every node and leaf with its op, name, shapes and type, an edge from every source, names
escaped whatever they hold, and, given the runner or scheduler that computed the graph, the backend of each
node (a graph split between the CPU and vulkan0 by a scheduler; a meta device's splits). The DOT text is
parsed here with regexes; where Graphviz's `dot` is installed it must also accept it."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import pyggml as gg
from pyggml.graph_dot import have_dot, placements, quote, render, write_dot
from pyggml.meta import Split
from pyggml.testing.check import available_backends

_STR = r'"((?:[^"\\]|\\.)*)"'
_NODE = re.compile(r"^\s*([nl]\d+) \[label=" + _STR + r"(.*)\];$")
_EDGE = re.compile(r"^\s*([nl]\d+) -> ([nl]\d+)(?: \[(.*)\])?;$")

needs_vulkan = pytest.mark.skipif("vulkan0" not in available_backends(), reason="no vulkan0 device in this build")


def unescape(s: str) -> str:
    """A DOT quoted string's body as Graphviz shows it in a label: \\" is ", \\\\ is \\ (the lines joined
    with \\n are split by the caller)."""
    out, i = [], 0
    while i < len(s):
        if s[i] == "\\" and i + 1 < len(s) and s[i + 1] in '"\\':
            out.append(s[i + 1])
            i += 2
        else:
            out.append(s[i])
            i += 1
    return "".join(out)


def label_lines(raw: str) -> list[str]:
    """The lines of a label: split at DOT's \\n escapes (a backslash-n that is not an escaped backslash)."""
    lines: list[str] = []
    cur: list[str] = []
    i = 0
    while i < len(raw):
        if raw[i] == "\\" and i + 1 < len(raw):
            if raw[i + 1] == "n":
                lines.append(unescape("".join(cur)))
                cur = []
            else:
                cur.append(raw[i : i + 2])
            i += 2
        else:
            cur.append(raw[i])
            i += 1
    lines.append(unescape("".join(cur)))
    return lines


def parse(dot: str) -> tuple[dict[str, tuple[list[str], str]], list[tuple[str, str, str]]]:
    """{id: (label lines, other attributes)} of the tensors (legend boxes left out) and [(from, to, attrs)]."""
    assert dot.startswith("digraph ggml {\n") and dot.endswith("}\n")
    nodes: dict[str, tuple[list[str], str]] = {}
    edges: list[tuple[str, str, str]] = []
    for line in dot.splitlines()[1:-1]:
        if m := _NODE.match(line):
            assert m.group(1) not in nodes, f"{m.group(1)} twice"
            nodes[m.group(1)] = (label_lines(m.group(2)), m.group(3))
        elif m := _EDGE.match(line):
            edges.append((m.group(1), m.group(2), m.group(3) or ""))
    return nodes, edges


def small_graph(name_of=lambda s: s):
    """x (input) and w (a weight of its own) -> mul_mat -> add b -> permute -> cont -> soft_max (output)."""
    wctx = gg.Context()
    w = wctx.tensor("f32", (8, 3), name_of("w"))
    ctx = gg.Context()
    x = ctx.tensor("f32", (2, 3), name_of("x"), input=True)
    b = ctx.tensor("f32", (2, 8), name_of("b"), input=True)
    h = ctx.add(ctx.mul_mat(w, x).set_name(name_of("h")), b).set_name(name_of("hb"))
    p = ctx.permute(ctx.reshape_3d(h, 4, 2, 2), 1, 0, 2, 3).set_name(name_of("p"))
    y = ctx.soft_max(ctx.cont(p)).set_name(name_of("y"))
    y.set_output()
    return wctx, w, ctx, x, b, y, gg.Graph(ctx).build_forward_expand(y)


def inputs_of(x, b):
    rng = np.random.default_rng(0)
    return {x: rng.standard_normal((2, 3)).astype(np.float32), b: rng.standard_normal((2, 8)).astype(np.float32)}


def test_every_node_leaf_and_edge_is_in_the_dot() -> None:
    wctx, w, ctx, x, b, y, graph = small_graph()
    gg.cpu_backend().alloc_tensors(wctx)
    dot = graph.to_dot()
    nodes, edges = parse(dot)
    for i, n in enumerate(graph.nodes):
        lines, attrs = nodes[f"n{i}"]
        op = gg.ffi.string(gg.lib.ggml_op_desc(n.ptr)).decode()
        assert lines[0] == f"{op}  #{i}"
        assert lines[1] == (n.name or "(unnamed)")
        assert lines[2] == f"shape {n.shape}  ne [{', '.join(map(str, n.ne))}]  {n.type.name.lower()}"
        if n.op.name in ("VIEW", "RESHAPE", "PERMUTE", "TRANSPOSE"):
            assert 'dashed"' in attrs and any(ln.startswith("view of ") for ln in lines)
    leaves = {lines[1]: (k, attrs) for k, (lines, attrs) in nodes.items() if k.startswith("l")}
    assert set(leaves) == {"w", "x", "b"}
    assert "shape=invhouse" in leaves["x"][1] and "shape=invhouse" in leaves["b"][1]  # inputs
    assert "shape=cylinder" in leaves["w"][1]  # a weight in memory of its own
    assert "peripheries=2" in nodes[f"n{graph.n_nodes - 1}"][1]  # the output
    order = graph.nodes

    def id_of(t: gg.Tensor) -> str:
        return f"n{order.index(t)}" if t in order else leaves[t.name][0]

    want = {(id_of(s), f"n{i}") for i, n in enumerate(order) for s in n.src}
    assert {(a, z) for a, z, _ in edges} == want
    permute = next(i for i, n in enumerate(graph.nodes) if n.op.name == "PERMUTE")
    assert "permute axes (1, 0, 2, 3)" in nodes[f"n{permute}"][0]
    if have_dot():
        assert render(dot, "svg").startswith(b"<?xml")


ODD_NAMES = [
    'q"uote',
    "back\\slash",
    "ends with \\",
    "new\nline",
    "tab\there",
    "{rec|ord}<x>",
    '"]; n0 -> n1; evil [label="',
    "\\n not a break",
    "ünïcødé ✓",
    "\x01\x7f ctl",
    "",
]


@pytest.mark.parametrize("odd", ODD_NAMES, ids=range(len(ODD_NAMES)))
def test_odd_names_are_escaped(odd: str) -> None:
    names = {}

    def name_of(s: str) -> str:
        names[s] = f"{odd}{s}" if odd else ""
        return names[s]

    wctx, w, ctx, x, b, y, graph = small_graph(name_of)
    dot = graph.to_dot(title=odd or None)
    nodes, edges = parse(dot)
    assert len(nodes) == graph.n_nodes + 3
    assert len(edges) == sum(len(n.src) for n in graph.nodes)
    shown = {lines[1] for lines, _ in nodes.values()}
    for s, name in names.items():
        want = name.replace("\n", "\\x0a").replace("\t", "\\x09").replace("\x01", "\\x01").replace("\x7f", "\\x7f")
        assert want in shown or not want, (s, name)  # ggml names the unnamed node_N, leaf_N
    if have_dot():
        render(dot, "svg")  # dot accepts it
    if any(c in odd for c in '"\\|{}<>\n'):
        with pytest.raises(ValueError, match="unescaped"):
            graph.to_dot(native=True)


def test_fuzzed_names_round_trip_through_quote() -> None:
    rng = np.random.default_rng(7)
    alphabet = list('"\\|{}<>[];=-> \n\r\t\x00\x01\x1f\x7f') + list("abcXYZ019_.") + ["é", "✓", "\u2028"]
    for _ in range(500):
        s = "".join(rng.choice(alphabet, size=int(rng.integers(0, 40))))
        q = quote(s)
        assert q.startswith('"') and q.endswith('"')
        body = q[1:-1]
        assert re.fullmatch(r'(?:[^"\\]|\\.)*', body), repr(s)  # one DOT string, no early end
        assert "\n" not in body and "\x00" not in body
        shown = unescape(body)
        assert shown == "".join(f"\\x{ord(c):02x}" if ord(c) < 0x20 or ord(c) == 0x7F else c for c in s)
    with pytest.raises(TypeError):
        quote(3)  # type: ignore[arg-type]


def test_names_set_through_ggml_with_any_bytes_give_valid_dot() -> None:
    rng = np.random.default_rng(11)
    ctx = gg.Context()
    x = ctx.tensor("f32", (4,), "x", input=True)
    t = x
    for _ in range(30):
        t = ctx.scale(t, 2.0)
        raw = bytes(int(v) for v in rng.integers(1, 256, size=int(rng.integers(1, 63))))
        gg.lib.ggml_set_name(t.ptr, raw)  # not UTF-8 at all, as a C caller may leave it
    graph = gg.Graph(ctx).build_forward_expand(t)
    nodes, edges = parse(graph.to_dot())
    assert len(nodes) == 31 and len(edges) == 30
    if have_dot():
        render(graph.to_dot(), "svg")


def test_path_and_write_dot_write_the_same_text(tmp_path: Path) -> None:
    *_, graph = small_graph()
    text = graph.to_dot(tmp_path / "a.dot")
    assert (tmp_path / "a.dot").read_text(encoding="utf-8") == text
    assert write_dot(graph, str(tmp_path / "b.dot")) == text
    assert (tmp_path / "b.dot").read_text(encoding="utf-8") == text


def test_native_is_ggmls_own_dump() -> None:
    *_, graph = small_graph()
    text = graph.to_dot(native=True)
    assert text.startswith("digraph G {") and "CONST" in text and "soft_max" in text
    with pytest.raises(ValueError, match="native"):
        graph.to_dot(native=True, placement={"y": "cpu"})


def test_a_backward_graph_shows_its_parameters() -> None:
    ctx = gg.Context()
    w = ctx.tensor("f32", (4,), "w")
    gg.lib.ggml_set_param(w.ptr)
    loss = ctx.sum(ctx.sqr(w)).set_name("loss")
    gg.lib.ggml_set_loss(loss.ptr)
    graph = gg.Graph.with_grads(ctx).build_forward_expand(loss)
    graph.build_backward_expand()
    nodes, edges = parse(graph.to_dot())
    (param,) = [(lines, attrs) for lines, attrs in nodes.values() if lines[1] == "w"]
    assert param[0][0].startswith("param  ") and "shape=octagon" in param[1] and "flags: param" in param[0]
    assert len(edges) == sum(len(n.src) for n in graph.nodes)
    assert "fillcolor = yellow" in graph.to_dot(native=True)  # ggml's own colors parameters yellow


def test_bad_arguments_raise() -> None:
    *_, graph = small_graph()
    with pytest.raises(TypeError, match="placement"):
        graph.to_dot(placement=3)
    with pytest.raises(TypeError, match="path"):
        graph.to_dot(3)
    with pytest.raises(TypeError, match="profile"):
        graph.to_dot(profile="fast")
    with pytest.raises(ValueError, match="does not have"):
        graph.to_dot(placement={"nope": "cpu"})
    with pytest.raises(TypeError, match="labels"):
        graph.to_dot(placement={"y": 1})
    runner = gg.Runner("cpu")
    with pytest.raises(ValueError, match="allocate it first"):
        graph.to_dot(placement=runner)
    with pytest.raises(ValueError, match="dot failed"):
        if not have_dot():
            raise ValueError("dot failed (not installed)")
        render("digraph {", "svg")


def test_a_mapping_places_nodes_by_name_or_tensor() -> None:
    wctx, w, ctx, x, b, y, graph = small_graph()
    nodes, _ = parse(graph.to_dot(placement={"y": "gpu", x: "host"}))
    by_name = {lines[1]: lines for lines, _ in nodes.values()}
    assert "on gpu" in by_name["y"] and "on host" in by_name["x"] and not any("on " in ln for ln in by_name["hb"])


@pytest.mark.device  # lavapipe's pipelines: under the device budget (tests/conftest.py)
@needs_vulkan
def test_backend_labels_of_a_graph_split_between_cpu_and_vulkan0() -> None:
    wctx, w, ctx, x, b, y, graph = small_graph()
    runner = gg.Runner("vulkan0")
    runner.backend.alloc_tensors(wctx)
    w.set(np.arange(24, dtype=np.float32).reshape(8, 3) / 24)
    hb = graph.get_tensor("hb")
    assert hb is not None
    runner.sched.set_tensor_backend(hb, runner.backends[1])  # the add on the CPU, the rest on vulkan0
    runner.run(graph, inputs_of(x, b), y)
    assert runner.sched.n_splits >= 2
    dot = graph.to_dot(placement=runner)
    nodes, edges = parse(dot)
    seen = set()
    for i, n in enumerate(graph.nodes):
        want = runner.sched.tensor_backend(n)
        assert want is not None
        assert f"on {want}" in nodes[f"n{i}"][0], (n.name, want)
        seen.add(want)
    assert seen == {"CPU", "Vulkan0"}
    assert nodes[f"n{graph.nodes.index(hb)}"][0][-1] == "on CPU"
    assert nodes[f"n{graph.nodes.index(y)}"][0][-1] == "on Vulkan0"
    fills = {lines[-1]: re.search(r'fillcolor="([^"]+)"', attrs).group(1) for lines, attrs in nodes.values()}  # type: ignore[union-attr]
    assert fills["on CPU"] != fills["on Vulkan0"]
    # the edges are the graph's as built (the scheduler rewired hb's sources to its copies), and those that
    # cross backends are marked
    assert len(edges) == sum(len(n.src) for n in graph.nodes)
    on = {k: next((ln[3:] for ln in lines if ln.startswith("on ")), None) for k, (lines, _) in nodes.items()}
    assert on["l0"] == "Vulkan0" and {on["l1"], on["l2"]} == {"CPU"}  # w in its vulkan0 buffer; inputs on the host
    for a, z, attrs in edges:
        assert ("penwidth=2" in attrs) == (on[a] != on[z]), (a, z, on[a], on[z])
    assert sum("penwidth=2" in attrs for *_, attrs in edges) >= 3  # x to the product, it to hb, hb's view to cont
    assert 'legend0 [label="Vulkan0"' in dot and 'legend1 [label="CPU"' in dot
    if have_dot():
        render(dot, "png")
    assert graph.to_dot(placement=runner.sched) == dot  # the scheduler itself says the same
    # computing again, as allocated, after drawing: the drawing changed nothing (it read the sources as
    # built without putting them back into the graph the scheduler rewired)
    first = y.numpy()
    runner.compute(graph)
    assert np.array_equal(y.numpy(), first)


def test_a_meta_runner_shows_each_nodes_split() -> None:
    """A two-layer MLP split as in tensor parallelism: w1 by rows, w2 by columns, so the hidden layer is split
    and the output a partial sum on each device."""
    runner = gg.Runner("meta:cpu,cpu")
    runner.set_policy(
        [
            ("w1", lambda t: Split.even(1, t.ne[1], runner.n_devices)),
            ("w2", lambda t: Split.even(0, t.ne[0], runner.n_devices)),
        ]
    )
    wctx = gg.Context()
    w1 = wctx.tensor("f32", (8, 3), "w1")
    w2 = wctx.tensor("f32", (3, 8), "w2")
    runner.backend.alloc_tensors(wctx)
    w1.set(np.ones((8, 3), np.float32) / 8)
    w2.set(np.ones((3, 8), np.float32) / 8)
    ctx = gg.Context()
    x = ctx.tensor("f32", (2, 3), "x", input=True)
    h = ctx.mul_mat(w1, x).set_name("h")
    g = ctx.gelu(h).set_name("g")
    z = ctx.mul_mat(w2, g).set_name("z")
    y = ctx.gelu(z).set_name("y")  # the partial sums reduced first (reading z itself aborts in ggml)
    graph = gg.Graph(ctx).build_forward_expand(y)
    runner.run(graph, {x: np.ones((2, 3), np.float32)}, y)
    nodes, _ = parse(graph.to_dot(placement=runner))
    by_name = {lines[1]: lines for lines, _ in nodes.values()}
    assert "split ne[1]: 4|4" in by_name["w1"] and "split ne[0]: 4|4" in by_name["w2"]  # the policy's
    assert "split ne[0]: 4|4" in by_name["h"] and "split ne[0]: 4|4" in by_name["g"]  # ggml's derivation
    assert "mirrored" in by_name["z"]  # ggml reports the state after the reduction (assume_sync)
    assert f"on {runner.backend.name}" in by_name["z"] and "on CPU" in by_name["x"]
    facts = {p.name: p for p in placements(graph, runner)}
    assert facts["z"].split == "mirrored" and facts["z"].node == 2 and facts["x"].node is None
    # a MetaDevice alone: the splits, every node on it
    nodes2, _ = parse(graph.to_dot(placement=runner.meta))
    assert "split ne[0]: 4|4" in {lines[1]: lines for lines, _ in nodes2.values()}["h"]


def test_without_graphviz_graph_draw_colors_the_nodes_by_backend() -> None:
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    from pyggml.graph_draw import backends_of, draw, graph_nodes

    wctx, w, ctx, x, b, y, graph = small_graph()
    runner = gg.Runner("cpu")
    runner.backend.alloc_tensors(wctx)
    w.set(np.ones((8, 3), np.float32))
    runner.run(graph, inputs_of(x, b), y)
    nodes = graph_nodes(graph)
    assert [n.name for n in nodes] == [t.name for t in graph.nodes]
    assert [n.kind for n in nodes][:2] == ["MUL_MAT", "ADD"]
    assert nodes[1].src == (nodes[0].id,)  # hb reads h (and the leaf b, left out)
    groups = backends_of(graph, runner)
    assert set(groups.values()) == {"CPU"} and len(groups) == graph.n_nodes
    ax = draw(nodes, groups=groups, title="by backend")
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["CPU"]
    with pytest.raises(TypeError):
        graph_nodes(ctx)
