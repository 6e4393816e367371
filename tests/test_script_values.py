"""What a script reads after a run is the value its graph computed, or an exception saying how to keep it; a
tensor in memory the runner cannot use is refused before ggml sees it; the script fuzzer holds whole random
programs against NumPy (pyggml.testing.fuzzers.script_fuzz)."""

import numpy as np
import pytest

import pyggml as gg
from pyggml.testing.fuzzers import script_fuzz


def _chain():
    """The issue's reproducer: y = 2a is read after a run whose output is v = (3 exp(y))^2."""
    ctx = gg.Context()
    a = ctx.tensor("f32", (4,), "a", input=True)
    y = ctx.scale(a, 2.0)
    y.name = "y"
    v = ctx.sqr(ctx.scale(ctx.exp(y), 3.0))
    return ctx, a, y, v, gg.Graph(ctx).build_forward_expand(v)


def test_a_node_whose_memory_a_later_node_took_is_refused_naming_it_and_how_to_keep_it():
    ctx, a, y, v, g = _chain()
    r = gg.Runner("cpu")
    out = r.run(g, {a: np.ones(4, np.float32)}, v)
    np.testing.assert_allclose(out, (3 * np.exp(2.0)) ** 2, rtol=1e-6)
    with pytest.raises(gg.StaleValue, match=r"'y'.*no longer holds the value its graph computed.*set_output"):
        y.numpy()
    with pytest.raises(gg.StaleValue, match="'a'.*no longer holds the value written to it"):
        a.numpy()  # the scale took the input's memory in place


def test_a_node_asked_for_as_an_output_or_flagged_keeps_its_value():
    ctx, a, y, v, g = _chain()
    r = gg.Runner("cpu")
    got_v, got_y = r.run(g, {a: np.ones(4, np.float32)}, [v, y])
    np.testing.assert_array_equal(y.numpy(), np.full(4, 2.0, np.float32))
    np.testing.assert_array_equal(got_y, np.full(4, 2.0, np.float32))
    # an output stays flagged (ggml_set_output): a rerun asking for v alone keeps y's memory too
    r.run(g, {a: np.full(4, 3.0, np.float32)}, v)
    np.testing.assert_array_equal(y.numpy(), np.full(4, 6.0, np.float32))
    ctx, a, y, v, g = _chain()
    y.set_output()  # flagged before the first run
    r.run(g, {a: np.full(4, 0.5, np.float32)}, v)
    np.testing.assert_array_equal(y.numpy(), np.ones(4, np.float32))


def test_allocate_then_compute_a_node_read_before_the_compute_is_refused_and_an_input_written_is_readable():
    ctx, a, y, v, g = _chain()
    r = gg.Runner("cpu")
    r.allocate(g, [v])
    with pytest.raises(gg.StaleValue, match="not computed since"):
        v.numpy()
    a.set(np.ones(4, np.float32))
    r.compute(g)
    np.testing.assert_allclose(v.numpy(), (3 * np.exp(2.0)) ** 2, rtol=1e-6)
    with pytest.raises(gg.StaleValue):
        a.numpy()
    a.set(np.full(4, 0.5, np.float32))  # written again: it holds what was written
    np.testing.assert_array_equal(a.numpy(), np.full(4, 0.5, np.float32))
    r.compute(g)
    np.testing.assert_allclose(v.numpy(), (3 * np.exp(1.0)) ** 2, rtol=1e-6)


def test_gallocr_and_backend_compute_refuse_the_same_way():
    ctx, a, y, v, g = _chain()
    be = gg.cpu_backend(1)
    ga = gg.Gallocr(be.buffer_type)
    ga.alloc_graph(g)
    a.set(np.ones(4, np.float32))
    be.compute(g)
    # ggml's allocator flags the graph's last node as an output
    np.testing.assert_allclose(v.numpy(), (3 * np.exp(2.0)) ** 2, rtol=1e-6)
    with pytest.raises(gg.StaleValue):
        y.numpy()


def test_graphs_sharing_a_context_a_node_of_the_first_after_the_second_ran():
    ctx, a, y, v, g = _chain()
    w = ctx.neg(y)
    g2 = gg.Graph(ctx).build_forward_expand(w)
    r = gg.Runner("cpu")
    r.run(g, {a: np.ones(4, np.float32)}, v)
    np.testing.assert_array_equal(r.run(g2, {a: np.ones(4, np.float32)}, w), np.full(4, -2.0, np.float32))
    with pytest.raises(ValueError, match="no memory"):
        v.numpy()  # the runner took g's memory back when it allocated g2


def test_weights_in_a_buffer_the_runner_cannot_use_are_refused_naming_them():
    """Weights on a meta runner's buffer read by a CPU runner aborted in ggml's scheduler (exit 134)."""
    wctx = gg.Context()
    w = wctx.tensor("f32", (3, 4), "w")
    meta = gg.Runner("meta:cpu,cpu")
    meta.backend.alloc_tensors(wctx)
    w.set(np.ones((3, 4), np.float32))
    ctx = gg.Context()
    x = ctx.tensor("f32", (2, 4), "x", input=True)
    y = ctx.mul_mat(w, x)
    g = gg.Graph(ctx).build_forward_expand(y)
    with pytest.raises(gg.GraphError, match=r"'w' is in a Meta\(CPU,CPU\) buffer.*\(CPU\)"):
        gg.Runner("cpu").run(g, {x: np.ones((2, 4), np.float32)}, y)
    # the meta runner that holds them computes it
    np.testing.assert_array_equal(meta.run(g, {x: np.ones((2, 4), np.float32)}, y), np.full((2, 3), 4.0))


def test_a_backend_computing_alone_refuses_memory_of_another_device():
    wctx = gg.Context()
    w = wctx.tensor("f32", (4,), "w")
    meta = gg.Runner("meta:cpu,cpu")
    meta.backend.alloc_tensors(wctx)
    ctx = gg.Context()
    y = ctx.scale(w, 2.0)
    g = gg.Graph(ctx).build_forward_expand(y)
    be = gg.cpu_backend(1)
    gg.Gallocr(be.buffer_type).alloc_graph(g)
    with pytest.raises(gg.GraphError, match="Meta"):
        be.compute(g)


def test_the_script_fuzzer_programs_hold_against_numpy_on_the_cpu_and_a_meta_split():
    """A slice of `python -m pyggml script-fuzz` (docs/fuzzing.md states the whole run): whole programs in child
    processes, every read value NumPy's or refused, no death."""
    records = script_fuzz.fuzz(0, 12, ["cpu", "meta:cpu,cpu"], batch=12)
    bad = [r for r in records if r["status"] != "pass"]
    assert not bad, bad[:3]
    assert sum(r["checked"] for r in records) > 200
    assert sum(sum(r["refused"].values()) for r in records) > 20  # stale nodes are met, and refused


def test_the_script_fuzzer_catches_a_wrong_value():
    """Its comparison is not blind: a value off by 1 % of the node's scale is reported."""
    tally = script_fuzz.Tally("cpu")

    class Node:
        name = "s0"

    want = np.linspace(-1, 1, 12).reshape(3, 4)
    tally.compare("t", Node(), want.astype(np.float32), want)
    assert not tally.wrong
    off = want.copy()
    off[1, 2] += 0.01
    tally.compare("t", Node(), off.astype(np.float32), want)
    assert tally.wrong and "off by" in tally.wrong[0]


def test_an_observer_reads_each_node_as_computed_and_a_stopped_compute_leaves_no_values():
    """Inside the compute a node is read before any later node can take its memory; after a compute an observer
    stopped, the nodes hold no computed value and are refused."""
    ctx, a, y, v, g = _chain()
    r = gg.Runner("cpu")
    seen = {}

    def watch(node, ask):
        if ask:
            return node.name == "y"
        seen["y"] = node.numpy()
        return True

    r.sched.observe(watch)
    r.run(g, {a: np.ones(4, np.float32)}, v)
    np.testing.assert_array_equal(seen["y"], np.full(4, 2.0, np.float32))
    r.sched.observe(lambda node, ask: ask or node.name != "y")  # stops the compute at y
    r.allocate(g, [v, y])
    a.set(np.ones(4, np.float32))
    r.compute(g)
    with pytest.raises(gg.StaleValue, match="stopped"):
        v.numpy()


@pytest.mark.device
def test_a_meta_device_of_vulkan_devices_takes_vulkans_rules():
    """Program 15 of the script fuzzer on meta:vulkan0,vulkan1 (a product of a view at a misaligned offset, its
    weights in another runner's buffer) ended the process in ggml-vulkan (`misalign_bytes == 0`): the meta device
    did not take its Vulkan devices' rules. Run in a child process: a regression dies there."""
    from pyggml.testing.engine import child

    if not {"vulkan0", "vulkan1"} <= {d.name.lower() for d in gg.devices()}:
        pytest.skip("needs two Vulkan devices (GGML_VK_VISIBLE_DEVICES=0,0 lists Mesa's lavapipe twice)")
    outcome = child.run("pyggml.testing.fuzzers.script_fuzz:run_batch", ([15], "meta:vulkan0,vulkan1"), timeout=900)
    assert outcome.status == "returned", outcome.stderr[-2000:]
    [record] = outcome.value
    assert record["status"] == "pass", record


def test_a_view_of_a_cpu_node_after_a_meta_split_computes():
    """Programs 116 and 160 of the script fuzzer on meta:cpu,cpu: a view of a node the CPU computed, expanded after
    a product with a split weight, joined the meta device's split and ggml's meta backend aborted on it (ggml
    patch 0041). Run in a child process: a regression dies there."""
    from pyggml.testing.engine import child

    outcome = child.run("pyggml.testing.fuzzers.script_fuzz:run_batch", ([116, 160], "meta:cpu,cpu"), timeout=300)
    assert outcome.status == "returned", outcome.stderr[-2000:]
    assert [r["status"] for r in outcome.value] == ["pass", "pass"], outcome.value
    assert all(r["checked"] > 10 for r in outcome.value)
