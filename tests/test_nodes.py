"""The node checker: ggml's scheduler shows each node to an observer as it computes it, and every node
is checked against its oracle with the values it received."""

from __future__ import annotations

import numpy as np
import pytest

import pyggml as gg
from pyggml.testing.engine import opdb
from pyggml.testing.engine.nodes import NodeChecker, observing


def test_the_observer_sees_every_node_before_and_after_it_is_computed():
    ctx = gg.Context()
    a = ctx.tensor("f32", (3, 4), "a", input=True)
    y = ctx.exp(ctx.add(a, a))
    graph = gg.Graph(ctx).build_forward_expand(y)
    runner = gg.Runner("cpu")
    seen: list[tuple[str, bool, float]] = []

    def watch(t: gg.Tensor, ask: bool) -> bool:
        seen.append((t.op.name, ask, float(t.numpy().ravel()[0]) if not ask else 0.0))
        return True

    runner.sched.observe(watch)
    runner.run(graph, {a: np.ones((3, 4), np.float32)}, y)
    runner.sched.observe(None)
    assert seen == [
        ("ADD", True, 0.0),
        ("ADD", False, 2.0),
        ("UNARY", True, 0.0),
        ("UNARY", False, pytest.approx(np.exp(2.0))),
    ]
    seen.clear()
    runner.run(graph, {a: np.ones((3, 4), np.float32)}, y)
    assert not seen  # observe(None) stops


def test_an_observer_that_raises_stops_the_compute_and_its_exception_comes_back():
    ctx = gg.Context()
    a = ctx.tensor("f32", (3, 4), "a", input=True)
    y = ctx.exp(ctx.add(a, a))
    graph = gg.Graph(ctx).build_forward_expand(y)
    runner = gg.Runner("cpu")

    def fail(t: gg.Tensor, ask: bool) -> bool:
        raise KeyError("from the observer")

    runner.sched.observe(fail)
    with pytest.raises(KeyError, match="from the observer"):
        runner.run(graph, {a: np.ones((3, 4), np.float32)}, y)
    runner.sched.observe(None)
    assert runner.run(graph, {a: np.ones((3, 4), np.float32)}, y)[0, 0] == pytest.approx(np.exp(2.0))
    with pytest.raises(TypeError, match="callable"):
        runner.sched.observe(3)


def _set_rows_into_a_computed_node() -> tuple[gg.Graph, gg.Tensor, dict]:
    """set_rows writes into the memory of cont(x): after compute, that node's memory no longer holds the
    value it computed (found by the fuzzer, when nodes were read after compute)."""
    ctx = gg.Context()
    x = ctx.tensor("f32", (4, 3), "x", input=True)
    rows = ctx.tensor("f32", (2, 3), "rows", input=True)
    idx = ctx.tensor("i32", (2,), "idx", input=True)
    out = ctx.set_rows(ctx.cont(x), rows, idx)
    rng = np.random.default_rng(0)
    values = {
        x: rng.standard_normal((4, 3)).astype(np.float32),
        rows: rng.standard_normal((2, 3)).astype(np.float32),
        idx: np.array([3, 0], np.int32),
    }
    return gg.Graph(ctx).build_forward_expand(out), out, values


def test_each_node_is_checked_with_what_it_received_even_if_its_memory_is_written_later():
    graph, out, values = _set_rows_into_a_computed_node()
    checker = NodeChecker()
    runner = gg.Runner("cpu")
    with observing(runner, checker):
        runner.run(graph, values, out)
    checked = {v.kind: v for v in checker.verdicts}
    assert set(checked) == {"CONT", "SET_ROWS"}
    assert all(v.comparison is not None and v.comparison.ok for v in checked.values()), checker.verdicts


def test_a_wrong_node_is_reported_where_it_is(monkeypatch):
    graph, out, values = _set_rows_into_a_computed_node()
    spec = opdb.READERS["CONT"]
    monkeypatch.setattr(spec, "from_node", lambda n: n.src[0] + 1)  # an oracle that disagrees with ggml
    checker = NodeChecker()
    runner = gg.Runner("cpu")
    with observing(runner, checker):
        runner.run(graph, values, out)
    bad = [v for v in checker.verdicts if not v.ok]
    assert [v.kind for v in bad] == ["CONT"] and "NMSE" in bad[0].comparison.message


def test_a_node_with_no_oracle_is_computed_before_the_node_that_reads_it_is_checked(monkeypatch):
    """ggml computes a node nobody asked for together with the next one asked for: had the checker not
    asked for a node without an oracle, the next node's sources would be read before they were computed,
    and a correct node reported wrong (or a wrong one passed)."""
    ctx = gg.Context()
    a = ctx.tensor("f32", (3, 4), "a", input=True)
    y = ctx.add(ctx.scale(a, 3.0), a)
    graph = gg.Graph(ctx).build_forward_expand(y)
    monkeypatch.delitem(opdb.READERS, "SCALE")  # scale as an op kind pyggml has no oracle for
    checker = NodeChecker()
    runner = gg.Runner("cpu")
    with observing(runner, checker):
        out = runner.run(graph, {a: np.full((3, 4), 2.0, np.float32)}, y)
    assert out[0, 0] == 8.0
    by_kind = {v.kind: v for v in checker.verdicts}
    assert by_kind["SCALE"].comparison is None  # listed, not judged
    assert by_kind["ADD"].comparison is not None and by_kind["ADD"].ok, by_kind["ADD"]


@pytest.mark.parametrize("backend", ["meta:cpu,cpu", "meta:vulkan0,vulkan1"])
def test_an_observer_on_a_meta_runner_does_not_change_the_result(backend):
    """ggml's scheduler computed a meta device's split in pieces under an observer that asks for nodes,
    and the meta backend computed those pieces wrongly (the delta-net layer off by 3.5): patch 0025, and
    since 0032 the meta backend itself computes node by node for the observer."""
    from pyggml.models.delta_net import DeltaNet, DeltaNetConfig
    from pyggml.testing.check import available_backends

    if backend.startswith("meta:vulkan") and "vulkan1" not in available_backends():
        pytest.skip("needs two Vulkan devices")
    cfg = DeltaNetConfig(n_embd=32, n_layer=2, head_dim=16, n_k_heads=2, n_v_heads=2)
    x = np.random.default_rng(0).standard_normal((1, 5, 32)).astype(np.float32)
    expected = DeltaNet(gg.Runner("cpu"), cfg, K=2, mem_size=2).step(x, [0], 0)
    runner = gg.Runner(backend)
    net = DeltaNet(runner, cfg, K=2, mem_size=2)
    seen = []
    runner.sched.observe(lambda t, ask: seen.append(ask) or True)
    got = net.step(x, [0], 0)
    runner.sched.observe(None)
    assert seen.count(False) > 0 and seen.count(True) == seen.count(False)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def test_a_split_delta_net_layer_is_checked_node_by_node(meta_backend_name):
    """pyggml's delta-net layers split by heads over a meta device (its split policy): every node is read back
    as the devices compute it (ggml patch 0032) and passes its oracle: the products split by output and by
    input channels (partial sums), and the gated_delta_net result, whose states each device holds as blocks
    of its heads (read wrong, NMSE 1.7, before the patch assembled them)."""
    from pyggml.models.delta_net import DeltaNet, DeltaNetConfig

    cfg = DeltaNetConfig(n_embd=32, n_layer=2, head_dim=16, n_k_heads=2, n_v_heads=2)
    x = np.random.default_rng(0).standard_normal((1, 5, 32)).astype(np.float32)
    runner = gg.Runner(meta_backend_name)
    net = DeltaNet(runner, cfg, K=2, mem_size=2)
    checker = NodeChecker()
    with observing(runner, checker):
        net.step(x, [0], 0)
    kinds = {v.kind for v in checker.verdicts}
    assert {"GATED_DELTA_NET", "MUL_MAT", "SSM_CONV", "ADD"} <= kinds
    bad = [(v.kind, v.name, v.error, v.comparison and v.comparison.message) for v in checker.verdicts if not v.ok]
    assert not bad and all(v.comparison is not None and not v.unread for v in checker.verdicts), bad


def test_a_meta_runners_nodes_are_checked():
    """On pyggml's own meta runner the nodes are computed where the checker can read them, and are checked."""
    ctx = gg.Context()
    a = ctx.tensor("f32", (4, 8), "a", input=True)
    y = ctx.exp(ctx.add(a, a))
    graph = gg.Graph(ctx).build_forward_expand(y)
    runner = gg.Runner("meta:cpu,cpu")
    checker = NodeChecker()
    with observing(runner, checker):
        out = runner.run(graph, {a: np.ones((4, 8), np.float32)}, y)
    assert out[0, 0] == pytest.approx(np.exp(2.0))
    assert checker.verdicts and all(v.comparison is not None and v.ok for v in checker.verdicts)


def test_llama_cpps_tensor_split_under_the_checker_does_not_kill_the_interpreter(tmp_path):
    """The case that aborted: llama.cpp's split_mode tensor over two devices, observed node by node. Its
    tensors live in a meta device's buffer, whose get_tensor asserted (ggml_backend_tensor_get's extent
    check, a view of the split Kcur and partial sums alike); they were then left unread, and since ggml
    patch 0032 every node is read and checked."""
    import subprocess
    import sys

    from pyggml.testing.check import available_backends

    pytest.importorskip("pyggml.llama", reason="pyggml built without libllama")
    if not {"vulkan0", "vulkan1"} <= set(available_backends()):
        pytest.skip("needs two Vulkan devices (GGML_VK_VISIBLE_DEVICES=0,0)")
    code = (
        "from pyggml import llama\n"
        "from pyggml.models.make_model import make_model\n"
        "from pyggml.testing.engine.nodes import NodeChecker\n"
        f"make_model('llama', {str(tmp_path / 'm.gguf')!r})\n"
        f"m = llama.Model.load({str(tmp_path / 'm.gguf')!r}, devices=['vulkan0', 'vulkan1'], split_mode='tensor')\n"
        "chk = NodeChecker()\n"
        "llama.Context(m, n_ctx=32, n_batch=4, observe=chk).decode([1, 2, 3, 4])\n"
        "assert chk.verdicts and not any(v.unread or v.error for v in chk.verdicts)\n"
        "assert all(v.comparison is not None and v.ok for v in chk.verdicts if v.kind != 'GET_ROWS')\n"
        "print('OK')\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0 and "OK" in res.stdout, res.stderr[-2000:]


def test_a_node_and_a_case_of_one_op_on_one_backend_get_one_bound(monkeypatch):
    """One rule for bounds (verdict.resolve_bound): a bound stated for a backend holds for the op's cases and for
    the nodes of a model computed there. Node checks took the loosest backend-free bound whatever the backend."""
    import dataclasses

    from pyggml.testing.engine import verdict
    from pyggml.testing.engine.cases import OpCase
    from pyggml.testing.engine.nodes import check_case_nodes
    from pyggml.testing.engine.opdb import Bound

    opdb.load()
    spec = opdb.SPECS["add"]
    on_cpu = Bound(3e-3, backend="cpu", why="a rule of this test's own")
    widened = dataclasses.replace(spec, bounds=[*spec.bounds, on_cpu])
    monkeypatch.setitem(opdb.SPECS, "add", widened)
    monkeypatch.setitem(opdb.READERS, "ADD", widened)
    sample = next(
        s for s in spec.samples if {v[0] if isinstance(v, tuple) else v.type for v in s.inputs.values()} == {"f32"}
    )
    case = OpCase(widened, sample)
    with gg.Runner("cpu") as runner:
        node = [v for v in check_case_nodes(case, runner) if v.kind == "ADD"][0]
    assert verdict.bounds(case, "cpu")[0] == node.nmse_bound == 3e-3
    assert verdict.bounds(case, "vulkan0")[0] == case.nmse_bound != 3e-3  # elsewhere the op's own


def test_a_node_and_a_case_of_one_op_on_one_backend_get_one_known_verdict(monkeypatch):
    """One judge (verdict.policy, verdict.rule): a known disagreement stated for a backend makes the op's case and
    the node of the same op computed there `known`, naming why, and the model's record of that kind too."""
    import dataclasses

    from pyggml.testing.engine import verdict
    from pyggml.testing.engine.cases import OpCase
    from pyggml.testing.engine.nodes import check_case_nodes
    from pyggml.testing.engine.opdb import Bound, Known

    opdb.load()
    spec = opdb.SPECS["mul_mat"]
    tight = Bound(1e-30, 1e-30, backend="cpu", why="tighter than any product: a rule of this test's own")
    why = "a disagreement of this test's own"
    stated = dataclasses.replace(spec, bounds=[*spec.bounds, tight], known=[Known("cpu", why)])
    monkeypatch.setitem(opdb.SPECS, "mul_mat", stated)
    monkeypatch.setitem(opdb.READERS, "MUL_MAT", stated)
    sample = next(
        s for s in spec.samples if {v[0] if isinstance(v, tuple) else v.type for v in s.inputs.values()} == {"f32"}
    )
    case = OpCase(stated, sample)
    with gg.Runner("cpu") as runner:
        record, _ = verdict.run_case(case, runner, "cpu")
        node = [v for v in check_case_nodes(case, runner) if v.kind == "MUL_MAT"][0]
    assert record.status == verdict.Status.KNOWN and why in record.message
    assert node.comparison is not None and not node.comparison.ok and node.known == why
    assert verdict.of_node(node) == verdict.Status.KNOWN
    kind = verdict.nodes("m.gguf/MUL_MAT", "cpu", [node])
    assert kind.status == verdict.Status.KNOWN and why in kind.message
    assert verdict.nodes("m.gguf/MUL_MAT", "cpu", [dataclasses.replace(node, known="")]).status == verdict.Status.FAIL


def test_no_module_but_the_verdict_writes_a_status():
    """Every status of the project is written in verdict.py: elsewhere a Status member is only compared with, and
    no record is made with a status= of its own."""
    import ast
    from pathlib import Path

    root = Path(gg.__file__).resolve().parent
    writers = []
    for path in sorted(root.rglob("*.py")):
        if path.name == "verdict.py":
            continue
        tree = ast.parse(path.read_text())
        compared = {id(n) for c in ast.walk(tree) if isinstance(c, ast.Compare) for n in ast.walk(c)}
        for n in ast.walk(tree):
            member = isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "Status"
            if member and n.attr.isupper() and id(n) not in compared:
                writers.append(f"{path.relative_to(root)}:{n.lineno}")
            if isinstance(n, ast.keyword) and n.arg == "status" and isinstance(n.value, ast.Attribute):
                writers.append(f"{path.relative_to(root)}:{n.value.lineno}")
    assert writers == []


@pytest.mark.parametrize("cache_type", ["f16", "q8_0"])
def test_attention_over_a_cache_is_judged_on_the_cells_its_mask_lets_it_see(cache_type):
    """A generation step's flash attention reads the whole KV cache (256 cells and more), of which the conversation
    filled a few: the mask hides the rest (-inf) and the kernels skip those cells. Cells nothing wrote may hold
    anything; NaN there made every sum of the oracle NaN, and the node failed where ggml was right. The oracle now
    reads k and v only up to the last cell the mask lets some query see."""
    d, heads, kv_heads, cells, filled, n_q = 32, 4, 2, 64, 10, 2
    ctx = gg.Context()
    q = ctx.tensor("f32", (heads, n_q, d), "q", input=True)
    cache_k = ctx.tensor(cache_type, (cells, d * kv_heads), "cache_k", input=True)
    cache_v = ctx.tensor(cache_type, (cells, d * kv_heads), "cache_v", input=True)
    mask = ctx.tensor("f16", (n_q, cells), "mask", input=True)
    row = gg.types.row_size(cache_type, d)
    k = ctx.view_3d(cache_k, d, cells, kv_heads, cache_k.nb[1], row)  # [D, n_kv, n_head_kv], as llama.cpp views it
    v = ctx.view_3d(cache_v, d, cells, kv_heads, cache_v.nb[1], row)
    out = ctx.flash_attn_ext(q, k, v, mask, scale=d**-0.5)
    rng = np.random.default_rng(3)
    written = rng.uniform(-1, 1, (cells, d * kv_heads)).astype(np.float32)
    written[filled:] = np.nan  # cells nothing wrote
    hidden = np.zeros((n_q, cells), np.float16)
    hidden[:, filled:] = -np.inf
    hidden[0, filled - 1] = -np.inf  # the last cell seen is seen by one query row only
    values = {
        q: rng.uniform(-1, 1, (heads, n_q, d)).astype(np.float32),
        cache_k: written,
        cache_v: np.where(np.isnan(written), np.nan, rng.uniform(-1, 1, written.shape)).astype(np.float32),
        mask: hidden,
    }
    checker = NodeChecker()
    runner = gg.Runner("cpu")
    with observing(runner, checker):
        got = runner.run(gg.Graph(ctx).build_forward_expand(out), values, out)
    assert np.isfinite(got).all()
    (attention,) = [v for v in checker.verdicts if v.kind == "FLASH_ATTN_EXT"]
    assert attention.comparison is not None and attention.comparison.ok, attention


def test_leaving_out_the_hidden_kv_columns_changes_no_value_of_the_attention_oracle():
    """The flash attention reader leaves out the kv columns after the last one its mask lets a query see
    (`opdb.attention._columns_seen`): over random shapes, masks (each row hiding a tail of its own, some every
    column), ALiBi slopes, softcaps and sinks, the oracle gives the same values with them and without."""
    from pyggml.testing.engine import oracles
    from pyggml.testing.engine.opdb.attention import _columns_seen

    rng = np.random.default_rng(11)
    for _ in range(200):
        n3, hkv, group = int(rng.integers(1, 3)), int(rng.integers(1, 3)), int(rng.integers(1, 3))
        heads, n_q, n_kv, d = hkv * group, int(rng.integers(1, 5)), int(rng.integers(2, 40)), int(rng.integers(1, 9))
        q = rng.standard_normal((n3, heads, n_q, d)).astype(np.float32)
        k = rng.standard_normal((n3, hkv, n_kv, d)).astype(np.float32)
        v = rng.standard_normal((n3, hkv, n_kv, d)).astype(np.float32)
        mask = rng.standard_normal((1, 1, n_q + int(rng.integers(0, 3)), n_kv)).astype(np.float16)
        for row in range(mask.shape[2]):
            mask[0, 0, row, int(rng.integers(0, n_kv + 1)) :] = -np.inf
        scalars = (float(rng.uniform(0.1, 1)), float(rng.choice([0.0, 8.0])), float(rng.choice([0.0, 5.0])))
        sinks = rng.standard_normal(heads).astype(np.float32) if rng.random() < 0.3 else None
        used = _columns_seen(q, mask, n_kv)
        assert used == n_kv or np.all(mask[..., :n_q, used:] == -np.inf)
        whole = oracles.flash_attn_ext(q, k, v, mask, *scalars, sinks)
        seen = oracles.flash_attn_ext(q, k[..., :used, :], v[..., :used, :], mask[..., :used], *scalars, sinks)
        np.testing.assert_allclose(seen, whole, rtol=1e-6, atol=1e-7)  # float64 sums, perhaps in another order
