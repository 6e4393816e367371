"""Runner.profile: every node timed once per repeat with its op, shape and backend, on the CPU, vulkan0, a
meta device (node by node, as on one device) and an RPC server's device; the times hang together (each repeat's
node times fit inside that repeat's compute, and their sum is within a broad factor of a plain compute:
never a claim about absolute speed); bad arguments raise clear errors."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import pyggml as gg
from pyggml.errors import GraphError
from pyggml.meta import Split
from pyggml.profile import Profile
from pyggml.testing.check import available_backends

N = 96  # large enough that compute, not the callback, takes most of a node's time on one CPU thread


def build(wctx: gg.Context | None = None):
    """x (input) @ w -> add -> gelu -> mul_mat again -> soft_max, with a view in between."""
    ctx = gg.Context()
    if wctx is None:
        wctx = ctx
    w = wctx.tensor("f32", (N, N), "w") if wctx is not ctx else ctx.tensor("f32", (N, N), "w", input=True)
    x = ctx.tensor("f32", (N, N), "x", input=True)
    h = ctx.mul_mat(w, x).set_name("h")
    g = ctx.gelu(ctx.add(h, x).set_name("hx")).set_name("g")
    t = ctx.transpose(g).set_name("gt")
    z = ctx.mul_mat(ctx.cont(t).set_name("gc"), g).set_name("z")
    y = ctx.soft_max(z).set_name("y")
    return ctx, w, x, y, gg.Graph(ctx).build_forward_expand(y)


def values(shape=(N, N), seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32) / 4


def check_rows(prof: Profile, graph: gg.Graph, repeats: int) -> None:
    """Every node covered by exactly one row, with its op, name and shape; times per repeat."""
    covered = sorted(i for r in prof.rows for i in r.indices)
    assert covered == list(range(graph.n_nodes))
    assert prof.n_nodes == graph.n_nodes and prof.repeats == repeats
    for r in prof.rows:
        assert r.repeats == repeats and len(r.times_us) == repeats
        assert all(t >= 0 for t in r.times_us)
        assert r.index == r.indices[-1] and len(r.names) == len(r.indices)
        nodes = [graph.node(i) for i in r.indices]
        ops = list(dict.fromkeys(gg.ffi.string(gg.lib.ggml_op_desc(n.ptr)).decode() for n in nodes))
        assert r.op == ", ".join(ops)
        assert r.names == tuple(n.name for n in nodes)
        assert r.shape == nodes[-1].shape and r.ne == nodes[-1].ne
        assert r.type == nodes[-1].type.name.lower()
    # a node's time lies inside its compute, and nodes do not overlap: each repeat's sum fits in its compute
    for k in range(repeats):
        assert sum(r.times_us[k] for r in prof.rows) <= prof.wall_us[k] * 1.001 + 1.0
    # the sum of the nodes against a plain compute of the same graph (its fastest repeat: a loaded machine
    # stretches some computes many times over): within a broad factor
    plain = min(prof.plain_us)
    assert prof.total_us > 0 and plain > 0
    assert 1 / 50 < prof.total_us / plain < 50, prof.table()
    assert prof.overhead > 0


@pytest.mark.parametrize("name", ["cpu", "vulkan0"])
def test_every_node_is_timed_with_its_op_and_backend(name: str) -> None:
    if name not in available_backends():
        pytest.skip(f"no {name} in this build")
    ctx, w, x, y, graph = build()
    runner = gg.Runner(name, n_threads=1)  # one CPU thread: no thread start-up in either time
    prof = runner.profile(graph, {w: values(), x: values(seed=1)}, repeats=3, warmup=1)
    check_rows(prof, graph, 3)
    assert not any(r.together for r in prof.rows)  # one row per node
    want = "CPU" if name == "cpu" else "Vulkan0"
    assert {r.backend for r in prof.rows} == {want}
    assert prof.row_of("z").op == "MUL_MAT" and prof.row_of(y).name == "y" and prof.row_of(0).index == 0
    assert prof.runner == name
    # the profile changed nothing: the graph computes as before, with its result
    out = runner.run(graph, {w: values(), x: values(seed=1)}, y)
    assert np.allclose(out.sum(axis=-1), 1.0, atol=1e-4)
    text = prof.table(top=3)
    assert len(text.splitlines()) == 2 + 3 + 1 and "overhead x" in text
    full = prof.table(sort="order").splitlines()
    assert [ln.split()[0] for ln in full[2:-1]] == [str(r.index) for r in prof.rows]


def test_a_meta_device_is_timed_by_split(meta_backend_name: str) -> None:
    """A two-layer MLP split for tensor parallelism (w1 by rows, w2 by columns): the meta device computes
    its split node by node for the callback (ggml patch 0032; before it, the split whole: one row), so each
    node is its own row, the reduced product timed with its reduction."""
    runner = gg.Runner(meta_backend_name)
    runner.set_policy(
        [
            ("w1", lambda t: Split.even(1, t.ne[1], runner.n_devices)),
            ("w2", lambda t: Split.even(0, t.ne[0], runner.n_devices)),
        ]
    )
    wctx = gg.Context()
    w1 = wctx.tensor("f32", (2 * N, N), "w1")
    w2 = wctx.tensor("f32", (N, 2 * N), "w2")
    runner.backend.alloc_tensors(wctx)
    w1.set(values((2 * N, N)))
    w2.set(values((N, 2 * N), seed=2))
    ctx = gg.Context()
    x = ctx.tensor("f32", (4, N), "x", input=True)
    g = ctx.gelu(ctx.mul_mat(w1, x).set_name("h")).set_name("g")
    y = ctx.soft_max(ctx.gelu(ctx.mul_mat(w2, g).set_name("z")).set_name("zg")).set_name("y")
    graph = gg.Graph(ctx).build_forward_expand(y)
    # warm-ups: the first computes of a split over two lavapipe devices on a loaded machine took 100+ ms
    # each (pipelines built per device), against 0.5 ms after
    prof = runner.profile(graph, {x: values((4, N), seed=1)}, repeats=2, warmup=3)
    check_rows(prof, graph, 2)
    on_meta = [r for r in prof.rows if r.backend == runner.backend.name]
    assert on_meta, prof.table()
    assert sum(len(r.indices) for r in on_meta) == graph.n_nodes  # a meta runner computes every node there
    assert not any(r.together for r in on_meta)  # one row per node
    assert [r.name for r in on_meta] == ["h", "g", "z", "zg", "y"] and on_meta[2].op == "MUL_MAT"
    assert prof.row_of("z") is on_meta[2] and prof.row_of(graph.node(0)) is on_meta[0]
    assert all(r.time_us > 0 for r in on_meta)
    assert f"{on_meta[2].time_us:.1f} us" in graph.to_dot(placement=runner, profile=prof)


def test_bad_arguments_raise_clear_errors() -> None:
    ctx, w, x, y, graph = build()
    runner = gg.Runner("cpu")
    inputs = {w: values(), x: values(seed=1)}
    with pytest.raises(TypeError, match="expected a Graph"):
        runner.profile("graph", inputs)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="inputs must be a dict"):
        runner.profile(graph, [values()])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="repeats"):
        runner.profile(graph, inputs, repeats=0)
    with pytest.raises(TypeError, match="repeats"):
        runner.profile(graph, inputs, repeats="3")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="warmup"):
        runner.profile(graph, inputs, warmup=-1)
    with pytest.raises(GraphError, match="x"):
        runner.profile(graph, {w: values()})  # x not written
    with pytest.raises(ValueError, match="profile: y is not an input"):
        runner.profile(graph, {**inputs, y: values()})
    prof = runner.profile(graph, inputs, repeats=1, warmup=0)
    with pytest.raises(ValueError, match="sort"):
        prof.table(sort="name")
    with pytest.raises(ValueError, match="top"):
        prof.table(top=0)
    with pytest.raises(KeyError, match="nope"):
        prof.row_of("nope")
    with pytest.raises(KeyError):
        prof.row_of(10_000)
    with pytest.raises(TypeError):
        prof.row_of(1.5)  # type: ignore[arg-type]


def test_an_observer_set_before_is_kept_and_the_picture_shows_the_times() -> None:
    ctx, w, x, y, graph = build()
    runner = gg.Runner("cpu")
    seen: list[str] = []

    def watch(t: gg.Tensor, ask: bool) -> bool:
        if not ask:
            seen.append(t.name)
        return True

    runner.sched.observe(watch)
    prof = runner.profile(graph, {w: values(), x: values(seed=1)}, repeats=2)
    assert seen == []  # not called while profiling
    runner.run(graph, {w: values(), x: values(seed=1)}, y)
    assert seen == [n.name for n in graph.nodes]  # and back afterwards
    runner.sched.observe(None)
    dot = graph.to_dot(placement=runner, profile=prof)
    assert dot.count("\\ntime ") == graph.n_nodes
    assert prof.time_of(y) == f"{prof.row_of(y).time_us:.1f} us" and prof.time_of(x) is None


def test_plot_draws_the_slowest_rows() -> None:
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    ctx, w, x, y, graph = build()
    prof = gg.Runner("cpu").profile(graph, {w: values(), x: values(seed=1)}, repeats=2)
    ax = prof.plot(top=4)
    assert len(ax.patches) == 4
    labels = [t.get_text() for t in ax.get_yticklabels()]
    slowest = sorted(prof.rows, key=lambda r: -r.time_us)[0]
    assert labels[-1].startswith(slowest.name)  # slowest on top


_RPC_CHILD = """
import json
import numpy as np
import pyggml as gg
from pyggml import rpc

with rpc.Server(threads=1) as server:
    [dev] = [d.name.lower() for d in rpc.add_server(server.endpoint)]
    ctx = gg.Context()
    x = ctx.tensor("f32", (64, 64), "x", input=True)
    y = ctx.soft_max(ctx.mul_mat(x, x).set_name("xx")).set_name("y")
    graph = gg.Graph(ctx).build_forward_expand(y)
    prof = gg.Runner(dev).profile(graph, {x: np.eye(64, dtype=np.float32)}, repeats=2)
    print(json.dumps({"dev": dev, "rows": [[r.name, r.op, r.backend, list(r.indices)] for r in prof.rows]}))
"""


def test_an_rpc_device_is_timed_node_by_node() -> None:
    # in a child process: ggml keeps an RPC device registered until the process ends (tests/test_rpc.py)
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_RPC_CHILD)], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert [r[:2] for r in res["rows"]] == [["xx", "MUL_MAT"], ["y", "SOFT_MAX"]]
    assert all(r[2].upper().startswith("RPC") for r in res["rows"])
