"""Correct or raise at the Runner/Tensor surface (issue 19): each of these computed a wrong answer
silently before; now each raises naming what was wrong, or gives the right answer."""

from __future__ import annotations

import numpy as np
import pytest

import pyggml as gg


def _add_graph():
    ctx = gg.Context()
    a = ctx.tensor("f32", (4,), "a", input=True)
    b = ctx.tensor("f32", (4,), "b", input=True)
    y = ctx.add(a, b)
    return ctx, a, b, y, gg.Graph(ctx).build_forward_expand(y)


# --- 1. an input left out --------------------------------------------------------------------------
def test_an_input_left_out_of_a_later_run_raises_naming_it():
    _, a, b, y, g = _add_graph()
    r = gg.Runner("cpu", n_threads=1)
    A, B = np.ones(4, np.float32), np.full(4, 7, np.float32)
    np.testing.assert_array_equal(r.run(g, {a: A, b: B}, y), A + B)
    with pytest.raises(gg.GraphError, match=r"input\(s\) b were given no value"):
        r.run(g, {a: A}, [y])  # gave the old b's A + B before
    with pytest.raises(gg.GraphError, match=r"\bb\b.*\ba\b|\ba\b.*\bb\b"):
        r.run(g, {}, [y])  # gave memory the allocator had reused (15 for A=1, B=7)
    np.testing.assert_array_equal(r.run(g, {a: A, b: B}, y), A + B)  # and the runner still works


def test_allocate_then_compute_needs_every_input_set_once():
    _, a, b, y, g = _add_graph()
    r = gg.Runner("cpu", n_threads=1)
    r.allocate(g, [y])
    a.set(np.ones(4))
    with pytest.raises(gg.GraphError, match="b were given no value"):
        r.compute(g)
    b.set(np.full(4, 2.0))
    r.compute(g)
    np.testing.assert_array_equal(y.numpy(), 3)
    a.set(np.full(4, 5.0))  # set once since the allocation is enough: b keeps its value
    r.compute(g)
    np.testing.assert_array_equal(y.numpy(), 7)


def test_a_gallocr_graph_on_a_backend_needs_its_inputs_too():
    _, a, b, y, g = _add_graph()
    cpu = gg.cpu_backend(1)
    galloc = gg.Gallocr(cpu.buffer_type)
    galloc.alloc_graph(g)
    a.set(np.ones(4))
    with pytest.raises(gg.GraphError, match="b were given no value"):
        cpu.compute(g)
    b.set(np.ones(4))
    cpu.compute(g)
    np.testing.assert_array_equal(y.numpy(), 2)


def test_a_copy_destination_needs_no_value():
    ctx = gg.Context()
    a = ctx.tensor("f32", (4,), "a", input=True)
    dst = ctx.tensor("f32", (4,), "dst")
    y = ctx.cpy(ctx.scale(a, 3.0), dst)
    g = gg.Graph(ctx).build_forward_expand(y)
    np.testing.assert_array_equal(gg.Runner("cpu", n_threads=1).run(g, {a: np.ones(4)}, y), 3)


# --- 2. a computed node given as an input ------------------------------------------------------------
def test_a_computed_node_given_as_an_input_raises():
    ctx = gg.Context()
    a = ctx.tensor("f32", (4,), "a", input=True)
    h = ctx.scale(a, 2.0).set_name("h")
    y = ctx.scale(h, 2.0)
    g = gg.Graph(ctx).build_forward_expand(y)
    r = gg.Runner("cpu", n_threads=1)
    with pytest.raises(ValueError, match="h is not an input: it is computed by the graph"):
        r.run(g, {a: np.ones(4), h: np.full(4, 5.0)}, [y, h])  # gave y = 20, h = 10
    v = ctx.view_1d(a, 2, 0).set_name("v")
    with pytest.raises(ValueError, match="v is not an input: it is a view"):
        r.run(g, {a: np.ones(4), v: np.ones(2)}, [y])
    yv, hv = r.run(g, {a: np.ones(4)}, [y, h])
    np.testing.assert_array_equal(yv, 4)
    np.testing.assert_array_equal(hv, 2)


def test_outputs_not_in_the_graph_and_single_outputs():
    _, a, b, y, g = _add_graph()
    other = gg.Context().tensor("f32", (4,), "other")
    r = gg.Runner("cpu", n_threads=1)
    with pytest.raises(
        ValueError, match="output other is not part of the graph: add it with graph.build_forward_expand"
    ):
        r.run(g, {a: np.ones(4), b: np.ones(4)}, [y, other])
    assert isinstance(r.run(g, {a: np.ones(4), b: np.ones(4)}, y), np.ndarray)
    with pytest.raises(TypeError, match="outputs must be a Tensor or a list"):
        r.run(g, {a: np.ones(4), b: np.ones(4)}, "y")
    r.allocate(g, y)  # one output tensor, as run takes it
    a.set(np.ones(4))
    b.set(np.ones(4))
    r.compute(g)
    np.testing.assert_array_equal(y.numpy(), 2)


# --- 3. a view that outlives its memory's lending --------------------------------------------------------
def test_a_view_of_lent_memory_is_refused():
    _, a, b, y, g = _add_graph()
    r = gg.Runner("cpu", n_threads=1)
    r.run(g, {a: np.ones(4), b: np.full(4, 7.0)}, [y])
    with pytest.raises(ValueError, match="lent by a graph allocator.*numpy\\(\\)"):
        y.view()  # after the runner ran another graph, it printed 1.4e-43, 0.0, ...
    with pytest.raises(ValueError, match="lent by a graph allocator"):
        a.view()
    np.testing.assert_array_equal(y.numpy(), 8)  # the copy is fine


def test_a_view_of_memory_of_its_own_still_works():
    ctx = gg.Context()
    w = ctx.tensor("f32", (4,), "w")
    cpu = gg.cpu_backend(1)
    cpu.alloc_tensors(ctx)
    w.set(np.arange(4))
    v = w.view()
    v[0] = 9
    np.testing.assert_array_equal(w.numpy(), [9, 1, 2, 3])


# --- 4. values that do not convert exactly --------------------------------------------------------------
def _rows_graph():
    ctx = gg.Context()
    w = ctx.tensor("f32", (5, 3), "w", input=True)
    i = ctx.tensor("i32", (3,), "i", input=True)
    y = ctx.get_rows(w, i)
    return w, i, y, gg.Graph(ctx).build_forward_expand(y)


def test_fractional_indices_raise_unless_cast():
    w, i, y, g = _rows_graph()
    W = np.arange(15, dtype=np.float32).reshape(5, 3)
    r = gg.Runner("cpu", n_threads=1)
    with pytest.raises(ValueError, match=r"i \(I32\): 0.7 is not a whole number.*cast=True"):
        r.run(g, {w: W, i: [0.7, 1.2, 3.9]}, y)  # selected rows 0, 1, 3 before
    np.testing.assert_array_equal(r.run(g, {w: W, i: [0.0, 1.0, 3.0]}, y), W[[0, 1, 3]])  # whole floats are fine
    np.testing.assert_array_equal(r.run(g, {w: W, i: np.array([0.7, 1.2, 3.9]).astype(np.int32)}, y), W[[0, 1, 3]])


@pytest.mark.parametrize(
    "values,match",
    [
        ([1.0, np.nan], "NaN or infinite"),
        ([1.0, np.inf], "NaN or infinite"),
        (np.array([1, 2**40]), "do not fit in I32"),
        ([-(2.0**31) - 1, 0.0], "do not fit in I32"),
    ],
)
def test_integer_tensors_refuse_values_they_cannot_hold(values, match):
    t = gg.Context(no_alloc=False, mem_size=1 << 16).tensor("i32", (2,))
    with pytest.raises(ValueError, match=match):
        t.set(values)
    with pytest.raises(ValueError, match=match):
        t.set(values, cast=True)  # a cast rounds fractions, it does not invent values


def test_cast_rounds_toward_zero():
    t = gg.Context(no_alloc=False, mem_size=1 << 16).tensor("i32", (3,))
    np.testing.assert_array_equal(t.set([0.7, -1.5, 3.9], cast=True).numpy(), [0, -1, 3])


@pytest.mark.parametrize("type_,big", [("f16", 70000.0), ("bf16", 1e39), ("f32", 1e39), ("q8_0", 1e39)])
def test_float_overflow_raises_unless_cast(type_, big):
    t = gg.Context(no_alloc=False, mem_size=1 << 16).tensor(type_, (32,))
    vals = np.zeros(32)
    vals[3] = big
    with pytest.raises(ValueError, match="beyond the type's largest value"):
        t.set(vals)
    vals[3] = 65504.0 if type_ == "f16" else 1e38
    t.set(vals)  # the largest value itself goes in
    if type_ == "f16":
        vals[3] = big
        assert np.isinf(t.set(vals, cast=True).numpy()[3])


def test_floats_round_to_the_types_precision_without_raising():
    t = gg.Context(no_alloc=False, mem_size=1 << 16).tensor("f16", (2,))
    np.testing.assert_array_equal(t.set([0.1, 2049]).numpy(), np.array([0.1, 2049], np.float16))


# --- shapes as the user wrote them --------------------------------------------------------------------
def test_shapes_keep_their_leading_ones():
    ctx = gg.Context()
    assert ctx.tensor("f32", (1, 16)).shape == (1, 16)
    assert ctx.tensor("f32", (1, 1, 3)).shape == (1, 1, 3)
    assert ctx.tensor("f32", 5).shape == (5,)
    assert ctx.tensor("f32", ()).shape == ()
    assert ctx.new_tensor("f32", [16, 1]).shape == (1, 16)
    with pytest.raises(TypeError, match="shape must be an int or a sequence of ints"):
        ctx.tensor("f32", "5")


def test_results_follow_their_sources_rank():
    ctx = gg.Context()
    x = ctx.tensor("f32", (1, 8), "x", input=True)
    w = ctx.tensor("f32", (6, 8), "w", input=True)
    y = ctx.mul_mat(w, x)
    assert y.shape == (1, 6)  # the batch axis stays
    assert ctx.gelu(y).shape == (1, 6)
    assert ctx.add(y, ctx.tensor("f32", (6,))).shape == (1, 6)
    assert ctx.rms_norm(x, 1e-6).shape == (1, 8)
    assert ctx.transpose(x).shape == (8, 1)
    assert ctx.argmax(ctx.tensor("f32", (3, 5))).shape == (3,)  # argmax defines its own dims
    assert ctx.reshape_1d(x, 8).shape == (8,)
    g = gg.Graph(ctx).build_forward_expand(y)
    [out] = gg.Runner("cpu", n_threads=1).run(g, {x: np.ones((1, 8)), w: np.ones((6, 8))}, [y])
    assert out.shape == (1, 6)
    np.testing.assert_array_equal(out, 8)


def test_rank_of_a_deep_graph_needs_no_recursion():
    ctx = gg.Context(n_tensors=30000)
    x = ctx.tensor("f32", (1, 4), "x")
    y = x
    for _ in range(20000):
        y = ctx.add(y, x)
    assert y.shape == (1, 4)


# --- messages that say what to do ------------------------------------------------------------------------
def test_a_graph_too_small_says_the_size_it_needs():
    ctx = gg.Context(n_tensors=500)
    x = ctx.tensor("f32", (4,), "x")
    y = x
    for _ in range(100):
        y = ctx.add(y, ctx.tensor("f32", (4,)))
    with pytest.raises(ValueError, match=r"graph is full.*needs 101: create it as Graph\(ctx, size=101\)") as e:
        gg.Graph(ctx, 64).build_forward_expand(y)
    assert "GGML_HASHSET_FULL" in str(e.value)
    assert gg.Graph(ctx, 101).build_forward_expand(y).n_nodes == 100  # the size it named is enough


def test_memory_that_cannot_be_had_says_how_much_and_which_tensor():
    ctx = gg.Context()
    a = ctx.tensor("f32", (2**34,), "big", input=True)  # 64 GiB, and as much for each result
    o = ctx.exp(ctx.exp(a)).set_name("out")
    g = gg.Graph(ctx).build_forward_expand(o)
    try:
        gg.Runner("cpu", n_threads=1).run(g, {a: np.zeros(1, np.float32)}, o)  # fails before the values matter
    except gg.GGMLError as e:
        assert "GiB in all, the largest" in str(e) and "ne=(17179869184, 1, 1, 1)" in str(e)
        assert "CPU has" in str(e)
    except ValueError:
        pytest.skip("this machine had the memory (the input's values were then refused)")


def test_a_device_this_build_lacks_says_how_to_build_it():
    if "cuda" in gg.build_info()["backends"]:
        pytest.skip("built with CUDA")
    with pytest.raises(ValueError, match=r'no cuda backend: rebuild with CMAKE_ARGS="-DGGML_CUDA=ON"'):
        gg.device("cuda0")


def test_views_and_reshapes_have_the_dims_asked_for():
    ctx = gg.Context()
    x = ctx.tensor("f32", (1, 16), "x")
    assert ctx.reshape_2d(x, 16, 1).shape == (1, 16)
    assert ctx.reshape_3d(x, 4, 4, 1).shape == (1, 4, 4)
    assert ctx.reshape(x, ctx.tensor("f32", (1, 1, 16))).shape == (1, 1, 16)
    assert ctx.view_2d(x, 8, 1, 32, 0).shape == (1, 8)
    assert ctx.view_3d(x, 4, 2, 1, 16, 32, 0).shape == (1, 2, 4)
    assert ctx.cont_2d(x, 16, 1).shape == (1, 16)
    assert ctx.reshape_1d(x, 16).shape == (16,)


def test_a_tensor_assigned_to_a_backend_stays_there_across_allocations():
    # a node fed only by inputs goes to the CPU unless assigned; ggml forgets an assignment when its
    # scheduler resets, which every allocation does (two CPU backends would not tell: ggml moves a
    # node of the last backend to an earlier one sharing its buffer type)
    if "vulkan0" not in [d.name.lower() for d in gg.devices()]:
        pytest.skip("needs a second kind of device (vulkan0)")
    dev, cpu = gg.backend("vulkan0"), gg.cpu_backend(1)
    sched = gg.Scheduler([dev, cpu])
    ctx = gg.Context()
    a = ctx.tensor("f32", (4,), "a", input=True)
    y = ctx.exp(a).set_name("y")
    g = gg.Graph(ctx).build_forward_expand(y)
    sched.alloc_graph(g)
    assert gg.lib.ggml_backend_sched_get_tensor_backend(sched.ptr, y.ptr) == cpu.ptr
    sched.set_tensor_backend(y, dev)
    for _ in range(2):
        sched.alloc_graph(g)
        assert gg.lib.ggml_backend_sched_get_tensor_backend(sched.ptr, y.ptr) == dev.ptr
        a.set(np.zeros(4))
        sched.compute(g)
        np.testing.assert_array_equal(y.numpy(), 1)


def test_writing_part_of_an_input_through_a_view_does_not_count_as_writing_it():
    ctx = gg.Context()
    a = ctx.tensor("f32", (4,), "a", input=True)
    half, whole = ctx.view_1d(a, 2, 0), ctx.view_1d(a, 4, 0)
    y = ctx.scale(a, 2.0)
    g = gg.Graph(ctx).build_forward_expand(y, half, whole)
    r = gg.Runner("cpu", n_threads=1)
    r.allocate(g, [y])
    half.set(np.ones(2))
    with pytest.raises(gg.GraphError, match="input\\(s\\) a were given no value"):
        r.compute(g)  # computed on two stale values before
    whole.set(np.ones(4))
    r.compute(g)
    np.testing.assert_array_equal(y.numpy(), 2)
