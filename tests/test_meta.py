"""The meta backend: devices, split policies, and the seed's graph split over two devices."""

import threading

import numpy as np
import pytest

import pyggml as gg
from pyggml import lib
from pyggml.meta import MetaDevice, Split
from pyggml.testing.engine.cases.conv_state import ConvStateCase


def test_meta_device_is_named_after_its_devices():
    assert MetaDevice(["cpu", "cpu"]).name == "Meta(CPU,CPU)"


def test_even_split_respects_the_granularity():
    assert Split.even(0, 18, 2, 3).sizes == (9, 9)
    assert Split.even(0, 15, 2, 3).sizes == (9, 6)
    with pytest.raises(ValueError, match="not a multiple of the granularity"):
        Split.even(0, 16, 2, 3)


@pytest.mark.parametrize(
    "split, message",
    [
        (Split(4, (4, 4)), "axis must be 0..3"),
        (Split(1, (3, 3)), "sizes add up to 6 along axis 1, the tensor has 8"),
        (Split(1, (8,)), "one size per device"),
        (Split(1, (10, -2)), "non-negative"),
        (Split(1), "needs per-device sizes"),
        (Split(1, ((2, 2), (2, 2)), (1, 0)), "repeats"),
    ],
)
def test_an_impossible_split_raises_before_ggml(split, message):
    meta = MetaDevice(["cpu", "cpu"], [("w", split)])
    backend = meta.init()
    ctx = gg.Context()
    ctx.tensor("f32", (8, 4), "w")
    with pytest.raises(ValueError, match=message):
        backend.alloc_tensors(ctx)


def test_a_policy_must_return_a_split():
    meta = MetaDevice(["cpu", "cpu"], lambda t: "axis 1")
    ctx = gg.Context()
    ctx.tensor("f32", (8, 4), "w")
    with pytest.raises(TypeError, match="not a Split or None"):
        meta.init().alloc_tensors(ctx)


@pytest.mark.parametrize("axis", [1, "mirrored"])
def test_split_weights_give_the_single_device_result(axis):
    devs = 2
    meta = MetaDevice(
        ["cpu"] * devs, [("w", lambda t: Split(axis) if axis == "mirrored" else Split.even(axis, t.ne[axis], devs))]
    )
    backend = meta.init()
    wctx = gg.Context()
    w = wctx.tensor("f32", (8, 6), "w")
    backend.alloc_tensors(wctx)
    W = np.random.default_rng(1).standard_normal((8, 6)).astype(np.float32)
    w.set(W)
    np.testing.assert_array_equal(w.numpy(), W)
    sched = gg.Scheduler([backend, gg.cpu_backend()])
    ctx = gg.Context()
    x = ctx.tensor("f32", (3, 6), "x", input=True)
    y = ctx.scale(ctx.mul_mat(w, x), 0.5).set_output()
    graph = gg.Graph(ctx).build_forward_expand(y)
    sched.alloc_graph(graph)
    X = np.random.default_rng(2).standard_normal((3, 6)).astype(np.float32)
    x.set(X)
    sched.compute(graph)
    np.testing.assert_allclose(y.numpy(), 0.5 * X @ W.T, rtol=1e-5, atol=1e-5)


def test_the_split_callback_is_safe_from_several_threads():
    meta = MetaDevice(["cpu", "cpu"], [("w*", lambda t: Split.even(1, t.ne[1], 2))])
    ctx = gg.Context()
    tensors = [ctx.tensor("f32", (2 * (i + 1), 4), f"w{i}") for i in range(8)]
    results, errors = {}, []

    def worker(k):
        try:
            for _ in range(200):
                t = tensors[k % len(tensors)]
                state = lib.pyggml_meta_split_state(t.ptr, meta._slot.handle)
                results[k] = (state.axis, state.ne[0], state.ne[1], state.n_segments)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    for k, (axis, ne0, ne1, n_seg) in results.items():
        rows = 2 * (k % len(tensors) + 1)
        assert (axis, ne0, ne1, n_seg) == (1, rows // 2, rows // 2, 1)


def test_errors_raised_inside_the_callback_surface_in_python():
    calls = []

    def policy(t):
        calls.append(t.name)
        raise RuntimeError(f"policy broke on {t.name}")

    meta = MetaDevice(["cpu", "cpu"], policy)
    ctx = gg.Context()
    t = ctx.tensor("f32", (4,), "w")
    state = lib.pyggml_meta_split_state(t.ptr, meta._slot.handle)
    assert state.axis == lib.GGML_BACKEND_SPLIT_AXIS_MIRRORED  # ggml gets a safe answer...
    with pytest.raises(RuntimeError, match="policy broke on w"):  # ...and Python the error
        meta.raise_pending()


@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("K", [1, 2, 4, 8])
@pytest.mark.parametrize("strategy", ["host_index", "device_index", "copies"])
def test_seed_graph_on_meta_matches_the_model(strategy, K, dtype, meta_backend_name):
    case = ConvStateCase(strategy, dtype, K)
    runner = gg.Runner(meta_backend_name)
    got = case.execute(runner)
    for g, want in zip(got, case.expected()):
        np.testing.assert_array_equal(g, want)
    assert got[-1].shape == case.expected()[-1].shape


def test_split_equivalence_fuzz():
    """Seeded and bounded; `python -m pyggml meta-fuzz --trials N` runs longer."""
    from pyggml.testing.fuzzers.meta_fuzz import fuzz

    records = fuzz(seed=0, trials=12, devices="cpu,cpu")
    failed = [r for r in records if r["status"] not in ("pass", "unsplittable")]
    assert failed == []
    passed = [r for r in records if r["status"] == "pass"]
    assert any("(1)" in r["graph"] for r in passed)  # some pass with a weight really split
    for r in records:
        if r["status"] == "unsplittable":  # named, with ggml's reason, not skipped silently
            assert r["graph"] and r["message"]


def test_check_runs_the_seed_cases_on_the_meta_backends(tmp_path):
    """The command of the meta issue's acceptance, as a user types it."""
    import json
    import subprocess
    import sys

    backends = ["--backend", "meta:cpu,cpu"]
    from pyggml.testing.check import available_backends

    if {"vulkan0", "vulkan1"} <= set(available_backends()):
        backends = ["--backend", "meta:vulkan0,vulkan1"] + backends
    report = tmp_path / "report.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pyggml",
            "check",
            "--vk-devices",
            "0,0",
            *backends,
            "--only",
            "conv_state",
            "--json",
            str(report),
            "-q",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    records = json.loads(report.read_text())
    assert len(records) == 24 * (len(backends) // 2)
    assert {r["status"] for r in records} == {"pass"}


def test_soft_max_along_a_split_dim_is_refused_not_wrong():
    """Fuzz trial 28 gave a silently wrong result before patch 0007."""
    from pyggml.testing.fuzzers.meta_fuzz import describe, make_trial, run_in_child

    trial = make_trial(28)
    assert describe(trial).startswith("mul_mat(1) -> soft_max")
    record = run_in_child(trial, "cpu,cpu")
    assert record["status"] == "unsplittable"
    assert "SOFT_MAX of a tensor split along dim 0" in record["message"]


# --- issue 9, item 5: the meta backend gives the single-device answer or raises ----------------


def _weight_on(runner, split, shape=(4, 4), dtype="f32"):
    runner.set_policy([("w", split)])
    wctx = gg.Context()
    w = wctx.tensor(dtype, shape, "w")
    runner.backend.alloc_tensors(wctx)
    return wctx, w


@pytest.mark.parametrize("split", [Split("mirrored"), Split(1, (2, 2))])
def test_a_rerun_with_new_inputs_gives_the_new_answer(split):
    """The scheduler's copy of x stayed in the graph: every rerun returned the first run's result."""
    runner = gg.Runner("meta:cpu,cpu")
    wctx, w = _weight_on(runner, split)
    W = np.arange(1, 17, dtype=np.float32).reshape(4, 4)
    w.set(W)
    ctx = gg.Context()
    x = ctx.tensor("f32", (1, 4), "x", input=True)
    y = ctx.mul_mat(w, x)
    graph = gg.Graph(ctx).build_forward_expand(y)
    for k in range(1, 4):
        X = np.full((1, 4), k, np.float32)
        np.testing.assert_array_equal(runner.run(graph, {x: X}, [y])[0], X @ W.T)


def _run_child(code: str):
    """Run a test body in a child: before its fix, ggml aborted and would have killed pytest."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stdout[-2000:] + proc.stderr[-3000:]


_QUANT_BLOCKS = """
import pytest, pyggml as gg
from pyggml.meta import Split
runner = gg.Runner("meta:cpu,cpu")
for sizes in [(16, 48), (32, 32)]:
    runner.set_policy([("w", Split(0, sizes))])
    wctx = gg.Context()
    w = wctx.tensor("q8_0", (2, 64), "w")
    if sizes == (16, 48):
        with pytest.raises(ValueError, match="multiples of the block size 32 of type q8_0"):
            runner.backend.alloc_tensors(wctx)
    else:
        runner.backend.alloc_tensors(wctx)  # whole blocks are fine
print("ok")
"""


def test_a_split_through_quantized_blocks_is_refused():
    """ggml aborted at allocation on a Q8_0 slice that is not whole blocks of 32 along axis 0."""
    _run_child(_QUANT_BLOCKS)


def test_a_split_along_axis_3_is_refused():
    runner = gg.Runner("meta:cpu,cpu")
    with pytest.raises(ValueError, match="along axis 3"):
        _weight_on(runner, Split(3, (1, 1)), shape=(2, 1, 1, 4))


_ALL_VIEWS = """
import numpy as np, pyggml as gg
runner = gg.Runner("meta:cpu,cpu")
ctx = gg.Context()
x = ctx.tensor("f32", (4, 4), "x", input=True)
X = np.arange(16, dtype=np.float32).reshape(4, 4)
for y, want in [(ctx.view_1d(x, 8, 32), X.ravel()[8:]), (ctx.reshape_1d(x, 16), X.ravel()),
                (ctx.cont(ctx.transpose(x)), X.T)]:
    graph = gg.Graph(ctx).build_forward_expand(y)
    np.testing.assert_array_equal(runner.run(graph, {x: X}, [y])[0], want)
print("ok")
"""


def test_a_graph_of_views_runs_on_the_meta_device():
    """Before patch 0008 ggml aborted: GGML_ASSERT(i_start == cgraph->n_nodes)."""
    _run_child(_ALL_VIEWS)


_UNSPLITTABLE = """
import numpy as np, pytest, pyggml as gg
from pyggml.meta import Split
runner = gg.Runner("meta:cpu,cpu")
runner.set_policy([("w", Split(0, (2, 2)))])
wctx = gg.Context()
w = wctx.tensor("f32", (4, 4), "w")
runner.backend.alloc_tensors(wctx)
ctx = gg.Context()
x = ctx.tensor("f32", (1, 4), "x", input=True)
y = ctx.mul_mat(w, x)
graph = gg.Graph(ctx).build_forward_expand(y)
with pytest.raises(gg.errors.Unsplittable, match="unsupported mul_mat split states"):
    runner.run(graph, {x: np.ones((1, 4), np.float32)}, [y])
with pytest.raises(gg.errors.Unsplittable, match="MUL_MAT"):  # MetaBackend.compute checks too
    runner.backend.compute(graph)
# the process lives on, and the same device splits what it can
runner.set_policy([("v", Split(1, (2, 2)))])
vctx = gg.Context()
v = vctx.tensor("f32", (4, 4), "v")
runner.backend.alloc_tensors(vctx)
V = np.arange(16, dtype=np.float32).reshape(4, 4)
v.set(V)
y2 = ctx.mul_mat(v, x)
graph2 = gg.Graph(ctx).build_forward_expand(y2)
np.testing.assert_array_equal(runner.run(graph2, {x: np.ones((1, 4), np.float32)}, [y2])[0], V.sum(1)[None])
print("ok")
"""


def test_an_unsplittable_graph_is_refused_in_process_with_ggml_reason():
    """mul_mat of a weight split along axis 0 with a mirrored x: ggml aborted at allocation (child: it
    killed the process before patch 0009); now Unsplittable, and the same process goes on."""
    _run_child(_UNSPLITTABLE)


def test_the_split_check_runs_once_per_graph():
    runner = gg.Runner("meta:cpu,cpu")
    ctx = gg.Context()
    x = ctx.tensor("f32", (4,), "x", input=True)
    y = ctx.scale(x, 2.0)
    graph = gg.Graph(ctx).build_forward_expand(y)
    runner.run(graph, {x: np.ones(4, np.float32)}, [y])
    assert len(graph.state.split_checked[runner.meta]) == 1
    runner.run(graph, {x: np.ones(4, np.float32)}, [y])
    assert len(graph.state.split_checked[runner.meta]) == 1


_PERMUTED_VIEW = """
import pytest, pyggml as gg
from pyggml.meta import Split
runner = gg.Runner("meta:cpu,cpu")
runner.set_policy([("w", Split(1, (1, 1)))])
wctx = gg.Context()
w = wctx.tensor("f32", (4, 2, 4), "w")
runner.backend.alloc_tensors(wctx)
ctx = gg.Context()
p = ctx.permute(w, 1, 2, 0, 3)
y = ctx.scale(ctx.cont(ctx.view_2d(p, 2, 2, p.ptr.nb[1], 0)), 2.0)
graph = gg.Graph(ctx).build_forward_expand(y)
with pytest.raises(gg.errors.Unsplittable, match="view of permuted tensor not implemented"):
    runner.run(graph, {}, [y])
print("ok")
"""


def test_a_view_of_a_permuted_split_is_refused_with_ggml_reason():
    """GGML_ABORT("view of permuted tensor not implemented") killed the process before patch 0009."""
    _run_child(_PERMUTED_VIEW)


def test_a_view_of_part_of_the_split_axis_is_refused():
    """ggml scales a view of a split weight per device: taking half of the split axis gave
    [0,1,2,3,8,9,10,11] instead of 0..7, silently."""
    runner = gg.Runner("meta:cpu,cpu")
    wctx, w = _weight_on(runner, Split(1, (2, 2)))
    W = np.arange(16, dtype=np.float32).reshape(4, 4)
    w.set(W)
    ctx = gg.Context()
    out = ctx.cont(ctx.view_1d(w, 8, 0))
    graph = gg.Graph(ctx).build_forward_expand(out)
    with pytest.raises(gg.Unsplittable, match="takes part of its split axis 1"):
        runner.run(graph, {}, [out])
    # a view that keeps the split axis whole (every row, columns 0..1) is the same on every device
    out2 = ctx.cont(ctx.view_2d(w, 2, 4, w.nb[1], 0))
    graph2 = gg.Graph(ctx).build_forward_expand(out2)
    [y] = runner.run(graph2, {}, [out2])
    np.testing.assert_array_equal(y, W[:, :2])


def test_a_view_of_context_memory_runs_on_the_meta_device():
    """A graph of only a view of a tensor in a no_alloc=False context aborted (GGML_ASSERT(buffer))
    before patch 0011: the meta backend asked whether a NULL buffer is host memory."""
    _run_child("""
import numpy as np, pyggml as gg
ctx = gg.Context(no_alloc=False, mem_size=1 << 16)
t0 = ctx.tensor("f32", (5, 2), "t0", input=True)
c2 = gg.Context()
out = c2.view_2d(t0, 2, 5, 8, 0)
graph = gg.Graph(c2).build_forward_expand(out)
X = np.arange(10, dtype=np.float32).reshape(5, 2)
[y] = gg.Runner("meta:cpu,cpu").run(graph, {t0: X}, [out])
np.testing.assert_array_equal(y, X)
print("ok")
""")


@pytest.mark.parametrize("runner", ["meta:cpu,cpu", "cpu"])
def test_a_view_of_a_view_of_an_input_does_not_abort_the_scheduler(runner):
    """cont(view_tensor(transpose(x))): the graph's leaf is a view of an unallocated input and ggml's
    scheduler aborted (GGML_ASSERT(src_backend_id != -1)), on a meta runner and on a runner pinned to one
    backend alike (found by checking every node of view_tensor's cases); it is refused before
    allocation, naming the input."""
    import subprocess
    import sys

    code = (
        "import numpy as np, pyggml as gg\n"
        "ctx = gg.Context(); a = ctx.tensor('f32', (5, 7), 'a', input=True)\n"
        "out = ctx.cont(ctx.view_tensor(ctx.transpose(a)))\n"
        "g = gg.Graph(ctx).build_forward_expand(out)\n"
        "try:\n"
        f"    gg.Runner({runner!r}).run(g, {{a: np.zeros((5, 7), np.float32)}}, [out])\n"
        "except gg.GraphError as e:\n"
        "    assert 'reads a view of input a but not a itself' in str(e), e\n"
        "    print('OK')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "OK" in out.stdout, out.stderr[-2000:]


# --- issue 19, item 5: views that do not line up with their source's split -------------------


def _views_of_product(runner_name, split, views, E=8, R=48, T=3, transpose=False):
    """y = mul_mat(w, x) (ne [R, T]; or ne [T, R, 3], its permutation made contiguous), then cont + scale of
    each view."""
    runner = gg.Runner(runner_name, n_threads=1)
    wctx, w = _weight_on(runner, split, shape=(R, E))
    w.set(np.random.default_rng(0).standard_normal((R, E)).astype(np.float32))
    ctx = gg.Context()
    shape = (3, T, E) if transpose else (T, E)
    x = ctx.tensor("f32", shape, "x", input=True)
    y = ctx.mul_mat(w, x)
    if transpose:  # ne [T, R, 3], split along axis 1
        y = ctx.cont(ctx.permute(y, 1, 0, 2, 3))
    outs = [ctx.scale(ctx.cont(v), 2.0) for v in views(ctx, y)]
    graph = gg.Graph(ctx)
    for o in outs:
        graph.build_forward_expand(o)
    X = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    return runner.run(graph, {x: X}, outs)


def _qkv(ctx, y):
    return [ctx.view_2d(y, 16, y.ne[1], y.nb[1], o * y.element_size) for o in (0, 16, 32)]


def test_fused_qkv_views_of_a_product_split_in_halves_are_refused():
    """Issue 19 item 5: w_qkv [E, 48] split in even halves along its output axis, q, k, v as views of the
    product at 0, 16, 32: each device read a slice of its own share (77-120 % off), silently."""
    with pytest.raises(gg.Unsplittable, match=r"takes part of its split axis 0 \(indices 0\.\.15 of 48\)"):
        _views_of_product("meta:cpu,cpu", Split.even(1, 48, 2), _qkv)
    want = _views_of_product("cpu", Split("mirrored"), _qkv)
    for got, w in zip(_views_of_product("meta:cpu,cpu", Split("mirrored"), _qkv), want):
        np.testing.assert_array_equal(got, w)


def _strided(phase, s=2):
    return lambda ctx, y: [ctx.view_3d(y, 1, (48 - phase + s - 1) // s, y.ne[1], s * 4, y.nb[1], phase * 4)]


def _grouped(field):
    # rows as 2 groups of [q8 k8 v8] (one group per device): a field of every group, strided across them
    return lambda ctx, y: [ctx.view_3d(y, 8, 2, y.ne[1], 24 * 4, y.nb[1], field * 8 * 4)]


@pytest.mark.parametrize(
    "views, split, transpose",
    [
        pytest.param(
            lambda ctx, y: [ctx.view_2d(y, 48, 2, y.nb[1], y.nb[1])],
            Split.even(1, 48, 2),
            False,
            id="whole-axis-rows-1-2",
        ),
        pytest.param(
            lambda ctx, y: [ctx.view_1d(y, 96, y.nb[1])], Split.even(1, 48, 2), False, id="view_1d-whole-rows"
        ),
        pytest.param(_strided(0), Split.even(1, 48, 2), False, id="every-other-from-0"),
        pytest.param(_strided(1), Split.even(1, 48, 2), False, id="every-other-from-1"),
        pytest.param(_grouped(0), Split.even(1, 48, 2), False, id="grouped-q"),
        pytest.param(_grouped(1), Split.even(1, 48, 2), False, id="grouped-k"),
        pytest.param(_grouped(2), Split.even(1, 48, 2), False, id="grouped-v"),
        pytest.param(_qkv, Split(1, (0, 48)), False, id="qkv-all-on-device-1"),
        pytest.param(
            lambda ctx, y: [ctx.view_3d(y, 2, 48, 2, y.nb[1], y.nb[2], 4)],
            Split.even(1, 48, 2),
            True,
            id="below-split-axis-offset",
        ),
        pytest.param(
            lambda ctx, y: [ctx.view_3d(y, 3, 48, 2, y.nb[1], y.nb[2], y.nb[2])],
            Split.even(1, 48, 2),
            True,
            id="above-split-axis-offset",
        ),
    ],
)
def test_views_that_line_up_with_the_split_give_the_single_device_answer(views, split, transpose):
    want = _views_of_product("cpu", Split("mirrored"), views, transpose=transpose)
    got = _views_of_product("meta:cpu,cpu", split, views, transpose=transpose)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    "views, T, transpose, message",
    [
        pytest.param(
            lambda ctx, y: [ctx.view_2d(y, 24, y.ne[1], y.nb[1], 0)],
            3,
            False,
            r"takes part of its split axis 0 \(indices 0\.\.23 of 48\)",
            id="device-0s-share",
        ),
        pytest.param(
            lambda ctx, y: [ctx.view_2d(y, 16, y.ne[1], y.nb[1], 16 * 4)],
            3,
            False,
            r"takes part of its split axis 0 \(indices 16\.\.31 of 48\)",
            id="straddling-the-shares",
        ),
        pytest.param(
            lambda ctx, y: [ctx.view_1d(y, 16, 24 * 4)],
            1,
            False,
            r"takes part of its split axis 0 \(indices 24\.\.39 of 48\)",
            id="view_1d-at-a-share-boundary",
        ),
        pytest.param(
            lambda ctx, y: [ctx.view_3d(y, 16, 3, 1, y.nb[1], y.nb[1] * 3, 32 * 4)],
            3,
            False,
            r"takes part of its split axis 0 \(indices 32\.\.47 of 48\)",
            id="view_3d-v",
        ),
        pytest.param(
            lambda ctx, y: [ctx.view_3d(y, 2, 48, 2, y.nb[1], y.nb[2], y.nb[2] + 4)],
            3,
            True,
            r"keeps the split axis 1 whole, but ggml maps its offset 580",
            id="offset-above-and-below",
        ),
    ],
)
def test_views_that_do_not_line_up_with_the_split_are_refused(views, T, transpose, message):
    """Each gave a wrong result on meta:cpu,cpu without an error (the offset case read between floats)."""
    with pytest.raises(gg.Unsplittable, match=message):
        _views_of_product("meta:cpu,cpu", Split.even(1, 48, 2), views, T=T, transpose=transpose)


def test_the_meta_fuzzer_draws_views_of_split_results():
    """Bounded; `python -m pyggml meta-fuzz --views --trials N` runs longer."""
    from pyggml.testing.fuzzers.meta_fuzz import fuzz

    records = fuzz(seed=0, trials=60, devices="cpu,cpu", views=True, in_process=True)
    assert [r for r in records if r["status"] not in ("pass", "unsplittable")] == []
    assert all("views(" in r["graph"] for r in records)
    assert sum(r["status"] == "pass" for r in records) >= 5
    assert any("gives each device the same view" in r.get("message", "") for r in records)


@pytest.mark.parametrize(
    "arg, message",
    [
        ("{bad", "not valid JSON"),
        ("[1, 2]", "a trial is a JSON object, got list"),
        ('{"seed": 1}', "the trial lacks K, M, P, N, steps"),
        ('{"seed": 1, "K": 4, "M": 4, "P": 4, "N": "4", "steps": [{"op": "mul_mat"}]}', "N must be an integer"),
    ],
)
def test_the_meta_fuzzer_says_what_is_wrong_with_a_bad_trial(arg, message):
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "pyggml", "meta-fuzz", "--one", arg], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert f"--one: {message}" in proc.stderr, proc.stderr


def test_a_new_policy_checks_the_graph_again():
    """The split check was kept per id(policy): a policy made after the last one was freed could get
    its id and pass unchecked. It is kept per set_policy call now."""
    runner = gg.Runner("meta:cpu,cpu")
    ctx = gg.Context()
    x = ctx.tensor("f32", (4,), "x", input=True)
    y = ctx.scale(x, 2.0)
    graph = gg.Graph(ctx).build_forward_expand(y)
    for _ in range(3):
        runner.set_policy(lambda t: None)  # each lambda may reuse the freed one's id
        runner.run(graph, {x: np.ones(4, np.float32)}, [y])
    assert len(graph.state.split_checked[runner.meta]) == 3


_PARTIAL_OUTPUT = """
import sys
import numpy as np, pyggml as gg
from pyggml.meta import Split
runner = gg.Runner(sys.argv[1])
# w1 split by its output channels, w2 by its input channels: each device computes a partial sum of z,
# and nothing after z reduces it
runner.set_policy([("w1", lambda t: Split.even(1, t.ne[1], 2)), ("w2", lambda t: Split.even(0, t.ne[0], 2))])
rng = np.random.default_rng(3)
W1, W2 = rng.standard_normal((8, 6), np.float32), rng.standard_normal((5, 8), np.float32)
X = rng.standard_normal((3, 6), np.float32)
wctx = gg.Context()
w1, w2 = wctx.tensor("f32", W1.shape, "w1"), wctx.tensor("f32", W2.shape, "w2")
runner.backend.alloc_tensors(wctx)
w1.set(W1)
w2.set(W2)
ctx = gg.Context()
x = ctx.tensor("f32", X.shape, "x", input=True)
h = ctx.relu(ctx.mul_mat(w1, x))
z = ctx.mul_mat(w2, h).set_name("z")
graph = gg.Graph(ctx).build_forward_expand(z)
want = np.maximum(X @ W1.T, 0) @ W2.T
for k in range(2):  # and again with new inputs
    got = runner.run(graph, {x: X}, z)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    X = X * 2
    want = np.maximum(X @ W1.T, 0) @ W2.T
print("ok")
"""


def test_a_partial_sum_output_reads_as_its_sum(meta_backend_name):
    """A graph output left as partial sums (nothing consumed it, so nothing reduced it): before patch 0029
    reading it aborted the process in ggml's meta buffer (GGML_ABORT in get_tensor)."""
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-c", _PARTIAL_OUTPUT, meta_backend_name], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stdout[-2000:] + proc.stderr[-3000:]


def test_a_reduced_partial_sum_reads_as_its_value(meta_backend_name):
    """A partial sum that a later node consumed, so the meta backend reduced it in place, read back: before
    patch 0031 it came back as the sum of every device's reduced copy (2x on two devices), silently."""
    runner = gg.Runner(meta_backend_name)
    runner.set_policy([("w1", lambda t: Split.even(1, t.ne[1], 2)), ("w2", lambda t: Split.even(0, t.ne[0], 2))])
    rng = np.random.default_rng(5)
    W1, W2 = rng.standard_normal((8, 6), np.float32), rng.standard_normal((5, 8), np.float32)
    wctx = gg.Context()
    w1, w2 = wctx.tensor("f32", W1.shape, "w1"), wctx.tensor("f32", W2.shape, "w2")
    runner.backend.alloc_tensors(wctx)
    w1.set(W1)
    w2.set(W2)
    ctx = gg.Context()
    x = ctx.tensor("f32", (3, 6), "x", input=True)
    z = ctx.mul_mat(w2, ctx.relu(ctx.mul_mat(w1, x)))
    y = ctx.exp(ctx.scale(z, 0.1))
    graph = gg.Graph(ctx).build_forward_expand(y)
    X = rng.standard_normal((3, 6), np.float32)
    want = np.maximum(X @ W1.T, 0) @ W2.T
    got_z, got_y = runner.run(graph, {x: X}, [z, y])
    np.testing.assert_allclose(got_z, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got_y, np.exp(0.1 * want), rtol=1e-5)


def test_an_output_keeps_its_shape_on_a_meta_device(meta_backend_name):
    """A product of a (1, 8) input had shape (8,) on a meta device but (1, 8) on the CPU: its rank was first
    derived while the run read it back, with its sources rewired to the scheduler's copies."""
    shapes = {}
    for be in ("cpu", meta_backend_name):
        runner = gg.Runner(be)
        if be != "cpu":
            runner.set_policy([("w", Split("mirrored"))])
        wctx = gg.Context()
        w = wctx.tensor("f32", (8, 8), "w")
        runner.backend.alloc_tensors(wctx)
        w.set(np.eye(8, dtype=np.float32))
        ctx = gg.Context()
        x = ctx.tensor("f32", (1, 8), "x", input=True)
        z = ctx.mul_mat(w, x)
        out = runner.run(gg.Graph(ctx).build_forward_expand(z), {x: np.arange(8, dtype=np.float32)[None]}, z)
        shapes[be] = (out.shape, z.shape)
        np.testing.assert_array_equal(out, np.arange(8, dtype=np.float32)[None])
    assert shapes[meta_backend_name] == shapes["cpu"] == ((1, 8), (1, 8))
